//! Steps 4, 5 and 6: the workspace and folder, the scripts, the global settings. With
//! `--check` each only looks.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::error::Result;
use crate::report::{Noted, Outcome, noted};
use crate::scripts::{self, Change, LocalScript};
use crate::state::State;
use crate::windmill::Windmill;

/// Step 4; its value: whether the workspace exists (with `--check`, it may not).
pub(super) async fn workspace(client: &Windmill, config: &Config, check: bool) -> Result<Noted<bool>> {
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
    Ok(noted(
        format!("workspace {}{archived} and folder {}", ws.id, ws.folder),
        outcome,
        exists,
    ))
}

/// Step 5. The versions it creates are recorded in the state file (see [`crate::state`]).
pub(super) async fn scripts(
    client: &Windmill,
    config: &Config,
    local: Vec<LocalScript>,
    state: &mut State,
    check: bool,
    workspace_exists: bool,
) -> Result<Noted<()>> {
    let total = local.len();
    let workspace = &config.workspace.id;
    let changes: BTreeMap<String, (Change, Option<String>)> = if workspace_exists {
        scripts::converge(client, workspace, local, state, config.scripts.concurrency, check).await?
    } else {
        // --check on a node without the workspace: every script would be created.
        local.into_iter().map(|s| (s.path, (Change::Created, None))).collect()
    };
    let mut outcome = Outcome::Unchanged;
    let (mut created, mut updated) = (Vec::new(), Vec::new());
    for (path, (change, hash)) in &changes {
        if let Some(hash) = hash {
            state.record_created(workspace, path, hash);
        }
        match change {
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
    let unchanged = total - created.len() - updated.len();
    let (create_word, update_word) = if check {
        ("would create", "would update")
    } else {
        ("created", "updated")
    };
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
