//! jobenv exits with the program's status: its own code, or 128+N for death by signal N; and
//! as a Windmill job it leaves the matching result.json in the job directory.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, run_with_payload};
use serde_json::{Value, json};

fn exit_with(body: &str) -> (Option<i32>, Value) {
    let mut f = Fixture::new();
    f.program("web", "apply", body);
    let mut command = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    command.env("WM_JOB_ID", "0192-job");
    let out = run_with_payload(command, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    let result = serde_json::from_slice(&std::fs::read(f.job_dir().join("result.json")).expect("result.json")).unwrap();
    (out.status.code(), result)
}

#[test]
fn success_is_zero_and_succeeded() {
    let (code, result) = exit_with("exit 0");
    assert_eq!(code, Some(0));
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
    let (code, result) = exit_with("echo failing >&2; exit 7");
    assert_eq!(code, Some(7));
    assert_eq!(result["status"], "failed");
    assert_eq!(result["exit_code"], 7);
}

#[test]
fn death_by_signal_is_128_plus_the_signal() {
    let (code, result) = exit_with("kill -KILL $$");
    assert_eq!(code, Some(137));
    assert_eq!(result["status"], "failed");
    let (code, _) = exit_with("kill -SEGV $$");
    assert_eq!(code, Some(139));
}

#[test]
fn without_a_windmill_job_no_result_file_is_written() {
    let mut f = Fixture::new();
    f.program("web", "apply", "exit 0");
    let out = f.run(jobenv_bin!(), &["run", "--verb", "apply"], &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    assert!(out.status.success());
    assert!(!f.job_dir().join("result.json").exists());
}

#[test]
fn the_job_log_names_the_program_and_its_outcome() {
    let mut f = Fixture::new();
    f.program("web", "apply", "exit 3");
    let out = f.run(jobenv_bin!(), &["run", "--verb", "apply"], &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines[0], format!("jobenv: running web-apply in namespace ns (system {}, verb apply)", system()));
    assert!(lines[1].starts_with("jobenv: web-apply failed with exit code 3 after "), "{stderr}");
}

fn system() -> String {
    format!("{}-linux", std::env::consts::ARCH)
}
