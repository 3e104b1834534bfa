//! Two tokens, each with what it needs: the one OpenBao holds (the front-end's, its operator's)
//! runs the deploy and destroy scripts, reads and cancels its jobs, and nothing else; the one in
//! the nginx include (the UI's) has full rights. What the front-end's may and may not do is
//! proved before it is stored, on every version profile: a Windmill that grants a call it must
//! be refused, or refuses one it must be granted, or answers about something else, fails step 7
//! and stores nothing.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::http;
use fediversity_testkit::node::Node;
use fediversity_testkit::windmill_fake::{Fault, Profile};
use serde_json::json;

use crate::support::{self, FRONT_END, UI, assert_has_line, assert_line};

/// `method path` with `token` and a JSON body: status and body.
fn call(node: &Node, token: &str, method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, String) {
    let auth = format!("Bearer {token}");
    let reply = http::request(
        method,
        &format!("{}{path}", node.windmill.url),
        &[("Authorization", &auth)],
        body.map(|b| b.to_string()).as_deref(),
    );
    (reply.status, reply.body)
}

/// Each call the proof makes the front-end's token be refused, as the table of the refusals:
/// what, method, the path a fault matches (as a prefix), the fault's `skip` (earlier calls of
/// the run that match the prefix), and a body that would be read (a grant would do it).
fn refusals() -> Vec<(&'static str, &'static str, &'static str, usize, serde_json::Value)> {
    let preview = json!({"content": "exit 0\n", "language": "bash", "args": {}});
    vec![
        (
            "a preview",
            "POST",
            "/api/w/fediversity/jobs/run/preview",
            0,
            preview.clone(),
        ),
        (
            "a preview waiting for its result",
            "POST",
            "/api/w/fediversity/jobs/run_wait_result/preview",
            0,
            preview,
        ),
        (
            "a flow preview",
            "POST",
            "/api/w/fediversity/jobs/run/preview_flow",
            0,
            json!({"value": {"modules": []}, "args": {}}),
        ),
        (
            "a dynamic select",
            "POST",
            "/api/w/fediversity/jobs/run/dynamic_select",
            0,
            json!({"runnable_ref": {"source": "inline", "code": "def main():\n    return []\n", "lang": "python3"}, "entrypoint_function": "main"}),
        ),
        (
            "a dependency job",
            "POST",
            "/api/w/fediversity/jobs/run/dependencies",
            0,
            json!({"raw_scripts": [], "entrypoint": "main"}),
        ),
        (
            "an inline preview",
            "POST",
            "/api/w/fediversity/jobs/run_inline/preview",
            0,
            json!({"content": "SELECT 1", "language": "duckdb", "args": {}}),
        ),
        (
            "another script of the folder",
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/bootstrap_probe",
            0,
            json!({}),
        ),
        (
            "a script outside the folder",
            "POST",
            "/api/w/fediversity/jobs/run/p/u/admin/bootstrap_probe",
            1,
            json!({}),
        ),
        (
            "a batch of jobs",
            "POST",
            "/api/w/fediversity/jobs/add_batch_jobs/0",
            0,
            json!({"kind": "noop"}),
        ),
        (
            "importing jobs",
            "POST",
            "/api/w/fediversity/jobs/queue/import",
            0,
            json!([]),
        ),
        ("deleting jobs", "POST", "/api/w/fediversity/jobs/delete", 0, json!([])),
        (
            "deleting its own job",
            "POST",
            "/api/w/fediversity/jobs/completed/delete/",
            0,
            json!(null),
        ),
        (
            "creating a script",
            "POST",
            "/api/w/fediversity/scripts/create",
            0,
            json!({}),
        ),
        (
            "creating a flow",
            "POST",
            "/api/w/fediversity/flows/create",
            0,
            json!({}),
        ),
        (
            "creating a variable",
            "POST",
            "/api/w/fediversity/variables/create",
            0,
            json!({}),
        ),
        (
            "creating a resource",
            "POST",
            "/api/w/fediversity/resources/create",
            0,
            json!({}),
        ),
        (
            "creating a folder",
            "POST",
            "/api/w/fediversity/folders/create",
            0,
            json!({}),
        ),
        (
            "changing the folder's ACL",
            "POST",
            "/api/w/fediversity/acls/add/folder/fediversity",
            0,
            json!({}),
        ),
        (
            "reading a global setting",
            "GET",
            "/api/settings/global/",
            1,
            json!(null),
        ),
        ("minting a token", "POST", "/api/users/tokens/create", 2, json!({})),
        ("another workspace", "GET", "/api/w/admins/jobs/list", 0, json!(null)),
    ]
}

/// Whether `profile` has the route of `what` (see the fake's profiles).
fn has(profile: Profile, what: &str) -> bool {
    match what {
        "a dynamic select" => profile != Profile::V1_509,
        "importing jobs" | "deleting jobs" | "an inline preview" => {
            matches!(profile, Profile::V1_743 | Profile::V1_788)
        }
        _ => true,
    }
}

crate::on_every_profile!(
    the_token_openbao_holds_runs_reads_and_cancels_its_jobs_and_is_refused_the_rest,
    |profile| super::the_token_openbao_holds_runs_reads_and_cancels_its_jobs_and_is_refused_the_rest(profile)
);

fn the_token_openbao_holds_runs_reads_and_cancels_its_jobs_and_is_refused_the_rest(profile: Profile) {
    let node = support::node_on(profile);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let front = support::stored_token(&node).unwrap();
    let ui = node.include_token().unwrap();

    // It runs the two scripts (201 and a job id, the job the operator's), reads the job and
    // cancels it.
    for script in ["deploy", "destroy"] {
        let path = format!("/api/w/fediversity/jobs/run/p/f/fediversity/{script}");
        let (status, id) = call(&node, &front, "POST", &path, Some(json!({})));
        assert_eq!(status, 201, "{script}: {id}");
        let job = node.windmill.jobs().into_iter().find(|j| j.id == id).unwrap();
        assert_eq!(job.permissioned_as, "u/frontend");
        let (status, read) = call(
            &node,
            &front,
            "GET",
            &format!("/api/w/fediversity/jobs_u/get/{id}"),
            None,
        );
        assert_eq!(status, 200, "{read}");
        let cancel = format!("/api/w/fediversity/jobs_u/queue/cancel/{id}");
        assert_eq!(call(&node, &front, "POST", &cancel, Some(json!({}))), (200, id.clone()));
        assert!(node.windmill.jobs().iter().any(|j| j.id == id && j.canceled));
    }
    // Everything the proof made it be refused: refused (401 or 403), or not a route of this
    // version; nothing of it happened.
    let jobs = node.windmill.jobs().len();
    let scripts = node.windmill.script_count();
    // (Deleting a job is tried on a job of its own below.)
    for (what, method, path, _, body) in refusals().into_iter().filter(|r| r.0 != "deleting its own job") {
        let body = (method == "POST").then_some(body);
        let (status, answer) = call(&node, &front, method, path, body);
        if has(profile, what) {
            assert!([401, 403].contains(&status), "{what}: {status} {answer}");
        } else {
            assert_eq!((status, answer.as_str()), (404, ""), "{what}");
        }
    }
    assert_eq!(node.windmill.jobs().len(), jobs);
    assert_eq!(node.windmill.script_count(), scripts);
    // A job of the superadmin's, outside the folder: refused as the version refuses it.
    let theirs = node
        .windmill
        .queue_admin_job("fediversity", "u/admin/bootstrap_probe", Some(60));
    let read = call(
        &node,
        &front,
        "GET",
        &format!("/api/w/fediversity/jobs_u/get/{theirs}"),
        None,
    )
    .0;
    let cancel = format!("/api/w/fediversity/jobs_u/queue/cancel/{theirs}");
    let cancelled = call(&node, &front, "POST", &cancel, Some(json!({}))).0;
    let (read_refused, cancel_refused) = match profile {
        Profile::V1_509 | Profile::V1_587 => (false, false),
        Profile::V1_743 => (true, false),
        Profile::V1_788 => (true, true),
    };
    assert_eq!(read == 403, read_refused, "{read}");
    assert_eq!(cancelled == 403, cancel_refused, "{cancelled}");
    let own = node
        .windmill
        .jobs()
        .into_iter()
        .find(|j| j.permissioned_as == "u/frontend" && j.completed)
        .unwrap();
    let delete = format!("/api/w/fediversity/jobs/completed/delete/{}", own.id);
    assert_eq!(call(&node, &front, "POST", &delete, None).0, 403);
    assert_eq!(call(&node, &ui, "POST", &delete, None).0, 200);

    // Positive control: the include's token is refused none of it.
    for (what, method, path, _, body) in refusals().into_iter().filter(|r| r.0 != "deleting its own job") {
        let body = (method == "POST").then_some(body);
        let (status, answer) = call(&node, &ui, method, path, body);
        assert!(![401, 403].contains(&status), "{what}: {status} {answer}");
    }
}

crate::on_every_profile!(
    a_windmill_that_grants_a_call_the_token_must_be_refused_fails_step_7_and_stores_nothing,
    |profile| super::a_windmill_that_grants_a_call_the_token_must_be_refused_fails_step_7_and_stores_nothing(profile)
);

fn a_windmill_that_grants_a_call_the_token_must_be_refused_fails_step_7_and_stores_nothing(profile: Profile) {
    let node = support::node_on(profile);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    let inode = node.include_meta().unwrap().ino();
    let version = profile.version();
    let stores_nothing = |run: &fediversity_testkit::node::Run| {
        assert_has_line(
            &run.stderr,
            "fediversity-windmill-bootstrap: deleted the token labeled fediversity that this run minted, as the run failed before storing it",
        );
        assert_eq!(support::stored_token(&node), Some(front.clone()));
        assert_eq!(support::labeled(&node, FRONT_END), vec![front.clone()]);
        assert_eq!(node.include_token(), Some(ui.clone()));
        assert_eq!(node.include_meta().unwrap().ino(), inode);
        // No job of the proof is left queued.
        assert!(
            node.windmill.jobs().iter().all(|j| j.completed),
            "{:?}",
            node.windmill.jobs()
        );
    };
    // Each call the token must be refused, granted in turn (a fault for that call only).
    for (what, method, path, skip, _) in refusals().into_iter().filter(|(what, ..)| has(profile, what)) {
        node.windmill.fail_after(method, path, skip, Fault::Status(200), 1);
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 3, "{what}: {run:?}");
        assert_line(
            run.stderr.lines().last().unwrap(),
            &format!(
                "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill {version} granted the new token labeled fediversity \
                 {what} ({method} {path}[..] answered 200), which the front-end's operator token must be refused; the token was not stored"
            ),
        );
        stores_nothing(&run);
    }
    // An answer about something else proves no refusal: a 404 "not found" for the script.
    node.windmill.fail(
        "POST",
        "/api/w/fediversity/jobs/run/p/f/fediversity/bootstrap_probe",
        Fault::StatusQuotingPath(404),
        1,
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        &format!(
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill {version} answered the new token labeled fediversity \
             POST /api/w/fediversity/jobs/run/p/f/fediversity/bootstrap_probe?scheduled_in_secs=3155760000 with 404 (Not found: injected fault for bootstrap_probe), \
             an answer about something else than the token's rights, where it must be refused (401 or 403); the token was not stored"
        ),
    );
    stores_nothing(&run);
    // What it must be allowed, refused in turn: the run, the read, the cancel, the read after.
    for (what, method, path, skip, fault, why) in [
        (
            "run a job of f/fediversity/deploy",
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/deploy",
            0,
            Fault::Status(403),
            "403: Forbidden",
        ),
        (
            "run a job of f/fediversity/deploy",
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/deploy",
            0,
            Fault::StatusQuotingPath(404),
            "404 (Not found: injected fault for deploy): the script has no version that runs (Windmill runs one only once a worker has locked it)",
        ),
        (
            "read its job of f/fediversity/deploy",
            "GET",
            "/api/w/fediversity/jobs_u/get/",
            0,
            Fault::Status(403),
            "403: Forbidden",
        ),
        (
            "cancel its job of f/fediversity/deploy",
            "POST",
            "/api/w/fediversity/jobs_u/queue/cancel/",
            0,
            Fault::Status(403),
            "403: Forbidden",
        ),
        (
            "cancel its job of f/fediversity/destroy",
            "GET",
            "/api/w/fediversity/jobs_u/get/",
            3,
            Fault::Status(404),
            "the job is not cancelled: 404: Not Found",
        ),
    ] {
        node.windmill.fail_after(method, path, skip, fault, 1);
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 3, "{what}: {run:?}");
        assert_line(
            run.stderr.lines().last().unwrap(),
            &format!(
                "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill {version} did not let the new token labeled fediversity \
                 {what}: {method} {path}[..] answered {why}; the token was not stored"
            ),
        );
        stores_nothing(&run);
    }
    // Positive control: without a fault, the run stores its token.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_ne!(support::stored_token(&node), Some(front));
}

#[test]
fn reading_and_cancelling_a_job_that_is_not_its_own_is_a_warning_where_windmill_grants_it() {
    // nixpkgs' 1.587 lets any member read and cancel a job by its id: warned of, on every run.
    let node = support::node();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: warning: Windmill CE v1.587.0 lets the front-end's token reach a job that is not its own, given its id \
         (GET /api/w/fediversity/jobs_u/get/[..], POST /api/w/fediversity/jobs_u/queue/cancel/[..] answered 2xx): on this version any member of \
         the workspace reads and cancels any job whose id it knows; Windmill refuses reading a job of the superadmin's from 1.715, cancelling a job \
         of the superadmin's from 1.772",
    );
    // Positive control: 1.788 refuses both, and says nothing; granted there, the run fails.
    let node = support::node_on(Profile::V1_788);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("warning:"), "{run:?}");
    // The read of the superadmin's job: after the 4 reads of its own jobs.
    node.windmill
        .fail_after("GET", "/api/w/fediversity/jobs_u/get/", 4, Fault::Status(200), 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill CE v1.788.0 granted the new token labeled fediversity \
         reading a job of the superadmin's (GET /api/w/fediversity/jobs_u/get/[..] answered 200), which the front-end's operator token must be refused; \
         the token was not stored",
    );
}

crate::on_every_profile!(
    a_version_that_lets_a_run_choose_its_code_is_warned_of_by_its_version,
    |profile| super::a_version_that_lets_a_run_choose_its_code_is_warned_of_by_its_version(profile)
);

/// The warning of a version before 1.703.3 (`is`: how the version is said to be one).
fn flaw_warning(version: &str, is: &str) -> String {
    format!(
        "fediversity-windmill-bootstrap: warning: Windmill {version} {is} pastes a job's _ENTRYPOINT_OVERRIDE argument unchecked into the code \
         its worker runs (GHSA-wxjq-w5pj-jqhx), so whoever holds the front-end's token runs code of its choosing on the worker, which reads the \
         node's deploy secrets, whatever the token's scopes; upgrade Windmill to 1.703.3 or later"
    )
}

fn a_version_that_lets_a_run_choose_its_code_is_warned_of_by_its_version(profile: Profile) {
    // Before 1.703.3 a run of the deploy script with `_ENTRYPOINT_OVERRIDE` in its arguments runs
    // code of the caller's choosing on the worker. The API takes that run like any other (the
    // worker pastes it), so no call of the proof shows it: the version does.
    let node = support::node_on(profile);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let warning = flaw_warning(profile.version(), "is older than 1.703.3: it");
    let flawed = profile.pastes_entrypoint_override();
    assert_eq!(run.stderr.lines().any(|l| l == warning), flawed, "{run:?}");
    assert_eq!(run.step_line(7).contains(support::FLAWED), flawed, "{run:?}");
    // Every run says so, not only the first.
    let again = node.run(bootstrap_bin!(), &[]);
    assert_eq!(again.stderr.lines().any(|l| l == warning), flawed, "{again:?}");
}

#[test]
fn a_windmill_that_names_no_version_may_let_a_run_choose_its_code_and_is_warned_of() {
    // As the 1.788 server built outside git answered: the version cannot rule the flaw out.
    let node = support::node_on(Profile::V1_788);
    node.windmill.set_version("CE unknown-version");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_has_line(
        &run.stderr,
        &flaw_warning(
            "CE unknown-version",
            "does not name its version, and one older than 1.703.3 would be open: such a version",
        ),
    );
    assert!(
        run.step_line(7)
            .ends_with("; maybe open to code of the token's choosing on the worker: GHSA-wxjq-w5pj-jqhx (fixed in Windmill 1.703.3): created"),
        "{run:?}"
    );
    // Positive control: naming one from 1.703.3 on, it says nothing.
    node.windmill.set_version("CE v1.703.3");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("warning:"), "{run:?}");
}

#[test]
fn a_windmill_that_does_not_enforce_scopes_fails_step_7_naming_its_version_and_stores_nothing() {
    let node = support::node();
    // Positive control: a Windmill that enforces them lets the run store its token.
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    let inode = node.include_meta().unwrap().ino();

    // Now one that stores the scopes and grants every route all the same (as before 1.509): the
    // operator's role still refuses it previews, but it runs another script of its folder.
    node.windmill.set_version("CE v1.500.2");
    node.windmill.set_enforce_scopes(false);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill CE v1.500.2 granted the new token labeled fediversity \
         another script of the folder (POST /api/w/fediversity/jobs/run/p/f/fediversity/bootstrap_probe?scheduled_in_secs=3155760000 answered 201), \
         which the front-end's operator token must be refused; the token was not stored",
    );
    // OpenBao and the include hold what they held; both new tokens were deleted, the old ones
    // live; the job the grant queued was cancelled.
    assert_eq!(support::stored_token(&node), Some(front.clone()));
    assert_eq!(node.include_token(), Some(ui.clone()));
    assert_eq!(node.include_meta().unwrap().ino(), inode);
    for label in [FRONT_END, UI] {
        assert_has_line(
            &run.stderr,
            &format!(
                "fediversity-windmill-bootstrap: deleted the token labeled {label} that this run minted, as the run failed before storing it"
            ),
        );
    }
    assert_eq!(support::labeled(&node, FRONT_END), vec![front]);
    assert_eq!(support::labeled(&node, UI), vec![ui]);
    let granted: Vec<_> = node
        .windmill
        .jobs()
        .into_iter()
        .filter(|j| j.script_path.as_deref() == Some("f/fediversity/bootstrap_probe"))
        .collect();
    assert_eq!(granted.len(), 1);
    assert!(granted[0].canceled && granted[0].scheduled_in_secs == Some(3_155_760_000));
}

#[test]
fn what_the_configured_scopes_grant_is_not_proved_and_said_so() {
    let mut node = support::node();
    node.config["token"]["scopes"] = json!([support::RUN_SCOPE, "jobs:write", "variables:write"]);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(7)
            .contains("; not proved, as token.scopes name their domain: creating a variable;"),
        "{run:?}"
    );
    assert!(!run.step_line(7).contains("creating a variable,"), "{run:?}");
}

/// The warning of a run whose front-end token is unscoped.
fn unscoped_warning(within: &str) -> String {
    format!(
        "fediversity-windmill-bootstrap: warning: token.scopes is []: the token labeled fediversity that OpenBao holds is unscoped, \
         with its operator's full rights{within}: whoever holds it runs every script of the folder and reads the workspace's users"
    )
}

#[test]
fn empty_scopes_give_an_unscoped_operator_token_with_a_warning_on_every_run() {
    let mut node = support::node();
    // Positive control: the default scopes warn of nothing (but of what 1.587 grants).
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("token.scopes is []"), "{run:?}");

    node.config["token"]["scopes"] = json!([]);
    for args in [&[][..], &["--check"][..], &[][..]] {
        let run = node.run(bootstrap_bin!(), args);
        assert_line(
            run.stderr.lines().next().unwrap(),
            &unscoped_warning(", within workspace fediversity"),
        );
    }
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value (mount secret/, KV v2) holds the new token labeled fediversity \
             (the superadmin's full rights; bound to workspace fediversity) of the operator frontend, which ran, read and cancelled a job of \
             f/fediversity/deploy and f/fediversity/destroy, unscoped, so no limit to prove; {}: updated",
            node.bao_path,
            support::FLAWED
        ),
    );
    // Minted without scopes, still bound: the operator's rights in the workspace, none outside.
    let front = support::stored_token(&node).unwrap();
    let row = node.windmill.tokens().into_iter().find(|t| t.token == front).unwrap();
    assert_eq!((row.scopes, row.workspace_id.as_deref()), (None, Some("fediversity")));
    // An operator all the same: no preview.
    let preview = json!({"content": "exit 0\n", "language": "bash"});
    assert_eq!(
        call(
            &node,
            &front,
            "POST",
            "/api/w/fediversity/jobs/run/preview",
            Some(preview)
        )
        .0,
        401
    );
    assert_eq!(call(&node, &front, "GET", "/api/users/whoami", None).0, 401);
}

#[test]
fn an_unbound_scoped_token_is_for_a_front_end_that_uses_the_wmill_cli() {
    let mut node = support::node();
    node.config["token"] =
        json!({"bind_to_workspace": false, "scopes": [support::RUN_SCOPE, "jobs:write", "users:read"]});
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(7).contains(&format!(
            "labeled fediversity (scopes {} users:read) of the operator frontend, which ran",
            support::DEFAULT_SCOPES
        )),
        "{run:?}"
    );
    // Refused another workspace and settings unbound too; minting a token is not proved (it
    // names `users`).
    assert!(
        run.step_line(7)
            .contains("reading a global setting, another workspace (401 or 403 each)"),
        "{run:?}"
    );
    assert!(
        run.step_line(7)
            .contains("not proved, as token.scopes name their domain: minting a token"),
        "{run:?}"
    );
    let front = support::stored_token(&node).unwrap();
    assert_eq!(
        node.windmill
            .tokens()
            .into_iter()
            .find(|t| t.token == front)
            .unwrap()
            .workspace_id,
        None
    );
    // The CLI's first call works; the rest stays refused.
    assert_eq!(call(&node, &front, "GET", "/api/users/whoami", None).0, 200);
    assert_eq!(
        call(
            &node,
            &front,
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/deploy",
            Some(json!({}))
        )
        .0,
        201
    );
}

#[test]
fn the_two_labels_are_configurable_and_each_is_revoked_on_its_own() {
    let mut node = support::node();
    node.config["token"]["label"] = json!("front");
    node.config["ui_auth"]["label"] = json!("admins");
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 of the operator frontend, 0 of the superadmin's labeled front, \
         1 labeled admins: updated",
    );
    assert_eq!(
        support::labeled(&node, "front"),
        vec![support::stored_token(&node).unwrap()]
    );
    assert_eq!(support::labeled(&node, "admins"), vec![node.include_token().unwrap()]);
    assert_eq!(
        (
            support::labeled(&node, FRONT_END).len(),
            support::labeled(&node, UI).len()
        ),
        (0, 0)
    );
}
