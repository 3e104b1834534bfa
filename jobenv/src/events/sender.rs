//! Delivery: one thread of its own runs a current-thread runtime with the HTTP client, posts
//! one event at a time in order, retries with backoff, and watches for the program's exec.
//!
//! A thread of its own rather than a task on the supervisor's runtime: the supervisor blocks
//! that runtime in places (waiting for the pumps, scanning /proc), and delivery must neither
//! wait for it nor make it wait. The program is still forked from the main thread, which its
//! parent-death signal is tied to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, StatusCode, Url};

use super::config::{Secret, Target};
use super::model::{self, Item};
use super::queue::{Next, Settled};
use super::Shared;

const SECRET_HEADER: HeaderName = HeaderName::from_static("x-action-secret");
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Bounds one request; a receiver slower than this is retried like one that is down.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts after the first for a batch of log lines; status events are retried until jobenv exits.
const LOG_RETRIES: usize = 2;
/// Enough of an answer to let the connection be reused; more is not read.
const ANSWER_LIMIT: usize = 64 * 1024;

/// Starts the events thread; if it cannot start, events are off for this job (one line says so).
pub(super) fn spawn(shared: Arc<Shared>, target: Target) {
    let started = std::thread::Builder::new().name("events".into()).spawn({
        let shared = Arc::clone(&shared);
        move || run(&shared, &target)
    });
    if started.is_err() {
        shared.give_up("cannot start the events thread");
    }
}

fn run(shared: &Arc<Shared>, target: &Target) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return shared.give_up("cannot start the events runtime");
    };
    let Some(client) = client(&target.secret, target.url.scheme() == "https") else {
        return shared.give_up("cannot set up the HTTP client");
    };
    runtime.block_on(async {
        tokio::spawn(watch_exec(Arc::clone(shared)));
        deliver(shared, &client, &target.url).await;
    });
}

fn client(secret: &Secret, https: bool) -> Option<Client> {
    // reqwest comes without a crypto provider (aws-lc-rs would need cmake): ring serves https.
    // Installing it twice is harmless (the first one stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut value = HeaderValue::from_str(secret.expose()).ok()?;
    // Sensitive: kept out of Debug output and of HTTP/2 header compression tables.
    value.set_sensitive(true);
    let builder = || {
        let mut headers = HeaderMap::new();
        headers.insert(SECRET_HEADER, value.clone());
        Client::builder()
            .default_headers(headers)
            // A redirect would carry the secret header somewhere the node did not name.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .user_agent(concat!("fediversity-jobenv/", env!("CARGO_PKG_VERSION")))
    };
    if !https {
        // Plain http never uses TLS, but reqwest sets it up anyway, and its default verifier
        // parses every system root certificate (a few ms per job). A TLS setup without roots
        // avoids that; should reqwest not take it, the default is used.
        if let Ok(client) = builder().tls_backend_preconfigured(no_roots()).build() {
            return Some(client);
        }
    }
    builder().build().ok()
}

/// A rustls setup that trusts nothing: for a client that only ever speaks plain http.
fn no_roots() -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
}

/// Polls the direct child's command line until the program runs, the child is gone, or the
/// job ended. Cheap: one small /proc read per poll, every 5 to 50 ms.
async fn watch_exec(shared: Arc<Shared>) {
    let mut pause = Duration::from_millis(5);
    while !shared.check_running() {
        tokio::time::sleep(pause).await;
        if shared.program.get().is_some() {
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

async fn deliver(shared: &Shared, client: &Client, url: &Url) {
    let mut seq = 0;
    let mut warned_rejected = false;
    loop {
        let next = shared.lock().next(Instant::now());
        let (item, dropped) = match next {
            Next::Done => break,
            Next::Wait => {
                shared.wake.notified().await;
                continue;
            }
            Next::WaitUntil(due) => {
                tokio::select! {
                    () = shared.wake.notified() => {}
                    () = tokio::time::sleep_until(due.into()) => {}
                }
                continue;
            }
            Next::Send { item, dropped } => (item, dropped),
        };
        // Numbered when first sent (and kept across retries): seqs are contiguous unless an
        // event was given up, whose lines then count in `dropped`.
        seq += 1;
        let body = model::encode(&shared.ids, seq, dropped, &item);
        let result = send(shared, client, url, body, matches!(item, Item::Status(_))).await;
        let mut queue = shared.lock();
        match result {
            Ok(()) => {
                queue.last_error = None;
                queue.settle(Settled::Delivered);
            }
            Err(Failure::Http(code)) if code == StatusCode::UNAUTHORIZED || code == StatusCode::FORBIDDEN => {
                // Retrying cannot fix a wrong secret; the whole job's events stop here.
                queue.stop(Instant::now());
                queue.reported = true;
                tracing::error!(
                    "progress events: the receiver refused jobenv's EVENTS_SECRET (HTTP {code}); no more events are sent for this job"
                );
                drop(queue);
                shared.settled.notify_all();
                return;
            }
            Err(failure) => {
                if let (Failure::Http(code), false) = (&failure, warned_rejected) {
                    warned_rejected = true;
                    tracing::warn!("progress events: the receiver rejected an event (HTTP {code}); it is skipped");
                }
                queue.last_error = Some(failure.describe());
                queue.settle(Settled::Abandoned);
            }
        }
        drop(queue);
        shared.settled.notify_all();
    }
    shared.lock().sender_done = true;
    shared.settled.notify_all();
}

/// Posts one event, retrying what a later attempt may fix.
async fn send(shared: &Shared, client: &Client, url: &Url, body: Vec<u8>, is_status: bool) -> Result<(), Failure> {
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_jitter();
    // Status events are never dropped: retried until delivered or jobenv exits.
    let backoff = if is_status { backoff.without_max_times() } else { backoff.with_max_times(LOG_RETRIES) };
    (|| post(client, url, body.clone()))
        .retry(backoff)
        .when(Failure::is_transient)
        .notify(|failure, _| shared.lock().last_error = Some(failure.describe()))
        .await
}

async fn post(client: &Client, url: &Url, body: Vec<u8>) -> Result<(), Failure> {
    let mut response = client
        .post(url.clone())
        .header(CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| Failure::from_reqwest(&e))?;
    let code = response.status();
    let mut read = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        read += chunk.len();
        if read > ANSWER_LIMIT {
            break;
        }
    }
    if code.is_success() { Ok(()) } else { Err(Failure::Http(code)) }
}

/// Why an attempt failed. Deliberately not reqwest's error: its message holds the URL, which
/// may carry credentials.
#[derive(Debug)]
enum Failure {
    Timeout,
    Connect,
    Request,
    Http(StatusCode),
}

impl Failure {
    fn from_reqwest(error: &reqwest::Error) -> Self {
        if error.is_timeout() {
            Failure::Timeout
        } else if error.is_connect() {
            Failure::Connect
        } else {
            Failure::Request
        }
    }

    fn is_transient(&self) -> bool {
        match self {
            Failure::Http(code) => {
                *code == StatusCode::REQUEST_TIMEOUT || *code == StatusCode::TOO_MANY_REQUESTS || code.is_server_error()
            }
            _ => true,
        }
    }

    fn describe(&self) -> String {
        match self {
            Failure::Timeout => format!("the receiver did not answer within {}s", REQUEST_TIMEOUT.as_secs()),
            Failure::Connect => "cannot connect to the receiver".into(),
            Failure::Request => "the request to the receiver failed".into(),
            Failure::Http(code) => format!("the receiver answered HTTP {code}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_build_for_http_and_https() {
        let secret = super::super::config::tests_support::secret("events-secret-0123456789");
        // Without ring installed as rustls's provider, reqwest would panic here.
        assert!(client(&secret, true).is_some());
        assert!(client(&secret, false).is_some());
    }

    #[test]
    fn failures_never_name_the_url_and_retry_what_may_pass() {
        for failure in [Failure::Timeout, Failure::Connect, Failure::Request, Failure::Http(StatusCode::SERVICE_UNAVAILABLE)] {
            assert!(failure.is_transient(), "{failure:?}");
            assert!(!failure.describe().contains("http://"));
        }
        for code in [StatusCode::BAD_REQUEST, StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN, StatusCode::MOVED_PERMANENTLY] {
            assert!(!Failure::Http(code).is_transient(), "{code}");
        }
        assert!(Failure::Http(StatusCode::TOO_MANY_REQUESTS).is_transient());
        assert_eq!(Failure::Http(StatusCode::FORBIDDEN).describe(), "the receiver answered HTTP 403 Forbidden");
    }
}
