//! `--check`: steps 1, 2 (login only), 4 to 6, and 7 to 9 (the tokens OpenBao and the include
//! hold, and no others), read-only; 0 when converged, 1 on drift, 3 when a part cannot be
//! reached; it writes nothing anywhere.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::openbao;
use fediversity_testkit::postgres::{ADMIN_EMAIL, SEED_HASH};
use fediversity_testkit::windmill_fake::{Profile, Recorded};
use serde_json::{Value, json};

use crate::support;

/// What a node looks like from outside: what --check must not change.
#[derive(Debug, PartialEq)]
struct Snapshot {
    hash: Option<String>,
    include: Option<(u64, String)>,
    bao: Option<Value>,
    scripts: usize,
    workspaces: Vec<String>,
    setting: Option<Value>,
    labeled_tokens: usize,
}

fn snapshot(node: &Node) -> Snapshot {
    Snapshot {
        hash: node.db.password_hash(ADMIN_EMAIL),
        include: node
            .include_meta()
            .map(|m| (m.ino(), std::fs::read_to_string(node.include_path()).unwrap())),
        bao: openbao::shared().read_kv2("secret", node.bao_path.strip_prefix("secret/").unwrap()),
        scripts: node.windmill.script_count(),
        workspaces: node.windmill.workspaces(),
        setting: node.windmill.setting("instance_python_version"),
        labeled_tokens: support::labeled(node, support::FRONT_END).len() + support::labeled(node, support::UI).len(),
    }
}

/// Requests that change something (a login only adds a session and the logout removes it
/// again; an impersonation only adds a token that deletes itself again, which is checked;
/// `workspaces/exists` reads).
fn writes(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .filter(|r| {
            // A token that deletes itself: the impersonation of the check.
            let by_itself = r.method == "DELETE" && r.token.as_ref().is_some_and(|t| r.path.ends_with(&t[..10]));
            let reads_or_looks = r.method == "GET"
                || r.is("POST", "/api/auth/login")
                || r.is("POST", "/api/auth/logout")
                || r.is("POST", "/api/users/tokens/impersonate")
                || r.is("POST", "/api/workspaces/exists");
            !(reads_or_looks || by_itself)
        })
        .map(|r| format!("{} {}", r.method, support::without_ids(&r.path)))
        .collect()
}

#[test]
fn positive_control_writes_flags_what_a_converging_run_sends() {
    // The filter the --check tests rely on does see writes: those of a real run on a fresh
    // node, and of a rerun after a local edit.
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // Besides step 7's proof, made with the front-end's new token (each call refused).
    let front = support::stored_token(&node).unwrap();
    let requests: Vec<Recorded> = node
        .windmill
        .requests()
        .into_iter()
        .filter(|r| r.token.as_deref() != Some(front.as_str()))
        .collect();
    let mut first = writes(&requests);
    first.sort();
    assert_eq!(
        first,
        vec![
            "POST /api/settings/global/instance_python_version",
            "POST /api/users/tokens/create",
            "POST /api/users/tokens/create",
            "POST /api/w/fediversity/acls/add/folder/fediversity",
            "POST /api/w/fediversity/folders/create",
            "POST /api/w/fediversity/jobs/run/p/u/admin/bootstrap_probe",
            "POST /api/w/fediversity/jobs_u/queue/cancel/{id}",
            "POST /api/w/fediversity/jobs_u/queue/cancel/{id}",
            "POST /api/w/fediversity/jobs_u/queue/cancel/{id}",
            "POST /api/w/fediversity/scripts/create",
            "POST /api/w/fediversity/scripts/create",
            "POST /api/w/fediversity/scripts/create",
            "POST /api/w/fediversity/scripts/create",
            "POST /api/w/fediversity/scripts/create",
            "POST /api/w/fediversity/scripts/create",
            "POST /api/w/fediversity/workspaces/add_user",
            "POST /api/workspaces/create",
        ]
    );
    node.write_script("f/fediversity/destroy.py", "def main():\n    return 'changed'\n");
    let mark = node.windmill.requests().len();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let second = writes(&node.windmill.requests_since(mark));
    assert!(
        second.contains(&"POST /api/w/fediversity/scripts/create".to_owned()),
        "{second:?}"
    );
    assert!(
        second.iter().any(|w| w.starts_with("DELETE /api/users/tokens/delete/")),
        "{second:?}"
    );
}

#[test]
fn converged_is_0_and_drift_is_1_and_nothing_is_written() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let before = snapshot(&node);

    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.step_lines().len(), 8, "steps 1, 2, 4 to 9: {run:?}");
    for step in [1, 2, 4, 5, 6] {
        assert!(run.step_line(step).ends_with(": unchanged"), "{run:?}");
    }
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value holds a live token labeled fediversity \
             (scopes {}; bound to workspace fediversity) of the operator frontend that works: unchanged",
            node.bao_path,
            support::DEFAULT_SCOPES
        ),
    );
    support::assert_line(
        run.step_line(8),
        &format!(
            "fediversity-windmill-bootstrap: step 8/9 ui-auth: {} (root:postgres 0440) holds a live token labeled fediversity-ui (the superadmin's full rights) that authenticates: unchanged",
            node.include_path().display()
        ),
    );
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: tokens besides the stored ones: 0 of the operator frontend, \
         0 of the superadmin's labeled fediversity, 0 labeled fediversity-ui: unchanged",
    );
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: check: the node is converged",
    );
    assert_eq!(writes(&node.windmill.requests_since(mark)), Vec::<String>::new());
    assert_eq!(snapshot(&node), before);
    // Its login session was logged out, and the impersonation token it listed the operator's
    // tokens with deleted itself: no token of either is left.
    assert_eq!(node.sessions(), Vec::<String>::new());
    assert_eq!(
        support::of(&node, support::OPERATOR_EMAIL),
        vec![support::stored_token(&node).unwrap()]
    );
    // Positive control: it did impersonate the operator (once), so the deletion was seen.
    let looked = node.windmill.requests_since(mark);
    assert_eq!(
        looked
            .iter()
            .filter(|r| r.is("POST", "/api/users/tokens/impersonate"))
            .count(),
        1
    );
    assert_eq!(looked.iter().filter(|r| r.method == "DELETE").count(), 1);

    // A script edited locally, a setting changed remotely: drift, reported, not fixed.
    node.write_script("f/fediversity/destroy.py", "def main():\n    return 'changed'\n");
    node.windmill.put_setting("instance_python_version", json!("3.11"));
    let before = snapshot(&node);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(5).contains("would update f/fediversity/destroy"),
        "{run:?}"
    );
    assert!(run.step_line(5).ends_with(": would update"), "{run:?}");
    assert!(run.step_line(6).ends_with(": would update"), "{run:?}");
    assert!(run.step_line(4).ends_with(": unchanged"), "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: check: a run would change: 5/9 scripts, 6/9 settings",
    );
    assert_eq!(writes(&node.windmill.requests_since(mark)), Vec::<String>::new());
    assert_eq!(snapshot(&node), before);

    // A real run then fixes both, and --check agrees.
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn a_fresh_node_is_drift_in_every_step_and_stays_fresh() {
    let node = support::node();
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(2)
            .contains("does not log in with the node password (it has the default password)"),
        "{run:?}"
    );
    for step in [2, 6] {
        assert!(run.step_line(step).ends_with(": would update"), "{run:?}");
    }
    for step in [4, 5] {
        assert!(run.step_line(step).ends_with(": would create"), "{run:?}");
    }
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value holds no token: would create",
            node.bao_path
        ),
    );
    support::assert_line(
        run.step_line(8),
        &format!(
            "fediversity-windmill-bootstrap: step 8/9 ui-auth: {} does not exist: would create",
            node.include_path().display()
        ),
    );
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: tokens besides the stored ones: no operator yet, \
         0 of the superadmin's labeled fediversity, 0 labeled fediversity-ui: unchanged",
    );
    assert_eq!(writes(&node.windmill.requests()), Vec::<String>::new());
    // The session of the default password it compared with was logged out.
    assert!(
        node.windmill
            .requests()
            .iter()
            .any(|r| r.is("POST", "/api/auth/login") && r.body.contains("\"changeme\""))
    );
    assert_eq!(node.sessions(), Vec::<String>::new());
    // Positive control: a session that is left behind shows.
    let someone = node.login("changeme").unwrap();
    assert_eq!(node.sessions(), vec![someone]);
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert_eq!(node.windmill.workspaces(), vec!["admins".to_owned()]);
    assert!(node.include_meta().is_none());
}

#[test]
fn an_unknown_password_stops_the_check_at_the_login() {
    let node = support::node();
    node.db.set_password_hash(
        ADMIN_EMAIL,
        "$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$8VRpVmUuZZx8GOmJ2S2KjNBZUxbD9PbqWkGiD3fIxRo",
    );
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.step_line(2).contains("(it has another password)"), "{run:?}");
    support::assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: check: cannot log in, so workspace, scripts, settings and the stored tokens were not compared",
    );
    assert_eq!(run.step_lines().len(), 2, "{run:?}");
}

#[test]
fn a_stored_token_with_other_scopes_or_binding_is_drift() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // Positive control: as configured, it checks clean.
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);

    // The configuration now wants the front-end not to cancel: the stored token has more.
    node.config["token"]["scopes"] = json!([support::RUN_SCOPE]);
    let before = snapshot(&node);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value holds the token labeled fediversity of the operator frontend, \
             minted with scopes {} where {} are configured: would update",
            node.bao_path,
            support::DEFAULT_SCOPES,
            support::RUN_SCOPE
        ),
    );
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: check: a run would change: 7/9 openbao",
    );
    assert_eq!(snapshot(&node), before);

    // Unbound, as a front-end that uses the wmill CLI needs it: the binding differs. 1.587's
    // `tokens/list` does not say; the token, asked, shows it.
    node.config["token"] = json!({"bind_to_workspace": false});
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value holds the token labeled fediversity of the operator frontend, \
             which is bound to a workspace (GET /api/users/whoami answered 401) where none is configured: would update",
            node.bao_path
        ),
    );

    // A run mints it as now configured, and the check agrees; bound again, it is drift again.
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_eq!(
        node.windmill
            .tokens()
            .iter()
            .find(|t| t.label == support::FRONT_END)
            .unwrap()
            .workspace_id,
        None
    );
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
    node.config["token"] = json!({});
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(7).ends_with(
            "which is bound to no workspace (GET /api/users/whoami answered 401) where workspace fediversity is configured: would update"
        ),
        "{run:?}"
    );
}

#[test]
fn a_newer_windmill_lists_the_binding_and_the_check_compares_it_there() {
    let mut node = support::node_on(Profile::V1_743);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    node.config["token"] = json!({"bind_to_workspace": false});
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(7)
            .ends_with("minted with bound to workspace fediversity where no workspace is configured: would update"),
        "{run:?}"
    );
}

#[test]
fn a_stored_token_that_is_no_live_token_of_its_label_is_drift() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let stored = support::stored_token(&node).unwrap();
    // An admin revoked it: as the operator (an impersonation), whose tokens only it deletes.
    let session = node.login(&node.password).unwrap();
    let as_admin = format!("Bearer {session}");
    let impersonation = fediversity_testkit::http::request(
        "POST",
        &format!("{}/api/users/tokens/impersonate", node.windmill.url),
        &[("Authorization", &as_admin)],
        Some(&json!({"impersonate_email": support::OPERATOR_EMAIL, "label": "admin"}).to_string()),
    );
    assert_eq!(impersonation.status, 201);
    let url = format!("{}/api/users/tokens/delete/{}", node.windmill.url, &stored[..10]);
    let as_operator = format!("Bearer {}", impersonation.body);
    assert_eq!(
        fediversity_testkit::http::request("DELETE", &url, &[("Authorization", &as_operator)], None).status,
        200
    );
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value holds no live token labeled fediversity of the operator frontend: would update",
            node.bao_path
        ),
    );
    // The impersonation token the admin left: a token of the operator's a run would revoke.
    assert!(run.step_line(9).contains("1 of the operator frontend"), "{run:?}");
    // A token of another label in its place is no better: the UI's token, say.
    let rest = node.bao_path.strip_prefix("secret/").unwrap();
    openbao::shared().api(
        "POST",
        &format!("secret/data/{rest}"),
        Some(&json!({"data": {"value": node.include_token().unwrap()}})),
    );
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(7)
            .ends_with("holds no live token labeled fediversity of the operator frontend: would update"),
        "{run:?}"
    );
    // A token of the superadmin's of the front-end's label (what OpenBao held before the
    // front-end was an operator): not the operator's.
    let theirs = fediversity_testkit::http::request(
        "POST",
        &format!("{}/api/users/tokens/create", node.windmill.url),
        &[("Authorization", &as_admin)],
        Some(
            &json!({"label": "fediversity", "scopes": [support::RUN_SCOPE], "workspace_id": "fediversity"}).to_string(),
        ),
    );
    assert_eq!(theirs.status, 201);
    openbao::shared().api(
        "POST",
        &format!("secret/data/{rest}"),
        Some(&json!({"data": {"value": theirs.body}})),
    );
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(7).ends_with(
            "holds a token fediversity of the superadmin's, where the front-end's belongs to the operator frontend: would update"
        ),
        "{run:?}"
    );
    // A run puts the operator's in its place, and revokes the superadmin's.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(9).contains("1 of the superadmin's labeled fediversity"),
        "{run:?}"
    );
    assert!(!node.windmill.has_token(&theirs.body));
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn an_openbao_token_that_may_not_read_fails_the_check_by_step() {
    // Node::new's token may only create and update the secret: a run works, --check cannot
    // compare the stored token and says so, exit 3.
    let node = Node::new();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_has_line(
        &run.stderr,
        &format!(
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao GET /v1/secret/data/{} answered 403: 1 error occurred: * permission denied (the token is missing, invalid or lacks a policy for this path)",
            node.bao_path.strip_prefix("secret/").unwrap()
        ),
    );
    // Its login session was logged out all the same.
    assert_eq!(node.sessions(), Vec::<String>::new());

    // OpenBao down: the same, exit 3 naming the step.
    let mut node = node;
    node.config["openbao"]["addr"] = json!(format!(
        "http://127.0.0.1:{}",
        fediversity_testkit::servers::free_port()
    ));
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        &format!(
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao GET /v1/sys/internal/ui/mounts/{}: cannot connect[..] (after 3 tries)",
            node.bao_path
        ),
    );
}

#[test]
fn the_include_and_tokens_beside_the_stored_ones_are_compared_too() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let ui = node.include_token().unwrap();
    let mode = |m: u32| {
        std::fs::set_permissions(node.include_path(), std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };

    // Another mode: drift, named.
    mode(0o640);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(8),
        &format!(
            "fediversity-windmill-bootstrap: step 8/9 ui-auth: {} is 0:{gid} 0640 where 0:{gid} 0440 is configured: would update",
            node.include_path().display(),
            gid = fediversity_testkit::node::ui_gid()
        ),
    );
    mode(0o440);

    // A line that is not the include's (a token nobody can tell from text): no token line.
    std::fs::write(node.include_path(), "# emptied by hand\n").unwrap();
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(8).ends_with(" holds no token line: would update"),
        "{run:?}"
    );

    // The include holds the front-end's token instead: no live token of the UI's label.
    std::fs::write(
        node.include_path(),
        format!(
            "proxy_set_header Authorization \"Bearer {}\";\n",
            support::stored_token(&node).unwrap()
        ),
    )
    .unwrap();
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(8)
            .ends_with(" holds no live token labeled fediversity-ui: would update"),
        "{run:?}"
    );
    std::fs::write(
        node.include_path(),
        format!("proxy_set_header Authorization \"Bearer {ui}\";\n"),
    )
    .unwrap();
    assert_eq!(
        node.run(bootstrap_bin!(), &["--check"]).code,
        0,
        "positive control: restored, converged"
    );

    // A token of the UI's label besides the stored one: a run would delete it.
    let session = node.login(&node.password).unwrap();
    let minted = fediversity_testkit::http::request(
        "POST",
        &format!("{}/api/users/tokens/create", node.windmill.url),
        &[("Authorization", &format!("Bearer {session}"))],
        Some(r#"{"label": "fediversity-ui"}"#),
    );
    assert_eq!(minted.status, 201);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: tokens besides the stored ones: 0 of the operator frontend, \
         0 of the superadmin's labeled fediversity, 1 labeled fediversity-ui: would update",
    );
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: check: a run would change: 9/9 revoke",
    );
}

#[test]
fn an_include_that_cannot_be_looked_at_fails_the_check_by_step() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // The include's directory is a file now: whether the include is as configured cannot be told.
    std::fs::write(node.path().join("not-a-dir"), "x").unwrap();
    node.config["ui_auth"]["file"] = json!(node.path().join("not-a-dir/token.conf"));
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        &format!(
            "fediversity-windmill-bootstrap: error: step 8/9 ui-auth failed: cannot look at {}/not-a-dir/token.conf: Not a directory (os error 20)",
            node.path().display()
        ),
    );
    // Its login session was logged out all the same.
    assert_eq!(node.sessions(), Vec::<String>::new());
}

#[test]
fn a_stored_token_that_is_listed_but_no_longer_authenticates_is_drift() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    // Positive control: both work, each as it must (the front-end's reads its jobs, is bound,
    // and is refused a read of another domain).
    let mark = node.windmill.requests().len();
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
    let probes: Vec<String> = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| [Some(front.as_str()), Some(ui.as_str())].contains(&r.token.as_deref()))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        probes,
        [
            "GET /api/w/fediversity/jobs/list",
            "GET /api/users/whoami",
            "GET /api/w/fediversity/variables/list",
            "GET /api/users/whoami"
        ]
    );

    // Both expire: still listed, but refused.
    node.windmill.expire_token(&front);
    node.windmill.expire_token(&ui);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value holds the token labeled fediversity of the operator frontend, \
             which no longer authenticates (GET /api/w/fediversity/jobs/list?per_page=1 answered 401): would update",
            node.bao_path
        ),
    );
    support::assert_line(
        run.step_line(8),
        &format!(
            "fediversity-windmill-bootstrap: step 8/9 ui-auth: {} holds the token labeled fediversity-ui, which no longer authenticates \
             (GET /api/users/whoami answered 401): would update",
            node.include_path().display()
        ),
    );
    // A run replaces both, and the check agrees.
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);

    // A server that stopped enforcing scopes grants the stored token its read: drift too.
    node.windmill.set_enforce_scopes(false);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.step_line(7).ends_with(
            "which Windmill granted GET /api/w/fediversity/variables/list, a read its scopes do not cover: would update"
        ),
        "{run:?}"
    );
}

#[test]
fn an_include_directory_others_may_write_is_refused_by_a_run_and_reported_by_the_check() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    let dir = node.include_path().parent().unwrap().to_owned();
    let mode = |m: u32| std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap();
    mode(0o777);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 1, "{run:?}");
    support::assert_line(
        run.step_line(8),
        &format!(
            "fediversity-windmill-bootstrap: step 8/9 ui-auth: {} is in {}, a directory others may write (mode 0777): any local user could replace the include: would update",
            node.include_path().display(),
            dir.display()
        ),
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        &format!(
            "fediversity-windmill-bootstrap: error: step 8/9 ui-auth failed: {} is in {}, a directory others may write (mode 0777): \
             any local user could replace the include; not written (make the directory writable by its owner and group only)",
            node.include_path().display(),
            dir.display()
        ),
    );
    // The include was not touched, nor the directory's mode; the UI's new token was deleted.
    assert_eq!(node.include_token(), Some(ui.clone()));
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o777);
    assert_eq!(support::labeled(&node, support::UI), vec![ui]);
    assert_ne!(support::stored_token(&node), Some(front));
    // Positive control: closed to others, the run converges.
    mode(0o750);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}
