//! Steps 4, 5 and 6: the workspace, its folder and the front-end's operator; the scripts (the
//! tree and the proof's probes, and the locks they wait for); the global settings. With
//! `--check` each only looks.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::operator::{self, Operator};
use crate::report::{Noted, Outcome, noted};
use crate::scripts::{self, Change, Converged, LocalScript, Lock};
use crate::state::State;
use crate::windmill::Windmill;

/// What step 4 hands on: whether the workspace exists (with `--check`, it may not) and the
/// operator (with `--check`, none when it does not exist).
pub(super) struct Workspace {
    pub exists: bool,
    pub operator: Option<Operator>,
}

/// What step 5 hands on: the probe scripts' paths (in the folder, outside it) for step 7, and
/// the scripts whose dependency job failed (the run fails at its end, so that it is retried).
pub(super) struct Scripts {
    pub probes: [String; 2],
    pub failed_locks: Vec<String>,
}

/// Step 4.
pub(super) async fn workspace(client: &Windmill, config: &Config, check: bool) -> Result<Noted<Workspace>> {
    let ws = &config.workspace;
    let mut outcome = Outcome::Unchanged;
    let mut exists = client.workspace_exists(&ws.id).await?;
    let mut archived = "";
    if !exists {
        outcome = Outcome::Created;
        if !check {
            client.create_workspace(&ws.id, &ws.name).await?;
            exists = true;
        }
    } else if client.workspace_archived(&ws.id).await? {
        // Archived, it still exists (`workspaces/exists` counts it) but is gone from the UI and
        // its users' lists: the bootstrap's workspace is there to be used, so it is brought back.
        outcome = Outcome::Updated;
        archived = if check {
            " (archived)"
        } else {
            " (was archived, unarchived)"
        };
        if !check {
            client.unarchive_workspace(&ws.id).await?;
        }
    }
    let folder_exists = exists && client.folder_exists(&ws.id, &ws.folder).await?;
    if !folder_exists {
        outcome = outcome.combine(Outcome::Created);
        if !check {
            client.create_folder(&ws.id, &ws.folder).await?;
        }
    }
    let (operator, changed, who) = operator::converge(client, config, check, exists).await?;
    Ok(noted(
        format!("workspace {}{archived} and folder {}, {who}", ws.id, ws.folder),
        outcome.combine(changed),
        Workspace { exists, operator },
    ))
}

/// Step 5. The versions it creates are recorded in the state file (see [`crate::state`]); a run
/// then waits for the locks its python3 versions need (see [`crate::scripts`]).
pub(super) async fn scripts(
    client: &Windmill,
    config: &Config,
    mut local: Vec<LocalScript>,
    state: &mut State,
    check: bool,
    workspace_exists: bool,
) -> Result<Noted<Scripts>> {
    let total = local.len();
    let workspace = &config.workspace.id;
    let admin = client.username().await?;
    if !crate::config::is_username(&admin) {
        return Err(Error::Unexpected {
            service: "Windmill",
            call: "GET /api/users/whoami".into(),
            detail: "the superadmin's username is not a Windmill username (a letter, then letters, digits and _)"
                .into(),
        });
    }
    let probes = scripts::probes(&config.workspace.folder, &admin);
    if let Some(clash) = local.iter().find(|l| probes.iter().any(|p| p.path == l.path)) {
        return Err(Error::Config(format!(
            "{} is the Windmill path {} of a probe script of the bootstrap's own: rename it",
            clash.file.display(),
            clash.path
        )));
    }
    let probe_paths = [probes[0].path.clone(), probes[1].path.clone()];
    local.extend(probes);
    let changes: BTreeMap<String, Converged> = if workspace_exists {
        scripts::converge(client, workspace, local, state, config.scripts.concurrency, check).await?
    } else {
        // --check on a node without the workspace: every script would be created.
        local
            .into_iter()
            .map(|s| {
                let created = Converged {
                    change: Change::Created,
                    created: None,
                    unlocked: false,
                };
                (s.path, created)
            })
            .collect()
    };
    let mut outcome = Outcome::Unchanged;
    let (mut created, mut updated) = (Vec::new(), Vec::new());
    for (path, converged) in &changes {
        if let Some(hash) = &converged.created {
            state.record_created(workspace, path, hash);
        }
        match &converged.change {
            Change::Unchanged => {}
            Change::Created => {
                created.push(path.clone());
                outcome = outcome.combine(Outcome::Created);
            }
            Change::Updated(why) => {
                updated.push(format!("{path} ({})", why.join(", ")));
                outcome = outcome.combine(Outcome::Updated);
            }
        }
    }
    if !check {
        state.save()?;
    }
    let unchanged = total + 2 - created.len() - updated.len();
    let (create_word, update_word) = if check {
        ("would create", "would update")
    } else {
        ("created", "updated")
    };
    let mut what = format!(
        "{total} scripts in {} and the 2 probes of step 7",
        config.scripts.dir.display()
    );
    if !created.is_empty() {
        what.push_str(&format!(", {create_word} {}", created.join(" ")));
    }
    if !updated.is_empty() {
        what.push_str(&format!(", {update_word} {}", updated.join(" ")));
    }
    what.push_str(&format!(", {unchanged} unchanged"));
    let unlocked: Vec<String> = changes
        .iter()
        .filter(|(_, c)| c.unlocked)
        .map(|(path, _)| path.clone())
        .collect();
    let mut failed_locks = Vec::new();
    if check {
        // A run would wait for these: not converged until a worker has locked them.
        if !unlocked.is_empty() {
            what.push_str(&format!(", {} not locked by a worker yet", unlocked.join(" ")));
            outcome = outcome.combine(Outcome::Updated);
        }
    } else if !unlocked.is_empty() {
        let started = Instant::now();
        let locks = scripts::await_locks(client, workspace, &unlocked, config.retry.lock_timeout).await?;
        what.push_str(&format!(
            ", waited {:.1} s for a worker to lock {}",
            started.elapsed().as_secs_f64(),
            unlocked.join(" ")
        ));
        failed_locks = locks
            .into_iter()
            .filter(|(_, lock)| *lock == Lock::Failed)
            .map(|(path, _)| path)
            .collect();
        if !failed_locks.is_empty() {
            what.push_str(&format!(
                " (the dependency job of {} failed: the run fails at its end, and the next uploads it again)",
                failed_locks.join(" ")
            ));
            outcome = outcome.combine(Outcome::Updated);
        }
    }
    Ok(noted(
        what,
        outcome,
        Scripts {
            probes: probe_paths,
            failed_locks,
        },
    ))
}

/// Step 6.
pub(super) async fn settings(
    client: &Windmill,
    wanted: &BTreeMap<String, serde_json::Value>,
    check: bool,
) -> Result<Noted<()>> {
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
    let mut what = format!(
        "global settings {}",
        if keys.is_empty() {
            "(none configured)".to_owned()
        } else {
            keys.join(", ")
        }
    );
    if !changed.is_empty() {
        what.push_str(&format!(" (differed: {})", changed.join(", ")));
    }
    Ok(noted(what, outcome, ()))
}
