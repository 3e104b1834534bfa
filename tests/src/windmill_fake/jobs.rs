//! Jobs, and the workspace reads a scoped token is refused. Follows the OpenAPI rows for running
//! and cancelling jobs (201 with the job id as text; cancel answers 200 text), Windmill's job
//! handlers (`backend/windmill-api/src/jobs.rs`: `run_job_by_hash` finds the hash's path, then
//! requires `jobs:run:scripts:<path>`; `add_batch_jobs` is `require_super_admin` only and queues
//! `n` jobs of kind `noop`, `script` or `flow`, a flow given as `flow_value` being request-supplied
//! code; `import_queued_jobs` is `require_admin` only and inserts each job as given, its code and
//! `permissioned_as` included) and what CE 1.743.0 answered a scoped token ("Scoped API tokens"
//! of the worker findings): a job records `created_by: "label-<label>"` for a labeled token; a
//! cancel by a token whose scopes do not reach the route (`jobs:write`) is handled as one by an
//! anonymous caller, a 400.
//!
//! No worker runs here: jobs stay queued. `run_wait_result/preview` therefore has nothing to
//! wait for; past the scope check it answers 501 rather than a result the fake never computed.

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::auth::require_super_admin;
use super::reply::{Call, Reply, json_reply, text};
use super::scopes::{self, Needed};
use super::server::Shared;
use super::{JobRow, TokenRow};

/// `/api/w/{workspace}/jobs/…`, `jobs_u/…`, `variables/…`, `users/…`, past the route check.
pub(super) fn route(
    shared: &Shared,
    call: &Call,
    user: &TokenRow,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    match (call.method, rest) {
        ("POST", ["jobs", "run", "p", path @ ..]) => run_script(shared, call, user, workspace, &path.join("/")),
        ("POST", ["jobs", "run", "h", hash]) => run_hash(shared, call, user, workspace, hash),
        ("POST", ["jobs", "run", "preview"]) => run_preview(shared, call, user, workspace),
        ("POST", ["jobs", "run_wait_result", "preview"]) => {
            Ok(text(501, "the Windmill fake runs no jobs: nothing to wait for"))
        }
        ("POST", ["jobs", "add_batch_jobs", n]) => add_batch(shared, call, user, workspace, n),
        ("POST", ["jobs", "queue", "import"]) => import(shared, call, workspace),
        ("GET", ["jobs", "list"]) => {
            let state = shared.state();
            Ok(json_reply(&Value::Array(
                state
                    .jobs
                    .iter()
                    .filter(|j| j.workspace == workspace)
                    .map(job_json)
                    .collect(),
            )))
        }
        ("GET", ["jobs_u", "get", id]) => {
            let state = shared.state();
            match state.jobs.iter().find(|j| j.workspace == workspace && j.id == *id) {
                Some(job) => Ok(json_reply(&job_json(job))),
                None => Err(text(404, format!("Not found: Job {id} not found"))),
            }
        }
        // The fake holds no variables.
        ("GET", ["variables", "list"]) => Ok(json_reply(&json!([]))),
        ("GET", ["users", "list"]) => Ok(json_reply(&json!([{
            "workspace_id": workspace, "username": "admin", "email": user.email, "is_admin": true, "operator": false,
            "disabled": false, "role": "Admin", "created_at": "2026-11-29T12:00:00Z"
        }]))),
        _ => Ok(text(404, "Not found")),
    }
}

/// Who a job was created by: a labeled token's `username_override` (`label-<label>`, server
/// code), the user's name for a login session.
fn created_by(user: &TokenRow) -> String {
    if user.label == "session" || user.label.is_empty() {
        "admin".to_owned()
    } else {
        format!("label-{}", user.label)
    }
}

fn job_id() -> String {
    let digest = Sha256::digest(crate::servers::random_string(32).as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}

/// A job as the caller's own: it runs with the owner's rights (`permissioned_as: u/admin`, observed).
fn own_job(
    user: &TokenRow,
    workspace: &str,
    kind: &str,
    script_path: Option<String>,
    raw_code: Option<String>,
    args: Value,
) -> JobRow {
    JobRow {
        id: job_id(),
        workspace: workspace.to_owned(),
        kind: kind.to_owned(),
        script_path,
        created_by: created_by(user),
        permissioned_as: "u/admin".to_owned(),
        raw_code,
        args,
        canceled: false,
    }
}

fn queue(shared: &Shared, job: JobRow) -> Reply {
    let id = job.id.clone();
    shared.state().jobs.push(job);
    text(201, id)
}

fn deployed(shared: &Shared, workspace: &str, path: &str) -> bool {
    shared
        .state()
        .scripts
        .iter()
        .any(|s| s.workspace == workspace && s.path == path && !s.archived)
}

/// The handler requires the run scope of the path before it looks the script up.
fn run_script(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str, path: &str) -> Result<Reply, Reply> {
    scopes::require(user, &Needed::run_script(path), shared.state().enforce_scopes)?;
    let args: Value = call.json()?;
    if !deployed(shared, workspace, path) {
        return Err(text(404, format!("Not found: Script not found at path {path}")));
    }
    Ok(queue(
        shared,
        own_job(user, workspace, "script", Some(path.to_owned()), None, args),
    ))
}

/// The handler finds the hash's path first, then requires the run scope of that path.
fn run_hash(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str, hash: &str) -> Result<Reply, Reply> {
    let path = shared
        .state()
        .scripts
        .iter()
        .find(|s| s.workspace == workspace && s.hash == hash)
        .map(|s| s.path.clone());
    let Some(path) = path else {
        return Err(text(404, format!("Not found: script not found at hash {hash}")));
    };
    scopes::require(user, &Needed::run_script(&path), shared.state().enforce_scopes)?;
    let args: Value = call.json()?;
    Ok(queue(
        shared,
        own_job(user, workspace, "script", Some(path), None, args),
    ))
}

fn run_preview(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str) -> Result<Reply, Reply> {
    let preview: Value = call.json()?;
    let (Some(content), Some(_)) = (
        preview.get("content").and_then(Value::as_str),
        preview.get("language").and_then(Value::as_str),
    ) else {
        return Err(text(
            422,
            "Failed to deserialize the JSON body into the target type: missing field `content` or `language`",
        ));
    };
    let args = preview.get("args").cloned().unwrap_or_else(|| json!({}));
    Ok(queue(
        shared,
        own_job(user, workspace, "preview", None, Some(content.to_owned()), args),
    ))
}

/// `add_batch_jobs`: `n` jobs as the caller, answered as a JSON list of their ids.
fn add_batch(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str, n: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct BatchInfo {
        kind: String,
        flow_value: Option<Value>,
        path: Option<String>,
    }
    require_super_admin(user)?;
    let n: usize = n
        .parse()
        .map_err(|_| text(400, format!("Invalid URL: Cannot parse `{n}` to a `i32`")))?;
    let batch: BatchInfo = call.json()?;
    let (kind, path, code) = match batch.kind.as_str() {
        "noop" => ("noop", None, None),
        "script" => match batch.path {
            Some(path) if deployed(shared, workspace, &path) => ("script", Some(path), None),
            Some(path) => return Err(text(404, format!("Not found: Script not found at path {path}"))),
            None => return Err(text(500, "Internal: Path is required if no value is not provided")),
        },
        // A flow given inline is code of the request's choosing.
        "flow" => match (batch.flow_value, batch.path) {
            (Some(value), _) => ("flow", None, Some(value.to_string())),
            (None, Some(path)) => ("flow", Some(path), None),
            (None, None) => return Err(text(500, "Internal: Path is required if no value is not provided")),
        },
        other => return Err(text(400, format!("Bad request: Invalid batch kind: {other}"))),
    };
    let jobs: Vec<JobRow> = (0..n)
        .map(|_| own_job(user, workspace, kind, path.clone(), code.clone(), json!({})))
        .collect();
    let ids: Vec<Value> = jobs.iter().map(|j| json!(j.id)).collect();
    shared.state().jobs.extend(jobs);
    Ok(json_reply(&Value::Array(ids)))
}

/// `import_queued_jobs`: each job inserted as given, with the code and the rights it names.
fn import(shared: &Shared, call: &Call, workspace: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct Exported {
        id: String,
        kind: String,
        raw_code: Option<String>,
        runnable_path: Option<String>,
        created_by: String,
        permissioned_as: String,
        #[serde(default)]
        args: Value,
    }
    let jobs: Vec<Exported> = call.json()?;
    let mut state = shared.state();
    for job in jobs {
        state.jobs.push(JobRow {
            id: job.id,
            workspace: workspace.to_owned(),
            kind: job.kind,
            script_path: job.runnable_path,
            created_by: job.created_by,
            permissioned_as: job.permissioned_as,
            raw_code: job.raw_code,
            args: job.args,
            canceled: false,
        });
    }
    Ok(text(200, "Successfully imported jobs"))
}

/// `None`: the caller's token did not pass (the route needs `jobs:write`), so the handler sees an
/// anonymous caller (observed: the 400 below for a token with `jobs:read` alone).
pub(super) fn cancel(shared: &Shared, user: Option<TokenRow>, workspace: &str, id: &str) -> Result<Reply, Reply> {
    if user.is_none() {
        return Err(text(
            400,
            "Bad request: You are not logged in and this job was not created by an anonymous user like you so you cannot cancel it",
        ));
    }
    let mut state = shared.state();
    let Some(job) = state.jobs.iter_mut().find(|j| j.workspace == workspace && j.id == id) else {
        return Err(text(404, format!("Not found: Job {id} not found")));
    };
    job.canceled = true;
    Ok(text(200, id))
}

fn job_json(job: &JobRow) -> Value {
    json!({
        "id": job.id, "workspace_id": job.workspace, "type": "QueuedJob", "running": false, "canceled": job.canceled,
        "job_kind": job.kind, "script_path": job.script_path, "created_by": job.created_by, "args": job.args,
        "raw_code": job.raw_code, "created_at": "2026-11-29T12:00:00Z", "permissioned_as": job.permissioned_as,
    })
}
