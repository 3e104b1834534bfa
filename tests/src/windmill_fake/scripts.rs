//! Scripts: paths, hashes, `parent_hash`, versions. Follows Windmill's server code
//! (`backend/windmill-api-scripts/src/scripts.rs`: `create_script_internal`'s rules in order,
//! `get_script_by_path`; the path check constraint of the `script` table) and what CE 1.743.0
//! answered (the "Scripts" rows: 201 with 16 hex digits, the 400 texts, the `get/p` JSON of the
//! python build). The hash is the fake's own (see the module comment of the fake).
//!
//! An operator may not create scripts (observed on 1.788: 401 `Operators cannot create …`; not
//! checked on older servers). A version that needs a lock (python3) queues a dependency job:
//! on a server still migrating its job tables that is the 400 of [`MIGRATING`] (observed on
//! 1.587), and nothing is created.

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::ScriptRow;
use super::auth::Caller;
use super::reply::{Call, Reply, absent, json_reply, text};
use super::server::Shared;
use super::state::State;

/// What a server still running its startup migration of the job tables answers a job submission
/// (observed on 1.587: the "v2 finalization" about 5 s after a fresh start).
pub(super) const MIGRATING: &str = "SqlErr: error returned from database: null value in column \"__job_kind\" of relation \"v2_job_queue\" violates not-null constraint @jobs.rs:4208:10";

/// `/api/w/{workspace}/scripts/…`.
pub(super) fn route(
    shared: &Shared,
    call: &Call,
    caller: &Caller,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    match (call.method, rest) {
        ("GET", ["scripts", "get", "p", path @ ..]) => {
            let path = path.join("/");
            let state = shared.state();
            // server code: the newest row by creation, archived or not; 404 text (observed).
            match state
                .scripts
                .iter()
                .rev()
                .find(|s| s.workspace == workspace && s.path == path)
            {
                None => Err(text(404, format!("Not found: Script not found at path {path}"))),
                Some(row) => Ok(json_reply(&script_json(row))),
            }
        }
        ("POST", ["scripts", "create"]) => {
            if !caller.is_admin {
                return Err(text(
                    401,
                    "Not authorized: Operators cannot create scripts for security reasons",
                ));
            }
            let exists = shared.state().workspaces.contains_key(workspace);
            create_script(shared, call, workspace, exists)
        }
        _ => Ok(absent()),
    }
}

const SCRIPT_LANGS: &[&str] = &[
    "python3",
    "deno",
    "go",
    "bash",
    "powershell",
    "postgresql",
    "mysql",
    "bigquery",
    "snowflake",
    "mssql",
    "oracledb",
    "graphql",
    "nativets",
    "bun",
    "php",
    "rust",
    "ansible",
    "csharp",
    "nu",
    "java",
    "ruby",
    "duckdb",
    "bunnative",
];

/// Windmill's script path check constraint `^[ufg](/[\w-]+){2,}$` (server code).
fn proper_script_path(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts.len() >= 3
        && matches!(parts[0], "u" | "f" | "g")
        && parts[1..]
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'))
}

/// The `get/p` JSON as observed (python build: with `assets`; no `lock` key while it is NULL).
fn script_json(row: &ScriptRow) -> Value {
    let mut value = json!({
        "workspace_id": row.workspace, "hash": row.hash, "path": row.path,
        "parent_hashes": if row.parent_hashes.is_empty() { Value::Null } else { json!(row.parent_hashes) },
        "summary": row.summary, "description": row.description, "content": row.content,
        "created_by": row.created_by, "created_at": "2026-11-29T12:00:00Z", "archived": row.archived, "schema": null,
        "deleted": false, "is_template": false, "extra_perms": {}, "lock_error_logs": row.lock_error_logs, "language": row.language,
        "kind": "script", "tag": null, "ws_error_handler_muted": false, "assets": [], "is_draft": false,
    });
    if let Some(lock) = &row.lock {
        value["lock"] = json!(lock);
    }
    // What the writer set besides: as given (`kind`, `tag`, `schema` … replace the defaults above).
    for (key, setting) in &row.settings {
        value[key] = setting.clone();
    }
    value
}

/// The request fields the fake keeps as they are: all but those it handles itself.
fn settings_of(raw: &Value) -> serde_json::Map<String, Value> {
    const OWN: [&str; 7] = [
        "path",
        "parent_hash",
        "summary",
        "description",
        "content",
        "language",
        "lock",
    ];
    let mut settings = raw.as_object().cloned().unwrap_or_default();
    settings.retain(|key, value| !OWN.contains(&key.as_str()) && !value.is_null());
    settings
}

#[derive(Deserialize)]
struct NewScript {
    path: String,
    parent_hash: Option<String>,
    summary: String,
    #[serde(default)]
    description: String,
    content: String,
    language: String,
}

fn create_script(shared: &Shared, call: &Call, workspace: &str, exists: bool) -> Result<Reply, Reply> {
    let raw: Value = call.json()?;
    let new: NewScript = serde_json::from_value(raw.clone()).map_err(|e| {
        text(
            422,
            format!("Failed to deserialize the JSON body into the target type: {e}"),
        )
    })?;
    if !SCRIPT_LANGS.contains(&new.language.as_str()) {
        return Err(text(
            422,
            format!(
                "Failed to deserialize the JSON body into the target type: language: unknown variant `{}`",
                new.language
            ),
        ));
    }
    if let Some(parent) = &new.parent_hash {
        // observed: a parent_hash that is not hex is a 422.
        if parent.len() % 16 != 0 || !parent.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(text(
                422,
                "Failed to deserialize the JSON body into the target type: parent_hash: Invalid character",
            ));
        }
    }
    if !proper_script_path(&new.path) {
        return Err(text(
            400,
            "SqlErr: error returned from database: new row for relation \"script\" violates check constraint \"proper_id\" @scripts.rs:1395:5",
        ));
    }
    if !exists {
        return Err(text(
            500,
            "Internal: error returned from database: insert or update on table \"script\" violates foreign key constraint \"script_workspace_id_fkey\"",
        ));
    }
    let mut state = shared.state();
    if new.language == "python3"
        && raw.get("lock").and_then(Value::as_str).is_none_or(str::is_empty)
        && state.migrating()
    {
        return Err(text(400, MIGRATING));
    }
    // The "concurrent writer": its version lands between the bootstrap's read and write.
    if let Some(index) = state.concurrent_writes.iter().position(|(p, _)| *p == new.path) {
        let (_, content) = state.concurrent_writes.remove(index);
        push_other_version(&mut state, workspace, &new.path, &content, "other writer");
    }
    let hash = script_hash(&raw);
    let in_workspace = |s: &&ScriptRow| s.workspace == workspace;
    // server code: the same request again.
    if state.scripts.iter().filter(in_workspace).any(|s| s.hash == hash) {
        return Err(text(
            400,
            "Bad request: A script with same hash (hence same path, description, summary, content) already exists!",
        ));
    }
    let live_at_path: Vec<String> = state
        .scripts
        .iter()
        .filter(in_workspace)
        .filter(|s| s.path == new.path && !s.archived)
        .map(|s| s.hash.clone())
        .collect();
    let parent_hashes = match &new.parent_hash {
        // Rule 2: no parent while a live version exists.
        None => {
            if let Some(live) = live_at_path.first() {
                return Err(text(
                    400,
                    format!(
                        "Bad request: Path conflict for {} with non-archived hash {live}",
                        new.path
                    ),
                ));
            }
            Vec::new()
        }
        Some(parent) => {
            // Rule 3: the parent must exist and be the head (no other child), and no other live
            // version may sit at the path.
            let Some(parent_row) = state
                .scripts
                .iter()
                .filter(in_workspace)
                .find(|s| s.hash == *parent)
                .cloned()
            else {
                return Err(text(400, "Bad request: The parent hash does not seem to exist"));
            };
            if let Some(child) = state
                .scripts
                .iter()
                .filter(in_workspace)
                .find(|s| s.parent_hashes.first() == Some(parent))
            {
                return Err(text(
                    400,
                    format!(
                        "Bad request: A script with hash {} with same parent_hash has been found. However, the lineage must be linear: no 2 scripts can have the same parent",
                        child.hash
                    ),
                ));
            }
            if let Some(live) = live_at_path.iter().find(|h| *h != parent) {
                return Err(text(
                    400,
                    format!(
                        "Bad request: Path conflict for {} with non-archived hash {live}",
                        new.path
                    ),
                ));
            }
            state
                .scripts
                .iter_mut()
                .filter(|s| s.workspace == workspace && s.hash == *parent)
                .for_each(|s| s.archived = true);
            std::iter::once(parent.clone())
                .chain(parent_row.parent_hashes)
                .take(20)
                .collect()
        }
    };
    // Rule 5: a lock that is given is stored as given; python3 without one waits for a
    // dependency job (none runs here: NULL); bash needs none (`""`).
    let given = raw
        .get("lock")
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty())
        .map(str::to_owned);
    let lock = if new.language == "bash" {
        Some(String::new())
    } else {
        given
    };
    state.scripts.push(ScriptRow {
        workspace: workspace.into(),
        hash: hash.clone(),
        path: new.path,
        parent_hashes,
        summary: new.summary,
        description: new.description,
        content: new.content,
        language: new.language,
        lock,
        settings: settings_of(&raw),
        lock_error_logs: None,
        archived: false,
        created_by: "admin".into(),
        created_at: std::time::Instant::now(),
    });
    Ok(text(201, hash))
}

/// A version by another writer, created by the same rules as through the API: the head (if
/// any) becomes its parent and is archived.
pub(super) fn push_other_version(state: &mut State, workspace: &str, path: &str, content: &str, summary: &str) {
    let head = state
        .scripts
        .iter()
        .rev()
        .find(|s| s.workspace == workspace && s.path == path)
        .cloned();
    let body = json!({"path": path, "parent_hash": head.as_ref().map(|h| h.hash.clone()), "summary": summary, "description": "", "content": content, "language": "python3"});
    if let Some(head) = &head {
        state
            .scripts
            .iter_mut()
            .filter(|s| s.workspace == workspace && s.hash == head.hash)
            .for_each(|s| s.archived = true);
    }
    let parent_hashes = head
        .map(|h| {
            std::iter::once(h.hash.clone())
                .chain(h.parent_hashes)
                .take(20)
                .collect()
        })
        .unwrap_or_default();
    state.scripts.push(ScriptRow {
        workspace: workspace.into(),
        hash: script_hash(&body),
        path: path.into(),
        parent_hashes,
        summary: summary.into(),
        description: String::new(),
        content: content.into(),
        language: "python3".into(),
        lock: None,
        settings: serde_json::Map::new(),
        lock_error_logs: None,
        archived: false,
        created_by: "other".into(),
        created_at: std::time::Instant::now(),
    });
}

/// 16 hex digits over the whole request (see the module comment): top-level `null` fields are
/// dropped first, as they deserialise to the same struct as absent ones.
fn script_hash(body: &Value) -> String {
    let mut request = body.clone();
    if let Value::Object(fields) = &mut request {
        fields.retain(|_, value| !value.is_null());
    }
    let digest = Sha256::digest(canonical(&request).as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON with object keys sorted at every level, whatever serde_json's map order.
fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::from(k.as_str()), canonical(&map[*k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}
