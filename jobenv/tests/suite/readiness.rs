//! A node that is not ready (a secret it declares is not rendered yet) refuses a job with exit
//! 75 and a line that says so, distinct from a configuration error (exit 2): a front-end may
//! retry it later. Nothing runs either way.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::json;

fn fixture() -> (Fixture, std::path::PathBuf) {
    let mut f = Fixture::new();
    let started = f.path().join("started");
    f.program(
        "web",
        "apply",
        &format!("echo \"$TF_VAR_token\" > {}", started.display()),
    );
    std::fs::write(f.path().join("required-secrets.json"), r#"["TF_VAR_token"]"#).unwrap();
    (f, started)
}

fn run(f: &Fixture) -> fediversity_testkit::job_run::JobRun {
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_REQUIRED_SECRETS", f.path().join("required-secrets.json"))
        .env("WM_JOB_ID", "ready-1")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
}

#[test]
fn a_missing_required_secret_is_a_node_that_is_not_ready() {
    let (f, started) = fixture();
    run(&f)
        .expect_code(75)
        .expect_stderr(
            "jobenv: error: node not ready: the secret TF_VAR_token is missing or empty (not rendered yet?)\n",
        )
        .run();
    assert!(!started.exists(), "the program ran");
    let result = f.result_json();
    assert_eq!(
        (result["status"].as_str(), result["exit_code"].as_i64()),
        (Some("rejected"), Some(75)),
        "{result}"
    );
}

#[test]
fn an_empty_required_secret_is_not_ready_either() {
    let (mut f, started) = fixture();
    std::fs::write(f.secrets_dir().join("TF_VAR_token"), "").unwrap();
    f.declare("UNUSED", None);
    run(&f)
        .expect_code(75)
        .expect_stderr_contains("the secret TF_VAR_token is missing or empty")
        .run();
    assert!(!started.exists());
}

#[test]
fn a_secrets_env_file_the_agent_has_not_rendered_yet_is_not_ready() {
    let (f, started) = fixture();
    let env_file = f.path().join("tf-token.env");
    run(&f)
        .env("JOBENV_SECRETS_ENV_FILES", &env_file)
        .expect_code(75)
        .expect_stderr_contains(format!(
            "node not ready: the secrets env file {} does not exist yet",
            env_file.display()
        ))
        .run();
    assert!(!started.exists());
    // Without a list of required secrets the same missing file is a configuration error.
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_SECRETS_ENV_FILES", &env_file)
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_code(2)
        .expect_stderr_contains(format!("secrets env file {} does not exist", env_file.display()))
        .run();
    // Positive control: once rendered, the job runs and gets the secret.
    std::fs::write(&env_file, "TF_VAR_token=rendered-token-1234\n").unwrap();
    run(&f)
        .env("JOBENV_SECRETS_ENV_FILES", &env_file)
        .expect_success()
        .expect_nowhere("the token", "rendered-token-1234")
        .run();
    assert_eq!(std::fs::read_to_string(&started).unwrap(), "rendered-token-1234\n");
}

#[test]
fn a_node_that_is_not_ready_is_said_first_and_the_payload_is_checked_once_it_is() {
    // The node's readiness comes first (reading the inputs); the payload is checked against a
    // node that has all its secrets, so its problems show on the first try after that.
    let (f, started) = fixture();
    let bad = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "UNDECLARED": "x"});
    run(&f)
        .payload(&bad)
        .expect_code(75)
        .expect_stderr_contains("node not ready")
        .run();
    std::fs::write(f.secrets_dir().join("TF_VAR_token"), "rendered-token-5678\n").unwrap();
    run(&f)
        .payload(&bad)
        .expect_code(2)
        .expect_stderr_contains("payload rejected: undeclared keys: UNDECLARED")
        .run();
    assert!(!started.exists());
}
