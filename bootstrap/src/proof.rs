//! What a token is shown to do, with the token itself.
//!
//! - Step 7's proof of the front-end token's limit, before OpenBao holds it: Windmill must answer
//!   403 to each of the calls that matter. A harmless read of a domain no scope names (are scopes
//!   enforced at all: route-level scopes came with Windmill 1.509), a preview (code sent with the
//!   request), `scripts/create` (replacing the deploy script), a run of another script of the
//!   folder, and `jobs/add_batch_jobs` (what `jobs:write` grants: a superadmin-owned token queues
//!   code of its choosing there). Each body does nothing where it is granted: an empty preview or
//!   script is refused as malformed, the script of a random name does not exist, a batch of 0
//!   queues nothing; so a server that grants one has run nothing when the step fails. Only 403
//!   proves a limit: 401 means the token was not authenticated, which says nothing of its scopes.
//! - `--check`'s test that a stored token authenticates: the front-end's gets the read probe
//!   (403 when scoped, 200 when unscoped), the UI's `GET /api/users/whoami` (200); a 401 is a
//!   token that no longer works.

use argon2::password_hash::rand_core::{OsRng, RngCore};
use reqwest::Method;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::scope;
use crate::token::TokenSpec;
use crate::windmill::Windmill;

/// How the limit of a token was shown.
#[derive(Debug, PartialEq, Eq)]
pub enum Proof {
    /// An unscoped token has no limit to prove.
    Unscoped,
    /// Windmill refused the token each of these calls with 403.
    Refused(Vec<String>),
}

impl Proof {
    pub fn describe(&self) -> String {
        match self {
            Proof::Unscoped => "unscoped, so no limit to prove".to_owned(),
            Proof::Refused(calls) => format!("refused {} (403 each) as its scopes require", calls.join(", ")),
        }
    }
}

/// A script name no scope covers (configured run scopes list paths, no wildcards): `probe_` and
/// 12 random letters and digits, which no real script of the folder is named.
fn random_script(folder: &str) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 12];
    OsRng.fill_bytes(&mut bytes);
    let name: String = bytes
        .iter()
        .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
        .collect();
    format!("f/{folder}/probe_{name}")
}

/// The calls of the proof, in order: the read first (a server that enforces nothing is named as
/// such by it), then the four that would run or change code.
fn calls(spec: &TokenSpec, workspace: &str, folder: &str) -> Result<Vec<(Method, String, Option<Value>)>> {
    // The configuration leaves at least one read uncovered (checked when it is loaded).
    let Some(read) = scope::probe(&spec.scopes) else {
        return Err(Error::Config(format!(
            "token.scopes name every domain the run proves the token's limit with ({})",
            scope::probe_domains().join(", ")
        )));
    };
    let w = format!("/api/w/{workspace}");
    Ok(vec![
        (Method::GET, format!("{w}/{read}"), None),
        (Method::POST, format!("{w}/jobs/run/preview"), Some(json!({}))),
        (Method::POST, format!("{w}/scripts/create"), Some(json!({}))),
        (
            Method::POST,
            format!("{w}/jobs/run/p/{}", random_script(folder)),
            Some(json!({})),
        ),
        (
            Method::POST,
            format!("{w}/jobs/add_batch_jobs/0"),
            Some(json!({"kind": "noop"})),
        ),
    ])
}

/// Step 7's proof, with the new token `api` carries: every call answered 403, or the step fails
/// naming the call, its answer and the server's `version` (and the caller deletes the token).
pub async fn prove(api: &Windmill, spec: &TokenSpec, workspace: &str, folder: &str, version: &str) -> Result<Proof> {
    if spec.scopes.is_empty() {
        return Ok(Proof::Unscoped);
    }
    let mut refused = Vec::new();
    for (method, path, body) in calls(spec, workspace, folder)? {
        let (call, answer) = api.answer_to(method, &path, body.as_ref()).await?;
        let (version, label) = (version.to_owned(), spec.label.clone());
        match answer.status.as_u16() {
            403 => refused.push(call),
            status @ 200..=299 => {
                return Err(Error::ScopesNotEnforced {
                    version,
                    label,
                    call,
                    status,
                });
            }
            401 => {
                let why = "401: the token was not authenticated, which shows nothing of its scopes".to_owned();
                return Err(Error::LimitNotShown {
                    version,
                    label,
                    call,
                    why,
                });
            }
            status => {
                let why = format!(
                    "{status} (the route let the token through to the request itself): {}",
                    answer.shown()
                );
                return Err(Error::LimitNotShown {
                    version,
                    label,
                    call,
                    why,
                });
            }
        }
    }
    Ok(Proof::Refused(refused))
}

/// Whether a stored token still authenticates (`--check`).
#[derive(Debug, PartialEq, Eq)]
pub enum Works {
    /// The call was answered as it must be (`status`).
    Yes { call: String, status: u16 },
    /// 401: the token no longer authenticates.
    NotAuthenticated { call: String },
    /// A scoped token granted the read its scopes do not cover.
    Granted { call: String },
}

/// Asks Windmill, with the stored token `api` carries, the call that shows it authenticates:
/// the front-end's read probe (403 when scoped, 200 when not), `GET /api/users/whoami` for a
/// token bound to nothing and unscoped (the UI's). Another answer is an error: it cannot be told.
pub async fn works(api: &Windmill, spec: &TokenSpec, workspace: &str) -> Result<Works> {
    let (path, expected) = if spec.workspace.is_none() && spec.scopes.is_empty() {
        ("/api/users/whoami".to_owned(), 200)
    } else {
        // The workspace's probe, as in step 7 (any read for an unscoped one).
        let read = scope::probe(&spec.scopes).unwrap_or("variables/list");
        (
            format!("/api/w/{workspace}/{read}"),
            if spec.scopes.is_empty() { 200 } else { 403 },
        )
    };
    let (call, answer) = api.answer_to(Method::GET, &path, None).await?;
    match answer.status.as_u16() {
        status if status == expected => Ok(Works::Yes { call, status }),
        401 => Ok(Works::NotAuthenticated { call }),
        200 => Ok(Works::Granted { call }),
        status => Err(Error::Status {
            service: "Windmill",
            call,
            status,
            message: answer.shown(),
            tries: answer.tries,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_script_is_a_windmill_path_in_the_folder_and_differs_each_time() {
        let (a, b) = (random_script("fediversity"), random_script("fediversity"));
        assert_ne!(a, b);
        let name = a.strip_prefix("f/fediversity/probe_").unwrap();
        assert!(
            name.len() == 12 && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{a}"
        );
    }

    #[test]
    fn the_read_comes_first_then_the_four_that_would_run_or_change_code() {
        let spec = TokenSpec {
            label: "f".into(),
            scopes: scope::defaults("fediversity"),
            workspace: Some("w".into()),
        };
        let calls: Vec<String> = calls(&spec, "w", "fediversity")
            .unwrap()
            .into_iter()
            .map(|(m, p, b)| format!("{m} {p} {}", b.unwrap_or_default()))
            .collect();
        assert_eq!(calls[0], "GET /api/w/w/variables/list null");
        assert_eq!(calls[1], "POST /api/w/w/jobs/run/preview {}");
        assert_eq!(calls[2], "POST /api/w/w/scripts/create {}");
        assert!(
            calls[3].starts_with("POST /api/w/w/jobs/run/p/f/fediversity/probe_") && calls[3].ends_with(" {}"),
            "{}",
            calls[3]
        );
        assert_eq!(calls[4], r#"POST /api/w/w/jobs/add_batch_jobs/0 {"kind":"noop"}"#);
    }
}
