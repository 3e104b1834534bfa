//! jobenv exits with the program's status: its own code, or 128+N for death by signal N; and
//! as a Windmill job it leaves the matching result.json in the job directory.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::{Value, json};

fn payload() -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})
}

/// Runs a Windmill job whose program is `body`, expecting `code`; its result.json.
fn exit_with(body: &str, code: Option<i32>) -> Value {
    let mut f = Fixture::new();
    f.program("web", "apply", body);
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("WM_JOB_ID", "0192-job")
        .payload(&payload())
        .expect_code(code)
        .run();
    f.result_json()
}

#[test]
fn success_is_zero_and_succeeded() {
    let result = exit_with("exit 0", Some(0));
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["verb"], "apply");
    assert_eq!(result["attribute"], "web");
    assert_eq!(result["namespace"], "ns");
    assert_eq!(result["job_id"], "0192-job");
    assert!(result["duration_ms"].is_u64());
}

#[test]
fn the_programs_own_code_is_propagated() {
    let result = exit_with("echo failing >&2; exit 7", Some(7));
    assert_eq!(result["status"], "failed");
    assert_eq!(result["exit_code"], 7);
}

#[test]
fn death_by_signal_is_128_plus_the_signal() {
    let result = exit_with("kill -KILL $$", Some(137));
    assert_eq!(result["status"], "failed");
    exit_with("kill -SEGV $$", Some(139));
}

#[test]
fn without_a_windmill_job_no_result_file_is_written() {
    let mut f = Fixture::new();
    f.program("web", "apply", "exit 0");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload())
        .expect_success()
        .run();
    assert!(!f.job_dir().join("result.json").exists());
}

#[test]
fn the_job_log_names_the_program_and_its_outcome() {
    let mut f = Fixture::new();
    f.program("web", "apply", "exit 3");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload())
        .expect_code(3)
        .expect_stderr(format!("jobenv: running web-apply in namespace ns (system {}, verb apply)\njobenv: web-apply failed with exit code 3 after [..]s\n", system()))
        .run();
}

fn system() -> String {
    format!("{}-linux", std::env::consts::ARCH)
}
