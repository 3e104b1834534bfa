//! The one fake of the test suite: an in-process Windmill HTTP server that answers like a real
//! Windmill CE does, for the calls the bootstrap makes. Every behaviour says where it comes
//! from: "server code" is Windmill's Rust source (`backend/windmill-api-users/src/users.rs` for
//! login and tokens, `windmill-api-workspaces`, `windmill-api-groups/src/folders.rs`,
//! `windmill-api-scripts/src/scripts.rs`, `windmill-api/src/settings.rs`,
//! `windmill-api-auth/src/auth.rs`), "OpenAPI" its `backend/windmill-api/openapi.yaml`,
//! "observed" what a real Windmill CE 1.743.0 answered, "nixpkgs" its package of 1.587.0.
//!
//! Design decisions:
//! - Users are not held here: login reads the admin's `password_hash` from the test's real
//!   PostgreSQL `password` table and verifies it with the argon2 crate, as Windmill does (server
//!   code, `login`). So the bootstrap's database write is exercised end to end: if the hash it
//!   wrote were wrong, the next login would fail.
//! - Script hashes are the first 8 bytes of SHA-256 over the request body in a canonical form
//!   (parsed, top-level `null` fields dropped, keys sorted), in 16 hex digits. Windmill hashes
//!   the deserialised request (server code), which is not reproducible, but shares the properties
//!   that matter: it covers every field including `parent_hash`, so resending the same request
//!   gives the same hash, and identical content under a new parent does not; and since it
//!   hashes the parsed struct, `"parent_hash": null` and no `parent_hash` are the same request.
//! - Authentication goes through an auth cache, as on a real server (observed): a token that
//!   authenticated once is remembered for 120 s, so a deleted token that is not a session keeps working until its entry expires; a deleted session token stops at
//!   once (the database trigger that clears the cache fires for `label = 'session'` only).
//!   Tests that need the old behaviour shorten the time with [`WindmillFake::set_auth_cache_ttl`].
//! - Every request is recorded (method, path, body, bearer token) before any fault applies.
//! - Faults: refuse connections for the first N seconds or until told to listen (the port is
//!   bound but not listening, so connects are refused, not hung); answer a chosen status on chosen calls N times; drop
//!   the connection before or after handling a call (the latter loses the answer of a call that
//!   took effect); let a "concurrent writer" create a version just before a script upload.
// Handlers return the error reply itself as `Err`: its size is of no concern in a test fake.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::net::TcpSocket;
use tokio::sync::Notify;

/// `GET /api/version` of the nixpkgs build (nixpkgs: postPatch makes it `CE v1.587.0`).
pub const VERSION: &str = "CE v1.587.0";

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub body: String,
    /// The bearer token (or `token` cookie) it carried.
    pub token: Option<String>,
}

impl Recorded {
    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path == path
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
    /// Read the whole request, change nothing, close the connection without an answer.
    DropBeforeHandling,
    /// Handle the call (its effect happens), then close the connection without the answer.
    DropAfterHandling,
}

#[derive(Debug)]
struct FaultRule {
    method: String,
    path_prefix: String,
    fault: Fault,
    /// Matching calls to let through before the fault applies.
    skip: usize,
    remaining: usize,
}

#[derive(Debug, Clone)]
pub struct TokenRow {
    pub token: String,
    pub label: String,
    pub email: String,
    pub super_admin: bool,
}

#[derive(Debug, Clone)]
pub struct ScriptRow {
    pub workspace: String,
    pub hash: String,
    pub path: String,
    pub parent_hashes: Vec<String>,
    pub summary: String,
    pub description: String,
    pub content: String,
    pub language: String,
    pub lock: Option<String>,
    /// Set when the version's dependency job failed (`get/p` answers it, OpenAPI `Script`, observed).
    pub lock_error_logs: Option<String>,
    pub archived: bool,
    pub created_by: String,
}

/// Windmill's auth cache lifetime (observed: a deleted non-session token worked for up to 120 s).
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(120);

struct State {
    /// The `token` table.
    tokens: Vec<TokenRow>,
    /// The auth cache: token → (row, when it was cached).
    auth_cache: HashMap<String, (TokenRow, Instant)>,
    auth_cache_ttl: Duration,
    /// What the next `tokens/create` answers instead of a random token.
    next_tokens: Vec<String>,
    /// Every token ever handed out, revoked or not (for secret scans).
    ever_minted: Vec<String>,
    workspaces: BTreeMap<String, String>,
    folders: BTreeSet<(String, String)>,
    scripts: Vec<ScriptRow>,
    settings: BTreeMap<String, Value>,
    requests: Vec<Recorded>,
    faults: Vec<FaultRule>,
    concurrent_writes: Vec<(String, String)>,
}

impl Default for State {
    fn default() -> Self {
        State {
            tokens: Vec::new(),
            auth_cache: HashMap::new(),
            auth_cache_ttl: AUTH_CACHE_TTL,
            next_tokens: Vec::new(),
            ever_minted: Vec::new(),
            workspaces: BTreeMap::new(),
            folders: BTreeSet::new(),
            scripts: Vec::new(),
            settings: BTreeMap::new(),
            requests: Vec::new(),
            faults: Vec::new(),
            concurrent_writes: Vec::new(),
        }
    }
}

impl State {
    /// Deletes token rows; a session's cache entry goes with it (the invalidation trigger), any
    /// other token's stays until it expires (observed).
    fn delete_tokens(&mut self, doomed: impl Fn(&TokenRow) -> bool) -> usize {
        let (gone, kept): (Vec<TokenRow>, Vec<TokenRow>) = std::mem::take(&mut self.tokens).into_iter().partition(|t| doomed(t));
        self.tokens = kept;
        for row in &gone {
            if row.label == "session" {
                self.auth_cache.remove(&row.token);
            }
        }
        gone.len()
    }
}

struct Shared {
    state: Mutex<State>,
    /// Superuser DSN of the test's database: login reads `password` from it.
    dsn: String,
}

pub struct WindmillFake {
    pub url: String,
    shared: Arc<Shared>,
    /// Ends the refusal of [`start_refusing`](Self::start_refusing) early.
    listen: Arc<Notify>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl WindmillFake {
    /// A fake backed by the `password` table of the database at `dsn`, answering at once.
    pub fn start(dsn: &str) -> WindmillFake {
        Self::start_refusing(dsn, Duration::ZERO)
    }

    /// Like [`start`](Self::start), but connections are refused for the first `refuse_for`, or
    /// until [`listen_now`](Self::listen_now).
    pub fn start_refusing(dsn: &str, refuse_for: Duration) -> WindmillFake {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let mut state = State::default();
        // A fresh database holds only the `admins` workspace (observed).
        state.workspaces.insert("admins".into(), "Admins".into());
        let shared = Arc::new(Shared { state: Mutex::new(state), dsn: dsn.to_owned() });
        let socket = runtime.block_on(async {
            let socket = TcpSocket::new_v4().expect("socket");
            socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
            socket
        });
        let addr: SocketAddr = socket.local_addr().expect("local addr");
        let serving = shared.clone();
        let listen = Arc::new(Notify::new());
        let listen_now = listen.clone();
        runtime.spawn(async move {
            // Bound but not listening: the kernel refuses connections to the port.
            tokio::select! {
                _ = tokio::time::sleep(refuse_for) => {}
                _ = listen_now.notified() => {}
            }
            let listener = socket.listen(1024).expect("listen");
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let shared = serving.clone();
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
        WindmillFake { url: format!("http://{addr}"), shared, listen, runtime: Some(runtime) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts listening now (a fake started with [`start_refusing`](Self::start_refusing)).
    pub fn listen_now(&self) {
        // A stored permit: works whether or not the server task waits yet.
        self.listen.notify_one();
    }

    // ---- fault injection ------------------------------------------------------------------

    /// The next `times` calls whose method is `method` and whose path starts with
    /// `path_prefix` get `fault`.
    pub fn fail(&self, method: &str, path_prefix: &str, fault: Fault, times: usize) {
        self.fail_after(method, path_prefix, 0, fault, times);
    }

    /// As [`fail`](Self::fail), after letting the next `skip` matching calls through.
    pub fn fail_after(&self, method: &str, path_prefix: &str, skip: usize, fault: Fault, times: usize) {
        self.state().faults.push(FaultRule { method: method.into(), path_prefix: path_prefix.into(), fault, skip, remaining: times });
    }

    /// Just before the next `scripts/create` for `path`, another writer creates a version of
    /// it with `content` (with the current head as parent, like a CLI would).
    pub fn concurrent_write_before_create(&self, path: &str, content: &str) {
        self.state().concurrent_writes.push((path.into(), content.into()));
    }

    // ---- inspection -----------------------------------------------------------------------

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    /// Requests recorded from index `mark` on (take a mark with `requests().len()`).
    pub fn requests_since(&self, mark: usize) -> Vec<Recorded> {
        self.state().requests[mark..].to_vec()
    }

    /// The `token` table: what `tokens/list` shows (the auth cache aside).
    pub fn tokens(&self) -> Vec<TokenRow> {
        self.state().tokens.clone()
    }

    /// Whether `token` is still a row of the `token` table (listed by `tokens/list`).
    pub fn has_token(&self, token: &str) -> bool {
        self.state().tokens.iter().any(|t| t.token == token)
    }

    /// How long a token stays in the auth cache ([`AUTH_CACHE_TTL`] by default). Entries cached
    /// before the call keep the time they were cached at, and are judged by the new lifetime.
    pub fn set_auth_cache_ttl(&self, ttl: Duration) {
        self.state().auth_cache_ttl = ttl;
    }

    /// The next `tokens/create` answers `token` (and stores it) instead of a random token: for a
    /// server whose tokens do not look like Windmill's.
    pub fn next_token(&self, token: &str) {
        self.state().next_tokens.push(token.to_owned());
    }

    pub fn ever_minted(&self) -> Vec<String> {
        self.state().ever_minted.clone()
    }

    pub fn workspaces(&self) -> Vec<String> {
        self.state().workspaces.keys().cloned().collect()
    }

    pub fn folders(&self) -> Vec<(String, String)> {
        self.state().folders.iter().cloned().collect()
    }

    /// Every version of `path` in `workspace`, oldest first.
    pub fn versions(&self, workspace: &str, path: &str) -> Vec<ScriptRow> {
        self.state().scripts.iter().filter(|s| s.workspace == workspace && s.path == path).cloned().collect()
    }

    pub fn script_count(&self) -> usize {
        self.state().scripts.len()
    }

    pub fn setting(&self, key: &str) -> Option<Value> {
        self.state().settings.get(key).cloned()
    }

    // ---- changing state behind the bootstrap's back ---------------------------------------

    pub fn put_setting(&self, key: &str, value: Value) {
        self.state().settings.insert(key.into(), value);
    }

    /// Someone else deploys a version of `path` on top of the current head (as the UI or the
    /// CLI would), with this content and summary.
    pub fn push_version(&self, workspace: &str, path: &str, content: &str, summary: &str) {
        let mut state = self.state();
        push_other_version(&mut state, workspace, path, content, summary);
    }

    /// Sets (or, with `None`, clears) `lock_error_logs` of the newest version of a script, as a
    /// failed dependency job does (server code).
    pub fn set_lock_error(&self, workspace: &str, path: &str, logs: Option<&str>) {
        let mut state = self.state();
        let row = state.scripts.iter_mut().rev().find(|s| s.workspace == workspace && s.path == path).expect("the script exists");
        row.lock_error_logs = logs.map(str::to_owned);
    }

    /// Archives the newest version of a script (as deleting it in the UI does).
    pub fn archive(&self, workspace: &str, path: &str) {
        let mut state = self.state();
        if let Some(row) = state.scripts.iter_mut().rev().find(|s| s.workspace == workspace && s.path == path) {
            row.archived = true;
        }
    }
}

impl Drop for WindmillFake {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

// ---- the server ---------------------------------------------------------------------------

type Reply = Response<Full<Bytes>>;

/// Errors are `text/plain` `<Kind>: <message>` (OpenAPI error table, observed general rules).
fn text(status: u16, body: impl Into<String>) -> Reply {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.into())))
        .expect("response")
}

fn json_reply(value: &Value) -> Reply {
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())))
        .expect("response")
}

/// 200 with an empty body and no content type (settings POST, observed).
fn empty() -> Reply {
    Response::builder().status(200).body(Full::new(Bytes::new())).expect("response")
}

fn bearer(request: &Request<Incoming>) -> Option<String> {
    // Order of `extract_token` (OpenAPI): Authorization: Bearer, then the `token` cookie.
    let headers = request.headers();
    if let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        if let Some(token) = auth.strip_prefix("Bearer ") {
            return Some(token.trim().to_owned());
        }
    }
    headers.get("cookie").and_then(|v| v.to_str().ok()).and_then(|cookies| {
        cookies.split(';').map(str::trim).find_map(|c| c.strip_prefix("token=")).map(str::to_owned)
    })
}

async fn handle(request: Request<Incoming>, shared: Arc<Shared>, kill: Arc<Notify>) -> Reply {
    let method = request.method().as_str().to_owned();
    let path = request.uri().path().to_owned();
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
    let fault = {
        let mut state = shared.state.lock().unwrap();
        state.requests.push(Recorded { method: method.clone(), path: path.clone(), body: body_text.clone(), token: token.clone() });
        let rule = state.faults.iter_mut().find(|r| r.remaining > 0 && r.method == method && path.starts_with(&r.path_prefix));
        rule.and_then(|r| {
            if r.skip > 0 {
                r.skip -= 1;
                return None;
            }
            r.remaining -= 1;
            Some(r.fault)
        })
    };
    let call = Call { method: &method, path: &path, token: token.as_deref(), is_json, body: &body_text };
    match fault {
        None => route(&shared, &call).await,
        Some(Fault::Status(500)) => text(500, "Internal: injected fault"),
        Some(Fault::Status(status)) => text(status, StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("error")),
        Some(Fault::StatusQuotingPath(status)) => {
            let kind = match status {
                400 => "Bad request",
                401 => "Not authorized",
                404 => "Not found",
                _ => "Internal",
            };
            text(status, format!("{kind}: injected fault for {}", path.rsplit('/').next().unwrap_or_default()))
        }
        Some(Fault::StatusEchoingBody(status, encoder)) => {
            let quoted = match serde_json::from_str::<Value>(&body_text) {
                Ok(value) => crate::json_forms::encode_value(encoder, &value),
                Err(_) => body_text.clone(),
            };
            text(status, format!("Bad request: cannot process {quoted}"))
        }
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

struct Call<'a> {
    method: &'a str,
    path: &'a str,
    token: Option<&'a str>,
    is_json: bool,
    body: &'a str,
}

impl Call<'_> {
    /// JSON body rules (observed): no JSON content type → 415; not JSON → 400; the wrong
    /// shape → 422.
    fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, Reply> {
        if !self.is_json {
            return Err(text(415, "Expected request with `Content-Type: application/json`"));
        }
        let value: Value = serde_json::from_str(self.body).map_err(|e| text(400, format!("Failed to parse the request body as JSON: {e}")))?;
        serde_json::from_value(value).map_err(|e| text(422, format!("Failed to deserialize the JSON body into the target type: {e}")))
    }
}

fn random_token() -> String {
    // 32 alphanumerics, like `rd_string(32)` (server code).
    crate::servers::random_string(32)
}

/// The caller, from the token: 401 `Unauthorized` without one, `Not authorized: Unauthorized`
/// with an unknown one (observed). Through the auth cache (module comment): an entry younger than
/// its lifetime answers without looking at the `token` table.
fn authed(shared: &Shared, call: &Call) -> Result<TokenRow, Reply> {
    let Some(token) = call.token else { return Err(text(401, "Unauthorized")) };
    let mut state = shared.state.lock().unwrap();
    let ttl = state.auth_cache_ttl;
    if let Some((row, cached_at)) = state.auth_cache.get(token) {
        if cached_at.elapsed() < ttl {
            return Ok(row.clone());
        }
    }
    match state.tokens.iter().find(|t| t.token == token).cloned() {
        Some(row) => {
            state.auth_cache.insert(token.to_owned(), (row.clone(), Instant::now()));
            Ok(row)
        }
        None => {
            state.auth_cache.remove(token);
            Err(text(401, "Not authorized: Unauthorized"))
        }
    }
}

fn require_super_admin(user: &TokenRow) -> Result<(), Reply> {
    // `require_super_admin` (server code).
    if user.super_admin { Ok(()) } else { Err(text(401, "Not authorized: This endpoint requires the caller to be a super admin")) }
}

async fn route(shared: &Shared, call: &Call<'_>) -> Reply {
    match route_inner(shared, call).await {
        Ok(reply) | Err(reply) => reply,
    }
}

async fn route_inner(shared: &Shared, call: &Call<'_>) -> Result<Reply, Reply> {
    let segments: Vec<&str> = call.path.trim_start_matches('/').split('/').collect();
    match (call.method, segments.as_slice()) {
        // OpenAPI: the liveness probe, no auth.
        ("GET", ["api", "version"]) => Ok(text(200, VERSION)),
        ("POST", ["api", "auth", "login"]) => login(shared, call).await,
        ("POST", ["api", "auth", "logout"]) => {
            // observed: deletes the caller's token row, whatever its label, and answers 200.
            let Some(token) = call.token else { return Err(text(401, "Unauthorized")) };
            shared.state.lock().unwrap().delete_tokens(|t| t.token == token);
            Ok(text(200, "logged out successfully"))
        }
        ("GET", ["api", "users", "whoami"]) => {
            let user = authed(shared, call)?;
            Ok(json_reply(&json!({"email": user.email, "login_type": "password", "super_admin": user.super_admin, "verified": true, "username": "admin"})))
        }
        // observed: the OSS stub.
        ("POST", ["api", "users", "setpassword"]) => {
            authed(shared, call)?;
            Ok(text(500, "Internal: Not implemented in Windmill's Open Source repository @users_oss.rs:53:9"))
        }
        ("POST", ["api", "users", "tokens", "create"]) => {
            // server code, observed: labels are free text and not unique; 201 with the raw token.
            #[derive(Deserialize)]
            struct NewToken {
                label: Option<String>,
            }
            let user = authed(shared, call)?;
            let new: NewToken = call.json()?;
            let mut state = shared.state.lock().unwrap();
            let token = if state.next_tokens.is_empty() { random_token() } else { state.next_tokens.remove(0) };
            state.tokens.push(TokenRow {
                token: token.clone(),
                label: new.label.unwrap_or_default(),
                email: user.email.clone(),
                super_admin: user.super_admin,
            });
            state.ever_minted.push(token.clone());
            Ok(Response::builder()
                .status(201)
                .header("content-type", "text/plain; charset=utf-8")
                .body(Full::new(Bytes::from(token)))
                .expect("response"))
        }
        ("GET", ["api", "users", "tokens", "list"]) => {
            // observed: only the first 10 characters come back.
            let user = authed(shared, call)?;
            let state = shared.state.lock().unwrap();
            let list: Vec<Value> = state
                .tokens
                .iter()
                .filter(|t| t.email == user.email)
                .map(|t| {
                    json!({"label": t.label, "token_prefix": &t.token[..10], "expiration": null, "created_at": "2026-11-29T12:00:00Z",
                           "last_used_at": "2026-11-29T12:00:00Z", "scopes": null, "workspace_id": null, "read_only": false})
                })
                .collect();
            Ok(json_reply(&Value::Array(list)))
        }
        ("DELETE", ["api", "users", "tokens", "delete", prefix]) => {
            // observed: `deleted N tokens [...] with prefix P`. The segment is percent-decoded,
            // as axum's `Path` extractor does.
            let prefix = percent_encoding::percent_decode_str(prefix).decode_utf8_lossy();
            let prefix = prefix.as_ref();
            let user = authed(shared, call)?;
            let mut state = shared.state.lock().unwrap();
            let deleted = state.delete_tokens(|t| t.email == user.email && t.token.starts_with(prefix));
            Ok(text(200, format!("deleted {deleted} tokens [\"{prefix}*****\"] with prefix {prefix}")))
        }
        ("POST", ["api", "workspaces", "create"]) => create_workspace(shared, call),
        ("POST", ["api", "workspaces", "exists"]) => {
            #[derive(Deserialize)]
            struct Id {
                id: String,
            }
            authed(shared, call)?;
            let id: Id = call.json()?;
            // server code: a JSON bool; archived workspaces count too.
            Ok(json_reply(&json!(shared.state.lock().unwrap().workspaces.contains_key(&id.id))))
        }
        ("GET", ["api", "settings", "global", key]) => {
            let user = authed(shared, call)?;
            require_super_admin(&user)?;
            // observed: the stored JSON value, `null` when unset.
            Ok(json_reply(shared.state.lock().unwrap().settings.get(*key).unwrap_or(&Value::Null)))
        }
        ("POST", ["api", "settings", "global", key]) => {
            #[derive(Deserialize)]
            struct Setting {
                value: Value,
            }
            let user = authed(shared, call)?;
            require_super_admin(&user)?;
            // observed: a bare `"3.12"` is a 422; `null` or `""` deletes; 200 with an empty body.
            let setting: Setting = call.json()?;
            let mut state = shared.state.lock().unwrap();
            if setting.value.is_null() || setting.value == json!("") {
                state.settings.remove(*key);
            } else {
                state.settings.insert((*key).to_owned(), setting.value);
            }
            Ok(empty())
        }
        (_, ["api", "w", workspace, rest @ ..]) => {
            let user = authed(shared, call)?;
            workspace_route(shared, call, &user, workspace, rest)
        }
        _ => Ok(text(404, "Not found")),
    }
}

async fn login(shared: &Shared, call: &Call<'_>) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Login {
        email: String,
        password: String,
    }
    let login: Login = call.json()?;
    // server code: lower-cased email; the row with login_type 'password'.
    let email = login.email.to_lowercase();
    let row = {
        let (client, connection) = tokio_postgres::connect(&shared.dsn, tokio_postgres::NoTls)
            .await
            .map_err(|e| text(500, format!("Internal: cannot reach the database: {e}")))?;
        tokio::spawn(connection);
        client
            .query_opt("SELECT password_hash, super_admin FROM password WHERE email = $1 AND login_type = 'password'", &[&email])
            .await
            .map_err(|e| text(500, format!("Internal: {e}")))?
    };
    let invalid = || text(400, "Bad request: Invalid login");
    let Some(row) = row else { return Err(invalid()) };
    let hash: Option<String> = row.get(0);
    let super_admin: bool = row.get(1);
    let Some(hash) = hash else { return Err(invalid()) };
    // server code: a PHC string parsed with PasswordHash::new (malformed → 500, observed), verified
    // with Argon2::default(), parameters taken from the string.
    let verified = tokio::task::spawn_blocking(move || {
        let parsed = PasswordHash::new(&hash).map_err(|e| e.to_string())?;
        Ok::<bool, String>(Argon2::default().verify_password(login.password.as_bytes(), &parsed).is_ok())
    })
    .await
    .expect("verify task");
    match verified {
        Err(e) => Err(text(500, format!("Internal: {e} @users.rs:1968:50"))),
        Ok(false) => Err(invalid()),
        Ok(true) => {
            // A session token, label `session`, returned raw and as the `token` cookie (observed).
            let token = random_token();
            let mut state = shared.state.lock().unwrap();
            state.tokens.push(TokenRow { token: token.clone(), label: "session".into(), email, super_admin });
            state.ever_minted.push(token.clone());
            Ok(Response::builder()
                .status(200)
                .header("content-type", "text/plain; charset=utf-8")
                .header("set-cookie", format!("token={token}; HttpOnly; SameSite=Lax; Path=/"))
                .body(Full::new(Bytes::from(token)))
                .expect("response"))
        }
    }
}

/// Windmill's `workspace.id` check constraint `^\w+(-\w+)*$` (server code).
fn proper_workspace_id(id: &str) -> bool {
    !id.is_empty() && id.split('-').all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

fn create_workspace(shared: &Shared, call: &Call) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct CreateWorkspace {
        id: String,
        #[allow(dead_code)]
        name: String,
        username: Option<String>,
    }
    let user = authed(shared, call)?;
    // server code: superadmin only by default.
    require_super_admin(&user)?;
    let new: CreateWorkspace = call.json()?;
    let mut state = shared.state.lock().unwrap();
    // observed: the CE cap runs before the duplicate check.
    if state.workspaces.keys().filter(|id| *id != "admins").count() >= 2 {
        return Err(text(400, "Bad request: You have reached the maximum number of workspaces (2 outside of default workspace 'admins') without an enterprise license. Archive/delete another workspace to create a new one"));
    }
    if state.workspaces.contains_key(&new.id) {
        return Err(text(400, format!("Bad request: Workspace {} already exists", new.id)));
    }
    if new.id == "global" {
        return Err(text(400, "Bad request: global is not a valid workspace id"));
    }
    // server code: with automated usernames (the default), a username is refused.
    if new.username.is_some_and(|u| !u.is_empty()) {
        return Err(text(400, "Bad request: username is not allowed when username creation is automated"));
    }
    if !proper_workspace_id(&new.id) {
        return Err(text(400, "SqlErr: error returned from database: new row for relation \"workspace\" violates check constraint \"proper_id\" @workspaces.rs:3851:5"));
    }
    state.workspaces.insert(new.id.clone(), new.name);
    Ok(text(200, format!("Created workspace {}", new.id)))
}

const SCRIPT_LANGS: &[&str] = &[
    "python3", "deno", "go", "bash", "powershell", "postgresql", "mysql", "bigquery", "snowflake", "mssql", "oracledb", "graphql",
    "nativets", "bun", "php", "rust", "ansible", "csharp", "nu", "java", "ruby", "duckdb", "bunnative",
];

/// Windmill's script path check constraint `^[ufg](/[\w-]+){2,}$` (server code).
fn proper_script_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.len() >= 3
        && matches!(parts[0], "u" | "f" | "g")
        && parts[1..].iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'))
}

fn workspace_route(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str, rest: &[&str]) -> Result<Reply, Reply> {
    // server code: a superadmin is admin in every workspace.
    if !user.super_admin {
        return Err(text(401, "Not authorized: Unauthorized"));
    }
    let exists = shared.state.lock().unwrap().workspaces.contains_key(workspace);
    match (call.method, rest) {
        ("GET", ["folders", "get", name]) => {
            let state = shared.state.lock().unwrap();
            if !state.folders.contains(&(workspace.to_owned(), (*name).to_owned())) {
                return Err(text(404, format!("Not found: Folder {name} not found")));
            }
            // observed: the folder JSON.
            Ok(json_reply(&json!({"workspace_id": workspace, "name": name, "display_name": name, "owners": ["u/admin"],
                "extra_perms": {"u/admin": true}, "summary": null, "created_by": "admin", "edited_at": "2026-11-29T12:00:00Z",
                "default_permissioned_as": []})))
        }
        ("POST", ["folders", "create"]) => {
            #[derive(Deserialize)]
            struct NewFolder {
                name: String,
            }
            let new: NewFolder = call.json()?;
            // observed: the name rule, the duplicate, and the foreign key of a missing workspace.
            if new.name.is_empty() || !new.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(text(400, "Bad request: Folder name can only contain alphanumeric characters, underscores, and hyphens"));
            }
            let mut state = shared.state.lock().unwrap();
            if state.folders.contains(&(workspace.to_owned(), new.name.clone())) {
                return Err(text(400, format!("Bad request: Folder {} already exists", new.name)));
            }
            if !exists {
                return Err(text(500, "Internal: Failed to create folder: error returned from database: insert or update on table \"folder\" violates foreign key constraint \"folder_workspace_id_fkey\""));
            }
            state.folders.insert((workspace.to_owned(), new.name.clone()));
            Ok(text(200, format!("Created folder {}", new.name)))
        }
        ("GET", ["scripts", "get", "p", path @ ..]) => {
            let path = path.join("/");
            let state = shared.state.lock().unwrap();
            // server code: the newest row by creation, archived or not; 404 text (observed).
            match state.scripts.iter().rev().find(|s| s.workspace == workspace && s.path == path) {
                None => Err(text(404, format!("Not found: Script not found at path {path}"))),
                Some(row) => Ok(json_reply(&script_json(row))),
            }
        }
        ("POST", ["scripts", "create"]) => create_script(shared, call, workspace, exists),
        _ => Ok(text(404, "Not found")),
    }
}

/// The `get/p` JSON as observed (python build: with `assets`; no `lock` key while it is NULL).
fn script_json(row: &ScriptRow) -> Value {
    let mut value = json!({
        "workspace_id": row.workspace, "hash": row.hash, "path": row.path,
        "parent_hashes": if row.parent_hashes.is_empty() { Value::Null } else { json!(row.parent_hashes) },
        "summary": row.summary, "description": row.description, "content": row.content,
        "created_by": row.created_by, "created_at": "2026-11-29T12:00:00Z", "archived": row.archived, "schema": null,
        "deleted": false, "is_template": false, "extra_perms": {}, "lock_error_logs": row.lock_error_logs, "language": row.language,
        "kind": "script", "tag": null, "ws_error_handler_muted": false, "assets": [], "is_draft": false,
    });
    if let Some(lock) = &row.lock {
        value["lock"] = json!(lock);
    }
    value
}

#[derive(Deserialize)]
struct NewScript {
    path: String,
    parent_hash: Option<String>,
    summary: String,
    #[serde(default)]
    description: String,
    content: String,
    language: String,
}

fn create_script(shared: &Shared, call: &Call, workspace: &str, exists: bool) -> Result<Reply, Reply> {
    let raw: Value = call.json()?;
    let new: NewScript = serde_json::from_value(raw.clone())
        .map_err(|e| text(422, format!("Failed to deserialize the JSON body into the target type: {e}")))?;
    if !SCRIPT_LANGS.contains(&new.language.as_str()) {
        return Err(text(422, format!("Failed to deserialize the JSON body into the target type: language: unknown variant `{}`", new.language)));
    }
    if let Some(parent) = &new.parent_hash {
        // observed: a parent_hash that is not hex is a 422.
        if parent.len() % 16 != 0 || !parent.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(text(422, "Failed to deserialize the JSON body into the target type: parent_hash: Invalid character"));
        }
    }
    if !proper_script_path(&new.path) {
        return Err(text(400, "SqlErr: error returned from database: new row for relation \"script\" violates check constraint \"proper_id\" @scripts.rs:1395:5"));
    }
    if !exists {
        return Err(text(500, "Internal: error returned from database: insert or update on table \"script\" violates foreign key constraint \"script_workspace_id_fkey\""));
    }
    let mut state = shared.state.lock().unwrap();
    // The "concurrent writer": its version lands between the bootstrap's read and write.
    if let Some(index) = state.concurrent_writes.iter().position(|(p, _)| *p == new.path) {
        let (_, content) = state.concurrent_writes.remove(index);
        push_other_version(&mut state, workspace, &new.path, &content, "other writer");
    }
    let hash = script_hash(&raw);
    let in_workspace = |s: &&ScriptRow| s.workspace == workspace;
    // server code: the same request again.
    if state.scripts.iter().filter(in_workspace).any(|s| s.hash == hash) {
        return Err(text(400, "Bad request: A script with same hash (hence same path, description, summary, content) already exists!"));
    }
    let live_at_path: Vec<String> =
        state.scripts.iter().filter(in_workspace).filter(|s| s.path == new.path && !s.archived).map(|s| s.hash.clone()).collect();
    let parent_hashes = match &new.parent_hash {
        // Rule 2: no parent while a live version exists.
        None => {
            if let Some(live) = live_at_path.first() {
                return Err(text(400, format!("Bad request: Path conflict for {} with non-archived hash {live}", new.path)));
            }
            Vec::new()
        }
        Some(parent) => {
            // Rule 3: the parent must exist and be the head (no other child), and no other live
            // version may sit at the path.
            let Some(parent_row) = state.scripts.iter().filter(in_workspace).find(|s| s.hash == *parent).cloned() else {
                return Err(text(400, "Bad request: The parent hash does not seem to exist"));
            };
            if let Some(child) = state.scripts.iter().filter(in_workspace).find(|s| s.parent_hashes.first() == Some(parent)) {
                return Err(text(400, format!("Bad request: A script with hash {} with same parent_hash has been found. However, the lineage must be linear: no 2 scripts can have the same parent", child.hash)));
            }
            if let Some(live) = live_at_path.iter().find(|h| *h != parent) {
                return Err(text(400, format!("Bad request: Path conflict for {} with non-archived hash {live}", new.path)));
            }
            state.scripts.iter_mut().filter(|s| s.workspace == workspace && s.hash == *parent).for_each(|s| s.archived = true);
            std::iter::once(parent.clone()).chain(parent_row.parent_hashes).take(20).collect()
        }
    };
    // Rule 5: python3 without a lock waits for a dependency job (none runs here: NULL); bash
    // needs none (`""`).
    let lock = if new.language == "bash" { Some(String::new()) } else { None };
    state.scripts.push(ScriptRow {
        workspace: workspace.into(),
        hash: hash.clone(),
        path: new.path,
        parent_hashes,
        summary: new.summary,
        description: new.description,
        content: new.content,
        language: new.language,
        lock,
        lock_error_logs: None,
        archived: false,
        created_by: "admin".into(),
    });
    Ok(Response::builder()
        .status(201)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(hash)))
        .expect("response"))
}

/// A version by another writer, created by the same rules as through the API: the head (if
/// any) becomes its parent and is archived.
fn push_other_version(state: &mut State, workspace: &str, path: &str, content: &str, summary: &str) {
    let head = state.scripts.iter().rev().find(|s| s.workspace == workspace && s.path == path).cloned();
    let body = json!({"path": path, "parent_hash": head.as_ref().map(|h| h.hash.clone()), "summary": summary, "description": "", "content": content, "language": "python3"});
    if let Some(head) = &head {
        state.scripts.iter_mut().filter(|s| s.workspace == workspace && s.hash == head.hash).for_each(|s| s.archived = true);
    }
    let parent_hashes = head.map(|h| std::iter::once(h.hash.clone()).chain(h.parent_hashes).take(20).collect()).unwrap_or_default();
    state.scripts.push(ScriptRow {
        workspace: workspace.into(),
        hash: script_hash(&body),
        path: path.into(),
        parent_hashes,
        summary: summary.into(),
        description: String::new(),
        content: content.into(),
        language: "python3".into(),
        lock: None,
        lock_error_logs: None,
        archived: false,
        created_by: "other".into(),
    });
}

/// 16 hex digits over the whole request (see the module comment): top-level `null` fields are
/// dropped first, as they deserialise to the same struct as absent ones.
fn script_hash(body: &Value) -> String {
    let mut request = body.clone();
    if let Value::Object(fields) = &mut request {
        fields.retain(|_, value| !value.is_null());
    }
    let digest = Sha256::digest(canonical(&request).as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON with object keys sorted at every level, whatever serde_json's map order.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys.iter().map(|k| format!("{}:{}", Value::from(k.as_str()), canonical(&map[*k]))).collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}
