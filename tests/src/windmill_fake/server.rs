//! The server core: the HTTP/1 listener on its own runtime, the recording of every request, the
//! faults a test asks for, and the dispatch of a request to its API area.
//!
//! A request is recorded before any fault applies, so a test sees what was sent even when the
//! fake then drops the connection.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpSocket;
use tokio::sync::Notify;

use super::reply::{Call, Reply, absent, bearer, text};
use super::state::State;
use super::{Recorded, auth, jobs, members, scripts, settings, workspaces};

pub(super) struct Shared {
    pub state: Mutex<State>,
    /// Superuser DSN of the test's database: login reads `password` from it.
    pub dsn: String,
}

impl Shared {
    /// The tables, with what the worker did since the last look applied.
    pub fn state(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.settle();
        state
    }
}

/// A fault for matching calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status instead of handling the call (500 as Windmill's `Internal: …`, 502
    /// and 503 as a proxy in front of it would).
    Status(u16),
    /// Answer this status with a Windmill-style error text that quotes the last segment of the
    /// path, as Windmill's own answers quote what they were asked about (the token delete
    /// answer names the prefix, observed): shows whether such a text reaches a message.
    StatusQuotingPath(u16),
    /// Answer this status with a Windmill-style error text that quotes the JSON request body,
    /// re-encoded the way `encoder` writes JSON (a proxy or server in another language that
    /// echoes what it could not process): shows whether a secret in the request reaches a
    /// message in a form other than its own.
    StatusEchoingBody(u16, crate::json_forms::Encoder),
    /// Answer 200 with a body of this many bytes (with its length), changing nothing: a server
    /// or proxy that sends far more than any answer of the API.
    Oversized(usize),
    /// Read the whole request, change nothing, close the connection without an answer.
    DropBeforeHandling,
    /// Handle the call (its effect happens), then close the connection without the answer.
    DropAfterHandling,
}

#[derive(Debug)]
pub(super) struct FaultRule {
    pub method: String,
    pub path_prefix: String,
    pub fault: Fault,
    /// Matching calls to let through before the fault applies.
    pub skip: usize,
    pub remaining: usize,
}

/// Binds a port on 127.0.0.1 and serves `shared` on `runtime`, listening once `refuse_for` has
/// passed or `listen` is notified (until then the port is bound but not listening, so connects
/// are refused, not hung). Returns the address.
pub(super) fn serve(
    runtime: &tokio::runtime::Runtime,
    shared: Arc<Shared>,
    refuse_for: Duration,
    listen: Arc<Notify>,
) -> SocketAddr {
    let socket = runtime.block_on(async {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        socket
    });
    let addr: SocketAddr = socket.local_addr().expect("local addr");
    runtime.spawn(async move {
        tokio::select! {
            _ = tokio::time::sleep(refuse_for) => {}
            _ = listen.notified() => {}
        }
        let listener = socket.listen(1024).expect("listen");
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let kill = Arc::new(Notify::new());
                let killer = kill.clone();
                let service = service_fn(move |request| {
                    let (shared, kill) = (shared.clone(), killer.clone());
                    async move { Ok::<_, Infallible>(handle(request, shared, kill).await) }
                });
                let connection = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                // Dropping the connection closes the socket: the client gets no answer.
                tokio::select! {
                    _ = connection => {}
                    _ = kill.notified() => {}
                }
            });
        }
    });
    addr
}

async fn handle(request: Request<Incoming>, shared: Arc<Shared>, kill: Arc<Notify>) -> Reply {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let token = bearer(&request);
    let is_json = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return text(400, "Bad request: cannot read the body"),
    };
    let body_text = String::from_utf8_lossy(&body).into_owned();
    let fault = record_and_find_fault(&shared, &method, &path, &query, &body_text, token.as_deref());
    let call = Call {
        method: &method,
        path: &path,
        query: &query,
        token: token.as_deref(),
        is_json,
        body: &body_text,
    };
    match fault {
        None => route(&shared, &call).await,
        Some(Fault::Status(500)) => text(500, "Internal: injected fault"),
        Some(Fault::Status(status)) => text(
            status,
            StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("error"),
        ),
        Some(Fault::StatusQuotingPath(status)) => {
            let kind = match status {
                400 => "Bad request",
                401 => "Not authorized",
                404 => "Not found",
                _ => "Internal",
            };
            text(
                status,
                format!(
                    "{kind}: injected fault for {}",
                    path.rsplit('/').next().unwrap_or_default()
                ),
            )
        }
        Some(Fault::StatusEchoingBody(status, encoder)) => {
            let quoted = match serde_json::from_str::<Value>(&body_text) {
                Ok(value) => crate::json_forms::encode_value(encoder, &value),
                Err(_) => body_text.clone(),
            };
            text(status, format!("Bad request: cannot process {quoted}"))
        }
        Some(Fault::Oversized(len)) => text(200, "x".repeat(len)),
        Some(Fault::DropBeforeHandling) => {
            kill.notify_one();
            std::future::pending().await
        }
        Some(Fault::DropAfterHandling) => {
            let _ = route(&shared, &call).await;
            kill.notify_one();
            std::future::pending().await
        }
    }
}

/// Records the request, then takes the fault of the first rule that matches it, if any.
fn record_and_find_fault(
    shared: &Shared,
    method: &str,
    path: &str,
    query: &str,
    body: &str,
    token: Option<&str>,
) -> Option<Fault> {
    let mut state = shared.state();
    state.requests.push(Recorded {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        body: body.to_owned(),
        token: token.map(str::to_owned),
    });
    let rule = state
        .faults
        .iter_mut()
        .find(|r| r.remaining > 0 && r.method == method && path.starts_with(&r.path_prefix))?;
    if rule.skip > 0 {
        rule.skip -= 1;
        return None;
    }
    rule.remaining -= 1;
    Some(rule.fault)
}

async fn route(shared: &Shared, call: &Call<'_>) -> Reply {
    let segments: Vec<&str> = call.path.trim_start_matches('/').split('/').collect();
    let answered = match segments.as_slice() {
        // OpenAPI: the liveness probe, no auth.
        ["api", "version"] if call.method == "GET" => Ok(text(200, shared.state().version.clone())),
        ["api", rest @ ..] if matches!(rest.first(), Some(&"auth" | &"users")) => auth::route(shared, call, rest).await,
        ["api", rest @ ..] if rest.first() == Some(&"workspaces") => workspaces::route(shared, call, rest),
        ["api", rest @ ..] if rest.first() == Some(&"settings") => settings::route(shared, call, rest),
        ["api", "w", workspace, rest @ ..] => workspace_route(shared, call, workspace, rest),
        _ => Ok(absent()),
    };
    match answered {
        Ok(reply) | Err(reply) => reply,
    }
}

/// `/api/w/{workspace}/…`: the caller must be a member there (a superadmin is admin in every
/// workspace, server code, token resolution); a scoped token must also have a scope for the
/// route (`authed`). Each area checks the role its routes need.
fn workspace_route(shared: &Shared, call: &Call, workspace: &str, rest: &[&str]) -> Result<Reply, Reply> {
    // `jobs_u` routes take an optional caller: a token that does not pass is an anonymous one.
    if let ("POST", ["jobs_u", "queue", "cancel", id]) = (call.method, rest) {
        return jobs::cancel(shared, call, auth::caller(shared, call, workspace).ok(), workspace, id);
    }
    let caller = auth::caller(shared, call, workspace)?;
    match rest.first() {
        Some(&"folders") => workspaces::folder_route(shared, call, &caller, workspace, rest),
        Some(&"acls") => workspaces::acl_route(shared, call, &caller, workspace, rest),
        Some(&"workspaces") => workspaces::workspaced_route(shared, call, &caller, workspace, rest),
        Some(&"users") => members::route(shared, call, &caller, workspace, rest),
        Some(&"scripts") => scripts::route(shared, call, &caller, workspace, rest),
        Some(&"jobs" | &"jobs_u" | &"flows" | &"variables" | &"resources") => {
            jobs::route(shared, call, &caller, workspace, rest)
        }
        _ => Ok(absent()),
    }
}
