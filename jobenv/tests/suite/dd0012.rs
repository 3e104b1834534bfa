//! Progress events in DD-0012's format (`EVENTS_FORMAT=dd-0012`): a DD-0012 back-end takes a
//! job's progress as it is. The receiver (testkit `dd0012_receiver`) implements seed 004's
//! contract, not jobenv's: rows of both kinds, each with its own secret (kept as a SHA-256),
//! 401/403, each kind's set of statuses (anything else is refused), `{"success": true}`. So a
//! row whose status and log arrived also proves jobenv used the row's address and secret.
//!
//! The mapping under test (docs/front-ends/events.md, "DD-0012"): while the job runs, a jobs row is
//! `preparing` then `running`, a deployments row `preparing`; at the end
//!
//! | ending | jobs | deployments |
//! |---|---|---|
//! | apply succeeded | succeeded | running |
//! | destroy succeeded | destroyed | destroyed |
//! | failed, rejected, timed out | failed | failed |
//! | canceled | failed | stopped |
//!
//! and the last message says how the job ended, in jobenv's words.

use std::time::Duration;

use fediversity_testkit::dd0012_receiver::{Dd0012Receiver, Kind, Row};
use fediversity_testkit::job_run::Done;
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const ROW_SECRET: &str = "row-secret-7f6e5d4c3b2a1908";
const API_TOKEN: &str = "tok-SECRET-0123456789";

/// A node whose events go to `receiver` in DD-0012's format, with `body` as `web-<verb>`, and
/// a declared secret `API_TOKEN` the program has.
fn node(receiver: &Dd0012Receiver, verb: &str, body: &str) -> Fixture {
    let mut f = Fixture::new();
    f.program("web", verb, body)
        .node("EVENTS_URL", receiver.base_url())
        .node("EVENTS_FORMAT", "dd-0012");
    f.declare("API_TOKEN", None).secret("API_TOKEN", API_TOKEN);
    f
}

fn payload(kind: Kind, row: u64) -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "EVENTS_KIND": kind.as_str(), "EVENTS_ROW_ID": row, "EVENTS_SECRET": ROW_SECRET})
}

/// The row's statuses as changes (a notification that repeats the status is no change).
fn changes(row: &Row) -> Vec<&str> {
    let mut changes: Vec<&str> = row.statuses.iter().map(String::as_str).collect();
    changes.dedup();
    changes
}

/// The row's log as `level: message`, one entry per line of each message, nix-shell's own
/// lines (while the dev shell is entered, on stderr) left out.
fn log_lines(row: &Row) -> Vec<String> {
    row.log
        .iter()
        .flat_map(|(level, message)| message.split('\n').map(move |line| format!("{level}: {line}")))
        .filter(|line| !line.starts_with("warning: warning:") && !line.contains("nix"))
        .collect()
}

fn last_message(row: &Row) -> (String, String) {
    row.log.last().cloned().expect("the row has a log")
}

/// Nothing the receiver got holds a secret: not the row's, not the program's.
fn assert_no_secret_reached(receiver: &Dd0012Receiver) {
    let requests = receiver.requests();
    assert!(!requests.is_empty(), "positive control: requests were made");
    for request in requests {
        let body = String::from_utf8_lossy(&request.body);
        for secret in [ROW_SECRET, API_TOKEN, "row-secret", "tok-SECRET"] {
            assert!(!body.contains(secret), "a secret reached the receiver: {body}");
        }
    }
}

/// Runs `verb` for a new row of `kind`; what jobenv printed, the row, and the receiver.
fn run(kind: Kind, verb: &str, body: &str, code: i32) -> (Done, Row, Dd0012Receiver) {
    let receiver = Dd0012Receiver::start();
    let id = receiver.add_row(kind, ROW_SECRET);
    let f = node(&receiver, verb, body);
    let done = f
        .jobenv(jobenv_bin!())
        .verb(verb)
        .payload(&payload(kind, id))
        .expect_code(code)
        .expect_nowhere("the row's secret", ROW_SECRET)
        .run();
    assert!(!done.stderr.contains("progress events"), "{done:?}");
    let row = receiver.row(kind, id);
    assert_eq!(
        row.notifications.len(),
        row.statuses.len(),
        "every notification carries the row's status: {row:?}"
    );
    (done, row, receiver)
}

/// A program that prints its secret, the row's secret (known from this script, not from its
/// environment) and its environment's event keys, if any, on both streams.
const TALKATIVE: &str = r#"echo "hello out token=$API_TOKEN"
echo "hello err" >&2
echo "row secret row-secret-7f6e5d4c3b2a1908"
env | grep '^EVENTS_' || echo "no EVENTS_ variable""#;

#[test]
fn a_deploy_reaches_a_jobs_row_redacted_and_in_its_set() {
    let (done, row, receiver) = run(Kind::Jobs, "apply", TALKATIVE, 0);
    assert_eq!(
        done.stdout, "hello out token=[REDACTED]\nrow secret [REDACTED]\nno EVENTS_ variable\n",
        "the program never got the row's keys"
    );
    assert_eq!(changes(&row), ["preparing", "running", "succeeded"]);
    let mut lines = log_lines(&row);
    let last = lines.pop().unwrap();
    lines.sort();
    assert_eq!(
        lines,
        [
            "info: hello out token=[REDACTED]",
            "info: no EVENTS_ variable",
            "info: row secret [REDACTED]",
            "warning: hello err"
        ],
        "{row:?}"
    );
    assert_eq!(last, "info: apply succeeded with exit code 0");
    assert_no_secret_reached(&receiver);
}

#[test]
fn a_deploy_leaves_a_deployments_row_running() {
    let (_, row, receiver) = run(Kind::Deployments, "apply", TALKATIVE, 0);
    // The deployment is prepared while its program runs, and runs once it succeeded.
    assert_eq!(changes(&row), ["preparing", "running"]);
    assert_eq!(
        last_message(&row),
        ("info".into(), "apply succeeded with exit code 0".into())
    );
    assert!(
        log_lines(&row).contains(&"info: hello out token=[REDACTED]".to_owned()),
        "{row:?}"
    );
    assert_no_secret_reached(&receiver);
}

#[test]
fn a_destroy_leaves_both_kinds_destroyed() {
    for kind in [Kind::Jobs, Kind::Deployments] {
        let (_, row, _) = run(kind, "destroy", "echo gone", 0);
        assert_eq!(changes(&row).last(), Some(&"destroyed"), "{kind:?}: {row:?}");
        assert_eq!(
            last_message(&row),
            ("info".into(), "destroy succeeded with exit code 0".into())
        );
    }
}

#[test]
fn a_failure_is_failed_on_both_kinds() {
    for kind in [Kind::Jobs, Kind::Deployments] {
        let (_, row, _) = run(kind, "apply", "echo 'about to fail' >&2; exit 7", 7);
        assert_eq!(changes(&row).last(), Some(&"failed"), "{kind:?}: {row:?}");
        assert_eq!(
            log_lines(&row),
            ["warning: about to fail", "error: apply failed with exit code 7"],
            "{kind:?}"
        );
    }
}

#[test]
fn a_rejected_job_is_failed_with_its_errors() {
    for kind in [Kind::Jobs, Kind::Deployments] {
        let receiver = Dd0012Receiver::start();
        let id = receiver.add_row(kind, ROW_SECRET);
        let f = node(&receiver, "apply", "echo should-not-run");
        let mut payload = payload(kind, id);
        payload["NOPE"] = json!("x");
        f.jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&payload)
            .expect_code(2)
            .expect_stdout("")
            .expect_stderr("jobenv: error: payload rejected: undeclared keys: NOPE\n")
            .run();
        let row = receiver.row(kind, id);
        assert_eq!(changes(&row), ["preparing", "failed"], "{kind:?}");
        assert_eq!(
            log_lines(&row),
            [
                "error: payload rejected: undeclared keys: NOPE",
                "error: apply was rejected with exit code 2"
            ],
            "{kind:?}"
        );
    }
}

/// Starts a job whose program says `ready` and sleeps, for a new row of `kind`.
fn start_sleeper(kind: Kind, extra: &[&str]) -> (Dd0012Receiver, u64, Fixture, fediversity_testkit::process::Running) {
    let receiver = Dd0012Receiver::start();
    let id = receiver.add_row(kind, ROW_SECRET);
    let f = node(&receiver, "apply", "touch started; echo ready; sleep 300 & wait");
    let child = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(extra)
        .payload(&payload(kind, id))
        .spawn();
    (receiver, id, f, child)
}

#[test]
fn a_cancel_says_canceled_in_the_last_message() {
    for (kind, status) in [(Kind::Jobs, "failed"), (Kind::Deployments, "stopped")] {
        let (receiver, id, _f, mut child) = start_sleeper(kind, &[]);
        let live = fediversity_testkit::process::wait_until(Duration::from_secs(20), || {
            receiver.row(kind, id).log.iter().any(|(_, m)| m == "ready")
        });
        assert!(live, "{:?}", receiver.row(kind, id));
        kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).unwrap();
        assert_eq!(child.0.wait().unwrap().code(), Some(143));
        let row = receiver.row(kind, id);
        assert_eq!(changes(&row).last(), Some(&status), "{kind:?}: {row:?}");
        assert_eq!(
            last_message(&row),
            ("warning".into(), "apply was canceled with exit code 143".into()),
            "{kind:?}"
        );
    }
}

#[test]
fn a_timeout_says_timed_out_in_the_last_message() {
    for kind in [Kind::Jobs, Kind::Deployments] {
        let (receiver, id, _f, mut child) = start_sleeper(kind, &["--timeout", "3"]);
        assert_eq!(child.0.wait().unwrap().code(), Some(124));
        let row = receiver.row(kind, id);
        assert_eq!(changes(&row).last(), Some(&"failed"), "{kind:?}: {row:?}");
        assert_eq!(
            last_message(&row),
            ("warning".into(), "apply timed out with exit code 124".into()),
            "{kind:?}"
        );
    }
}

#[test]
fn a_wrong_row_secret_is_refused_once_and_changes_nothing_else() {
    let receiver = Dd0012Receiver::start();
    let id = receiver.add_row(Kind::Jobs, "the-secret-the-row-really-has");
    let f = node(&receiver, "apply", "echo out; exit 3");
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload(Kind::Jobs, id))
        .expect_code(3)
        .expect_stdout("out\n")
        .expect_nowhere("the row's secret", ROW_SECRET)
        .expect_stderr("...\njobenv: error: progress events: the receiver refused jobenv's EVENTS_SECRET (HTTP 403 Forbidden); no more events are sent for this job\n...\n")
        .run();
    assert_eq!(
        done.stderr.lines().filter(|l| l.contains("progress events")).count(),
        1,
        "{done:?}"
    );
    let requests = receiver.requests();
    assert_eq!(
        requests.iter().map(|r| r.answer).collect::<Vec<_>>(),
        [403],
        "one request, and none after the refusal"
    );
    assert_eq!(receiver.row(Kind::Jobs, id).statuses.len(), 0);
}

/// Who can write a row is who holds its secret. A job (or whoever holds the front-end's token
/// and queues jobs of its own) that names another row than its own, with its own row's secret
/// or any other, is refused by the back-end: the other row gets nothing, and no more requests
/// are sent. Positive control: the same job, naming its own row, writes it.
#[test]
fn a_job_cannot_write_a_row_whose_secret_it_does_not_hold() {
    let receiver = Dd0012Receiver::start();
    let own = receiver.add_row(Kind::Jobs, ROW_SECRET);
    let victim = receiver.add_row(Kind::Jobs, "the-victims-own-row-secret-42");
    let other_kind = receiver.add_row(Kind::Deployments, "a-deployment-row-secret-0042");
    let f = node(&receiver, "apply", "echo 'status: all good'; exit 0");
    for (kind, row) in [(Kind::Jobs, victim), (Kind::Deployments, other_kind)] {
        let done = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&payload(kind, row))
            .expect_success()
            .expect_stderr_contains("jobenv: error: progress events: the receiver refused jobenv's EVENTS_SECRET (HTTP 403 Forbidden); no more events are sent for this job")
            .run();
        assert_eq!(done.stdout, "status: all good\n", "the job itself ran");
    }
    let requests = receiver.requests();
    assert_eq!(
        requests.iter().map(|r| r.answer).collect::<Vec<_>>(),
        [403, 403],
        "one refused request per job, none after it"
    );
    for (kind, row) in [(Kind::Jobs, victim), (Kind::Deployments, other_kind), (Kind::Jobs, own)] {
        let row = receiver.row(kind, row);
        assert!(row.notifications.is_empty() && row.status == "pending", "{row:?}");
    }
    // Positive control: its own row, with its own secret.
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload(Kind::Jobs, own))
        .expect_success()
        .run();
    let row = receiver.row(Kind::Jobs, own);
    assert_eq!(changes(&row), ["preparing", "running", "succeeded"]);
    assert!(
        log_lines(&row).contains(&"info: status: all good".to_owned()),
        "{row:?}"
    );
    assert!(receiver.row(Kind::Jobs, victim).notifications.is_empty());
}

/// A node-wide `EVENTS_SECRET` on a dd-0012 node was the secret of every row (a back-end set up
/// to take it for all of them), so the payload alone chose which row it wrote to. Such a node
/// is refused now, every job of it, before anything runs or is sent, with a line that says what
/// to change. Positive control: the node without its secret, and the payload with the row's.
#[test]
fn a_node_wide_secret_on_a_dd0012_node_is_refused_and_says_what_to_do() {
    let node_secret = "node-events-secret-0123456789";
    let receiver = Dd0012Receiver::start();
    // The back-end as a node-wide secret needed it: every row with that one secret.
    let own = receiver.add_row(Kind::Jobs, node_secret);
    let victim = receiver.add_row(Kind::Deployments, node_secret);
    let mut f = node(&receiver, "apply", "true");
    let ran = f.path().join("ran");
    f.program("web", "apply", &format!("touch '{}'; echo hello", ran.display()))
        .secret("EVENTS_SECRET", node_secret);
    let secrets_dir = f.secrets_dir();
    for payload in [
        payload(Kind::Deployments, victim),
        payload(Kind::Jobs, own),
        json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}),
    ] {
        let done = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&payload)
            .expect_code(2)
            .expect_stdout("")
            .expect_nowhere("the node's secret", node_secret)
            .run();
        let expected = format!(
            "jobenv: error: {}/EVENTS_SECRET sets EVENTS_SECRET, but EVENTS_FORMAT is dd-0012, whose rows have secrets of their own: one secret for every row would let any job post to any row. Remove EVENTS_SECRET from the node; the front-end sends each row's secret in the payload's EVENTS_SECRET",
            secrets_dir.display()
        );
        assert!(done.stderr_lines().contains(&expected.as_str()), "{}", done.stderr);
        assert!(!ran.exists(), "the program ran");
    }
    assert!(receiver.requests().is_empty(), "a refused node sent a request");
    assert!(receiver.row(Kind::Deployments, victim).notifications.is_empty());

    // Positive control: without the node's secret, the row's own (which the front-end sends).
    let f = node(&receiver, "apply", "echo hello");
    let id = receiver.add_row(Kind::Jobs, ROW_SECRET);
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload(Kind::Jobs, id))
        .expect_success()
        .run();
    assert_eq!(
        changes(&receiver.row(Kind::Jobs, id)),
        ["preparing", "running", "succeeded"]
    );
}

/// Whatever the payload says, a request goes to the node's base and the row's path only: a row
/// id or a kind that is not one is refused before anything is sent, and so is nothing else.
#[test]
fn a_payload_never_directs_a_request_to_another_host_or_path() {
    let receiver = Dd0012Receiver::start();
    let elsewhere = Dd0012Receiver::start();
    let id = receiver.add_row(Kind::Jobs, ROW_SECRET);
    let f = node(&receiver, "apply", "true");
    let other = elsewhere.authority();
    let refused = |kind: Value, row: Value, expected: &str| {
        let mut payload = payload(Kind::Jobs, id);
        payload["EVENTS_KIND"] = kind;
        payload["EVENTS_ROW_ID"] = row;
        payload["EVENTS_URL"] = json!(elsewhere.base_url());
        f.jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&payload)
            .expect_code(2)
            .expect_stderr(format!("jobenv: error: {expected}\n"))
            .run();
    };
    let rule = "is invalid: must be a positive integer of at most 18 digits, without a sign or a leading zero";
    for row in [
        format!("{id}/../../other"),
        format!("{id}/..%2F..%2Fother"),
        format!("{id}%2Fnotifications"),
        format!("{id}@{other}"),
        format!("{id}?next=http://{other}/"),
        format!("0{id}"),
        format!("+{id}"),
        format!("-{id}"),
        format!(" {id}"),
        "99999999999999999999999999999999".into(),
        format!("//{other}/api/jobs/{id}"),
    ] {
        refused(json!("jobs"), json!(row), &format!(r#"EVENTS_ROW_ID {row:?} {rule}"#));
    }
    refused(json!("jobs"), json!(-5), &format!("EVENTS_ROW_ID \"-5\" {rule}"));
    refused(json!("jobs"), json!(4.1e1), &format!("EVENTS_ROW_ID \"41.0\" {rule}"));
    for kind in ["jobs/../deployments", "http://evil.example", "../jobs", "JOBS"] {
        refused(
            json!(kind),
            json!(id),
            &format!("EVENTS_KIND {kind:?} is invalid: must be jobs or deployments"),
        );
    }
    assert!(
        receiver.requests().is_empty() && elsewhere.requests().is_empty(),
        "a refused job sent a request"
    );

    // Positive control: with its own row, the same payload reaches the row, at its path only.
    let mut payload = payload(Kind::Jobs, id);
    payload["EVENTS_URL"] = json!(elsewhere.base_url());
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload)
        .expect_success()
        .expect_stderr_contains("payload value for EVENTS_URL ignored: the node sets it")
        .run();
    let requests = receiver.requests();
    assert!(!requests.is_empty());
    for request in &requests {
        assert_eq!(
            (request.method.as_str(), request.path.as_str(), request.answer),
            ("POST", format!("/api/jobs/{id}/notifications").as_str(), 200)
        );
        assert_eq!(request.host.as_deref(), Some(receiver.authority().as_str()));
    }
    assert!(elsewhere.requests().is_empty(), "the payload's EVENTS_URL was used");
    assert_eq!(
        changes(&receiver.row(Kind::Jobs, id)),
        ["preparing", "running", "succeeded"]
    );
}
