//! The Windmill API calls the bootstrap makes, with the status codes and texts a real server
//! answers: from Windmill's OpenAPI (`backend/windmill-api/openapi.yaml`), its server code
//! (`backend/windmill-api-users/src/users.rs` for login and tokens, `windmill-api-workspaces`,
//! `windmill-api-groups/src/folders.rs`, `windmill-api-scripts/src/scripts.rs`,
//! `windmill-api/src/settings.rs`) and as observed on Windmill CE 1.743.0. Errors are
//! `text/plain` `<Kind>: <message>` (`windmill-common/src/error.rs`); JSON bodies go with
//! `Content-Type: application/json` (a real server answers 415 without it).
//!
//! Every version from 1.509 (the first with route-level token scopes) to 1.788 is spoken to
//! alike; where their answers differ, both are read: `tokens/list` rows without `workspace_id`
//! before about 1.693, a refusal as 401 `Not authorized` before about 1.6xx (403 `Permission
//! denied` later; `Permission denied` with a 500 where older versions map it so), and the 400
//! `null value in column "__job_kind"` of a server still migrating its job tables after a fresh
//! start (1.509 to about 1.614: its startup "v2 finalization"), which is waited out.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use reqwest::{Client, Method, StatusCode};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::http::{self, Answer, Policy};
use safe_io::secret::Secret;

mod converge;
mod members;

pub use converge::{Created, NewScript, RemoteScript};
pub use members::{AddedUser, Folder, Member};

const SERVICE: &str = "Windmill";

/// What Windmill 1.509 to about 1.614 answers every job submission (a python3 script's creation
/// queues its dependency job) for the first seconds after a fresh start, until its startup
/// "v2 finalization" migration of the job tables ran (observed on 1.587: about 5 s).
pub const MIGRATING: &str = "null value in column \"__job_kind\"";

#[derive(Clone)]
pub struct Windmill {
    http: Client,
    base: String,
    policy: Policy,
    token: Option<Secret>,
    /// How long a server still migrating its job tables is waited for.
    migration_wait: Duration,
}

/// The outcome of a login with a password.
pub enum Login {
    Token(Secret),
    /// 400 `Bad request: Invalid login`: a wrong password or an unknown email (`users.rs`, `login`).
    Invalid,
}

/// One row of `GET /api/users/tokens/list`: the list shows only the first 10
/// characters of each token, and its scopes and workspace as they were minted (`null` for
/// none; observed on CE 1.743.0). Before about 1.693 the rows have no `workspace_id` at all
/// (server code): then `workspace_id` is `None`, the binding unknown; `Some(None)` is a token
/// bound to no workspace. Other fields are ignored; a row without a prefix (the column is
/// nullable before 1.7xx) cannot be deleted by its prefix and is skipped.
#[derive(Debug, Clone, Deserialize)]
pub struct TokenInfo {
    pub label: Option<String>,
    pub token_prefix: String,
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    pub workspace_id: Option<Option<String>>,
}

/// A field that is there, `null` or not (absent: `None` by `default`).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// A row of `tokens/list` as answered, its prefix possibly `null`.
#[derive(Deserialize)]
struct ListedRow {
    #[serde(default)]
    token_prefix: Option<String>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// The body of `tokens/create` (`NewToken` of the OpenAPI): no expiration, so the token lives
/// until a later run revokes it; scopes and workspace only when there are any (an empty list and
/// no list both mean the owner's full rights).
#[derive(Debug, Serialize)]
pub struct NewToken<'a> {
    pub label: &'a str,
    #[serde(skip_serializing_if = "no_scopes")]
    pub scopes: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<&'a str>,
}

/// The page size asked of `tokens/list` (every version answers up to 10000, 1000 by default).
pub const TOKEN_PAGE: usize = 1000;
/// The most pages of `tokens/list` read (100,000 tokens of one user): a bound no node nears, so
/// that a broken or hostile server that answers full pages forever ends the reading.
pub const MAX_TOKEN_PAGES: usize = 100;
/// The most bytes of `tokens/list` read over all its pages (each page is bounded by
/// [`http::MAX_BODY`] already; a real page of 1000 tokens is about 200 KB).
pub const MAX_TOKEN_BYTES: usize = 64 << 20;

fn no_scopes(scopes: &&[String]) -> bool {
    scopes.is_empty()
}

impl Windmill {
    /// `migration_wait`: how long the 400 of a server still migrating its job tables is retried.
    pub fn new(http: Client, base: &str, policy: Policy, migration_wait: Duration) -> Self {
        Windmill {
            http,
            base: base.to_owned(),
            policy,
            token: None,
            migration_wait,
        }
    }

    /// The same client, authenticated with `token` (sent as `Authorization: Bearer`).
    pub fn with_token(&self, token: &Secret) -> Self {
        Windmill {
            token: Some(token.clone()),
            ..self.clone()
        }
    }

    /// `call` names the request in messages: method and path, with `{…}` for parts that
    /// could hold anything secret.
    /// `secret` is one the path or body holds, besides the token.
    async fn request(
        &self,
        method: Method,
        path: &str,
        call: &str,
        body: Option<&Value>,
        secret: Option<&Secret>,
    ) -> Result<Answer> {
        let url = format!("{}{path}", self.base);
        let carried: Vec<&Secret> = self.token.iter().chain(secret).collect();
        let started = Instant::now();
        let mut delay = Duration::from_millis(250);
        loop {
            let answer = http::send_with(&self.policy, SERVICE, call, &carried, refusal_as_500, || {
                let mut request = self.http.request(method.clone(), &url);
                if let Some(token) = &self.token {
                    request = request.bearer_auth(token.expose());
                }
                if let Some(body) = body {
                    // `.json()` sets Content-Type: application/json.
                    request = request.json(body);
                }
                request
            })
            .await?;
            if answer.status != StatusCode::BAD_REQUEST || !answer.body.contains(MIGRATING) {
                return Ok(answer);
            }
            let waited = started.elapsed();
            if waited >= self.migration_wait {
                return Err(Error::StillMigrating {
                    call: call.to_owned(),
                    seconds: waited.as_secs_f64(),
                });
            }
            let pause = delay.min(self.migration_wait - waited);
            tracing::info!(
                "Windmill {call}: the server is still migrating its job tables (it answered 400 null value in column \"__job_kind\", as Windmill 1.587 does until its startup \"v2 finalization\" ran); again in {:.1} s",
                pause.as_secs_f64()
            );
            tokio::time::sleep(pause).await;
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    /// `GET /api/version`, once, without retries: the readiness wait has its own loop.
    pub async fn version_once(&self) -> std::result::Result<String, String> {
        let response = self
            .http
            .get(format!("{}/api/version", self.base))
            .send()
            .await
            .map_err(|e| http::describe(&e))?;
        let status = response.status();
        let body = http::read_body(response).await.map_err(|e| match e {
            http::BodyError::TooLarge => http::too_large(),
            http::BodyError::Read(e) => http::describe(&e),
        })?;
        if status == StatusCode::OK {
            Ok(body.trim().to_owned())
        } else {
            Err(format!("answered {}: {}", status.as_u16(), http::short(&body)))
        }
    }

    /// `POST /api/auth/login`: 200 with the session token as plain text, or 400 `Invalid login`.
    pub async fn login(&self, email: &str, password: &Secret) -> Result<Login> {
        let call = "POST /api/auth/login";
        let body = json!({"email": email, "password": password.expose()});
        let answer = self
            .request(Method::POST, "/api/auth/login", call, Some(&body), Some(password))
            .await?;
        match answer.status {
            StatusCode::OK => Ok(Login::Token(raw_token(call, answer)?)),
            StatusCode::BAD_REQUEST if answer.body.contains("Invalid login") => Ok(Login::Invalid),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `POST /api/auth/logout` with this client's token: 200 `logged out successfully`; the
    /// token's row is deleted.
    pub async fn logout(&self) -> Result<()> {
        let call = "POST /api/auth/logout";
        let answer = self.request(Method::POST, "/api/auth/logout", call, None, None).await?;
        expect_ok(call, answer)
    }

    /// `POST /api/users/tokens/create`: 201 with the new token as plain text.
    pub async fn create_token(&self, new: &NewToken<'_>) -> Result<Secret> {
        let call = "POST /api/users/tokens/create";
        let body = serde_json::to_value(new).expect("a NewToken serializes");
        let answer = self
            .request(Method::POST, "/api/users/tokens/create", call, Some(&body), None)
            .await?;
        match answer.status {
            StatusCode::CREATED | StatusCode::OK => raw_token(call, answer),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `GET /api/users/tokens/list`: the caller's own tokens, newest first, a page at a time
    /// (`users.rs`, `list_tokens`: `page` from 1, `per_page` at most 10000, 1000 by default, in
    /// every version from 1.509 to 1.788), all pages read. The tokens Windmill gives jobs
    /// (`exclude_ephemeral`, label `ephemeral-script`) are left out: there are one per job.
    ///
    /// A page shorter than asked is the last (no version caps `per_page` below [`TOKEN_PAGE`]);
    /// a page that brings no prefix not seen before ends the reading too, so that a server that
    /// ignores `page` and answers everything each time is read once, not forever. The reading is
    /// linear in the rows (prefixes seen are a hash set) and bounded by [`MAX_TOKEN_PAGES`] and
    /// [`MAX_TOKEN_BYTES`]: past either the call fails, naming the bound.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let call = "GET /api/users/tokens/list";
        let mut all: Vec<TokenInfo> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        let mut bytes = 0usize;
        for page in 1..=MAX_TOKEN_PAGES {
            let path = format!("/api/users/tokens/list?page={page}&per_page={TOKEN_PAGE}&exclude_ephemeral=true");
            let answer = self.request(Method::GET, &path, call, None, None).await?;
            bytes += answer.body.len();
            if bytes > MAX_TOKEN_BYTES {
                return Err(Error::Unexpected {
                    service: SERVICE,
                    call: call.into(),
                    detail: format!(
                        "more than {} MiB over {page} pages: not read further",
                        MAX_TOKEN_BYTES >> 20
                    ),
                });
            }
            let rows: Vec<ListedRow> = expect_json(call, answer)?;
            let short = rows.len() < TOKEN_PAGE;
            let mut new = 0usize;
            for row in rows {
                let Some(prefix) = row.token_prefix else { continue };
                if !seen.insert(prefix.clone()) {
                    continue;
                }
                let mut fields = row.rest;
                fields.insert("token_prefix".to_owned(), Value::String(prefix));
                let token: TokenInfo =
                    serde_json::from_value(Value::Object(fields)).map_err(|e| Error::Unexpected {
                        service: SERVICE,
                        call: call.into(),
                        detail: format!("a row is not the JSON the API documents: {e}"),
                    })?;
                all.push(token);
                new += 1;
            }
            if short || new == 0 {
                return Ok(all);
            }
        }
        Err(Error::Unexpected {
            service: SERVICE,
            call: call.into(),
            detail: format!("more than {MAX_TOKEN_PAGES} pages of {TOKEN_PAGE} tokens: not read further"),
        })
    }

    /// `POST /api/users/tokens/impersonate {"impersonate_email","label"}` (superadmin only): 201
    /// with a new token of that user, without scopes or workspace (`users.rs`, `impersonate`,
    /// 1.509 to 1.788; observed on 1.587 and 1.788).
    pub async fn impersonate(&self, email: &str, label: &str) -> Result<Secret> {
        let call = "POST /api/users/tokens/impersonate";
        let body = json!({"impersonate_email": email, "label": label});
        let answer = self
            .request(Method::POST, "/api/users/tokens/impersonate", call, Some(&body), None)
            .await?;
        match answer.status {
            StatusCode::CREATED | StatusCode::OK => raw_token(call, answer),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `GET /api/users/whoami`: the caller's instance-wide username.
    pub async fn username(&self) -> Result<String> {
        #[derive(Deserialize)]
        struct Me {
            username: Option<String>,
        }
        let call = "GET /api/users/whoami";
        let answer = self.request(Method::GET, "/api/users/whoami", call, None, None).await?;
        let me: Me = expect_json(call, answer)?;
        me.username.filter(|u| !u.is_empty()).ok_or_else(|| Error::Unexpected {
            service: SERVICE,
            call: call.into(),
            detail: "no username in the answer".into(),
        })
    }

    /// `DELETE /api/users/tokens/delete/{prefix}`: 200 text (which quotes the prefix; so
    /// may an error: the caller holds the prefix among the secrets it scrubs). The prefix comes
    /// from the server's `tokens/list`, not from the configuration: it is percent-encoded as one
    /// path segment, so that whatever it holds (`/`, `..`, `?`) the call stays this one.
    pub async fn delete_token(&self, prefix: &Secret) -> Result<()> {
        let call = "DELETE /api/users/tokens/delete/{prefix}";
        let segment = percent_encoding::utf8_percent_encode(prefix.expose(), percent_encoding::NON_ALPHANUMERIC);
        let path = format!("/api/users/tokens/delete/{segment}");
        let answer = self.request(Method::DELETE, &path, call, None, Some(prefix)).await?;
        expect_ok(call, answer)
    }

    /// The answer to `method path` with a JSON `body` (when given), and the call as named in
    /// messages: for the proof of a token's limit, whose status the caller judges. Transient
    /// failures are retried as for every call.
    pub async fn answer_to(&self, method: Method, path: &str, body: Option<&Value>) -> Result<(String, Answer)> {
        let call = format!("{method} {path}");
        let answer = self.request(method, path, &call, body, None).await?;
        Ok((call, answer))
    }
}

/// A token answered as the raw text body: 32 alphanumerics on a real server (`rd_string(32)`,
/// `users.rs`; every token observed). Nothing else is accepted: the token goes
/// verbatim into an HTTP header and into the nginx include, where a `"` or a `;` would end the
/// directive and start another.
fn raw_token(call: &str, answer: Answer) -> Result<Secret> {
    let token = answer.body.trim();
    if token.is_empty() || token.len() > 4096 || !token.chars().all(|c| c.is_ascii_alphanumeric()) {
        // The body is not shown: it may be a token after all.
        return Err(Error::Unexpected {
            service: SERVICE,
            call: call.into(),
            detail: "the answer is not a Windmill token, which is letters and digits only (the answer is not shown)"
                .into(),
        });
    }
    Ok(Secret::token(token))
}

/// Before Windmill mapped its `Permission denied` errors to 403 (about 1.6xx), it answered them
/// with a 500: the server's refusal, not a failure worth retrying.
fn refusal_as_500(status: u16, body: &str) -> bool {
    status == 500 && body.starts_with("Permission denied")
}

fn expect_ok(call: &str, answer: Answer) -> Result<()> {
    if answer.status.is_success() {
        Ok(())
    } else {
        Err(unexpected_status(call, answer))
    }
}

fn expect_json<T: serde::de::DeserializeOwned>(call: &str, answer: Answer) -> Result<T> {
    if answer.status != StatusCode::OK {
        return Err(unexpected_status(call, answer));
    }
    serde_json::from_str(&answer.body).map_err(|e| Error::Unexpected {
        service: SERVICE,
        call: call.into(),
        detail: format!("not the JSON the API documents: {e}"),
    })
}

fn unexpected_status(call: &str, answer: Answer) -> Error {
    Error::Status {
        service: SERVICE,
        call: call.into(),
        status: answer.status.as_u16(),
        message: answer.shown(),
        tries: answer.tries,
    }
}
