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
        &format!(
            "echo run >> {dir}/runs; echo $$ > {dir}/program.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done; exit 3"
        ),
    );
    f
}

fn runs(f: &Fixture) -> usize {
    std::fs::read_to_string(f.path().join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Starts the job as a Windmill job process would be: leading its own process group.
fn start(f: &Fixture, job_id: &str) -> Running {
    let mut run = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", job_id])
        .stdin(PAYLOAD);
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
fn a_job_killed_mid_run_is_recorded_interrupted_and_runs_again_as_attempt_2() {
    let f = counting_job();
    let mut jobenv = start(&f, "job-2");
    let program = read_pids(&f.path().join("program.pid"), 1, Duration::from_secs(20));
    assert_eq!(status(&f, "job-2")["status"], "running");
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    jobenv.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || !is_alive(program[0])),
        "the program died with jobenv"
    );

    std::fs::write(f.path().join("go"), "").unwrap();
    // The program's last `sleep` may outlive it for a moment, holding the namespace lock.
    let out = run(
        &f,
        &["run", "--verb", "apply", "--job-id", "job-2", "--lock-timeout", "5"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(runs(&f), 2, "the interrupted job ran again");
    assert!(
        stderr.contains("jobenv: warning: job job-2: attempt 1 was interrupted; running it again as attempt 2"),
        "{stderr}"
    );
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
    assert!(
        stderr.contains(&format!(
            "jobenv: error: job job-3 is already running (job job-3, jobenv pid {})",
            first.id()
        )),
        "{stderr}"
    );
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
    other.program(
        "web",
        "apply",
        &format!("echo $$ > {dir}/program.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"),
    );
    let mut command = other.command(jobenv_bin!(), &["run", "--verb", "apply", "--job-id", "live-job"]);
    command
        .env("JOBENV_STATE_DIR", f.state_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut live = Running(command.spawn().unwrap());
    {
        use std::io::Write;
        live.stdin
            .take()
            .unwrap()
            .write_all(br#"{"ATTRIBUTE": "web", "NAMESPACE": "other"}"#)
            .unwrap();
    }
    read_pids(&other.path().join("program.pid"), 1, Duration::from_secs(20));

    let out = f.command(jobenv_bin!(), &["recover"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recovered: Value = serde_json::from_slice(&out.stdout).unwrap();
    fediversity_testkit::schemas::Contract::JournalEntry.check_each(&recovered);
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
    fediversity_testkit::schemas::Contract::JournalEntry.check_each(&all);
    let ids: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["dead-job", "live-job"]);
}

/// Two jobs ran: `new-job` now, and `old-job`, whose entry says it ended on 2026-01-01 and whose
/// file is as old (as the file of an entry that ended then is). Returns old-job's entry file.
fn an_old_and_a_new_job() -> (Fixture, std::path::PathBuf) {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    run(&f, &["run", "--verb", "apply", "--job-id", "old-job"]);
    run(&f, &["run", "--verb", "apply", "--job-id", "new-job"]);
    let path = f.state_dir().join("jobs/old-job.json");
    let mut entry: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    entry["finished_at"] = json!("2026-01-01T00:00:00.000Z");
    std::fs::write(&path, entry.to_string()).unwrap();
    let ended = humantime::parse_rfc3339("2026-01-01T00:00:00.000Z").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(ended)
        .unwrap();
    (f, path)
}

#[test]
fn entries_older_than_the_retention_are_pruned() {
    let (f, path) = an_old_and_a_new_job();
    // A run never prunes: its cost must not grow with the journal.
    run(&f, &["run", "--verb", "apply", "--job-id", "third-job"]);
    assert!(path.exists(), "a run pruned the journal");
    let out = f
        .command(jobenv_bin!(), &["recover", "--retain-days", "30"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!path.exists(), "the old entry was kept");
    assert!(
        f.state_dir().join("jobs/new-job.json").exists(),
        "a recent entry was pruned"
    );
}

#[test]
fn prune_deletes_what_finished_before_the_retention_and_says_how_many() {
    let (f, path) = an_old_and_a_new_job();
    f.jobenv(jobenv_bin!())
        .args(["prune", "--retain-days", "30"])
        .expect_success()
        .expect_stdout("{\"pruned\":1,\"shells_pruned\":0}\n")
        .run();
    assert!(!path.exists(), "the old entry was kept");
    assert!(
        f.state_dir().join("jobs/new-job.json").exists(),
        "a recent entry was pruned"
    );
    f.jobenv(jobenv_bin!())
        .args(["prune", "--retain-days", "30"])
        .expect_success()
        .expect_stdout("{\"pruned\":0,\"shells_pruned\":0}\n")
        .run();
    f.jobenv(jobenv_bin!())
        .args(["prune", "--retain-days", "0"])
        .expect_code(2)
        .expect_stderr_contains("--retain-days")
        .run();
}

#[test]
fn a_read_only_journal_runs_nothing() {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    // Positive control: the same job runs with a writable journal.
    assert_eq!(
        run(&f, &["run", "--verb", "apply", "--job-id", "rw-job"]).status.code(),
        Some(3)
    );
    assert_eq!(runs(&f), 1);
    // Root ignores file modes: a read-only bind mount in a private mount namespace is what
    // really makes the directory unwritable.
    let state = f.state_dir().display().to_string();
    let mut command = f.command(
        std::path::Path::new("/usr/bin/unshare"),
        &[
            "-m",
            "sh",
            "-c",
            &format!("mount --bind -o ro {state} {state} && exec \"$0\" run --verb apply --job-id ro-job"),
            jobenv_bin!().to_str().unwrap(),
        ],
    );
    command.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
    let out = run_with_payload(command, &serde_json::from_str(PAYLOAD).unwrap());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("jobenv: error: the journal in {state} cannot be used: ")),
        "{stderr}"
    );
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
    f.program(
        "web",
        "apply",
        &format!("(sleep 0.3 & echo $! > {dir}/orphan.pid); while [ ! -e {dir}/go ]; do sleep 0.02; done"),
    );
    let mut jobenv = start(&f, "reap-job");
    let orphan = read_pids(&f.path().join("orphan.pid"), 1, Duration::from_secs(20))[0];
    // Positive control: the orphan really is jobenv's child now.
    assert!(
        wait_until(Duration::from_secs(2), || fediversity_testkit::process::ppid(orphan)
            == Some(jobenv.id() as i32)),
        "orphan not handed to jobenv"
    );
    // Once it exits, jobenv reaps it: no zombie stays behind under jobenv.
    assert!(
        wait_until(Duration::from_secs(3), || std::fs::metadata(format!("/proc/{orphan}"))
            .is_err()),
        "a zombie stayed under jobenv"
    );
    std::fs::write(f.path().join("go"), "").unwrap();
    assert!(jobenv.wait().unwrap().success());
    kill_all(&[orphan]);
}

#[test]
fn a_job_id_names_one_request() {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    assert_eq!(
        run(&f, &["run", "--verb", "apply", "--job-id", "one-request"])
            .status
            .code(),
        Some(3)
    );
    // The same id for another verb or another namespace is another request: refused, never
    // answered with the first one's result.
    for (verb, payload) in [
        ("destroy", PAYLOAD),
        ("apply", r#"{"ATTRIBUTE": "web", "NAMESPACE": "other"}"#),
    ] {
        f.jobenv(jobenv_bin!())
            .verb(verb)
            .args(["--job-id", "one-request"])
            .stdin(payload)
            .expect_code(2)
            .expect_stderr(format!(
                "jobenv: error: job one-request was already run for apply of web in namespace ns; this run asks for {verb} of web in namespace {}: a job id names one request\n",
                if verb == "destroy" { "ns" } else { "other" }
            ))
            .run();
    }
    // Positive control: the same request is replayed.
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "one-request"])
        .stdin(PAYLOAD)
        .expect_code(3)
        .expect_stderr(
            "jobenv: job one-request already ended (failed, exit code 3, attempt 1, at [..]Z): replaying the recorded result, not running it again\n",
        )
        .run();
    assert_eq!(runs(&f), 1);
}

#[test]
fn a_retention_of_zero_days_is_refused() {
    let f = counting_job();
    f.jobenv(jobenv_bin!())
        .args(["recover", "--retain-days", "0"])
        .expect_code(2)
        .expect_stderr_contains("--retain-days")
        .run();
    assert_eq!(runs(&f), 0);
    // Positive control: one day is accepted, and the entry of the job that just ran stays.
    std::fs::write(f.path().join("go"), "").unwrap();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "r1"])
        .stdin(PAYLOAD)
        .expect_code(3)
        .run();
    f.jobenv(jobenv_bin!())
        .args(["recover", "--retain-days", "1"])
        .expect_success()
        .run();
    assert!(f.state_dir().join("jobs/r1.json").exists());
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "r1"])
        .stdin(PAYLOAD)
        .expect_code(3)
        .run();
    assert_eq!(runs(&f), 1, "the job ran again");
}

#[test]
fn pruning_never_acts_on_a_copied_or_forged_entry() {
    let f = counting_job();
    std::fs::write(f.path().join("go"), "").unwrap();
    run(&f, &["run", "--verb", "apply", "--job-id", "real-job"]);
    let jobs = f.state_dir().join("jobs");
    let mut old: Value = serde_json::from_slice(&std::fs::read(jobs.join("real-job.json")).unwrap()).unwrap();
    old["finished_at"] = json!("2026-01-01T00:00:00.000Z");
    // A copy under another name still says `real-job`; a forged one names a file outside.
    std::fs::write(jobs.join("copy.json"), old.to_string()).unwrap();
    let outside = f.path().join("outside.json");
    std::fs::write(&outside, "{}").unwrap();
    old["job_id"] = json!("../../outside");
    std::fs::write(jobs.join("forged.json"), old.to_string()).unwrap();
    let done = f
        .jobenv(jobenv_bin!())
        .args(["recover", "--retain-days", "1"])
        .expect_success()
        .run();
    assert!(
        jobs.join("real-job.json").exists(),
        "a copied entry deleted the real one"
    );
    assert!(
        outside.exists(),
        "a forged entry deleted a file outside the state directory"
    );
    assert!(
        done.stderr.contains(&format!(
            "{} is corrupt: its job_id is not its file name",
            jobs.join("copy.json").display()
        )),
        "{}",
        done.stderr
    );
    // The real job is still a result: replayed, not run again.
    run(&f, &["run", "--verb", "apply", "--job-id", "real-job"]);
    assert_eq!(runs(&f), 1);
}

#[test]
fn a_corrupt_entry_is_refused_naming_its_file() {
    let f = counting_job();
    std::fs::create_dir_all(f.state_dir().join("jobs")).unwrap();
    std::fs::write(f.state_dir().join("jobs/broken.json"), "{not json").unwrap();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "broken"])
        .stdin(PAYLOAD)
        .expect_code(2)
        .expect_stderr_contains(format!(
            "{} is corrupt",
            f.state_dir().join("jobs/broken.json").display()
        ))
        .run();
    assert_eq!(runs(&f), 0);
}

/// Without a cgroup (the /proc walk): the tree lock on fd 4 is what keeps the namespace locked.
/// With one, the next run stops the orphan first (`containment.rs`).
#[test]
fn after_sigkill_of_a_subprocess_jobenv_without_a_cgroup_its_namespace_stays_locked_while_the_program_tree_lives() {
    let mut f = Fixture::with_containment("proc");
    let dir = f.path().display().to_string();
    // The program leaves a grandchild that the parent-death signal does not reach.
    f.program(
        "web",
        "apply",
        &format!("sleep 300 & echo $! > {dir}/orphan.pid; echo $$ > {dir}/program.pid; wait"),
    );
    let mut jobenv = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "first"])
        .stdin(PAYLOAD)
        .spawn();
    let orphan = read_pids(&f.path().join("orphan.pid"), 1, Duration::from_secs(20));
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    jobenv.wait().unwrap();
    assert!(
        is_alive(orphan[0]),
        "the grandchild should outlive a SIGKILLed jobenv outside a job runner"
    );
    // Another deploy of the namespace is refused while the orphan runs...
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "second"])
        .stdin(PAYLOAD)
        .run();
    let alive = is_alive(orphan[0]);
    kill_all(&orphan);
    assert_eq!(done.code, Some(2), "{done:?}");
    assert!(alive, "the orphan was gone before the check");
    assert!(done.stderr.contains("namespace ns is locked by another deploy: the program tree of an earlier deploy, whose jobenv is gone, still runs"), "{done:?}");
    // ...and runs once it is gone (positive control).
    assert!(wait_until(Duration::from_secs(2), || !is_alive(orphan[0])));
    std::fs::write(f.path().join("program.pid"), "").unwrap();
    f.program("web", "apply", "exit 0");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "third"])
        .stdin(PAYLOAD)
        .expect_success()
        .run();
}

#[test]
fn an_end_that_cannot_be_recorded_is_jobenvs_failure_and_a_rerun_reports_it_unknown() {
    let mut f = Fixture::new();
    let (state, dir) = (f.state_dir().display().to_string(), f.path().display().to_string());
    // The program fills the state directory's filesystem, then exits 0: jobenv's end cannot be
    // written as a new file. Both runs happen in one private mount namespace whose state
    // directory is a small tmpfs (root's alone: a tmpfs is everyone's to write, mode 1777, unless
    // mounted with a mode, and jobenv as root refuses that); the entry and the first result are
    // copied out for the test.
    f.program(
        "web",
        "apply",
        &format!("echo run >> {dir}/runs; dd if=/dev/zero of={state}/fill bs=4k 2>/dev/null; exit 0"),
    );
    std::fs::write(f.path().join("payload.json"), PAYLOAD).unwrap();
    let run = format!("\"$0\" run --verb apply --job-id full-disk --payload {dir}/payload.json");
    let script = format!(
        "mount -t tmpfs -o size=256k,mode=0755 tmpfs {state} || exit 99; {run}; echo first=$? >&2; cp result.json {dir}/first-result.json; \
         rm -f {state}/fill; cp {state}/jobs/full-disk.json {dir}/entry.json; {run}; echo second=$? >&2"
    );
    let mut command = f.command(
        std::path::Path::new("/usr/bin/unshare"),
        &["-m", "sh", "-c", &script, jobenv_bin!().to_str().unwrap()],
    );
    command
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("WM_JOB_ID", "full-disk");
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(runs_in(&f), 1, "positive control: the program ran, once\n{stderr}");
    assert!(stderr.contains("first=125"), "{stderr}");
    assert!(
        stderr.contains("the end of job full-disk could not be recorded in the journal"),
        "{stderr}"
    );
    assert!(
        stderr.contains("the program ended succeeded with exit code 0; the result is unknown"),
        "{stderr}"
    );
    let first: Value = serde_json::from_slice(&std::fs::read(f.path().join("first-result.json")).unwrap()).unwrap();
    fediversity_testkit::schemas::Contract::Result.check(&first);
    assert_eq!(
        (first["status"].as_str(), first["exit_code"].as_i64()),
        (Some("failed"), Some(125)),
        "{first}"
    );
    let entry: Value = serde_json::from_slice(&std::fs::read(f.path().join("entry.json")).unwrap()).unwrap();
    fediversity_testkit::schemas::Contract::JournalEntry.check(&entry);
    assert_eq!(
        (entry["reason"].as_str(), entry["program_exit_code"].as_i64()),
        (Some("result_unknown"), Some(0)),
        "{entry}"
    );
    // The rerun neither runs the job again nor reports a success that was never recorded.
    assert!(stderr.contains("second=125"), "{stderr}");
    let replayed = f.result_json();
    assert_eq!(replayed["replayed"], true, "{replayed}");
    assert!(
        replayed["errors"][0]
            .as_str()
            .unwrap()
            .contains("the result is unknown"),
        "{replayed}"
    );
}

fn runs_in(f: &Fixture) -> usize {
    std::fs::read_to_string(f.path().join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Operators run jobenv by hand as root on a node whose worker runs as its own user: nothing
/// jobenv leaves in the state directory may then belong to root, or the worker's user would fail
/// every later job of that namespace or job id (jobenv becomes that user first: what it makes is
/// that user's). `status` creates nothing at all.
#[test]
fn jobenv_run_by_hand_as_root_leaves_nothing_the_workers_user_cannot_use() {
    use fediversity_testkit::nix_fixture::WORKER_UID;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;

    let mut f = Fixture::new();
    f.program("web", "apply", "exit 0");
    f.write();
    f.hand_to(WORKER_UID);
    let state = f.state_dir();
    // As root: `status` on a node where no job ran yet makes no journal...
    let done = f.jobenv(jobenv_bin!()).args(["status"]).expect_success().run();
    assert_eq!(done.stdout, "[]\n");
    f.jobenv(jobenv_bin!())
        .args(["status", "by-hand-1"])
        .expect_code(1)
        .run();
    assert_eq!(
        std::fs::read_dir(&state).unwrap().count(),
        0,
        "status created something"
    );
    // ...and a run and a recover leave only files of the worker's user (the run as that user:
    // the stand-in nix-shell, as nix-shell cannot build as that user on a single-user store).
    let stand_in = f.nix_shell_stand_in();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "by-hand-1", "--nix-shell", stand_in.to_str().unwrap()])
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run();
    f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    let created: Vec<(String, u32, u32)> = walkdir::WalkDir::new(&state)
        .min_depth(1)
        .into_iter()
        .map(|entry| {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            (
                entry.path().strip_prefix(&state).unwrap().display().to_string(),
                meta.uid(),
                meta.gid(),
            )
        })
        .collect();
    // Not vacuous: the entry and both kinds of lock are there.
    for expected in [
        "jobs/by-hand-1.json",
        "locks/job-by-hand-1.lock",
        "locks/namespace-ns.lock",
        "locks/namespace-ns.tree.lock",
    ] {
        assert!(
            created.iter().any(|(path, ..)| path == expected),
            "{expected} not in {created:?}"
        );
    }
    let foreign: Vec<_> = created
        .iter()
        .filter(|(_, uid, gid)| (*uid, *gid) != (WORKER_UID, WORKER_UID))
        .collect();
    assert!(foreign.is_empty(), "not the worker's: {foreign:?}");
    // The worker's user goes on: the same namespace deploys, the same job id replays.
    for (job_id, code) in [("by-hand-2", 0), ("by-hand-1", 0)] {
        let mut run =
            f.jobenv(jobenv_bin!())
                .verb("apply")
                .args(["--job-id", job_id, "--nix-shell", stand_in.to_str().unwrap()]);
        run.command().uid(WORKER_UID).gid(WORKER_UID);
        f.hand_to(WORKER_UID);
        run.payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
            .expect_code(code)
            .run();
    }
}
