//! Auth and tokens: login against the real `password` table, sessions, API tokens, the auth
//! cache. Follows Windmill's server code (`backend/windmill-api-users/src/users.rs`: `login`,
//! `create_token`; `windmill-api-auth/src/auth.rs`: token resolution) and what CE 1.743.0
//! answered (the "Auth and tokens" rows: status codes, texts, `tokens/list` fields, the 120 s
//! cache that keeps a deleted non-session token working). A token's scopes and workspace are
//! checked on every authenticated call (`scopes.rs`). `tokens/impersonate` (server code, the same
//! in every profile; observed on 1.587 and 1.788): the superadmin mints a token of another user,
//! unscoped and unbound, which that user can then mint its own tokens with.

use std::time::Instant;

use argon2::{Argon2, PasswordHash, PasswordVerifier};
use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::reply::{Call, Reply, absent, json_reply, random_token, text};
use super::scopes;
use super::server::Shared;
use super::{TokenRow, UserRow};

/// The page size of `tokens/list` when none is asked for, and the most a page holds (server
/// code: `paginate`, `DEFAULT_PER_PAGE` and `MAX_PER_PAGE` of `windmill-common/src/utils.rs`,
/// the same from 1.509 to 1.788).
pub const DEFAULT_PAGE: usize = 1000;
pub const MAX_PAGE: usize = 10000;

/// The fake's "now", as its answers give times.
const NOW: &str = "2026-11-29T12:00:00Z";

/// `/api/auth/…` and `/api/users/…`.
pub(super) async fn route(shared: &Shared, call: &Call<'_>, segments: &[&str]) -> Result<Reply, Reply> {
    match (call.method, segments) {
        ("POST", ["auth", "login"]) => login(shared, call).await,
        ("POST", ["auth", "logout"]) => logout(shared, call),
        ("GET", ["users", "whoami"]) => {
            let user = authed(shared, call)?;
            let username = username_of(shared, &user);
            Ok(json_reply(
                &json!({"email": user.email, "login_type": "password", "super_admin": user.super_admin, "verified": true, "username": username}),
            ))
        }
        // observed: the OSS stub.
        ("POST", ["users", "setpassword"]) => {
            authed(shared, call)?;
            Ok(text(
                500,
                "Internal: Not implemented in Windmill's Open Source repository @users_oss.rs:53:9",
            ))
        }
        ("POST", ["users", "tokens", "create"]) => create_token(shared, call),
        ("POST", ["users", "tokens", "impersonate"]) => impersonate(shared, call),
        ("GET", ["users", "tokens", "list"]) => list_tokens(shared, call),
        ("DELETE", ["users", "tokens", "delete", prefix]) => delete_tokens(shared, call, prefix),
        _ => Ok(absent()),
    }
}

/// The caller, from the token: 401 `Unauthorized` without one, `Not authorized: Unauthorized`
/// with an unknown one (observed); then the token's binding and scopes against the route.
pub(super) fn authed(shared: &Shared, call: &Call) -> Result<TokenRow, Reply> {
    let row = resolve(shared, call)?;
    let (enforce, profile) = {
        let state = shared.state();
        (state.enforce_scopes, state.profile)
    };
    scopes::check(&row, call, enforce, profile)?;
    Ok(row)
}

/// Who calls a route of a workspace: the token, and what its owner is there.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub token: TokenRow,
    pub username: String,
    /// A superadmin, or an admin of the workspace.
    pub is_admin: bool,
    pub operator: bool,
}

impl Caller {
    /// The `created_by` of the jobs it starts: a labeled token's `label-<label>` (before 1.788,
    /// observed on 1.743), the user's name for a session (and on 1.788, observed).
    pub fn created_by(&self, shared: &Shared) -> String {
        let label = &self.token.label;
        if label == "session" || label.is_empty() || shared.state().profile.created_by_is_the_user() {
            self.username.clone()
        } else {
            format!("label-{label}")
        }
    }

    pub fn permissioned_as(&self) -> String {
        format!("u/{}", self.username)
    }
}

/// [`authed`], then the token's owner as a member of `workspace` (server code, token
/// resolution): a superadmin is admin everywhere; anyone else must be a member who is not
/// disabled (the fake answers 401 otherwise; the text was not checked on a real server).
pub(super) fn caller(shared: &Shared, call: &Call, workspace: &str) -> Result<Caller, Reply> {
    let token = authed(shared, call)?;
    if token.super_admin {
        let username = username_of(shared, &token);
        return Ok(Caller {
            token,
            username,
            is_admin: true,
            operator: false,
        });
    }
    let member: Option<UserRow> = shared
        .state()
        .users
        .get(&(workspace.to_owned(), token.email.clone()))
        .cloned();
    match member {
        Some(user) if !user.disabled => Ok(Caller {
            token,
            username: user.username,
            is_admin: user.is_admin,
            operator: user.operator,
        }),
        _ => Err(text(401, "Not authorized: Unauthorized")),
    }
}

/// The instance-wide username of a token's owner: `admin` for the seed superadmin (its
/// `password` row), the derived one of anyone added to a workspace.
fn username_of(shared: &Shared, token: &TokenRow) -> String {
    if token.email == crate::postgres::ADMIN_EMAIL {
        return "admin".to_owned();
    }
    shared
        .state()
        .usernames
        .get(&token.email)
        .cloned()
        .unwrap_or_else(|| token.email.split('@').next().unwrap_or_default().to_owned())
}

/// The token's row, through the auth cache (module comment): an entry younger than its
/// lifetime answers without looking at the `token` table.
fn resolve(shared: &Shared, call: &Call) -> Result<TokenRow, Reply> {
    let Some(token) = call.token else {
        return Err(text(401, "Unauthorized"));
    };
    let mut state = shared.state();
    let ttl = state.auth_cache_ttl;
    if let Some((row, cached_at)) = state.auth_cache.get(token) {
        if cached_at.elapsed() < ttl {
            return Ok(row.clone());
        }
    }
    // The fake's clock stands still at the `created_at` it answers.
    let live = |t: &&TokenRow| t.token == token && t.expiration.as_deref().is_none_or(|e| e > NOW);
    match state.tokens.iter().find(live).cloned() {
        Some(row) => {
            state.auth_cache.insert(token.to_owned(), (row.clone(), Instant::now()));
            Ok(row)
        }
        None => {
            state.auth_cache.remove(token);
            Err(text(401, "Not authorized: Unauthorized"))
        }
    }
}

/// `require_super_admin` (server code).
pub(super) fn require_super_admin(user: &TokenRow) -> Result<(), Reply> {
    if user.super_admin {
        Ok(())
    } else {
        Err(text(
            401,
            "Not authorized: This endpoint requires the caller to be a super admin",
        ))
    }
}

async fn login(shared: &Shared, call: &Call<'_>) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Login {
        email: String,
        password: String,
    }
    let login: Login = call.json()?;
    // server code: lower-cased email; the row with login_type 'password'.
    let email = login.email.to_lowercase();
    let row = {
        let (client, connection) = tokio_postgres::connect(&shared.dsn, tokio_postgres::NoTls)
            .await
            .map_err(|e| text(500, format!("Internal: cannot reach the database: {e}")))?;
        tokio::spawn(connection);
        client
            .query_opt(
                "SELECT password_hash, super_admin FROM password WHERE email = $1 AND login_type = 'password'",
                &[&email],
            )
            .await
            .map_err(|e| text(500, format!("Internal: {e}")))?
    };
    let invalid = || text(400, "Bad request: Invalid login");
    let Some(row) = row else { return Err(invalid()) };
    let hash: Option<String> = row.get(0);
    let super_admin: bool = row.get(1);
    let Some(hash) = hash else { return Err(invalid()) };
    // server code: a PHC string parsed with PasswordHash::new (malformed → 500, observed), verified
    // with Argon2::default(), parameters taken from the string.
    let verified = tokio::task::spawn_blocking(move || {
        let parsed = PasswordHash::new(&hash).map_err(|e| e.to_string())?;
        Ok::<bool, String>(
            Argon2::default()
                .verify_password(login.password.as_bytes(), &parsed)
                .is_ok(),
        )
    })
    .await
    .expect("verify task");
    match verified {
        Err(e) => Err(text(500, format!("Internal: {e} @users.rs:1968:50"))),
        Ok(false) => Err(invalid()),
        Ok(true) => {
            // A session token, label `session`, returned raw and as the `token` cookie (observed).
            let token = random_token();
            let mut state = shared.state();
            state.tokens.push(TokenRow {
                token: token.clone(),
                label: "session".into(),
                email,
                super_admin,
                scopes: None,
                workspace_id: None,
                expiration: None,
            });
            state.ever_minted.push(token.clone());
            Ok(Response::builder()
                .status(200)
                .header("content-type", "text/plain; charset=utf-8")
                .header("set-cookie", format!("token={token}; HttpOnly; SameSite=Lax; Path=/"))
                .body(Full::new(Bytes::from(token)))
                .expect("response"))
        }
    }
}

/// observed: deletes the caller's token row, whatever its label, and answers 200.
fn logout(shared: &Shared, call: &Call) -> Result<Reply, Reply> {
    let Some(token) = call.token else {
        return Err(text(401, "Unauthorized"));
    };
    shared.state().delete_tokens(|t| t.token == token);
    Ok(text(200, "logged out successfully"))
}

/// server code, observed: labels are free text and not unique; `scopes` and `workspace_id` are
/// stored as given (`create_token_internal`); 201 with the raw token.
fn create_token(shared: &Shared, call: &Call) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct NewToken {
        label: Option<String>,
        scopes: Option<Vec<String>>,
        workspace_id: Option<String>,
        expiration: Option<String>,
    }
    let user = authed(shared, call)?;
    let new: NewToken = call.json()?;
    let mut state = shared.state();
    let token = if state.next_tokens.is_empty() {
        random_token()
    } else {
        state.next_tokens.remove(0)
    };
    state.tokens.push(TokenRow {
        token: token.clone(),
        label: new.label.unwrap_or_default(),
        email: user.email.clone(),
        super_admin: user.super_admin,
        scopes: new.scopes,
        workspace_id: new.workspace_id,
        expiration: new.expiration,
    });
    state.ever_minted.push(token.clone());
    Ok(text(201, token))
}

/// server code (`impersonate`, the same from 1.509 to 1.788; observed on 1.587 and 1.788):
/// superadmin only; a token of `impersonate_email` with the given label, no scopes, no
/// workspace, `super_admin` as that email's `password` row says (none: false); 201 with it.
fn impersonate(shared: &Shared, call: &Call) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Impersonate {
        label: Option<String>,
        impersonate_email: Option<String>,
        expiration: Option<String>,
    }
    let user = authed(shared, call)?;
    require_super_admin(&user)?;
    let new: Impersonate = call.json()?;
    let Some(email) = new.impersonate_email else {
        return Err(text(400, "Bad request: impersonate_username is required"));
    };
    let token = random_token();
    let mut state = shared.state();
    let super_admin = email == crate::postgres::ADMIN_EMAIL;
    state.tokens.push(TokenRow {
        token: token.clone(),
        label: new.label.unwrap_or_default(),
        email,
        super_admin,
        scopes: None,
        workspace_id: None,
        expiration: new.expiration,
    });
    state.ever_minted.push(token.clone());
    state.impersonations.push(token.clone());
    Ok(text(201, token))
}

/// observed: only the first 10 characters come back. server code (`list_tokens`): the caller's
/// own tokens, newest first, a page at a time (`page` from 1, `per_page` at most
/// [`MAX_PAGE`], [`DEFAULT_PAGE`] when not given), `exclude_ephemeral=true` leaving out the
/// tokens Windmill gives jobs (label `ephemeral-script`). The rows carry `workspace_id` and
/// `read_only` only on the profiles that list them (1.509 and 1.587 do not: source).
fn list_tokens(shared: &Shared, call: &Call) -> Result<Reply, Reply> {
    let user = authed(shared, call)?;
    let number = |name: &str, default: usize| match call.param(name) {
        None => Ok(default),
        Some(value) => value
            .parse::<usize>()
            .map_err(|e| text(400, format!("Failed to deserialize query string: {name}: {e}"))),
    };
    let page = number("page", 1)?.max(1);
    let per_page = number("per_page", DEFAULT_PAGE)?.clamp(1, MAX_PAGE);
    let exclude_ephemeral = call.param("exclude_ephemeral") == Some("true");
    let state = shared.state();
    if let Some(label_len) = state.endless_token_pages {
        // A full page of tokens never seen, whatever page is asked for.
        let label = "x".repeat(label_len);
        let list: Vec<Value> = (0..per_page)
            .map(|_| {
                json!({"label": label, "token_prefix": random_token()[..10], "expiration": null, "created_at": NOW,
                            "last_used_at": NOW, "scopes": null})
            })
            .collect();
        return Ok(json_reply(&Value::Array(list)));
    }
    let with_workspace = state.profile.lists_token_workspace();
    let list: Vec<Value> = state
        .tokens
        .iter()
        .rev()
        .filter(|t| t.email == user.email && !(exclude_ephemeral && t.label == "ephemeral-script"))
        .skip((page - 1) * per_page)
        .take(per_page)
        .map(|t| {
            let mut row = json!({"label": t.label, "token_prefix": &t.token[..10], "expiration": t.expiration, "created_at": NOW,
                   "last_used_at": "2026-11-29T12:00:00Z", "scopes": t.scopes});
            if with_workspace {
                row["workspace_id"] = json!(t.workspace_id);
                row["read_only"] = json!(false);
            }
            row
        })
        .collect();
    Ok(json_reply(&Value::Array(list)))
}

/// observed: `deleted N tokens [...] with prefix P`. The segment is percent-decoded, as axum's
/// `Path` extractor does.
fn delete_tokens(shared: &Shared, call: &Call, prefix: &str) -> Result<Reply, Reply> {
    let prefix = percent_encoding::percent_decode_str(prefix).decode_utf8_lossy();
    let prefix = prefix.as_ref();
    let user = authed(shared, call)?;
    let mut state = shared.state();
    let deleted = state.delete_tokens(|t| t.email == user.email && t.token.starts_with(prefix));
    Ok(text(
        200,
        format!("deleted {deleted} tokens [\"{prefix}*****\"] with prefix {prefix}"),
    ))
}
