//! Jobs, and the workspace reads a scoped token is refused. Follows the OpenAPI rows for running
//! and cancelling jobs (201 with the job id as text; cancel answers 200 text) and what CE
//! 1.743.0 answered a scoped token ("Scoped API tokens" of the worker findings): a job records
//! `created_by: "label-<label>"` for a labeled token; cancelling with `jobs:read` alone is a 400.
//!
//! No worker runs here: jobs stay queued. `run_wait_result/preview` therefore has nothing to
//! wait for; past the scope check it answers 501 rather than a result the fake never computed.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::reply::{Call, Reply, json_reply, text};
use super::scopes::{self, Needed};
use super::server::Shared;
use super::{JobRow, TokenRow};

/// `/api/w/{workspace}/jobs/…`, `jobs_u/…`, `variables/…`, `users/…`.
pub(super) fn route(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str, rest: &[&str]) -> Result<Reply, Reply> {
    match (call.method, rest) {
        ("POST", ["jobs", "run", "p", path @ ..]) => run_script(shared, call, user, workspace, &path.join("/")),
        ("POST", ["jobs", "run", "preview"]) => run_preview(shared, call, user, workspace),
        ("POST", ["jobs", "run_wait_result", "preview"]) => Ok(text(501, "the Windmill fake runs no jobs: nothing to wait for")),
        ("GET", ["jobs_u", "get", id]) => {
            let state = shared.state();
            match state.jobs.iter().find(|j| j.workspace == workspace && j.id == *id) {
                Some(job) => Ok(json_reply(&job_json(job))),
                None => Err(text(404, format!("Not found: Job {id} not found"))),
            }
        }
        ("POST", ["jobs_u", "queue", "cancel", id]) => cancel(shared, user, workspace, id),
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
    if user.label == "session" || user.label.is_empty() { "admin".to_owned() } else { format!("label-{}", user.label) }
}

fn job_id() -> String {
    let digest = Sha256::digest(crate::servers::random_string(32).as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-4{}-a{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

fn queue(shared: &Shared, user: &TokenRow, workspace: &str, kind: &str, script_path: Option<String>, args: Value) -> Reply {
    let id = job_id();
    shared.state().jobs.push(JobRow {
        id: id.clone(),
        workspace: workspace.to_owned(),
        kind: kind.to_owned(),
        script_path,
        created_by: created_by(user),
        args,
        canceled: false,
    });
    text(201, id)
}

fn run_script(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str, path: &str) -> Result<Reply, Reply> {
    let args: Value = call.json()?;
    let deployed = shared.state().scripts.iter().any(|s| s.workspace == workspace && s.path == path && !s.archived);
    if !deployed {
        return Err(text(404, format!("Not found: Script not found at path {path}")));
    }
    Ok(queue(shared, user, workspace, "script", Some(path.to_owned()), args))
}

fn run_preview(shared: &Shared, call: &Call, user: &TokenRow, workspace: &str) -> Result<Reply, Reply> {
    let preview: Value = call.json()?;
    if !preview.get("content").is_some_and(Value::is_string) || !preview.get("language").is_some_and(Value::is_string) {
        return Err(text(422, "Failed to deserialize the JSON body into the target type: missing field `content` or `language`"));
    }
    let args = preview.get("args").cloned().unwrap_or_else(|| json!({}));
    Ok(queue(shared, user, workspace, "preview", None, args))
}

/// observed: with `jobs:write` the job is cancelled (200); with `jobs:read` alone the route lets
/// the token through and the handler treats it as an anonymous caller.
fn cancel(shared: &Shared, user: &TokenRow, workspace: &str, id: &str) -> Result<Reply, Reply> {
    let enforce = shared.state().enforce_scopes;
    let write = Needed { domain: "jobs".into(), action: "write", kind: None, resource: None };
    if !scopes::allows(user, &write, enforce) {
        return Err(text(400, "Bad request: You are not logged in and this job was not created by an anonymous user like you so you cannot cancel it"));
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
        "created_at": "2026-11-29T12:00:00Z", "permissioned_as": "u/admin",
    })
}
