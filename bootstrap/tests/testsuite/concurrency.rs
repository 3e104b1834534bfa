//! Two bootstraps at once end in the state of one run: the lock file makes them take turns.

use std::fs::OpenOptions;
use std::process::Stdio;
use std::time::Duration;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use nix::fcntl::{Flock, FlockArg};
use serde_json::json;

use crate::support;

#[test]
fn two_runs_started_together_end_like_one() {
    let node = support::node();
    let config = node.write_config();
    let spawn = || {
        Node::command(bootstrap_bin!(), &config, &[])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(), spawn());
    let runs = [
        node.finish(first.wait_with_output().unwrap()),
        node.finish(second.wait_with_output().unwrap()),
    ];
    for run in &runs {
        assert_eq!(run.code, 0, "{run:?}");
    }
    // One workspace, one folder, one version per script, the setting written once.
    let w = &node.windmill;
    assert_eq!(w.workspaces(), vec!["admins".to_owned(), "fediversity".to_owned()]);
    assert_eq!(w.folders().len(), 1);
    assert_eq!(w.script_count(), 6);
    let requests = w.requests();
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.is("POST", "/api/workspaces/create"))
            .count(),
        1
    );
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.is("POST", "/api/settings/global/instance_python_version"))
            .count(),
        1
    );
    // The password was written by one of them only: the other logged in with it.
    let updated = runs.iter().filter(|r| r.step_line(2).ends_with(": updated")).count();
    assert_eq!(updated, 1);
    // One token of each label, the front-end's in OpenBao, the UI's in the include, working.
    let (front, ui) = (
        support::labeled(&node, support::FRONT_END),
        support::labeled(&node, support::UI),
    );
    assert_eq!((front.len(), ui.len()), (1, 1));
    assert_eq!(support::stored_token(&node).as_ref(), Some(&front[0]));
    assert_eq!(node.include_token().as_ref(), Some(&ui[0]));
    assert!(node.token_works(&ui[0]));
}

#[test]
fn a_lock_file_that_cannot_be_taken_is_named_and_nothing_is_touched() {
    let mut node = support::node();
    node.config["lock_file"] = json!(node.path().join("no-such-dir/bootstrap.lock"));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: lock failed: cannot open the lock file [..]no-such-dir/bootstrap.lock: No such file or directory (os error 2)",
    );
    assert!(node.windmill.requests().is_empty());
}

#[test]
fn a_run_waits_while_another_holds_the_lock() {
    let node = support::node();
    let config = node.write_config();
    let lock_path = node.path().join("bootstrap.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap();
    let held = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e).unwrap();

    let mut child = Node::command(bootstrap_bin!(), &config, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    // Still waiting, and it has not touched Windmill.
    assert!(
        child.try_wait().unwrap().is_none(),
        "the bootstrap did not wait for the lock"
    );
    assert!(node.windmill.requests().is_empty());
    // --check does not take the lock: it runs meanwhile.
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");

    drop(held);
    let run = node.finish(child.wait_with_output().unwrap());
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("another bootstrap holds"), "{run:?}");
    assert_eq!(node.windmill.script_count(), 6);
}
