//! Steps 3, 7, 8 and 9: the two tokens minted, the front-end's proved and stored in OpenBao, the
//! UI's in the nginx include, the older ones of each label revoked; and what `--check` compares
//! of them (steps 7, 8 and 9; step 3 has nothing of its own to compare: a run always mints). A token's own life (mint, prove, discard, revoke) is [`crate::token`]'s.

use safe_io::secret::Secret;

use crate::config::Config;
use crate::error::Result;
use crate::openbao::OpenBao;
use crate::report::{Noted, Outcome, noted};
use crate::token::{self, Compared, Minted, TokenSpec};
use crate::ui_auth_include::{self, Written};
use crate::windmill::Windmill;

/// Before step 1, on every run: an unscoped front-end token is accepted, never silently.
pub(super) fn warn_if_unscoped(config: &Config) {
    let t = &config.token;
    if t.scopes.is_empty() {
        let bound = if t.bind_to_workspace { format!(", within workspace {}", config.workspace.id) } else { String::new() };
        tracing::warn!(
            "token.scopes is []: the token labeled {} that OpenBao holds is unscoped, with the superadmin's full rights{bound}: whoever holds it can run any code on the worker",
            t.label
        );
    }
}

/// Step 3: the UI's token, with the login session. Every later call of the run uses it, so a
/// run that gets further proves it works.
pub(super) async fn mint_ui(session: &Windmill, config: &Config, secrets: &mut Vec<Secret>) -> Result<Noted<Minted>> {
    let minted = token::mint(session, TokenSpec::ui(config), secrets).await?;
    let what = format!("minted a new token {} for the nginx include and the rest of this run", minted.spec.describe());
    Ok(noted(what, Outcome::Created, minted))
}

/// Step 7: the front-end's token, minted now (its workspace exists since step 4), its limit
/// proved, then written as `bao kv put` writes `{field: token}`. The minted token is handed
/// out through `front` before anything can fail, so that a failure can delete it.
pub(super) async fn openbao(
    api: &Windmill,
    bao: &OpenBao,
    config: &Config,
    version: &str,
    front: &mut Option<Minted>,
    secrets: &mut Vec<Secret>,
) -> Result<Noted<()>> {
    let minted = front.insert(token::mint(api, TokenSpec::front_end(config), secrets).await?);
    let proof = token::prove(api, minted, &config.workspace.id, version).await?;
    let written = token::store_in_openbao(bao, config, minted).await?;
    let mount = match &written.mount {
        Some(mount) => format!("mount {mount}, KV v{}", written.version),
        None => "no mount found, KV v1 assumed".to_owned(),
    };
    let (outcome, unknown) = match written.existed {
        Some(false) => (Outcome::Created, ""),
        Some(true) => (Outcome::Updated, ""),
        None => (Outcome::Updated, "; whether it existed before is unknown: the token may not read it"),
    };
    let what = format!(
        "{} field {} ({mount}) holds the new token {}, {}{unknown}",
        config.openbao.path,
        config.openbao.field,
        minted.spec.describe(),
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
    let what = format!("{} ({}:{} {:04o}) holds the new token labeled {}", file.file.display(), file.owner, file.group, file.mode, ui.spec.label);
    Ok(noted(what, outcome, ()))
}

/// Step 9: the older tokens of both labels deleted.
pub(super) async fn revoke(api: &Windmill, config: &Config, minted: &[&Minted], secrets: &mut Vec<Secret>) -> Result<Noted<()>> {
    let labels: Vec<&str> = minted.iter().map(|m| m.spec.label.as_str()).collect();
    if !config.token.revoke_previous {
        let what = format!("token.revoke_previous is false; older tokens labeled {} kept", labels.join(" and "));
        return Ok(noted(what, Outcome::Unchanged, ()));
    }
    let deleted = token::revoke(api, minted, secrets).await?;
    let counts: Vec<String> = deleted.iter().map(|(label, n)| format!("{n} labeled {label}")).collect();
    let outcome = if deleted.iter().any(|(_, n)| *n > 0) { Outcome::Updated } else { Outcome::Unchanged };
    Ok(noted(format!("older tokens deleted: {}", counts.join(", ")), outcome, ()))
}

/// `--check`'s step 7: the token OpenBao holds must be a live token of the front-end's label,
/// with the configured scopes and binding. Its value: that token, which joins `secrets`.
pub(super) async fn check_openbao(session: &Windmill, bao: &OpenBao, config: &Config, secrets: &mut Vec<Secret>) -> Result<Noted<Option<Secret>>> {
    let spec = TokenSpec::front_end(config);
    let place = format!("{} field {}", config.openbao.path, config.openbao.field);
    let Some(stored) = bao.get(&config.openbao.path, &config.openbao.field).await? else {
        return Ok(noted(format!("{place} holds no token"), Outcome::Created, None));
    };
    secrets.push(stored.clone());
    let listed = session.list_tokens().await?;
    let (what, outcome) = match token::compare(&listed, &stored, &spec) {
        Compared::Same => (format!("{place} holds a live token {}", spec.describe()), Outcome::Unchanged),
        Compared::NotLive => (format!("{place} holds no live token labeled {}", spec.label), Outcome::Updated),
        Compared::Differs(what) => (format!("{place} holds the token labeled {}, minted with {what}", spec.label), Outcome::Updated),
    };
    Ok(noted(what, outcome, Some(stored)))
}

/// `--check`'s step 8: the include must be the line with a live token of the UI's label (full
/// rights, bound to nothing), with the configured owner, group and mode. Its value: that token,
/// which joins `secrets`.
pub(super) async fn check_include(session: &Windmill, config: &Config, secrets: &mut Vec<Secret>) -> Result<Noted<Option<Secret>>> {
    let (ui, spec) = (&config.ui_auth, TokenSpec::ui(config));
    let file = ui.file.display();
    let Some(found) = ui_auth_include::read(ui)? else {
        return Ok(noted(format!("{file} does not exist"), Outcome::Created, None));
    };
    let mut differs = Vec::new();
    if (found.uid, found.gid, found.mode) != (ui.uid, ui.gid, ui.mode) {
        differs.push(format!("is {}:{} {:04o} where {}:{} {:04o} is configured", found.uid, found.gid, found.mode, ui.uid, ui.gid, ui.mode));
    }
    match &found.token {
        None => differs.push("holds no token line".to_owned()),
        Some(stored) => {
            secrets.push(stored.clone());
            match token::compare(&session.list_tokens().await?, stored, &spec) {
                Compared::Same => {}
                Compared::NotLive => differs.push(format!("holds no live token labeled {}", spec.label)),
                Compared::Differs(what) => differs.push(format!("holds the token labeled {}, minted with {what}", spec.label)),
            }
        }
    }
    if differs.is_empty() {
        Ok(noted(format!("{file} ({}:{} {:04o}) holds a live token {}", ui.owner, ui.group, ui.mode, spec.describe()), Outcome::Unchanged, found.token))
    } else {
        Ok(noted(format!("{file} {}", differs.join(", ")), Outcome::Updated, found.token))
    }
}

/// `--check`'s step 9: with `token.revoke_previous`, tokens of either label besides the stored
/// ones (`stored`: OpenBao's, the include's) are what a run would delete.
pub(super) async fn check_revoke(session: &Windmill, config: &Config, stored: [Option<Secret>; 2]) -> Result<Noted<()>> {
    let specs = TokenSpec::both(config);
    if !config.token.revoke_previous {
        let labels: Vec<&str> = specs.iter().map(|s| s.label.as_str()).collect();
        return Ok(noted(format!("token.revoke_previous is false; older tokens labeled {} are kept", labels.join(" and ")), Outcome::Unchanged, ()));
    }
    let listed = session.list_tokens().await?;
    let mut counts = Vec::new();
    for (spec, kept) in specs.iter().zip(&stored) {
        let kept = kept.as_ref().map(Secret::prefix);
        let older = listed
            .iter()
            .filter(|t| t.label.as_deref() == Some(spec.label.as_str()) && kept.as_ref().is_none_or(|k| k.expose() != t.token_prefix))
            .count();
        counts.push((spec.label.as_str(), older));
    }
    let shown: Vec<String> = counts.iter().map(|(label, n)| format!("{n} labeled {label}")).collect();
    let outcome = if counts.iter().any(|(_, n)| *n > 0) { Outcome::Updated } else { Outcome::Unchanged };
    Ok(noted(format!("tokens besides the stored ones: {}", shown.join(", ")), outcome, ()))
}
