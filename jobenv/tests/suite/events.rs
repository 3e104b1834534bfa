//! Progress events: with `EVENTS_URL` and `EVENTS_SECRET` on the node, jobenv POSTs the job's
//! status changes and its redacted output lines to a receiver, in order, without ever slowing
//! the program or changing its exit code, and without a secret in any event.
//!
//! The receiver is real HTTP on 127.0.0.1 (testkit `events_receiver`): it holds only the
//! SHA-256 of the expected secret and answers 401/403 without it, so an accepted event also
//! proves the header carried the right secret.

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fediversity_testkit::events_receiver::{Receiver, dead_url};
use fediversity_testkit::job_run::is_nix_retry_notice;
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, run_with_payload};
use fediversity_testkit::process::{Running, StreamWatch};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const EVENTS_SECRET: &str = "events-secret-9f8e7d6c5b4a";
const API_TOKEN: &str = "tok-SECRET-0123456789";

/// A node that sends events to `url`, with `body` as the program `web-<verb>`.
fn node(url: &str, verb: &str, body: &str) -> Fixture {
    let mut f = Fixture::new();
    f.program("web", verb, body)
        .node("EVENTS_URL", url)
        .secret("EVENTS_SECRET", EVENTS_SECRET);
    f
}

fn payload() -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BUILD_ID": "build-42"})
}

fn run(f: &Fixture, verb: &str, extra: &[&str], payload: &Value) -> Output {
    run_with_payload(command(f, verb, extra), payload)
}

fn command(f: &Fixture, verb: &str, extra: &[&str]) -> Command {
    let mut args = vec!["run", "--verb", verb];
    args.extend(extra);
    f.command(jobenv_bin!(), &args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The statuses in event order.
fn statuses(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "status")
        .map(|e| e["status"].as_str().unwrap().to_owned())
        .collect()
}

/// Every log line, in order, as `level source_status: line`.
fn log_lines(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "logs")
        .flat_map(|e| e["lines"].as_array().unwrap().clone())
        .map(|l| {
            format!(
                "{} {}: {}",
                l["level"].as_str().unwrap(),
                l["source_status"].as_str().unwrap(),
                l["line"].as_str().unwrap()
            )
        })
        .collect()
}

/// The lines the program wrote, in order. nix-shell's own lines (while `preparing`) are left
/// out: nix may warn when other users of the machine hold the store's database.
fn program_lines(events: &[Value]) -> Vec<String> {
    log_lines(events)
        .into_iter()
        .filter(|l| l.split(' ').nth(1) == Some("running:"))
        // Nix's notice that it retries its store database, busy with the suite's other
        // nix-shells: written before the program starts, it can be read after the ready byte.
        .filter(|l| !l.split_once(": ").is_some_and(|(_, line)| is_nix_retry_notice(line)))
        .collect()
}

/// Arrived in order, numbered 1, 2, 3, ... with no gap, each naming the job.
fn assert_in_sequence(events: &[Value], verb: &str, build: &str) {
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "{events:#?}");
    for e in events {
        assert_eq!(
            (e["deployment"].as_str(), e["build"].as_str(), e["verb"].as_str()),
            (Some("ns"), Some(build), Some(verb)),
            "{e}"
        );
        let ts = e["timestamp"].as_str().unwrap();
        assert!(
            ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "not RFC 3339 UTC: {ts}"
        );
        assert!(e["dropped"].is_u64(), "{e}");
    }
    let stamps: Vec<&str> = events.iter().map(|e| e["timestamp"].as_str().unwrap()).collect();
    assert!(
        stamps.windows(2).all(|w| w[0] <= w[1]),
        "timestamps go back: {stamps:?}"
    );
}

fn final_event(events: &[Value]) -> &Value {
    let last = events.last().expect("events arrived");
    assert_eq!(last["type"], "status", "the final status is the last event: {last}");
    last
}

#[test]
fn a_successful_apply_reports_preparing_running_succeeded_and_its_lines() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let f = node(
        &receiver.url(),
        "apply",
        "echo 'hello out'; echo 'hello err' >&2; printf 'no newline at the end'",
    );
    let out = run(&f, "apply", &[], &payload());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "hello out\nno newline at the end",
        "events change nothing on stdout"
    );
    assert!(!text(&out.stderr).contains("progress events"), "{}", text(&out.stderr));

    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(statuses(&events), ["preparing", "running", "succeeded"], "{events:#?}");
    assert_eq!(final_event(&events)["exit_code"], 0);
    assert!(
        events[0].get("exit_code").is_none(),
        "only terminal statuses carry an exit code"
    );
    let mut lines = program_lines(&events);
    lines.sort();
    assert_eq!(
        lines,
        [
            "info running: hello out",
            "info running: no newline at the end",
            "warning running: hello err"
        ],
        "{events:#?}"
    );
    // The lines come after `running` and before the final status.
    let running = events.iter().position(|e| e["status"] == "running").unwrap();
    assert!(
        events
            .iter()
            .enumerate()
            .filter(|(_, e)| e["type"] == "logs")
            .all(|(i, _)| i > running && i < events.len() - 1)
    );
    let recorded = receiver.recorded();
    assert_eq!(
        (recorded.unauthorized, recorded.forbidden),
        (0, 0),
        "every request carried the right secret"
    );
}

#[test]
fn output_before_the_program_starts_is_preparing() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let mut f = node(&receiver.url(), "apply", "echo from the program");
    // nix-shell execs this on its rc file, which then execs the program: its line comes while
    // the dev shell is being entered. A line is `preparing` when jobenv reads it before the
    // ready byte: the pause gives a loaded machine time to read it first.
    let shell = f.path().join("announcing-shell");
    fediversity_testkit::nix_fixture::write_executable(
        &shell,
        "#!/bin/sh\necho 'entering the dev shell' >&2\nsleep 0.5\nexec /bin/bash \"$@\"\n",
    );
    f.node("NIX_BUILD_SHELL", shell.display().to_string());
    let out = run(&f, "apply", &[], &payload());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("entering the dev shell"),
        "positive control: the shell wrapper ran"
    );
    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(statuses(&events), ["preparing", "running", "succeeded"]);
    let lines = log_lines(&events);
    let ours: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("entering the dev shell") || l.contains("from the program"))
        .collect();
    assert_eq!(
        ours,
        [
            "warning preparing: entering the dev shell",
            "info running: from the program"
        ]
    );
}

#[test]
fn the_build_is_the_job_id_when_the_payload_names_none() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let f = node(&receiver.url(), "apply", "true");
    let mut command = command(&f, "apply", &[]);
    command.env("WM_JOB_ID", "0192-job");
    let out = run_with_payload(command, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let events = receiver.events();
    assert_in_sequence(&events, "apply", "0192-job");
    assert_eq!(statuses(&events), ["preparing", "running", "succeeded"]);
}

#[test]
fn a_failing_program_reports_failed_with_its_exit_code() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let f = node(&receiver.url(), "apply", "echo 'about to fail' >&2; exit 7");
    let out = run(&f, "apply", &[], &payload());
    assert_eq!(out.status.code(), Some(7));
    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(statuses(&events), ["preparing", "running", "failed"]);
    assert_eq!(final_event(&events)["exit_code"], 7);
    assert_eq!(program_lines(&events), ["warning running: about to fail"]);
}

#[test]
fn a_successful_destroy_reports_destroyed() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let f = node(&receiver.url(), "destroy", "echo gone");
    let out = run(&f, "destroy", &[], &payload());
    assert_eq!(out.status.code(), Some(0));
    let events = receiver.events();
    assert_in_sequence(&events, "destroy", "build-42");
    assert_eq!(statuses(&events), ["preparing", "running", "destroyed"]);
    // A failed destroy is just failed.
    let receiver = Receiver::start(EVENTS_SECRET);
    let f = node(&receiver.url(), "destroy", "exit 1");
    assert_eq!(run(&f, "destroy", &[], &payload()).status.code(), Some(1));
    assert_eq!(statuses(&receiver.events()), ["preparing", "running", "failed"]);
}

/// Starts jobenv with a program that notes that it started, says `ready`, and sleeps.
fn start_sleeper(receiver: &Receiver, extra: &[&str]) -> (Fixture, Running) {
    let mut f = node(&receiver.url(), "apply", "");
    let started = f.path().join("started");
    f.program(
        "web",
        "apply",
        &format!("touch {}; echo ready; sleep 300 & wait", started.display()),
    );
    let child = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(extra)
        .payload(&payload())
        .spawn();
    (f, child)
}

#[test]
fn a_cancelled_job_reports_canceled() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let (_f, mut child) = start_sleeper(&receiver, &[]);
    // Live: the running status and the first line arrive while the program still runs.
    let live = receiver.wait_for(Duration::from_secs(20), |r| {
        program_lines(&r.events) == ["info running: ready"]
    });
    assert!(live, "{:#?}", receiver.events());
    assert_eq!(statuses(&receiver.events()), ["preparing", "running"]);
    kill(Pid::from_raw(child.0.id() as i32), Signal::SIGTERM).unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(statuses(&events), ["preparing", "running", "canceled"]);
    assert_eq!(final_event(&events)["exit_code"], 143);
}

#[test]
fn a_timed_out_job_reports_timed_out() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let (f, mut child) = start_sleeper(&receiver, &["--timeout", "3"]);
    let status = child.0.wait().unwrap();
    assert_eq!(status.code(), Some(124));
    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(final_event(&events)["exit_code"], 124);
    // On a loaded machine nix-shell may use up the timeout before the program starts: then
    // there is no `running`, and that is right too.
    if f.path().join("started").exists() {
        assert_eq!(statuses(&events), ["preparing", "running", "timed_out"]);
    } else {
        assert_eq!(statuses(&events), ["preparing", "timed_out"]);
    }
}

#[test]
fn a_rejected_job_reports_failed_with_its_errors() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let f = node(&receiver.url(), "apply", "echo should-not-run");
    let out = run(
        &f,
        "apply",
        &[],
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BUILD_ID": "build-42", "NOPE": "x"}),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(statuses(&events), ["preparing", "failed"]);
    assert_eq!(final_event(&events)["exit_code"], 2);
    assert_eq!(
        log_lines(&events),
        ["error preparing: payload rejected: undeclared keys: NOPE"]
    );
}

#[test]
fn a_half_configured_node_is_rejected_naming_the_missing_key() {
    let started_marker = "program-started";
    for (url, secret, missing) in [
        (Some("http://127.0.0.1:9/events"), None, "EVENTS_SECRET"),
        (None, Some(EVENTS_SECRET), "EVENTS_URL"),
    ] {
        let mut f = Fixture::new();
        f.program("web", "apply", &format!("echo {started_marker}"));
        if let Some(url) = url {
            f.node("EVENTS_URL", url);
        }
        if let Some(secret) = secret {
            f.secret("EVENTS_SECRET", secret);
        }
        let out = run(&f, "apply", &[], &payload());
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("is set but {missing} is not: progress events need both")),
            "{stderr}"
        );
        assert!(!text(&out.stdout).contains(started_marker));
        assert!(!stderr.contains(EVENTS_SECRET));
    }
}

#[test]
fn no_secret_reaches_an_event_although_the_program_prints_them() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let env_dump = tempfile::NamedTempFile::new().unwrap();
    // The program prints a declared secret (whole, split over two writes, on stderr) and the
    // events secret itself (it knows it from this script, not from its environment), plus a
    // marker that is no secret.
    let body = format!(
        r#"env > {dump}
echo "visible-marker token=$API_TOKEN"
printf 'split %.6s' "$API_TOKEN"; sleep 0.3; printf '%s end\n' "${{API_TOKEN#??????}}"
echo "err $API_TOKEN" >&2
echo "events secret {EVENTS_SECRET}""#,
        dump = env_dump.path().display()
    );
    let mut f = node(&receiver.url(), "apply", &body);
    f.declare("API_TOKEN", None).secret("API_TOKEN", API_TOKEN);
    let out = run(&f, "apply", &[], &payload());
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Positive controls: the program had the declared secret and printed every line, the
    // redactor masked both secrets in place, and the receiver accepted the events (so the
    // header carried the right secret).
    let program_env = std::fs::read_to_string(env_dump.path()).unwrap();
    assert!(program_env.contains(&format!("API_TOKEN={API_TOKEN}")));
    let mut lines = program_lines(&receiver.events());
    lines.sort();
    assert_eq!(
        lines,
        [
            "info running: events secret [REDACTED]",
            "info running: split [REDACTED] end",
            "info running: visible-marker token=[REDACTED]",
            "warning running: err [REDACTED]",
        ]
    );
    let recorded = receiver.recorded();
    assert_eq!((recorded.unauthorized, recorded.forbidden), (0, 0));
    assert!(!recorded.bodies.is_empty());
    for body in &recorded.bodies {
        let body = text(body);
        assert!(
            !body.contains(API_TOKEN) && !body.contains(EVENTS_SECRET),
            "a secret reached an event: {body}"
        );
        assert!(
            !body.contains("tok-SECRET") && !body.contains("events-secret"),
            "part of a secret reached an event: {body}"
        );
    }
    // The event settings never reach the program, nor any output.
    assert!(
        !program_env.contains("EVENTS_URL") && !program_env.contains("EVENTS_SECRET"),
        "{program_env}"
    );
    for stream in [&out.stdout, &out.stderr] {
        assert!(!text(stream).contains(EVENTS_SECRET) && !text(stream).contains(API_TOKEN));
    }
}

#[test]
fn a_wrong_secret_is_refused_once_and_changes_nothing_else() {
    let receiver = Receiver::start("the-secret-the-receiver-expects");
    let f = node(&receiver.url(), "apply", "echo out; exit 3");
    let out = run(&f, "apply", &[], &payload());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(text(&out.stdout), "out\n");
    let about_events: Vec<&str> = stderr.lines().filter(|l| l.contains("progress events")).collect();
    assert_eq!(about_events.len(), 1, "{stderr}");
    assert!(
        about_events[0].starts_with("jobenv: error: ") && about_events[0].contains("HTTP 403"),
        "{stderr}"
    );
    assert!(!stderr.contains(EVENTS_SECRET) && !stderr.contains("the-secret-the-receiver-expects"));
    let recorded = receiver.recorded();
    assert!(recorded.events.is_empty(), "{recorded:?}");
    // One event at a time, and none after the first refusal: exactly one request was made.
    assert_eq!((recorded.forbidden, recorded.bodies.len()), (1, 1), "{recorded:?}");
}

/// jobenv's own stderr lines and the program's (`err`), with the durations cut out (they differ
/// from run to run); nix-shell's own warnings vary with the machine's load and are left out.
fn stable_lines(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|l| l.starts_with("jobenv: ") || *l == "err")
        .map(|l| l.split(" after ").next().unwrap().to_owned())
        .collect()
}

#[test]
fn a_dead_receiver_changes_nothing_but_one_stderr_line() {
    let body = "echo out; echo err >&2; exit 3";
    let f = node(&dead_url(), "apply", body);
    let with_events = run(&f, "apply", &[], &payload());
    // The same node without event settings.
    let mut plain = Fixture::new();
    plain.program("web", "apply", body);
    let without = run(&plain, "apply", &[], &payload());

    assert_eq!(with_events.status.code(), Some(3));
    assert_eq!(without.status.code(), Some(3));
    assert_eq!(with_events.stdout, without.stdout);
    let (with_lines, without_lines) = (stable_lines(&with_events.stderr), stable_lines(&without.stderr));
    assert!(
        without_lines.contains(&"err".to_owned()),
        "positive control: the program's stderr is compared: {without_lines:?}"
    );
    let extra: Vec<&String> = with_lines.iter().filter(|l| !without_lines.contains(l)).collect();
    assert_eq!(extra.len(), 1, "with: {with_lines:#?}\nwithout: {without_lines:#?}");
    assert!(
        extra[0].starts_with(
            "jobenv: warning: progress events: the final status was not delivered (cannot connect to the receiver)"
        ),
        "{extra:?}"
    );
    assert_eq!(with_lines.len(), without_lines.len() + 1, "{with_lines:#?}");
}

/// How a run counted by [`run_counting`] went.
struct Counted {
    code: Option<i32>,
    bytes: u64,
    stderr: String,
}

/// Runs jobenv to its end, counting (not keeping) its stdout.
fn run_counting(mut command: Command, payload: &Value) -> Counted {
    let mut child = Running(
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(payload.to_string().as_bytes())
        .unwrap();
    let stderr = StreamWatch::new(child.stderr.take().unwrap());
    let mut stdout = child.stdout.take().unwrap();
    let mut bytes = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stdout.read(&mut buf).unwrap() {
            0 => break,
            n => bytes += n as u64,
        }
    }
    let code = child.wait().unwrap().code();
    Counted {
        code,
        bytes,
        stderr: text(&stderr.finish()),
    }
}

/// 100 MB in lines of 100 bytes.
const BIG_OUTPUT: &str = "yes 'a line of output from a deployment program, one hundred bytes long with its newline......' | head -c 100000000";

#[test]
fn a_slow_receiver_changes_neither_the_output_nor_the_exit_code_of_a_100_mb_program() {
    let receiver = Receiver::slow(EVENTS_SECRET, Duration::from_secs(5));
    let f = node(&receiver.url(), "apply", BIG_OUTPUT);
    // How long it takes, compared with no receiver, is measured by `bench/run events`.
    let Counted { code, bytes, stderr } = run_counting(command(&f, "apply", &[]), &payload());
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(bytes, 100_000_000, "every byte reached stdout");
    let events = receiver.events();
    let final_arrived = statuses(&events).last().is_some_and(|s| s == "succeeded");
    let counted = stderr.contains("jobenv: warning: progress events: the final status was not delivered");
    assert!(
        final_arrived || counted,
        "the final status neither arrived nor was counted: {stderr}\n{events:#?}"
    );
    assert_eq!(
        stderr.lines().filter(|l| l.contains("progress events")).count(),
        usize::from(counted),
        "{stderr}"
    );
}

#[test]
fn lines_lost_to_a_slow_receiver_are_counted_and_reported() {
    const LINES: u64 = 20_000;
    let receiver = Receiver::slow(EVENTS_SECRET, Duration::from_millis(100));
    let f = node(&receiver.url(), "apply", &format!("seq 1 {LINES}; sleep 1.5"));
    let out = run(&f, "apply", &[], &payload());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).lines().count() as u64,
        LINES,
        "stdout keeps every line"
    );

    let events = receiver.events();
    assert_in_sequence(&events, "apply", "build-42");
    assert_eq!(
        statuses(&events),
        ["preparing", "running", "succeeded"],
        "status events are never dropped"
    );
    let dropped: Vec<u64> = events.iter().map(|e| e["dropped"].as_u64().unwrap()).collect();
    assert!(
        dropped.windows(2).all(|w| w[0] <= w[1]),
        "dropped is a running total: {dropped:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "logs" && e["dropped"].as_u64().unwrap() > 0),
        "a later event reports the drop"
    );
    // Every line is accounted for: delivered, or counted in the final event's total. Besides
    // the program's lines, jobenv read whatever nix-shell wrote on stderr (not its own lines).
    let nix_shell_lines = text(&out.stderr).lines().filter(|l| !l.starts_with("jobenv: ")).count() as u64;
    let delivered = log_lines(&events).len() as u64;
    let final_dropped = final_event(&events)["dropped"].as_u64().unwrap();
    assert!(final_dropped > 0 && delivered > 0);
    assert_eq!(
        delivered + final_dropped,
        LINES + nix_shell_lines,
        "delivered {delivered}, dropped {final_dropped}"
    );
}
