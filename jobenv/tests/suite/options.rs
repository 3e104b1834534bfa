//! jobenv's own options and environment variables: an empty `JOBENV_*` means "unset" for every
//! option alike, a bad one is refused like bad input (a `jobenv: error:` line, exit 2, and under a
//! job runner a `result.json` that says `rejected`), and `JOBENV_LOG=debug` adds jobenv's own
//! lines, never a library's (which could show where progress events go).

use std::time::Duration;

use fediversity_testkit::events_receiver::Receiver;
use fediversity_testkit::job_run::without_nix_retry_notices;
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::process::{StreamWatch, read_pids, wait_exit};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const EVENTS_SECRET: &str = "events-secret-9f8e7d6c5b4a";

fn payload() -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})
}

fn fixture() -> Fixture {
    let mut f = Fixture::new();
    f.program("web", "apply", "echo done");
    f
}

#[test]
fn a_bad_option_variable_under_a_job_runner_is_an_error_line_and_a_rejected_result() {
    // clap names the option a variable stands for (`--grace`), not the variable.
    for (var, value, named) in [
        ("JOBENV_GRACE", "x", "--grace"),
        ("JOBENV_TIMEOUT", "-1", "--timeout"),
        ("JOBENV_LOG", "verbose", "JOBENV_LOG"),
    ] {
        let f = fixture();
        let done = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .env("WM_JOB_ID", "0192-bad-option")
            .env(var, value)
            .payload(&payload())
            .expect_code(2)
            .expect_stderr_contains("jobenv: error: ")
            .expect_stderr_contains(named)
            .run();
        assert!(!done.stdout.contains("done"), "{var}: the program ran");
        let result = f.result_json();
        assert_eq!(
            (result["status"].as_str(), result["exit_code"].as_i64()),
            (Some("rejected"), Some(2)),
            "{var}: {result}"
        );
        assert!(result["errors"].to_string().contains(named), "{var}: {result}");
        assert_eq!(result["verb"], "apply");
    }
}

#[test]
fn an_invalid_jobenv_log_is_refused_naming_the_variable() {
    let f = fixture();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_LOG", "trace-everything")
        .payload(&payload())
        .expect_code(2)
        .expect_stderr_contains("jobenv: error: ")
        .expect_stderr_contains("JOBENV_LOG")
        .expect_stdout("")
        .run();
}

#[test]
fn empty_option_variables_mean_the_defaults() {
    let mut f = Fixture::new();
    let pids = f.path().join("pids");
    f.program(
        "web",
        "apply",
        &format!("echo $$ >> {}; while :; do sleep 0.05; done", pids.display()),
    );
    let mut running = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("WM_JOB_ID", "0192-empty-options")
        .env("JOBENV_GRACE", "")
        .env("JOBENV_TIMEOUT", "")
        .env("JOBENV_LOCK_TIMEOUT", "")
        .env("JOBENV_LOG", "")
        .payload(&payload())
        .spawn();
    let stderr = StreamWatch::new(running.stderr.take().unwrap());
    // No timeout: the program runs until it is cancelled; the cancel shows the default grace.
    read_pids(&pids, 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    kill(Pid::from_raw(running.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut running, Duration::from_secs(20)).expect("jobenv ends after the cancel");
    // Nix's notice of its busy store database (other tests' nix-shells) is not an error of jobenv's.
    let stderr = without_nix_retry_notices(&String::from_utf8_lossy(&stderr.finish()));
    assert_eq!(status.code(), Some(143), "{stderr}");
    assert!(
        stderr.contains("jobenv: warning: received SIGTERM: stopping the program tree (grace 3s)"),
        "{stderr}"
    );
    assert!(!stderr.contains("error"), "{stderr}");
    assert_eq!(f.result_json()["status"], "canceled");
}

#[test]
fn debug_logging_never_shows_where_progress_events_go() {
    let receiver = Receiver::start(EVENTS_SECRET);
    let port = receiver
        .url()
        .split(':')
        .nth(2)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let mut f = fixture();
    f.node("EVENTS_URL", receiver.url())
        .secret("EVENTS_SECRET", EVENTS_SECRET);
    // A file the secrets directory skips: its line is the control that debug lines are printed.
    std::fs::write(f.secrets_dir().join("EVENTS_SECRET.bak"), "old").unwrap();
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_LOG", "debug")
        .payload(&payload())
        .expect_success()
        .expect_stderr_contains("jobenv: debug: skipping")
        .expect_nowhere("the events host", "127.0.0.1")
        .expect_nowhere("the events port", &port)
        .expect_nowhere("the events secret", EVENTS_SECRET)
        .run();
    assert_eq!(done.stdout, "done\n");
    // The HTTP client was at work while debug was on: the events arrived.
    assert!(
        receiver.wait_for(Duration::from_secs(10), |r| r
            .events
            .iter()
            .any(|e| e["status"] == "succeeded")),
        "{:?}",
        receiver.events()
    );
    // Positive control of the scan: without debug, the skipped file is not mentioned.
    let quiet = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload())
        .expect_success()
        .run();
    assert!(!quiet.stderr.contains("skipping"), "{quiet:?}");
}
