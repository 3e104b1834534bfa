//! Steps 3, 7, 8 and 9: the two tokens minted, the front-end's proved and stored in OpenBao, the
//! UI's in the nginx include, the older ones of each label revoked; and what `--check` compares
//! of them. A token's own life (mint, prove, discard, revoke) is [`crate::token`]'s.

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
    let written = bao.put(&config.openbao.path, &config.openbao.field, minted.secret()).await?;
    minted.stored();
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
    let outcome = match ui_auth_include::write(file, ui.secret())? {
        Written::Created => Outcome::Created,
        Written::Updated => Outcome::Updated,
        Written::Unchanged => Outcome::Unchanged,
    };
    ui.stored();
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
/// with the configured scopes and binding. It joins `secrets`.
pub(super) async fn check_openbao(session: &Windmill, bao: &OpenBao, config: &Config, secrets: &mut Vec<Secret>) -> Result<Noted<()>> {
    let spec = TokenSpec::front_end(config);
    let place = format!("{} field {}", config.openbao.path, config.openbao.field);
    let Some(stored) = bao.get(&config.openbao.path, &config.openbao.field).await? else {
        return Ok(noted(format!("{place} holds no token"), Outcome::Created, ()));
    };
    secrets.push(stored.clone());
    let listed = session.list_tokens().await?;
    Ok(match token::compare(&listed, &stored, &spec) {
        Compared::Same => noted(format!("{place} holds a live token {}", spec.describe()), Outcome::Unchanged, ()),
        Compared::NotLive => noted(format!("{place} holds no live token labeled {}", spec.label), Outcome::Updated, ()),
        Compared::Differs(what) => noted(format!("{place} holds the token labeled {}, minted with {what}", spec.label), Outcome::Updated, ()),
    })
}
