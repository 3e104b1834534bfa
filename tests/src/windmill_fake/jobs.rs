//! Jobs, flows, variables and resources, as far as the bootstrap's proof reaches them. Follows
//! the OpenAPI rows for running and cancelling jobs (201 with the job id as text; cancel answers
//! 200 text), Windmill's job handlers (`backend/windmill-api/src/jobs.rs`, 1.509 to 1.788:
//! `run_script_by_path` finds the newest *locked* version of the path
//! (`get_latest_deployed_hash_for_path`: `lock IS NOT NULL AND lock_error_logs IS NULL`) and
//! requires `jobs:run:scripts:<path>` (before or after the lookup, as the [`Profile`] says);
//! `run_job_by_hash` finds the hash's path, then requires the run scope of that path;
//! `scheduled_in_secs` schedules the job that far in the future; `add_batch_jobs` is
//! `require_super_admin` only and queues `n` jobs of kind `noop`, `script` or `flow`, a flow
//! given as `flow_value` being request-supplied code; `import_queued_jobs` is `require_admin`
//! and inserts each job as given; cancelling a job that has not started completes it at once as
//! canceled) and what real servers answered ("Worker 9" on 1.743, "Worker 10" on 1.587 and
//! 1.788): a cancel by a token whose scopes do not reach the route (`jobs:write`) is handled as
//! one by an anonymous caller, a 400; an operator is refused previews, flow previews, inline
//! dynamic selects, dependency jobs and inline previews (401 `Operators cannot …`), batches (401 super admin
//! only), imports and deletions (403 admin only), flows, variables and resources (401).
//!
//! Who may read and cancel a job by its id differs by version ([`Profile::checks_job_reads`],
//! [`Profile::checks_job_cancels`]): before 1.715 any member reads any job of the workspace by
//! id, before 1.772 any member whose token reaches the route cancels any; later only a job the
//! caller may see (its own, or one of a script it may read; an admin's all). The 403 texts of
//! those refusals are the fake's (the reference records the status, not the whole text).
//!
//! No job runs here: jobs stay queued until cancelled. `run_wait_result/preview` therefore has
//! nothing to wait for; past its checks it answers 501 rather than a result the fake never
//! computed.

use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::JobRow;
use super::auth::{Caller, require_super_admin};
use super::members::require_admin;
use super::reply::{Call, Reply, absent, json_reply, text};
use super::scopes::{self, Needed};
use super::scripts::MIGRATING;
use super::server::Shared;
use super::state::State;

const OPERATORS_PREVIEW: &str = "Not authorized: Operators cannot run preview jobs for security reasons";

/// `/api/w/{workspace}/jobs/…`, `jobs_u/…`, `flows/…`, `variables/…`, `resources/…`, past the
/// route check.
pub(super) fn route(
    shared: &Shared,
    call: &Call,
    caller: &Caller,
    workspace: &str,
    rest: &[&str],
) -> Result<Reply, Reply> {
    let profile = shared.state().profile;
    match (call.method, rest) {
        ("POST", ["jobs", "run", "p", path @ ..]) => run_script(shared, call, caller, workspace, &path.join("/")),
        ("POST", ["jobs", "run", "h", hash]) => run_hash(shared, call, caller, workspace, hash),
        ("POST", ["jobs", "run", "preview"]) => run_preview(shared, call, caller, workspace).map(|(reply, _)| reply),
        ("POST", ["jobs", "run_wait_result", "preview"]) => {
            run_preview(shared, call, caller, workspace)?;
            Ok(text(501, "the Windmill fake runs no jobs: nothing to wait for"))
        }
        ("POST", ["jobs", "run", "preview_flow"]) => run_preview_flow(shared, call, caller, workspace),
        ("POST", ["jobs", "run", "dynamic_select"]) if profile.has_dynamic_select() => {
            dynamic_select(shared, call, caller, workspace)
        }
        ("POST", ["jobs", "run", "dependencies"]) => dependencies(shared, call, caller),
        ("POST", ["jobs", "run_inline", "preview"]) if profile.has_inline_preview() => {
            inline_preview(shared, call, caller)
        }
        ("POST", ["jobs", "add_batch_jobs", n]) => add_batch(shared, call, caller, workspace, n),
        ("POST", ["jobs", "queue", "import"]) if profile.has_job_import_and_delete() => {
            import(shared, call, caller, workspace)
        }
        ("POST", ["jobs", "delete"]) if profile.has_job_import_and_delete() => {
            let _: Vec<String> = call.json()?;
            require_admin(caller)?;
            Ok(text(200, "deleted"))
        }
        ("POST", ["jobs", "completed", "delete", id]) => {
            require_admin(caller)?;
            let mut state = shared.state();
            match state
                .jobs
                .iter_mut()
                .find(|j| j.workspace == workspace && j.id == *id && j.completed)
            {
                Some(job) => {
                    job.args = json!(null);
                    Ok(json_reply(&job_json(job)))
                }
                None => Err(text(404, format!("Not found: Completed job {id} not found"))),
            }
        }
        ("GET", ["jobs", "list"]) => {
            let state = shared.state();
            Ok(json_reply(&Value::Array(
                state
                    .jobs
                    .iter()
                    .filter(|j| j.workspace == workspace && may_see(&state, caller, workspace, j))
                    .map(job_json)
                    .collect(),
            )))
        }
        ("GET", ["jobs_u", "get", id]) => {
            let state = shared.state();
            let Some(job) = state.jobs.iter().find(|j| j.workspace == workspace && j.id == *id) else {
                return Err(text(404, format!("Not found: Job {id} not found")));
            };
            if state.profile.checks_job_reads() && !may_see(&state, caller, workspace, job) {
                return Err(text(
                    403,
                    format!("Permission denied: You do not have access to job {id}"),
                ));
            }
            Ok(json_reply(&job_json(job)))
        }
        ("POST", ["flows", "create"]) => {
            if caller.operator {
                return Err(text(
                    401,
                    "Not authorized: Operators cannot create flows for security reasons",
                ));
            }
            let _: FlowBody = call.json()?;
            Ok(text(201, "created"))
        }
        ("POST", ["variables" | "resources", "create"]) => {
            if !caller.is_admin {
                // server code: the insert under row-level security; the text is the fake's.
                return Err(text(
                    401,
                    "Not authorized: You do not have write permission on this path",
                ));
            }
            let _: PathBody = call.json()?;
            Ok(text(201, "created"))
        }
        // The fake holds no variables or resources.
        ("GET", ["variables" | "resources", "list"]) => Ok(json_reply(&json!([]))),
        _ => Ok(absent()),
    }
}

#[derive(Deserialize)]
struct FlowBody {
    #[allow(dead_code)]
    path: String,
    #[allow(dead_code)]
    value: Value,
}

#[derive(Deserialize)]
struct PathBody {
    #[allow(dead_code)]
    path: String,
}

/// Whether `caller` may see `job` (`require_job_read_access` of 1.715 and later): an admin
/// every job; anyone else the jobs run with its own rights and those of a script it may read.
fn may_see(state: &State, caller: &Caller, workspace: &str, job: &JobRow) -> bool {
    caller.is_admin
        || job.permissioned_as == caller.permissioned_as()
        || job
            .script_path
            .as_deref()
            .is_some_and(|path| may_read(state, caller, workspace, path))
}

/// Whether `caller` may read the script at `path` (row-level security): an admin everything, a
/// user its own `u/<name>/` and the folders it owns or has an ACL entry on.
pub(super) fn may_read(state: &State, caller: &Caller, workspace: &str, path: &str) -> bool {
    if caller.is_admin {
        return true;
    }
    let me = caller.permissioned_as();
    let parts: Vec<&str> = path.splitn(3, '/').collect();
    match parts.as_slice() {
        ["u", name, _] => format!("u/{name}") == me,
        ["f", folder, _] => state
            .folders
            .get(&(workspace.to_owned(), (*folder).to_owned()))
            .is_some_and(|f| {
                f.owners.contains(&me) || f.extra_perms.contains_key(&me) || f.extra_perms.contains_key("g/all")
            }),
        _ => false,
    }
}

/// A job id: a UUID, as Windmill's are.
pub(super) fn job_id() -> String {
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

/// `scheduled_in_secs` of the query (`RunJobQuery`): 400 when it is not an integer.
fn scheduled(call: &Call) -> Result<Option<i64>, Reply> {
    call.param("scheduled_in_secs")
        .map(|s| {
            s.parse::<i64>().map_err(|e| {
                text(
                    400,
                    format!("Failed to deserialize query string: scheduled_in_secs: {e}"),
                )
            })
        })
        .transpose()
}

/// A job of `caller`'s, due now and without arguments: it runs with the caller's rights.
fn job_of(
    shared: &Shared,
    caller: &Caller,
    workspace: &str,
    kind: &str,
    script_path: Option<String>,
    raw_code: Option<String>,
) -> JobRow {
    JobRow {
        id: job_id(),
        workspace: workspace.to_owned(),
        kind: kind.to_owned(),
        script_path,
        created_by: caller.created_by(shared),
        permissioned_as: caller.permissioned_as(),
        email: caller.token.email.clone(),
        raw_code,
        args: json!({}),
        scheduled_in_secs: None,
        canceled: false,
        canceled_by: None,
        completed: false,
    }
}

/// Queues `job`, or answers the 400 of a server still migrating its job tables.
fn queue(shared: &Shared, job: JobRow) -> Result<Reply, Reply> {
    let mut state = shared.state();
    if state.migrating() {
        return Err(text(400, MIGRATING));
    }
    let id = job.id.clone();
    state.jobs.push(job);
    Ok(text(201, id))
}

/// The newest version of `path` a run finds: locked, its dependency job not failed, not
/// deleted (archived versions count: a new version that is not locked yet leaves the previous
/// one running).
fn runnable(state: &State, workspace: &str, path: &str) -> bool {
    state
        .scripts
        .iter()
        .any(|s| s.workspace == workspace && s.path == path && s.lock.is_some() && s.lock_error_logs.is_none())
}

fn run_script(shared: &Shared, call: &Call, caller: &Caller, workspace: &str, path: &str) -> Result<Reply, Reply> {
    let (enforce, profile) = {
        let state = shared.state();
        (state.enforce_scopes, state.profile)
    };
    let require = || scopes::require(&caller.token, &Needed::run_script(path), enforce, profile);
    if !profile.lookup_before_scope() {
        require()?;
    }
    let args: Value = call.json()?;
    let when = scheduled(call)?;
    if !runnable(&shared.state(), workspace, path) {
        return Err(text(404, format!("Not found: script not found at name {path}")));
    }
    if profile.lookup_before_scope() {
        require()?;
    }
    if !may_read(&shared.state(), caller, workspace, path) {
        return Err(text(
            401,
            format!("Not authorized: You are not authorized to access this script: {path} (but it exists)"),
        ));
    }
    let job = JobRow {
        args,
        scheduled_in_secs: when,
        ..job_of(shared, caller, workspace, "script", Some(path.to_owned()), None)
    };
    queue(shared, job)
}

/// The handler finds the hash's path first, then requires the run scope of that path.
fn run_hash(shared: &Shared, call: &Call, caller: &Caller, workspace: &str, hash: &str) -> Result<Reply, Reply> {
    let (path, enforce, profile) = {
        let state = shared.state();
        let path = state
            .scripts
            .iter()
            .find(|s| s.workspace == workspace && s.hash == hash)
            .map(|s| s.path.clone());
        (path, state.enforce_scopes, state.profile)
    };
    let Some(path) = path else {
        return Err(text(404, format!("Not found: script not found at hash {hash}")));
    };
    scopes::require(&caller.token, &Needed::run_script(&path), enforce, profile)?;
    let args: Value = call.json()?;
    let when = scheduled(call)?;
    let job = JobRow {
        args,
        scheduled_in_secs: when,
        ..job_of(shared, caller, workspace, "script", Some(path), None)
    };
    queue(shared, job)
}

/// A preview (code sent with the request): the body is read first, then operators are refused.
fn run_preview(shared: &Shared, call: &Call, caller: &Caller, workspace: &str) -> Result<(Reply, String), Reply> {
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
    if caller.operator {
        return Err(text(401, OPERATORS_PREVIEW));
    }
    let args = preview.get("args").cloned().unwrap_or_else(|| json!({}));
    let when = scheduled(call)?;
    let job = JobRow {
        args,
        scheduled_in_secs: when,
        ..job_of(shared, caller, workspace, "preview", None, Some(content.to_owned()))
    };
    let id = job.id.clone();
    Ok((queue(shared, job)?, id))
}

fn run_preview_flow(shared: &Shared, call: &Call, caller: &Caller, workspace: &str) -> Result<Reply, Reply> {
    let preview: Value = call.json()?;
    let Some(flow) = preview.get("value").filter(|v| v.get("modules").is_some()) else {
        return Err(text(
            422,
            "Failed to deserialize the JSON body into the target type: missing field `value`",
        ));
    };
    if caller.operator {
        return Err(text(401, OPERATORS_PREVIEW));
    }
    let when = scheduled(call)?;
    let job = JobRow {
        scheduled_in_secs: when,
        ..job_of(shared, caller, workspace, "flowpreview", None, Some(flow.to_string()))
    };
    queue(shared, job)
}

/// `run_dynamic_select`: inline code is a preview (operators refused); a deployed script runs
/// as by path.
fn dynamic_select(shared: &Shared, call: &Call, caller: &Caller, workspace: &str) -> Result<Reply, Reply> {
    let request: Value = call.json()?;
    let reference = request.get("runnable_ref").cloned().unwrap_or(Value::Null);
    match (
        reference.get("source").and_then(Value::as_str),
        request.get("entrypoint_function").and_then(Value::as_str),
    ) {
        (Some("inline"), Some(_)) => {
            let Some(code) = reference.get("code").and_then(Value::as_str) else {
                return Err(text(
                    422,
                    "Failed to deserialize the JSON body into the target type: missing field `code`",
                ));
            };
            if caller.operator {
                return Err(text(401, OPERATORS_PREVIEW));
            }
            let job = job_of(shared, caller, workspace, "preview", None, Some(code.to_owned()));
            queue(shared, job)
        }
        (Some("deployed"), Some(_)) => {
            let path = reference
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            run_script(shared, call, caller, workspace, &path)
        }
        _ => Err(text(
            422,
            "Failed to deserialize the JSON body into the target type: runnable_ref: missing field `source`",
        )),
    }
}

/// `run_dependencies_job`: the body, then `check_scopes("jobs:run")`, then operators refused.
fn dependencies(shared: &Shared, call: &Call, caller: &Caller) -> Result<Reply, Reply> {
    let request: Value = call.json()?;
    if request.get("raw_scripts").is_none() || request.get("entrypoint").is_none() {
        return Err(text(
            422,
            "Failed to deserialize the JSON body into the target type: missing field `raw_scripts`",
        ));
    }
    let (enforce, profile) = {
        let state = shared.state();
        (state.enforce_scopes, state.profile)
    };
    let bare_run = Needed {
        domain: "jobs",
        action: "run",
        kind: None,
        resource: None,
    };
    scopes::require(&caller.token, &bare_run, enforce, profile)?;
    if caller.operator {
        return Err(text(
            401,
            "Not authorized: Operators cannot run dependencies jobs for security reasons",
        ));
    }
    Ok(text(501, "the Windmill fake runs no dependency jobs"))
}

/// `run_inline_preview_script` (1.703.3 and later): the body, then operators refused, then
/// `check_scopes("jobs:run")`; past them the code would run at once, in the server's process.
fn inline_preview(shared: &Shared, call: &Call, caller: &Caller) -> Result<Reply, Reply> {
    let preview: Value = call.json()?;
    if preview.get("content").and_then(Value::as_str).is_none() || preview.get("language").is_none() {
        return Err(text(
            422,
            "Failed to deserialize the JSON body into the target type: missing field `content` or `language`",
        ));
    }
    if caller.operator {
        return Err(text(401, OPERATORS_PREVIEW));
    }
    let (enforce, profile) = {
        let state = shared.state();
        (state.enforce_scopes, state.profile)
    };
    let bare_run = Needed {
        domain: "jobs",
        action: "run",
        kind: None,
        resource: None,
    };
    scopes::require(&caller.token, &bare_run, enforce, profile)?;
    Ok(text(501, "the Windmill fake runs no code inline"))
}

/// `add_batch_jobs`: `n` jobs as the caller, answered as a JSON list of their ids.
fn add_batch(shared: &Shared, call: &Call, caller: &Caller, workspace: &str, n: &str) -> Result<Reply, Reply> {
    #[derive(Deserialize)]
    struct BatchInfo {
        kind: String,
        flow_value: Option<Value>,
        path: Option<String>,
    }
    let n: usize = n
        .parse()
        .map_err(|_| text(400, format!("Invalid URL: Cannot parse `{n}` to a `i32`")))?;
    let batch: BatchInfo = call.json()?;
    require_super_admin(&caller.token)?;
    let (kind, path, code) = match batch.kind.as_str() {
        "noop" => ("noop", None, None),
        "script" => match batch.path {
            Some(path) if runnable(&shared.state(), workspace, &path) => ("script", Some(path), None),
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
        .map(|_| job_of(shared, caller, workspace, kind, path.clone(), code.clone()))
        .collect();
    let ids: Vec<Value> = jobs.iter().map(|j| json!(j.id)).collect();
    shared.state().jobs.extend(jobs);
    Ok(json_reply(&Value::Array(ids)))
}

/// `import_queued_jobs`: `require_admin`, then each job inserted as given, with the code and
/// the rights it names.
fn import(shared: &Shared, call: &Call, caller: &Caller, workspace: &str) -> Result<Reply, Reply> {
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
    require_admin(caller)?;
    let mut state = shared.state();
    for job in jobs {
        state.jobs.push(JobRow {
            id: job.id,
            workspace: workspace.to_owned(),
            kind: job.kind,
            script_path: job.runnable_path,
            created_by: job.created_by,
            permissioned_as: job.permissioned_as,
            email: caller.token.email.clone(),
            raw_code: job.raw_code,
            args: job.args,
            scheduled_in_secs: None,
            canceled: false,
            canceled_by: None,
            completed: false,
        });
    }
    Ok(text(200, "Successfully imported jobs"))
}

/// `None`: the caller's token did not pass (the route needs `jobs:write`), so the handler sees an
/// anonymous caller (observed: the 400 below for a token with `jobs:read` alone). A job that has
/// not started completes at once as canceled (server code).
pub(super) fn cancel(
    shared: &Shared,
    call: &Call,
    caller: Option<Caller>,
    workspace: &str,
    id: &str,
) -> Result<Reply, Reply> {
    let _: Value = call.json()?;
    let mut state = shared.state();
    let Some(at) = state.jobs.iter().position(|j| j.workspace == workspace && j.id == id) else {
        return Err(text(404, format!("Not found: queued job id {id} does not exist")));
    };
    let Some(caller) = caller else {
        return Err(text(
            400,
            "Bad request: You are not logged in and this job was not created by an anonymous user like you so you cannot cancel it",
        ));
    };
    if state.profile.checks_job_cancels() && !may_see(&state, &caller, workspace, &state.jobs[at]) {
        return Err(text(
            403,
            format!("Permission denied: You do not have access to job {id}"),
        ));
    }
    let by = caller.username.clone();
    let job = &mut state.jobs[at];
    if job.completed {
        return Ok(text(200, format!("queued job id {id} is already completed")));
    }
    job.canceled = true;
    job.canceled_by = Some(by);
    job.completed = true;
    Ok(text(200, id))
}

/// A job as `jobs_u/get` answers it: a `QueuedJob` until it completes, then a `CompletedJob`
/// (observed on 1.743; the fields the bootstrap reads are the same in every profile).
fn job_json(job: &JobRow) -> Value {
    let mut value = json!({
        "id": job.id, "workspace_id": job.workspace, "running": false, "canceled": job.canceled,
        "job_kind": job.kind, "script_path": job.script_path, "created_by": job.created_by, "args": job.args,
        "raw_code": job.raw_code, "created_at": "2026-11-29T12:00:00Z", "permissioned_as": job.permissioned_as,
    });
    if job.completed {
        value["type"] = json!("CompletedJob");
        value["success"] = json!(false);
        value["canceled_by"] = json!(job.canceled_by);
    } else {
        value["type"] = json!("QueuedJob");
        value["scheduled_for"] = json!(if job.scheduled_in_secs.is_some() {
            "2126-11-29T12:00:00Z"
        } else {
            "2026-11-29T12:00:00Z"
        });
    }
    value
}
