//! Delivery, by the rules of docs/front-ends/events.md: one thread of its own (delivery
//! must neither wait for the supervisor nor make it wait) runs a current-thread runtime with
//! the HTTP client and posts one event at a time, in the order the messages came: lines in
//! batches, always all of them before a status change that came after them; statuses retried
//! until delivered, batches three times; 401/403 end the job's events. It knows no wire format:
//! [`wire::encode`] makes each body, and [`wire::joins`] says which lines may share one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, StatusCode, Url};
use tokio::sync::mpsc::UnboundedReceiver;

use super::model::{Envelope, Item, Line};
use super::wire::{self, Wire};
use super::{Ids, Msg, Secret, Shared, Target, lock};

const BATCH_LINES: usize = 64;
const BATCH_BYTES: usize = 64 * 1024;
const BATCH_DELAY: Duration = Duration::from_millis(200);
const BATCH_INTERVAL: Duration = Duration::from_millis(25); // at most 40 batches a second
const HURRY_AFTER: Duration = Duration::from_secs(1); // after the job ended, lines give way
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10); // slower is retried like down
const LOG_RETRIES: usize = 2; // attempts after the first for a batch of lines
const ANSWER_LIMIT: usize = 64 * 1024; // enough of an answer to reuse the connection

/// Starts the events thread.
pub(super) fn spawn(shared: Arc<Shared>, target: Target, ids: Ids, rx: UnboundedReceiver<Msg>, done: SyncSender<bool>) {
    let run = move || done.send(run(&shared, &target, ids, rx));
    std::thread::Builder::new()
        .name("events".into())
        .spawn(run)
        .expect("spawning the events thread");
}

/// Events cannot be sent at all for this job: one line says why.
fn give_up(shared: &Shared, why: &str) -> bool {
    let mut state = lock(&shared.state);
    (state.closed, state.reported) = (true, true);
    tracing::warn!("progress events are off for this job: {why}");
    false
}

/// Delivers until the final status is out (true) or cannot be (false).
fn run(shared: &Shared, target: &Target, ids: Ids, rx: UnboundedReceiver<Msg>) -> bool {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return give_up(shared, "cannot start the events runtime");
    };
    let Some(client) = client(&target.secret) else {
        return give_up(shared, "cannot set up the HTTP client");
    };
    let mut sender = Sender {
        shared,
        client,
        url: &target.url,
        wire: target.wire,
        ids,
        seq: 0,
        warned: false,
        pending: VecDeque::new(),
        pending_bytes: 0,
        last_batch: None,
    };
    runtime.block_on(sender.deliver(rx))
}

struct Sender<'a> {
    shared: &'a Shared,
    client: Client,
    url: &'a Url,
    wire: Wire,
    ids: Ids,
    seq: u64,
    warned: bool,
    /// Lines received and not yet sent, with when each arrived.
    pending: VecDeque<(Line, Instant)>,
    pending_bytes: usize,
    last_batch: Option<Instant>,
}

/// The receiver refused jobenv for good: nothing more is sent.
struct WrongSecret;

impl Sender<'_> {
    /// Delivers until the final status is out (true) or cannot be (false).
    async fn deliver(&mut self, mut rx: UnboundedReceiver<Msg>) -> bool {
        loop {
            let due = self.pending.front().map(|(_, since)| {
                let full = self.pending.len() >= BATCH_LINES || self.pending_bytes >= BATCH_BYTES;
                let due = if full { Instant::now() } else { *since + BATCH_DELAY };
                self.last_batch.map_or(due, |last| due.max(last + BATCH_INTERVAL))
            });
            let next = match due {
                None => Ok(rx.recv().await),
                Some(due) => tokio::time::timeout_at(due.into(), rx.recv()).await,
            };
            let step = match next {
                Err(_elapsed) => {
                    self.last_batch = Some(Instant::now());
                    self.send_batch().await.map(|()| false)
                }
                // Every handle is gone without a terminal status: nothing more will come.
                Ok(None) => return false,
                Ok(Some(Msg::Lines(lines))) => {
                    let now = Instant::now();
                    self.pending_bytes += lines.iter().map(|line| line.line.len()).sum::<usize>();
                    self.pending.extend(lines.into_iter().map(|line| (line, now)));
                    Ok(false)
                }
                Ok(Some(Msg::Status(status, ended))) => self.send_status(status, ended).await,
            };
            match step {
                Ok(false) => {}
                Ok(true) => return true,
                Err(WrongSecret) => return false,
            }
        }
    }

    /// Sends every line before the status, then the status; true once a terminal one is out.
    async fn send_status(&mut self, status: Item, ended: Instant) -> Result<bool, WrongSecret> {
        let terminal = status.is_end();
        while !self.pending.is_empty() {
            if terminal && ended.elapsed() >= HURRY_AFTER {
                let late = self.pending.drain(..).count();
                self.release(late, self.pending_bytes, late);
                break;
            }
            self.send_batch().await?;
        }
        let delivered = self.send(status, true).await?;
        lock(&self.shared.state).delivered += u64::from(delivered);
        Ok(terminal && delivered)
    }

    /// The oldest lines, within the batch bounds and as many as the format puts in one event
    /// (at least one line).
    async fn send_batch(&mut self) -> Result<(), WrongSecret> {
        let mut batch: Vec<Line> = Vec::new();
        let mut size = 0;
        while let Some((line, _)) = self.pending.front() {
            let full = batch.len() == BATCH_LINES || size + line.line.len() > BATCH_BYTES;
            if batch
                .first()
                .is_some_and(|first| full || !wire::joins(self.wire, first, line))
            {
                break;
            }
            size += line.line.len();
            batch.push(self.pending.pop_front().expect("a line is pending").0);
        }
        let count = batch.len();
        let delivered = self.send(Item::Logs { lines: batch }, false).await?;
        self.release(count, size, if delivered { 0 } else { count });
        Ok(())
    }

    /// `lines` of `bytes` left the queue, `lost` of them undelivered: they no longer count
    /// against the budget, and the lost ones count as dropped.
    fn release(&mut self, lines: usize, bytes: usize, lost: usize) {
        self.pending_bytes -= bytes;
        let mut state = lock(&self.shared.state);
        state.queued_lines -= lines;
        state.queued_bytes -= bytes;
        state.dropped += lost as u64;
    }

    /// Posts one event (numbered when first sent, the number kept across retries); whether it
    /// was delivered (an item the format has nothing to say about counts as delivered). `Err`
    /// when the receiver refused jobenv for good.
    async fn send(&mut self, item: Item, is_status: bool) -> Result<bool, WrongSecret> {
        let dropped = lock(&self.shared.state).dropped;
        let Some(body) = wire::encode(
            self.wire,
            &Envelope {
                ids: &self.ids,
                seq: self.seq + 1,
                dropped,
                item: &item,
            },
        ) else {
            return Ok(true);
        };
        self.seq += 1;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .with_jitter();
        let backoff = if is_status {
            backoff.without_max_times()
        } else {
            backoff.with_max_times(LOG_RETRIES)
        };
        let result = (|| post(&self.client, self.url, body.clone()))
            .retry(backoff)
            .when(Failure::is_transient)
            .notify(|failure, _| lock(&self.shared.state).last_error = Some(failure.0.clone()))
            .await;
        match result {
            Ok(()) => {
                lock(&self.shared.state).last_error = None;
                Ok(true)
            }
            Err(Failure(_, Some(code))) if code == StatusCode::UNAUTHORIZED || code == StatusCode::FORBIDDEN => {
                let mut state = lock(&self.shared.state);
                (state.closed, state.reported) = (true, true);
                tracing::error!(
                    "progress events: the receiver refused jobenv's EVENTS_SECRET (HTTP {code}); no more events are sent for this job"
                );
                Err(WrongSecret)
            }
            Err(Failure(why, code)) => {
                if let (Some(code), false) = (code, self.warned) {
                    self.warned = true;
                    tracing::warn!("progress events: the receiver rejected an event (HTTP {code}); it is skipped");
                }
                lock(&self.shared.state).last_error = Some(why);
                Ok(false)
            }
        }
    }
}

fn client(secret: &Secret) -> Option<Client> {
    // reqwest comes without a crypto provider (aws-lc-rs would need cmake): ring serves https.
    // Installing it twice is harmless (the first one stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut value = HeaderValue::from_str(secret.expose()).ok()?;
    // Sensitive: kept out of Debug output and of HTTP/2 header compression tables.
    value.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static("x-action-secret"), value);
    Client::builder()
        .default_headers(headers)
        // A redirect would carry the secret header somewhere the node did not name.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .user_agent(concat!("fediversity-jobenv/", env!("CARGO_PKG_VERSION")))
        .build()
        .ok()
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
    if code.is_success() {
        Ok(())
    } else {
        Err(Failure::http(code))
    }
}

/// Why an attempt failed, in words of our own (reqwest's message holds the URL, which may carry
/// credentials), and the HTTP status if there was an answer.
#[derive(Debug)]
struct Failure(String, Option<StatusCode>);

impl Failure {
    fn from_reqwest(error: &reqwest::Error) -> Self {
        let text = if error.is_timeout() {
            format!("the receiver did not answer within {}s", REQUEST_TIMEOUT.as_secs())
        } else if error.is_connect() {
            "cannot connect to the receiver".to_owned()
        } else {
            "the request to the receiver failed".to_owned()
        };
        Failure(text, None)
    }

    fn http(code: StatusCode) -> Self {
        Failure(format!("the receiver answered HTTP {code}"), Some(code))
    }

    /// What a later attempt may fix: no answer, 408, 429, 5xx.
    fn is_transient(&self) -> bool {
        self.1
            .is_none_or(|code| code.as_u16() == 408 || code.as_u16() == 429 || code.is_server_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_build_for_http_and_https() {
        let secret = Secret::new("events-secret-0123456789");
        // Without ring installed as rustls's provider, reqwest would panic here.
        assert!(client(&secret).is_some());
    }

    #[test]
    fn failures_never_name_the_url_and_retry_what_may_pass() {
        for failure in [
            Failure("no answer".into(), None),
            Failure::http(StatusCode::SERVICE_UNAVAILABLE),
            Failure::http(StatusCode::REQUEST_TIMEOUT),
        ] {
            assert!(failure.is_transient(), "{failure:?}");
        }
        for code in [
            StatusCode::BAD_REQUEST,
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::MOVED_PERMANENTLY,
        ] {
            assert!(!Failure::http(code).is_transient(), "{code}");
        }
        assert!(Failure::http(StatusCode::TOO_MANY_REQUESTS).is_transient());
        assert_eq!(
            Failure::http(StatusCode::FORBIDDEN).0,
            "the receiver answered HTTP 403 Forbidden"
        );
    }
}
