//! The journal's formats: every entry carries its format's version; this jobenv reads every older
//! one as it was meant, and acts on no job id whose entry is newer than it reads (a rollback of
//! the node while jobs are journaled never runs a job twice, nor replays what it cannot read).

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::{Value, json};

const PAYLOAD: &str = r#"{"ATTRIBUTE": "web", "NAMESPACE": "ns"}"#;

/// A program that counts its runs, then exits 0.
fn job() -> Fixture {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    f.program("web", "apply", &format!("echo run >> {dir}/runs"));
    f
}

fn runs(f: &Fixture) -> usize {
    std::fs::read_to_string(f.path().join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// An entry as the jobenv before numbered formats wrote it (format 1: no `format` field).
fn format_1_entry(job_id: &str) -> Value {
    json!({
        "job_id": job_id, "attempt": 1, "verb": "apply", "attribute": "web", "namespace": "ns",
        "pid": 1, "pid_start": 1, "started_at": "2026-06-01T10:00:00.000Z", "status": "succeeded",
        "exit_code": 0, "finished_at": "2026-06-01T10:00:01.000Z"
    })
}

fn plant(f: &Fixture, job_id: &str, entry: &Value) -> std::path::PathBuf {
    let jobs = f.state_dir().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    let path = jobs.join(format!("{job_id}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(entry).unwrap()).unwrap();
    path
}

#[test]
fn an_entry_this_jobenv_writes_carries_format_2() {
    let f = job();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "new-1"])
        .stdin(PAYLOAD)
        .expect_code(0)
        .run();
    assert_eq!(runs(&f), 1);
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(f.state_dir().join("jobs/new-1.json")).unwrap()).unwrap();
    assert_eq!(on_disk["format"], 2);
    assert_eq!(f.journal_entry(jobenv_bin!(), "new-1")["format"], 2);
}

#[test]
fn a_format_1_entry_is_read_as_it_was_meant_a_finished_job_replayed() {
    let f = job();
    plant(&f, "old-1", &format_1_entry("old-1"));
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("WM_JOB_ID", "old-1")
        .stdin(PAYLOAD)
        .expect_code(0)
        .expect_stderr_contains("jobenv: job old-1 already ended (succeeded, exit code 0, attempt 1, at ")
        .run();
    assert_eq!(runs(&f), 0, "the finished job ran again");
    assert_eq!(f.result_json()["replayed"], true);
    assert_eq!(f.journal_entry(jobenv_bin!(), "old-1")["format"], 1);
}

#[test]
fn no_run_replay_or_recovery_acts_on_an_entry_of_a_newer_format() {
    let f = job();
    // A newer jobenv's entry: its fields may mean something this one cannot know.
    let mut newer = format_1_entry("new-3");
    newer["format"] = json!(3);
    newer["status"] = json!("running");
    newer["exit_code"] = Value::Null;
    newer["lease"] = json!({"epoch": 7});
    let path = plant(&f, "new-3", &newer);
    let planted = std::fs::read(&path).unwrap();

    let refused = "jobenv: error: node not ready: the journal entry of job new-3 has format 3, newer than this jobenv's 2: nothing acts on the job until a jobenv that reads format 3 runs it (upgrade jobenv)";
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "new-3"])
        .stdin(PAYLOAD)
        .expect_code(75)
        .expect_stderr_contains(refused)
        .run();
    assert_eq!(runs(&f), 0, "the job ran although its entry could not be read");

    let status = f.jobenv(jobenv_bin!()).args(["status", "new-3"]).run();
    assert_ne!(
        status.code,
        Some(0),
        "status printed an entry it cannot read: {status:?}"
    );
    assert!(status.stderr.contains("has format 3"), "{status:?}");

    let recover = f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    assert!(
        recover.stderr.contains("has format 3"),
        "recover skips it and says why: {recover:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), planted, "the newer entry was changed");

    // Positive control: the same job id with an entry of this format is acted on.
    plant(&f, "new-3", &format_1_entry("new-3"));
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("WM_JOB_ID", "new-3")
        .stdin(PAYLOAD)
        .expect_code(0)
        .run();
    assert_eq!(f.result_json()["replayed"], true);
}
