//! Writing one KV secret the way `bao kv put <path> <field>=<value>` does (OpenBao's
//! `command/kv_put.go` and `command/kv_helpers.go`, `kvPreflightVersionRequest`): ask
//! `sys/internal/ui/mounts/<path>` which mount serves the path and its KV version, then PUT the
//! whole secret, under `<mount>/data/<rest>` for KV v2 or at the path itself for KV v1.
//!
//! Status codes decide (OpenBao's HTTP API documentation); OpenBao's `errors` texts only make
//! the message. 5xx and 429 (503 = sealed) are retried like every other call; 403 fails at
//! once, as in the CLI. The token is sent in `X-Vault-Token` and appears in no message.

use reqwest::{Client, Method, StatusCode};
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::http::{self, Answer, Policy};
use safe_io::secret::Secret;

const SERVICE: &str = "OpenBao";

pub struct OpenBao {
    http: Client,
    addr: String,
    token: Option<Secret>,
    policy: Policy,
}

/// Where a secret is to be written, found before the write ([`OpenBao::target`]).
#[derive(Debug)]
pub struct Target {
    mount: Option<String>,
    version: u8,
    /// Where the data is written: `<mount>/data/<rest>` (KV v2) or the path (KV v1).
    api_path: String,
    existed_v1: Option<bool>,
}

/// Where and how a secret was written.
#[derive(Debug, PartialEq, Eq)]
pub struct Written {
    /// The mount, with its trailing slash (`secret/`), or `None` when the preflight answered
    /// 404 (an old server: the CLI then assumes KV v1 at the path).
    pub mount: Option<String>,
    pub version: u8,
    /// Whether the secret existed before the write; `None` when that cannot be known (KV v1
    /// with a token that may not read the secret).
    pub existed: Option<bool>,
}

impl OpenBao {
    /// Without a token, no token header is sent: an agent's API proxy with auto-auth adds its own
    /// (OpenBao agent's `api_proxy` with `use_auto_auth_token`).
    pub fn new(http: Client, addr: &str, token: Option<Secret>, policy: Policy) -> Self {
        OpenBao {
            http,
            addr: addr.to_owned(),
            token,
            policy,
        }
    }

    /// `secret` is one the body holds, besides the token.
    async fn request(
        &self,
        method: Method,
        api_path: &str,
        call: &str,
        body: Option<&Value>,
        secret: Option<&Secret>,
    ) -> Result<Answer> {
        let url = format!("{}/v1/{api_path}", self.addr);
        let carried: Vec<&Secret> = self.token.iter().chain(secret).collect();
        http::send(&self.policy, SERVICE, call, &carried, || {
            // The CLI and SDK always send X-Vault-Request; agent listeners may require it (`api/client.go`).
            let mut request = self
                .http
                .request(method.clone(), &url)
                .header("X-Vault-Request", "true");
            if let Some(token) = &self.token {
                request = request.header("X-Vault-Token", token.expose());
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            request
        })
        .await
    }

    /// The preflight of `bao kv put`: `(mount, version)`, or `None` on 404.
    pub async fn mount_of(&self, path: &str) -> Result<Option<(String, u8)>> {
        let call = format!("GET /v1/sys/internal/ui/mounts/{path}");
        let answer = self
            .request(
                Method::GET,
                &format!("sys/internal/ui/mounts/{path}"),
                &call,
                None,
                None,
            )
            .await?;
        match answer.status {
            StatusCode::OK => {
                let body: Value = serde_json::from_str(&answer.body).map_err(|_| Error::Unexpected {
                    service: SERVICE,
                    call: call.clone(),
                    detail: "the preflight answer is not JSON".into(),
                })?;
                let Some(mount) = body.pointer("/data/path").and_then(Value::as_str) else {
                    return Err(Error::Unexpected {
                        service: SERVICE,
                        call,
                        detail: "the preflight answer has no data.path".into(),
                    });
                };
                // A missing or null version means KV v1, as in the CLI.
                let version = match body.pointer("/data/options/version").and_then(Value::as_str) {
                    Some("2") => 2,
                    _ => 1,
                };
                Ok(Some((mount.to_owned(), version)))
            }
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(status_error(&call, &answer)),
        }
    }

    /// `kv put`: the secret becomes exactly `{field: value}`.
    pub async fn put(&self, path: &str, field: &str, value: &Secret) -> Result<Written> {
        let target = self.target(path).await?;
        self.write(&target, field, value).await
    }

    /// What `kv put` finds out before it writes: the mount and KV version of `path`, and on KV v1
    /// whether the secret exists. Nothing is written.
    pub async fn target(&self, path: &str) -> Result<Target> {
        let found = self.mount_of(path).await?;
        let (mount, version) = match &found {
            Some((mount, version)) => (Some(mount.clone()), *version),
            None => (None, 1),
        };
        let api_path = data_path(path, mount.as_deref(), version)?;
        // KV v1 says nothing about the secret in its answer to the write: read it first. A token
        // that may only write (a 403 here) leaves it unknown.
        let existed_v1 = if version == 2 {
            None
        } else {
            self.exists_v1(&api_path).await?
        };
        Ok(Target {
            mount,
            version,
            api_path,
            existed_v1,
        })
    }

    /// The write of `kv put` to `target`: the secret becomes exactly `{field: value}`.
    pub async fn write(&self, target: &Target, field: &str, value: &Secret) -> Result<Written> {
        let Target {
            mount,
            version,
            api_path,
            existed_v1,
        } = target;
        let body = if *version == 2 {
            json!({"data": {field: value.expose()}, "options": {}})
        } else {
            json!({field: value.expose()})
        };
        let call = format!("PUT /v1/{api_path}");
        let answer = self
            .request(Method::PUT, api_path, &call, Some(&body), Some(value))
            .await?;
        // 200 (KV v2, with version metadata) and 204 (KV v1, empty) both mean written.
        if !answer.status.is_success() {
            return Err(status_error(&call, &answer));
        }
        let existed = if *version == 2 {
            // KV v2 answers the version it wrote: the first one means there was none before.
            let written: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
            written.pointer("/data/version").and_then(Value::as_u64).map(|v| v > 1)
        } else {
            *existed_v1
        };
        Ok(Written {
            mount: mount.clone(),
            version: *version,
            existed,
        })
    }

    /// `kv get`: the value of `field` in the secret at `path` (its newest version on KV v2), or
    /// `None` when there is no such secret or field. For `--check`: the token must be allowed to
    /// read the path.
    pub async fn get(&self, path: &str, field: &str) -> Result<Option<Secret>> {
        let (mount, version) = match self.mount_of(path).await? {
            Some((mount, version)) => (Some(mount), version),
            None => (None, 1),
        };
        let api_path = data_path(path, mount.as_deref(), version)?;
        let call = format!("GET /v1/{api_path}");
        let answer = self.request(Method::GET, &api_path, &call, None, None).await?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => {
                // The body holds the secret: a message never shows it.
                let body: Value = serde_json::from_str(&answer.body).map_err(|_| Error::Unexpected {
                    service: SERVICE,
                    call: call.clone(),
                    detail: "the answer is not JSON (not shown)".into(),
                })?;
                let data = if version == 2 {
                    body.pointer("/data/data")
                } else {
                    body.pointer("/data")
                };
                match data.and_then(|d| d.get(field)) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(value)) => Ok(Some(Secret::token(value.as_str()))),
                    Some(_) => Err(Error::Unexpected {
                        service: SERVICE,
                        call,
                        detail: format!("the field {field} is not a string (not shown)"),
                    }),
                }
            }
            _ => Err(status_error(&call, &answer)),
        }
    }

    /// `GET /v1/<path>` of a KV v1 secret: 200 (it exists), 404 (it does not), or `None` when
    /// the token may not read it.
    async fn exists_v1(&self, api_path: &str) -> Result<Option<bool>> {
        let call = format!("GET /v1/{api_path}");
        let answer = self.request(Method::GET, api_path, &call, None, None).await?;
        match answer.status {
            StatusCode::OK => Ok(Some(true)),
            StatusCode::NOT_FOUND => Ok(Some(false)),
            StatusCode::FORBIDDEN => Ok(None),
            _ => Err(status_error(&call, &answer)),
        }
    }
}

/// Where the secret's data is read and written: `<mount>/data/<rest>` on KV v2, the path itself
/// on KV v1 (and when no mount was found, as the CLI assumes).
fn data_path(path: &str, mount: Option<&str>, version: u8) -> Result<String> {
    match (mount, version) {
        (Some(mount), 2) => {
            let rest = path
                .strip_prefix(mount)
                .or_else(|| path.strip_prefix(mount.trim_end_matches('/')))
                .unwrap_or("");
            let rest = rest.trim_start_matches('/');
            if rest.is_empty() {
                return Err(Error::PathIsMount {
                    path: path.to_owned(),
                    mount: mount.to_owned(),
                });
            }
            Ok(format!("{}data/{rest}", ensure_slash(mount)))
        }
        _ => Ok(path.to_owned()),
    }
}

fn ensure_slash(mount: &str) -> String {
    if mount.ends_with('/') {
        mount.to_owned()
    } else {
        format!("{mount}/")
    }
}

/// `{"errors": [...]}` joined, or the `warnings` (a v2 path without `data/` answers 404 with
/// warnings only), with a hint for the statuses an operator has to act on.
fn status_error(call: &str, answer: &Answer) -> Error {
    let body: Value = serde_json::from_str(&answer.scrubbed()).unwrap_or(Value::Null);
    let texts = |key: &str| -> Vec<String> {
        body.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut parts = texts("errors");
    if parts.iter().all(|p| p.is_empty()) {
        parts = texts("warnings");
    }
    let mut message = parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if message.is_empty() {
        message = answer.shown();
    }
    let hint = match answer.status.as_u16() {
        403 => " (the token is missing, invalid or lacks a policy for this path)",
        503 => " (OpenBao is sealed or in maintenance)",
        _ => "",
    };
    Error::Status {
        service: SERVICE,
        call: call.into(),
        status: answer.status.as_u16(),
        message: format!("{message}{hint}"),
        tries: answer.tries,
    }
}
