//! A receiver of jobenv's progress events, over real HTTP on 127.0.0.1.
//!
//! It knows only the SHA-256 of the secret it expects, never the secret: it answers 401 to a
//! request without `x-action-secret`, 403 to one with a wrong secret, and 200 to the rest,
//! whose events it records. It can sleep before answering each request (a slow receiver), and
//! [`dead_url`] names a port where nothing listens (a dead one). Every request body is kept,
//! refused or not, so a test can search all of them for a secret. Every accepted event is
//! checked against the published schema (`schemas/event-jobenv.schema.json`): what was recorded
//! cannot be read while one does not fit.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// What the receiver saw.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// Accepted events, parsed, in arrival order.
    pub events: Vec<Value>,
    /// Every request body, accepted or refused.
    pub bodies: Vec<Vec<u8>>,
    /// Requests answered 401 (no secret header).
    pub unauthorized: usize,
    /// Requests answered 403 (wrong secret).
    pub forbidden: usize,
    /// How accepted events break the published schema.
    pub misfits: Vec<String>,
}

struct Inner {
    secret_sha256: [u8; 32],
    delay: Duration,
    recorded: Mutex<Recorded>,
}

pub struct Receiver {
    served: crate::http::Served,
    inner: Arc<Inner>,
}

impl Receiver {
    /// A receiver that answers at once.
    pub fn start(expected_secret: &str) -> Self {
        Self::slow(expected_secret, Duration::ZERO)
    }

    /// A receiver that records each event on arrival, then sleeps `delay` before answering.
    pub fn slow(expected_secret: &str, delay: Duration) -> Self {
        let inner = Arc::new(Inner {
            secret_sha256: Sha256::digest(expected_secret.as_bytes()).into(),
            delay,
            recorded: Mutex::new(Recorded::default()),
        });
        let app = axum::Router::new()
            .route("/events", post(receive))
            .with_state(Arc::clone(&inner));
        Receiver {
            served: crate::http::serve("events-receiver", app),
            inner,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/events", self.served.addr)
    }

    /// What was recorded; panics if an accepted event does not fit the published schema.
    pub fn recorded(&self) -> Recorded {
        let recorded = self.inner.recorded.lock().unwrap().clone();
        assert!(
            recorded.misfits.is_empty(),
            "events that do not fit schemas/event-jobenv.schema.json:\n{}",
            recorded.misfits.join("\n")
        );
        recorded
    }

    pub fn events(&self) -> Vec<Value> {
        self.recorded().events
    }

    /// Polls until `condition` holds on what was recorded, or `limit` passes.
    pub fn wait_for(&self, limit: Duration, condition: impl Fn(&Recorded) -> bool) -> bool {
        crate::process::wait_until(limit, || condition(&self.inner.recorded.lock().unwrap()))
    }
}

async fn receive(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let verdict = match headers.get("x-action-secret") {
        None => StatusCode::UNAUTHORIZED,
        Some(given) if <[u8; 32]>::from(Sha256::digest(given.as_bytes())) != inner.secret_sha256 => {
            StatusCode::FORBIDDEN
        }
        Some(_) => StatusCode::OK,
    };
    {
        let mut recorded = inner.recorded.lock().unwrap();
        recorded.bodies.push(body.to_vec());
        match verdict {
            StatusCode::UNAUTHORIZED => recorded.unauthorized += 1,
            StatusCode::FORBIDDEN => recorded.forbidden += 1,
            _ => match serde_json::from_slice(&body) {
                Ok(event) => {
                    let misfits = crate::schemas::Contract::EventJobenv.errors(&event);
                    recorded.misfits.extend(misfits);
                    recorded.events.push(event);
                }
                Err(_) => return StatusCode::BAD_REQUEST,
            },
        }
    }
    if verdict == StatusCode::OK && !inner.delay.is_zero() {
        tokio::time::sleep(inner.delay).await;
    }
    verdict
}

/// A URL where nothing listens: a port that was bound and closed again.
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{addr}/events")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// One raw HTTP/1.1 POST; returns the status code.
    fn post_raw(url: &str, secret: Option<&str>, body: &str) -> u16 {
        let addr = url.trim_start_matches("http://").split('/').next().unwrap();
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        let header = secret.map(|s| format!("x-action-secret: {s}\r\n")).unwrap_or_default();
        write!(
            stream,
            "POST /events HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n{header}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.split(' ').nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn it_checks_the_secret_and_records_only_accepted_events() {
        let receiver = Receiver::start("the-right-secret-123");
        let event = serde_json::json!({"deployment": "ns", "build": null, "verb": "apply", "seq": 1,
            "timestamp": "2026-05-04T10:11:12.345Z", "dropped": 0, "type": "status", "status": "preparing"});
        assert_eq!(post_raw(&receiver.url(), None, r#"{"n":1}"#), 401);
        assert_eq!(
            post_raw(&receiver.url(), Some("a-wrong-secret-4567"), r#"{"n":2}"#),
            403
        );
        assert_eq!(
            post_raw(&receiver.url(), Some("the-right-secret-123"), &event.to_string()),
            200
        );
        let recorded = receiver.recorded();
        assert_eq!((recorded.unauthorized, recorded.forbidden), (1, 1));
        assert_eq!(recorded.events, vec![event]);
        assert_eq!(recorded.bodies.len(), 3);
    }

    #[test]
    #[should_panic(expected = "do not fit schemas/event-jobenv.schema.json")]
    fn an_event_that_does_not_fit_the_schema_cannot_be_read() {
        let receiver = Receiver::start("the-right-secret-123");
        assert_eq!(
            post_raw(&receiver.url(), Some("the-right-secret-123"), r#"{"n":3}"#),
            200
        );
        receiver.recorded();
    }

    #[test]
    fn a_dead_url_refuses_connections() {
        let url = dead_url();
        let addr = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
        assert!(std::net::TcpStream::connect(addr).is_err());
    }
}
