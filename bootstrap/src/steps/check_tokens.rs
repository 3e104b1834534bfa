//! What `--check` compares of the tokens (steps 7, 8 and 9; step 3 has nothing of its own to
//! compare: a run always mints): the token OpenBao holds is a live token of the operator's, and
//! the include's of the superadmin's, each of its label, minted as configured, and still
//! working; the include is as a run writes it, in a directory others cannot write; the operator
//! has no other token, and no other token of the UI's label, nor any of a label the bootstrap
//! used before, nor any of an operator it minted as before, is live. The operator's tokens are listed as the operator, with an
//! impersonation token that is deleted right after (like the login session, a credential for
//! looking that does not outlive the check).

use safe_io::secret::Secret;

use crate::config::Config;
use crate::error::Result;
use crate::openbao::OpenBao;
use crate::operator::{self, Operator};
use crate::proof::{self, Works};
use crate::report::{Noted, Outcome, noted};
use crate::state::State;
use crate::token::{self, Compared, TokenSpec};
use crate::ui_auth_include;
use crate::windmill::{TokenInfo, Windmill};

/// The live tokens `--check` compares with: the superadmin's and the operator's.
pub(super) struct Listed {
    pub admin: Vec<TokenInfo>,
    /// None: there is no operator to own any.
    pub operator: Option<(Operator, Vec<TokenInfo>)>,
    /// The operators the bootstrap minted as before, and their tokens.
    pub former: Vec<(String, Vec<TokenInfo>)>,
}

/// A stored token against the live ones of its owner (`of`: who, for the line) and, when live,
/// against Windmill itself: what differs, or `None` when it is as configured and works.
async fn judge(
    session: &Windmill,
    config: &Config,
    listed: &[TokenInfo],
    stored: &Secret,
    spec: &TokenSpec,
    of: &str,
) -> Result<Option<String>> {
    let label = &spec.label;
    match token::compare(listed, stored, spec) {
        Compared::NotLive => return Ok(Some(format!("no live token labeled {label}{of}"))),
        Compared::Differs(what) => return Ok(Some(format!("the token labeled {label}{of}, minted with {what}"))),
        Compared::Same => {}
    }
    // Listed is not enough: a token can be listed and refused (expired, its owner's rights gone).
    Ok(
        match proof::works(&session.with_token(stored), spec, &config.workspace.id).await? {
            Works::Yes => None,
            Works::NotAuthenticated { call } => Some(format!(
                "the token labeled {label}{of}, which no longer authenticates ({call} answered 401)"
            )),
            Works::Granted { call } => Some(format!(
                "the token labeled {label}{of}, which Windmill granted {call}, a read its scopes do not cover"
            )),
            Works::Bound { call, status, bound } => {
                let (is, configured) = if bound {
                    ("bound to a workspace".to_owned(), "none is".to_owned())
                } else {
                    (
                        "bound to no workspace".to_owned(),
                        format!("workspace {} is", config.workspace.id),
                    )
                };
                Some(format!(
                    "the token labeled {label}{of}, which is {is} ({call} answered {status}) where {configured} configured"
                ))
            }
        },
    )
}

/// Step 7: the token OpenBao holds must be a live token of the operator's, of the front-end's
/// label, with the configured scopes and binding, that works. Its value: that token (which
/// joins `secrets`) and the live tokens, which steps 8 and 9 compare with too.
pub(super) async fn openbao(
    session: &Windmill,
    bao: &OpenBao,
    config: &Config,
    operator: Option<&Operator>,
    former: &[String],
    secrets: &mut Vec<Secret>,
) -> Result<Noted<(Option<Secret>, Listed)>> {
    let spec = TokenSpec::front_end(config);
    let place = format!("{} field {}", config.openbao.path, config.openbao.field);
    let stored = bao.get(&config.openbao.path, &config.openbao.field).await?;
    secrets.extend(stored.clone());
    let admin = session.list_tokens().await?;
    let mut listed = match operator {
        Some(operator) => Listed {
            admin,
            operator: Some((operator.clone(), operator::tokens(session, operator, secrets).await?)),
            former: Vec::new(),
        },
        None => Listed {
            admin,
            operator: None,
            former: Vec::new(),
        },
    };
    if config.token.revoke_previous {
        for email in former {
            let tokens = operator::tokens_of(session, email, secrets).await?;
            listed.former.push((email.clone(), tokens));
        }
    }
    let Some(stored) = stored else {
        return Ok(noted(
            format!("{place} holds no token"),
            Outcome::Created,
            (None, listed),
        ));
    };
    let Some((operator, theirs)) = &listed.operator else {
        let what = format!(
            "{place} holds a token, but there is no operator {} to own it",
            config.token.user_email
        );
        return Ok(noted(what, Outcome::Updated, (Some(stored), listed)));
    };
    let of = format!(" of the operator {}", operator.username);
    let (what, outcome) = if token::compare(&listed.admin, &stored, &spec) != Compared::NotLive {
        (
            format!(
                "{place} holds a token {} of the superadmin's, where the front-end's belongs to the operator {}",
                spec.label, operator.username
            ),
            Outcome::Updated,
        )
    } else {
        match judge(session, config, theirs, &stored, &spec, &of).await? {
            None => (
                format!("{place} holds a live token {}{of} that works", spec.describe()),
                Outcome::Unchanged,
            ),
            Some(what) => (format!("{place} holds {what}"), Outcome::Updated),
        }
    };
    Ok(noted(what, outcome, (Some(stored), listed)))
}

/// Step 8: the include must be the line with a live token of the UI's label (full rights, bound
/// to nothing) that authenticates, with the configured owner, group and mode, in a directory
/// others cannot write. Its value: that token, which joins `secrets`.
pub(super) async fn include(
    session: &Windmill,
    config: &Config,
    listed: &[TokenInfo],
    secrets: &mut Vec<Secret>,
) -> Result<Noted<Option<Secret>>> {
    let (ui, spec) = (&config.ui_auth, TokenSpec::ui(config));
    let file = ui.file.display();
    let mut differs = Vec::new();
    if let Some(why) = ui_auth_include::unsafe_directory(&ui.file)? {
        differs.push(why);
    }
    let Some(found) = ui_auth_include::read(ui)? else {
        let what = if differs.is_empty() {
            format!("{file} does not exist")
        } else {
            format!("{file} does not exist, {}", differs.join(", "))
        };
        return Ok(noted(what, Outcome::Created, None));
    };
    if (found.uid, found.gid, found.mode) != (ui.uid, ui.gid, ui.mode) {
        differs.push(format!(
            "is {}:{} {:04o} where {}:{} {:04o} is configured",
            found.uid, found.gid, found.mode, ui.uid, ui.gid, ui.mode
        ));
    }
    match &found.token {
        None => differs.push("holds no token line".to_owned()),
        Some(stored) => {
            secrets.push(stored.clone());
            if let Some(what) = judge(session, config, listed, stored, &spec, "").await? {
                differs.push(format!("holds {what}"));
            }
        }
    }
    if differs.is_empty() {
        let what = format!(
            "{file} ({}:{} {:04o}) holds a live token {} that authenticates",
            ui.owner,
            ui.group,
            ui.mode,
            spec.describe()
        );
        Ok(noted(what, Outcome::Unchanged, found.token))
    } else {
        Ok(noted(
            format!("{file} {}", differs.join(", ")),
            Outcome::Updated,
            found.token,
        ))
    }
}

/// Step 9: the operator's tokens besides the one OpenBao holds (with `token.revoke_previous` off,
/// but for older ones of its label) and, with `token.revoke_previous`, the superadmin's tokens
/// of either label besides the include's, and every token of a label the state file lists that
/// is no longer configured, are what a run would delete.
pub(super) fn revoke(
    config: &Config,
    listed: &Listed,
    state: &State,
    stored: [Option<Secret>; 2],
) -> Result<Noted<()>> {
    let theirs = listed.operator.as_ref().map(|(operator, tokens)| {
        let kept = stored[0].as_ref().map(Secret::prefix);
        let n = operator::doomed(
            tokens,
            kept.as_ref(),
            &config.token.label,
            !config.token.revoke_previous,
        )
        .len();
        (format!("{n} of the operator {}", operator.username), n)
    });
    let (of_operator, n_operator) = theirs.unwrap_or_else(|| ("no operator yet".to_owned(), 0));
    let admin = admin_tokens(config, &listed.admin, state, [None, stored[1].clone()])?;
    // Every token of a former operator is one a run would delete (listed with revoke_previous only).
    let of_former: String = listed
        .former
        .iter()
        .map(|(email, tokens)| format!(", {} of the former operator {email}", tokens.len()))
        .collect();
    let any = n_operator > 0 || admin.outcome != Outcome::Unchanged || listed.former.iter().any(|(_, t)| !t.is_empty());
    let what = if config.token.revoke_previous {
        format!(
            "tokens besides the stored ones: {of_operator}, {}{of_former}",
            admin.what
        )
    } else {
        format!("{}; tokens besides the stored one: {of_operator}", admin.what)
    };
    Ok(noted(what, if any { Outcome::Updated } else { Outcome::Unchanged }, ()))
}

/// The superadmin's side of step 9's comparison.
fn admin_tokens(
    config: &Config,
    listed: &[TokenInfo],
    state: &State,
    stored: [Option<Secret>; 2],
) -> Result<Noted<()>> {
    let specs = TokenSpec::both(config);
    let current: Vec<&str> = specs.iter().map(|s| s.label.as_str()).collect();
    let former: Vec<&str> = state
        .labels()
        .iter()
        .map(String::as_str)
        .filter(|l| !current.contains(l))
        .collect();
    if !config.token.revoke_previous {
        let all: Vec<&str> = current.iter().chain(&former).copied().collect();
        return Ok(noted(
            format!(
                "token.revoke_previous is false; older tokens labeled {} are kept",
                all.join(" and ")
            ),
            Outcome::Unchanged,
            (),
        ));
    }
    // A stored token is kept for its own label; a run revokes every token of a former label.
    let count = |label: &str, kept: Option<&Secret>| {
        let kept = kept.map(Secret::prefix);
        listed
            .iter()
            .filter(|t| t.label.as_deref() == Some(label) && kept.as_ref().is_none_or(|k| k.expose() != t.token_prefix))
            .count()
    };
    let counts: Vec<(String, usize)> = current
        .iter()
        .zip(&stored)
        .map(|(l, kept)| {
            let what = if *l == config.token.label {
                format!("of the superadmin's labeled {l}")
            } else {
                format!("labeled {l}")
            };
            (what, count(l, kept.as_ref()))
        })
        .chain(
            former
                .iter()
                .map(|l| (format!("labeled {l} (a former label)"), count(l, None))),
        )
        .collect();
    let shown: Vec<String> = counts.iter().map(|(what, n)| format!("{n} {what}")).collect();
    let any = counts.iter().any(|(_, n)| *n > 0);
    Ok(noted(
        shown.join(", "),
        if any { Outcome::Updated } else { Outcome::Unchanged },
        (),
    ))
}
