//! One HTTP client for the whole run and the retry policy shared by the Windmill and OpenBao
//! clients.
//!
//! A call is retried, with exponential backoff and jitter (backon), when it got no answer
//! (refused, reset, timed out, the body cut off) or a 429/500/502/503/504; any other status is
//! returned to the caller, which knows what it means for that endpoint. Error texts are built
//! here without the URL (reqwest puts it in its messages, and a token-delete URL holds a token
//! prefix).
//!
//! An answer's body is read up to [`MAX_BODY`]; a longer one fails the call, naming the bound.
//! A server's text is cut short for a message ([`Answer::shown`]); the secrets the request
//! carried (its token, a password in its body) are scrubbed from it first, in every form, as
//! the final scrub of the whole message could no longer find a secret that the cut split.

use std::error::Error as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::{Client, RequestBuilder, StatusCode};

use safe_io::secret::{Secret, scrub};

use crate::config::Retry;
use crate::error::{Error, Result};

/// The most of an answer's body that is read: Windmill's and OpenBao's answers to the
/// bootstrap's calls are a few kilobytes (a script's content the largest). A server that sends
/// more is refused rather than read into memory whole.
pub const MAX_BODY: usize = 4 << 20;

/// A status and a body, read in full, and how many tries it took.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: String,
    /// Tries made for this answer: more than one when earlier ones got no answer or a 5xx/429.
    pub tries: usize,
    /// The secrets the request carried, to scrub from [`shown`](Self::shown).
    carried: Vec<Secret>,
}

impl Answer {
    /// The body for a message: the request's secrets scrubbed, then [`short`].
    pub fn shown(&self) -> String {
        short(&self.scrubbed())
    }

    /// The whole body, the request's secrets scrubbed (JSON stays JSON: the marker needs no
    /// escaping, and each secret is replaced in the form it was written in).
    pub fn scrubbed(&self) -> String {
        let carried: Vec<&Secret> = self.carried.iter().collect();
        scrub(&self.body, &carried)
    }
}

pub fn client(retry: &Retry) -> Result<Client> {
    // reqwest is built without a rustls crypto provider (so the Nix build needs no aws-lc and
    // cmake); `ring` becomes the process default. Already installed is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
        .timeout(retry.request_timeout)
        .connect_timeout(retry.request_timeout.min(Duration::from_secs(10)))
        // Answers are read, never followed: a redirect would carry the token elsewhere.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("fediversity-windmill-bootstrap/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Error::HttpClient(describe(&e)))
}

#[derive(Debug, Clone)]
pub struct Policy {
    attempts: usize,
    first_delay: Duration,
}

impl Policy {
    pub fn new(retry: &Retry) -> Self {
        Policy {
            attempts: retry.call_attempts.max(1),
            first_delay: retry.call_delay,
        }
    }

    fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.first_delay)
            .with_max_delay(Duration::from_secs(30).max(self.first_delay))
            .with_factor(2.0)
            .with_jitter()
            .with_max_times(self.attempts - 1)
    }
}

/// A try that failed: worth another when it got no answer or a 5xx/429 answer; not when the
/// answer was too large (a server that sends too much does so again).
struct Transient {
    detail: String,
    answer: Option<Answer>,
    too_large: bool,
}

impl Transient {
    fn no_answer(detail: String) -> Self {
        Transient {
            detail,
            answer: None,
            too_large: false,
        }
    }
}

/// Why a body was not read.
pub enum BodyError {
    /// Longer than [`MAX_BODY`]: not read further.
    TooLarge,
    /// Cut off, or another error of the transfer.
    Read(reqwest::Error),
}

/// The body of `response`, at most [`MAX_BODY`] bytes of it: a declared length over the bound
/// is refused before anything is read, an undeclared one as soon as the bound is passed.
pub async fn read_body(mut response: reqwest::Response) -> std::result::Result<String, BodyError> {
    if response.content_length().is_some_and(|len| len > MAX_BODY as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    // Both servers answer UTF-8; anything else is shown as replacement characters.
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The message for a body over the bound: names the bound, never the body.
pub fn too_large() -> String {
    format!(
        "the answer is larger than {} MiB, the most that is read",
        MAX_BODY >> 20
    )
}

/// Sends the request `build` makes, retrying transient failures; `service` and `call` (e.g.
/// `Windmill`, `POST /api/auth/login`) name it in messages and must hold no secret; `carried`
/// are the secrets the request holds (see [`Answer::shown`]).
pub async fn send(
    policy: &Policy,
    service: &'static str,
    call: &str,
    carried: &[&Secret],
    build: impl Fn() -> RequestBuilder,
) -> Result<Answer> {
    send_with(policy, service, call, carried, |_, _| false, build).await
}

/// [`send`], where `is_final(status, body)` marks answers of a transient status that are the
/// server's last word all the same (a refusal a server maps to 500), returned, not retried.
pub async fn send_with(
    policy: &Policy,
    service: &'static str,
    call: &str,
    carried: &[&Secret],
    is_final: impl Fn(u16, &str) -> bool,
    build: impl Fn() -> RequestBuilder,
) -> Result<Answer> {
    let carried: Vec<Secret> = carried.iter().map(|s| (*s).clone()).collect();
    let mut tries = 0usize;
    // Whether a try may have reached the server: anything but a connect that failed. A write
    // whose every try failed to connect did not happen; any other may have.
    let reached = std::sync::atomic::AtomicBool::new(false);
    let attempt = || {
        tries += 1;
        let request = build();
        let carried = carried.clone();
        let reached = &reached;
        let is_final = &is_final;
        async move {
            let response = request.send().await.map_err(|e| {
                if !e.is_connect() {
                    reached.store(true, Ordering::Relaxed);
                }
                Transient::no_answer(describe(&e))
            })?;
            reached.store(true, Ordering::Relaxed);
            let status = response.status();
            let body = read_body(response).await.map_err(|e| match e {
                BodyError::TooLarge => Transient {
                    detail: too_large(),
                    answer: None,
                    too_large: true,
                },
                BodyError::Read(e) => Transient::no_answer(describe(&e)),
            })?;
            // `tries` is set once the retries are over.
            let answer = Answer {
                status,
                body,
                tries: 0,
                carried,
            };
            if is_transient(status) && !is_final(status.as_u16(), &answer.body) {
                return Err(Transient {
                    detail: format!("answered {}", status.as_u16()),
                    answer: Some(answer),
                    too_large: false,
                });
            }
            Ok(answer)
        }
    };
    let result = attempt
        .retry(policy.backoff())
        .when(|failure: &Transient| !failure.too_large)
        .notify(|failure: &Transient, delay: Duration| {
            tracing::debug!(
                "{service} {call}: {}; retrying in {:.2} s",
                failure.detail,
                delay.as_secs_f64()
            );
        })
        .await;
    match result {
        Ok(answer) => Ok(Answer { tries, ..answer }),
        Err(Transient { too_large: true, .. }) => Err(Error::TooLarge {
            service,
            call: call.to_owned(),
            limit_mib: MAX_BODY >> 20,
        }),
        Err(Transient {
            answer: Some(answer), ..
        }) => Err(Error::Status {
            service,
            call: call.to_owned(),
            status: answer.status.as_u16(),
            message: answer.shown(),
            tries,
        }),
        Err(Transient {
            detail, answer: None, ..
        }) => Err(Error::Transport {
            service,
            call: call.to_owned(),
            detail,
            tries,
            reached: reached.load(Ordering::Relaxed),
        }),
    }
}

fn is_transient(status: StatusCode) -> bool {
    matches!(status.as_u16(), 429 | 500 | 502 | 503 | 504)
}

/// reqwest's message without the URL, followed by its causes (hyper's "connection closed
/// before message completed", the OS error of a refused connect).
pub fn describe(error: &reqwest::Error) -> String {
    let kind = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else if error.is_body() || error.is_decode() {
        "the answer was cut off"
    } else if error.is_request() {
        "the request failed"
    } else {
        "HTTP error"
    };
    crate::error::with_causes(kind, error.source())
}

/// A server's error text, on one line and at most 300 characters.
pub fn short(body: &str) -> String {
    let one_line: String = body
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut text: String = one_line.chars().take(300).collect();
    if one_line.chars().count() > 300 {
        text.push('…');
    }
    if text.is_empty() {
        "(empty body)".to_owned()
    } else {
        text
    }
}
