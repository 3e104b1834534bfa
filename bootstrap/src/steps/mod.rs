//! The nine steps of "What each step does" (docs/operators/bootstrap.md), in order and numbered as there. Each
//! is a function returning what it looked at, whether it created, updated or left things, and
//! what it hands on ([`Noted`](crate::report::Noted)); [`Notes::step`] logs its line and names
//! it in a failure.
//!
//! - `access`: 1 ready, 2 login;
//! - `converge`: 4 workspace (and the front-end's operator), 5 scripts, 6 settings;
//! - `tokens`: 3 token, 7 openbao, 8 ui-auth, 9 revoke;
//! - `check_tokens`: what `--check` compares in 7, 8 and 9.
//!
//! The state file (`state_file`, [`State`]) is read before step 1; a run writes it in steps 3,
//! 5 and 9, `--check` never.

mod access;
mod check_tokens;
mod converge;
mod tokens;

use safe_io::secret::{Secret, scrub};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::http::{self, Policy};
use crate::openbao::OpenBao;
use crate::report::{Notes, Step};
use crate::scripts::LocalScript;
use crate::state::State;
use crate::token::{self, Minted};
use crate::windmill::Windmill;

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
    // A server still migrating its job tables is waited for as long as one not answering yet.
    let anonymous = Windmill::new(
        client.clone(),
        &config.windmill.url,
        policy.clone(),
        config.retry.ready_timeout,
    );
    let bao = OpenBao::new(client, &config.openbao.addr, config.openbao.token.clone(), policy);
    let mut notes = Notes::new(check);
    tokens::warn_if_unscoped(config);
    let mut state = State::load(&config.state_file)?;

    // 1. Wait for GET /api/version.
    let version = notes.step(Step::Ready, access::ready(&anonymous, config)).await?;
    // 2. Log in with the node password; write the hash only when that fails.
    let session = notes
        .step(Step::Login, access::login(&anonymous, config, check))
        .await?;
    secrets.extend(session.clone());
    let Some(session) = session else {
        // --check on a node whose password is neither the node's nor the default one: nothing
        // else can be looked at.
        tracing::info!("check: cannot log in, so workspace, scripts, settings and the stored tokens were not compared");
        return Ok(finish(notes));
    };
    let session = anonymous.with_token(&session);

    if check {
        // --check: steps 4 to 9 read-only, with the login session, which is then logged out.
        let compared = async {
            let (workspace, _) = compare(&session, config, local, &mut state, &mut notes).await?;
            let (front, listed) = notes
                .step(
                    Step::OpenBao,
                    check_tokens::openbao(
                        &session,
                        &bao,
                        config,
                        workspace.operator.as_ref(),
                        &tokens::former_operators(config, &state),
                        secrets,
                    ),
                )
                .await?;
            let ui = notes
                .step(
                    Step::UiAuth,
                    check_tokens::include(&session, config, &listed.admin, secrets),
                )
                .await?;
            notes
                .step(Step::Revoke, async {
                    check_tokens::revoke(config, &listed, &state, [front, ui])
                })
                .await
        }
        .await;
        log_out(&session, config, secrets).await;
        compared?;
        return Ok(finish(notes));
    }

    // 3. The UI's token, which the rest of the run uses. The login session is then no longer
    // needed: it is logged out rather than left to live its three days.
    let ui = notes
        .step(Step::Token, tokens::mint_ui(&session, config, &mut state, secrets))
        .await;
    log_out(&session, config, secrets).await;
    let mut ui = ui?;
    let api = anonymous.with_token(ui.secret());

    // 4 to 8. A token that no sink holds when a step fails is deleted again. Step 7 mints (as
    // the operator of step 4), proves and stores the front-end's token; the old tokens stay
    // valid until step 9, so a failure in between leaves the previous OpenBao secret and include
    // working.
    let mut front: Option<Minted> = None;
    let stored = async {
        let (workspace, scripts) = compare(&api, config, local, &mut state, &mut notes).await?;
        let operator = workspace.operator.expect("a run adds the operator in step 4");
        notes
            .step(
                Step::OpenBao,
                tokens::openbao(
                    &api,
                    &bao,
                    config,
                    &version,
                    &operator,
                    &scripts.probes,
                    &mut front,
                    secrets,
                ),
            )
            .await?;
        notes
            .step(Step::UiAuth, async { tokens::ui_auth(config, &mut ui) })
            .await?;
        Ok::<_, Error>((operator, scripts.failed_locks))
    }
    .await;
    let minted: Vec<&Minted> = front.iter().chain([&ui]).collect();
    let (operator, failed_locks) = match stored {
        Ok(done) => done,
        Err(error) => {
            token::discard(&api, &minted, |e| scrubbed(e, config, secrets)).await;
            return Err(error);
        }
    };
    let front = front.as_ref().expect("stored in step 7");

    // 9. Revoke the older tokens: the operator's, and the superadmin's of both labels.
    notes
        .step(
            Step::Revoke,
            tokens::revoke(&api, config, &minted, &operator, front, &mut state, secrets),
        )
        .await?;
    // A version whose dependency job failed in step 5 does not run: the run fails, so that
    // systemd runs it again, which uploads it again (with the settings of step 6 in place).
    if !failed_locks.is_empty() {
        return Err(Error::Step {
            step: Step::Scripts.to_string(),
            source: Box::new(Error::LocksFailed {
                paths: failed_locks.join(" "),
            }),
        });
    }
    Ok(Finish::Converged)
}

fn finish(notes: Notes) -> Finish {
    let drift = notes.drift();
    if drift.is_empty() {
        Finish::Converged
    } else {
        Finish::Drift(drift)
    }
}

/// Steps 4, 5 and 6: what `--check` compares and a run converges.
async fn compare(
    api: &Windmill,
    config: &Config,
    local: Vec<LocalScript>,
    state: &mut State,
    notes: &mut Notes,
) -> Result<(converge::Workspace, converge::Scripts)> {
    let check = notes.check();
    let workspace = notes
        .step(Step::Workspace, converge::workspace(api, config, check))
        .await?;
    let scripts = notes
        .step(
            Step::Scripts,
            converge::scripts(api, config, local, state, check, workspace.exists),
        )
        .await?;
    notes
        .step(Step::Settings, converge::settings(api, &config.settings, check))
        .await?;
    Ok((workspace, scripts))
}

/// Logs out a login session of this run, best effort: a session that stays behind expires by
/// itself (after three days), so a failure is worth a warning, not a failed run.
async fn log_out(session: &Windmill, config: &Config, found: &[Secret]) {
    match session.logout().await {
        Ok(()) => tracing::debug!("logged out the login session"),
        Err(error) => tracing::warn!(
            "could not log out the login session (it expires by itself): {}",
            scrubbed(&error, config, found)
        ),
    }
}

/// An error's message for a warning line, scrubbed of every secret known so far (as `main`
/// scrubs the error it ends with).
fn scrubbed(error: &Error, config: &Config, found: &[Secret]) -> String {
    let mut secrets = config.secrets();
    secrets.extend(found.iter());
    scrub(&error.to_string(), &secrets)
}
