//! A job exactly as the seeds' front-end sends it: `TF_HTTP_ADDRESS` already scoped to the
//! deployment (`<base>/<namespace>`) and no `NAMESPACE`, the node's own keys (`DEPLOYMENT_ROOT`,
//! `NIXPKGS`) that the node overrides, an `EXECUTABLE` without its verb, the state backend's
//! credentials, and the deploy script's keys (`SSH_PRIVATE_KEY_FILE`, `INTERNAL_HOSTS`,
//! `PUBLISHED_HOSTS`, `ENVIRONMENTS`) with arrays and objects as values.
//!
//! It runs, the node wins where it owns a key (one warning per dropped key), and everything that
//! could let one deployment address another's state is refused before anything runs. The
//! front-end's state password reaches the program (the positive control of every "never" here)
//! and no output: not the program's, not `env`'s, not an error, not `result.json`.

use std::path::PathBuf;
use std::time::Duration;

use fediversity_testkit::job_run::{Done, JobRun};
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, parse_env_lines};
use fediversity_testkit::process::read_pids;
use serde_json::{Value, json};

const PASSWORD: &str = "state-password-from-the-front-end-7Qx";
const ADDRESS: &str = "https://state.example/tf/team-a";

/// The node: attribute `web` with a verb-less program (a deployment method with a single
/// program has no verb siblings) and `web-destroy`, the deploy script's keys declared, and a
/// program that writes its whole environment and its own path to `<fixture>/program-env` and
/// prints the password (which the log must show redacted).
struct Node {
    f: Fixture,
    env_file: PathBuf,
}

impl Node {
    fn new() -> Self {
        let mut f = Fixture::new();
        let env_file = f.path().join("program-env");
        let body = format!(
            "{{ echo \"PROGRAM=$0\"; /usr/bin/env; }} > {}; echo \"password: $TF_HTTP_PASSWORD\"",
            env_file.display()
        );
        f.program("web", "apply", &body).program("web", "destroy", &body);
        // The verb-less program: the same script under the attribute's own name.
        std::fs::copy(f.root().join("bin/web-apply"), f.root().join("bin/web")).unwrap();
        for key in [
            "SSH_PRIVATE_KEY_FILE",
            "INTERNAL_HOSTS",
            "PUBLISHED_HOSTS",
            "ENVIRONMENTS",
        ] {
            f.declare(key, None);
        }
        Node { f, env_file }
    }

    fn job(&self, verb: &str, payload: &Value) -> JobRun {
        self.f
            .jobenv(jobenv_bin!())
            .verb(verb)
            .payload(payload)
            .expect_nowhere("the state password", PASSWORD)
    }

    /// What the program saw, or `None` if it never started.
    fn program_env(&self) -> Option<std::collections::BTreeMap<String, String>> {
        std::fs::read_to_string(&self.env_file)
            .ok()
            .map(|text| parse_env_lines(&text))
    }

    /// Refused before anything ran: exit 2, the error, and no program.
    fn refused(&self, verb: &str, payload: &Value, error: &str) -> Done {
        let done = self
            .job(verb, payload)
            .expect_code(2)
            .expect_stderr_contains(error)
            .run();
        assert!(self.program_env().is_none(), "the program was started");
        assert!(!done.stderr.contains("running"), "{done:?}");
        done
    }
}

/// What a front-end built to the seeds sends for an apply of `web` in namespace `team-a`.
fn seed_payload() -> Value {
    json!({
        "ATTRIBUTE": "web",
        "EXECUTABLE": "web",
        "SYSTEM": format!("{}-linux", std::env::consts::ARCH),
        "DEPLOYMENT_ROOT": "/srv/front-end/deployments",
        "NIXPKGS": "/nix/store/front-end-nixpkgs",
        "TF_HTTP_ADDRESS": ADDRESS,
        "TF_HTTP_USERNAME": "front-end",
        "TF_HTTP_PASSWORD": PASSWORD,
        "SSH_PRIVATE_KEY_FILE": "/run/secrets/deploy-key",
        "INTERNAL_HOSTS": ["web01.internal", "db01.internal"],
        "PUBLISHED_HOSTS": ["team-a.example", "www.team-a.example"],
        "ENVIRONMENTS": {"production": {"replicas": 2, "domain": "team-a.example"}},
    })
}

fn with(mut payload: Value, key: &str, value: Value) -> Value {
    payload[key] = value;
    payload
}

#[test]
fn a_seed_shaped_payload_runs_with_the_nodes_root_and_pin_and_the_front_ends_address() {
    let node = Node::new();
    let done = node
        .job("apply", &seed_payload())
        .expect_success()
        .expect_stderr_contains("jobenv: warning: payload value for DEPLOYMENT_ROOT ignored: the node sets it")
        .expect_stderr_contains("jobenv: warning: payload value for NIXPKGS ignored: the node sets it")
        .run();
    assert_eq!(done.stdout, "password: [REDACTED]\n");
    let env = node.program_env().expect("the program ran");
    let root = node.f.root().display().to_string();
    // The node's root (the program is the one under it) and the node's nixpkgs pin.
    assert_eq!(env["PROGRAM"], format!("{root}/bin/web"), "the verb-less program ran");
    assert_eq!(env["NIX_PATH"], format!("nixpkgs={root}"));
    // The front-end's state address and credentials, the namespace taken from the address.
    assert_eq!(env["TF_HTTP_ADDRESS"], ADDRESS);
    assert_eq!(env["TF_HTTP_LOCK_ADDRESS"], format!("{ADDRESS}/lock"));
    assert_eq!(env["TF_HTTP_UNLOCK_ADDRESS"], format!("{ADDRESS}/lock"));
    assert_eq!(env["DEPLOYMENT_NAMESPACE"], "team-a");
    assert_eq!(env["TF_HTTP_USERNAME"], "front-end");
    assert_eq!(
        env["TF_HTTP_PASSWORD"], PASSWORD,
        "the positive control: the password did reach the program"
    );
    // The deploy script's keys; arrays and objects as compact JSON.
    assert_eq!(env["SSH_PRIVATE_KEY_FILE"], "/run/secrets/deploy-key");
    assert_eq!(env["INTERNAL_HOSTS"], r#"["web01.internal","db01.internal"]"#);
    assert_eq!(env["PUBLISHED_HOSTS"], r#"["team-a.example","www.team-a.example"]"#);
    assert_eq!(
        env["ENVIRONMENTS"],
        r#"{"production":{"domain":"team-a.example","replicas":2}}"#
    );
    // Control keys and the front-end's node keys never reach the program.
    for key in [
        "ATTRIBUTE",
        "EXECUTABLE",
        "SYSTEM",
        "NAMESPACE",
        "DEPLOYMENT_ROOT",
        "NIXPKGS",
    ] {
        assert!(!env.contains_key(key), "{key} reached the program");
    }
    // jobenv's own warnings; Nix's (its database busy with the suite's other nix-shells) are not
    // the payload's.
    let warnings: Vec<&str> = done
        .stderr_lines()
        .into_iter()
        .filter(|l| l.starts_with("jobenv: warning"))
        .collect();
    assert_eq!(
        warnings.len(),
        2,
        "one warning per dropped key, none for the rest: {warnings:?}"
    );
}

#[test]
fn under_a_node_state_base_the_address_must_be_the_nodes_own_for_the_namespace() {
    let mut node = Node::new();
    node.f.node("STATE_BASE_ADDRESS", "https://state.example/tf/");
    node.job("apply", &seed_payload()).expect_success().run();
    let env = node.program_env().expect("the program ran");
    assert_eq!(
        (env["TF_HTTP_ADDRESS"].as_str(), env["DEPLOYMENT_NAMESPACE"].as_str()),
        (ADDRESS, "team-a")
    );
    let node = {
        let mut node = Node::new();
        node.f.node("STATE_BASE_ADDRESS", "https://state.example/tf/");
        node
    };
    node.refused(
        "apply",
        &with(seed_payload(), "TF_HTTP_ADDRESS", json!("https://state.example/other-tf/team-a")),
        r#"TF_HTTP_ADDRESS "https://state.example/other-tf/team-a" is not this node's state address of namespace team-a"#,
    );
}

#[test]
fn no_warning_when_the_payload_agrees_with_the_node() {
    let node = Node::new();
    let root = node.f.root().display().to_string();
    let payload = with(
        with(seed_payload(), "DEPLOYMENT_ROOT", json!(root)),
        "NIXPKGS",
        json!(root),
    );
    let done = node.job("apply", &payload).expect_success().run();
    // jobenv's own warnings; Nix's (its database busy with the suite's other nix-shells) are not
    // the payload's.
    assert!(!done.stderr.contains("jobenv: warning"), "{done:?}");
    assert!(done.stderr.contains("jobenv: running"), "{done:?}");
}

#[test]
fn env_shows_the_keys_the_node_won_and_never_the_password() {
    let node = Node::new();
    let done = node
        .f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply", "--format", "json"])
        .payload(&seed_payload());
    let done = done
        .expect_success()
        .expect_nowhere("the state password", PASSWORD)
        .run();
    let shown: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(shown["ignored"], json!({"DEPLOYMENT_ROOT": "node", "NIXPKGS": "node"}));
    assert_eq!(
        shown["env"]["TF_HTTP_PASSWORD"],
        json!({"value": "[REDACTED]", "source": "payload"})
    );
    assert_eq!(
        shown["env"]["TF_HTTP_ADDRESS"],
        json!({"value": ADDRESS, "source": "payload"})
    );
    assert_eq!(
        shown["env"]["DEPLOYMENT_NAMESPACE"],
        json!({"value": "team-a", "source": "derived"})
    );
    assert_eq!(shown["argv"][5], "exec web");
    let text = node
        .f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply"])
        .payload(&seed_payload());
    let text = text
        .expect_success()
        .expect_nowhere("the state password", PASSWORD)
        .run()
        .stdout;
    assert!(text.contains("TF_HTTP_PASSWORD=[REDACTED]  # payload\n"), "{text}");
    assert!(
        text.contains("# payload keys ignored, the node wins: DEPLOYMENT_ROOT, NIXPKGS\n"),
        "{text}"
    );
    assert!(node.program_env().is_none(), "env ran the program");
}

#[test]
fn a_verb_less_executable_is_only_for_apply() {
    let node = Node::new();
    node.refused(
        "destroy",
        &seed_payload(),
        r#"EXECUTABLE "web" is not allowed: it must be "web-destroy" (<ATTRIBUTE>-<VERB>)"#,
    );
    // Positive control: destroy with its own program runs.
    node.job("destroy", &with(seed_payload(), "EXECUTABLE", json!("web-destroy")))
        .expect_success()
        .run();
    assert_eq!(
        node.program_env().unwrap()["PROGRAM"],
        format!("{}/bin/web-destroy", node.f.root().display())
    );
}

#[test]
fn a_namespace_that_disagrees_with_the_address_is_refused() {
    Node::new().refused(
        "apply",
        &with(seed_payload(), "NAMESPACE", json!("team-b")),
        r#"NAMESPACE "team-b" differs from the last segment of TF_HTTP_ADDRESS "https://state.example/tf/team-a""#,
    );
    // Positive control: the same namespace, named twice, runs.
    let node = Node::new();
    node.job("apply", &with(seed_payload(), "NAMESPACE", json!("team-a")))
        .expect_success()
        .run();
}

#[test]
fn a_namespace_with_an_address_that_names_none_is_refused() {
    // Without the node's base the address is the state address as it is: `https://state.example`
    // would be shared by every namespace sent with it.
    for address in ["https://state.example", "https://state.example/"] {
        Node::new().refused(
            "apply",
            &with(
                with(seed_payload(), "NAMESPACE", json!("team-a")),
                "TF_HTTP_ADDRESS",
                json!(address),
            ),
            r#"TF_HTTP_ADDRESS has no path segment to name the namespace "team-a""#,
        );
    }
}

#[test]
fn an_address_with_dot_segments_is_refused() {
    for (address, rule) in [
        (
            "https://state.example/tf/../tf/team-a",
            "must not have . or .. path segments",
        ),
        (
            "https://state.example/tf/./team-a",
            "must not have . or .. path segments",
        ),
        (
            "https://state.example/tf/%2e%2E/team-a",
            "must not have . or .. path segments",
        ),
        (
            "https://state.example/tf/..%2Fother/team-a",
            r"must not percent-encode '.', '/' or '\'",
        ),
    ] {
        Node::new().refused(
            "apply",
            &with(seed_payload(), "TF_HTTP_ADDRESS", json!(address)),
            &format!("is invalid: {rule}"),
        );
    }
}

#[test]
fn an_address_with_userinfo_is_refused_and_never_shown() {
    let address = "https://front-end:hunter2-in-the-url@state.example/tf/team-a";
    let done = Node::new().refused(
        "apply",
        &with(seed_payload(), "TF_HTTP_ADDRESS", json!(address)),
        "TF_HTTP_ADDRESS (value not shown: it carries credentials) is invalid: must not carry credentials",
    );
    assert!(!done.stderr.contains("hunter2"), "{done:?}");
}

#[test]
fn an_address_with_a_query_is_refused_and_its_query_never_shown() {
    let node = Node::new();
    let address = "https://state.example/tf/team-a?access_token=query-token-9Zr";
    let run = node
        .job("apply", &with(seed_payload(), "TF_HTTP_ADDRESS", json!(address)))
        .env("WM_JOB_ID", "0192-query");
    let done = run
        .expect_code(2)
        .expect_nowhere("the query's token", "query-token-9Zr")
        .run();
    assert!(
        done.stderr
            .contains("is invalid: must not have a query, a fragment or a backslash"),
        "{done:?}"
    );
    let result = node.f.result_json().to_string();
    assert!(!result.contains("query-token-9Zr"), "{result}");
    assert!(node.program_env().is_none());
}

#[test]
fn a_lock_address_under_another_deployment_is_refused() {
    let node = Node::new();
    for lock in [
        "https://state.example/tf/team-b/lock",
        "https://state.example/tf/team-ab/lock",
        "https://state.example/tf/team-a/..%2F..%2Fteam-b/lock",
    ] {
        let payload = with(seed_payload(), "TF_HTTP_LOCK_ADDRESS", json!(lock));
        let done = node.job("apply", &payload).expect_code(2).run();
        assert!(done.stderr.contains("TF_HTTP_LOCK_ADDRESS"), "{lock}: {done:?}");
        assert!(node.program_env().is_none(), "{lock}: the program ran");
    }
    // Positive control: a lock address under the deployment's own passes as it is.
    node.job(
        "apply",
        &with(
            seed_payload(),
            "TF_HTTP_LOCK_ADDRESS",
            json!(format!("{ADDRESS}/locks/apply")),
        ),
    )
    .expect_success()
    .run();
    assert_eq!(
        node.program_env().unwrap()["TF_HTTP_LOCK_ADDRESS"],
        format!("{ADDRESS}/locks/apply")
    );
}

#[test]
fn a_rejected_job_records_neither_the_password_nor_an_unchecked_namespace() {
    let node = Node::new();
    let payload = with(
        seed_payload(),
        "TF_HTTP_ADDRESS",
        json!("https://state.example/tf/Team_A"),
    );
    node.job("apply", &payload)
        .env("WM_JOB_ID", "0192-rejected")
        .expect_code(2)
        .expect_stderr_contains("NAMESPACE \"Team_A\" is invalid")
        .run();
    let result = node.f.result_json();
    assert_eq!(result["status"], "rejected");
    assert!(
        result["namespace"].is_null(),
        "a namespace that failed its grammar is not recorded: {result}"
    );
    assert_eq!(result["attribute"], "web");
    assert!(!result.to_string().contains(PASSWORD), "{result}");
}

#[test]
fn one_deploy_per_namespace_however_the_namespace_is_named() {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    f.program(
        "web",
        "apply",
        &format!("echo $$ >> {dir}/pids; echo \"start $DEPLOYMENT_NAMESPACE\" >> {dir}/log; while [ ! -e {dir}/go ]; do sleep 0.02; done"),
    );
    let by_namespace = json!({"ATTRIBUTE": "web", "NAMESPACE": "team-a"});
    let mut first = f.jobenv(jobenv_bin!()).verb("apply").payload(&by_namespace).spawn();
    read_pids(&f.path().join("pids"), 1, Duration::from_secs(20));
    let by_address = json!({"ATTRIBUTE": "web", "TF_HTTP_ADDRESS": ADDRESS, "TF_HTTP_PASSWORD": PASSWORD});
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&by_address)
        .expect_code(2)
        .expect_stderr("jobenv: error: namespace team-a is locked by another deploy: jobenv pid [..]\n")
        .expect_nowhere("the state password", PASSWORD)
        .run();
    assert_eq!(
        std::fs::read_to_string(f.path().join("log")).unwrap(),
        "start team-a\n",
        "the second program started"
    );
    std::fs::write(f.path().join("go"), "").unwrap();
    assert!(first.wait().unwrap().success());
    // Positive control: once the first is done, the same second job runs.
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&by_address)
        .expect_success()
        .run();
}

#[test]
fn the_nodes_state_credentials_never_go_to_an_address_a_job_chose() {
    let mut node = Node::new();
    node.f
        .secret("TF_HTTP_USERNAME", "node-state-user")
        .secret("TF_HTTP_PASSWORD", "node-state-password-9");
    let payload = json!({"ATTRIBUTE": "web", "TF_HTTP_ADDRESS": "https://attacker.example/steal/team-a"});
    node.refused(
        "apply",
        &payload,
        "the node sets TF_HTTP_USERNAME but no STATE_BASE_ADDRESS",
    );
    // Positive control: with the node's own base, the same credentials go there.
    node.f.node("STATE_BASE_ADDRESS", "https://state.example/tf");
    node.job("apply", &json!({"ATTRIBUTE": "web", "TF_HTTP_ADDRESS": ADDRESS}))
        .expect_success()
        .run();
    let env = node.program_env().expect("the program ran");
    assert_eq!(env["TF_HTTP_ADDRESS"], ADDRESS);
}

#[test]
fn a_base_address_with_credentials_outside_a_secrets_source_is_refused() {
    let mut node = Node::new();
    node.f
        .node("STATE_BASE_ADDRESS", "https://tfuser:hunter2-base-pw@state.example/tf");
    let done = node.refused(
        "apply",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "team-a"}),
        "STATE_BASE_ADDRESS (value not shown) is invalid: carries credentials outside a secrets source",
    );
    assert!(!done.stderr.contains("hunter2"), "{done:?}");
}

/// A node's base with credentials (from a secret, where they are redacted) still scopes the
/// seeds' address, which carries none: the program gets the node's own address, credentials
/// and all, and no output shows them, not even a refusal.
#[test]
fn a_base_address_with_credentials_scopes_the_seeds_address_without_them() {
    const BASE: &str = "https://tfuser:base-pw-31x@state.example/tf/";
    let mut node = Node::new();
    node.f.secret("STATE_BASE_ADDRESS", BASE);
    node.job("apply", &seed_payload())
        .expect_success()
        .expect_nowhere("the base's password", "base-pw-31x")
        .expect_nowhere("the base's user", "tfuser")
        .run();
    let env = node.program_env().expect("the program ran");
    assert_eq!(env["TF_HTTP_ADDRESS"], format!("{BASE}team-a"));
    assert_eq!(env["TF_HTTP_LOCK_ADDRESS"], format!("{BASE}team-a/lock"));
    let mut other = Node::new();
    other.f.secret("STATE_BASE_ADDRESS", BASE);
    let foreign = with(
        seed_payload(),
        "TF_HTTP_ADDRESS",
        json!("https://state.example/other/team-a"),
    );
    let done = other.refused(
        "apply",
        &foreign,
        "is not this node's state address of namespace team-a",
    );
    assert!(
        !done.stderr.contains("base-pw-31x") && !done.stderr.contains("tfuser"),
        "{done:?}"
    );
}

/// The URL standard takes almost anything as a domain (`s{x}`, `state_1.example`): a state
/// address must name a host (a host name or an IP address), in a payload or the node's base.
#[test]
fn a_state_address_whose_host_is_no_host_name_is_refused() {
    Node::new().refused(
        "apply",
        &with(seed_payload(), "TF_HTTP_ADDRESS", json!("https://s{x}/tf/team-a")),
        r#"TF_HTTP_ADDRESS "https://s{x}/tf/team-a" is invalid: must name a valid host"#,
    );
    let mut node = Node::new();
    node.f.node("STATE_BASE_ADDRESS", "https://state_1.example/tf");
    node.refused(
        "apply",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "team-a"}),
        "STATE_BASE_ADDRESS (value not shown) is invalid: must name a valid host",
    );
    // Positive control: an IP address is a host.
    Node::new()
        .job(
            "apply",
            &with(
                seed_payload(),
                "TF_HTTP_ADDRESS",
                json!("http://10.0.0.7:8080/tf/team-a"),
            ),
        )
        .expect_success()
        .run();
}

#[test]
fn a_lock_address_a_server_might_decode_elsewhere_is_refused() {
    let node = Node::new();
    for lock in [
        format!("{ADDRESS}/..;/team-b/lock"),
        format!("{ADDRESS}/%252e%252e/team-b"),
        format!("{ADDRESS}/lock;x"),
    ] {
        let payload = json!({"ATTRIBUTE": "web", "TF_HTTP_ADDRESS": ADDRESS, "TF_HTTP_LOCK_ADDRESS": lock});
        node.refused(
            "apply",
            &payload,
            "must have path segments of letters, digits and . _ ~ - only",
        );
    }
}

#[test]
fn a_long_payload_password_is_refused_before_it_becomes_redaction_needles() {
    let node = Node::new();
    let payload = json!({"ATTRIBUTE": "web", "TF_HTTP_ADDRESS": ADDRESS, "TF_HTTP_PASSWORD": "ä".repeat(3000)});
    node.refused(
        "apply",
        &payload,
        "the payload's TF_HTTP_PASSWORD is longer than 4096 bytes",
    );
}

#[test]
fn stdenv_hooks_and_phases_are_reserved_even_when_declared() {
    let mut node = Node::new();
    node.f.declare("preHook", None).declare("shellHook", None);
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "team-a", "preHook": "touch /tmp/pwned", "shellHook": "x"});
    node.refused("apply", &payload, "payload rejected: reserved keys: preHook, shellHook");
}
