//! The front-end's identity: a workspace operator (`token.user_email`), with read on the folder
//! and nothing more, who owns the token OpenBao holds. Windmill refuses an operator previews,
//! batches, imports and script writes by its role (observed on 1.587 and 1.788, the reference's
//! "Worker 10"), and the jobs it starts run with its rights, not the superadmin's.
//!
//! - [`converge`] (step 4): the member, its role (operator, not admin, not disabled) and its ACL
//!   entry on the folder (read: never write, never owner).
//! - [`mint`] (step 7): the operator has no password, so the superadmin mints an impersonation
//!   token of it (`tokens/impersonate`, unscoped: the operator's full rights), the operator mints
//!   its own scoped token with it (`tokens/create`), and the impersonation token is deleted at
//!   once, by itself (`tokens/delete` takes only the caller's own tokens).
//! - [`tokens`] and [`revoke`] (steps 7 and 9, and `--check`): the operator's tokens are listed
//!   and deleted the same way, each time with an impersonation token of their own that is
//!   deleted right after: every token of the operator but the one OpenBao holds is revoked
//!   (with `token.revoke_previous` off, older tokens of `token.label` are kept; any other is
//!   revoked all the same), so a leaked one does not survive the next run.

use safe_io::secret::Secret;

use crate::config::{Config, is_username};
use crate::error::{Error, Result};
use crate::report::Outcome;
use crate::token::{self, Minted, TokenSpec};
use crate::windmill::{AddedUser, TokenInfo, Windmill};

/// The label of the short-lived impersonation tokens: names the bootstrap in Windmill's audit
/// log, and marks a token left behind by a run that died as one the next run revokes.
pub const IMPERSONATION_LABEL: &str = "fediversity-windmill-bootstrap";

/// The operator as Windmill knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    pub email: String,
    pub username: String,
}

impl Operator {
    /// Its ACL owner name, `u/<username>`.
    pub fn owner(&self) -> String {
        format!("u/{}", self.username)
    }
}

/// Step 4's part: the operator and its read on the folder; with `check`, only looks. Its value:
/// the operator (none with `--check` when it does not exist), how it came out, and the words
/// for the step's line.
pub async fn converge(
    api: &Windmill,
    config: &Config,
    check: bool,
    workspace_exists: bool,
) -> Result<(Option<Operator>, Outcome, String)> {
    let (ws, email) = (&config.workspace.id, &config.token.user_email);
    if !workspace_exists {
        return Ok((None, Outcome::Created, format!("operator {email} would be added")));
    }
    let mut outcome = Outcome::Unchanged;
    let mut changed: Vec<&str> = Vec::new();
    let mut member = api
        .members(ws)
        .await?
        .into_iter()
        .find(|m| m.email.eq_ignore_ascii_case(email));
    if member.is_none() {
        if check {
            return Ok((None, Outcome::Created, format!("operator {email} would be added")));
        }
        // Without a username first: a fresh instance derives it from the email and refuses one.
        if api.add_operator(ws, email, None).await? == AddedUser::UsernameRequired {
            api.add_operator(ws, email, Some(&config.token.username)).await?;
        }
        member = api
            .members(ws)
            .await?
            .into_iter()
            .find(|m| m.email.eq_ignore_ascii_case(email));
        outcome = Outcome::Created;
        changed.push("added");
    }
    let Some(member) = member else {
        return Err(Error::Unexpected {
            service: "Windmill",
            call: "GET /api/w/{workspace}/users/list".into(),
            detail: format!("{email} is not listed after it was added"),
        });
    };
    // The username goes into API paths and the ACL: Windmill's own shape only.
    if !is_username(&member.username) {
        return Err(Error::Unexpected {
            service: "Windmill",
            call: "GET /api/w/{workspace}/users/list".into(),
            detail: format!(
                "the username of {email} is not a Windmill username (a letter, then letters, digits and _)"
            ),
        });
    }
    let operator = Operator {
        email: email.clone(),
        username: member.username.clone(),
    };
    if !member.operator || member.is_admin || member.disabled {
        outcome = outcome.combine(Outcome::Updated);
        changed.push(if check {
            "not an enabled operator"
        } else {
            "made an enabled operator"
        });
        if !check {
            api.make_operator(ws, &operator.username).await?;
        }
    }
    let owner = operator.owner();
    match api.folder(ws, &config.workspace.folder).await? {
        None => {
            // --check on a node without the folder.
            outcome = outcome.combine(Outcome::Created);
            changed.push("no folder to read");
        }
        Some(folder) if folder.owners.contains(&owner) => {
            outcome = outcome.combine(Outcome::Updated);
            changed.push(if check {
                "an owner of the folder"
            } else {
                "no owner of the folder any more"
            });
            if !check {
                // Out of the owners, left with read.
                api.remove_folder_owner(ws, &config.workspace.folder, &owner).await?;
            }
        }
        Some(folder) if folder.extra_perms.get(&owner) != Some(&false) => {
            let (word, now) = match folder.extra_perms.get(&owner) {
                None => (
                    Outcome::Created,
                    if check {
                        "no read on the folder"
                    } else {
                        "given read on the folder"
                    },
                ),
                Some(_) => (
                    Outcome::Updated,
                    if check {
                        "write on the folder"
                    } else {
                        "write taken away"
                    },
                ),
            };
            outcome = outcome.combine(word);
            changed.push(now);
            if !check {
                api.set_folder_acl(ws, &config.workspace.folder, &owner, false).await?;
            }
        }
        Some(_) => {}
    }
    let mut what = format!("operator {email} ({owner}) with read on the folder");
    if !changed.is_empty() {
        what.push_str(&format!(" ({})", changed.join(", ")));
    }
    Ok((Some(operator), outcome, what))
}

/// Runs `work` with an impersonation token of the operator `email` (and its prefix), which is
/// deleted, by itself, as soon as `work` is done, whatever it came to. Its deletion failing fails
/// the whole (the token has the operator's full rights): the next run revokes it with the
/// operator's other tokens.
async fn as_operator<T>(
    api: &Windmill,
    email: &str,
    secrets: &mut Vec<Secret>,
    work: impl AsyncFnOnce(&Windmill, &Secret, &mut Vec<Secret>) -> Result<T>,
) -> Result<T> {
    let impersonation = api.impersonate(email, IMPERSONATION_LABEL).await?;
    secrets.push(impersonation.clone());
    let prefix = impersonation.prefix();
    secrets.push(prefix.clone());
    let as_it = api.with_token(&impersonation);
    let result = work(&as_it, &prefix, secrets).await;
    let deleted = as_it.delete_token(&prefix).await;
    match (result, deleted) {
        (Ok(value), Ok(())) => Ok(value),
        (Err(error), _) | (Ok(_), Err(error)) => Err(error),
    }
}

/// Step 7's mint: the front-end's token, minted by the operator itself (see the module
/// comment). The token is handed out through `front` as soon as it exists, so that a failure
/// after (the impersonation token's deletion included) deletes it again.
pub async fn mint(
    api: &Windmill,
    operator: &Operator,
    spec: TokenSpec,
    front: &mut Option<Minted>,
    secrets: &mut Vec<Secret>,
) -> Result<()> {
    as_operator(api, &operator.email, secrets, async |as_it, _, secrets| {
        let minted = token::mint(as_it, spec, secrets).await?;
        *front = Some(minted.owned_by_itself());
        Ok(())
    })
    .await
}

/// The operator's tokens (`tokens/list` as the operator), without the impersonation token
/// that listed them.
pub async fn tokens(api: &Windmill, operator: &Operator, secrets: &mut Vec<Secret>) -> Result<Vec<TokenInfo>> {
    tokens_of(api, &operator.email, secrets).await
}

/// The tokens of the user `email` (an operator, now or before), listed as it.
pub async fn tokens_of(api: &Windmill, email: &str, secrets: &mut Vec<Secret>) -> Result<Vec<TokenInfo>> {
    as_operator(api, email, secrets, async |as_it, own, secrets| {
        let listed = as_it.list_tokens().await?;
        secrets.extend(listed.iter().map(|t| Secret::new(&t.token_prefix)));
        Ok(listed.into_iter().filter(|t| t.token_prefix != own.expose()).collect())
    })
    .await
}

/// Which of the operator's `listed` tokens a run deletes: every one but `kept` (the prefix of
/// the token OpenBao holds) and, with `keep_older`, those labeled `label`.
pub fn doomed<'a>(listed: &'a [TokenInfo], kept: Option<&Secret>, label: &str, keep_older: bool) -> Vec<&'a TokenInfo> {
    listed
        .iter()
        .filter(|t| kept.is_none_or(|k| k.expose() != t.token_prefix))
        .filter(|t| !(keep_older && t.label.as_deref() == Some(label)))
        .collect()
}

/// Step 9's part: every token of the operator but `kept` (see [`doomed`]), deleted as the
/// operator; how many.
pub async fn revoke(
    api: &Windmill,
    config: &Config,
    operator: &Operator,
    kept: &Secret,
    secrets: &mut Vec<Secret>,
) -> Result<usize> {
    let keep_older = !config.token.revoke_previous;
    let label = config.token.label.clone();
    as_operator(api, &operator.email, secrets, async |as_it, own, secrets| {
        let listed = as_it.list_tokens().await?;
        let mut deleted = 0;
        // The listing's own impersonation token goes last, by `as_operator`.
        for token in doomed(&listed, Some(kept), &label, keep_older)
            .into_iter()
            .filter(|t| t.token_prefix != own.expose())
        {
            let prefix = Secret::new(&token.token_prefix);
            secrets.push(prefix.clone());
            as_it.delete_token(&prefix).await?;
            deleted += 1;
        }
        Ok(deleted)
    })
    .await
}

/// Step 9's part for an operator the bootstrap minted as before (`email`, no longer
/// `token.user_email`): every one of its tokens deleted, as it; how many.
pub async fn revoke_all(api: &Windmill, email: &str, secrets: &mut Vec<Secret>) -> Result<usize> {
    as_operator(api, email, secrets, async |as_it, own, secrets| {
        let listed = as_it.list_tokens().await?;
        let mut deleted = 0;
        for token in listed.iter().filter(|t| t.token_prefix != own.expose()) {
            let prefix = Secret::new(&token.token_prefix);
            secrets.push(prefix.clone());
            as_it.delete_token(&prefix).await?;
            deleted += 1;
        }
        Ok(deleted)
    })
    .await
}
