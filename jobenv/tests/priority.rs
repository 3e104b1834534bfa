//! The three layers and their priority: node (deploy-env.json and secrets) over payload over
//! jobenv's own environment, with declared defaults filling what no layer set.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::json;

fn env_printer() -> Fixture {
    let mut f = Fixture::new();
    f.program("web", "apply", "/usr/bin/env");
    f
}

#[test]
fn node_wins_over_payload_which_wins_over_environment_and_defaults_fill_the_rest() {
    let mut f = env_printer();
    f.declare("KEY_A", None).declare("KEY_B", None).declare("KEY_C", Some("c-default")).declare("KEY_E", None);
    f.node("KEY_A", "from-node");
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("KEY_A", "from-environ")
        .env("KEY_B", "from-environ")
        .env("KEY_E", "from-environ")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "KEY_A": "from-payload", "KEY_B": "from-payload"}))
        .expect_success()
        .expect_stderr_contains("jobenv: warning: payload value for KEY_A ignored: the node sets it")
        .run();
    let env = done.env();
    assert_eq!(env["KEY_A"], "from-node");
    assert_eq!(env["KEY_B"], "from-payload");
    assert_eq!(env["KEY_C"], "c-default");
    assert_eq!(env["KEY_E"], "from-environ");
}

#[test]
fn a_secret_wins_over_the_payload() {
    let mut f = env_printer();
    f.declare("API_TOKEN", None).secret("API_TOKEN", "node-secret-value");
    f.program("web", "apply", r#"[ "$API_TOKEN" = node-secret-value ] && echo secret-from-node"#);
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "API_TOKEN": "job-value"}))
        .expect_stdout("secret-from-node\n")
        .run();
}

#[test]
fn payload_values_are_converted_to_text() {
    let mut f = env_printer();
    f.declare("HOSTS", None).declare("COUNT", None).declare("FLAG", None).declare("NOTHING", Some("kept-default"));
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "HOSTS": ["a", "b"], "COUNT": 3, "FLAG": true, "NOTHING": null}))
        .expect_success()
        .run();
    let env = done.env();
    assert_eq!(env["HOSTS"], r#"["a","b"]"#);
    assert_eq!(env["COUNT"], "3");
    assert_eq!(env["FLAG"], "true");
    assert_eq!(env["NOTHING"], "kept-default", "null means not given");
}
