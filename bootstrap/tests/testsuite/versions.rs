//! What differs between the Windmill versions a node may run, and what they share that the
//! bootstrap relies on: the workspace operator (created once, its role and read on the folder
//! put back), a new version that runs only once a worker locked it (waited for, bounded), the
//! first seconds of a fresh 1.587 that refuses every job submission while it migrates its job
//! tables (waited out, named in the log), and instances that do not derive usernames.

use std::time::{Duration, Instant};

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::windmill_fake::{Profile, UserRow};
use serde_json::json;

use crate::support::{self, assert_has_line, assert_line};

crate::on_every_profile!(the_operator_and_its_read_on_the_folder_are_created_once, |profile| {
    super::the_operator_and_its_read_on_the_folder_are_created_once(profile)
});

fn the_operator_and_its_read_on_the_folder_are_created_once(profile: Profile) {
    let node = support::node_on(profile);
    for _ in 0..3 {
        assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    }
    let requests = node.windmill.requests();
    let count = |path: &str| requests.iter().filter(|r| r.is("POST", path)).count();
    assert_eq!(count("/api/w/fediversity/workspaces/add_user"), 1);
    // (Each run's proof has its new token refused an ACL change, with an empty body.)
    let acls: Vec<_> = requests
        .iter()
        .filter(|r| r.path.starts_with("/api/w/fediversity/acls/") && r.body != "{}")
        .collect();
    // Once, by the superadmin's token of the first run: read, not write.
    assert_eq!(acls.len(), 1);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&acls[0].body).unwrap(),
        json!({"owner": "u/frontend", "write": false})
    );
    assert_eq!(node.windmill.users("fediversity").len(), 1);
}

#[test]
fn an_operator_whose_role_or_access_changed_is_put_back_and_check_reports_it() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // An admin made it a workspace admin, gave it write on the folder.
    node.windmill.update_user("fediversity", support::OPERATOR_EMAIL, |u| {
        u.is_admin = true;
        u.operator = false;
    });
    node.windmill.update_folder("fediversity", "fediversity", |f| {
        f.extra_perms.insert("u/frontend".into(), true);
    });
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    assert_line(
        check.step_line(4),
        "fediversity-windmill-bootstrap: step 4/9 workspace: workspace fediversity and folder fediversity, operator frontend@fediversity.invalid \
         (u/frontend) with read on the folder (not an enabled operator, write on the folder): would update",
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(4),
        "fediversity-windmill-bootstrap: step 4/9 workspace: workspace fediversity and folder fediversity, operator frontend@fediversity.invalid \
         (u/frontend) with read on the folder (made an enabled operator, write taken away): updated",
    );
    let user = &node.windmill.users("fediversity")[0];
    assert!(user.operator && !user.is_admin && !user.disabled);
    assert_eq!(
        node.windmill
            .folder("fediversity", "fediversity")
            .unwrap()
            .extra_perms
            .get("u/frontend"),
        Some(&false)
    );

    // An owner of the folder now, and disabled: put back to read only, enabled.
    node.windmill
        .update_user("fediversity", support::OPERATOR_EMAIL, |u| u.disabled = true);
    node.windmill
        .update_folder("fediversity", "fediversity", |f| f.owners.push("u/frontend".into()));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(4)
            .ends_with("(made an enabled operator, no owner of the folder any more): updated"),
        "{run:?}"
    );
    let folder = node.windmill.folder("fediversity", "fediversity").unwrap();
    assert!(!folder.owners.contains(&"u/frontend".to_owned()));
    assert_eq!(folder.extra_perms.get("u/frontend"), Some(&false));
    assert!(!node.windmill.users("fediversity")[0].disabled);
    // Positive control: converged, the check agrees.
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn an_instance_that_does_not_derive_usernames_gets_the_configured_one() {
    let mut node = support::node();
    node.windmill.set_automate_usernames(false);
    node.config["token"]["user_email"] = json!("deployer@example.invalid");
    node.config["token"]["username"] = json!("deployer");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        node.windmill.users("fediversity"),
        vec![UserRow {
            email: "deployer@example.invalid".into(),
            username: "deployer".into(),
            is_admin: false,
            operator: true,
            disabled: false
        }]
    );
    // Tried without a username first (refused: "username is required"), then with it.
    let adds: Vec<serde_json::Value> = node
        .windmill
        .requests()
        .iter()
        .filter(|r| r.is("POST", "/api/w/fediversity/workspaces/add_user"))
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .collect();
    assert_eq!(
        adds,
        [
            json!({"email": "deployer@example.invalid", "is_admin": false, "operator": true}),
            json!({"email": "deployer@example.invalid", "is_admin": false, "operator": true, "username": "deployer"}),
        ]
    );
    assert!(run.step_line(7).contains("of the operator deployer,"), "{run:?}");
    // Positive control: where usernames are derived, the configured one is not sent.
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert!(
        node.windmill
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/add_user"))
            .all(|r| !r.body.contains("username"))
    );
}

crate::on_every_profile!(
    a_new_version_runs_only_once_locked_and_the_run_waits_for_it,
    |profile| { super::a_new_version_runs_only_once_locked_and_the_run_waits_for_it(profile) }
);

fn a_new_version_runs_only_once_locked_and_the_run_waits_for_it(profile: Profile) {
    // A worker that takes a second to lock each new version: the run waits, then proves.
    let node = support::node_on(profile);
    node.windmill.set_worker(Some(Duration::from_secs(1)));
    let started = Instant::now();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, created [..], 0 unchanged, \
         waited [..] s for a worker to lock f/fediversity/_runner f/fediversity/deploy f/fediversity/destroy: created",
    );
    // Not before: the first look found them unlocked (no run was tried meanwhile).
    let waited = run.step_line(5).split("waited ").nth(1).unwrap();
    let seconds: f64 = waited.split(' ').next().unwrap().parse().unwrap();
    assert!(seconds >= 0.9, "{waited}");

    // No worker at all: the new version of deploy never runs; the run stops at step 5 naming it,
    // after the bound, and stores no token.
    let mut node = support::node_on(profile);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let front = support::stored_token(&node).unwrap();
    node.windmill.set_worker(None);
    node.config["retry"]["lock_timeout_seconds"] = json!(1);
    node.write_script("f/fediversity/deploy.py", "def main(**payload):\n    return 'v2'\n");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 5/9 scripts failed: no worker locked f/fediversity/deploy within 1 s \
         (Windmill runs a new version only once a worker has computed its lock): is a worker running?",
    );
    assert_eq!(support::stored_token(&node), Some(front));
    // --check says so too: the version is there, not locked.
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    assert!(
        check
            .step_line(5)
            .ends_with(", 6 unchanged, f/fediversity/deploy not locked by a worker yet: would update"),
        "{check:?}"
    );
    // Positive control: a worker comes back, the next run converges.
    node.windmill.set_worker(Some(Duration::ZERO));
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn a_dependency_job_that_fails_fails_the_run_at_its_end_and_the_next_run_uploads_again() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    node.write_script("f/fediversity/destroy.py", "def main(**payload):\n    return 'v2'\n");
    node.windmill.fail_next_lock("f/fediversity/destroy");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: [..], waited [..] s for a worker to lock f/fediversity/destroy (the dependency job \
         of f/fediversity/destroy failed: the run fails at its end, and the next uploads it again): updated",
    );
    // The rest of the run went on: the previous version of destroy still runs, the tokens are new.
    assert!(run.step_line(9).ends_with(": updated"), "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 5/9 scripts failed: the dependency job of f/fediversity/destroy failed, so that version does not run; \
         the next run uploads it again (with the settings of step 6 in place)",
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(5)
            .contains("updated f/fediversity/destroy (its dependency job failed)"),
        "{run:?}"
    );
    assert_eq!(node.windmill.versions("fediversity", "f/fediversity/destroy").len(), 3);
}

#[test]
fn a_fresh_1_587_that_still_migrates_its_job_tables_is_waited_out_and_named() {
    for profile in [Profile::V1_509, Profile::V1_587] {
        let node = support::node_on(profile);
        node.windmill.start_migrating(Duration::from_secs(2));
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 0, "{profile}: {run:?}");
        assert_has_line(
            &run.stderr,
            "fediversity-windmill-bootstrap: Windmill POST /api/w/fediversity/scripts/create ([..]): the server is still migrating its job tables \
             (it answered 400 null value in column \"__job_kind\", as Windmill 1.587 does until its startup \"v2 finalization\" ran); again in [..] s",
        );
        assert_eq!(node.windmill.script_count(), 6);
        // Positive control: the fake did refuse the first uploads.
        let refused = node
            .windmill
            .requests()
            .iter()
            .filter(|r| support::is_upload(r) && r.body.contains("python3"))
            .count();
        assert!(refused > 3, "{refused}");

        // Migrating for longer than the bound (the ready timeout): the step fails, naming it.
        let mut node = support::node_on(profile);
        node.config["retry"]["ready_timeout_seconds"] = json!(1);
        node.windmill.start_migrating(Duration::from_secs(60));
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 3, "{run:?}");
        assert_line(
            run.stderr.lines().last().unwrap(),
            "fediversity-windmill-bootstrap: error: step 5/9 scripts failed: f/fediversity/[..]: Windmill POST /api/w/fediversity/scripts/create \
             (f/fediversity/[..]) still answered 400 null value in column \"__job_kind\" after 1 s: the server has not finished migrating its job \
             tables (its startup \"v2 finalization\", which waits for every worker to run at least 1.461: is a worker of an older or unknown version \
             registered?)",
        );
    }
}
