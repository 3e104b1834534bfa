//! The job journal: a job's terminal result is never lost or executed twice by accident.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, run_with_payload};
use fediversity_testkit::process::{Running, is_alive, kill_all, read_pids, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const PAYLOAD: &str = r#"{"ATTRIBUTE": "web", "NAMESPACE": "ns"}"#;

/// A program that counts its runs in `runs`, then blocks until `go` exists, then exits 3.
fn counting_job() -> Fixture {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    f.program(
        "web",
        "apply",
        &format!("echo run >> {dir}/runs; echo $$ > {dir}/program.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done; exit 3"),
    );
    f
}

fn runs(f: &Fixture) -> usize {
    std::fs::read_to_string(f.path().join("runs")).unwrap_or_default().lines().count()
}

/// Starts the job as a Windmill job process would be: leading its own process group.
fn start(f: &Fixture, job_id: &str) -> Running {
    let mut run = f.jobenv(jobenv_bin!()).verb("apply").args(["--job-id", job_id]).stdin(PAYLOAD);
    run.command().process_group(0);
    run.spawn()
}

fn run(f: &Fixture, args: &[&str]) -> std::process::Output {
    run_with_payload(f.command(jobenv_bin!(), args), &serde_json::from_str(PAYLOAD).unwrap())
}

fn status(f: &Fixture, job_id: &str) -> Value {
    f.journal_entry(jobenv_bin!(), job_id)
}

#[test]
fn a_finished_job_is_replayed_and_never_run_again() {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    let mut command = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    command.env("WM_JOB_ID", "job-1");
    let first = run_with_payload(command, &serde_json::from_str(PAYLOAD).unwrap());
    assert_eq!(first.status.code(), Some(3));
    assert_eq!(runs(&f), 1);

    let mut command = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    command.env("WM_JOB_ID", "job-1");
    let again = run_with_payload(command, &serde_json::from_str(PAYLOAD).unwrap());
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(3), "the recorded exit code: {stderr}");
    assert_eq!(runs(&f), 1, "the program ran again");
    assert_eq!(stderr.lines().count(), 1, "one line says so: {stderr}");
    assert!(stderr.starts_with("jobenv: job job-1 already ended (failed, exit code 3, attempt 1, at "), "{stderr}");
    let result: Value = serde_json::from_slice(&std::fs::read(f.job_dir().join("result.json")).unwrap()).unwrap();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["exit_code"], 3);
    assert_eq!(result["replayed"], true);
}

#[test]
fn a_job_killed_mid_run_is_recorded_interrupted_and_runs_again_as_attempt_2() {
    let f = counting_job();
    let mut jobenv = start(&f, "job-2");
    let program = read_pids(&f.path().join("program.pid"), 1, Duration::from_secs(20));
    assert_eq!(status(&f, "job-2")["status"], "running");
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    jobenv.wait().unwrap();
    assert!(wait_until(Duration::from_secs(2), || !is_alive(program[0])), "the program died with jobenv");

    std::fs::write(f.path().join("go"), "").unwrap();
    // The program's last `sleep` may outlive it for a moment, holding the namespace lock.
    let out = run(&f, &["run", "--verb", "apply", "--job-id", "job-2", "--lock-timeout", "5"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(runs(&f), 2, "the interrupted job ran again");
    assert!(stderr.contains("jobenv: warning: job job-2: attempt 1 was interrupted; running it again as attempt 2"), "{stderr}");
    let entry = status(&f, "job-2");
    assert_eq!(entry["attempt"], 2);
    assert_eq!(entry["status"], "failed");
    assert_eq!(entry["exit_code"], 3);
    assert_eq!(entry["earlier"][0]["attempt"], 1);
    assert_eq!(entry["earlier"][0]["status"], "failed");
    assert_eq!(entry["earlier"][0]["reason"], "interrupted");
}

#[test]
fn the_same_job_id_while_it_runs_is_refused() {
    let f = counting_job();
    let mut first = start(&f, "job-3");
    read_pids(&f.path().join("program.pid"), 1, Duration::from_secs(20));
    let out = run(&f, &["run", "--verb", "apply", "--job-id", "job-3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains(&format!("jobenv: error: job job-3 is already running (job job-3, jobenv pid {})", first.id())), "{stderr}");
    assert_eq!(runs(&f), 1);
    std::fs::write(f.path().join("go"), "").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(3));
}

#[test]
fn recover_marks_jobs_whose_jobenv_died_and_leaves_live_ones_alone() {
    let f = counting_job();
    // A second program that blocks on its own file, for the job that stays alive.
    let mut dead = start(&f, "dead-job");
    read_pids(&f.path().join("program.pid"), 1, Duration::from_secs(20));
    kill(Pid::from_raw(dead.id() as i32), Signal::SIGKILL).unwrap();
    dead.wait().unwrap();
    std::fs::remove_file(f.path().join("program.pid")).unwrap();

    let mut other = Fixture::new();
    let dir = other.path().display().to_string();
    other.program("web", "apply", &format!("echo $$ > {dir}/program.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"));
    let mut command = other.command(jobenv_bin!(), &["run", "--verb", "apply", "--job-id", "live-job"]);
    command.env("JOBENV_STATE_DIR", f.state_dir()).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut live = Running(command.spawn().unwrap());
    {
        use std::io::Write;
        live.stdin.take().unwrap().write_all(br#"{"ATTRIBUTE": "web", "NAMESPACE": "other"}"#).unwrap();
    }
    read_pids(&other.path().join("program.pid"), 1, Duration::from_secs(20));

    let out = f.command(jobenv_bin!(), &["recover"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recovered: Value = serde_json::from_slice(&out.stdout).unwrap();
    let recovered = recovered.as_array().unwrap();
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!(recovered[0]["job_id"], "dead-job");
    assert_eq!(recovered[0]["status"], "failed");
    assert_eq!(recovered[0]["reason"], "interrupted");
    assert_eq!(status(&f, "live-job")["status"], "running", "a live job is left alone");

    let again = f.command(jobenv_bin!(), &["recover"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "[]");

    std::fs::write(other.path().join("go"), "").unwrap();
    assert!(live.wait().unwrap().success());
    let all = f.command(jobenv_bin!(), &["status"]).output().unwrap();
    let all: Value = serde_json::from_slice(&all.stdout).unwrap();
    let ids: Vec<&str> = all.as_array().unwrap().iter().map(|e| e["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["dead-job", "live-job"]);
}

#[test]
fn entries_older_than_the_retention_are_pruned() {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    run(&f, &["run", "--verb", "apply", "--job-id", "old-job"]);
    run(&f, &["run", "--verb", "apply", "--job-id", "new-job"]);
    let path = f.state_dir().join("jobs/old-job.json");
    let mut entry: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    entry["finished_at"] = json!("2026-01-01T00:00:00.000Z");
    std::fs::write(&path, entry.to_string()).unwrap();
    let out = f.command(jobenv_bin!(), &["recover", "--retain-days", "30"]).output().unwrap();
    assert!(out.status.success());
    assert!(!path.exists(), "the old entry was kept");
    assert!(f.state_dir().join("jobs/new-job.json").exists(), "a recent entry was pruned");
}

#[test]
fn a_read_only_journal_runs_nothing() {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    // Positive control: the same job runs with a writable journal.
    assert_eq!(run(&f, &["run", "--verb", "apply", "--job-id", "rw-job"]).status.code(), Some(3));
    assert_eq!(runs(&f), 1);
    // Root ignores file modes: a read-only bind mount in a private mount namespace is what
    // really makes the directory unwritable.
    let state = f.state_dir().display().to_string();
    let mut command = f.command(std::path::Path::new("/usr/bin/unshare"), &[
        "-m",
        "sh",
        "-c",
        &format!("mount --bind -o ro {state} {state} && exec \"$0\" run --verb apply --job-id ro-job"),
        jobenv_bin!().to_str().unwrap(),
    ]);
    command.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    let out = run_with_payload(command, &serde_json::from_str(PAYLOAD).unwrap());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("jobenv: error: the journal in {state} cannot be used: ")), "{stderr}");
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert_eq!(runs(&f), 1, "the program ran without a journal");
}

#[test]
fn an_invalid_job_id_is_refused() {
    let f = counting_job();
    let out = run(&f, &["run", "--verb", "apply", "--job-id", "../../etc/x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid job id \"../../etc/x\""));
    assert_eq!(runs(&f), 0);
}

#[test]
fn orphans_of_the_program_are_reaped_while_it_runs() {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    // The subshell exits at once: its `sleep` is orphaned and handed to jobenv, the subreaper.
    f.program("web", "apply", &format!("(sleep 0.3 & echo $! > {dir}/orphan.pid); while [ ! -e {dir}/go ]; do sleep 0.02; done"));
    let mut jobenv = start(&f, "reap-job");
    let orphan = read_pids(&f.path().join("orphan.pid"), 1, Duration::from_secs(20))[0];
    // Positive control: the orphan really is jobenv's child now.
    assert!(wait_until(Duration::from_secs(2), || fediversity_testkit::process::ppid(orphan) == Some(jobenv.id() as i32)), "orphan not handed to jobenv");
    // Once it exits, jobenv reaps it: no zombie stays behind under jobenv.
    assert!(wait_until(Duration::from_secs(3), || std::fs::metadata(format!("/proc/{orphan}")).is_err()), "a zombie stayed under jobenv");
    std::fs::write(f.path().join("go"), "").unwrap();
    assert!(jobenv.wait().unwrap().success());
    kill_all(&[orphan]);
}
