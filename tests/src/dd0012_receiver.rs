//! A DD-0012 back-end, over real HTTP on 127.0.0.1: seed 004's contract for the progress of
//! deployments, written from that contract and not from jobenv. A front-end keeps rows of two
//! kinds, jobs and deployments, each with a secret of its own of which it stores only the
//! SHA-256; it takes updates as `POST <base>/<jobs|deployments>/<row>/notifications` with the
//! header `x-action-secret` and a body `{"status": ..., "log": {"level": ..., "message": ...}}`
//! (either part may be left out, not both), and answers:
//!
//! - 404 to any other path, a row it does not have, or a row of the other kind;
//! - 401 without `x-action-secret`, 403 with a secret that is not the row's;
//! - 422 to a body that is not such an object, a status outside the row kind's set, a level
//!   other than `info`, `warning`, `error`;
//! - 200 `{"success": true}` to the rest, whose status becomes the row's and whose log is kept.
//!
//! Every request is recorded, whatever its path or answer (a test can look for one that went
//! where it should not, or for a secret in any body). Each accepted body is also checked
//! against the published schema (`schemas/event-dd-0012.schema.json`).

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The statuses of a jobs row.
pub const JOB_STATUSES: &[&str] = &[
    "pending",
    "preparing",
    "queued",
    "running",
    "succeeded",
    "failed",
    "destroyed",
];
/// The statuses of a deployments row.
pub const DEPLOYMENT_STATUSES: &[&str] = &["pending", "preparing", "running", "stopped", "destroyed", "failed"];

/// The path under which the front-end's API lives: the base a node names is `<url>/api`.
const BASE_PATH: &str = "/api";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Jobs,
    Deployments,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Jobs => "jobs",
            Kind::Deployments => "deployments",
        }
    }

    fn statuses(self) -> &'static [&'static str] {
        match self {
            Kind::Jobs => JOB_STATUSES,
            Kind::Deployments => DEPLOYMENT_STATUSES,
        }
    }
}

/// One row as the front-end holds it.
#[derive(Debug, Clone)]
pub struct Row {
    pub kind: Kind,
    pub id: u64,
    secret_sha256: [u8; 32],
    /// Its status now (`pending` when created).
    pub status: String,
    /// Every status it was given, in order.
    pub statuses: Vec<String>,
    /// Every log entry, as `(level, message)`.
    pub log: Vec<(String, String)>,
    /// Every accepted body, parsed.
    pub notifications: Vec<Value>,
}

/// One request, as it arrived.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub host: Option<String>,
    pub answer: u16,
    pub body: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    rows: Mutex<Vec<Row>>,
    requests: Mutex<Vec<Request>>,
    misfits: Mutex<Vec<String>>,
}

pub struct Dd0012Receiver {
    served: crate::http::Served,
    inner: Arc<Inner>,
}

impl Dd0012Receiver {
    pub fn start() -> Self {
        let inner = Arc::new(Inner::default());
        let app = axum::Router::new().fallback(receive).with_state(Arc::clone(&inner));
        Dd0012Receiver {
            served: crate::http::serve("dd0012-receiver", app),
            inner,
        }
    }

    /// The base of the API, as a node's `EVENTS_URL` names it.
    pub fn base_url(&self) -> String {
        format!("http://{}{BASE_PATH}", self.served.addr)
    }

    /// `host:port` of the receiver.
    pub fn authority(&self) -> String {
        self.served.addr.to_string()
    }

    /// Creates a row with `secret` and returns its id. Ids start at 41 and grow, like a
    /// database's serial that served other rows before.
    pub fn add_row(&self, kind: Kind, secret: &str) -> u64 {
        let mut rows = self.inner.rows.lock().unwrap();
        let id = 41 + rows.len() as u64;
        rows.push(Row {
            kind,
            id,
            secret_sha256: Sha256::digest(secret.as_bytes()).into(),
            status: "pending".into(),
            statuses: Vec::new(),
            log: Vec::new(),
            notifications: Vec::new(),
        });
        id
    }

    /// The row as it is now; panics if an accepted body did not fit the published schema.
    pub fn row(&self, kind: Kind, id: u64) -> Row {
        let misfits = self.inner.misfits.lock().unwrap().clone();
        assert!(
            misfits.is_empty(),
            "notifications that do not fit schemas/event-dd-0012.schema.json:\n{}",
            misfits.join("\n")
        );
        self.inner
            .rows
            .lock()
            .unwrap()
            .iter()
            .find(|row| row.kind == kind && row.id == id)
            .cloned()
            .expect("a row of the receiver")
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.inner.requests.lock().unwrap().clone()
    }
}

async fn receive(
    State(inner): State<Arc<Inner>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let (code, answer) = answer(&inner, &method, uri.path(), &headers, &body);
    inner.requests.lock().unwrap().push(Request {
        method: method.to_string(),
        path: uri.to_string(),
        host: headers.get("host").and_then(|h| h.to_str().ok()).map(str::to_owned),
        answer: code.as_u16(),
        body: body.to_vec(),
    });
    (code, axum::Json(answer))
}

fn answer(inner: &Inner, method: &Method, path: &str, headers: &HeaderMap, body: &[u8]) -> (StatusCode, Value) {
    let detail = |code, text: &str| (code, json!({"detail": text}));
    let Some((kind, id)) = route(path) else {
        return detail(StatusCode::NOT_FOUND, "not found");
    };
    if method != Method::POST {
        return detail(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    }
    let mut rows = inner.rows.lock().unwrap();
    let Some(row) = rows.iter_mut().find(|row| row.kind == kind && row.id == id) else {
        return detail(StatusCode::NOT_FOUND, "no such row");
    };
    let Some(given) = headers.get("x-action-secret") else {
        return detail(StatusCode::UNAUTHORIZED, "x-action-secret is required");
    };
    if <[u8; 32]>::from(Sha256::digest(given.as_bytes())) != row.secret_sha256 {
        return detail(StatusCode::FORBIDDEN, "wrong secret");
    }
    let Ok(Value::Object(notification)) = serde_json::from_slice::<Value>(body) else {
        return detail(StatusCode::UNPROCESSABLE_ENTITY, "not a JSON object");
    };
    let status = notification.get("status");
    let log = notification.get("log");
    let status_ok = status.is_none_or(|s| s.as_str().is_some_and(|s| kind.statuses().contains(&s)));
    let log_ok = log.is_none_or(|log| {
        matches!(log["level"].as_str(), Some("info" | "warning" | "error"))
            && log["message"].is_string()
            && log.as_object().is_some_and(|o| o.len() == 2)
    });
    let known = notification.keys().all(|key| key == "status" || key == "log");
    if !status_ok || !log_ok || !known || (status.is_none() && log.is_none()) {
        return detail(StatusCode::UNPROCESSABLE_ENTITY, "not a notification of this row");
    }
    let value = Value::Object(notification.clone());
    inner
        .misfits
        .lock()
        .unwrap()
        .extend(crate::schemas::Contract::EventDd0012.errors(&value));
    if let Some(status) = status.and_then(Value::as_str) {
        row.status = status.to_owned();
        row.statuses.push(status.to_owned());
    }
    if let Some(log) = log {
        row.log.push((
            log["level"].as_str().unwrap().to_owned(),
            log["message"].as_str().unwrap().to_owned(),
        ));
    }
    row.notifications.push(value);
    (StatusCode::OK, json!({"success": true}))
}

/// `<BASE_PATH>/<kind>/<id>/notifications`, the id as the front-end's database prints it.
fn route(path: &str) -> Option<(Kind, u64)> {
    let rest = path.strip_prefix(BASE_PATH)?.strip_prefix('/')?;
    let mut parts = rest.split('/');
    let kind = match parts.next()? {
        "jobs" => Kind::Jobs,
        "deployments" => Kind::Deployments,
        _ => return None,
    };
    let id = parts.next()?;
    let id = id.parse::<u64>().ok().filter(|n| n.to_string() == id)?;
    (parts.next()? == "notifications" && parts.next().is_none()).then_some((kind, id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// One raw HTTP/1.1 request; the status code and the answer's body.
    fn post(receiver: &Dd0012Receiver, path: &str, secret: Option<&str>, body: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(receiver.authority()).unwrap();
        let header = secret.map(|s| format!("x-action-secret: {s}\r\n")).unwrap_or_default();
        write!(
            stream,
            "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n{header}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            receiver.authority(),
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let code = answer.split(' ').nth(1).unwrap().parse().unwrap();
        (code, answer.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned())
    }

    #[test]
    fn it_keeps_rows_of_both_kinds_each_with_its_secret_and_its_statuses() {
        let receiver = Dd0012Receiver::start();
        let job = receiver.add_row(Kind::Jobs, "job-row-secret-0123456789");
        let deployment = receiver.add_row(Kind::Deployments, "deployment-secret-0123456");
        let job_path = format!("/api/jobs/{job}/notifications");
        let deployment_path = format!("/api/deployments/{deployment}/notifications");
        let body = r#"{"status": "running", "log": {"level": "info", "message": "one\ntwo"}}"#;
        assert_eq!(
            post(&receiver, &job_path, Some("job-row-secret-0123456789"), body),
            (200, r#"{"success":true}"#.into())
        );
        assert_eq!(post(&receiver, &job_path, None, body).0, 401);
        assert_eq!(
            post(&receiver, &job_path, Some("deployment-secret-0123456"), body).0,
            403,
            "another row's secret"
        );
        // Each kind has its own set of statuses.
        assert_eq!(
            post(
                &receiver,
                &job_path,
                Some("job-row-secret-0123456789"),
                r#"{"status": "stopped"}"#
            )
            .0,
            422
        );
        assert_eq!(
            post(
                &receiver,
                &deployment_path,
                Some("deployment-secret-0123456"),
                r#"{"status": "stopped"}"#
            )
            .0,
            200
        );
        assert_eq!(
            post(
                &receiver,
                &deployment_path,
                Some("deployment-secret-0123456"),
                r#"{"status": "succeeded"}"#
            )
            .0,
            422
        );
        assert_eq!(
            post(
                &receiver,
                &deployment_path,
                Some("deployment-secret-0123456"),
                r#"{"log": {"level": "debug", "message": "x"}}"#
            )
            .0,
            422
        );
        assert_eq!(
            post(&receiver, &deployment_path, Some("deployment-secret-0123456"), "{}").0,
            422
        );
        // A row of the other kind, one that does not exist, another path: not found.
        for path in [
            format!("/api/deployments/{job}/notifications"),
            "/api/jobs/999/notifications".into(),
            format!("/api/jobs/0{job}/notifications"),
            "/elsewhere".into(),
        ] {
            assert_eq!(
                post(&receiver, &path, Some("job-row-secret-0123456789"), body).0,
                404,
                "{path}"
            );
        }
        let row = receiver.row(Kind::Jobs, job);
        assert_eq!(
            (row.status.as_str(), row.log.clone()),
            ("running", vec![("info".to_owned(), "one\ntwo".to_owned())])
        );
        assert_eq!(receiver.row(Kind::Deployments, deployment).statuses, ["stopped"]);
        assert_eq!(receiver.requests().len(), 12, "every request is recorded");
    }
}
