//! Script uploads: one new version per changed script, with `parent_hash` = the previous hash;
//! unchanged scripts cost one GET and no write.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::windmill_fake::ScriptRow;
use serde_json::json;

use crate::support;

fn creates(node: &Node, mark: usize) -> Vec<String> {
    node.windmill
        .requests_since(mark)
        .into_iter()
        .filter(support::is_upload)
        .map(|r| {
            serde_json::from_str::<serde_json::Value>(&r.body).unwrap()["path"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[test]
fn an_edited_script_gets_exactly_one_new_version_on_its_parent() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let before = node.windmill.versions("fediversity", "f/fediversity/deploy");
    assert_eq!(before.len(), 1);

    let edited = "def main(**payload):\n    return {'edited': True}\n";
    node.write_script("f/fediversity/deploy.py", edited);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, updated f/fediversity/deploy (content), \
         5 unchanged, waited [..] s for a worker to lock f/fediversity/deploy: updated",
    );

    let after = one_new_version_on(&node, mark, &before);
    assert_eq!(after[1].content, edited);
    assert!(after[0].archived && !after[1].archived);
    // The body sent: the required fields, no lock.
    let body: serde_json::Value = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .find(support::is_upload)
        .map(|r| serde_json::from_str(&r.body).unwrap())
        .unwrap();
    assert_eq!(
        body,
        json!({"path": "f/fediversity/deploy", "parent_hash": before[0].hash, "summary": "deploy", "description": "", "content": edited, "language": "python3"})
    );
    // The other scripts kept their single version.
    for path in ["f/fediversity/destroy", "f/fediversity/_runner", "f/fediversity/hello"] {
        assert_eq!(node.windmill.versions("fediversity", path).len(), 1, "{path}");
    }
}

#[test]
fn added_archived_and_remotely_changed_scripts_are_converged_and_removed_files_left_alone() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // A new file, a script archived in the UI, a file removed locally.
    node.write_script("f/fediversity/new_one.sh", "echo new\n");
    node.windmill.archive("fediversity", "f/fediversity/destroy");
    std::fs::remove_file(node.scripts_dir().join("f/fediversity/hello.sh")).unwrap();
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let mut created = creates(&node, mark);
    created.sort();
    assert_eq!(
        created,
        vec!["f/fediversity/destroy".to_owned(), "f/fediversity/new_one".to_owned()]
    );
    let destroy = node.windmill.versions("fediversity", "f/fediversity/destroy");
    assert_eq!(destroy.len(), 2);
    assert_eq!(destroy[1].parent_hashes.first(), Some(&destroy[0].hash));
    assert!(!destroy[1].archived);
    assert_eq!(
        node.windmill.versions("fediversity", "f/fediversity/new_one")[0].language,
        "bash"
    );
    // The bootstrap never deletes or archives scripts.
    let hello = node.windmill.versions("fediversity", "f/fediversity/hello");
    assert_eq!(hello.len(), 1);
    assert!(!hello[0].archived);
    support::assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, created f/fediversity/new_one, \
         updated f/fediversity/destroy (archived), 4 unchanged, waited [..] s for a worker to lock f/fediversity/destroy: updated",
    );
}

#[test]
fn many_scripts_converge_then_cost_one_get_each_and_no_write() {
    let mut node = support::node();
    node.config["scripts"]["concurrency"] = json!(4);
    for i in 0..40 {
        node.write_script(
            &format!("f/fediversity/many/s{i:02}.py"),
            &format!("def main():\n    return {i}\n"),
        );
    }
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(node.windmill.script_count(), 46);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let requests = node.windmill.requests_since(mark);
    let gets: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "GET" && r.path.starts_with("/api/w/fediversity/scripts/get/p/"))
        .collect();
    assert_eq!(gets.len(), 46);
    assert!(creates(&node, mark).is_empty());
    assert_eq!(node.windmill.script_count(), 46);
}

#[test]
fn a_version_whose_dependency_job_failed_is_uploaded_again() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let before = node.windmill.versions("fediversity", "f/fediversity/deploy");
    // As on a fresh nixpkgs node, where the lock ran with Python 3.11 before step 6 set 3.12.
    node.windmill.set_lock_error(
        "fediversity",
        "f/fediversity/deploy",
        Some("Python is managed through the NixOS system configuration"),
    );

    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    support::assert_line(
        check.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, would update f/fediversity/deploy \
         (its dependency job failed), 5 unchanged: would update",
    );

    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, updated f/fediversity/deploy \
         (its dependency job failed), 5 unchanged, waited [..] s for a worker to lock f/fediversity/deploy: updated",
    );
    let after = one_new_version_on(&node, mark, &before);
    assert_eq!(after[1].content, before[0].content);

    // The new version's lock did not fail: left alone from now on.
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
    // Control: an empty lock_error_logs is no error.
    node.windmill
        .set_lock_error("fediversity", "f/fediversity/deploy", Some(""));
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn a_remote_change_of_content_or_summary_is_overwritten() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let local = std::fs::read_to_string(node.scripts_dir().join("f/fediversity/_runner.py")).unwrap();

    // Someone deploys other content by hand: the next run puts the local file back on top.
    node.windmill
        .push_version("fediversity", "f/fediversity/_runner", "print('other')\n", "_runner");
    let run = node.run(bootstrap_bin!(), &[]);
    support::assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, updated f/fediversity/_runner \
         (content, lock), 5 unchanged, waited [..] s for a worker to lock f/fediversity/_runner: updated",
    );
    let versions = node.windmill.versions("fediversity", "f/fediversity/_runner");
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[2].content, local);
    assert_eq!(versions[2].parent_hashes.first(), Some(&versions[1].hash));

    // Same content, another summary: not "unchanged" either.
    node.windmill
        .push_version("fediversity", "f/fediversity/_runner", &local, "pushed by hand");
    let run = node.run(bootstrap_bin!(), &[]);
    support::assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, updated f/fediversity/_runner \
         (summary, lock), 5 unchanged, waited [..] s for a worker to lock f/fediversity/_runner: updated",
    );
    let versions = node.windmill.versions("fediversity", "f/fediversity/_runner");
    assert_eq!(versions.len(), 5);
    assert_eq!(
        (versions[4].content.as_str(), versions[4].summary.as_str()),
        (local.as_str(), "_runner")
    );

    // And then it is left alone.
    let run = node.run(bootstrap_bin!(), &[]);
    support::assert_line(
        run.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, 6 unchanged: unchanged",
    );
    assert_eq!(node.windmill.versions("fediversity", "f/fediversity/_runner").len(), 5);
}

/// Someone deploys a version of `path` with the same content and summary as the bootstrap's and
/// `settings` besides, through the API as the UI or the CLI would.
fn deploy_with(node: &Node, path: &str, settings: serde_json::Value) {
    let head = node.windmill.versions("fediversity", path).last().unwrap().clone();
    let mut body = json!({"path": path, "parent_hash": head.hash, "summary": head.summary, "description": "", "content": head.content, "language": head.language});
    body.as_object_mut()
        .unwrap()
        .extend(settings.as_object().unwrap().clone());
    let session = node.login(&node.password).unwrap();
    let reply = fediversity_testkit::http::request(
        "POST",
        &format!("{}/api/w/fediversity/scripts/create", node.windmill.url),
        &[("Authorization", &format!("Bearer {session}"))],
        Some(&body.to_string()),
    );
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[test]
fn a_version_with_runtime_settings_of_someone_elses_is_replaced_by_the_bootstraps_own() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // Positive control: the server's own lock on the bootstrap's version (its dependency job) is
    // no drift, for --check or a run.
    node.windmill
        .set_lock("fediversity", "f/fediversity/deploy", "# py: 3.12\nrequests==2.32.3\n");
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);

    // Same content, but run as someone else, with a secret in its environment, on another
    // worker, killed after 5 s; and the destroy script with a lock of the writer's choosing.
    deploy_with(
        &node,
        "f/fediversity/deploy",
        json!({"on_behalf_of_email": "someone@example.org", "envs": ["TOKEN=hunter2"], "tag": "elsewhere", "timeout": 5}),
    );
    deploy_with(
        &node,
        "f/fediversity/destroy",
        json!({"lock": "# py: 3.12\nevil==6.6.6\n"}),
    );
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    support::assert_line(
        check.step_line(5),
        "fediversity-windmill-bootstrap: step 5/9 scripts: 4 scripts in [..] and the 2 probes of step 7, would update f/fediversity/deploy \
         (envs, on_behalf_of_email, tag, timeout, lock) f/fediversity/destroy (lock), 4 unchanged: would update",
    );
    // Field names only: the values (a secret in `envs`) are not shown.
    assert!(
        !check.stderr.contains("hunter2") && !check.stderr.contains("evil"),
        "{check:?}"
    );

    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let mut created = creates(&node, mark);
    created.sort();
    assert_eq!(created, ["f/fediversity/deploy", "f/fediversity/destroy"]);
    // The new versions carry the bootstrap's fields only: no setting, no lock sent (the worker
    // locked them).
    for path in ["f/fediversity/deploy", "f/fediversity/destroy"] {
        let head = node.windmill.versions("fediversity", path).last().unwrap().clone();
        assert!(
            head.settings.is_empty() && head.lock.as_deref() == Some("# py: 3.12\n"),
            "{path}: {head:?}"
        );
    }
    assert!(
        node.windmill
            .requests_since(mark)
            .iter()
            .filter(|r| support::is_upload(r))
            .all(|r| !r.body.contains("lock")),
    );
    // Once the server locks them, they are left alone: they are the bootstrap's own.
    node.windmill
        .set_lock("fediversity", "f/fediversity/destroy", "# py: 3.12\n");
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
    let state = node.state().unwrap();
    let recorded = state["scripts"]["fediversity"]["f/fediversity/destroy"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        recorded,
        node.windmill
            .versions("fediversity", "f/fediversity/destroy")
            .last()
            .unwrap()
            .hash
    );
}

/// Asserts that the run since `mark` created exactly one version of the deploy script, whose
/// parent is the previous head `before[0]`, and returns both versions.
fn one_new_version_on(node: &Node, mark: usize, before: &[ScriptRow]) -> Vec<ScriptRow> {
    assert_eq!(creates(node, mark), vec!["f/fediversity/deploy".to_owned()]);
    let after = node.windmill.versions("fediversity", "f/fediversity/deploy");
    assert_eq!(after.len(), 2);
    assert_eq!(after[1].parent_hashes.first(), Some(&before[0].hash));
    after
}
