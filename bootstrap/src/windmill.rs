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

/// What `GET /api/w/{w}/scripts/get/p/{path}` answers: the newest row, archived or not.
#[derive(Debug, Deserialize)]
pub struct RemoteScript {
    pub hash: String,
    pub content: String,
    pub language: String,
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub archived: bool,
    /// Set when the version's dependency job failed (`null` otherwise).
    #[serde(default)]
    pub lock_error_logs: Option<String>,
}

/// The body of `scripts/create`: the required fields (`path, summary, description, content,
/// language`) and the parent. No `lock`: for python3 the server queues a dependency job that
/// fills it in, so it is never sent nor compared.
#[derive(Debug, Serialize)]
pub struct NewScript<'a> {
    pub path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_hash: Option<&'a str>,
    pub summary: &'a str,
    pub description: &'a str,
    pub content: &'a str,
    pub language: &'a str,
}

/// How Windmill answered `scripts/create` (`scripts.rs`, `create_script`; observed on 1.743.0).
#[derive(Debug)]
pub enum Created {
    /// 201 with the new 16-hex hash.
    Hash(String),
    /// 400 "A script with same hash … already exists": this exact request was already applied
    /// (a retry after an answer that was lost).
    SameHashExists,
    /// 400 "lineage must be linear" or "Path conflict": someone else wrote a version between our
    /// read and our write.
    Conflict(String),
}

fn no_scopes(scopes: &&[String]) -> bool {
    scopes.is_empty()
}

impl Windmill {
    pub fn new(http: Client, base: &str, policy: Policy) -> Self {
        Windmill { http, base: base.to_owned(), policy, token: None }
    }

    /// The same client, authenticated with `token` (sent as `Authorization: Bearer`).
    pub fn with_token(&self, token: &Secret) -> Self {
        Windmill { token: Some(token.clone()), ..self.clone() }
    }

    /// `call` names the request in messages: method and path, with `{…}` for parts that
    /// could hold anything secret.
    /// `secret` is one the path or body holds, besides the token.
    async fn request(&self, method: Method, path: &str, call: &str, body: Option<&Value>, secret: Option<&Secret>) -> Result<Answer> {
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
        if status == StatusCode::OK { Ok(body.trim().to_owned()) } else { Err(format!("answered {}: {}", status.as_u16(), http::short(&body))) }
    }

    /// `POST /api/auth/login`: 200 with the session token as plain text, or 400 `Invalid login`.
    pub async fn login(&self, email: &str, password: &Secret) -> Result<Login> {
        let call = "POST /api/auth/login";
        let body = json!({"email": email, "password": password.expose()});
        let answer = self.request(Method::POST, "/api/auth/login", call, Some(&body), Some(password)).await?;
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
        let answer = self.request(Method::POST, "/api/users/tokens/create", call, Some(&body), None).await?;
        match answer.status {
            StatusCode::CREATED | StatusCode::OK => raw_token(call, answer),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let call = "GET /api/users/tokens/list";
        let answer = self.request(Method::GET, "/api/users/tokens/list", call, None, None).await?;
        expect_json(call, answer)
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

    /// The status of `GET /api/w/{workspace}/{route}` (a harmless read), and the call as named
    /// in messages. Transient failures are retried as for every call; the caller judges the rest.
    pub async fn status_of_read(&self, workspace: &str, route: &str) -> Result<(String, Answer)> {
        let call = format!("GET /api/w/{workspace}/{route}");
        let answer = self.request(Method::GET, &format!("/api/w/{workspace}/{route}"), &call, None, None).await?;
        Ok((call, answer))
    }

    /// `POST /api/workspaces/exists {"id"}`: a JSON bool (archived workspaces count).
    pub async fn workspace_exists(&self, id: &str) -> Result<bool> {
        let call = "POST /api/workspaces/exists";
        let answer = self.request(Method::POST, "/api/workspaces/exists", call, Some(&json!({"id": id})), None).await?;
        expect_json(call, answer)
    }

    /// `POST /api/workspaces/create {"id","name"}`: 200 `Created workspace <id>`. `username` is
    /// left out: servers that automate usernames reject it (`workspaces.rs`, `create_workspace`). A 400 "already
    /// exists" is success too: someone else created it since it was looked up, or an earlier
    /// try of this call did and its answer was lost; the two cannot be told apart.
    pub async fn create_workspace(&self, id: &str, name: &str) -> Result<()> {
        let call = "POST /api/workspaces/create";
        let answer = self.request(Method::POST, "/api/workspaces/create", call, Some(&json!({"id": id, "name": name})), None).await?;
        match answer.status {
            StatusCode::OK | StatusCode::CREATED => Ok(()),
            StatusCode::BAD_REQUEST if answer.body.contains("already exists") => Ok(()),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `GET /api/w/{w}/folders/get/{name}`: 200 or 404.
    pub async fn folder_exists(&self, workspace: &str, name: &str) -> Result<bool> {
        let call = "GET /api/w/{workspace}/folders/get/{name}";
        let answer = self.request(Method::GET, &format!("/api/w/{workspace}/folders/get/{name}"), call, None, None).await?;
        match answer.status {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `POST /api/w/{w}/folders/create {"name"}`: 200 `Created folder <name>`; a 400 "already
    /// exists" is success too, as for the workspace.
    pub async fn create_folder(&self, workspace: &str, name: &str) -> Result<()> {
        let call = "POST /api/w/{workspace}/folders/create";
        let answer = self.request(Method::POST, &format!("/api/w/{workspace}/folders/create"), call, Some(&json!({"name": name})), None).await?;
        match answer.status {
            StatusCode::OK | StatusCode::CREATED => Ok(()),
            StatusCode::BAD_REQUEST if answer.body.contains("already exists") => Ok(()),
            _ => Err(unexpected_status(call, answer)),
        }
    }

    /// `GET /api/w/{w}/scripts/get/p/{path}`: the newest version, or `None` on 404
    /// (`Not found: Script not found at path …`).
    pub async fn get_script(&self, workspace: &str, path: &str) -> Result<Option<RemoteScript>> {
        let call = format!("GET /api/w/{workspace}/scripts/get/p/{path}");
        let answer = self.request(Method::GET, &format!("/api/w/{workspace}/scripts/get/p/{path}"), &call, None, None).await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            _ => expect_json(&call, answer).map(Some),
        }
    }

    pub async fn create_script(&self, workspace: &str, script: &NewScript<'_>) -> Result<Created> {
        let call = format!("POST /api/w/{workspace}/scripts/create ({})", script.path);
        let body = serde_json::to_value(script).expect("a NewScript serializes");
        let answer = self.request(Method::POST, &format!("/api/w/{workspace}/scripts/create"), &call, Some(&body), None).await?;
        match answer.status {
            StatusCode::CREATED | StatusCode::OK => {
                let hash = answer.body.trim().to_owned();
                if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(Error::Unexpected { service: SERVICE, call, detail: "the answer is not a script hash".into() });
                }
                Ok(Created::Hash(hash))
            }
            StatusCode::BAD_REQUEST if answer.body.contains("same hash") => Ok(Created::SameHashExists),
            StatusCode::BAD_REQUEST if answer.body.contains("lineage must be linear") || answer.body.contains("Path conflict") => {
                Ok(Created::Conflict(answer.shown()))
            }
            _ => Err(unexpected_status(&call, answer)),
        }
    }

    /// `GET /api/settings/global/{key}`: the stored JSON value, `null` when unset.
    pub async fn get_setting(&self, key: &str) -> Result<Value> {
        let call = format!("GET /api/settings/global/{key}");
        let answer = self.request(Method::GET, &format!("/api/settings/global/{key}"), &call, None, None).await?;
        expect_json(&call, answer)
    }

    /// `POST /api/settings/global/{key} {"value": …}`: 200 with an empty body.
    pub async fn set_setting(&self, key: &str, value: &Value) -> Result<()> {
        let call = format!("POST /api/settings/global/{key}");
        let answer = self.request(Method::POST, &format!("/api/settings/global/{key}"), &call, Some(&json!({"value": value})), None).await?;
        expect_ok(&call, answer)
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
            detail: "the answer is not a Windmill token, which is letters and digits only (the answer is not shown)".into(),
        });
    }
    Ok(Secret::token(token))
}

fn expect_ok(call: &str, answer: Answer) -> Result<()> {
    if answer.status.is_success() { Ok(()) } else { Err(unexpected_status(call, answer)) }
}

fn expect_json<T: serde::de::DeserializeOwned>(call: &str, answer: Answer) -> Result<T> {
    if answer.status != StatusCode::OK {
        return Err(unexpected_status(call, answer));
    }
    serde_json::from_str(&answer.body)
        .map_err(|e| Error::Unexpected { service: SERVICE, call: call.into(), detail: format!("not the JSON the API documents: {e}") })
}

fn unexpected_status(call: &str, answer: Answer) -> Error {
    Error::Status { service: SERVICE, call: call.into(), status: answer.status.as_u16(), message: answer.shown(), tries: answer.tries }
}
