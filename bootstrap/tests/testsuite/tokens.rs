//! Two tokens, each with what it needs: the one OpenBao holds (the front-end's) runs the deploy
//! and destroy scripts and reads jobs, and nothing else; the one in the nginx include (the UI's)
//! has full rights. The limit is proved before the token is stored: a Windmill that answers a
//! call the scopes must refuse with anything but 403 fails step 7 and stores nothing.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::http;
use fediversity_testkit::node::Node;
use fediversity_testkit::windmill_fake::Fault;
use serde_json::json;

use crate::support::{self, FRONT_END, UI, assert_has_line, assert_line};

/// `method path` with `token`, a JSON body for every POST: status and body.
fn call(node: &Node, token: &str, method: &str, path: &str) -> (u16, String) {
    let body = match path {
        p if p.ends_with("/preview") => {
            Some(json!({"content": "import os\ndef main():\n    return os.environ\n", "language": "python3"}))
        }
        p if p.ends_with("/scripts/create") => Some(
            json!({"path": "f/fediversity/evil", "summary": "", "description": "", "content": "def main():\n    pass\n", "language": "python3"}),
        ),
        p if p.ends_with("/tokens/create") => Some(json!({"label": "more"})),
        p if p.contains("/add_batch_jobs/") => Some(
            json!({"kind": "flow", "flow_value": {"modules": [{"value": {"type": "rawscript", "content": "import os"}}]}}),
        ),
        p if p.ends_with("/queue/import") => Some(
            json!([{"id": "0190aaaa-0000-4000-a000-000000000002", "kind": "preview", "raw_code": "import os", "created_by": "x", "permissioned_as": "u/admin"}]),
        ),
        _ if method == "POST" => Some(json!({})),
        _ => None,
    };
    let auth = format!("Bearer {token}");
    let reply = http::request(
        method,
        &format!("{}{path}", node.windmill.url),
        &[("Authorization", &auth)],
        body.map(|b| b.to_string()).as_deref(),
    );
    (reply.status, reply.body)
}

/// What a leaked front-end token must not do, and how Windmill refuses each.
const NOT_FOR_THE_FRONT_END: [(&str, &str, u16); 12] = [
    ("POST", "/api/w/fediversity/jobs/run/preview", 403),
    ("POST", "/api/w/fediversity/jobs/run_wait_result/preview", 403),
    ("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/hello", 403),
    ("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/_runner", 403),
    ("POST", "/api/w/fediversity/jobs/add_batch_jobs/1", 403),
    ("POST", "/api/w/fediversity/jobs/queue/import", 403),
    ("POST", "/api/w/fediversity/scripts/create", 403),
    ("GET", "/api/w/fediversity/variables/list", 403),
    ("GET", "/api/w/fediversity/users/list", 403),
    ("POST", "/api/users/tokens/create", 401),
    ("GET", "/api/settings/global/instance_python_version", 401),
    ("GET", "/api/users/whoami", 401),
];

#[test]
fn the_token_openbao_holds_runs_deploy_and_destroy_and_is_refused_everything_else() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let front = support::stored_token(&node).unwrap();
    let ui = node.include_token().unwrap();

    // It runs the two scripts (201 and a job id, the job created by its label) and reads the
    // job; it cannot cancel it (that needs `jobs:write`: an anonymous caller's 400).
    for script in ["deploy", "destroy"] {
        let (status, id) = call(
            &node,
            &front,
            "POST",
            &format!("/api/w/fediversity/jobs/run/p/f/fediversity/{script}"),
        );
        assert_eq!(status, 201, "{script}: {id}");
        let job = node.windmill.jobs().into_iter().find(|j| j.id == id).unwrap();
        assert_eq!(job.created_by, "label-fediversity");
        assert_eq!(
            call(&node, &front, "GET", &format!("/api/w/fediversity/jobs_u/get/{id}")).0,
            200
        );
        assert_eq!(
            call(
                &node,
                &front,
                "POST",
                &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}")
            )
            .0,
            400
        );
        // Positive control: the include's token cancels it.
        assert_eq!(
            call(
                &node,
                &ui,
                "POST",
                &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}")
            ),
            (200, id)
        );
    }
    // Everything else is refused, and nothing of it happened.
    for (method, path, status) in NOT_FOR_THE_FRONT_END {
        assert_eq!(call(&node, &front, method, path).0, status, "{method} {path}");
    }
    assert_eq!(node.windmill.jobs().len(), 2);
    assert!(node.windmill.versions("fediversity", "f/fediversity/evil").is_empty());

    // Positive control: the include's token is refused none of it.
    for (method, path, _) in NOT_FOR_THE_FRONT_END {
        let (status, body) = call(&node, &ui, method, path);
        assert!(![401, 403].contains(&status), "{method} {path}: {status} {body}");
    }
    // A preview, two runs, a batch of one; and the imported job (as it said, not as the UI).
    assert_eq!(
        node.windmill
            .jobs()
            .iter()
            .filter(|j| j.created_by == "label-fediversity-ui")
            .count(),
        4
    );
    assert_eq!(node.windmill.jobs().len(), 2 + 4 + 1);
    assert_eq!(node.windmill.versions("fediversity", "f/fediversity/evil").len(), 1);
}

#[test]
fn a_windmill_that_does_not_enforce_scopes_fails_step_7_naming_its_version_and_stores_nothing() {
    let node = support::node();
    // Positive control: a Windmill that enforces them lets the run store its token.
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    let inode = node.include_meta().unwrap().ino();

    // Now one from before 1.509: it stores the scopes and grants every route all the same.
    node.windmill.set_version("CE v1.500.2");
    node.windmill.set_enforce_scopes(false);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill CE v1.500.2 granted the new token labeled fediversity \
         GET /api/w/fediversity/variables/list (answered 200), which its scopes do not cover: this server does not enforce token scopes \
         (they hold on every route since Windmill 1.509); the token was not stored",
    );
    // The proof was the call that was granted, made with the new token.
    let proofs: Vec<_> = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| r.is("GET", "/api/w/fediversity/variables/list"))
        .collect();
    assert_eq!(proofs.len(), 1);
    assert!(proofs[0].token.as_deref() != Some(front.as_str()) && proofs[0].token.as_deref() != Some(ui.as_str()));
    // OpenBao and the include hold what they held; both new tokens were deleted, the old ones live.
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
}

#[test]
fn a_fresh_node_on_a_windmill_that_does_not_enforce_scopes_gets_no_token_anywhere() {
    let node = support::node();
    node.windmill.set_enforce_scopes(false);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill CE v1.587.0 granted [..]",
    );
    assert_eq!(support::stored_token(&node), None);
    assert!(node.include_meta().is_none());
    assert_eq!(
        (
            support::labeled(&node, FRONT_END).len(),
            support::labeled(&node, UI).len()
        ),
        (0, 0)
    );
}

#[test]
fn the_proof_is_a_read_the_configured_scopes_do_not_cover() {
    let mut node = support::node();
    let runs = "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy,f/fediversity/hello";
    node.config["token"]["scopes"] = json!([runs, "jobs:read", "variables:read"]);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value (mount secret/, KV v2) holds the new token labeled fediversity \
             (scopes {runs} jobs:read variables:read; bound to workspace fediversity), {}: created",
            node.bao_path,
            support::refused("users/list")
        ),
    );
    // Each script listed runs; variables are readable as configured.
    let front = support::stored_token(&node).unwrap();
    assert_eq!(
        call(
            &node,
            &front,
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/hello"
        )
        .0,
        201
    );
    assert_eq!(call(&node, &front, "GET", "/api/w/fediversity/variables/list").0, 200);
    assert_eq!(call(&node, &front, "GET", "/api/w/fediversity/users/list").0, 403);
}

#[test]
fn a_call_of_the_proof_answered_other_than_403_fails_step_7_naming_it_and_stores_nothing() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    // Each call in turn answered otherwise (a fault for that call only): a 401, which shows
    // nothing of the scopes, or a 200 as a server that granted it would.
    for (method, path, fault, why) in [
        (
            "POST",
            "/api/w/fediversity/jobs/run/preview",
            Fault::Status(401),
            "401: the token was not authenticated, which shows nothing of its scopes",
        ),
        (
            "POST",
            "/api/w/fediversity/scripts/create",
            Fault::Status(422),
            "422 (the route let the token through to the request itself): Unprocessable Entity",
        ),
        (
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/probe_",
            Fault::Status(404),
            "404 (the route let the token through to the request itself): Not Found",
        ),
        (
            "POST",
            "/api/w/fediversity/jobs/add_batch_jobs/0",
            Fault::Status(401),
            "401: the token was not authenticated, which shows nothing of its scopes",
        ),
    ] {
        node.windmill.fail(method, path, fault, 1);
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 3, "{path}: {run:?}");
        assert_line(
            run.stderr.lines().last().unwrap(),
            &format!(
                "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill CE v1.587.0 answered the new token labeled fediversity \
                 {method} {path}[..] with {why}, where its scopes must refuse it with 403; the token was not stored"
            ),
        );
        assert_has_line(
            &run.stderr,
            "fediversity-windmill-bootstrap: deleted the token labeled fediversity that this run minted, as the run failed before storing it",
        );
        assert_eq!(support::stored_token(&node), Some(front.clone()));
        assert_eq!(support::labeled(&node, FRONT_END), vec![front.clone()]);
        assert_eq!(node.include_token(), Some(ui.clone()));
    }
    // A Windmill that grants the batch (as one would that maps scopes otherwise).
    node.windmill.fail(
        "POST",
        "/api/w/fediversity/jobs/add_batch_jobs/0",
        Fault::Status(200),
        1,
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill CE v1.587.0 granted the new token labeled fediversity \
         POST /api/w/fediversity/jobs/add_batch_jobs/0 (answered 200), which its scopes do not cover: [..]; the token was not stored",
    );
    assert_eq!(support::stored_token(&node), Some(front.clone()));
    // Positive control: without a fault, the run stores its token.
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_ne!(support::stored_token(&node), Some(front));
}

/// The warning of a run whose front-end token is unscoped.
fn unscoped_warning(within: &str) -> String {
    format!(
        "fediversity-windmill-bootstrap: warning: token.scopes is []: the token labeled fediversity that OpenBao holds is unscoped, \
         with the superadmin's full rights{within}: whoever holds it can run any code on the worker"
    )
}

#[test]
fn empty_scopes_give_an_unscoped_token_with_a_warning_on_every_run() {
    let mut node = support::node();
    // Positive control: the default scopes warn of nothing.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(!run.stderr.contains("warning:"), "{run:?}");

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
             (the superadmin's full rights; bound to workspace fediversity), unscoped, so no limit to prove: updated",
            node.bao_path
        ),
    );
    // Minted without scopes, still bound: full rights in the workspace, none outside it.
    let front = support::stored_token(&node).unwrap();
    let row = node.windmill.tokens().into_iter().find(|t| t.token == front).unwrap();
    assert_eq!((row.scopes, row.workspace_id.as_deref()), (None, Some("fediversity")));
    assert_eq!(
        call(&node, &front, "POST", "/api/w/fediversity/jobs/run/preview").0,
        201
    );
    assert_eq!(call(&node, &front, "GET", "/api/users/whoami").0, 401);

    // Unbound as well: the seed's token, full rights everywhere.
    node.config["token"]["bind_to_workspace"] = json!(false);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(run.stderr.lines().next().unwrap(), &unscoped_warning(""));
    let front = support::stored_token(&node).unwrap();
    assert_eq!(call(&node, &front, "GET", "/api/users/whoami").0, 200);
}

#[test]
fn an_unbound_scoped_token_is_for_a_front_end_that_uses_the_wmill_cli() {
    let mut node = support::node();
    node.config["token"] = json!({"bind_to_workspace": false, "scopes": [support::DEFAULT_SCOPES, "users:read"]});
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(7).contains(&format!(
            "labeled fediversity (scopes {} users:read), refused GET /api/w/fediversity/variables/list, ",
            support::DEFAULT_SCOPES
        )),
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
    assert_eq!(call(&node, &front, "GET", "/api/users/whoami").0, 200);
    assert_eq!(
        call(&node, &front, "POST", "/api/w/fediversity/jobs/run/preview").0,
        403
    );
    assert_eq!(
        call(
            &node,
            &front,
            "POST",
            "/api/w/fediversity/jobs/run/p/f/fediversity/deploy"
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
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 labeled front, 1 labeled admins: updated",
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
