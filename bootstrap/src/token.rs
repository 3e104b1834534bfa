//! The two API tokens a run mints, each with what it needs, and their life here: mint, store (in
//! OpenBao or in the include), revoke; what each is shown to do is [`crate::proof`]'s.
//!
//! - The UI's token (`ui_auth.label`) has the superadmin's full rights: admins behind the
//!   forward auth act through it, and every call of the run after step 3 uses it.
//! - The front-end's token (`token.label`), the one OpenBao holds, belongs to the workspace
//!   operator ([`crate::operator`], which mints it) and gets only `token.scopes` and, with
//!   `token.bind_to_workspace`, the workspace: by default a leaked copy runs the deploy and
//!   destroy scripts, reads and cancels jobs it may see, and nothing else (no preview, no other
//!   script, no script upload, no batch or imported jobs, no variables, users, tokens or
//!   settings).
//!
//! A token that was minted and that no sink holds when the run fails is deleted again
//! ([`discard`]); one that a sink may hold is kept (a lost answer to OpenBao's write loses no
//! token that OpenBao holds).

use safe_io::secret::Secret;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::openbao::{self, OpenBao};
use crate::ui_auth_include;
use crate::windmill::{NewToken, TokenInfo, Windmill};

/// One token as the configuration describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub label: String,
    /// Empty: unscoped, the superadmin's full rights.
    pub scopes: Vec<String>,
    /// The workspace the token is bound to (401 everywhere else).
    pub workspace: Option<String>,
}

impl TokenSpec {
    /// The UI's token: full rights, bound to nothing.
    pub fn ui(config: &Config) -> Self {
        TokenSpec {
            label: config.ui_auth.label.clone(),
            scopes: Vec::new(),
            workspace: None,
        }
    }

    /// The front-end's token, as `token.*` configures it.
    pub fn front_end(config: &Config) -> Self {
        let t = &config.token;
        let workspace = t.bind_to_workspace.then(|| config.workspace.id.clone());
        TokenSpec {
            label: t.label.clone(),
            scopes: t.scopes.clone(),
            workspace,
        }
    }

    /// Both, in the order a run stores them (the front-end's in step 7, the UI's in step 8).
    pub fn both(config: &Config) -> [TokenSpec; 2] {
        [Self::front_end(config), Self::ui(config)]
    }

    /// `labeled <label> (<rights>)`, for log lines (scopes and labels are no secrets).
    pub fn describe(&self) -> String {
        let rights = if self.scopes.is_empty() {
            "the superadmin's full rights".to_owned()
        } else {
            format!("scopes {}", self.scopes.join(" "))
        };
        match &self.workspace {
            Some(workspace) => format!("labeled {} ({rights}; bound to workspace {workspace})", self.label),
            None => format!("labeled {} ({rights})", self.label),
        }
    }
}

/// A token this run minted, and whether a sink holds it yet.
pub struct Minted {
    pub spec: TokenSpec,
    token: Secret,
    stored: bool,
    /// Owned by a user whose tokens the superadmin cannot delete (the operator's): deleted by
    /// logging it out with itself.
    by_itself: bool,
}

impl Minted {
    pub fn secret(&self) -> &Secret {
        &self.token
    }

    /// The same token, marked as one only it can delete (`tokens/delete` takes the caller's own
    /// tokens only).
    pub fn owned_by_itself(self) -> Minted {
        Minted {
            by_itself: true,
            ..self
        }
    }
}

/// How OpenBao came to hold the front-end's token.
#[derive(Debug)]
pub enum InOpenBao {
    /// The write was answered.
    Written(openbao::Written),
    /// The write failed in a way that may have written it (`lost`: what happened), and the
    /// secret, read back, holds the new token.
    ReadBack { lost: String },
}

/// Step 7's store: `{field: token}` at `openbao.path`, as `bao kv put` writes it. Once written,
/// a later failure keeps the token (its consumers may use it already; the next run's step 9
/// revokes it).
///
/// A write that failed where it may still have happened (no answer, a 5xx or 429 after the
/// retries: OpenBao or a proxy may have applied it and lost the answer) is checked by reading the
/// secret back: holding the new token, it is stored; holding anything else, it is not (the
/// token is deleted as unstored); unreadable, it may be, and the token is kept. A refusal (4xx)
/// or a connect that never reached OpenBao wrote nothing.
pub async fn store_in_openbao(bao: &OpenBao, config: &Config, minted: &mut Minted) -> Result<InOpenBao> {
    let (path, field) = (&config.openbao.path, &config.openbao.field);
    // A failure before the write (the mount lookup) wrote nothing.
    let target = bao.target(path).await?;
    let error = match bao.write(&target, field, &minted.token).await {
        Ok(written) => {
            minted.stored = true;
            return Ok(InOpenBao::Written(written));
        }
        Err(error) if !may_have_written(&error) => return Err(error),
        Err(error) => error,
    };
    match bao.get(path, field).await {
        Ok(Some(held)) if held.expose() == minted.token.expose() => {
            minted.stored = true;
            Ok(InOpenBao::ReadBack {
                lost: error.to_string(),
            })
        }
        Ok(_) => Err(error),
        Err(read) => {
            minted.stored = true;
            Err(Error::MaybeStored {
                write: Box::new(error),
                read: Box::new(read),
            })
        }
    }
}

/// Whether a failed write may have been applied: it reached OpenBao (or a proxy in front of it)
/// and got no answer, a server error or a 429 (which a proxy may answer after forwarding).
fn may_have_written(error: &Error) -> bool {
    match error {
        Error::Transport { reached, .. } => *reached,
        Error::Status { status, .. } => *status >= 500 || *status == 429,
        Error::TooLarge { .. } | Error::Unexpected { .. } => true,
        _ => false,
    }
}

/// Step 8's store: the nginx include, written atomically with its owner and mode.
pub fn store_in_include(config: &Config, minted: &mut Minted) -> Result<ui_auth_include::Written> {
    let written = ui_auth_include::write(&config.ui_auth, &minted.token)?;
    minted.stored = true;
    Ok(written)
}

/// `tokens/create` for `spec`, with the caller's (the superadmin's) token. The new token joins
/// `secrets` at once, so that any later message is scrubbed of it.
pub async fn mint(api: &Windmill, spec: TokenSpec, secrets: &mut Vec<Secret>) -> Result<Minted> {
    let new = NewToken {
        label: &spec.label,
        scopes: &spec.scopes,
        workspace_id: spec.workspace.as_deref(),
    };
    let token = api.create_token(&new).await?;
    secrets.push(token.clone());
    Ok(Minted {
        spec,
        token,
        stored: false,
        by_itself: false,
    })
}

/// Deletes, best effort, the tokens of `minted` that no sink holds, after a failure: one line
/// each, naming the label only (never the token or its prefix); the run's own error follows.
/// Left behind, every failed run (every 30 s with `Restart=on-failure`) would add a
/// non-expiring token. `api`'s own token, if it is among them, goes last. The operator's token
/// logs itself out (`POST /api/auth/logout` deletes the caller's own row; with Windmill's
/// `INVALIDATE_ALL_SESSIONS_ON_LOGOUT` it would not, and the next run's step 9 revokes it).
pub async fn discard(api: &Windmill, minted: &[&Minted], warn: impl Fn(&Error) -> String) {
    for token in minted.iter().filter(|m| !m.stored) {
        let label = &token.spec.label;
        let deleted = if token.by_itself {
            api.with_token(&token.token).logout().await
        } else {
            api.delete_token(&token.token.prefix()).await
        };
        match deleted {
            Ok(()) => tracing::info!(
                "deleted the token labeled {label} that this run minted, as the run failed before storing it"
            ),
            Err(error) => {
                tracing::warn!(
                    "could not delete the token labeled {label} that this run minted (a later run revokes it in step 9): {}",
                    warn(&error)
                )
            }
        }
    }
}

/// Step 9: deletes the other tokens of each minted token's label, and every token of each
/// `former` label (labels the bootstrap minted under before, no longer configured); how many,
/// per label, the current ones first. Their prefixes join `secrets`: Windmill's answers to a
/// delete quote the prefix.
pub async fn revoke(
    api: &Windmill,
    minted: &[&Minted],
    former: &[String],
    secrets: &mut Vec<Secret>,
) -> Result<Vec<(String, usize)>> {
    let listed = api.list_tokens().await?;
    let ours: Vec<Secret> = minted.iter().map(|m| m.token.prefix()).collect();
    let labels = minted
        .iter()
        .map(|m| m.spec.label.as_str())
        .chain(former.iter().map(String::as_str));
    let mut deleted = Vec::new();
    for label in labels {
        let older: Vec<Secret> = listed
            .iter()
            .filter(|t| t.label.as_deref() == Some(label) && !ours.iter().any(|o| o.expose() == t.token_prefix))
            .map(|t| Secret::new(&t.token_prefix))
            .collect();
        secrets.extend(older.iter().cloned());
        for prefix in &older {
            api.delete_token(prefix).await?;
        }
        deleted.push((label.to_owned(), older.len()));
    }
    Ok(deleted)
}

/// How a stored token compares with its spec (`--check`).
#[derive(Debug, PartialEq, Eq)]
pub enum Compared {
    /// A live token of the label, with the scopes and binding configured.
    Same,
    /// No live token of the label starts as the stored one does (revoked, or another label's).
    NotLive,
    /// Live, but minted with other scopes or another binding: what differs.
    Differs(String),
}

/// Finds `stored` by its prefix among `listed` (`tokens/list`) and compares it with `spec`.
/// Scopes compare as sets: their order means nothing to Windmill. No scopes and an empty list
/// are the same: the owner's full rights.
pub fn compare(listed: &[TokenInfo], stored: &Secret, spec: &TokenSpec) -> Compared {
    let prefix = stored.prefix();
    let Some(live) = listed
        .iter()
        .find(|t| t.token_prefix == prefix.expose() && t.label.as_deref() == Some(spec.label.as_str()))
    else {
        return Compared::NotLive;
    };
    let sorted = |scopes: &[String]| {
        let mut scopes = scopes.to_vec();
        scopes.sort();
        scopes.dedup();
        scopes
    };
    let (have, want) = (sorted(live.scopes.as_deref().unwrap_or_default()), sorted(&spec.scopes));
    let mut differs = Vec::new();
    if have != want {
        let shown = |s: &[String]| if s.is_empty() { "none".to_owned() } else { s.join(" ") };
        differs.push(format!("scopes {} where {} are configured", shown(&have), shown(&want)));
    }
    // Before about 1.693 `tokens/list` does not say (`None`): then the binding is not compared
    // here; the proof of a run shows it (another workspace refused).
    if let Some(bound) = &live.workspace_id
        && *bound != spec.workspace
    {
        let shown = |w: &Option<String>| {
            w.as_ref()
                .map_or("no workspace".to_owned(), |w| format!("workspace {w}"))
        };
        differs.push(format!(
            "bound to {} where {} is configured",
            shown(bound),
            shown(&spec.workspace)
        ));
    }
    if differs.is_empty() {
        Compared::Same
    } else {
        Compared::Differs(differs.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(scopes: &[&str], workspace: Option<&str>) -> TokenSpec {
        TokenSpec {
            label: "fediversity".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            workspace: workspace.map(Into::into),
        }
    }

    fn listed(label: &str, prefix: &str, scopes: Option<&[&str]>, workspace: Option<&str>) -> TokenInfo {
        TokenInfo {
            label: Some(label.into()),
            token_prefix: prefix.into(),
            scopes: scopes.map(|s| s.iter().map(|s| s.to_string()).collect()),
            workspace_id: Some(workspace.map(Into::into)),
        }
    }

    #[test]
    fn a_stored_token_is_compared_by_its_prefix_label_scopes_and_workspace() {
        let stored = Secret::token("ABCDEFGHIJrest-of-the-token-xyz0");
        let want = spec(&["jobs:read", "jobs:write"], Some("fediversity"));
        let same = listed(
            "fediversity",
            "ABCDEFGHIJ",
            Some(&["jobs:write", "jobs:read"]),
            Some("fediversity"),
        );
        assert_eq!(compare(&[same], &stored, &want), Compared::Same);
        // Not listed, or listed under another label: not live.
        assert_eq!(
            compare(&[listed("fediversity", "ZZZZZZZZZZ", None, None)], &stored, &want),
            Compared::NotLive
        );
        assert_eq!(
            compare(
                &[listed(
                    "other",
                    "ABCDEFGHIJ",
                    Some(&["jobs:read", "jobs:write"]),
                    Some("fediversity")
                )],
                &stored,
                &want
            ),
            Compared::NotLive
        );
        // Other scopes, no binding.
        let wide = listed("fediversity", "ABCDEFGHIJ", None, None);
        assert_eq!(
            compare(&[wide], &stored, &want),
            Compared::Differs("scopes none where jobs:read jobs:write are configured, bound to no workspace where workspace fediversity is configured".into())
        );
        // No scopes and an empty list are the same.
        let unscoped = listed("fediversity", "ABCDEFGHIJ", Some(&[]), None);
        assert_eq!(compare(&[unscoped], &stored, &spec(&[], None)), Compared::Same);
        // A Windmill that does not list bindings (before about 1.693): not compared.
        let unknown = TokenInfo {
            workspace_id: None,
            ..listed("fediversity", "ABCDEFGHIJ", Some(&["jobs:read", "jobs:write"]), None)
        };
        assert_eq!(compare(&[unknown], &stored, &want), Compared::Same);
    }

    #[test]
    fn descriptions_name_rights_and_binding() {
        assert_eq!(
            spec(&["jobs:read"], Some("w")).describe(),
            "labeled fediversity (scopes jobs:read; bound to workspace w)"
        );
        assert_eq!(
            spec(&[], None).describe(),
            "labeled fediversity (the superadmin's full rights)"
        );
    }
}
