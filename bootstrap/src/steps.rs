//! The nine steps of the README's "What each step does", in order and numbered as there. Each
//! is a function returning what it looked at, whether it created, updated or left things, and
//! what it hands on ([`Noted`]); [`Notes::step`] logs its line and names it in a failure.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{self, Policy};
use crate::openbao::OpenBao;
use crate::password;
use crate::report::{Noted, Notes, Outcome, Step, noted};
use crate::scripts::{self, Change, LocalScript};
use crate::ui_auth_include::{self, Written};
use safe_io::secret::{Secret, scrub};
use crate::windmill::{Login, Windmill};

/// How a run ended, when no step failed.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish {
    Converged,
    /// `--check` only: the steps that would change something.
    Drift(Vec<Step>),
}

/// Runs the steps. Tokens obtained on the way are pushed to `secrets`, so that the caller can
/// scrub them from an error it prints.
pub async fn run(config: &Config, local: Vec<LocalScript>, check: bool, secrets: &mut Vec<Secret>) -> Result<Finish> {
    let client = http::client(&config.retry)?;
    let policy = Policy::new(&config.retry);
    let anonymous = Windmill::new(client.clone(), &config.windmill.url, policy.clone());
    let mut notes = Notes::new(check);

    // 1. Wait for GET /api/version.
    notes.step(Step::Ready, ready(&anonymous, config)).await?;
    // 2. Log in with the node password; write the hash only when that fails.
    let session = notes.step(Step::Login, login(&anonymous, config, check)).await?;
    secrets.extend(session.clone());
    let Some(session) = session else {
        // --check on a node whose password is neither the node's nor the default one: nothing
        // else can be looked at.
        tracing::info!("check: cannot log in, so workspace, scripts and settings were not compared");
        return Ok(finish(notes));
    };
    let session = anonymous.with_token(&session);

    if check {
        // --check: steps 4 to 6 read-only, with the login session, which is then logged out.
        let compared = compare(&session, config, local, &mut notes).await;
        log_out(&session, config, secrets).await;
        compared?;
        return Ok(finish(notes));
    }

    // 3. Mint the token the rest of the run uses, so every later call also proves it works. The
    // login session is then no longer needed: it is logged out rather than left to live its
    // three days.
    let minted = notes.step(Step::Token, mint(&session, config)).await;
    log_out(&session, config, secrets).await;
    let token = minted?;
    secrets.push(token.clone());
    let api = anonymous.with_token(&token);

    // 4 to 7. Until OpenBao holds the new token nothing does, and nothing ever will: a failure
    // in these steps deletes it again. Left behind, every failed run (every 30 s with
    // Restart=on-failure) would add a non-expiring superadmin token. From step 8 on it is kept:
    // OpenBao holds it, and its consumers may already use it; the next run's step 9 revokes it.
    let stored = async {
        compare(&api, config, local, &mut notes).await?;
        // 7. OpenBao, then 8. the nginx include: the old token stays valid until both hold the
        // new one, so a crash in between leaves a working include behind.
        let bao = OpenBao::new(client, &config.openbao.addr, config.openbao.token.clone(), policy);
        notes.step(Step::OpenBao, store_in_openbao(&bao, config, &token)).await
    }
    .await;
    if let Err(error) = stored {
        discard(&api, config, &token, secrets).await;
        return Err(error);
    }

    // 8. The nginx include, written atomically with its owner and mode.
    notes.step(Step::UiAuth, async { ui_auth(config, &token) }).await?;
    // 9. Revoke the older tokens with the same label.
    notes.step(Step::Revoke, revoke(&api, config, &token, secrets)).await?;
    Ok(Finish::Converged)
}

fn finish(notes: Notes) -> Finish {
    let drift = notes.drift();
    if drift.is_empty() { Finish::Converged } else { Finish::Drift(drift) }
}

/// Steps 4, 5 and 6: what `--check` compares and a run converges.
async fn compare(api: &Windmill, config: &Config, local: Vec<LocalScript>, notes: &mut Notes) -> Result<()> {
    let check = notes.check();
    // 4. Workspace and folder.
    let workspace_exists = notes.step(Step::Workspace, workspace(api, config, check)).await?;
    // 5. Scripts.
    notes.step(Step::Scripts, scripts(api, config, local, check, workspace_exists)).await?;
    // 6. Global settings.
    notes.step(Step::Settings, settings(api, &config.settings, check)).await
}

async fn mint(session: &Windmill, config: &Config) -> Result<Noted<Secret>> {
    let token = session.create_token(&config.token.label).await?;
    Ok(noted(format!("minted a new token labeled {}", config.token.label), Outcome::Created, token))
}

/// Step 7: `{field: token}` at the configured path, as `bao kv put` writes it.
async fn store_in_openbao(bao: &OpenBao, config: &Config, token: &Secret) -> Result<Noted<()>> {
    let written = bao.put(&config.openbao.path, &config.openbao.field, token).await?;
    let mount = match &written.mount {
        Some(mount) => format!("mount {mount}, KV v{}", written.version),
        None => "no mount found, KV v1 assumed".to_owned(),
    };
    let (outcome, unknown) = match written.existed {
        Some(false) => (Outcome::Created, ""),
        Some(true) => (Outcome::Updated, ""),
        None => (Outcome::Updated, "; whether it existed before is unknown: the token may not read it"),
    };
    Ok(noted(format!("{} field {} ({mount}) holds the new token{unknown}", config.openbao.path, config.openbao.field), outcome, ()))
}

/// Deletes the token this run minted, best effort, after a failure before it was stored. One
/// line either way, naming the label only (never the token or its prefix); the run's own error
/// follows it.
async fn discard(api: &Windmill, config: &Config, token: &Secret, found: &[Secret]) {
    let label = &config.token.label;
    match api.delete_token(&token.prefix()).await {
        Ok(()) => tracing::info!("deleted the token labeled {label} that this run minted, as the run failed before storing it"),
        Err(error) => tracing::warn!(
            "could not delete the token labeled {label} that this run minted (a later run revokes it in step 9): {}",
            scrubbed(&error, config, found)
        ),
    }
}

/// Logs out a login session of this run, best effort: a session that stays behind expires by
/// itself (after three days), so a failure is worth a warning, not a failed run.
async fn log_out(session: &Windmill, config: &Config, found: &[Secret]) {
    match session.logout().await {
        Ok(()) => tracing::debug!("logged out the login session"),
        Err(error) => tracing::warn!("could not log out the login session (it expires by itself): {}", scrubbed(&error, config, found)),
    }
}

/// An error's message for a warning line, scrubbed of every secret known so far (as `main`
/// scrubs the error it ends with).
fn scrubbed(error: &Error, config: &Config, found: &[Secret]) -> String {
    let mut secrets = config.secrets();
    secrets.extend(found.iter());
    scrub(&error.to_string(), &secrets)
}

async fn ready(client: &Windmill, config: &Config) -> Result<Noted<String>> {
    let started = Instant::now();
    let timeout = config.retry.ready_timeout;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100).min(timeout))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(timeout));
    // The last failure, for the message when the time is up.
    let last = std::cell::RefCell::new(None::<String>);
    let waiting = (|| client.version_once()).retry(backoff).notify(|e: &String, delay| {
        tracing::debug!("GET /api/version: {e}; again in {:.2} s", delay.as_secs_f64());
        *last.borrow_mut() = Some(e.clone());
    });
    // `with_total_delay` bounds only the sleeps between tries: a Windmill that accepts
    // connections and never answers would hold every try for the whole request timeout. The
    // timeout bounds the whole wait.
    let not_ready = |last: String| Error::NotReady { seconds: timeout.as_secs_f64(), last };
    let version = match tokio::time::timeout(timeout, waiting).await {
        Ok(result) => result.map_err(not_ready)?,
        Err(_) => {
            let last = last.borrow_mut().take();
            return Err(not_ready(last.unwrap_or_else(|| "the request got no answer".to_owned())));
        }
    };
    let what = format!("{} answered GET /api/version ({}) after {:.1} s", config.windmill.url, http::short(&version), started.elapsed().as_secs_f64());
    Ok(noted(what, Outcome::Unchanged, version))
}

async fn login(client: &Windmill, config: &Config, check: bool) -> Result<Noted<Option<Secret>>> {
    let w = &config.windmill;
    let email = &w.admin_email;
    if let Login::Token(session) = client.login(email, &w.admin_password).await? {
        return Ok(noted(format!("{email} logs in with the node password"), Outcome::Unchanged, Some(session)));
    }
    if check {
        // Only --check tries the default password: to report whether the node is still fresh
        // and, if so, to compare the rest with that session (logged out at the end). A run
        // needs no such login: it rewrites the hash either way.
        let default = match client.login(email, &w.default_password).await? {
            Login::Token(session) => Some(session),
            Login::Invalid => None,
        };
        let was = if default.is_some() { "the default password" } else { "another password" };
        return Ok(noted(format!("{email} does not log in with the node password (it has {was}); its hash would be rewritten"), Outcome::Updated, default));
    }
    let hash = password::hash(&w.admin_password)?;
    password::write_hash(&config.database, email, &hash).await?;
    let attempts = config.retry.login_attempts;
    for attempt in 1..=attempts {
        if let Login::Token(session) = client.login(email, &w.admin_password).await? {
            let what = format!("{email} did not log in with the node password; its hash was written to the password table and it logs in now");
            return Ok(noted(what, Outcome::Updated, Some(session)));
        }
        if attempt < attempts {
            tokio::time::sleep(config.retry.delay).await;
        }
    }
    Err(Error::LoginStillRejected { email: email.clone(), attempts })
}

/// Step 4; its value: whether the workspace exists (with `--check`, it may not).
async fn workspace(client: &Windmill, config: &Config, check: bool) -> Result<Noted<bool>> {
    let ws = &config.workspace;
    let mut outcome = Outcome::Unchanged;
    let mut exists = client.workspace_exists(&ws.id).await?;
    if !exists {
        outcome = Outcome::Created;
        if !check {
            client.create_workspace(&ws.id, &ws.name).await?;
            exists = true;
        }
    }
    let folder_exists = exists && client.folder_exists(&ws.id, &ws.folder).await?;
    if !folder_exists {
        outcome = outcome.combine(Outcome::Created);
        if !check {
            client.create_folder(&ws.id, &ws.folder).await?;
        }
    }
    Ok(noted(format!("workspace {} and folder {}", ws.id, ws.folder), outcome, exists))
}

async fn scripts(client: &Windmill, config: &Config, local: Vec<LocalScript>, check: bool, workspace_exists: bool) -> Result<Noted<()>> {
    let total = local.len();
    let changes: BTreeMap<String, Change> = if workspace_exists {
        scripts::converge(client, &config.workspace.id, local, config.scripts.concurrency, check).await?
    } else {
        // --check on a node without the workspace: every script would be created.
        local.into_iter().map(|s| (s.path, Change::Created)).collect()
    };
    let mut outcome = Outcome::Unchanged;
    let (mut created, mut updated) = (Vec::new(), Vec::new());
    for (path, change) in &changes {
        match change {
            Change::Unchanged => {}
            Change::Created => {
                created.push(path.as_str());
                outcome = outcome.combine(Outcome::Created);
            }
            Change::Updated => {
                updated.push(path.as_str());
                outcome = outcome.combine(Outcome::Updated);
            }
        }
    }
    let unchanged = total - created.len() - updated.len();
    let (create_word, update_word) = if check { ("would create", "would update") } else { ("created", "updated") };
    let mut what = format!("{total} scripts in {}", config.scripts.dir.display());
    if !created.is_empty() {
        what.push_str(&format!(", {create_word} {}", created.join(" ")));
    }
    if !updated.is_empty() {
        what.push_str(&format!(", {update_word} {}", updated.join(" ")));
    }
    what.push_str(&format!(", {unchanged} unchanged"));
    Ok(noted(what, outcome, ()))
}

async fn settings(client: &Windmill, wanted: &BTreeMap<String, serde_json::Value>, check: bool) -> Result<Noted<()>> {
    let mut outcome = Outcome::Unchanged;
    let mut changed = Vec::new();
    for (key, value) in wanted {
        let current = client.get_setting(key).await?;
        if current != *value {
            if !check {
                client.set_setting(key, value).await?;
            }
            changed.push(key.as_str());
            outcome = Outcome::Updated;
        }
    }
    let keys: Vec<&str> = wanted.keys().map(String::as_str).collect();
    let mut what = format!("global settings {}", if keys.is_empty() { "(none configured)".to_owned() } else { keys.join(", ") });
    if !changed.is_empty() {
        what.push_str(&format!(" (differed: {})", changed.join(", ")));
    }
    Ok(noted(what, outcome, ()))
}

fn ui_auth(config: &Config, token: &Secret) -> Result<Noted<()>> {
    let ui = &config.ui_auth;
    let outcome = match ui_auth_include::write(ui, token)? {
        Written::Created => Outcome::Created,
        Written::Updated => Outcome::Updated,
        Written::Unchanged => Outcome::Unchanged,
    };
    Ok(noted(format!("{} ({}:{} {:04o}) holds the new token", ui.file.display(), ui.owner, ui.group, ui.mode), outcome, ()))
}

/// Deletes the older tokens of the label. Their prefixes join `secrets`: Windmill's answers to a
/// delete quote the prefix, and an error made of such an answer is scrubbed of it.
async fn revoke(client: &Windmill, config: &Config, token: &Secret, secrets: &mut Vec<Secret>) -> Result<Noted<()>> {
    let label = &config.token.label;
    if !config.token.revoke_previous {
        return Ok(noted(format!("token.revoke_previous is false; older tokens labeled {label} kept"), Outcome::Unchanged, ()));
    }
    let ours = token.prefix();
    let older: Vec<Secret> = client
        .list_tokens()
        .await?
        .into_iter()
        .filter(|t| t.label.as_deref() == Some(label.as_str()) && t.token_prefix != ours.expose())
        .map(|t| Secret::new(t.token_prefix))
        .collect();
    secrets.extend(older.iter().cloned());
    for token_prefix in &older {
        client.delete_token(token_prefix).await?;
    }
    let outcome = if older.is_empty() { Outcome::Unchanged } else { Outcome::Updated };
    Ok(noted(format!("{} older tokens labeled {label} deleted", older.len()), outcome, ()))
}
