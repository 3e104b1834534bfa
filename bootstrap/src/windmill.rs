//! The Windmill API calls the bootstrap makes, with the status codes and texts a real server
//! answers: from Windmill's OpenAPI (`backend/windmill-api/openapi.yaml`), its server code
//! (`backend/windmill-api-users/src/users.rs` for login and tokens, `windmill-api-workspaces`,
//! `windmill-api-groups/src/folders.rs`, `windmill-api-scripts/src/scripts.rs`,
//! `windmill-api/src/settings.rs`) and as observed on Windmill CE 1.743.0. Errors are
//! `text/plain` `<Kind>: <message>` (`windmill-common/src/error.rs`); JSON bodies go with
//! `Content-Type: application/json` (a real server answers 415 without it).

use reqwest::{Client, Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::http::{self, Answer, Policy};
use safe_io::secret::Secret;

mod converge;

pub use converge::{Created, NewScript, RemoteScript};

const SERVICE: &str = "Windmill";

#[derive(Clone)]
pub struct Windmill {
    http: Client,
    base: String,
    policy: Policy,
    token: Option<Secret>,
}

/// The outcome of a login with a password.
pub enum Login {
    Token(Secret),
    /// 400 `Bad request: Invalid login`: a wrong password or an unknown email (`users.rs`, `login`).
    Invalid,
}

/// One row of `GET /api/users/tokens/list`: the list shows only the first 10
/// characters of each token, and its scopes and workspace as they were minted (`null` for
/// none; observed on CE 1.743.0).
#[derive(Debug, Deserialize)]
pub struct TokenInfo {
    pub label: Option<String>,
    pub token_prefix: String,
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    #[serde(default)]
    pub workspace_id: Option<String>,
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

/// The page size asked of `tokens/list`: the most every version answers in one page.
pub const TOKEN_PAGE: usize = 1000;
/// The most pages of `tokens/list` read (a million tokens): a bound, not a limit any node nears.
const MAX_TOKEN_PAGES: usize = 1000;

fn no_scopes(scopes: &&[String]) -> bool {
    scopes.is_empty()
}

impl Windmill {
    pub fn new(http: Client, base: &str, policy: Policy) -> Self {
        Windmill {
            http,
            base: base.to_owned(),
            policy,
            token: None,
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
        http::send(&self.policy, SERVICE, call, &carried, || {
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
        .await
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
    /// (`users.rs`, `list_tokens`: `page` from 1, `per_page` at most 1000 or 10000 depending on
    /// the version, a default of 100 or 1000), all pages read. The tokens Windmill gives jobs
    /// (`exclude_ephemeral`, label `ephemeral-script`) are left out: there are one per job.
    ///
    /// A page shorter than asked is the last (no version caps `per_page` below [`TOKEN_PAGE`]);
    /// a page that brings no prefix not seen before ends the reading too, so that a server that
    /// ignores `page` and answers everything each time is read once, not forever.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let call = "GET /api/users/tokens/list";
        let mut all: Vec<TokenInfo> = Vec::new();
        for page in 1..=MAX_TOKEN_PAGES {
            let path = format!("/api/users/tokens/list?page={page}&per_page={TOKEN_PAGE}&exclude_ephemeral=true");
            let answer = self.request(Method::GET, &path, call, None, None).await?;
            let listed: Vec<TokenInfo> = expect_json(call, answer)?;
            let short = listed.len() < TOKEN_PAGE;
            let before = all.len();
            for token in listed {
                if !all.iter().any(|seen| seen.token_prefix == token.token_prefix) {
                    all.push(token);
                }
            }
            if short || all.len() == before {
                return Ok(all);
            }
        }
        Err(Error::Unexpected {
            service: SERVICE,
            call: call.into(),
            detail: format!("more than {MAX_TOKEN_PAGES} pages of {TOKEN_PAGE} tokens: not read further"),
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
