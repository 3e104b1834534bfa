//! A receiver of OTLP/HTTP (protobuf), over real HTTP on 127.0.0.1: what a collector gets from
//! jobenv, decoded with the protocol's own message definitions (the `opentelemetry-proto` crate's
//! prost messages), flattened into [`Span`]s and [`Record`]s a test can look at.
//!
//! It can expect a header (answering 401 without it, and knowing only its SHA-256), answer with
//! an error status, or sleep before answering (a slow collector); [`black_hole`] accepts
//! connections and never answers, [`dead_endpoint`] is a port where nothing listens. Every
//! request body is kept (inflated, when it came gzipped), so a test can search all of them for
//! a secret.
//!
//! [`Rotel`] is a real collector (PyPI's `rotel`, in the test venv when installed): it receives
//! OTLP/HTTP and exports OTLP/HTTP to a receiver of this module.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use sha2::{Digest, Sha256};

/// A span as the collector got it, with its resource's attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// OTLP's `SpanKind` number (1 internal, 2 server, 3 client, 4 producer, 5 consumer).
    pub kind: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: BTreeMap<String, String>,
    /// Each event's name and its `message` attribute (empty without one).
    pub events: Vec<(String, String)>,
    /// OTLP's status code (0 unset, 1 ok, 2 error) and message.
    pub status: (i32, String),
    pub resource: BTreeMap<String, String>,
    pub scope: String,
}

/// A log record as the collector got it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub body: String,
    pub severity_number: i32,
    pub severity_text: String,
    pub trace_id: String,
    pub span_id: String,
    pub time_ns: u64,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
}

/// What the receiver saw.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    pub spans: Vec<Span>,
    pub records: Vec<Record>,
    /// Every request body, accepted or not (inflated when it came gzipped).
    pub bodies: Vec<Vec<u8>>,
    /// Each request's path, content type and content encoding.
    pub requests: Vec<(String, String)>,
    pub encodings: Vec<String>,
    /// Requests refused for a missing or wrong header.
    pub unauthorized: usize,
}

struct Inner {
    /// The name of a header every request must carry, and its value's SHA-256.
    expected: Option<(String, [u8; 32])>,
    /// Answer every request with this status (a collector that errors).
    answer: StatusCode,
    delay: Duration,
    recorded: Mutex<Recorded>,
}

pub struct Receiver {
    served: crate::http::Served,
    inner: Arc<Inner>,
}

impl Receiver {
    /// A receiver that takes every request and answers at once.
    pub fn start() -> Self {
        Self::with(None, StatusCode::OK, Duration::ZERO)
    }

    /// A receiver that refuses (401) a request without `header: value`.
    pub fn expecting(header: &str, value: &str) -> Self {
        Self::with(
            Some((header.to_ascii_lowercase(), Sha256::digest(value.as_bytes()).into())),
            StatusCode::OK,
            Duration::ZERO,
        )
    }

    /// A receiver that records each request (decoded only when `status` is 200), then sleeps
    /// `delay` before answering with `status`: a slow collector, or one that errors.
    pub fn answering(status: u16, delay: Duration) -> Self {
        Self::with(None, StatusCode::from_u16(status).expect("a status code"), delay)
    }

    fn with(expected: Option<(String, [u8; 32])>, answer: StatusCode, delay: Duration) -> Self {
        let inner = Arc::new(Inner {
            expected,
            answer,
            delay,
            recorded: Mutex::new(Recorded::default()),
        });
        let app = axum::Router::new()
            .route("/v1/traces", post(traces))
            .route("/v1/logs", post(logs))
            .with_state(Arc::clone(&inner));
        Receiver {
            served: crate::http::serve("otlp-receiver", app),
            inner,
        }
    }

    /// The base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`): `/v1/traces` and `/v1/logs` are below.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.served.addr)
    }

    pub fn recorded(&self) -> Recorded {
        self.inner.recorded.lock().unwrap().clone()
    }

    /// Polls until `condition` holds on what was recorded, or `limit` passes.
    pub fn wait_for(&self, limit: Duration, condition: impl Fn(&Recorded) -> bool) -> bool {
        crate::process::wait_until(limit, || condition(&self.inner.recorded.lock().unwrap()))
    }
}

fn verdict(inner: &Inner, headers: &HeaderMap) -> StatusCode {
    if let Some((name, sha)) = &inner.expected {
        let given = headers
            .get(name.as_str())
            .map(|v| <[u8; 32]>::from(Sha256::digest(v.as_bytes())));
        if given.as_ref() != Some(sha) {
            return StatusCode::UNAUTHORIZED;
        }
    }
    inner.answer
}

async fn traces(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    receive(&inner, &headers, &body, "/v1/traces", |recorded, body| {
        let request = ExportTraceServiceRequest::decode(body).ok()?;
        recorded.spans.extend(spans(request));
        Some(())
    })
    .await
}

async fn logs(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    receive(&inner, &headers, &body, "/v1/logs", |recorded, body| {
        let request = ExportLogsServiceRequest::decode(body).ok()?;
        recorded.records.extend(records(request));
        Some(())
    })
    .await
}

async fn receive(
    inner: &Inner,
    headers: &HeaderMap,
    body: &[u8],
    path: &str,
    decode: impl FnOnce(&mut Recorded, &[u8]) -> Option<()>,
) -> StatusCode {
    let verdict = verdict(inner, headers);
    let gzip = headers.get("content-encoding").is_some_and(|v| v.as_bytes() == b"gzip");
    let inflated;
    let body = if gzip {
        use std::io::Read;
        let mut out = Vec::new();
        if flate2::read::GzDecoder::new(body).read_to_end(&mut out).is_err() {
            return StatusCode::BAD_REQUEST;
        }
        inflated = out;
        &inflated[..]
    } else {
        body
    };
    {
        let mut recorded = inner.recorded.lock().unwrap();
        recorded.bodies.push(body.to_vec());
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        recorded.requests.push((path.to_owned(), content_type));
        recorded
            .encodings
            .push(if gzip { "gzip".into() } else { String::new() });
        match verdict {
            StatusCode::UNAUTHORIZED => recorded.unauthorized += 1,
            StatusCode::OK if decode(&mut recorded, body).is_none() => return StatusCode::BAD_REQUEST,
            _ => {}
        }
    }
    if !inner.delay.is_zero() {
        tokio::time::sleep(inner.delay).await;
    }
    verdict
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An attribute value as text: strings as they are, the rest as they print.
fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
        .collect()
}

fn spans(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = attributes(&resource_spans.resource.map(|r| r.attributes).unwrap_or_default());
        for scope_spans in resource_spans.scope_spans {
            let scope = scope_spans.scope.map(|s| s.name).unwrap_or_default();
            for span in scope_spans.spans {
                out.push(Span {
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| {
                            (
                                e.name.clone(),
                                attributes(&e.attributes).remove("message").unwrap_or_default(),
                            )
                        })
                        .collect(),
                    status: span.status.map(|s| (s.code, s.message)).unwrap_or_default(),
                    resource: resource.clone(),
                    scope: scope.clone(),
                });
            }
        }
    }
    out
}

fn records(request: ExportLogsServiceRequest) -> Vec<Record> {
    let mut out = Vec::new();
    for resource_logs in request.resource_logs {
        let resource = attributes(&resource_logs.resource.map(|r| r.attributes).unwrap_or_default());
        for scope_logs in resource_logs.scope_logs {
            for record in scope_logs.log_records {
                out.push(Record {
                    body: text(record.body.as_ref()),
                    severity_number: record.severity_number,
                    severity_text: record.severity_text,
                    trace_id: hex(&record.trace_id),
                    span_id: hex(&record.span_id),
                    time_ns: record.time_unix_nano,
                    attributes: attributes(&record.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

/// An endpoint where nothing listens: a port that was bound and closed again.
pub fn dead_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{addr}")
}

/// A collector that takes connections and never answers (nor reads): requests hang until the
/// client gives up. Lives until dropped.
pub struct BlackHole {
    pub addr: std::net::SocketAddr,
    _listener: std::net::TcpListener,
    held: Arc<Mutex<Vec<std::net::TcpStream>>>,
}

pub fn black_hole() -> BlackHole {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let addr = listener.local_addr().expect("address");
    let held = Arc::new(Mutex::new(Vec::new()));
    let accepting = listener.try_clone().expect("clone the listener");
    let keep = Arc::clone(&held);
    std::thread::Builder::new()
        .name("otlp-black-hole".into())
        .spawn(move || {
            for stream in accepting.incoming().flatten() {
                keep.lock().unwrap().push(stream);
            }
        })
        .expect("start the black hole");
    BlackHole {
        addr,
        _listener: listener,
        held,
    }
}

impl BlackHole {
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many connections it swallowed.
    pub fn connections(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

/// A real OpenTelemetry collector (PyPI's `rotel`, from the test venv): OTLP/HTTP in on a port of
/// its own, OTLP/HTTP out to `to`. `None` when the venv has no rotel.
pub struct Rotel {
    child: std::process::Child,
    pub endpoint: String,
}

impl Rotel {
    pub fn binary() -> Option<std::path::PathBuf> {
        let venv = crate::venv::workspace_root().join("target/test-venv/lib");
        std::fs::read_dir(venv)
            .ok()?
            .flatten()
            .map(|python| python.path().join("site-packages/rotel/rotel-agent"))
            .find(|agent| agent.is_file())
    }

    pub fn start(to: &Receiver) -> Option<Self> {
        let binary = Self::binary()?;
        let port = crate::servers::free_port();
        let mut command = std::process::Command::new(binary);
        command
            .args(["start", "--otlp-http-endpoint"])
            .arg(format!("127.0.0.1:{port}"))
            // Its gRPC receiver is not used: a port of its own, so that tests do not collide.
            .arg("--otlp-grpc-endpoint")
            .arg(format!("127.0.0.1:{}", crate::servers::free_port()))
            .args(["--exporter", "otlp", "--otlp-exporter-protocol", "http"])
            .arg("--otlp-exporter-endpoint")
            .arg(to.endpoint())
            .args(["--batch-timeout", "100ms"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = crate::servers::spawn_tied(command, None, libc::SIGTERM).expect("start rotel");
        let endpoint = format!("http://127.0.0.1:{port}");
        let up = crate::process::wait_until(Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(up, "rotel did not listen on {endpoint}");
        Some(Rotel { child, endpoint })
    }
}

impl Drop for Rotel {
    fn drop(&mut self) {
        crate::servers::stop(&mut self.child, libc::SIGTERM, Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One span, sent as jobenv's exporter sends it.
    fn request() -> Vec<u8> {
        use opentelemetry_proto::tonic::resource::v1::Resource;
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span as ProtoSpan};
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("svc".into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![ProtoSpan {
                        name: "deploy".into(),
                        trace_id: vec![1; 16],
                        span_id: vec![2; 8],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }

    fn post(endpoint: &str, header: Option<(&str, &str)>, body: &[u8]) -> u16 {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let mut request = reqwest::Client::new()
                .post(format!("{endpoint}/v1/traces"))
                .header("content-type", "application/x-protobuf")
                .body(body.to_vec());
            if let Some((name, value)) = header {
                request = request.header(name, value);
            }
            request.send().await.unwrap().status().as_u16()
        })
    }

    #[test]
    fn it_decodes_spans_and_checks_the_header() {
        let receiver = Receiver::expecting("authorization", "Bearer k");
        assert_eq!(post(&receiver.endpoint(), None, &request()), 401);
        assert_eq!(
            post(&receiver.endpoint(), Some(("authorization", "Bearer x")), &request()),
            401
        );
        assert_eq!(
            post(&receiver.endpoint(), Some(("authorization", "Bearer k")), &request()),
            200
        );
        let recorded = receiver.recorded();
        assert_eq!(recorded.unauthorized, 2);
        assert_eq!(recorded.bodies.len(), 3);
        assert_eq!(recorded.spans.len(), 1, "only the accepted request's span");
        let span = &recorded.spans[0];
        assert_eq!(
            (span.name.as_str(), span.trace_id.as_str(), span.span_id.as_str()),
            ("deploy", "01010101010101010101010101010101", "0202020202020202")
        );
        assert_eq!(span.resource["service.name"], "svc");
        // Garbage is not a request.
        let receiver = Receiver::start();
        assert_eq!(post(&receiver.endpoint(), None, b"\xff\xff not protobuf"), 400);
    }

    #[test]
    fn a_black_hole_takes_the_connection_and_never_answers() {
        let hole = black_hole();
        let mut stream = std::net::TcpStream::connect(hole.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        use std::io::{Read, Write};
        stream
            .write_all(b"POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 16];
        assert!(stream.read(&mut buf).is_err(), "it answered");
        assert!(crate::process::wait_until(Duration::from_secs(2), || hole
            .connections()
            == 1));
        assert!(std::net::TcpStream::connect(dead_endpoint().trim_start_matches("http://")).is_err());
    }
}
