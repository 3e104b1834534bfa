//! One deploy per namespace: a second job for a busy namespace waits (`--lock-timeout`), a cancel
//! ends its wait; different namespaces run in parallel. That it fails at once naming the holder is
//! the spine's unit test (`jobenv/src/job/tests.rs`, the real lock held in-process), and against
//! real deploys `lifecycle.rs` and `front_end.rs`.

use std::process::Stdio;
use std::time::Duration;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::process::{Running, StreamWatch, read_pids};
use serde_json::json;

/// Programs log `start <ns>` and `end <ns>` to a shared file and block until `go-<ns>` exists.
fn fixture() -> Fixture {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    f.program(
        "web",
        "apply",
        &format!(
            "echo \"start $DEPLOYMENT_NAMESPACE\" >> {dir}/log; echo $$ >> {dir}/pids-$DEPLOYMENT_NAMESPACE; \
             while [ ! -e {dir}/go-$DEPLOYMENT_NAMESPACE ]; do sleep 0.02; done; echo \"end $DEPLOYMENT_NAMESPACE\" >> {dir}/log"
        ),
    );
    f
}

fn start(f: &Fixture, namespace: &str, args: &[&str]) -> Running {
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(args)
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": namespace}))
        .spawn()
}

fn log(f: &Fixture) -> Vec<String> {
    std::fs::read_to_string(f.path().join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn with_a_lock_timeout_the_second_job_waits_for_the_first() {
    let f = fixture();
    let mut first = start(&f, "shared", &[]);
    read_pids(&f.path().join("pids-shared"), 1, Duration::from_secs(20));
    let mut second = start(&f, "shared", &["--lock-timeout", "30"]);
    let mut second_err = StreamWatch::new(second.stderr.take().unwrap());
    // Positive control for "waits": after a while the second program still has not started.
    assert!(
        !second_err.wait_for(b"running web-apply", Duration::from_millis(500)),
        "the second job did not wait"
    );
    assert_eq!(log(&f), ["start shared"]);
    std::fs::write(f.path().join("go-shared"), "").unwrap();
    assert!(first.wait().unwrap().success());
    assert!(second.wait().unwrap().success());
    assert_eq!(log(&f), ["start shared", "end shared", "start shared", "end shared"]);
}

#[test]
fn different_namespaces_run_in_parallel() {
    let f = fixture();
    let mut a = start(&f, "team-a", &[]);
    let mut b = start(&f, "team-b", &[]);
    // Both programs are running at the same time: neither can have waited for the other.
    read_pids(&f.path().join("pids-team-a"), 1, Duration::from_secs(20));
    read_pids(&f.path().join("pids-team-b"), 1, Duration::from_secs(20));
    let mut started = log(&f);
    started.sort();
    assert_eq!(started, ["start team-a", "start team-b"]);
    std::fs::write(f.path().join("go-team-a"), "").unwrap();
    std::fs::write(f.path().join("go-team-b"), "").unwrap();
    assert!(a.wait().unwrap().success());
    assert!(b.wait().unwrap().success());
}

#[test]
fn a_cancel_while_waiting_for_the_lock_ends_the_job_as_canceled_without_starting_it() {
    let f = fixture();
    let mut first = start(&f, "shared", &[]);
    read_pids(&f.path().join("pids-shared"), 1, Duration::from_secs(20));
    let mut command = f.command(jobenv_bin!(), &["run", "--verb", "apply", "--lock-timeout", "60"]);
    command
        .env("WM_JOB_ID", "waiting-job")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut waiting = Running(command.spawn().unwrap());
    {
        use std::io::Write;
        waiting
            .stdin
            .take()
            .unwrap()
            .write_all(
                json!({"ATTRIBUTE": "web", "NAMESPACE": "shared"})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
    }
    let mut stderr = StreamWatch::new(waiting.stderr.take().unwrap());
    assert!(
        stderr.wait_for(b"waiting up to 60s", Duration::from_secs(20)),
        "{}",
        String::from_utf8_lossy(&stderr.seen)
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(waiting.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status =
        fediversity_testkit::process::wait_exit(&mut waiting, Duration::from_secs(5)).expect("the wait ends at once");
    assert_eq!(status.code(), Some(143));
    let result = f.result_json();
    assert_eq!(
        (result["status"].as_str(), result["exit_code"].as_i64()),
        (Some("canceled"), Some(143))
    );
    assert!(
        String::from_utf8_lossy(&stderr.finish())
            .contains("received SIGTERM: the job is canceled before its program started")
    );
    // The first job still runs alone: the cancelled one never started its program.
    assert_eq!(log(&f), ["start shared"]);
    std::fs::write(f.path().join("go-shared"), "").unwrap();
    assert!(first.wait().unwrap().success());
}
