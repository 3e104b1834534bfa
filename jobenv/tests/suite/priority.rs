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
    f.declare("KEY_A", None)
        .declare("KEY_B", None)
        .declare("KEY_C", Some("c-default"))
        .declare("KEY_E", None);
    f.node("KEY_A", "from-node");
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("KEY_A", "from-environ")
        .env("KEY_B", "from-environ")
        .env("KEY_E", "from-environ")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "KEY_A": "from-payload", "KEY_B": "from-payload"}))
        .expect_success()
        .expect_stderr(
            "jobenv: warning: payload value for KEY_A ignored: the node sets it
jobenv: running web-apply in namespace ns (system [..]-linux, verb apply)
jobenv: web-apply succeeded with exit code 0 after [..]s
",
        )
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
    f.program(
        "web",
        "apply",
        r#"[ "$API_TOKEN" = node-secret-value ] && echo secret-from-node"#,
    );
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "API_TOKEN": "job-value"}))
        .expect_stdout("secret-from-node\n")
        .run();
}

#[test]
fn payload_values_are_converted_to_text() {
    let mut f = env_printer();
    f.declare("HOSTS", None)
        .declare("COUNT", None)
        .declare("FLAG", None)
        .declare("NOTHING", Some("kept-default"));
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

#[test]
fn numbers_arrive_as_their_json_text_never_through_a_float() {
    let mut f = env_printer();
    for key in ["BIG", "EXP", "NEG_ZERO", "FRACTION", "HOSTS", "CONFIG", "HUGE", "LONG"] {
        f.declare(key, None);
    }
    // Written as raw text: `json!` would already have turned these into floats.
    let payload = r#"{"ATTRIBUTE": "web", "NAMESPACE": "ns", "BIG": 12345678901234567890123, "EXP": 1e2,
        "NEG_ZERO": -0, "FRACTION": 0.10000000000000000555, "HOSTS": [1E+2, 12345678901234567890123, -0.0],
        "CONFIG": {"port": 8080, "ratio": 2.50, "n": [1e-7]}, "HUGE": 1e400, "LONG": 1"#
        .to_owned()
        + &"0".repeat(400)
        + "}";
    let env = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .stdin(payload.as_str())
        .expect_success()
        .run()
        .env();
    // Beyond a float's range too.
    assert_eq!(env["HUGE"], "1e400");
    assert_eq!(env["LONG"], format!("1{}", "0".repeat(400)));
    assert_eq!(env["BIG"], "12345678901234567890123");
    assert_eq!(env["EXP"], "1e2");
    assert_eq!(env["NEG_ZERO"], "-0");
    assert_eq!(env["FRACTION"], "0.10000000000000000555");
    assert_eq!(env["HOSTS"], "[1E+2,12345678901234567890123,-0.0]");
    assert_eq!(env["CONFIG"], r#"{"port":8080,"ratio":2.50,"n":[1e-7]}"#);
}

#[test]
fn node_and_default_numbers_keep_their_text_too() {
    let mut f = env_printer();
    f.node("NODE_NUMBER", 0).write();
    // Raw text again, in files beside the fixture's (which it rewrites before each run).
    let keys = f.path().join("raw-keys.json");
    std::fs::write(
        &keys,
        r#"{"NODE_NUMBER": {"description": "n"}, "DEFAULT_NUMBER": {"description": "d", "default": 1.0e3}}"#,
    )
    .unwrap();
    let deploy_env = f.path().join("raw-deploy-env.json");
    let text = std::fs::read_to_string(f.deploy_env_path()).unwrap();
    assert!(text.contains("\"NODE_NUMBER\": 0"), "{text}");
    std::fs::write(
        &deploy_env,
        text.replace("\"NODE_NUMBER\": 0", "\"NODE_NUMBER\": 99999999999999999999"),
    )
    .unwrap();
    let env = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_KEYS", &keys)
        .env("JOBENV_DEPLOY_ENV", &deploy_env)
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run()
        .env();
    assert_eq!(env["NODE_NUMBER"], "99999999999999999999");
    assert_eq!(env["DEFAULT_NUMBER"], "1.0e3");
}

#[test]
fn a_payload_that_repeats_a_node_secret_is_told_it_was_ignored_like_any_other() {
    // Silence for an equal value would tell a job author whether a guess of the secret was
    // right; for the node's other keys an equal value is silent (the positive control).
    let mut f = env_printer();
    f.declare("API_TOKEN", None)
        .secret("API_TOKEN", "node-secret-value")
        .declare("REGION", None)
        .node("REGION", "eu-1");
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "API_TOKEN": "node-secret-value", "REGION": "eu-1"}))
        .expect_success()
        .expect_stderr_contains("jobenv: warning: payload value for API_TOKEN ignored: the node sets it")
        .expect_nowhere("the node secret", "node-secret-value")
        .run();
    assert!(!done.stderr.contains("REGION"), "{done:?}");
}

#[test]
fn a_keys_file_default_never_sets_a_derived_key() {
    let mut f = env_printer();
    f.declare("DEPLOYMENT_NAMESPACE", Some("default-ns"))
        .declare("TF_HTTP_ADDRESS", Some("https://state.example/tf/other"));
    f.declare("TF_HTTP_LOCK_ADDRESS", Some("https://state.example/tf/other/lock"))
        .declare("PLAIN", Some("plain-default"));
    let env = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run()
        .env();
    assert_eq!(env["DEPLOYMENT_NAMESPACE"], "ns");
    // Without a state address the program gets none, not the default's.
    assert!(
        !env.contains_key("TF_HTTP_ADDRESS") && !env.contains_key("TF_HTTP_LOCK_ADDRESS"),
        "{env:?}"
    );
    // Positive control: an ordinary key's default does arrive.
    assert_eq!(env["PLAIN"], "plain-default");
}

#[test]
fn system_from_one_side_only_draws_no_warning() {
    let system = format!("{}-linux", std::env::consts::ARCH);
    let f = env_printer();
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "SYSTEM": system}))
        .expect_success()
        .run();
    assert!(!done.stderr.contains("SYSTEM"), "payload only: {done:?}");
    let mut f = env_printer();
    f.node("SYSTEM", system.as_str());
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run();
    assert!(!done.stderr.contains("SYSTEM"), "node only: {done:?}");
    // Positive control: both, different, warns.
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "SYSTEM": "riscv64-linux"}))
        .run();
    assert!(
        done.stderr
            .contains("jobenv: warning: payload value for SYSTEM ignored: the node sets it"),
        "{done:?}"
    );
}

/// The structural pins decide which code a deploy evaluates: a keys file marks them node-only,
/// and then no payload chooses them, and jobenv's own environment (the job runner's) does not
/// pass them either: the node's files are their only source. The positive controls: the node's
/// value arrives, and an ordinary declared key beside it still comes from the payload.
#[test]
fn a_node_only_key_comes_from_the_node_never_from_the_payload() {
    let mut f = env_printer();
    f.declare_node_only("SELF_MODULE_SOURCE", None)
        .declare_node_only("HOSTING_CONFIG", None)
        .declare("DOMAIN", None);
    f.node("SELF_MODULE_SOURCE", "/nix/store/node-pinned-source");
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("HOSTING_CONFIG", "/from-jobenv-environment")
        .payload(&json!({
            "ATTRIBUTE": "web", "NAMESPACE": "ns", "DOMAIN": "example.org",
            "SELF_MODULE_SOURCE": "/tmp/attacker-source", "HOSTING_CONFIG": "/tmp/attacker-config",
        }))
        .expect_success()
        .expect_stderr(
            "jobenv: warning: payload value for HOSTING_CONFIG ignored: only the node may set it
jobenv: warning: payload value for SELF_MODULE_SOURCE ignored: the node sets it
jobenv: running web-apply in namespace ns (system [..]-linux, verb apply)
jobenv: web-apply succeeded with exit code 0 after [..]s
",
        )
        .expect_nowhere("a payload pin", "attacker")
        .run();
    let env = done.env();
    assert_eq!(env["SELF_MODULE_SOURCE"], "/nix/store/node-pinned-source");
    assert!(
        !env.contains_key("HOSTING_CONFIG"),
        "a node-only key the node does not set stays unset: {env:?}"
    );
    assert_eq!(env["DOMAIN"], "example.org");
}

/// A node-only key's declared default is the node's word too: it fills the key when the node
/// sets nothing, whatever the payload says.
#[test]
fn a_node_only_default_wins_over_the_payload() {
    let mut f = env_printer();
    f.declare_node_only("PIN_EFFECT", Some("node-default"));
    let env = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "PIN_EFFECT": "payload-choice"}))
        .expect_success()
        .expect_stderr_contains("jobenv: warning: payload value for PIN_EFFECT ignored: only the node may set it")
        .run()
        .env();
    assert_eq!(env["PIN_EFFECT"], "node-default");
}
