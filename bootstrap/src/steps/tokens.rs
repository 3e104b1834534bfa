//! Steps 3, 7, 8 and 9 of a run: the two tokens minted (the front-end's by its operator), the
//! front-end's proved and stored in OpenBao, the UI's in the nginx include, the older ones
//! revoked (the UI's label, the operator's every other token, every token of a label used
//! before). A token's own life (mint, discard, revoke) is [`crate::token`]'s and, for the
//! operator's, [`crate::operator`]'s; its proof [`crate::proof`]'s; what `--check` compares of
//! them is `check_tokens`'.

use safe_io::secret::Secret;

use crate::config::Config;
use crate::error::Result;
use crate::openbao::OpenBao;
use crate::operator::{self, Operator};
use crate::proof::{self, Targets};
use crate::report::{Noted, Outcome, noted};
use crate::state::State;
use crate::token::{self, InOpenBao, Minted, TokenSpec};
use crate::ui_auth_include::Written;
use crate::windmill::Windmill;

/// Before step 1, on every run: an unscoped front-end token is accepted, never silently.
pub(super) fn warn_if_unscoped(config: &Config) {
    let t = &config.token;
    if t.scopes.is_empty() {
        let bound = if t.bind_to_workspace {
            format!(", within workspace {}", config.workspace.id)
        } else {
            String::new()
        };
        tracing::warn!(
            "token.scopes is []: the token labeled {} that OpenBao holds is unscoped, with its operator's full rights{bound}: whoever holds it runs every script of the folder and reads the workspace's users",
            t.label
        );
    }
}

/// Step 3: the UI's token, with the login session. Every later call of the run uses it, so a
/// run that gets further proves it works. Both labels and the operator are written to the state
/// file first, so that a later run knows to revoke their tokens even if this one dies right after
/// minting.
pub(super) async fn mint_ui(
    session: &Windmill,
    config: &Config,
    state: &mut State,
    secrets: &mut Vec<Secret>,
) -> Result<Noted<Minted>> {
    state.add_labels([config.token.label.as_str(), config.ui_auth.label.as_str()]);
    state.add_operator(&config.token.user_email);
    state.save()?;
    let minted = token::mint(session, TokenSpec::ui(config), secrets).await?;
    let what = format!(
        "minted a new token {} for the nginx include and the rest of this run",
        minted.spec.describe()
    );
    Ok(noted(what, Outcome::Created, minted))
}

/// Step 7: the front-end's token, minted now by its operator (both exist since step 4), what it
/// may and may not do proved, then written as `bao kv put` writes `{field: token}`. The minted
/// token is handed out through `front` before anything can fail, so that a failure can delete
/// it.
#[allow(clippy::too_many_arguments)]
pub(super) async fn openbao(
    api: &Windmill,
    bao: &OpenBao,
    config: &Config,
    version: &str,
    operator: &Operator,
    probes: &[String; 2],
    front: &mut Option<Minted>,
    secrets: &mut Vec<Secret>,
) -> Result<Noted<()>> {
    operator::mint(api, operator, TokenSpec::front_end(config), front, secrets).await?;
    let minted = front.as_mut().expect("minted by the operator");
    let targets = Targets {
        workspace: &config.workspace.id,
        folder: &config.workspace.folder,
        probe_inside: &probes[0],
        probe_outside: &probes[1],
    };
    let proof = proof::prove(&api.with_token(minted.secret()), api, &minted.spec, &targets, version).await?;
    proof.warn_of_gaps(version);
    proof.warn_of_flaws(version);
    let (how, outcome, unknown) = match token::store_in_openbao(bao, config, minted).await? {
        InOpenBao::Written(written) => {
            let mount = match &written.mount {
                Some(mount) => format!("mount {mount}, KV v{}", written.version),
                None => "no mount found, KV v1 assumed".to_owned(),
            };
            match written.existed {
                Some(false) => (mount, Outcome::Created, ""),
                Some(true) => (mount, Outcome::Updated, ""),
                None => (
                    mount,
                    Outcome::Updated,
                    "; whether it existed before is unknown: the token may not read it",
                ),
            }
        }
        InOpenBao::ReadBack { lost } => (
            format!("the write failed: {lost}; read back, the secret holds the new token"),
            Outcome::Updated,
            "",
        ),
    };
    let what = format!(
        "{} field {} ({how}) holds the new token {} of the operator {}, {}{unknown}",
        config.openbao.path,
        config.openbao.field,
        minted.spec.describe(),
        operator.username,
        proof.describe()
    );
    Ok(noted(what, outcome, ()))
}

/// Step 8: the UI's token in the nginx include, written atomically with its owner and mode.
pub(super) fn ui_auth(config: &Config, ui: &mut Minted) -> Result<Noted<()>> {
    let file = &config.ui_auth;
    let outcome = match token::store_in_include(config, ui)? {
        Written::Created => Outcome::Created,
        Written::Updated => Outcome::Updated,
        Written::Unchanged => Outcome::Unchanged,
    };
    let what = format!(
        "{} ({}:{} {:04o}) holds the new token labeled {}",
        file.file.display(),
        file.owner,
        file.group,
        file.mode,
        ui.spec.label
    );
    Ok(noted(what, outcome, ()))
}

/// Step 9: every token of the operator but the one OpenBao holds now (with
/// `token.revoke_previous` off, older ones of its label are kept); with `token.revoke_previous`,
/// the superadmin's older tokens of both labels (the UI's, and the front-end's of before it was
/// an operator's), every token of the labels the state file lists that are no longer
/// configured, and every token of the operators it lists that are no longer `token.user_email`;
/// then the state file lists only the two labels and the operator.
pub(super) async fn revoke(
    api: &Windmill,
    config: &Config,
    minted: &[&Minted],
    operator: &Operator,
    front: &Minted,
    state: &mut State,
    secrets: &mut Vec<Secret>,
) -> Result<Noted<()>> {
    let labels: Vec<&str> = minted.iter().map(|m| m.spec.label.as_str()).collect();
    let former: Vec<String> = state
        .labels()
        .iter()
        .filter(|l| !labels.contains(&l.as_str()))
        .cloned()
        .collect();
    let theirs = operator::revoke(api, config, operator, &front.secret().prefix(), secrets).await?;
    let of_operator = format!("{theirs} of the operator {}", operator.username);
    if !config.token.revoke_previous {
        let mut all = labels.clone();
        all.extend(former.iter().map(String::as_str));
        let what = format!(
            "token.revoke_previous is false; older tokens labeled {} kept, other tokens deleted: {of_operator}",
            all.join(" and ")
        );
        let outcome = if theirs > 0 {
            Outcome::Updated
        } else {
            Outcome::Unchanged
        };
        return Ok(noted(what, outcome, ()));
    }
    let deleted = token::revoke(api, minted, &former, secrets).await?;
    let mut of_former = Vec::new();
    for email in former_operators(config, state) {
        let n = operator::revoke_all(api, &email, secrets).await?;
        of_former.push((email, n));
    }
    state.keep_labels(labels.iter().copied());
    state.keep_operator(&config.token.user_email);
    state.save()?;
    let front_label = &config.token.label;
    let counts: Vec<String> = std::iter::once(of_operator)
        .chain(deleted.iter().map(|(label, n)| {
            if former.contains(label) {
                format!("{n} labeled {label} (a former label)")
            } else if label == front_label {
                format!("{n} of the superadmin's labeled {label}")
            } else {
                format!("{n} labeled {label}")
            }
        }))
        .chain(
            of_former
                .iter()
                .map(|(email, n)| format!("{n} of the former operator {email}")),
        )
        .collect();
    let outcome = if theirs > 0 || deleted.iter().any(|(_, n)| *n > 0) || of_former.iter().any(|(_, n)| *n > 0) {
        Outcome::Updated
    } else {
        Outcome::Unchanged
    };
    Ok(noted(
        format!("older tokens deleted: {}", counts.join(", ")),
        outcome,
        (),
    ))
}

/// The operators the state file lists besides `token.user_email`: the bootstrap minted as them
/// before. Never the superadmin (the configuration refuses it as the operator; a state file
/// edited to list it would have step 9 delete the run's own tokens).
pub(super) fn former_operators(config: &Config, state: &State) -> Vec<String> {
    state
        .operators()
        .iter()
        .filter(|email| **email != config.token.user_email && !email.eq_ignore_ascii_case(&config.windmill.admin_email))
        .cloned()
        .collect()
}
