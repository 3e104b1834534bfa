//! The NixOS module, evaluated for real with `nix-instantiate --eval --strict --json` and no
//! nixpkgs:
//!
//! - its pure parts (nixos-module/lib.nix): the files it renders (jobenv's deploy-env.json,
//!   keys, attributes and required secrets; the bootstrap's configuration; the OpenBao agent's
//!   templates), the decisions it takes (who may see the admin UI, which node names jobenv
//!   would refuse, how the worker starts and stops), and the settings it adds to systemd units,
//!   nginx and Nix; the shell scripts it renders are run with bash;
//! - the module itself (nixos-module/default.nix), through tests/nix/module-harness.nix:
//!   stand-ins for nixpkgs' `lib` and `pkgs` and a miniature of the module system, so that
//!   every option's value (default or set) is computed and type-checked, and the configuration
//!   the module hands to NixOS is inspected, merged with the definitions of nixpkgs' Windmill
//!   module that it must win over.
//!
//! What only the VM test (nixos-module/test.nix, needs nixpkgs and KVM) checks: nixpkgs'
//! modules interpreting that configuration on a running node.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

pub(crate) fn nix_string(path: PathBuf) -> String {
    Value::from(path.display().to_string()).to_string()
}

pub(crate) fn nix_instantiate(full: &str) -> std::process::Output {
    Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "-E", full])
        .output()
        .expect("nix-instantiate is on PATH (Debian: apt-get install nix-bin)")
}

fn nix_eval(expr: &str) -> std::process::Output {
    nix_instantiate(&format!(
        "let lib = import {}; in {expr}",
        nix_string(repo().join("nixos-module/lib.nix"))
    ))
}

/// The JSON value of a Nix expression in which `lib` is nixos-module/lib.nix.
fn eval(expr: &str) -> Value {
    let out = nix_eval(expr);
    assert!(out.status.success(), "{expr}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The error of an expression that must not evaluate.
fn eval_error(expr: &str) -> String {
    let out = nix_eval(expr);
    assert!(
        !out.status.success(),
        "{expr} evaluated to {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// jobenv's names and defaults as jobenv generates them for its module
/// (`nixos-module/jobenv-names.json`; jobenv's own test fails when that file is stale).
fn jobenv_facts() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("nixos-module/jobenv-names.json")).unwrap()).unwrap()
}

/// One of jobenv's default paths (`defaults` of [`jobenv_facts`]).
fn jobenv_const(name: &str) -> String {
    let key = match name {
        "DEFAULT_DEPLOY_ENV" => "deployEnv",
        "DEFAULT_KEYS" => "deployKeys",
        "DEFAULT_ATTRIBUTES" => "deploymentAttributes",
        "DEFAULT_SECRETS_DIR" => "secretsDir",
        "DEFAULT_STATE_DIR" => "stateDir",
        other => panic!("no default {other}"),
    };
    jobenv_facts()["defaults"][key].as_str().unwrap().to_owned()
}

/// jobenv's default grace (`--grace`).
fn jobenv_grace() -> u64 {
    jobenv_facts()["defaults"]["graceSeconds"].as_u64().unwrap()
}

fn sorted(value: &Value) -> Vec<String> {
    let mut names: Vec<String> = value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_files_are_where_jobenv_looks_without_options() {
    let paths = eval("lib.paths");
    assert_eq!(paths["deployEnv"], jobenv_const("DEFAULT_DEPLOY_ENV"));
    assert_eq!(paths["deployKeys"], jobenv_const("DEFAULT_KEYS"));
    assert_eq!(paths["deploymentAttributes"], jobenv_const("DEFAULT_ATTRIBUTES"));
    assert_eq!(paths["secretsDir"], jobenv_const("DEFAULT_SECRETS_DIR"));
    assert_eq!(paths["stateDir"], jobenv_const("DEFAULT_STATE_DIR"));
    assert_eq!(paths["uiAuthDir"], "/run/windmill-ui-auth");
    // The credentials of seed 002's Incus deployments, where its deployment programs read them.
    assert_eq!(paths["tfTokenEnv"], "/run/incus-deploy/tf-token.env");
    assert_eq!(paths["incusStoreSshKey"], "/run/incus-deploy/incus-store-ssh.key");
    assert_eq!(
        paths["incusStoreSigningKey"],
        "/run/incus-deploy/incus-store-signing.key"
    );
    assert_eq!(
        paths["requiredSecrets"],
        "/etc/fediversity-windmill/required-secrets.json"
    );
}

// ---- jobenv's names and the node's keys ------------------------------------------------------

#[test]
fn the_names_lib_nix_knows_are_jobenvs() {
    // lib.nix takes jobenv's lists as jobenv generates them, not a copy of its own.
    let names = eval("lib.jobenvNames");
    let facts = jobenv_facts();
    assert_eq!(names, facts);
    // Not vacuous: the lists are there.
    assert!(
        sorted(&names["nodeTools"]).contains(&"TF_INPUT".to_owned())
            && sorted(&names["reserved"]).contains(&"PATH".to_owned())
    );
    // Reserved names: the manual's list (docs/operators/jobenv.md), by example (exact names and prefixes).
    for (key, reserved) in [
        ("PATH", true),
        ("HOME", true),
        ("NIX_CONFIG", true),
        ("LD_PRELOAD", true),
        ("DYLD_INSERT_LIBRARIES", true),
        ("DEPLOYMENT_NAMESPACE", true),
        ("BASH_ENV", true),
        ("BASH_FUNC_x%%", true),
        ("PYTHONPATH", true),
        ("PERL5LIB", true),
        ("RUBYOPT", true),
        ("GIT_SSH_COMMAND", true),
        ("SSH_ASKPASS_REQUIRE", true),
        ("TF_CLI_ARGS_apply", true),
        ("TF_HTTP_ADDRESS", true),
        ("IFS", true),
        ("preHook", true),
        ("shellHook", true),
        ("buildPhase", true),
        ("PATHX", false),
        ("Hook", false),
        ("HOSTING_CONFIG", false),
        ("TF_VAR_x", false),
        ("NIXOS", false),
        ("GITLAB", false),
    ] {
        assert_eq!(
            eval(&format!("lib.isReservedName {}", json!(key))),
            json!(reserved),
            "{key}"
        );
    }
}

/// `lib.nodeProblems` for a complete node (root and nixpkgs set, MESSAGE declared) plus
/// `env`, `secrets` (Nix attrsets added to deployEnv and deploySecrets) and `tf_token`.
fn node_problems(env: &str, secrets: &str, tf_token: bool) -> Vec<String> {
    let problems = eval(&format!(
        r#"lib.nodeProblems {{
             deployEnv = {{ DEPLOYMENT_ROOT = "/nix/store/r"; DEPLOYMENT_NIXPKGS = "/nix/store/n"; }} // {env};
             deploySecrets = {secrets};
             declared = builtins.attrNames (lib.declaredKeys {{ operator = {{ MESSAGE.description = "m"; BASH_ENV.description = "declared, although reserved"; }}; }});
             tfToken = {};
           }}"#,
        if tf_token { r#""{{ .token }}""# } else { "null" }
    ));
    strings(&problems)
}

#[test]
fn node_keys_jobenv_accepts_pass_the_evaluation() {
    // The positive control of every class below.
    let fine = node_problems(
        r#"{ MESSAGE = "hi"; HOSTING_CONFIG = "/h"; SYSTEM = "x86_64-linux"; STATE_BASE_ADDRESS = "https://state.example/tofu";
             NIX_CONFIG = "x"; NIX_PATH = "a=/b"; NIX_BUILD_SHELL = "/bin/bash"; TF_LOG = "DEBUG"; TF_INPUT = "0"; TF_IN_AUTOMATION = "1";
             TF_PLUGIN_CACHE_DIR = "/var/cache/tf"; TF_VAR_region = "nl"; BASH_ENV = "/etc/declared"; EVENTS_URL = "https://events.example/"; }"#,
        r#"{ TF_VAR_hcloud_token = "t"; TF_HTTP_PASSWORD = "p"; TF_HTTP_USERNAME = "u"; EVENTS_SECRET = "s"; }"#,
        true,
    );
    assert_eq!(fine, Vec::<String>::new());
}

#[test]
fn state_credentials_without_the_nodes_own_state_base_fail_the_evaluation() {
    let problems = node_problems(r#"{ }"#, r#"{ TF_HTTP_PASSWORD = "p"; }"#, false);
    assert_eq!(
        problems,
        [
            "TF_HTTP_USERNAME/TF_HTTP_PASSWORD are set but deployEnv.STATE_BASE_ADDRESS is not: jobenv sends the node's state credentials only to the node's own state backend"
        ]
    );
    // Positive control: with the base, they pass.
    assert_eq!(
        node_problems(
            r#"{ STATE_BASE_ADDRESS = "https://state.example/tf"; }"#,
            r#"{ TF_HTTP_PASSWORD = "p"; }"#,
            false
        ),
        Vec::<String>::new()
    );
}

#[test]
fn each_class_of_node_key_jobenv_refuses_fails_the_evaluation_naming_the_key() {
    for (env, secrets, tf_token, expected) in [
        (
            r#"{ UNDECLARED_THING = "x"; }"#,
            "{ }",
            false,
            "deployEnv.UNDECLARED_THING: UNDECLARED_THING is neither declared (deployKeys or the structural pins) nor a control key nor a Nix/OpenTofu variable a node may set; jobenv refuses it",
        ),
        (
            "{ }",
            r#"{ ALSO_UNDECLARED = "t"; }"#,
            false,
            "deploySecrets.ALSO_UNDECLARED: ALSO_UNDECLARED is neither declared (deployKeys or the structural pins) nor a control key nor a Nix/OpenTofu variable a node may set; jobenv refuses it",
        ),
        (
            r#"{ LD_PRELOAD = "/x.so"; }"#,
            "{ }",
            false,
            "deployEnv.LD_PRELOAD: LD_PRELOAD is a reserved name (it steers the loader, a shell, an interpreter, git, ssh, Nix or OpenTofu) and is neither declared in deployKeys nor a Nix/OpenTofu variable a node may set; jobenv refuses it",
        ),
        (
            "{ }",
            r#"{ GIT_SSH_COMMAND = "t"; }"#,
            false,
            "deploySecrets.GIT_SSH_COMMAND: GIT_SSH_COMMAND is a reserved name (it steers the loader, a shell, an interpreter, git, ssh, Nix or OpenTofu) and is neither declared in deployKeys nor a Nix/OpenTofu variable a node may set; jobenv refuses it",
        ),
        (
            r#"{ NAMESPACE = "team"; }"#,
            "{ }",
            false,
            "deployEnv.NAMESPACE: NAMESPACE is a control key only a job payload may set",
        ),
        (
            "{ }",
            r#"{ ATTRIBUTE = "a"; }"#,
            false,
            "deploySecrets.ATTRIBUTE: ATTRIBUTE is a control key only a job payload may set",
        ),
        (
            r#"{ TF_HTTP_ADDRESS = "https://s/x"; }"#,
            "{ }",
            false,
            "deployEnv.TF_HTTP_ADDRESS: jobenv derives TF_HTTP_ADDRESS itself; no node or job may set it",
        ),
        (
            "{ }",
            r#"{ DEPLOYMENT_NAMESPACE = "x"; }"#,
            false,
            "deploySecrets.DEPLOYMENT_NAMESPACE: jobenv derives DEPLOYMENT_NAMESPACE itself; no node or job may set it",
        ),
        (
            "{ }",
            r#"{ "bad-name" = "t"; }"#,
            false,
            "deploySecrets.bad-name: \"bad-name\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*); jobenv would never read this secret",
        ),
        (
            r#"{ "A=B" = "x"; }"#,
            "{ }",
            false,
            "deployEnv.A=B: \"A=B\" is not a variable name jobenv can pass (empty, or with '=')",
        ),
        (
            r#"{ TF_VAR_x = "1"; }"#,
            r#"{ TF_VAR_x = "t"; }"#,
            false,
            "TF_VAR_x is set by deployEnv.TF_VAR_x and deploySecrets.TF_VAR_x; jobenv refuses a key from two node sources",
        ),
        (
            "{ }",
            r#"{ TF_VAR_token = "t"; }"#,
            true,
            "TF_VAR_token is set by deploySecrets.TF_VAR_token and credentials.tfToken (TF_VAR_token in /run/incus-deploy/tf-token.env); jobenv refuses a key from two node sources",
        ),
        (
            r#"{ DEPLOYMENT_ROOT = "relative/dir"; }"#,
            "{ }",
            false,
            "deployEnv.DEPLOYMENT_ROOT must be an absolute path",
        ),
        (
            r#"{ NIXPKGS = "/nix/store/other"; }"#,
            "{ }",
            false,
            "deployEnv.NIXPKGS and deployEnv.DEPLOYMENT_NIXPKGS are both set and differ (DEPLOYMENT_NIXPKGS defaults to pkgs.path: set it, not NIXPKGS)",
        ),
        (
            r#"{ STATE_BASE_ADDRESS = "ftp://s"; }"#,
            "{ }",
            false,
            "deployEnv.STATE_BASE_ADDRESS must be an http:// or https:// URL",
        ),
        (
            r#"{ SYSTEM = "x86_64"; }"#,
            "{ }",
            false,
            "deployEnv.SYSTEM \"x86_64\" must match ^[a-z0-9_]+-[a-z0-9_]+$",
        ),
        (
            r#"{ EVENTS_URL = "https://e/"; EVENTS_SECRET = "0123456789abcdef"; }"#,
            "{ }",
            false,
            "deployEnv.EVENTS_SECRET: the progress events' secret must come from deploySecrets (deploy-env.json is world-readable and not redacted)",
        ),
        (
            r#"{ EVENTS_URL = "https://e/"; }"#,
            "{ }",
            false,
            "EVENTS_URL and EVENTS_SECRET: progress events need both (one of them is set), unless deployEnv.EVENTS_FORMAT is \"dd-0012\" (then EVENTS_URL alone: each row's secret comes with its job)",
        ),
    ] {
        let problems = node_problems(env, secrets, tf_token);
        assert_eq!(
            problems,
            vec![expected.to_owned()],
            "deployEnv // {env}, deploySecrets {secrets}"
        );
    }
    // The control: a DD-0012 node sets the URL alone (each row's secret comes with its job).
    assert_eq!(
        node_problems(
            r#"{ EVENTS_URL = "https://e/api"; EVENTS_FORMAT = "dd-0012"; }"#,
            "{ }",
            false
        ),
        Vec::<String>::new()
    );
    // The required keys, when nothing sets them.
    let problems = strings(&eval(r#"lib.nodeProblems { deployEnv = { }; deploySecrets = { }; }"#));
    assert_eq!(
        problems,
        vec![
            "deployEnv.DEPLOYMENT_ROOT is required: the tree that holds the deployment programs (set deploymentRepository, or deployEnv.DEPLOYMENT_ROOT)",
            "deployEnv.DEPLOYMENT_NIXPKGS (or NIXPKGS) is required: the nixpkgs the programs run with"
        ]
    );
    // NIXPKGS alone is a nixpkgs, and equal to DEPLOYMENT_NIXPKGS it is no conflict.
    assert_eq!(
        node_problems(r#"{ NIXPKGS = "/nix/store/n"; }"#, "{ }", false),
        Vec::<String>::new()
    );
    assert_eq!(
        strings(&eval(
            r#"lib.nodeProblems { deployEnv = { DEPLOYMENT_ROOT = "/r"; NIXPKGS = "/n"; }; deploySecrets = { }; }"#
        )),
        Vec::<String>::new()
    );
}

#[test]
fn a_keys_file_declaring_a_control_key_fails_the_evaluation() {
    let problems = strings(&eval(
        r#"lib.deployKeysProblems { DOMAIN.description = "d"; NAMESPACE.description = "n"; DEPLOYMENT_ROOT.description = "r"; }"#,
    ));
    assert_eq!(
        problems,
        vec![
            "deployKeys.DEPLOYMENT_ROOT: DEPLOYMENT_ROOT is a control key jobenv consumes and never passes to the program; a keys file that declares it is refused",
            "deployKeys.NAMESPACE: NAMESPACE is a control key jobenv consumes and never passes to the program; a keys file that declares it is refused",
        ]
    );
    assert_eq!(
        eval(r#"lib.deployKeysProblems { DOMAIN.description = "d"; }"#),
        json!([])
    );
}

#[test]
fn the_required_secrets_are_every_declared_secret_and_the_tf_token() {
    assert_eq!(
        eval(
            r#"lib.renderRequiredSecrets { deploySecrets = { TF_VAR_b = "t"; SSH_KEY = "k"; }; tfToken = "{{ t }}"; }"#
        ),
        json!(["SSH_KEY", "TF_VAR_b", "TF_VAR_token"])
    );
    assert_eq!(
        eval(r#"lib.renderRequiredSecrets { deploySecrets = { TF_VAR_b = "t"; }; }"#),
        json!(["TF_VAR_b"])
    );
    assert_eq!(eval(r#"lib.renderRequiredSecrets { deploySecrets = { }; }"#), json!([]));
}

// ---- what the OpenBao agent renders -------------------------------------------------------

#[test]
fn secrets_and_credentials_become_agent_templates_readable_by_the_worker_group_only() {
    let templates = eval(
        r#"lib.agentTemplates {
             deploySecrets = { TF_VAR_hcloud_token = "{{ with secret \"secret/data/hc\" }}{{ .Data.data.token }}{{ end }}"; SSH_KEY = "k"; };
             credentials = { tfToken = "{{ .tf }}"; incusStoreSshKey = "{{ .ssh }}"; incusStoreSigningKey = "{{ .sign }}"; };
             group = "windmill";
           }"#,
    );
    let secrets_dir = jobenv_const("DEFAULT_SECRETS_DIR");
    let file = |destination: &str, contents: &str| json!({"contents": contents, "destination": destination, "perms": "0440", "group": "windmill", "error_on_missing_key": true});
    assert_eq!(
        templates,
        json!([
            file(&format!("{secrets_dir}/SSH_KEY"), "k"),
            file(
                &format!("{secrets_dir}/TF_VAR_hcloud_token"),
                "{{ with secret \"secret/data/hc\" }}{{ .Data.data.token }}{{ end }}"
            ),
            file("/run/incus-deploy/incus-store-signing.key", "{{ .sign }}"),
            file("/run/incus-deploy/incus-store-ssh.key", "{{ .ssh }}"),
            // A secrets env file of jobenv: one KEY=VALUE line.
            file("/run/incus-deploy/tf-token.env", "TF_VAR_token={{ .tf }}\n"),
        ])
    );
    // Credentials that are not configured are not rendered (nor waited for).
    let templates = eval(
        r#"lib.agentTemplates { deploySecrets = { }; credentials = { tfToken = null; incusStoreSshKey = "k"; }; group = "wm"; }"#,
    );
    assert_eq!(
        templates,
        json!([{"contents": "k", "destination": "/run/incus-deploy/incus-store-ssh.key", "perms": "0440", "group": "wm", "error_on_missing_key": true}])
    );
    assert_eq!(
        eval(r#"lib.agentTemplates { deploySecrets = { }; group = "wm"; }"#),
        json!([])
    );

    let rules = eval(r#"lib.tmpfilesRules { group = "windmill"; }"#);
    assert_eq!(
        rules,
        json!([
            "d /run/fediversity-windmill 0755 root root - -",
            format!("d {secrets_dir} 0750 root windmill - -"),
            "d /run/incus-deploy 0750 root windmill - -",
            "d /run/fediversity-windmill/backup 0700 root root - -",
            format!("d {} 0750 windmill windmill - -", jobenv_const("DEFAULT_STATE_DIR")),
            "d /run/windmill-ui-auth 0750 root nginx - -"
        ])
    );
}

#[test]
fn the_modules_own_agent_renders_its_templates_before_the_operators_and_runs_bao_agent_as_root() {
    let config = eval(
        r#"lib.agentConfig {
             settings = { vault.address = "http://127.0.0.1:8200"; template = [ { contents = "x"; destination = "/run/mine"; } ]; };
             templates = [ { contents = "s"; destination = "/run/fediversity-windmill/deploy-secrets/A"; } ];
           }"#,
    );
    assert_eq!(
        config,
        json!({"vault": {"address": "http://127.0.0.1:8200"}, "template": [
            {"contents": "s", "destination": "/run/fediversity-windmill/deploy-secrets/A"},
            {"contents": "x", "destination": "/run/mine"}
        ]})
    );
    assert_eq!(
        eval(r#"(lib.agentConfig { settings = { }; templates = [ ]; }).template"#),
        json!([])
    );
    let unit = eval(
        r#"lib.agentService { bao = "/nix/store/b/bin/bao"; kill = "/nix/store/c/bin/kill"; configFile = "/nix/store/f-agent.json"; }"#,
    );
    assert_eq!(
        unit["serviceConfig"]["ExecStart"],
        "/nix/store/b/bin/bao agent -config=/nix/store/f-agent.json"
    );
    assert_eq!(
        unit["serviceConfig"]["ExecReload"],
        "/nix/store/c/bin/kill -s HUP $MAINPID"
    );
    assert_eq!(unit["serviceConfig"]["Restart"], "on-failure");
    assert!(
        unit["serviceConfig"].get("User").is_none() && unit["serviceConfig"].get("DynamicUser").is_none(),
        "root: it sets the files' group"
    );
    assert_eq!(unit["wantedBy"], json!(["multi-user.target"]));
}

// ---- readiness --------------------------------------------------------------------------------

/// Runs lib.waitForFilesScript for `files` with bash; returns its exit code, stderr and how long
/// it took.
fn run_wait_script(files: &[PathBuf], timeout: u64, while_waiting: impl FnOnce()) -> (i32, String, Duration) {
    let list = files
        .iter()
        .map(|f| Value::from(f.display().to_string()).to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let script = eval(&format!(
        "lib.waitForFilesScript {{ files = [ {list} ]; timeoutSeconds = {timeout}; }}"
    ));
    let start = Instant::now();
    let child = Command::new("bash")
        .args(["-c", script.as_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while_waiting();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
    )
}

#[test]
fn the_worker_waits_until_every_declared_file_is_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let present = dir.path().join("TF_VAR_present");
    let missing = dir.path().join("tf token.env");
    std::fs::write(&present, "x").unwrap();

    // Everything there: ready at once.
    let (code, stderr, took) = run_wait_script(std::slice::from_ref(&present), 30, || {});
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert!(took < Duration::from_secs(5), "{took:?}");

    // The control: one missing, to the end of the timeout; the message names it (and not the other).
    let (code, stderr, took) = run_wait_script(&[present.clone(), missing.clone()], 2, || {});
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "fediversity-windmill: node not ready: not rendered after 2s: {}",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("TF_VAR_present"), "{stderr}");
    assert!(took >= Duration::from_secs(2), "{took:?}");

    // Rendered while it waits: ready then.
    let late = missing.clone();
    let (code, stderr, took) = run_wait_script(&[present, missing], 30, move || {
        std::thread::sleep(Duration::from_millis(1500));
        std::fs::write(&late, "TF_VAR_token=x\n").unwrap();
    });
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("waiting for the OpenBao agent to render"), "{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

// ---- how the worker starts and stops ------------------------------------------------------------

#[test]
fn a_stopping_worker_stops_taking_jobs_then_drains_then_exits_within_a_bound() {
    let grace = jobenv_grace();
    let lifecycle = eval(&format!(
        r#"lib.workerLifecycle {{ jobenv = "/j/bin/fediversity-jobenv"; kill = "/c/bin/kill"; waitForFiles = "/w/wait"; drainTimeoutSeconds = 120; readinessTimeoutSeconds = 45; graceSeconds = {grace}; }}"#
    ));
    let state_dir = jobenv_const("DEFAULT_STATE_DIR");
    // First the worker's own SIGTERM (it stops taking jobs; `-`: it may be gone already), then
    // the drain, which lets the running deploys finish for the wait, then cancels them through
    // jobenv. systemd's stop signal (the worker's second SIGTERM) only comes after ExecStop.
    assert_eq!(
        lifecycle["ExecStop"],
        json!([
            "-/c/bin/kill -s TERM $MAINPID",
            format!("/j/bin/fediversity-jobenv drain --state-dir {state_dir} --wait 120")
        ])
    );
    assert_eq!(lifecycle["KillMode"], "mixed");
    // jobenv makes each deploy's cgroup in the unit's subtree.
    assert_eq!(lifecycle["Delegate"], true);
    let margin = eval("lib.stopMarginSeconds").as_u64().unwrap();
    assert!(margin >= 10);
    assert_eq!(lifecycle["TimeoutStopSec"], format!("{}s", 120 + grace + margin));
    // Start: wait for the rendered files, then recover (best effort).
    assert_eq!(
        lifecycle["ExecStartPre"],
        json!([
            "/w/wait",
            format!("-/j/bin/fediversity-jobenv recover --state-dir {state_dir}")
        ])
    );
    assert_eq!(lifecycle["TimeoutStartSec"], "105s");
    // Without declared files, nothing to wait for.
    let lifecycle = eval(
        r#"lib.workerLifecycle { jobenv = "/j"; kill = "/k"; drainTimeoutSeconds = 1; readinessTimeoutSeconds = 1; }"#,
    );
    assert_eq!(
        lifecycle["ExecStartPre"],
        json!([format!("-/j recover --state-dir {state_dir}")])
    );
    // With `install`, first the sealed copy of jobenv, as root (`+`).
    let lifecycle = eval(
        r#"lib.workerLifecycle { jobenv = "/j"; kill = "/k"; install = "/i"; drainTimeoutSeconds = 1; readinessTimeoutSeconds = 1; }"#,
    );
    assert_eq!(
        lifecycle["ExecStartPre"],
        json!([
            "+/i -D -m 0111 -o root -g root /j /run/fediversity-jobenv/bin/fediversity-jobenv",
            format!("-/j recover --state-dir {state_dir}")
        ])
    );
    // The default grace is jobenv's.
    assert_eq!(eval("lib.jobenvGraceSeconds"), json!(grace));
}

#[test]
fn windmill_units_restart_after_5s_start_after_the_agent_and_report_to_otel_when_asked() {
    let units = eval(r#"lib.units { otelEndpoint = "http://otel.example:4318"; }"#);
    for (unit, role) in [
        ("windmill-server", "server"),
        ("windmill-worker", "worker"),
        ("windmill-worker-native", "worker-native"),
    ] {
        let u = &units[unit];
        assert_eq!(u["serviceConfig"]["RestartSec"], "5s", "{unit}");
        assert_eq!(u["after"], json!(["openbao-agent-default.service"]), "{unit}");
        let env = &u["environment"];
        assert_eq!(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://otel.example:4318", "{unit}");
        assert_eq!(env["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf");
        assert_eq!(env["OTEL_SERVICE_NAME"], format!("windmill-{role}"));
        assert_eq!(env["OTEL_RESOURCE_ATTRIBUTES"], "service.namespace=fediversity");
        for signal in ["OTEL_TRACING", "OTEL_METRICS", "OTEL_LOGS"] {
            assert_eq!(env[signal], "true", "{unit} {signal}");
        }
    }
    // Without an endpoint, no OTEL_ variable at all.
    let units = eval(r#"lib.units { agent = "vault-agent-default.service"; }"#);
    for unit in ["windmill-server", "windmill-worker", "windmill-worker-native"] {
        let env = units[unit]["environment"].as_object().unwrap();
        assert!(env.keys().all(|k| !k.starts_with("OTEL_")), "{unit}: {env:?}");
        // Another agent unit is followed.
        assert_eq!(units[unit]["after"], json!(["vault-agent-default.service"]), "{unit}");
    }
    assert_eq!(units["windmill-server"]["environment"], json!({}));
    assert_eq!(
        units["windmill-worker"]["wants"],
        json!(["vault-agent-default.service"])
    );
    assert!(
        units["fediversity-windmill-bootstrap"]["after"]
            .as_array()
            .unwrap()
            .contains(&json!("vault-agent-default.service"))
    );
}

#[test]
fn smtp_is_windmill_servers_and_its_password_comes_from_a_credential() {
    let env = eval(
        r#"lib.smtpEnvironment { host = "smtp.example.org"; port = 2525; username = "windmill"; from = "noreply@windmill.example.org"; }"#,
    );
    assert_eq!(
        env,
        json!({"SMTP_HOST": "smtp.example.org", "SMTP_PORT": "2525", "SMTP_USERNAME": "windmill", "SMTP_FROM": "noreply@windmill.example.org", "SMTP_TLS_IMPLICIT": "false"})
    );
    let env = eval(r#"lib.smtpEnvironment { host = "smtp.example.org"; from = "a@b"; tlsImplicit = true; }"#);
    assert_eq!(
        env,
        json!({"SMTP_HOST": "smtp.example.org", "SMTP_PORT": "587", "SMTP_FROM": "a@b", "SMTP_TLS_IMPLICIT": "true"})
    );
    assert_eq!(eval(r#"lib.smtpEnvironment { from = "a@b"; }"#), json!({}));

    let units = eval(
        r#"lib.units { smtp = lib.smtpEnvironment { host = "h"; from = "f"; }; smtpPasswordFile = "/run/keys/smtp"; }"#,
    );
    assert_eq!(units["windmill-server"]["environment"]["SMTP_HOST"], "h");
    assert_eq!(
        units["windmill-server"]["serviceConfig"]["LoadCredential"],
        json!(["smtp-password:/run/keys/smtp"])
    );
    for unit in ["windmill-worker", "windmill-worker-native"] {
        assert!(
            units[unit]["environment"].get("SMTP_HOST").is_none()
                && units[unit]["serviceConfig"].get("LoadCredential").is_none(),
            "{unit}"
        );
    }

    // The launcher, run with bash as systemd would: the credential becomes SMTP_PASSWORD (its
    // final newline dropped), the arguments pass on.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("smtp-password"), "pa ss'word\n").unwrap();
    let printer = dir.path().join("windmill");
    std::fs::write(&printer, "#!/bin/sh\nprintf '%s|%s' \"$SMTP_PASSWORD\" \"$*\"\n").unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&printer)
        .status()
        .unwrap();
    let script = eval(&format!(
        "lib.windmillLauncher {{ windmill = {}; }}",
        Value::from(printer.display().to_string())
    ));
    let out = Command::new("bash")
        .args(["-c", script.as_str().unwrap(), "launcher", "--flag"])
        .env("CREDENTIALS_DIRECTORY", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pa ss'word|--flag");
    // Without the credential it fails rather than start Windmill without a password.
    let out = Command::new("bash")
        .args(["-c", script.as_str().unwrap()])
        .env("CREDENTIALS_DIRECTORY", dir.path().join("none"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

#[test]
fn the_worker_lets_jobenv_finish_a_cancel_and_finds_it_and_nix_on_its_path() {
    let units = eval("lib.units { }");
    let worker = &units["windmill-worker"];
    let wait: u64 = worker["environment"]["MAX_WAIT_FOR_SIGINT"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // jobenv's default grace (SIGTERM to SIGKILL of the program tree) must fit well inside it.
    let grace = jobenv_grace();
    assert!(
        wait >= grace + 5,
        "MAX_WAIT_FOR_SIGINT={wait} leaves jobenv's grace of {grace}s too little room"
    );
    assert_eq!(worker["environment"]["HOME"], "/var/lib/windmill-worker");
    assert_eq!(
        eval("lib.workerPath"),
        json!(["nix", "openssh", "git", "bash", "fediversity-jobenv"])
    );
}

#[test]
fn jobs_get_jobenvs_settings_through_windmills_env_whitelist() {
    // Windmill clears a job's environment except for WHITELIST_ENVS: jobenv, exec'd by the
    // job, sees these worker variables, and its journal directory is writable by the worker.
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    let state_dir = jobenv_const("DEFAULT_STATE_DIR");
    let units = eval(
        r#"lib.units { nixShell = "/nix/store/abc-nix-2.28/bin/nix-shell"; secretsEnvFiles = [ lib.paths.tfTokenEnv "/run/other.env" ]; }"#,
    );
    let worker = &units["windmill-worker"];
    let env = &worker["environment"];
    assert_eq!(
        env["WHITELIST_ENVS"],
        "JOBENV_GRACE,JOBENV_LOCK_TIMEOUT,JOBENV_NIX_SHELL,JOBENV_REQUIRED_SECRETS,JOBENV_SECRETS_ENV_FILES,JOBENV_STATE_DIR"
    );
    for name in env["WHITELIST_ENVS"].as_str().unwrap().split(',') {
        assert!(env.get(name).is_some(), "{name} is whitelisted but not set");
        // Read by jobenv's command line (a clap `env` or a variable it looks up itself).
        assert!(reads(&cli, name), "jobenv does not read {name}");
    }
    assert_eq!(env["JOBENV_NIX_SHELL"], "/nix/store/abc-nix-2.28/bin/nix-shell");
    assert_eq!(env["JOBENV_STATE_DIR"], state_dir.as_str());
    assert_eq!(
        env["JOBENV_REQUIRED_SECRETS"],
        "/etc/fediversity-windmill/required-secrets.json"
    );
    assert_eq!(
        env["JOBENV_SECRETS_ENV_FILES"],
        "/run/incus-deploy/tf-token.env:/run/other.env"
    );
    // `-`: a state directory that is not there yet does not fail the worker's first start.
    assert_eq!(
        worker["serviceConfig"]["ReadWritePaths"],
        json!([format!("-{state_dir}")])
    );
    // Only the worker gets them.
    for unit in ["windmill-server", "windmill-worker-native"] {
        assert!(units[unit]["environment"].get("WHITELIST_ENVS").is_none(), "{unit}");
    }
    // Without a nix-shell or secrets env files given, neither is passed.
    let units = eval("lib.units { }");
    assert_eq!(
        units["windmill-worker"]["environment"]["WHITELIST_ENVS"],
        "JOBENV_GRACE,JOBENV_LOCK_TIMEOUT,JOBENV_REQUIRED_SECRETS,JOBENV_STATE_DIR"
    );
    // jobenv's defaults unless the node sets limits; no timeout variable without a timeout.
    assert_eq!(
        units["windmill-worker"]["environment"]["JOBENV_GRACE"],
        jobenv_grace().to_string()
    );
    assert_eq!(units["windmill-worker"]["environment"]["JOBENV_LOCK_TIMEOUT"], "0");
    assert!(units["windmill-worker"]["environment"].get("JOBENV_TIMEOUT").is_none());
    assert!(
        units["windmill-worker"]["environment"]
            .get("JOBENV_NIX_SHELL")
            .is_none()
    );
    assert!(
        units["windmill-worker"]["environment"]
            .get("JOBENV_SECRETS_ENV_FILES")
            .is_none()
    );
}

/// jobenv reads `name`: its command line names it, or (an OpenTelemetry variable) its telemetry
/// configuration does.
fn reads(cli: &str, name: &str) -> bool {
    let telemetry = std::fs::read_to_string(repo().join("jobenv/src/telemetry/config.rs")).unwrap();
    let quoted = format!("\"{name}\"");
    cli.contains(&quoted) || (name.starts_with("OTEL_") && telemetry.contains(&quoted))
}

#[test]
fn the_collector_reaches_every_windmill_unit_and_every_job_its_key_only_as_a_credential() {
    let units = eval(
        r#"lib.units { otel = { endpoint = "https://otel.example:4318"; headersFile = "/run/keys/otel-headers"; resourceAttributes = { "service.namespace" = "fediversity"; "deployment.environment.name" = "prod, eu=1 100%"; }; }; }"#,
    );
    let attributes = "deployment.environment.name=prod%2C%20eu%3D1%20100%25,service.namespace=fediversity";
    for (unit, role) in [
        ("windmill-server", "server"),
        ("windmill-worker", "worker"),
        ("windmill-worker-native", "worker-native"),
    ] {
        let env = &units[unit]["environment"];
        assert_eq!(
            env["OTEL_EXPORTER_OTLP_ENDPOINT"], "https://otel.example:4318",
            "{unit}"
        );
        assert_eq!(env["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf", "{unit}");
        assert_eq!(env["OTEL_SERVICE_NAME"], format!("windmill-{role}"), "{unit}");
        assert_eq!(env["OTEL_RESOURCE_ATTRIBUTES"], attributes, "{unit}");
        // The headers as a credential systemd reads, never a value of the configuration.
        assert_eq!(
            units[unit]["serviceConfig"]["LoadCredential"],
            json!(["otel-headers:/run/keys/otel-headers"]),
            "{unit}"
        );
        assert!(env.get("OTEL_EXPORTER_OTLP_HEADERS").is_none(), "{unit}");
    }
    // jobenv, in the worker's jobs: the endpoint, protocol and attributes, and the headers as the
    // path of the worker's credential; its own service name.
    let env = &units["windmill-worker"]["environment"];
    let whitelist: Vec<&str> = env["WHITELIST_ENVS"].as_str().unwrap().split(',').collect();
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_RESOURCE_ATTRIBUTES",
        "JOBENV_OTLP_HEADERS_FILE",
    ] {
        assert!(whitelist.contains(&name), "{name}: {whitelist:?}");
    }
    assert!(
        !whitelist.contains(&"OTEL_SERVICE_NAME"),
        "jobenv reports as a service of its own"
    );
    assert_eq!(
        env["JOBENV_OTLP_HEADERS_FILE"],
        "/run/credentials/windmill-worker.service/otel-headers"
    );
    // (jobenv decodes them back: telemetry::config's tests, with this very list.)
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    for name in &whitelist {
        assert!(reads(&cli, name), "jobenv does not read {name}");
    }

    // Without headers: no credential, no headers file for jobenv.
    let units = eval(r#"lib.units { otelEndpoint = "http://127.0.0.1:4318"; }"#);
    assert!(
        units["windmill-server"]["serviceConfig"]
            .get("LoadCredential")
            .is_none()
    );
    assert!(
        units["windmill-worker"]["environment"]
            .get("JOBENV_OTLP_HEADERS_FILE")
            .is_none()
    );
    assert!(
        units["windmill-worker"]["environment"]["WHITELIST_ENVS"]
            .as_str()
            .unwrap()
            .contains("OTEL_EXPORTER_OTLP_ENDPOINT")
    );
    // A headers file without an endpoint does nothing.
    let units = eval(r#"lib.units { otel.headersFile = "/run/keys/otel-headers"; }"#);
    assert!(
        units["windmill-worker"]["serviceConfig"]
            .get("LoadCredential")
            .is_none()
    );
    assert!(
        !units["windmill-worker"]["environment"]["WHITELIST_ENVS"]
            .as_str()
            .unwrap()
            .contains("OTLP")
    );
    // Another protocol: Windmill's units get it, jobenv nothing, and the evaluation says why.
    let units = eval(r#"lib.units { otel = { endpoint = "http://c:4317"; protocol = "grpc"; }; }"#);
    assert_eq!(
        units["windmill-server"]["environment"]["OTEL_EXPORTER_OTLP_PROTOCOL"],
        "grpc"
    );
    assert!(
        !units["windmill-worker"]["environment"]["WHITELIST_ENVS"]
            .as_str()
            .unwrap()
            .contains("OTEL_")
    );
    assert_eq!(
        eval(r#"lib.otelWarnings { endpoint = "http://c:4317"; protocol = "grpc"; }"#),
        json!([
            "otel.protocol is grpc: fediversity-jobenv exports http/protobuf only, so deploys are not exported (Windmill's units still get the variables)"
        ])
    );
    assert_eq!(eval(r#"lib.otelWarnings { endpoint = "http://c:4318"; }"#), json!([]));
}

#[test]
fn the_launcher_moves_the_collectors_headers_into_windmills_variable_lines_joined() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("otel-headers"),
        "authorization=Bearer%20k-1\nx-org=ops\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("smtp-password"), "pw\n").unwrap();
    let printer = dir.path().join("windmill");
    std::fs::write(
        &printer,
        "#!/bin/sh\nprintf '%s|%s|%s' \"$OTEL_EXPORTER_OTLP_HEADERS\" \"$SMTP_PASSWORD\" \"$*\"\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&printer).status().unwrap();
    let launch = |role: &str| {
        let script = eval(&format!(
            r#"lib.windmillLauncher {{ windmill = {}; credentials = lib.launchedCredentials {{ role = "{role}"; smtpPasswordFile = "/x"; otelHeadersFile = "/y"; }}; }}"#,
            Value::from(printer.display().to_string())
        ));
        let out = Command::new("bash")
            .args(["-c", script.as_str().unwrap(), "launcher", "--flag"])
            .env("CREDENTIALS_DIRECTORY", dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(launch("server"), "authorization=Bearer%20k-1,x-org=ops|pw|--flag");
    assert_eq!(launch("worker"), "authorization=Bearer%20k-1,x-org=ops||--flag");
    // The module's units: a launcher for each when the collector has headers.
    for unit in ["windmill-server", "windmill-worker", "windmill-worker-native"] {
        let exec = module(
            r#"s: s // { otel = { endpoint = "http://127.0.0.1:4318"; headersFile = "/run/keys/otel-headers"; }; }"#,
            &format!("h: h.config.systemd.services.{unit}.serviceConfig.ExecStart"),
        );
        assert!(exec.as_str().unwrap().ends_with("-with-credentials"), "{unit}: {exec}");
    }
    // Without headers (and SMTP), Windmill itself.
    let exec = module(
        r#"s: s // { otel.endpoint = "http://127.0.0.1:4318"; }"#,
        "h: h.config.systemd.services.windmill-worker.serviceConfig.ExecStart",
    );
    assert!(exec.as_str().unwrap().ends_with("/bin/windmill"), "{exec}");
    // The module warns when its deploys cannot be exported.
    let warnings = module(
        r#"s: s // { otel = { endpoint = "http://c:4317"; protocol = "grpc"; }; }"#,
        "h: h.config.warnings",
    );
    assert!(
        warnings.as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("services.fediversity-windmill: otel.protocol is grpc")),
        "{warnings}"
    );
}

#[test]
fn the_nodes_job_limits_reach_every_job_and_bound_the_cancel_and_the_stop() {
    let worker = module(
        r#"s: s // { jobs = { timeout = 3600; grace = 10; lockWait = 900; }; drainTimeout = 60; }"#,
        "h: h.config.systemd.services.windmill-worker",
    );
    let env = &worker["environment"];
    assert_eq!(
        (
            env["JOBENV_TIMEOUT"].as_str(),
            env["JOBENV_GRACE"].as_str(),
            env["JOBENV_LOCK_TIMEOUT"].as_str()
        ),
        (Some("3600"), Some("10"), Some("900"))
    );
    let whitelisted: Vec<&str> = env["WHITELIST_ENVS"].as_str().unwrap().split(',').collect();
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    for name in ["JOBENV_TIMEOUT", "JOBENV_GRACE", "JOBENV_LOCK_TIMEOUT"] {
        assert!(
            whitelisted.contains(&name),
            "{name} does not reach jobs: {whitelisted:?}"
        );
        // The names jobenv's `run` reads them by.
        assert!(cli.contains(&format!("env = \"{name}\"")), "jobenv reads no {name}");
    }
    // A longer grace: Windmill waits longer before it SIGKILLs a cancelled job's group, and the
    // stop is bounded by the drain, this grace and the margin.
    assert_eq!(env["MAX_WAIT_FOR_SIGINT"], "17");
    assert_eq!(worker["serviceConfig"]["TimeoutStopSec"], "100s");
    // The control: the defaults (jobenv's own).
    let worker = module("s: s", "h: h.config.systemd.services.windmill-worker");
    assert_eq!(worker["environment"]["MAX_WAIT_FOR_SIGINT"], "10");
    assert!(worker["environment"].get("JOBENV_TIMEOUT").is_none());
    assert_eq!(
        worker["serviceConfig"]["TimeoutStopSec"],
        format!("{}s", 300 + jobenv_grace() + 30)
    );
}

#[test]
fn cluster_mode_is_off_by_default_and_its_dsn_file_reaches_every_job_when_set() {
    let worker = module(
        r#"s: s // { cluster.dsnFile = "/run/fediversity-windmill/jobenv-cluster-dsn"; }"#,
        "h: h.config.systemd.services.windmill-worker",
    );
    let env = &worker["environment"];
    // The file's path, never its content: the DSN is a secret the node renders.
    assert_eq!(
        env["JOBENV_CLUSTER_DSN_FILE"],
        "/run/fediversity-windmill/jobenv-cluster-dsn"
    );
    let whitelisted: Vec<&str> = env["WHITELIST_ENVS"].as_str().unwrap().split(',').collect();
    assert!(
        whitelisted.contains(&"JOBENV_CLUSTER_DSN_FILE"),
        "the DSN file does not reach jobs: {whitelisted:?}"
    );
    // The name jobenv's `run` reads it by.
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    assert!(
        cli.contains("env = \"JOBENV_CLUSTER_DSN_FILE\""),
        "jobenv reads no JOBENV_CLUSTER_DSN_FILE"
    );
    // The daily prune prunes the shared journal's ended rows too.
    let prune = module(
        r#"s: s // { cluster.dsnFile = "/run/fediversity-windmill/jobenv-cluster-dsn"; }"#,
        "h: h.config.systemd.services.fediversity-jobenv-prune",
    );
    assert_eq!(
        prune["environment"]["JOBENV_CLUSTER_DSN_FILE"],
        "/run/fediversity-windmill/jobenv-cluster-dsn"
    );
    // The control: off unless set, and neither set nor whitelisted then.
    let prune = module("s: s", "h: h.config.systemd.services.fediversity-jobenv-prune");
    assert!(prune["environment"].get("JOBENV_CLUSTER_DSN_FILE").is_none(), "{prune}");
    let worker = module("s: s", "h: h.config.systemd.services.windmill-worker");
    assert!(worker["environment"].get("JOBENV_CLUSTER_DSN_FILE").is_none());
    assert!(
        !worker["environment"]["WHITELIST_ENVS"]
            .as_str()
            .unwrap()
            .contains("CLUSTER")
    );
    // A path the worker could not open from anywhere is refused when the node is evaluated.
    let result = module(
        r#"s: s // { cluster.dsnFile = "jobenv-cluster-dsn"; }"#,
        "h: { inherit (h) typeErrors; }",
    );
    assert_eq!(result["typeErrors"].as_array().map(Vec::len), Some(1), "{result}");
    assert!(
        result["typeErrors"][0].as_str().unwrap().starts_with("cluster.dsnFile"),
        "{result}"
    );
}

/// jobenv refuses, in cluster mode, a grace that cannot end before a lease can expire (every
/// job exit 2): the node's evaluation refuses it first, with the longest grace that fits.
#[test]
fn cluster_mode_refuses_a_grace_longer_than_its_leases_allow() {
    let fits = jobenv_facts()["defaults"]["clusterMaxGraceSeconds"].as_u64().unwrap();
    assert_eq!(
        fits, 4,
        "jobenv's default lease 15 s, less its renew deadline 10 s and 1 s"
    );
    let cluster = |grace: u64| {
        assertions(&format!(
            r#"s: s // {{ cluster.dsnFile = "/run/fediversity-windmill/jobenv-cluster-dsn"; jobs.grace = {grace}; }}"#
        ))
    };
    assert_eq!(
        cluster(fits + 1),
        [format!(
            "services.fediversity-windmill: jobs.grace is {} s, and cluster mode (cluster.dsnFile) takes at most {fits} s: a stop must end before the namespace's lease can expire on another node (jobenv would refuse every job with exit 2)",
            fits + 1
        )]
    );
    // The controls: the longest grace that fits, and a long grace without cluster mode.
    assert_eq!(cluster(fits), Vec::<String>::new());
    assert_eq!(assertions("s: s // { jobs.grace = 60; }"), Vec::<String>::new());
}

#[test]
fn cluster_modes_ca_file_reaches_every_job_and_the_prune_and_needs_a_dsn_file() {
    let both = r#"s: s // { cluster = { dsnFile = "/run/fediversity-windmill/jobenv-cluster-dsn"; caFile = "/etc/fediversity-windmill/db-ca.pem"; }; }"#;
    let worker = module(both, "h: h.config.systemd.services.windmill-worker");
    assert_eq!(
        worker["environment"]["JOBENV_CLUSTER_CA_FILE"],
        "/etc/fediversity-windmill/db-ca.pem"
    );
    let whitelisted: Vec<&str> = worker["environment"]["WHITELIST_ENVS"]
        .as_str()
        .unwrap()
        .split(',')
        .collect();
    assert!(
        whitelisted.contains(&"JOBENV_CLUSTER_CA_FILE"),
        "the CA file does not reach jobs: {whitelisted:?}"
    );
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    assert!(
        cli.contains("env = \"JOBENV_CLUSTER_CA_FILE\""),
        "jobenv reads no JOBENV_CLUSTER_CA_FILE"
    );
    let prune = module(both, "h: h.config.systemd.services.fediversity-jobenv-prune");
    assert_eq!(
        prune["environment"]["JOBENV_CLUSTER_CA_FILE"],
        "/etc/fediversity-windmill/db-ca.pem"
    );
    assert_eq!(assertions(both), Vec::<String>::new());
    // A CA without cluster mode is a mistake the node's evaluation names.
    let alone = assertions(r#"s: s // { cluster.caFile = "/etc/fediversity-windmill/db-ca.pem"; }"#);
    assert_eq!(
        alone,
        [
            "services.fediversity-windmill: cluster.caFile is set but cluster.dsnFile is not: the CA is for cluster mode's database"
        ]
    );
    // The control: without it, jobs get none.
    let worker = module(
        r#"s: s // { cluster.dsnFile = "/run/fediversity-windmill/jobenv-cluster-dsn"; }"#,
        "h: h.config.systemd.services.windmill-worker",
    );
    assert!(worker["environment"].get("JOBENV_CLUSTER_CA_FILE").is_none());
}

// ---- Windmill's package -----------------------------------------------------------------------

#[test]
fn the_node_windmill_keeps_only_the_python_and_bash_toolchains() {
    // nixpkgs' feature list of pkgs.windmill 1.601.1, as its package.nix sets it.
    let nixpkgs = r#"[ "agent_worker_server" "cloud" "csharp" "default" "deno_core" "dind" "embedding" "flow_testing" "gcp_trigger" "http_trigger" "jemalloc" "kafka" "license" "loki" "mcp" "mqtt_trigger" "nats" "oauth2" "openidconnect" "parquet" "php" "postgres_trigger" "python" "scoped_cache" "smtp" "sqlx" "sqs_trigger" "static_frontend" "websocket" "zip" ]"#;
    assert_eq!(
        eval(&format!("lib.trimWindmillFeatures {nixpkgs}")),
        json!(["default", "jemalloc", "python", "smtp", "sqlx", "static_frontend"])
    );
    // Never a feature the package does not have; `otel` stays where it has it.
    assert_eq!(
        eval(r#"lib.trimWindmillFeatures [ "python" "otel" "deno_core" ]"#),
        json!(["python", "otel"])
    );
    // Only the toolchain arguments the package's function takes are overridden.
    let overrides = eval(
        r#"lib.windmillToolchainOverrides { packageArgs = [ "lib" "go" "deno" "python312" "dotnet-sdk_9" "php" "bash" "uv" ]; stub = "STUB"; }"#,
    );
    assert_eq!(
        overrides,
        json!({"go": "STUB", "deno": "STUB", "dotnet-sdk_9": "STUB", "php": "STUB"})
    );
    // The stub answers for every program the wrapper points at.
    let programs = sorted(&eval("lib.windmillToolchainPrograms"));
    assert_eq!(programs, vec!["bun", "cargo", "deno", "dotnet", "go", "php", "pwsh"]);
    // The Python: the package's python3XY argument, the newest if several, else python3.
    assert_eq!(eval(r#"lib.windmillPythonAttr [ "go" "python312" "uv" ]"#), "python312");
    assert_eq!(
        eval(r#"lib.windmillPythonAttr [ "python39" "python313" "python312" ]"#),
        "python313"
    );
    assert_eq!(eval(r#"lib.windmillPythonAttr [ "python3" "go" ]"#), "python3");
    assert_eq!(eval(r#"lib.majorMinor "3.12.11""#), "3.12");
}

#[test]
fn the_ui_domain_defaults_to_jobs_under_the_parent_of_the_domain() {
    assert_eq!(
        eval(r#"lib.defaultUiDomain "windmill.example.org""#),
        "jobs.example.org"
    );
    assert_eq!(
        eval(r#"lib.defaultUiDomain "api.fedi.example.co.uk""#),
        "jobs.fedi.example.co.uk"
    );
    let error = eval_error(r#"lib.defaultUiDomain "localhost""#);
    assert!(
        error.contains("cannot derive jobs.<parent> from the domain \"localhost\"") && error.contains("set uiDomain"),
        "{error}"
    );
}

#[test]
fn deploy_env_json_is_the_node_keys_as_an_object_of_strings() {
    let rendered = eval(
        r#"lib.renderDeployEnv { DEPLOYMENT_ROOT = "/nix/store/abc-deployment"; DEPLOYMENT_NIXPKGS = "/nix/store/def-source"; STATE_BASE_ADDRESS = "https://state.example.org/tofu"; }"#,
    );
    assert_eq!(
        rendered,
        json!({"DEPLOYMENT_ROOT": "/nix/store/abc-deployment", "DEPLOYMENT_NIXPKGS": "/nix/store/def-source", "STATE_BASE_ADDRESS": "https://state.example.org/tofu"})
    );
    let error = eval_error("lib.renderDeployEnv { PORT = 8080; }");
    assert!(error.contains("deployEnv.PORT must be a string"), "{error}");
}

#[test]
fn deploy_keys_json_holds_the_operators_keys_and_the_structural_pins_node_only() {
    let rendered = eval(
        r#"lib.renderDeployKeys {
             DOMAIN = { description = "The domain"; default = "example.org"; };
             INTERNAL_HOSTS = { description = "Hosts, a JSON array"; default = null; };
             DNS_DOMAIN = { description = "Overridden by the operator"; default = "dns.example"; };
             PIN_EFFECT.nodeOnly = false;
           }"#,
    );
    let keys = rendered.as_object().unwrap();
    assert_eq!(
        rendered["DOMAIN"],
        json!({"description": "The domain", "default": "example.org"})
    );
    // A key without a default has none in the file (jobenv: "simply absent" when unset).
    assert_eq!(
        rendered["INTERNAL_HOSTS"],
        json!({"description": "Hosts, a JSON array"})
    );
    // A pin the operator describes stays node-only; one the operator opens keeps its description.
    assert_eq!(
        rendered["DNS_DOMAIN"],
        json!({"description": "Overridden by the operator", "default": "dns.example", "node_only": true})
    );
    assert!(
        rendered["PIN_EFFECT"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Structural pin: ")
    );
    assert!(rendered["PIN_EFFECT"].get("node_only").is_none(), "{rendered}");
    for pin in [
        "HOSTING_CONFIG",
        "SELF_MODULE_SOURCE",
        "OPERATOR_MODULE_SOURCE",
        "VERSION_LAYERS",
    ] {
        let description = rendered[pin]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{pin}: {rendered}"));
        assert!(description.starts_with("Structural pin: "), "{pin}: {description}");
        assert!(rendered[pin].get("default").is_none());
        assert_eq!(rendered[pin]["node_only"], true, "{pin}");
    }
    assert_eq!(keys.len(), 3 + 5);
    // The same through the merged declarations the module renders.
    let merged = eval(
        r#"lib.renderKeys (lib.declaredKeys { operator.PIN_EFFECT.nodeOnly = false; repository.NODE_SITE = { description = "s"; nodeOnly = true; }; })"#,
    );
    assert_eq!(merged["NODE_SITE"], json!({"description": "s", "node_only": true}));
    assert!(merged["PIN_EFFECT"].get("node_only").is_none());
    assert_eq!(merged["HOSTING_CONFIG"]["node_only"], true);
}

/// The fixture deployment repository (tests/nix/deployments), as a Nix string of its path.
pub(crate) fn fixture_repository() -> String {
    nix_string(repo().join("tests/nix/deployments"))
}

#[test]
fn the_repository_publishes_keys_in_each_shape_node_keys_node_only_and_attributes_from_its_shells() {
    let published = eval(&format!(
        r#"lib.repositoryPublished {{ outputs = lib.deploymentRepositoryOutputs {}; system = "x86_64-linux"; }}"#,
        fixture_repository()
    ));
    let keys = &published["keys"];
    let generated = "Declared by the deployment repository";
    assert_eq!(
        keys,
        &json!({
            "SSH_PRIVATE_KEY_FILE": {"description": "Path of the SSH key the deployment connects to its machines with", "default": null, "nodeOnly": false},
            // Defaults that are JSON values become their JSON text, as a payload's would.
            "INTERNAL_HOSTS": {"description": "Hosts of the deployment, a JSON array", "default": "[]", "nodeOnly": false},
            "PUBLISHED_HOSTS": {"description": "Host names the deployment serves, a JSON array", "default": null, "nodeOnly": false},
            "ENVIRONMENTS": {"description": "The deployment's environments, a JSON object", "default": "{\"production\":true}", "nodeOnly": false},
            "DOMAIN": {"description": "The domain the deployment serves", "default": "example.org", "nodeOnly": false},
            "TF_VAR_flavour": {"description": "The size of the machines OpenTofu creates", "default": null, "nodeOnly": false},
            "SSH_HOST": {"description": generated, "default": null, "nodeOnly": false},
            "STANDALONE_NAME": {"description": generated, "default": null, "nodeOnly": false},
            // nodeEnvKeys: node-only; its control key DEPLOYMENT_ROOT is left out.
            "NODE_REGION": {"description": "Where the node runs", "default": "eu", "nodeOnly": true},
            "NODE_SITE": {"description": "The site of the node", "default": null, "nodeOnly": true},
        })
    );
    assert_eq!(published["attributes"], json!(["mastodon", "peertube"]));
    assert_eq!(
        published["published"],
        json!([
            "deployEnvKeys",
            "standaloneEnvKeys",
            "deployEnvKeysByMethod",
            "nodeEnvKeys",
            "deploymentAttributeNames",
            "devShells.x86_64-linux"
        ])
    );
    assert_eq!(published["attributesFrom"], "lib.deploymentAttributeNames");
    // lib.deploymentAttributeNames, when published, is the list; another system has no shells.
    let explicit = eval(
        r#"(lib.repositoryPublished { outputs = { lib.deploymentAttributeNames = [ "only-this" ]; devShells.x86_64-linux.other = null; }; system = "x86_64-linux"; }).attributes"#,
    );
    assert_eq!(explicit, json!(["only-this"]));
    // A path value (what `deploymentRepository = ./deployments;` gives) is imported where it is,
    // not through a store copy evaluation may not have made.
    let as_path = eval(&format!(
        r#"(lib.repositoryPublished {{ outputs = lib.deploymentRepositoryOutputs {}; system = "x86_64-linux"; }}).attributes"#,
        repo().join("tests/nix/deployments").display()
    ));
    assert_eq!(as_path, json!(["mastodon", "peertube"]));
    // The list is the same on every system; the dev shells are per system, and another system
    // has none.
    let other = eval(&format!(
        r#"(lib.repositoryPublished {{ outputs = lib.deploymentRepositoryOutputs {}; system = "riscv64-linux"; }}).attributes"#,
        fixture_repository()
    ));
    assert_eq!(other, json!(["mastodon", "peertube"]));
    let other = eval(&format!(
        r#"(lib.repositoryPublished {{ outputs = (import {}) {{ attributes = "none"; }}; system = "riscv64-linux"; }}).attributes"#,
        fixture_repository()
    ));
    assert_eq!(other, json!([]));
    // A key listed both as a front-end key and a node key is node-only, with the description it has.
    let both = eval(
        r#"(lib.repositoryPublished { outputs.lib = { deployEnvKeys.REGION = "The region"; nodeEnvKeys = [ "REGION" ]; }; system = "x"; }).keys"#,
    );
    assert_eq!(
        both,
        json!({"REGION": {"description": "The region", "default": null, "nodeOnly": true}})
    );
    // A shape the module cannot read is named.
    let error = eval_error(r#"lib.repositoryPublished { outputs.lib.deployEnvKeys = { DOMAIN = 3; }; system = "x"; }"#);
    assert!(error.contains("deploymentRepository: lib.deployEnvKeys.DOMAIN is neither a description (a string) nor { description; default; }"), "{error}");
    let error = eval_error(r#"lib.repositoryPublished { outputs.lib.nodeEnvKeys = "DOMAIN"; system = "x"; }"#);
    assert!(
        error.contains("deploymentRepository: lib.nodeEnvKeys is neither a list of key names nor an attrset of keys"),
        "{error}"
    );
    // So is an attribute list that is not one, or a name jobenv would refuse as an ATTRIBUTE.
    for (list, problem) in [
        (
            r#""mastodon""#,
            "lib.deploymentAttributeNames is not a list of attribute names",
        ),
        (
            "[ 1 ]",
            "lib.deploymentAttributeNames lists something that is not an attribute name",
        ),
        (
            r#"[ "mastodon" "../up" ]"#,
            r#"lib.deploymentAttributeNames lists "../up", which is not an attribute name"#,
        ),
    ] {
        let error = eval_error(&format!(
            r#"(lib.repositoryPublished {{ outputs.lib.deploymentAttributeNames = {list}; system = "x"; }}).attributes"#
        ));
        assert!(error.contains(problem), "{list}: {error}");
    }
}

/// `lib.repositoryPublished` of the fixture repository publishing its attributes as `shape`
/// (tests/nix/deployments: "names", "former" or "none"), and what evaluation warns of.
fn published_in_shape(shape: &str) -> Value {
    eval(&format!(
        r#"let p = lib.repositoryPublished {{ outputs = (import {}) {{ attributes = "{shape}"; }}; system = "x86_64-linux"; }}; in {{ inherit (p) attributes attributesFrom; warnings = lib.repositoryWarnings p; }}"#,
        fixture_repository()
    ))
}

#[test]
fn the_attributes_are_the_seeds_list_else_every_dev_shell_with_a_warning() {
    // Seed 001's name: its list, not the dev shells (the developer's `default` is no deployment),
    // and nothing to warn of.
    assert_eq!(
        published_in_shape("names"),
        json!({"attributes": ["mastodon", "peertube"], "attributesFrom": "lib.deploymentAttributeNames", "warnings": []})
    );
    // Neither: every dev shell, and a warning that says so.
    let none = published_in_shape("none");
    assert_eq!(none["attributes"], json!(["default", "mastodon", "peertube"]));
    assert_eq!(none["attributesFrom"], "devShells.x86_64-linux");
    assert_eq!(
        none["warnings"],
        json!([
            "the deployment repository publishes no lib.deploymentAttributeNames (the list of its deployments): the module takes the name of every dev shell of devShells.x86_64-linux as a deployment attribute (default, mastodon, peertube), and a job may deploy any of them; publish lib.deploymentAttributeNames in the repository"
        ])
    );
    // The name this module read before: no publisher of it is known, so it is not read; the
    // dev shells are taken, and the warning says to rename it.
    let former = published_in_shape("former");
    assert_eq!(former["attributes"], json!(["default", "mastodon", "peertube"]));
    assert_eq!(
        former["warnings"],
        json!([
            "the deployment repository publishes no lib.deploymentAttributeNames (the list of its deployments): the module takes the name of every dev shell of devShells.x86_64-linux as a deployment attribute (default, mastodon, peertube), and a job may deploy any of them; publish lib.deploymentAttributeNames in the repository (its lib.deploymentAttributes is not read: rename it to lib.deploymentAttributeNames)"
        ])
    );
    // No shells and no list: nothing taken, nothing to warn of (the evaluation fails instead,
    // unless the options name attributes: see below).
    let bare = eval(
        r#"let p = lib.repositoryPublished { outputs.lib.deployEnvKeys = [ "A" ]; system = "x86_64-linux"; }; in { inherit (p) attributes attributesFrom; warnings = lib.repositoryWarnings p; }"#,
    );
    assert_eq!(bare, json!({"attributes": [], "attributesFrom": null, "warnings": []}));
}

#[test]
fn a_node_warns_when_its_repository_publishes_no_attribute_list() {
    let shape = |shape: &str| {
        let repository = format!(
            r#"((import {}) {{ attributes = "{shape}"; }}) // {{ outPath = "/nix/store/33333333333333333333333333333333-source"; }}"#,
            fixture_repository()
        );
        let result = module(&following(&repository, "{ }"), NODE_FILES);
        assert_eq!(result["assertions"], json!([]), "{shape}");
        let warnings: Vec<String> = strings(&result["warnings"])
            .into_iter()
            .filter(|w| w.contains("deploymentAttributeNames"))
            .collect();
        (result["attributes"].clone(), warnings)
    };
    let (attributes, warnings) = shape("names");
    assert_eq!(attributes, json!(["mastodon", "peertube"]));
    assert_eq!(warnings, Vec::<String>::new());
    for former in ["none", "former"] {
        let (attributes, warnings) = shape(former);
        assert_eq!(attributes, json!(["default", "mastodon", "peertube"]), "{former}");
        assert_eq!(warnings.len(), 1, "{former}: {warnings:?}");
        assert!(
            warnings[0].starts_with("services.fediversity-windmill: the deployment repository publishes no lib.deploymentAttributeNames (the list of its deployments): the module takes the name of every dev shell of devShells.x86_64-linux as a deployment attribute (default, mastodon, peertube)"),
            "{former}: {}",
            warnings[0]
        );
        assert_eq!(warnings[0].contains("rename it"), former == "former", "{}", warnings[0]);
    }
    // The operator's deploymentAttributes add to the dev shells; they do not end the warning,
    // which is about what the repository publishes.
    let repository = format!(
        r#"((import {}) {{ attributes = "none"; }}) // {{ outPath = "/nix/store/33333333333333333333333333333333-source"; }}"#,
        fixture_repository()
    );
    let result = module(
        &following(&repository, r#"{ deploymentAttributes = [ "extra" ]; }"#),
        NODE_FILES,
    );
    assert_eq!(
        result["attributes"],
        json!(["default", "extra", "mastodon", "peertube"])
    );
    assert!(
        result["warnings"]
            .to_string()
            .contains("publishes no lib.deploymentAttributeNames")
    );
}

#[test]
fn the_operators_keys_override_the_repositorys_field_by_field() {
    let keys = eval(
        r#"lib.declaredKeys {
             repository = { DOMAIN = { description = "The domain"; default = "example.org"; nodeOnly = false; }; NODE_SITE = { description = "Site"; default = null; nodeOnly = true; }; };
             operator = { DOMAIN = { description = null; default = "fedi.example"; nodeOnly = null; }; NODE_SITE.nodeOnly = false; EXTRA = { description = "Mine"; }; };
           }"#,
    );
    assert_eq!(
        keys["DOMAIN"],
        json!({"description": "The domain", "default": "fedi.example", "nodeOnly": false})
    );
    assert_eq!(
        keys["NODE_SITE"],
        json!({"description": "Site", "default": null, "nodeOnly": false})
    );
    assert_eq!(
        keys["EXTRA"],
        json!({"description": "Mine", "default": null, "nodeOnly": false})
    );
    assert_eq!(keys["HOSTING_CONFIG"]["nodeOnly"], true);
    // A key described nowhere is named.
    let problems = eval(r#"lib.undescribedKeyProblems (lib.declaredKeys { operator.LONELY.default = "x"; })"#);
    assert_eq!(
        problems,
        json!([
            "deployKeys.LONELY.description is not set and the deployment repository does not declare LONELY: say what the key means"
        ])
    );
    assert_eq!(
        eval(r#"lib.undescribedKeyProblems (lib.declaredKeys { operator.LONELY.description = "d"; })"#),
        json!([])
    );
}

#[test]
fn deployment_attributes_json_is_a_sorted_array_without_repeats() {
    assert_eq!(
        eval(r#"lib.renderDeploymentAttributes [ "web" "mastodon-vm" "web" "db" ]"#),
        json!(["db", "mastodon-vm", "web"])
    );
    assert_eq!(eval("lib.renderDeploymentAttributes [ ]"), json!([]));
}

/// `lib.bootstrapProblems` for the module's defaults (with the required options set) patched by
/// the Nix function `patch`, in a unit whose environment is `environment` (a Nix attrset) and
/// whose EnvironmentFile is `environment_file` (a Nix value).
fn bootstrap_problems(patch: &str, environment: &str, environment_file: &str) -> Value {
    eval(&format!(
        r#"let
             d = lib.bootstrapDefaults;
             bootstrap = ({patch}) (d // {{
               windmill = d.windmill // {{ adminPasswordFile = "/p"; databaseUrlFile = "/d"; }};
               openbao = d.openbao // {{ path = "fediversity/secret/windmill/apiToken"; }};
             }});
           in lib.bootstrapProblems {{ inherit bootstrap; unitEnvironment = {environment}; unitEnvironmentFile = {environment_file}; }}"#
    ))
}

#[test]
fn bootstrap_options_the_bootstrap_would_refuse_fail_the_evaluation() {
    let addr = r#"b: b // { openbao = b.openbao // { addr = "http://127.0.0.1:8100"; }; }"#;
    // The control: the defaults with an address.
    assert_eq!(bootstrap_problems(addr, "{ }", "null"), json!([]));

    // uiAuth.mode: nothing for others.
    for (mode, refused) in [
        ("0440", false),
        ("440", false),
        ("0640", false),
        ("0750", false),
        ("0444", true),
        ("0441", true),
        ("644", true),
    ] {
        let patch = format!(r#"b: (({addr}) b) // {{ uiAuth = b.uiAuth // {{ mode = "{mode}"; }}; }}"#);
        let problems = bootstrap_problems(&patch, "{ }", "null");
        let expected = if refused {
            json!([format!(
                "bootstrap.uiAuth.mode {mode} gives others access to the nginx include, which holds a superadmin token; the bootstrap refuses it (e.g. 0440)"
            )])
        } else {
            json!([])
        };
        assert_eq!(problems, expected, "mode {mode}");
    }

    // openbao.addr null: fine only when the unit gives the bootstrap BAO_ADDR or VAULT_ADDR.
    let missing = json!([
        "bootstrap.openbao.addr is null and the bootstrap unit's environment sets neither BAO_ADDR nor VAULT_ADDR; the bootstrap would refuse to start: set bootstrap.openbao.addr"
    ]);
    assert_eq!(bootstrap_problems("b: b", "{ }", "null"), missing);
    assert_eq!(
        bootstrap_problems("b: b", r#"{ PATH = "/bin"; BAO_ADDR = ""; }"#, "null"),
        missing
    );
    assert_eq!(bootstrap_problems("b: b", r#"{ BAO_ADDR = null; }"#, "null"), missing);
    assert_eq!(
        bootstrap_problems("b: b", r#"{ BAO_ADDR = "http://127.0.0.1:8100"; }"#, "null"),
        json!([])
    );
    assert_eq!(
        bootstrap_problems("b: b", r#"{ VAULT_ADDR = "http://127.0.0.1:8100"; }"#, "null"),
        json!([])
    );
    assert_eq!(
        bootstrap_problems("b: b", "{ }", r#""/run/keys/bootstrap.env""#),
        json!([])
    );

    // Windmill's own rules, and the label Windmill gives its sessions.
    let problems = bootstrap_problems(
        &format!(
            r#"b: (({addr}) b) // {{ token = b.token // {{ label = "session"; }}; workspace = {{ id = "a b"; name = "n"; folder = "a-b"; }}; }}"#
        ),
        "{ }",
        "null",
    );
    assert_eq!(
        problems,
        json!([
            "bootstrap.token.label \"session\" is a label Windmill gives its own tokens (login sessions, job tokens): revoking older tokens of the label would revoke those; the bootstrap refuses it",
            "bootstrap.workspace.id \"a b\" is not a Windmill workspace id (word characters, single hyphens between them)",
            "bootstrap.workspace.folder \"a-b\" is not a Windmill folder name (letters, digits and underscores)"
        ])
    );
    let fine = bootstrap_problems(
        &format!(r#"b: (({addr}) b) // {{ workspace = {{ id = "fedi-ops_2"; name = "n"; folder = "deploy_2"; }}; }}"#),
        "{ }",
        "null",
    );
    assert_eq!(fine, json!([]));

    // The UI's token label: never a session's, never the front-end token's (each run revokes
    // the older tokens of both labels).
    for (labels, expected) in [
        (
            r#"token = b.token // { label = "fediversity"; }; uiAuth = b.uiAuth // { tokenLabel = "session"; };"#,
            "bootstrap.uiAuth.tokenLabel \"session\" is a label Windmill gives its own tokens (login sessions, job tokens): revoking older tokens of the label would revoke those; the bootstrap refuses it",
        ),
        (
            r#"token = b.token // { label = "shared"; }; uiAuth = b.uiAuth // { tokenLabel = "shared"; };"#,
            "bootstrap.token.label and bootstrap.uiAuth.tokenLabel are both \"shared\": the bootstrap revokes the older tokens of each label, so the front-end's token and the UI's would revoke each other; give them different labels",
        ),
    ] {
        let problems = bootstrap_problems(&format!(r#"b: (({addr}) b) // {{ {labels} }}"#), "{ }", "null");
        assert_eq!(problems, json!([expected]), "{labels}");
    }
    let distinct = bootstrap_problems(
        &format!(
            r#"b: (({addr}) b) // {{ token = b.token // {{ label = "front"; }}; uiAuth = b.uiAuth // {{ tokenLabel = "ui"; }}; }}"#
        ),
        "{ }",
        "null",
    );
    assert_eq!(distinct, json!([]));
}

#[test]
fn an_unscoped_front_end_token_is_accepted_with_a_warning() {
    let select = "h: { warnings = builtins.filter (w: builtins.match \".*scopes.*\" w != null) h.config.warnings; token = (builtins.fromJSON h.config.environment.etc.\"fediversity-windmill/bootstrap.json\".source.text).token; }";
    let unscoped = module(
        "s: s // { bootstrap = s.bootstrap // { token.scopes = [ ]; }; }",
        select,
    );
    assert_eq!(
        unscoped["warnings"],
        json!([
            "services.fediversity-windmill: bootstrap.token.scopes is [ ]: the front-end's token (label \"fediversity\", stored in OpenBao) is unscoped, with its operator's full rights in the workspace: whoever holds it runs every script of the folder, which may read deploy secrets of the node. Leave it null for the scoped default"
        ])
    );
    assert_eq!(unscoped["token"]["scopes"], json!([]));
    // The controls: the default (null, the bootstrap's scopes) and explicit scopes warn of nothing.
    let default = module("s: s", select);
    assert_eq!(default["warnings"], json!([]));
    assert_eq!(
        default["token"],
        json!({"label": "fediversity", "revoke_previous": true, "scopes": null, "bind_to_workspace": true,
               "user_email": "frontend@fediversity.invalid", "username": "frontend"})
    );
    // Labels the bootstrap refuses (empty, a control character) are refused by their type.
    let typed = module(
        r#"s: s // { bootstrap = s.bootstrap // { token.label = ""; uiAuth.tokenLabel = "ui\nlabel"; }; }"#,
        "h: h.typeErrors",
    );
    assert_eq!(
        typed,
        json!([
            "bootstrap.token.label: not a string matching [^[:cntrl:]]+",
            "bootstrap.uiAuth.tokenLabel: not a string matching [^[:cntrl:]]+"
        ])
    );
    let scoped = module(
        r#"s: s // { bootstrap = s.bootstrap // { token = { scopes = [ "jobs:read" ]; bindToWorkspace = false; }; }; }"#,
        select,
    );
    assert_eq!(scoped["warnings"], json!([]));
    assert_eq!(
        scoped["token"],
        json!({"label": "fediversity", "revoke_previous": true, "scopes": ["jobs:read"], "bind_to_workspace": false,
               "user_email": "frontend@fediversity.invalid", "username": "frontend"})
    );
}

#[test]
fn the_database_is_one_dsn_without_a_secret_or_one_file() {
    let file = r#"b: b // { windmill = b.windmill // { databaseUrl = null; databaseUrlFile = "/run/keys/dsn"; }; openbao = b.openbao // { addr = "http://127.0.0.1:8100"; }; }"#;
    let url = |dsn: &str| {
        format!(
            r#"b: b // {{ windmill = b.windmill // {{ databaseUrl = {}; databaseUrlFile = null; }}; openbao = b.openbao // {{ addr = "http://127.0.0.1:8100"; }}; }}"#,
            json!(dsn)
        )
    };
    // The controls: a file, or a DSN without a password (the local socket).
    assert_eq!(bootstrap_problems(file, "{ }", "null"), json!([]));
    assert_eq!(
        bootstrap_problems(
            &url("host=/run/postgresql port=5432 dbname=windmill user=windmill"),
            "{ }",
            "null"
        ),
        json!([])
    );
    assert_eq!(
        bootstrap_problems(&url("postgresql://windmill@db.example.org/windmill"), "{ }", "null"),
        json!([])
    );
    // A password in the DSN itself, however written: it would be in the Nix store.
    for dsn in [
        "host=db.example.org user=windmill password=s3cret dbname=windmill",
        "host=db.example.org user=windmill password = s3cret",
        "postgresql://windmill:s3cret@db.example.org/windmill",
        "postgresql://windmill@db.example.org/windmill?sslmode=disable&password=s3cret",
    ] {
        assert_eq!(
            bootstrap_problems(&url(dsn), "{ }", "null"),
            json!([
                "bootstrap.windmill.databaseUrl holds a password, and would be in the world-readable Nix store: put that DSN in a file (bootstrap.windmill.databaseUrlFile); the bootstrap refuses it"
            ]),
            "{dsn}"
        );
    }
    // Neither, and both.
    assert_eq!(
        bootstrap_problems(
            r#"b: b // { windmill = b.windmill // { databaseUrlFile = null; }; openbao = b.openbao // { addr = "http://127.0.0.1:8100"; }; }"#,
            "{ }",
            "null"
        ),
        json!([
            "bootstrap.windmill.databaseUrlFile is not set and the Windmill database is not nixpkgs' local one (services.windmill.database.createLocally), for which the module sets bootstrap.windmill.databaseUrl: the bootstrap needs Windmill's database to set the superadmin's password; give it the DSN in a file"
        ])
    );
    assert_eq!(
        bootstrap_problems(
            r#"b: b // { windmill = b.windmill // { databaseUrl = "host=/run/postgresql user=windmill"; databaseUrlFile = "/run/keys/dsn"; }; openbao = b.openbao // { addr = "http://127.0.0.1:8100"; }; }"#,
            "{ }",
            "null"
        ),
        json!([
            "bootstrap.windmill.databaseUrl and bootstrap.windmill.databaseUrlFile are both set: give the bootstrap one DSN"
        ])
    );
    // The renderer writes the one that is set, never both.
    let rendered = |patch: &str| {
        eval(&format!(
            r#"let d = lib.bootstrapDefaults; in (lib.renderBootstrapConfig {{ scriptsDir = "/s"; bootstrap = ({patch}) (d // {{ windmill = d.windmill // {{ adminPasswordFile = "/p"; }}; openbao = d.openbao // {{ path = "p/secret/x"; }}; }}); }}).windmill"#
        ))
    };
    let by_file = rendered(file);
    assert_eq!(by_file["database_url_file"], "/run/keys/dsn");
    assert!(by_file.get("database_url").is_none(), "{by_file}");
    let by_url = rendered(&url("host=/run/postgresql port=5432 dbname=windmill user=windmill"));
    assert_eq!(
        by_url["database_url"],
        "host=/run/postgresql port=5432 dbname=windmill user=windmill"
    );
    assert!(by_url.get("database_url_file").is_none(), "{by_url}");
}

const DATABASE_ACCESS: &str = r#"h: {
  assertions = map (a: a.message) h.config.assertions;
  windmill = (builtins.fromJSON h.config.environment.etc."fediversity-windmill/bootstrap.json".source.text).windmill;
  url = h.cfg.bootstrap.windmill.databaseUrl;
  identMap = h.config.services.postgresql.identMap or null;
  authentication = h.config.services.postgresql.authentication or null;
}"#;

#[test]
fn on_nixpkgs_local_database_the_bootstrap_connects_over_the_socket_as_its_role_without_a_dsn_file() {
    // NODE sets no DSN: the harness's node has nixpkgs' defaults (createLocally, database and
    // user `windmill`, PostgreSQL on 5432).
    let local = module("s: s", DATABASE_ACCESS);
    assert_eq!(local["assertions"], json!([]));
    let dsn = "host=/run/postgresql port=5432 dbname=windmill user=windmill";
    assert_eq!(local["url"], dsn);
    assert_eq!(
        local["windmill"],
        json!({
            "url": "http://127.0.0.1:8001",
            "admin_email": "admin@windmill.dev",
            "admin_password_file": "/run/fediversity-windmill/admin-password",
            "default_password": "changeme",
            "database_url": dsn,
            "database_role": "windmill_admin",
        })
    );
    // Root (the bootstrap) and the role itself (Windmill's units, the backup's dump) may log in as
    // the role, by peer authentication, on that database and role only; before nixpkgs' rules.
    assert_eq!(
        local["identMap"],
        "fediversity-windmill root windmill\nfediversity-windmill windmill windmill\n"
    );
    assert_eq!(
        local["authentication"],
        "local windmill windmill peer map=fediversity-windmill\n"
    );
    // What lib.nix renders for these names, as the bootstrap's own test runs it against a real
    // PostgreSQL (bootstrap/tests/testsuite/local_database.rs).
    assert_eq!(
        eval(r#"lib.localDatabase { database = "windmill"; user = "windmill"; }"#),
        json!({"dsn": dsn, "identMap": local["identMap"], "authentication": local["authentication"]})
    );

    // nixpkgs' names and port as the node sets them.
    let other = module_on(
        "s: s",
        r#"{ services.windmill.database = { name = "wm"; user = "wm"; }; services.postgresql.settings.port = 5433; }"#,
        DATABASE_ACCESS,
    );
    assert_eq!(other["url"], "host=/run/postgresql port=5433 dbname=wm user=wm");
    assert_eq!(other["authentication"], "local wm wm peer map=fediversity-windmill\n");
    assert_eq!(
        other["identMap"],
        "fediversity-windmill root wm\nfediversity-windmill wm wm\n"
    );

    // A DSN file of the operator's replaces it, and the node's PostgreSQL is left as nixpkgs has it.
    let file = module(
        r#"s: s // { bootstrap = s.bootstrap // { windmill = s.bootstrap.windmill // { databaseUrlFile = "/run/keys/windmill-database-url"; }; }; }"#,
        DATABASE_ACCESS,
    );
    assert_eq!(file["assertions"], json!([]));
    assert_eq!(file["url"], Value::Null);
    assert_eq!(file["windmill"]["database_url_file"], "/run/keys/windmill-database-url");
    assert!(file["windmill"].get("database_url").is_none());
    assert_eq!(file["identMap"], Value::Null);
    assert_eq!(file["authentication"], Value::Null);
    // A name that would need quoting: the module cannot render the local DSN and says so; with
    // a DSN file of the operator's the node evaluates.
    let odd = r#"{ services.windmill.database = { name = "wind mill"; user = "wind mill"; }; }"#;
    let out = nix_instantiate(&module_expr_on("s: s", "[ ]", odd, DATABASE_ACCESS));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("services.windmill.database.name \"wind mill\" needs quoting in a DSN and in pg_hba.conf; with such a name, give the bootstrap its DSN yourself (bootstrap.windmill.databaseUrlFile)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let odd_with_file = module_on(
        r#"s: s // { bootstrap = s.bootstrap // { windmill = s.bootstrap.windmill // { databaseUrlFile = "/run/keys/dsn"; }; }; }"#,
        odd,
        DATABASE_ACCESS,
    );
    assert_eq!(odd_with_file["assertions"], json!([]));
    assert_eq!(odd_with_file["identMap"], Value::Null);
    // So does a DSN of the operator's own.
    let own = module(
        r#"s: s // { bootstrap = s.bootstrap // { windmill = s.bootstrap.windmill // { databaseUrl = "host=db.internal dbname=windmill user=bootstrap sslmode=disable"; }; }; }"#,
        DATABASE_ACCESS,
    );
    assert_eq!(own["assertions"], json!([]));
    assert_eq!(
        own["windmill"]["database_url"],
        "host=db.internal dbname=windmill user=bootstrap sslmode=disable"
    );
    assert_eq!(own["identMap"], Value::Null);

    // A database the node does not create and no DSN: the evaluation says what to give.
    let remote = module_on(
        "s: s",
        "{ services.windmill.database.createLocally = false; }",
        DATABASE_ACCESS,
    );
    assert_eq!(remote["url"], Value::Null);
    assert_eq!(remote["identMap"], Value::Null);
    assert_eq!(
        remote["assertions"],
        json!([
            "services.fediversity-windmill: bootstrap.windmill.databaseUrlFile is not set and the Windmill database is not nixpkgs' local one (services.windmill.database.createLocally), for which the module sets bootstrap.windmill.databaseUrl: the bootstrap needs Windmill's database to set the superadmin's password; give it the DSN in a file"
        ])
    );
    // And a password in the rendered DSN fails it.
    let leaked = module(
        r#"s: s // { bootstrap = s.bootstrap // { windmill = s.bootstrap.windmill // { databaseUrl = "postgresql://windmill:s3cret@127.0.0.1/windmill"; }; }; }"#,
        "h: map (a: a.message) h.config.assertions",
    );
    assert_eq!(
        leaked,
        json!([
            "services.fediversity-windmill: bootstrap.windmill.databaseUrl holds a password, and would be in the world-readable Nix store: put that DSN in a file (bootstrap.windmill.databaseUrlFile); the bootstrap refuses it"
        ])
    );
}

/// The bootstrap configuration of the manual (docs/operators/bootstrap.md, "Configuration"):
/// every field with its default. `null` marks a required field (or one with an environment
/// fallback); the module has no default for it.
fn spec_fields() -> Vec<(&'static str, Value)> {
    vec![
        ("/windmill/url", json!("http://127.0.0.1:8001")),
        ("/windmill/admin_email", json!("admin@windmill.dev")),
        ("/windmill/admin_password_file", Value::Null),
        ("/windmill/default_password", json!("changeme")),
        // One of these two (the DSN itself when it holds no secret, or a file).
        ("/windmill/database_url", Value::Null),
        ("/windmill/database_url_file", Value::Null),
        ("/windmill/database_role", json!("windmill_admin")),
        ("/workspace/id", json!("fediversity")),
        ("/workspace/name", json!("fediversity")),
        ("/workspace/folder", json!("fediversity")),
        ("/scripts/dir", Value::Null),
        ("/token/label", json!("fediversity")),
        ("/token/revoke_previous", json!(true)),
        // null: the bootstrap's default scopes (checked below).
        ("/token/scopes", Value::Null),
        ("/token/bind_to_workspace", json!(true)),
        ("/token/user_email", json!("frontend@fediversity.invalid")),
        ("/token/username", json!("frontend")),
        ("/settings", json!({"instance_python_version": "3.12"})),
        ("/openbao/addr", Value::Null),
        ("/openbao/token_file", Value::Null),
        ("/openbao/path", Value::Null),
        ("/openbao/field", json!("value")),
        ("/ui_auth/file", json!("/run/windmill-ui-auth/token.conf")),
        ("/ui_auth/owner", json!("root")),
        ("/ui_auth/group", json!("nginx")),
        ("/ui_auth/mode", json!("0440")),
        ("/ui_auth/label", json!("fediversity-ui")),
        (
            "/state_file",
            json!("/var/lib/fediversity-windmill/bootstrap-state.json"),
        ),
        ("/retry/login_attempts", json!(12)),
        ("/retry/delay_seconds", json!(5)),
        ("/retry/ready_timeout_seconds", json!(300)),
    ]
}

/// The leaves of a rendered configuration as JSON pointers (`settings` is one value).
fn leaves(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) if prefix != "/settings" => {
            for (key, child) in map {
                leaves(child, &format!("{prefix}/{key}"), out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

const MINIMAL_BOOTSTRAP: &str = r#"lib.renderBootstrapConfig {
  scriptsDir = "/nix/store/xyz-fediversity-windmill-scripts";
  bootstrap = lib.bootstrapDefaults // {
    windmill = lib.bootstrapDefaults.windmill // { adminPasswordFile = "/run/fediversity-windmill/admin-password"; databaseUrlFile = "/run/keys/windmill-dsn"; };
    openbao = lib.bootstrapDefaults.openbao // { path = "fediversity/secret/windmill/apiToken"; };
  };
}"#;

#[test]
fn the_bootstrap_configuration_has_every_field_of_the_spec_with_its_default() {
    let config = eval(MINIMAL_BOOTSTRAP);
    let mut rendered = Vec::new();
    leaves(&config, "", &mut rendered);
    rendered.sort();
    // Fields with an environment fallback are left out when not set, and so is the DSN this
    // node gives in a file.
    let mut expected: Vec<String> = spec_fields()
        .into_iter()
        .map(|(p, _)| p.to_owned())
        .filter(|p| p != "/openbao/addr" && p != "/openbao/token_file" && p != "/windmill/database_url")
        .collect();
    expected.sort();
    assert_eq!(rendered, expected, "{config:#}");
    for (pointer, default) in spec_fields() {
        if !default.is_null() {
            assert_eq!(config.pointer(pointer), Some(&default), "{pointer}");
        }
    }
    assert_eq!(
        config["windmill"]["admin_password_file"],
        "/run/fediversity-windmill/admin-password"
    );
    assert_eq!(config["windmill"]["database_url_file"], "/run/keys/windmill-dsn");
    assert_eq!(config["scripts"]["dir"], "/nix/store/xyz-fediversity-windmill-scripts");
    assert_eq!(config["openbao"]["path"], "fediversity/secret/windmill/apiToken");
    // Rendered as null: the bootstrap's default scopes, not an unscoped token.
    assert_eq!(config.pointer("/token/scopes"), Some(&Value::Null));
}

#[test]
fn the_bootstrap_configuration_renders_every_option_that_is_set() {
    let config = eval(
        r#"lib.renderBootstrapConfig {
             scriptsDir = "/s";
             bootstrap = {
               windmill = { url = "http://127.0.0.1:9001"; adminEmail = "root@example.org"; adminPasswordFile = "/p"; defaultPassword = "fresh"; databaseUrlFile = "/d"; databaseRole = "other_admin"; };
               workspace = { id = "ws"; name = "Workspace"; folder = "deploys"; };
               token = { label = "front"; revokePrevious = false; scopes = [ "jobs:read" ]; bindToWorkspace = false; userEmail = "deploys@example.org"; username = "deploys"; };
               settings = { instance_python_version = "3.12"; base_url = "https://jobs.example.org"; };
               openbao = { addr = "http://127.0.0.1:8100"; tokenFile = "/t"; path = "p/secret/x"; field = "token"; };
               uiAuth = { file = "/run/ui/token.conf"; owner = "root"; group = "www"; mode = "0400"; tokenLabel = "admins"; };
               retry = { loginAttempts = 3; delaySeconds = 1; readyTimeoutSeconds = 60; };
             };
           }"#,
    );
    assert_eq!(
        config,
        json!({
            "windmill": {"url": "http://127.0.0.1:9001", "admin_email": "root@example.org", "admin_password_file": "/p", "default_password": "fresh", "database_url_file": "/d", "database_role": "other_admin"},
            "workspace": {"id": "ws", "name": "Workspace", "folder": "deploys"},
            "scripts": {"dir": "/s"},
            "token": {"label": "front", "revoke_previous": false, "scopes": ["jobs:read"], "bind_to_workspace": false,
                      "user_email": "deploys@example.org", "username": "deploys"},
            "settings": {"instance_python_version": "3.12", "base_url": "https://jobs.example.org"},
            "openbao": {"addr": "http://127.0.0.1:8100", "token_file": "/t", "path": "p/secret/x", "field": "token"},
            "state_file": "/var/lib/fediversity-windmill/bootstrap-state.json",
            "ui_auth": {"file": "/run/ui/token.conf", "owner": "root", "group": "www", "mode": "0400", "label": "admins"},
            "retry": {"login_attempts": 3, "delay_seconds": 1, "ready_timeout_seconds": 60}
        })
    );
}

#[test]
fn a_missing_required_bootstrap_option_is_named() {
    // (The database's DSN is no longer one: the module has the local one to give, and an
    // assertion names what is missing, see the_database_is_one_dsn_without_a_secret_or_one_file.)
    let broken = MINIMAL_BOOTSTRAP.replace(r#"// { path = "fediversity/secret/windmill/apiToken"; }"#, "");
    assert_ne!(broken, MINIMAL_BOOTSTRAP);
    let error = eval_error(&broken);
    assert!(
        error.contains("services.fediversity-windmill.bootstrap.openbao.path is required"),
        "{error}"
    );
    // No admin password file: the one the node generates (FR-008).
    let generated =
        eval(&MINIMAL_BOOTSTRAP.replace(r#"adminPasswordFile = "/run/fediversity-windmill/admin-password";"#, ""));
    assert_eq!(
        generated["windmill"]["admin_password_file"],
        "/var/lib/fediversity-windmill/admin-password"
    );
}

/// Runs lib.adminPasswordScript with bash for the file `file`; returns its exit code and output.
fn run_password_script(file: &Path) -> (i32, String) {
    let script = eval(&format!(
        "lib.adminPasswordScript {{ file = {}; }}",
        Value::from(file.display().to_string())
    ));
    let out = Command::new("bash")
        .args(["-c", script.as_str().unwrap()])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn the_node_generates_the_superadmin_password_once_root_only_and_never_changes_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-password");
    let (code, output) = run_password_script(&file);
    assert_eq!(
        (code, output.as_str()),
        (0, ""),
        "it says nothing, the password least of all"
    );
    let password = std::fs::read_to_string(&file).unwrap();
    // 32 random bytes as hex (the seed's `openssl rand -hex 32`), one trailing newline.
    let hex = password.strip_suffix('\n').expect("one trailing newline");
    assert_eq!(hex.len(), 64, "{hex}");
    assert!(
        hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
        "{hex}"
    );
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!((meta.permissions().mode() & 0o777, meta.uid()), (0o400, 0), "root-only");
    // Nothing else is left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["admin-password"]);

    // Never changed again: a second run (a reboot, a rebuild) keeps it, as it keeps one the
    // operator wrote.
    let (code, _) = run_password_script(&file);
    assert_eq!(code, 0);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), password);
    let other = dir.path().join("operators");
    std::fs::write(&other, "chosen-by-the-operator\n").unwrap();
    assert_eq!(run_password_script(&other).0, 0);
    assert_eq!(std::fs::read_to_string(&other).unwrap(), "chosen-by-the-operator\n");
    // Another node (another run on an empty directory) gets another password.
    let second = dir.path().join("second");
    assert_eq!(run_password_script(&second).0, 0);
    assert_ne!(std::fs::read_to_string(&second).unwrap(), password);

    // An emptied file is refused, not silently replaced.
    let empty = dir.path().join("emptied");
    std::fs::write(&empty, "").unwrap();
    let (code, output) = run_password_script(&empty);
    assert_eq!(code, 1);
    assert!(
        output.contains("exists but is empty: remove it to have a new superadmin password generated"),
        "{output}"
    );
    assert_eq!(std::fs::read_to_string(&empty).unwrap(), "");
}

#[test]
fn without_an_admin_password_file_the_bootstrap_reads_the_generated_one_after_its_unit() {
    let select = r#"h: {
      file = (builtins.fromJSON h.config.environment.etc."fediversity-windmill/bootstrap.json".source.text).windmill.admin_password_file;
      units = h.config.systemd.services;
      watched = h.config.systemd.paths.fediversity-windmill-bootstrap-password.pathConfig.PathChanged;
    }"#;
    let generated = module(
        r#"s: s // { bootstrap = s.bootstrap // { windmill = builtins.removeAttrs s.bootstrap.windmill [ "adminPasswordFile" ]; }; }"#,
        select,
    );
    assert_eq!(generated["file"], "/var/lib/fediversity-windmill/admin-password");
    assert_eq!(generated["watched"], "/var/lib/fediversity-windmill/admin-password");
    let unit = &generated["units"]["fediversity-windmill-admin-password"];
    assert_eq!(unit["serviceConfig"]["Type"], "oneshot");
    assert_eq!(unit["serviceConfig"]["StateDirectory"], "fediversity-windmill");
    assert_eq!(unit["serviceConfig"]["StateDirectoryMode"], "0700");
    assert_eq!(unit["serviceConfig"]["PrivateNetwork"], true);
    assert!(unit["serviceConfig"].get("User").is_none(), "root");
    let exec = unit["serviceConfig"]["ExecStart"].as_str().unwrap();
    assert!(
        exec.ends_with("-fediversity-windmill-generate-admin-password"),
        "{exec}"
    );
    let bootstrap = &generated["units"]["fediversity-windmill-bootstrap"];
    assert!(
        bootstrap["requires"]
            .as_array()
            .unwrap()
            .contains(&json!("fediversity-windmill-admin-password.service"))
    );
    assert!(
        bootstrap["after"]
            .as_array()
            .unwrap()
            .contains(&json!("fediversity-windmill-admin-password.service"))
    );
    // The script the unit runs is lib.nix's, with coreutils' programs.
    let text = module(
        r#"s: s // { bootstrap = s.bootstrap // { windmill = builtins.removeAttrs s.bootstrap.windmill [ "adminPasswordFile" ]; }; }"#,
        "h: h.config.systemd.services.fediversity-windmill-admin-password.serviceConfig.ExecStart",
    );
    assert!(text.as_str().unwrap().starts_with("/nix/store/"), "{text}");
    // The control: with the operator's file, nothing is generated.
    let given = module("s: s", select);
    assert_eq!(given["file"], "/run/fediversity-windmill/admin-password");
    assert!(given["units"].get("fediversity-windmill-admin-password").is_none());
    assert!(
        given["units"]["fediversity-windmill-bootstrap"]
            .get("requires")
            .is_none()
    );
}

#[test]
fn the_bootstrap_unit_is_a_retrying_oneshot_after_windmill_and_the_agent() {
    let units = eval("lib.units { readyTimeoutSeconds = 120; }");
    let unit = &units["fediversity-windmill-bootstrap"];
    let service = &unit["serviceConfig"];
    assert_eq!(service["Type"], "oneshot");
    assert_eq!(service["RemainAfterExit"], true);
    assert_eq!(service["Restart"], "on-failure");
    assert_eq!(service["RestartSec"], "30s");
    assert_eq!(unit["startLimitIntervalSec"], 0);
    assert_eq!(unit["wantedBy"], json!(["multi-user.target"]));
    for dependency in ["windmill-server.service", "openbao-agent-default.service"] {
        assert!(
            unit["after"].as_array().unwrap().contains(&json!(dependency)),
            "after {dependency}"
        );
        assert!(
            unit["wants"].as_array().unwrap().contains(&json!(dependency)),
            "wants {dependency}"
        );
    }
    // It may wait the whole ready timeout for Windmill before systemd gives up on it.
    assert_eq!(service["TimeoutStartSec"], "420s");
}

#[test]
fn the_bootstrap_unit_is_hardened_but_keeps_what_it_needs() {
    let units = eval(r#"lib.units { uiAuthFile = "/run/nginx-includes/windmill.conf"; }"#);
    let service = &units["fediversity-windmill-bootstrap"]["serviceConfig"];
    for (key, value) in [
        ("ProtectSystem", json!("strict")),
        ("ProtectHome", json!("read-only")),
        ("NoNewPrivileges", json!(true)),
        ("PrivateTmp", json!(true)),
        ("PrivateDevices", json!(true)),
        ("ProtectKernelTunables", json!(true)),
        ("ProtectKernelModules", json!(true)),
        ("ProtectControlGroups", json!(true)),
        ("RestrictNamespaces", json!(true)),
        ("RestrictSUIDSGID", json!(true)),
        ("LockPersonality", json!(true)),
        ("MemoryDenyWriteExecute", json!(true)),
        ("SystemCallArchitectures", json!("native")),
        ("SystemCallFilter", json!(["@system-service"])),
        ("UMask", json!("0077")),
    ] {
        assert_eq!(service[key], value, "{key}");
    }
    // What it needs: the network (Windmill, OpenBao, PostgreSQL by TCP or socket), chown of the
    // include to the nginx group, reading secret files of other owners, a writable include dir.
    assert_eq!(
        service["RestrictAddressFamilies"],
        json!(["AF_UNIX", "AF_INET", "AF_INET6"])
    );
    assert!(service.get("PrivateNetwork").is_none() && service.get("IPAddressDeny").is_none());
    assert_eq!(
        service["CapabilityBoundingSet"],
        json!(["CAP_CHOWN", "CAP_DAC_READ_SEARCH"])
    );
    assert!(
        service["ReadWritePaths"]
            .as_array()
            .unwrap()
            .contains(&json!("/run/nginx-includes"))
    );
    assert!(
        service.get("DynamicUser").is_none() && service.get("User").is_none(),
        "it runs as root"
    );
}

#[test]
fn a_changed_admin_password_reruns_the_bootstrap_and_a_new_token_reloads_nginx() {
    let paths = eval(r#"lib.pathUnits { adminPasswordFile = "/run/fediversity-windmill/admin-password"; }"#);
    let password = &paths["fediversity-windmill-bootstrap-password"];
    assert_eq!(
        password["pathConfig"]["PathChanged"],
        "/run/fediversity-windmill/admin-password"
    );
    assert_eq!(
        password["pathConfig"]["Unit"],
        "fediversity-windmill-bootstrap-rerun.service"
    );
    assert_eq!(password["wantedBy"], json!(["multi-user.target"]));
    let ui = &paths["fediversity-windmill-ui-auth"];
    assert_eq!(ui["pathConfig"]["PathChanged"], "/run/windmill-ui-auth/token.conf");
    assert_eq!(ui["pathConfig"]["Unit"], "fediversity-windmill-nginx-reload.service");
    let units = eval("lib.units { }");
    for unit in [
        "fediversity-windmill-bootstrap-rerun",
        "fediversity-windmill-nginx-reload",
    ] {
        assert_eq!(units[unit]["serviceConfig"]["Type"], "oneshot", "{unit}");
    }
}

#[test]
fn nix_trusts_the_worker_pins_nixpkgs_and_uses_no_downloaded_registry() {
    let settings = eval(r#"lib.nixSettings { user = "windmill"; }"#);
    // Root is nixpkgs' own definition (its nix module trusts root), merged in front of this
    // one on a node (the_module_merges_with_nixpkgs_nix_settings_without_listing_root_twice).
    assert_eq!(
        settings,
        json!({"trusted-users": ["windmill"], "flake-registry": "", "experimental-features": ["nix-command", "flakes"]})
    );
    assert_eq!(
        eval(
            r#"lib.registry (lib.deploymentNixpkgs { DEPLOYMENT_ROOT = "/r"; DEPLOYMENT_NIXPKGS = "/nix/store/aaa-source"; })"#
        ),
        json!({"nixpkgs": {"to": {"type": "path", "path": "/nix/store/aaa-source"}}})
    );
    assert_eq!(
        eval(r#"lib.deploymentNixpkgs { NIXPKGS = "/nix/store/bbb-source"; }"#),
        "/nix/store/bbb-source"
    );
    assert_eq!(eval("lib.registry (lib.deploymentNixpkgs { })"), json!({}));
}

// ---- nginx: the API, the fail-closed UI, TLS ----------------------------------------------------

#[test]
fn the_ui_is_closed_unless_an_identity_layer_or_the_loud_opt_in_is_configured() {
    for (args, mode, problems) in [
        ("{ }", "closed", json!([])),
        (
            r#"{ forwardAuth = { authzUrl = "http://a"; }; }"#,
            "protected",
            json!([]),
        ),
        (
            r#"{ nginxAuthConfig = "allow 10.0.0.0/8; deny all;"; }"#,
            "protected",
            json!([]),
        ),
        (
            r#"{ forwardAuth = { authzUrl = "http://a"; }; nginxAuthConfig = "deny all;"; }"#,
            "protected",
            json!([]),
        ),
        ("{ openWithoutAuthentication = true; }", "open", json!([])),
        (
            r#"{ forwardAuth = { authzUrl = "http://a"; }; openWithoutAuthentication = true; }"#,
            "protected",
            json!([
                "ui.dangerouslyServeWithoutAuthentication is set together with an identity layer (ui.forwardAuth or ui.nginxAuthConfig): choose one"
            ]),
        ),
    ] {
        let access = eval(&format!("lib.uiAccess {args}"));
        assert_eq!(access, json!({"mode": mode, "problems": problems}), "{args}");
    }
}

fn ui_locations(args: &str) -> Value {
    eval(&format!(
        r#"lib.uiLocations ({{ upstream = "http://127.0.0.1:8001"; }} // {args})"#
    ))
}

#[test]
fn a_closed_ui_answers_403_and_never_adds_the_token() {
    let closed = ui_locations("{ }");
    assert_eq!(closed, json!({"/": {"return": "403"}}));
    assert!(!closed.to_string().contains("include"), "{closed}");
    // The control: the open UI (VM tests, laptops) does include the token.
    let open = ui_locations("{ openWithoutAuthentication = true; }");
    assert_eq!(
        open,
        json!({"/": {"proxyPass": "http://127.0.0.1:8001", "proxyWebsockets": true, "extraConfig": "include /run/windmill-ui-auth/*.conf;"}})
    );
}

#[test]
fn the_forward_auth_asks_the_portal_before_the_token_is_added_and_the_portal_never_sees_it() {
    let ui = ui_locations(
        r#"{ forwardAuth = { authzUrl = "http://127.0.0.1:9091/api/authz/auth-request"; enable = true; policy = "one_factor"; }; uiAuthFile = "/run/ui/token.conf"; }"#,
    );
    let root = &ui["/"];
    assert_eq!(root["proxyPass"], "http://127.0.0.1:8001");
    // Websocket upgrades are requests of `/` too: they pass the same auth first.
    assert_eq!(root["proxyWebsockets"], true);
    let lines: Vec<&str> = root["extraConfig"].as_str().unwrap().lines().collect();
    assert_eq!(
        lines,
        vec![
            "auth_request /internal/fediversity-windmill/authz;",
            "auth_request_set $fediversity_windmill_signin $upstream_http_location;",
            "error_page 401 =302 $fediversity_windmill_signin;",
            "include /run/ui/*.conf;",
        ]
    );
    let subrequest = ui["= /internal/fediversity-windmill/authz"]["extraConfig"]
        .as_str()
        .unwrap();
    let sublines: Vec<&str> = subrequest.lines().collect();
    assert_eq!(sublines[0], "internal;");
    assert_eq!(sublines[1], "proxy_pass http://127.0.0.1:9091/api/authz/auth-request;");
    for header in [
        "X-Original-URL $scheme://$http_host$request_uri;",
        "X-Original-Method $request_method;",
        "X-Forwarded-For $remote_addr;",
        "Content-Length \"\";",
    ] {
        assert!(
            sublines.contains(&format!("proxy_set_header {header}").as_str()),
            "{header}: {subrequest}"
        );
    }
    assert!(sublines.contains(&"proxy_pass_request_body off;"));
    assert!(
        !subrequest.contains("include"),
        "the portal would get the token: {subrequest}"
    );
    assert_eq!(ui.as_object().unwrap().len(), 2);

    // A sign-in page of our own, and another layer's lines after the forward auth's.
    let ui = ui_locations(
        r#"{ forwardAuth = { authzUrl = "http://a"; signInUrl = "https://auth.example.org/"; }; nginxAuthConfig = "allow 10.0.0.0/8;\ndeny all;"; }"#,
    );
    let lines: Vec<&str> = ui["/"]["extraConfig"].as_str().unwrap().lines().collect();
    assert_eq!(
        lines,
        vec![
            "auth_request /internal/fediversity-windmill/authz;",
            "error_page 401 =302 https://auth.example.org/?rd=$scheme://$http_host$request_uri;",
            "allow 10.0.0.0/8;",
            "deny all;",
            "include /run/windmill-ui-auth/*.conf;",
        ]
    );
    // The raw hook alone: no subrequest location.
    let ui = ui_locations(r#"{ nginxAuthConfig = "auth_request /oauth2/auth;"; }"#);
    assert_eq!(ui.as_object().unwrap().keys().collect::<Vec<_>>(), vec!["/"]);
    assert_eq!(
        ui["/"]["extraConfig"],
        "auth_request /oauth2/auth;\ninclude /run/windmill-ui-auth/*.conf;"
    );
}

#[test]
fn the_portals_rule_is_the_seeds_policy_and_group() {
    assert_eq!(
        eval(r#"lib.autheliaAccessControlRule { uiDomain = "jobs.example.org"; }"#),
        json!({"domain": ["jobs.example.org"], "policy": "one_factor", "subject": ["group:fediversity-admins"]})
    );
    assert_eq!(
        eval(
            r#"lib.autheliaAccessControlRule { uiDomain = "j"; policy = "two_factor"; allowedGroups = [ "a" "b" ]; }"#
        ),
        json!({"domain": ["j"], "policy": "two_factor", "subject": ["group:a", "group:b"]})
    );
}

#[test]
fn both_names_get_tls_the_nixos_way() {
    assert_eq!(
        eval("lib.tlsSettings { }"),
        json!({"forceSSL": true, "enableACME": true})
    );
    assert_eq!(
        eval(r#"lib.tlsSettings { useACMEHost = "example.org"; }"#),
        json!({"forceSSL": true, "useACMEHost": "example.org"})
    );
    assert_eq!(
        eval(r#"lib.tlsSettings { certificate = "/run/keys/c.pem"; certificateKey = "/run/keys/k.pem"; }"#),
        json!({"forceSSL": true, "sslCertificate": "/run/keys/c.pem", "sslCertificateKey": "/run/keys/k.pem"})
    );
    assert_eq!(eval("lib.tlsSettings { enable = false; }"), json!({}));
    assert_eq!(eval("lib.tlsProblems { }"), json!([]));
    assert_eq!(
        eval(r#"lib.tlsProblems { certificate = "/c"; }"#),
        json!(["tls.certificate and tls.certificateKey go together: set both or neither"])
    );
    assert_eq!(
        eval(r#"lib.tlsProblems { certificate = "/c"; certificateKey = "/k"; useACMEHost = "e"; }"#),
        json!(["tls.certificate and tls.useACMEHost are two sources of one certificate: set one"])
    );
    assert_eq!(
        eval(r#"lib.tlsProblems { enable = false; useACMEHost = "e"; }"#),
        json!(["tls.enable is false but a certificate is configured (tls.certificate or tls.useACMEHost)"])
    );
    // A half-set certificate gets no TLS settings at all (nginx would fail on its null first).
    assert_eq!(eval(r#"lib.tlsSettings { certificate = "/c"; }"#), json!({}));
    assert_eq!(eval(r#"lib.tlsSettings { certificateKey = "/k"; }"#), json!({}));
    // The settings never depend on which certificates the node has (nixpkgs' nginx derives
    // those from the settings: a dependency back would recurse); only the assertion does.
    assert_eq!(
        eval(r#"lib.tlsSettings { useACMEHost = "e"; acmeCerts = [ "other" ]; }"#),
        json!({"forceSSL": true, "useACMEHost": "e"})
    );
    assert_eq!(
        eval(r#"lib.tlsSettings { useACMEHost = "e"; acmeCerts = throw "the settings read the certificates"; }"#),
        json!({"forceSSL": true, "useACMEHost": "e"})
    );
    assert_eq!(
        eval(r#"lib.tlsProblems { useACMEHost = "e"; acmeCerts = [ "e" ]; }"#),
        json!([])
    );
}

#[test]
fn nginx_serves_only_the_api_on_the_domain_which_is_the_default_server() {
    let hosts = eval(
        r#"lib.virtualHosts { domain = "windmill.example.org"; uiDomain = "jobs.example.org"; ui = { "/".return = "403"; }; tls = lib.tlsSettings { }; }"#,
    );
    assert_eq!(hosts.as_object().unwrap().len(), 2);
    assert_eq!(
        hosts["windmill.example.org"],
        json!({"default": true, "forceSSL": true, "enableACME": true, "locations": {"/": {"return": "404"}, "/api/": {"proxyPass": "http://127.0.0.1:8001"}}})
    );
    // The UI is never the default server: nginx picks it only for its own name.
    assert_eq!(
        hosts["jobs.example.org"],
        json!({"forceSSL": true, "enableACME": true, "locations": {"/": {"return": "403"}}})
    );

    let hosts = eval(r#"lib.virtualHosts { domain = "a.example"; uiDomain = "jobs.example"; port = 9001; ui = { }; }"#);
    assert_eq!(
        hosts["a.example"]["locations"]["/api/"]["proxyPass"],
        "http://127.0.0.1:9001"
    );
    assert_eq!(eval("lib.upstream 9001"), "http://127.0.0.1:9001");

    let error = eval_error(r#"lib.virtualHosts { domain = "same.example"; uiDomain = "same.example"; ui = { }; }"#);
    assert!(error.contains("domain and uiDomain must differ"), "{error}");
}

// ---- the module itself (default.nix), through tests/nix/module-harness.nix --------------------

/// What nixpkgs' services.windmill (nixos/modules/services/web-apps/windmill.nix) defines for
/// its three units, at normal priority: the module's definitions must merge with these, and
/// win where they differ (ExecStart), as they would on a node.
pub(crate) const NIXPKGS_WINDMILL: &str = r#"{
  systemd.services = let
    sc = { DynamicUser = true; User = "windmill"; ExecStart = "/nix/store/00000000000000000000000000000000-windmill-nixpkgs/bin/windmill"; Restart = "always"; };
  in {
    windmill-server = { description = "Windmill server"; after = [ "network.target" ]; serviceConfig = sc // { StateDirectory = "windmill"; }; environment = { PORT = "8001"; MODE = "server"; RUST_LOG = "info"; }; };
    windmill-worker = { description = "Windmill worker"; after = [ "network.target" ]; serviceConfig = sc // { StateDirectory = "windmill-worker"; }; environment = { MODE = "worker"; WORKER_GROUP = "default"; KEEP_JOB_DIR = "false"; }; };
    windmill-worker-native = { description = "Windmill worker native"; after = [ "network.target" ]; serviceConfig = sc // { StateDirectory = "windmill-worker-native"; }; environment = { MODE = "worker"; WORKER_GROUP = "native"; }; };
  };
}"#;

/// A node's settings: what a minimal configuration sets.
pub(crate) const NODE: &str = r#"{
  domain = "windmill.example.org";
  deployEnv = { DEPLOYMENT_ROOT = "/nix/store/00000000000000000000000000000000-deployments"; STATE_BASE_ADDRESS = "https://state.example.org/tofu"; };
  deployKeys.MESSAGE.description = "A message";
  deploymentAttributes = [ "demo" ];
  deploySecrets.TF_VAR_hcloud_token = "{{ with secret \"secret/data/hc\" }}{{ .Data.data.token }}{{ end }}";
  bootstrap = {
    windmill.adminPasswordFile = "/run/fediversity-windmill/admin-password";
    openbao = { addr = "http://127.0.0.1:8200"; path = "fediversity/secret/windmill/apiToken"; };
  };
}"#;

/// What nixpkgs' nix module (nixos/modules/config/nix.nix) defines in `nix.settings` at normal
/// priority, whatever the node says.
pub(crate) const NIXPKGS_NIX: &str = r#"{ nix.settings = { trusted-users = [ "root" ]; }; }"#;

fn module_expr(patch: &str, also: &str, select: &str) -> String {
    module_expr_on(patch, also, "{ }", select)
}

/// `module_expr` on a node whose other configuration (what the module reads of it) is
/// `node_config`, a Nix attrset.
fn module_expr_on(patch: &str, also: &str, node_config: &str, select: &str) -> String {
    format!(
        r#"let
             h = import {harness} {{ settings = ({patch}) {NODE}; alsoDefined = [ {NIXPKGS_WINDMILL} {NIXPKGS_NIX} ] ++ {also}; nodeConfig = {node_config}; }};
           in ({select}) h"#,
        harness = nix_string(repo().join("tests/nix/module-harness.nix")),
    )
}

/// `module` on a node whose other configuration is `node_config`.
fn module_on(patch: &str, node_config: &str, select: &str) -> Value {
    let out = nix_instantiate(&module_expr_on(patch, "[ ]", node_config, select));
    assert!(
        out.status.success(),
        "{patch}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `select` (a Nix function of the harness's result) of the module evaluated for NODE patched
/// by `patch` (a Nix function of the settings).
fn module(patch: &str, select: &str) -> Value {
    let out = nix_instantiate(&module_expr(patch, "[ ]", select));
    assert!(
        out.status.success(),
        "{patch}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn module_error(patch: &str, also: &str, select: &str) -> String {
    let out = nix_instantiate(&module_expr(patch, also, select));
    assert!(
        !out.status.success(),
        "{patch} evaluated to {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assertions(patch: &str) -> Vec<String> {
    strings(&module(patch, "h: map (a: a.message) h.config.assertions"))
}

#[test]
fn a_minimal_node_evaluates_with_every_option_typed_and_described() {
    let result = module(
        "s: s",
        "h: { inherit (h) typeErrors unknownSettings options; inherit (h.config) assertions warnings; }",
    );
    assert_eq!(result["typeErrors"], json!([]));
    assert_eq!(result["unknownSettings"], json!([]));
    assert_eq!(result["assertions"], json!([]));
    let options = result["options"].as_object().unwrap();
    assert!(options.len() > 60, "{}", options.len());
    for (name, doc) in options {
        assert_eq!(doc["hasDescription"], true, "{name} has no description");
    }
    for read_only in ["openbaoAgentTemplates", "ui.forwardAuth.accessControlRule"] {
        assert_eq!(options[read_only]["readOnly"], true, "{read_only}");
    }
    // The UI is closed, and evaluation says so.
    assert_eq!(
        result["warnings"],
        json!([
            "services.fediversity-windmill: the admin UI on jobs.example.org answers 403 to every\nrequest: no identity layer is configured (ui.forwardAuth.enable, ui.nginxAuthConfig).\n"
        ])
    );
    // The harness's own checks are not vacuous: a setting of the wrong type and an unknown one.
    let result = module(
        "s: s // { drainTimeout = \"5\"; drianTimeout = 5; }",
        "h: { inherit (h) typeErrors unknownSettings; }",
    );
    assert_eq!(
        result,
        json!({"typeErrors": ["drainTimeout: not a positive int"], "unknownSettings": ["drianTimeout"]})
    );
    // The old name of the raw hook still works.
    let imports = module("s: s", "h: h.imports");
    assert_eq!(
        imports,
        json!([{"_type": "renamed", "from": ["services", "fediversity-windmill", "uiForwardAuth"], "to": ["services", "fediversity-windmill", "ui", "nginxAuthConfig"]}])
    );
}

#[test]
fn the_modules_definitions_win_over_nixpkgs_windmill_and_merge_with_it() {
    let units = module("s: s", "h: h.config.systemd.services");
    let trimmed = "/nix/store/00000000000000000000000000000000-windmill/bin/windmill";
    for unit in ["windmill-server", "windmill-worker", "windmill-worker-native"] {
        assert_eq!(units[unit]["serviceConfig"]["ExecStart"], trimmed, "{unit}");
        assert_eq!(units[unit]["serviceConfig"]["Restart"], "always", "{unit}");
        // nixpkgs' entries first: its modules come before this one, as on a node.
        assert_eq!(
            units[unit]["after"],
            json!(["network.target", "openbao-agent-default.service"]),
            "{unit}"
        );
    }
    assert_eq!(units["windmill-worker"]["environment"]["WORKER_GROUP"], "default");
    assert_eq!(
        units["windmill-worker"]["environment"]["JOBENV_STATE_DIR"],
        jobenv_const("DEFAULT_STATE_DIR")
    );
    // The control: a definition that differs at the same priority is a conflict here, as in
    // NixOS (so the ExecStart above won by mkForce, not by the harness being lenient).
    let error = module_error(
        "s: s",
        r#"[ { systemd.services.windmill-worker.serviceConfig.KillMode = "control-group"; } ]"#,
        "h: h.config.systemd.services.windmill-worker.serviceConfig",
    );
    assert!(
        error.contains("conflicting definitions of config.systemd.services.windmill-worker.serviceConfig.KillMode"),
        "{error}"
    );
}

#[test]
fn the_module_merges_with_nixpkgs_nix_settings_without_listing_root_twice() {
    // nixpkgs' nix module trusts root itself; merged after it, the worker's user is added once.
    let settings = module("s: s", "h: h.config.nix.settings");
    assert_eq!(settings["trusted-users"], json!(["root", "windmill"]));
    // The control: the harness keeps duplicates, as nixpkgs' listOf merge does, so the single
    // root above is the module's doing, not the harness deduplicating.
    let doubled = nix_instantiate(&module_expr(
        "s: s",
        r#"[ { nix.settings.trusted-users = [ "windmill" ]; } ]"#,
        "h: h.config.nix.settings.trusted-users",
    ));
    assert!(doubled.status.success(), "{}", String::from_utf8_lossy(&doubled.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&doubled.stdout).unwrap(),
        json!(["root", "windmill", "windmill"])
    );
}

#[test]
fn a_tls_configuration_nginx_could_not_take_fails_by_an_assertion_naming_it() {
    // An ACME certificate the node does not define: nixpkgs' nginx would read
    // security.acme.certs.<name> and fail with a bare "attribute missing"; NixOS checks the
    // assertions first, and this one names the option.
    let select =
        "h: { hosts = h.config.services.nginx.virtualHosts; assertions = map (a: a.message) h.config.assertions; }";
    let result = module(r#"s: s // { tls.useACMEHost = "example.org"; }"#, select);
    assert_eq!(
        result["assertions"],
        json!([
            "services.fediversity-windmill: tls.useACMEHost is \"example.org\" but the node defines no security.acme.certs.\"example.org\": define that certificate (covering both names) or leave tls.useACMEHost null for a certificate per name"
        ])
    );
    // The vhosts keep the name (their settings must not depend on the node's certificates,
    // which nixpkgs' nginx derives from them).
    assert_eq!(result["hosts"]["jobs.example.org"]["useACMEHost"], "example.org");
    // A certificate without its key: nginx's sslCertificateKey would get null.
    let half = module(r#"s: s // { tls.certificate = "/run/keys/cert.pem"; }"#, select);
    assert_eq!(
        half["assertions"],
        json!([
            "services.fediversity-windmill: tls.certificate and tls.certificateKey go together: set both or neither"
        ])
    );
    for host in ["windmill.example.org", "jobs.example.org"] {
        let vhost = half["hosts"][host].as_object().unwrap();
        for key in [
            "useACMEHost",
            "enableACME",
            "sslCertificate",
            "sslCertificateKey",
            "forceSSL",
        ] {
            assert!(!vhost.contains_key(key), "{host}: {key} in {vhost:?}");
        }
    }
    assert!(!half["hosts"].to_string().contains("null"), "{}", half["hosts"]);
    // The controls: the certificate defined, and both files given, reach nginx.
    let defined = module_on(
        r#"s: s // { tls.useACMEHost = "example.org"; }"#,
        r#"{ security.acme.certs."example.org" = { }; }"#,
        select,
    );
    assert_eq!(defined["assertions"], json!([]));
    assert_eq!(defined["hosts"]["jobs.example.org"]["useACMEHost"], "example.org");
    let both = module(
        r#"s: s // { tls = { certificate = "/run/keys/cert.pem"; certificateKey = "/run/keys/key.pem"; }; }"#,
        select,
    );
    assert_eq!(both["assertions"], json!([]));
    assert_eq!(
        both["hosts"]["windmill.example.org"]["sslCertificateKey"],
        "/run/keys/key.pem"
    );
}

/// NODE without a hand-written key list: no deployKeys, no deploymentAttributes, no
/// DEPLOYMENT_ROOT, and the fixture repository (`repository`, a Nix expression) instead.
fn following(repository: &str, more: &str) -> String {
    format!(
        r#"s: (builtins.removeAttrs s [ "deployKeys" "deploymentAttributes" ]) // {{
             deploymentRepository = {repository};
             deployEnv = (builtins.removeAttrs s.deployEnv [ "DEPLOYMENT_ROOT" ]) // {{ NODE_SITE = "ams"; }};
           }} // {more}"#
    )
}

const NODE_FILES: &str = r#"h: {
  assertions = map (a: a.message) h.config.assertions;
  warnings = h.config.warnings;
  env = builtins.fromJSON h.config.environment.etc."fediversity-windmill/deploy-env.json".source.text;
  keys = builtins.fromJSON h.config.environment.etc."fediversity-windmill/deploy-keys.json".source.text;
  attributes = builtins.fromJSON h.config.environment.etc."fediversity-windmill/deployment-attributes.json".source.text;
}"#;

#[test]
fn a_node_that_follows_its_repository_takes_its_root_keys_and_attributes_without_a_key_list() {
    let fixture = fixture_repository();
    let result = module(&following(&fixture, "{ }"), NODE_FILES);
    assert_eq!(result["assertions"], json!([]));
    let fixture_dir = repo().join("tests/nix/deployments").display().to_string();
    assert_eq!(result["env"]["DEPLOYMENT_ROOT"], fixture_dir.as_str());
    let keys = &result["keys"];
    // The keys a seed front-end sends (FR-014) are declared, with the repository's words.
    for key in [
        "SSH_PRIVATE_KEY_FILE",
        "INTERNAL_HOSTS",
        "PUBLISHED_HOSTS",
        "ENVIRONMENTS",
        "DOMAIN",
        "TF_VAR_flavour",
        "SSH_HOST",
        "STANDALONE_NAME",
    ] {
        assert!(keys[key]["description"].is_string(), "{key}: {keys}");
        assert!(keys[key].get("node_only").is_none(), "{key} is a front-end key: {keys}");
    }
    assert_eq!(
        keys["INTERNAL_HOSTS"],
        json!({"description": "Hosts of the deployment, a JSON array", "default": "[]"})
    );
    // Its nodeEnvKeys and the structural pins are node-only; its control key is not declared.
    assert_eq!(
        keys["NODE_REGION"],
        json!({"description": "Where the node runs", "default": "eu", "node_only": true})
    );
    assert_eq!(
        keys["NODE_SITE"],
        json!({"description": "The site of the node", "node_only": true})
    );
    for pin in [
        "HOSTING_CONFIG",
        "PIN_EFFECT",
        "SELF_MODULE_SOURCE",
        "OPERATOR_MODULE_SOURCE",
        "VERSION_LAYERS",
        "DNS_DOMAIN",
    ] {
        assert_eq!(keys[pin]["node_only"], true, "{pin}");
    }
    assert!(keys.get("DEPLOYMENT_ROOT").is_none(), "{keys}");
    assert_eq!(result["attributes"], json!(["mastodon", "peertube"]));
    assert_eq!(
        result["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|w| w.as_str().unwrap().contains("nodeEnvKeys"))
            .count(),
        0
    );

    // As a flake input: its outputs as they are, its outPath the root.
    let flake = format!(
        r#"((import {fixture}) {{ }}) // {{ outPath = "/nix/store/33333333333333333333333333333333-source"; }}"#
    );
    let result = module(&following(&flake, "{ }"), NODE_FILES);
    assert_eq!(result["assertions"], json!([]));
    assert_eq!(
        result["env"]["DEPLOYMENT_ROOT"],
        "/nix/store/33333333333333333333333333333333-source"
    );
    assert_eq!(result["keys"]["NODE_REGION"]["node_only"], true);
    assert_eq!(result["attributes"], json!(["mastodon", "peertube"]));
}

#[test]
fn the_operators_options_add_to_and_override_what_the_repository_publishes() {
    let result = module(
        &following(
            &fixture_repository(),
            r#"{
                 deployKeys = { HOSTING_CONFIG.nodeOnly = false; DOMAIN.default = "fedi.example"; MESSAGE.description = "Mine"; NODE_REGION.nodeOnly = false; };
                 deploymentAttributes = [ "extra" "mastodon" ];
               }"#,
        ),
        NODE_FILES,
    );
    assert_eq!(result["assertions"], json!([]));
    let keys = &result["keys"];
    // The pin is opened explicitly (its description kept); the others stay node-only.
    assert!(
        keys["HOSTING_CONFIG"].get("node_only").is_none(),
        "{}",
        keys["HOSTING_CONFIG"]
    );
    assert!(
        keys["HOSTING_CONFIG"]["description"]
            .as_str()
            .unwrap()
            .starts_with("Structural pin: ")
    );
    assert_eq!(keys["SELF_MODULE_SOURCE"]["node_only"], true);
    assert_eq!(
        keys["DOMAIN"],
        json!({"description": "The domain the deployment serves", "default": "fedi.example"})
    );
    assert_eq!(
        keys["NODE_REGION"],
        json!({"description": "Where the node runs", "default": "eu"})
    );
    assert_eq!(keys["MESSAGE"], json!({"description": "Mine"}));
    assert_eq!(result["attributes"], json!(["extra", "mastodon", "peertube"]));
    // An explicit root wins over the repository's.
    let root = module(
        &following(
            &fixture_repository(),
            r#"{ deployEnv = { DEPLOYMENT_ROOT = "/srv/checkout"; NODE_SITE = "ams"; }; }"#,
        ),
        "h: h.cfg.deployEnv.DEPLOYMENT_ROOT",
    );
    assert_eq!(root, "/srv/checkout");
}

#[test]
fn neither_a_repository_nor_options_fails_the_evaluation_naming_what_is_missing() {
    let bare = r#"s: (builtins.removeAttrs s [ "deployKeys" "deploymentAttributes" ]) // { deployEnv = builtins.removeAttrs s.deployEnv [ "DEPLOYMENT_ROOT" ]; }"#;
    assert_eq!(
        assertions(bare),
        vec![
            "services.fediversity-windmill: deployEnv.DEPLOYMENT_ROOT is required: the tree that holds the deployment programs (set deploymentRepository, or deployEnv.DEPLOYMENT_ROOT)",
            "services.fediversity-windmill: no deployment keys: set deploymentRepository (the module reads lib.deployEnvKeys, lib.standaloneEnvKeys, lib.deployEnvKeysByMethod, lib.nodeEnvKeys) or declare deployKeys",
            "services.fediversity-windmill: no deployment attributes: set deploymentRepository (the module reads lib.deploymentAttributeNames, else the names of devShells.x86_64-linux) or deploymentAttributes",
        ]
    );
    // A repository that publishes none of it: named, with what it does have.
    let empty = r#"s: (builtins.removeAttrs s [ "deployKeys" "deploymentAttributes" ]) // { deploymentRepository = { outPath = "/nix/store/44444444444444444444444444444444-empty"; lib.other = 1; devShells.aarch64-linux = { }; }; }"#;
    assert_eq!(
        assertions(empty),
        vec![
            "services.fediversity-windmill: deploymentRepository publishes no keys (it has nothing the module reads; the module reads lib.deployEnvKeys, lib.standaloneEnvKeys, lib.deployEnvKeysByMethod, lib.nodeEnvKeys) and deployKeys is empty: publish the keys in the repository or declare them in deployKeys",
            "services.fediversity-windmill: deploymentRepository publishes no deployment attributes (it has nothing the module reads; the module reads lib.deploymentAttributeNames, else the names of devShells.x86_64-linux) and deploymentAttributes is empty: every job would be refused",
        ]
    );
    // The controls: either source alone is enough.
    assert_eq!(
        assertions(
            r#"s: s // { deploymentRepository = { outPath = "/nix/store/44444444444444444444444444444444-empty"; }; }"#
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        assertions(&following(&fixture_repository(), "{ }")),
        Vec::<String>::new()
    );
}

#[test]
fn a_node_key_the_repository_needs_and_the_node_does_not_set_is_warned_of() {
    let fixture = fixture_repository();
    let unset = format!(
        r#"s: (builtins.removeAttrs s [ "deployKeys" "deploymentAttributes" ]) // {{ deploymentRepository = {fixture}; deployEnv = builtins.removeAttrs s.deployEnv [ "DEPLOYMENT_ROOT" ]; }}"#
    );
    let warnings: Vec<String> = strings(&module(&unset, "h: h.config.warnings"))
        .into_iter()
        .filter(|w| w.contains("nodeEnvKeys"))
        .collect();
    assert_eq!(
        warnings,
        vec![
            "services.fediversity-windmill: the deployment repository's nodeEnvKeys names NODE_SITE, which no node source sets (deployEnv, deploySecrets, credentials) and which has no default: deployments get no NODE_SITE"
        ]
    );
    // The control: set by a secret, it is not warned of (NODE_REGION has a default either way).
    let by_secret = format!(
        r#"s: (({unset}) s) // {{ deploySecrets = s.deploySecrets // {{ NODE_SITE = "{{{{ .site }}}}"; }}; }}"#
    );
    assert!(
        !module(&by_secret, "h: h.config.warnings")
            .to_string()
            .contains("nodeEnvKeys")
    );
}

#[test]
fn the_incus_store_keys_reach_programs_as_node_owned_file_path_keys() {
    let select = r#"h: { env = h.cfg.deployEnv; keys = builtins.fromJSON h.config.environment.etc."fediversity-windmill/deploy-keys.json".source.text; assertions = map (a: a.message) h.config.assertions; }"#;
    let both = module(
        r#"s: s // { credentials = { incusStoreSshKey = "{{ .ssh }}"; incusStoreSigningKey = "{{ .sign }}"; }; }"#,
        select,
    );
    assert_eq!(both["assertions"], json!([]));
    assert_eq!(
        both["env"]["INCUS_STORE_SSH_KEY_FILE"],
        "/run/incus-deploy/incus-store-ssh.key"
    );
    assert_eq!(
        both["env"]["INCUS_STORE_SIGNING_KEY_FILE"],
        "/run/incus-deploy/incus-store-signing.key"
    );
    for key in ["INCUS_STORE_SSH_KEY_FILE", "INCUS_STORE_SIGNING_KEY_FILE"] {
        assert_eq!(both["keys"][key]["node_only"], true, "{key}");
        assert!(
            both["keys"][key]["description"]
                .as_str()
                .unwrap()
                .starts_with("Path of the Incus store's"),
            "{key}"
        );
    }
    // Other names, or none.
    let renamed = module(
        r#"s: s // { credentials = { incusStoreSshKey = "{{ .ssh }}"; incusStoreSshKeyVariable = "STORE_SSH_KEY"; incusStoreSigningKey = "{{ .sign }}"; incusStoreSigningKeyVariable = null; }; }"#,
        select,
    );
    assert_eq!(renamed["env"]["STORE_SSH_KEY"], "/run/incus-deploy/incus-store-ssh.key");
    for key in ["INCUS_STORE_SSH_KEY_FILE", "INCUS_STORE_SIGNING_KEY_FILE"] {
        assert!(
            renamed["env"].get(key).is_none() && renamed["keys"].get(key).is_none(),
            "{key}"
        );
    }
    // Without the credentials, no path keys.
    let none = module("s: s", select);
    assert!(
        none["env"].get("INCUS_STORE_SSH_KEY_FILE").is_none() && none["keys"].get("INCUS_STORE_SSH_KEY_FILE").is_none()
    );
}

#[test]
fn the_tf_token_defaults_to_the_seeds_source_under_the_prefix() {
    let select = r#"h: { templates = h.cfg.openbaoAgentTemplates; required = builtins.fromJSON h.config.environment.etc."fediversity-windmill/required-secrets.json".source.text; path = (builtins.fromJSON h.config.environment.etc."fediversity-windmill/bootstrap.json".source.text).openbao.path; }"#;
    let default = module(
        r#"s: s // { bootstrap = s.bootstrap // { openbao = builtins.removeAttrs s.bootstrap.openbao [ "path" ]; }; }"#,
        select,
    );
    let tf = default["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["destination"] == "/run/incus-deploy/tf-token.env")
        .expect("tf-token.env is rendered by default");
    assert_eq!(
        tf["contents"],
        "TF_VAR_token={{ with secret \"fediversity/secret/data/incus-deploy/windmill-node/tokenHosts\" }}{{ .Data.data.value }}{{ end }}\n"
    );
    assert!(strings(&default["required"]).contains(&"TF_VAR_token".to_owned()));
    // The front-end's token goes where the seed's front-end reads it.
    assert_eq!(default["path"], "fediversity/secret/windmill/apiToken");
    let prefixed = module(
        r#"s: s // { openbaoPrefix = "acme/fedi"; credentials.hostName = "node-7"; bootstrap = s.bootstrap // { openbao = builtins.removeAttrs s.bootstrap.openbao [ "path" ]; }; }"#,
        select,
    );
    let tf = prefixed["templates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["destination"] == "/run/incus-deploy/tf-token.env")
        .unwrap();
    assert_eq!(
        tf["contents"],
        "TF_VAR_token={{ with secret \"acme/fedi/secret/data/incus-deploy/node-7/tokenHosts\" }}{{ .Data.data.value }}{{ end }}\n"
    );
    assert_eq!(prefixed["path"], "acme/fedi/secret/windmill/apiToken");
    // The control: a node without Incus deployments says so, and nothing is rendered or required.
    let none = module("s: s // { credentials.tfToken = null; }", select);
    assert!(!none["templates"].to_string().contains("tf-token.env"));
    assert!(!strings(&none["required"]).contains(&"TF_VAR_token".to_owned()));
}

#[test]
fn the_worker_waits_for_its_credentials_recovers_at_start_and_drains_at_stop() {
    let worker = module(
        r#"s: s // { credentials.tfToken = "{{ .t }}"; drainTimeout = 90; }"#,
        "h: h.config.systemd.services.windmill-worker",
    );
    let service = &worker["serviceConfig"];
    let pre = strings(&service["ExecStartPre"]);
    assert_eq!(pre.len(), 3);
    let jobenv = "/nix/store/00000000000000000000000000000000-callPackage-package.nix/bin/fediversity-jobenv";
    // First, as root, the sealed copy the jobs run (executable, not readable, by the worker).
    assert_eq!(
        pre[0],
        format!(
            "+/nix/store/00000000000000000000000000000000-coreutils/bin/install -D -m 0111 -o root -g root {jobenv} /run/fediversity-jobenv/bin/fediversity-jobenv"
        )
    );
    assert!(pre[1].ends_with("-fediversity-windmill-wait-for-secrets"), "{pre:?}");
    let state_dir = jobenv_const("DEFAULT_STATE_DIR");
    assert_eq!(pre[2], format!("-{jobenv} recover --state-dir {state_dir}"));
    assert_eq!(
        service["ExecStop"],
        json!([
            "-/nix/store/00000000000000000000000000000000-coreutils/bin/kill -s TERM $MAINPID",
            format!("{jobenv} drain --state-dir {state_dir} --wait 90")
        ])
    );
    assert_eq!(service["TimeoutStopSec"], format!("{}s", 90 + jobenv_grace() + 30));
    assert_eq!(service["KillMode"], "mixed");
    assert_eq!(service["Delegate"], true);
    assert_eq!(worker["wants"], json!(["openbao-agent-default.service"]));
    assert_eq!(
        worker["environment"]["JOBENV_SECRETS_ENV_FILES"],
        "/run/incus-deploy/tf-token.env"
    );
    assert_eq!(
        worker["environment"]["WHITELIST_ENVS"],
        "JOBENV_GRACE,JOBENV_LOCK_TIMEOUT,JOBENV_NIX_SHELL,JOBENV_REQUIRED_SECRETS,JOBENV_SECRETS_ENV_FILES,JOBENV_STATE_DIR"
    );
    let path = strings(&worker["path"]);
    // The jobs find the sealed copy, not the package's own (which every user may read).
    assert!(
        path.iter().any(|p| p.ends_with("-nix")) && path.contains(&"/run/fediversity-jobenv".to_owned()),
        "{path:?}"
    );
    assert!(
        !path.iter().any(|p| p.ends_with("-callPackage-package.nix")),
        "{path:?}"
    );

    // Nothing declared to render: nothing to wait for, and no secrets env file.
    let worker = module(
        "s: s // { deploySecrets = { }; credentials.tfToken = null; }",
        "h: h.config.systemd.services.windmill-worker",
    );
    assert_eq!(
        strings(&worker["serviceConfig"]["ExecStartPre"])[1..],
        [format!("-{jobenv} recover --state-dir {state_dir}")]
    );
    assert!(worker["environment"].get("JOBENV_SECRETS_ENV_FILES").is_none());
    assert_eq!(
        worker["environment"]["WHITELIST_ENVS"],
        "JOBENV_GRACE,JOBENV_LOCK_TIMEOUT,JOBENV_NIX_SHELL,JOBENV_REQUIRED_SECRETS,JOBENV_STATE_DIR"
    );
}

#[test]
fn the_module_renders_the_node_files_and_the_agents_templates() {
    let result = module(
        r#"s: s // { credentials = { tfToken = "{{ .t }}"; incusStoreSshKey = "{{ .k }}"; }; }"#,
        r#"h: { etc = builtins.mapAttrs (n: v: v.source.text) h.config.environment.etc; templates = h.cfg.openbaoAgentTemplates; rules = h.config.systemd.tmpfiles.rules; }"#,
    );
    let etc = &result["etc"];
    let file = |name: &str| -> Value {
        serde_json::from_str(etc[name].as_str().unwrap_or_else(|| panic!("{name}: {etc}"))).unwrap()
    };
    assert_eq!(
        file("fediversity-windmill/required-secrets.json"),
        json!(["TF_VAR_hcloud_token", "TF_VAR_token"])
    );
    assert_eq!(
        file("fediversity-windmill/deploy-env.json"),
        json!({
            "DEPLOYMENT_ROOT": "/nix/store/00000000000000000000000000000000-deployments",
            "DEPLOYMENT_NIXPKGS": "/nix/store/00000000000000000000000000000000-source",
            // The bash nix-shell enters a cached shell with, so that it evaluates nothing.
            "NIX_BUILD_SHELL": "/nix/store/00000000000000000000000000000000-bash-interactive/bin/bash",
            "STATE_BASE_ADDRESS": "https://state.example.org/tofu",
            // SC-002: where the programs find the Incus store's key, a node-owned key.
            "INCUS_STORE_SSH_KEY_FILE": "/run/incus-deploy/incus-store-ssh.key"
        })
    );
    let keys = file("fediversity-windmill/deploy-keys.json");
    assert_eq!(keys["MESSAGE"], json!({"description": "A message"}));
    assert_eq!(keys["INCUS_STORE_SSH_KEY_FILE"]["node_only"], true);
    // Only the configured credential's path is passed.
    assert!(keys.get("INCUS_STORE_SIGNING_KEY_FILE").is_none(), "{keys}");
    assert_eq!(file("fediversity-windmill/deployment-attributes.json"), json!(["demo"]));
    assert_eq!(
        file("fediversity-windmill/bootstrap.json")["settings"],
        json!({"instance_python_version": "3.12"})
    );
    let destinations: Vec<&str> = result["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["destination"].as_str().unwrap())
        .collect();
    assert_eq!(
        destinations,
        vec![
            "/run/fediversity-windmill/deploy-secrets/TF_VAR_hcloud_token",
            "/run/incus-deploy/incus-store-ssh.key",
            "/run/incus-deploy/tf-token.env"
        ]
    );
    for template in result["templates"].as_array().unwrap() {
        assert_eq!(
            (template["perms"].as_str(), template["group"].as_str()),
            (Some("0440"), Some("windmill")),
            "{template}"
        );
    }
    assert!(strings(&result["rules"]).contains(&"d /run/incus-deploy 0750 root windmill - -".to_owned()));
}

#[test]
fn deployment_nixpkgs_defaults_to_the_nodes_nixpkgs_and_the_operators_value_wins() {
    let result = module(
        "s: s",
        "h: { env = h.cfg.deployEnv; registry = h.config.nix.registry; }",
    );
    assert_eq!(
        result["env"]["DEPLOYMENT_NIXPKGS"],
        "/nix/store/00000000000000000000000000000000-source"
    );
    assert_eq!(
        result["registry"],
        json!({"nixpkgs": {"to": {"type": "path", "path": "/nix/store/00000000000000000000000000000000-source"}}})
    );
    let result = module(
        r#"s: s // { deployEnv = s.deployEnv // { DEPLOYMENT_NIXPKGS = "/nix/store/11111111111111111111111111111111-nixpkgs"; }; }"#,
        "h: { env = h.cfg.deployEnv; registry = h.config.nix.registry; }",
    );
    assert_eq!(
        result["env"]["DEPLOYMENT_NIXPKGS"],
        "/nix/store/11111111111111111111111111111111-nixpkgs"
    );
    assert_eq!(
        result["registry"]["nixpkgs"]["to"]["path"],
        "/nix/store/11111111111111111111111111111111-nixpkgs"
    );
}

#[test]
fn the_default_windmill_is_nixpkgs_cut_down_to_python_and_bash() {
    let result = module(
        "s: s",
        "h: { features = h.cfg.windmillPackage.cargoBuildFeatures; overrides = h.cfg.windmillPackage.overrides; }",
    );
    assert_eq!(
        result["features"],
        json!(["default", "jemalloc", "python", "smtp", "sqlx", "static_frontend"])
    );
    let overrides = result["overrides"].as_object().unwrap();
    assert_eq!(
        overrides.keys().collect::<Vec<_>>(),
        vec!["bun", "cargo", "deno", "dotnet-sdk_9", "go", "php", "powershell"]
    );
    for (name, stub) in overrides {
        assert_eq!(
            stub, "/nix/store/00000000000000000000000000000000-windmill-without-other-toolchains",
            "{name}"
        );
    }
    // Another package is taken as it is.
    let exec = module(
        r#"s: s // { windmillPackage = { type = "derivation"; outPath = "/nix/store/22222222222222222222222222222222-windmill"; }; }"#,
        "h: h.config.systemd.services.windmill-worker-native.serviceConfig.ExecStart",
    );
    assert_eq!(
        exec,
        "/nix/store/22222222222222222222222222222222-windmill/bin/windmill"
    );
}

#[test]
fn the_module_closes_the_ui_and_opens_it_only_behind_the_configured_identity_layer() {
    let hosts = module("s: s", "h: h.config.services.nginx.virtualHosts");
    assert_eq!(hosts["jobs.example.org"]["locations"], json!({"/": {"return": "403"}}));
    assert_eq!(hosts["windmill.example.org"]["default"], true);
    assert!(hosts["jobs.example.org"].get("default").is_none());
    for host in ["windmill.example.org", "jobs.example.org"] {
        assert_eq!(
            (hosts[host]["forceSSL"].as_bool(), hosts[host]["enableACME"].as_bool()),
            (Some(true), Some(true)),
            "{host}"
        );
    }

    let result = module_on(
        r#"s: s // { ui.forwardAuth = { enable = true; allowedGroups = [ "ops" ]; ruleAddedToPortal = true; }; tls = { useACMEHost = "example.org"; }; }"#,
        r#"{ security.acme.certs."example.org" = { domain = "example.org"; extraDomainNames = [ "*.example.org" ]; }; }"#,
        "h: { hosts = h.config.services.nginx.virtualHosts; rule = h.cfg.ui.forwardAuth.accessControlRule; warnings = h.config.warnings; }",
    );
    let ui = &result["hosts"]["jobs.example.org"];
    assert!(
        ui["locations"]["/"]["extraConfig"]
            .as_str()
            .unwrap()
            .starts_with("auth_request /internal/fediversity-windmill/authz;")
    );
    assert!(
        ui["locations"]["= /internal/fediversity-windmill/authz"]["extraConfig"]
            .as_str()
            .unwrap()
            .contains("proxy_pass http://127.0.0.1:9091/api/authz/auth-request;")
    );
    assert_eq!(ui["useACMEHost"], "example.org");
    assert!(ui.get("enableACME").is_none());
    assert_eq!(
        result["rule"],
        json!({"domain": ["jobs.example.org"], "policy": "one_factor", "subject": ["group:ops"]})
    );
    assert_eq!(result["warnings"], json!([]));

    let result = module(
        "s: s // { ui.dangerouslyServeWithoutAuthentication = true; tls.enable = false; }",
        "h: { hosts = h.config.services.nginx.virtualHosts; warnings = h.config.warnings; }",
    );
    assert_eq!(
        result["hosts"]["jobs.example.org"]["locations"]["/"]["extraConfig"],
        "include /run/windmill-ui-auth/*.conf;"
    );
    assert!(result["hosts"]["jobs.example.org"].get("forceSSL").is_none());
    assert!(
        result["warnings"][0]
            .as_str()
            .unwrap()
            .contains("gives every visitor the Windmill superadmin's token")
    );
}

#[test]
fn the_nodes_authelia_gets_the_uis_rule_first_and_a_portal_without_it_fails_the_evaluation() {
    let rule = json!({"domain": ["jobs.example.org"], "policy": "one_factor", "subject": ["group:fediversity-admins"]});
    let select = "h: { assertions = map (a: a.message) h.config.assertions; warnings = builtins.filter (w: builtins.match \".*(portal|Authelia).*\" w != null) h.config.warnings; authelia = h.config.services.authelia or null; }";
    let local = r#"{ services.authelia.instances.main.enable = true; }"#;
    // The operator's own rule, as nixpkgs' authelia module would merge it with the module's.
    let operators = r#"[ { services.authelia.instances.main.settings.access_control.rules = [ { domain = [ "*.example.org" ]; policy = "bypass"; } ]; } ]"#;
    let run = |patch: &str, node: &str, also: &str| -> Value {
        let out = nix_instantiate(&module_expr_on(patch, also, node, select));
        assert!(
            out.status.success(),
            "{patch}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };

    let added = run(
        r#"s: s // { ui.forwardAuth = { enable = true; autheliaInstance = "main"; }; }"#,
        local,
        operators,
    );
    assert_eq!(added["assertions"], json!([]));
    assert_eq!(added["warnings"], json!([]));
    // First: Authelia applies the first rule that matches, and the operator's bypass would.
    assert_eq!(
        added["authelia"]["instances"]["main"]["settings"]["access_control"]["rules"],
        json!([rule, {"domain": ["*.example.org"], "policy": "bypass"}])
    );

    // An instance the node does not run: named.
    let wrong = run(
        r#"s: s // { ui.forwardAuth = { enable = true; autheliaInstance = "portal"; }; }"#,
        local,
        "[ ]",
    );
    assert_eq!(
        wrong["assertions"],
        json!([
            "services.fediversity-windmill: ui.forwardAuth.autheliaInstance is \"portal\" but services.authelia.instances.\"portal\" is not an enabled Authelia instance of this node (enabled: main): name the instance that guards the UI, or leave it null when the portal runs elsewhere"
        ])
    );

    // The node runs Authelia and nobody added the rule: every signed-in user would be admitted.
    let forgotten = run("s: s // { ui.forwardAuth.enable = true; }", local, operators);
    assert_eq!(
        forgotten["assertions"],
        json!([
            "services.fediversity-windmill: this node runs Authelia (services.authelia.instances: main) but none of its instances has the admin UI's access rule, so it would admit every signed-in user to the superadmin's UI: set ui.forwardAuth.autheliaInstance = \"main\" (the module adds ui.forwardAuth.accessControlRule first in its rules), or add that rule to its settings.access_control.rules"
        ])
    );
    assert!(
        forgotten["authelia"].is_null()
            || forgotten["authelia"]["instances"]["main"]["settings"]["access_control"]["rules"]
                .as_array()
                .is_none_or(|r| !r.contains(&rule))
    );
    // The control: the operator added it by hand.
    let by_hand = run(
        "s: s // { ui.forwardAuth.enable = true; }",
        &format!(
            "{{ services.authelia.instances.main = {{ enable = true; settings.access_control.rules = [ (builtins.fromJSON {}) ]; }}; }}",
            Value::from(rule.to_string())
        ),
        "[ ]",
    );
    assert_eq!(by_hand["assertions"], json!([]));
    assert_eq!(by_hand["warnings"], json!([]));
    // A disabled instance is not the portal.
    let disabled = run(
        "s: s // { ui.forwardAuth.enable = true; }",
        r#"{ services.authelia.instances.main.enable = false; }"#,
        "[ ]",
    );
    assert_eq!(disabled["assertions"], json!([]));

    // The portal elsewhere: evaluation says which rule it needs, until told it has it.
    let elsewhere = run("s: s // { ui.forwardAuth.enable = true; }", "{ }", "[ ]");
    assert_eq!(
        elsewhere["warnings"],
        json!([format!(
            "services.fediversity-windmill: the admin UI's portal does not run on this node: its access_control.rules must hold {rule} (ui.forwardAuth.accessControlRule), or every user it signs in gets the superadmin's UI; once it does, set ui.forwardAuth.ruleAddedToPortal = true"
        )])
    );
    let told = run(
        "s: s // { ui.forwardAuth = { enable = true; ruleAddedToPortal = true; }; }",
        "{ }",
        "[ ]",
    );
    assert_eq!(
        (told["assertions"].clone(), told["warnings"].clone()),
        (json!([]), json!([]))
    );
    // Without the forward auth (another identity layer), none of this applies.
    let other = run(r#"s: s // { ui.nginxAuthConfig = "deny all;"; }"#, local, "[ ]");
    assert_eq!(
        (other["assertions"].clone(), other["warnings"].clone()),
        (json!([]), json!([]))
    );
}

#[test]
fn smtp_reaches_windmill_server_with_its_password_never_in_the_configuration() {
    let server = module(
        r#"s: s // { smtp = { host = "smtp.example.org"; username = "wm"; passwordFile = "/run/keys/smtp-password"; }; }"#,
        "h: h.config.systemd.services.windmill-server",
    );
    assert!(
        server["serviceConfig"]["ExecStart"]
            .as_str()
            .unwrap()
            .ends_with("-windmill-server-with-credentials"),
        "{server}"
    );
    assert_eq!(
        server["serviceConfig"]["LoadCredential"],
        json!(["smtp-password:/run/keys/smtp-password"])
    );
    let env = &server["environment"];
    assert_eq!(env["SMTP_HOST"], "smtp.example.org");
    assert_eq!(env["SMTP_FROM"], "noreply@windmill.example.org");
    assert_eq!(env["SMTP_USERNAME"], "wm");
    assert_eq!(env["SMTP_TLS_IMPLICIT"], "false");
    assert_eq!(env["MODE"], "server");
    let all = module(
        r#"s: s // { smtp = { host = "h"; passwordFile = "/run/keys/smtp-password"; }; }"#,
        "h: h.config",
    )
    .to_string();
    assert!(
        !all.contains("SMTP_PASSWORD"),
        "the password is set by the launcher only"
    );
    assert_eq!(
        assertions(r#"s: s // { smtp.passwordFile = "/run/keys/p"; }"#),
        vec!["services.fediversity-windmill: smtp.passwordFile is set but smtp.host is not"]
    );
}

#[test]
fn the_module_can_run_the_agent_itself() {
    let result = module(
        r#"s: s // { openbaoAgent = { enable = true; settings = { vault.address = "http://127.0.0.1:8200"; }; }; }"#,
        r#"h: { unit = h.config.systemd.services.openbao-agent-default; text = builtins.fromJSON (builtins.head h.config.systemd.services.openbao-agent-default.restartTriggers).text; }"#,
    );
    let exec = result["unit"]["serviceConfig"]["ExecStart"].as_str().unwrap();
    assert!(
        exec.starts_with("/nix/store/00000000000000000000000000000000-openbao/bin/bao agent -config=/nix/store/"),
        "{exec}"
    );
    assert!(exec.ends_with("-openbao-agent-default.json"), "{exec}");
    assert_eq!(result["text"]["vault"], json!({"address": "http://127.0.0.1:8200"}));
    assert_eq!(
        result["text"]["template"][0]["destination"],
        "/run/fediversity-windmill/deploy-secrets/TF_VAR_hcloud_token"
    );
    // Not enabled: no such unit (the hosting provider's runs).
    assert_eq!(
        module("s: s", "h: h.config.systemd.services ? openbao-agent-default"),
        json!(false)
    );
    assert_eq!(
        assertions(r#"s: s // { openbaoAgent = { enable = true; unit = "vault-agent-default.service"; }; }"#),
        vec![
            "services.fediversity-windmill: openbaoAgent.enable runs the agent as openbao-agent-default.service; openbaoAgent.unit must name it"
        ]
    );
}

#[test]
fn what_jobenv_or_the_bootstrap_would_refuse_fails_the_modules_evaluation() {
    assert_eq!(
        assertions(
            r#"s: s // { deployEnv = s.deployEnv // { PATH = "/bin"; }; deploySecrets = { NAMESPACE = "x"; }; deployKeys = { SYSTEM.description = "s"; }; }"#
        ),
        vec![
            "services.fediversity-windmill: deployEnv.PATH: PATH is a reserved name (it steers the loader, a shell, an interpreter, git, ssh, Nix or OpenTofu) and is neither declared in deployKeys nor a Nix/OpenTofu variable a node may set; jobenv refuses it",
            "services.fediversity-windmill: deploySecrets.NAMESPACE: NAMESPACE is a control key only a job payload may set",
            "services.fediversity-windmill: deployKeys.SYSTEM: SYSTEM is a control key jobenv consumes and never passes to the program; a keys file that declares it is refused",
        ]
    );
    // A key the operator declares may be set by the node.
    assert_eq!(
        assertions(r#"s: s // { deployEnv = s.deployEnv // { MESSAGE = "hi"; }; }"#),
        Vec::<String>::new()
    );
    assert_eq!(
        assertions(
            r#"s: s // { bootstrap = s.bootstrap // { token.label = "session"; }; tls.certificate = "/run/keys/c"; }"#
        ),
        vec![
            "services.fediversity-windmill: bootstrap.token.label \"session\" is a label Windmill gives its own tokens (login sessions, job tokens): revoking older tokens of the label would revoke those; the bootstrap refuses it",
            "services.fediversity-windmill: tls.certificate and tls.certificateKey go together: set both or neither",
        ]
    );
    assert_eq!(
        assertions(
            "s: s // { ui = { nginxAuthConfig = \"deny all;\"; dangerouslyServeWithoutAuthentication = true; }; }"
        ),
        vec![
            "services.fediversity-windmill: ui.dangerouslyServeWithoutAuthentication is set together with an identity layer (ui.forwardAuth or ui.nginxAuthConfig): choose one"
        ]
    );
}

#[test]
fn the_vm_tests_script_is_valid_python() {
    // The VM test needs nixpkgs to run; its Python test script can still be extracted (with
    // stand-ins for the node's store paths) and compiled here.
    let test = nix_string(repo().join("nixos-module/test.nix"));
    let expr = format!(
        r#"((import {test} {{ lib = null; }}).testScript {{ nodes.machine = {{
             services.fediversity-windmill = {{ scriptsPackage = "/nix/store/s"; package = "/nix/store/p"; windmillPackage = "/nix/store/w"; deployEnv.DEPLOYMENT_NIXPKGS = "/nix/store/n"; tls.certificate = "/nix/store/c/cert.pem"; }};
             system.build.toplevel = "/nix/store/t"; }}; }})"#
    );
    let out = nix_instantiate(&expr);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let script: Value = serde_json::from_slice(&out.stdout).unwrap();
    let script = script.as_str().unwrap();
    for subtest in [
        "nginx: TLS on both names, the API name serves /api/ only and is the default server",
        "the admin UI is refused without auth and served through the forward auth",
        "without an identity layer the admin UI answers 403 and never serves the token",
        "a deploy job runs the deployment program through jobenv",
        "a node without its secrets is not ready: jobs are refused, the worker does not start",
        "SMTP reaches windmill-server, its password never through the store or the unit",
        "tf-token.env reaches the deployment program",
        "OpenTelemetry variables on the three Windmill units",
        "a worker restart runs recover",
        "a changed script is uploaded again after the bootstrap restarts",
        "a stop during a running deploy drains it",
        "the front-end's token runs deploys and reads jobs, and nothing else",
        "a rerun changes nothing and rotates the tokens",
        "this node's Authelia has the UI's rule, first, and applies it",
        "a payload never sets a node-only key or pin",
        "the generated superadmin password is root's, stays, and logs in",
        "a new admin password reruns the bootstrap",
        "the backup stores the database and a restore brings it back",
    ] {
        assert!(script.contains(&format!("with subtest(\"{subtest}\"):")), "{subtest}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("test_script.py");
    std::fs::write(&file, script).unwrap();
    let check = format!(
        "import ast, sys; ast.parse(open({:?}).read())",
        file.display().to_string()
    );
    let out = Command::new("python3").args(["-c", &check]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Positive control: a script with a syntax error is caught the same way.
    std::fs::write(&file, format!("{script}\n    if\n")).unwrap();
    assert!(
        !Command::new("python3")
            .args(["-c", &check])
            .output()
            .unwrap()
            .status
            .success()
    );
}

// ---- the backup of Windmill's database (FR-015) --------------------------------------------------

const BACKUP: &str = r#"{
  enable = true;
  repository = "s3:https://garage.example.org/windmill-backups";
  passwordTemplate = "{{ with secret \"fediversity/secret/data/windmill/backup\" }}{{ .Data.data.resticPassword }}{{ end }}";
  environmentTemplate = "AWS_ACCESS_KEY_ID={{ .id }}\nAWS_SECRET_ACCESS_KEY={{ .key }}\n";
}"#;

/// A run never prunes the journal (its cost must not grow with it): a daily timer does, as the
/// worker's user, who owns the state directory.
#[test]
fn the_journal_is_pruned_daily_by_the_workers_user() {
    let result = module(
        "s: s",
        "h: { unit = h.config.systemd.services.fediversity-jobenv-prune; timer = h.config.systemd.timers.fediversity-jobenv-prune; }",
    );
    let unit = &result["unit"];
    let store = "/nix/store/00000000000000000000000000000000";
    assert_eq!(
        unit["serviceConfig"]["ExecStart"],
        format!("{store}-callPackage-package.nix/bin/fediversity-jobenv prune --state-dir /var/lib/fediversity-jobenv")
    );
    // The harness's services.windmill.database.user: the worker's user.
    assert_eq!(unit["serviceConfig"]["User"], "windmill");
    assert_eq!(unit["serviceConfig"]["Type"], "oneshot");
    assert_eq!(result["timer"]["wantedBy"], json!(["timers.target"]));
    assert_eq!(result["timer"]["timerConfig"]["OnCalendar"], "daily");
}

#[test]
fn the_database_is_streamed_from_pg_dump_into_restic_as_root_on_a_timer() {
    let result = module(
        &format!("s: s // {{ backup = {BACKUP}; }}"),
        "h: { unit = h.config.systemd.services.fediversity-windmill-backup; timer = h.config.systemd.timers.fediversity-windmill-backup; templates = h.cfg.openbaoAgentTemplates; packages = map (p: p.name) h.config.environment.systemPackages; assertions = map (a: a.message) h.config.assertions; required = h.config.environment.etc.\"fediversity-windmill/required-secrets.json\".source.text; waited = h.config.systemd.services.windmill-worker.serviceConfig.ExecStartPre; }",
    );
    assert_eq!(result["assertions"], json!([]));
    let unit = &result["unit"];
    let store = "/nix/store/00000000000000000000000000000000";
    assert_eq!(
        unit["serviceConfig"]["ExecStart"],
        json!([
            format!(
                "{store}-restic/bin/restic backup --stdin-from-command --stdin-filename windmill.sql --tag windmill-database -- {store}-util-linux/bin/setpriv --reuid=postgres --regid=postgres --init-groups --reset-env -- {store}-postgresql/bin/pg_dump --dbname=windmill"
            ),
            format!(
                "{store}-restic/bin/restic forget --prune --tag windmill-database --keep-daily 7 --keep-weekly 5 --keep-monthly 12"
            ),
        ])
    );
    assert!(
        unit["serviceConfig"]["ExecStartPre"][0]
            .as_str()
            .unwrap()
            .ends_with("-fediversity-windmill-backup-init")
    );
    // Root (no User=), with only what setpriv needs; the credentials are files the agent renders.
    assert!(unit["serviceConfig"].get("User").is_none() && unit["serviceConfig"].get("DynamicUser").is_none());
    assert_eq!(
        unit["serviceConfig"]["CapabilityBoundingSet"],
        json!(["CAP_SETUID", "CAP_SETGID"])
    );
    assert_eq!(
        unit["serviceConfig"]["EnvironmentFile"],
        "/run/fediversity-windmill/backup/restic.env"
    );
    assert_eq!(
        unit["environment"],
        json!({"RESTIC_REPOSITORY": "s3:https://garage.example.org/windmill-backups", "RESTIC_PASSWORD_FILE": "/run/fediversity-windmill/backup/restic-password", "RESTIC_CACHE_DIR": "/var/cache/fediversity-windmill-backup"})
    );
    assert!(
        unit["after"].as_array().unwrap().contains(&json!("postgresql.service"))
            && unit["after"]
                .as_array()
                .unwrap()
                .contains(&json!("openbao-agent-default.service"))
    );
    assert_eq!(result["timer"]["wantedBy"], json!(["timers.target"]));
    assert_eq!(
        result["timer"]["timerConfig"],
        json!({"OnCalendar": "daily", "RandomizedDelaySec": "1h", "Persistent": "true"})
    );
    assert!(strings(&result["packages"]).contains(&"fediversity-windmill-restic".to_owned()));
    // The agent renders both root-only; the worker's group gets neither, and jobs do not wait
    // for them nor require them.
    let backup_templates: Vec<&Value> = result["templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["destination"]
                .as_str()
                .unwrap()
                .starts_with("/run/fediversity-windmill/backup/")
        })
        .collect();
    assert_eq!(
        backup_templates,
        vec![
            &json!({"destination": "/run/fediversity-windmill/backup/restic-password", "contents": "{{ with secret \"fediversity/secret/data/windmill/backup\" }}{{ .Data.data.resticPassword }}{{ end }}", "group": "root", "perms": "0400", "error_on_missing_key": true}),
            &json!({"destination": "/run/fediversity-windmill/backup/restic.env", "contents": "AWS_ACCESS_KEY_ID={{ .id }}\nAWS_SECRET_ACCESS_KEY={{ .key }}\n", "group": "root", "perms": "0400", "error_on_missing_key": true}),
        ]
    );
    assert!(!result["required"].as_str().unwrap().contains("restic"));
    assert!(!result["waited"].to_string().contains("backup"));
    assert!(
        eval(r#"lib.tmpfilesRules { group = "windmill"; }"#)
            .as_array()
            .unwrap()
            .contains(&json!("d /run/fediversity-windmill/backup 0700 root root - -"))
    );

    // The control: off by default, nothing of it.
    let off = module(
        "s: s",
        "h: { units = builtins.attrNames h.config.systemd.services; timers = builtins.attrNames (h.config.systemd.timers or { }); templates = h.cfg.openbaoAgentTemplates; }",
    );
    assert!(!strings(&off["units"]).contains(&"fediversity-windmill-backup".to_owned()));
    assert_eq!(
        sorted(&off["timers"]),
        ["fediversity-jobenv-prune"],
        "only the journal's pruning has a timer"
    );
    assert!(!off["templates"].to_string().contains("backup"));
}

#[test]
fn a_backup_without_its_repository_password_or_local_database_fails_the_evaluation() {
    assert_eq!(
        assertions("s: s // { backup.enable = true; }"),
        vec![
            "services.fediversity-windmill: backup.repository is required with backup.enable (e.g. \"s3:https://garage.example.org/windmill-backups\")",
            "services.fediversity-windmill: backup.passwordTemplate is required with backup.enable: the OpenBao agent template of the restic repository's password",
        ]
    );
    // A remote database: its DSN in a file (the module has none to give).
    let dsn_file = r#"bootstrap = s.bootstrap // { windmill = s.bootstrap.windmill // { databaseUrlFile = "/run/keys/windmill-database-url"; }; };"#;
    let remote = format!("s: s // {{ backup = {BACKUP}; {dsn_file} }}");
    let out = nix_instantiate(&module_expr_on(
        &remote,
        "[ ]",
        "{ services.windmill.database.createLocally = false; }",
        "h: map (a: a.message) h.config.assertions",
    ));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!([
            "services.fediversity-windmill: backup.dumpCommand: the default dumps the local database (services.windmill.database.createLocally), which this node does not have; set a command that dumps Windmill's database to stdout, its credentials from a file (never in its arguments)"
        ])
    );
    // With its own dump command, a remote database is fine, and the command is run as given.
    let own = format!(
        r#"s: s // {{ backup = {BACKUP} // {{ dumpCommand = [ "/run/current-system/sw/bin/pg_dump" "--dbname=windmill" ]; pruneOpts = [ ]; environmentTemplate = null; }}; {dsn_file} }}"#
    );
    let result = module_on(
        &own,
        "{ services.windmill.database.createLocally = false; }",
        "h: { assertions = map (a: a.message) h.config.assertions; unit = h.config.systemd.services.fediversity-windmill-backup.serviceConfig; }",
    );
    assert_eq!(result["assertions"], json!([]));
    assert_eq!(
        result["unit"]["ExecStart"],
        json!([
            "/nix/store/00000000000000000000000000000000-restic/bin/restic backup --stdin-from-command --stdin-filename windmill.sql --tag windmill-database -- /run/current-system/sw/bin/pg_dump --dbname=windmill"
        ])
    );
    assert!(result["unit"].get("EnvironmentFile").is_none());
}

#[test]
fn the_restic_wrapper_and_the_init_script_use_the_backups_repository_and_credentials() {
    let dir = tempfile::tempdir().unwrap();
    // A restic that prints what it was given.
    let restic = dir.path().join("restic");
    std::fs::write(
        &restic,
        "#!/bin/sh\necho \"args=$*\"\necho \"repo=$RESTIC_REPOSITORY password_file=$RESTIC_PASSWORD_FILE id=$AWS_ACCESS_KEY_ID key=$AWS_SECRET_ACCESS_KEY\"\n[ \"$1\" != cat ] || [ -e \"$HAS_CONFIG\" ]\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&restic).status().unwrap();
    let restic = Value::from(restic.display().to_string());

    let wrapper = eval(&format!(
        r#"lib.resticWrapper {{ restic = {restic}; repository = "s3:https://garage.example.org/windmill-backups"; }}"#
    ));
    let text = wrapper.as_str().unwrap();
    assert!(
        text.contains("export RESTIC_PASSWORD_FILE='/run/fediversity-windmill/backup/restic-password'"),
        "{text}"
    );
    // Run it against an environment file of our own (the real one is root's, under /run).
    let env_file = dir.path().join("restic.env");
    std::fs::write(
        &env_file,
        "# Garage\nAWS_ACCESS_KEY_ID=GK123\n\nAWS_SECRET_ACCESS_KEY=s3cr=t with spaces\n",
    )
    .unwrap();
    let text = text.replace(
        "/run/fediversity-windmill/backup/restic.env",
        &env_file.display().to_string(),
    );
    let out = Command::new("bash")
        .args(["-c", &text, "wrapper", "snapshots", "--tag", "windmill-database"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "args=snapshots --tag windmill-database\nrepo=s3:https://garage.example.org/windmill-backups password_file=/run/fediversity-windmill/backup/restic-password id=GK123 key=s3cr=t with spaces\n"
    );

    // init only when the repository has no config.
    let init = eval(&format!("lib.backupInitScript {{ restic = {restic}; }}"));
    let run_init = |has_config: &Path| {
        Command::new("bash")
            .args(["-c", init.as_str().unwrap()])
            .env("HAS_CONFIG", has_config)
            .output()
            .unwrap()
    };
    let out = run_init(&dir.path().join("no-config"));
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("args=init"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = run_init(&env_file);
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("args=init"),
        "an existing repository is not initialised again"
    );
}

/// The first ```nix block of the manual's "Setting up a node" (docs/operators/setup.md), as it
/// stands.
fn manual_module_example() -> String {
    let page = std::fs::read_to_string(repo().join("docs/operators/setup.md")).unwrap();
    let section = &page[page
        .find("\n## The configuration\n")
        .expect("the page's configuration section")..];
    let start = section.find("```nix\n").expect("a nix block in the section") + "```nix\n".len();
    let end = start + section[start..].find("\n```").unwrap();
    section[start..end].to_owned()
}

#[test]
fn the_manuals_module_example_evaluates_and_passes_every_assertion() {
    let example = manual_module_example();
    // It is the example of a node that follows its repository, not some other block.
    assert!(
        example.contains("deploymentRepository = inputs.deployments;"),
        "{example}"
    );
    // With the node's Authelia, which the example says is configured elsewhere.
    let result = crate::docs::evaluate_node(&example, true).unwrap_or_else(|stderr| panic!("{stderr}"));
    assert_eq!(
        result["assertions"],
        json!([]),
        "the manual's example fails the module's own assertions"
    );
    assert_eq!(result["typeErrors"], json!([]));
    assert_eq!(result["unknownSettings"], json!([]));
    // It warns of nothing of its own (the UI is protected, its rule is in the portal, the token
    // scoped), only of the node key the stand-in repository needs and the example cannot know.
    assert_eq!(
        result["warnings"],
        json!([
            "services.fediversity-windmill: the deployment repository's nodeEnvKeys names NODE_SITE, which no node source sets (deployEnv, deploySecrets, credentials) and which has no default: deployments get no NODE_SITE"
        ])
    );
    assert_eq!(
        result["userImports"],
        json!([repo().join("nixos-module").display().to_string()])
    );
    // What the example says it does.
    assert_eq!(
        result["env"]["DEPLOYMENT_ROOT"],
        "/nix/store/55555555555555555555555555555555-source"
    );
    assert_eq!(result["env"]["STATE_BASE_ADDRESS"], "https://state.example.org/tofu");
    assert_eq!(result["attributes"], json!(["mastodon", "peertube"]));
    assert_eq!(
        result["bootstrap"]["windmill"]["admin_password_file"],
        "/var/lib/fediversity-windmill/admin-password"
    );
    assert_eq!(
        result["bootstrap"]["openbao"]["path"],
        "fediversity/secret/windmill/apiToken"
    );
    // No DSN to write: nixpkgs' local database over its socket.
    assert_eq!(
        result["bootstrap"]["windmill"]["database_url"],
        "host=/run/postgresql port=5432 dbname=windmill user=windmill"
    );
    assert!(result["bootstrap"]["windmill"].get("database_url_file").is_none());
    assert_eq!(result["rules"][0]["domain"], json!(["jobs.example.org"]));
    assert!(
        result["backup"][0]
            .as_str()
            .unwrap()
            .contains("backup --stdin-from-command")
    );
    assert_eq!(result["acme"], true);

    // The control: the same example on a node without that Authelia instance is refused.
    let refused = crate::docs::evaluate_node(&example, false).unwrap_or_else(|stderr| panic!("{stderr}"));
    assert_eq!(
        refused["assertions"].as_array().unwrap().len(),
        1,
        "{}",
        refused["assertions"]
    );
    assert!(
        refused["assertions"][0]
            .as_str()
            .unwrap()
            .contains("ui.forwardAuth.autheliaInstance is \"main\""),
        "{}",
        refused["assertions"]
    );
}

// ---- the rendered node files, read by the real jobenv -------------------------------------------

/// The fediversity-jobenv binary of this workspace.
fn jobenv_binary() -> PathBuf {
    fediversity_testkit::binaries::workspace_binary("fediversity-jobenv")
}

/// Runs the real jobenv (`run --verb apply`, through real nix-shell) for `payload` against the
/// node files the module renders for NODE following the fixture repository, patched by `more`;
/// the secrets it requires are given. Returns its exit code and its output (stdout and stderr).
fn run_job_on_rendered_node(jobenv: &Path, more: &str, payload: &Value) -> (i32, String) {
    let fixture = repo().join("tests/nix/deployments").display().to_string();
    let patch = following(
        &fixture_repository(),
        &format!(
            r#"({{ deployEnv = {{ NODE_SITE = "ams"; HOSTING_CONFIG = "/node/hosting"; NIX_BUILD_SHELL = "/bin/bash"; DEPLOYMENT_NIXPKGS = {root}; STATE_BASE_ADDRESS = "https://state.example.org/tofu"; }}; }} // {more})"#,
            root = json!(fixture)
        ),
    );
    let files = module(
        &patch,
        r#"h: { assertions = map (a: a.message) h.config.assertions; etc = builtins.mapAttrs (_: f: f.source.text) h.config.environment.etc; }"#,
    );
    assert_eq!(files["assertions"], json!([]), "{patch}");
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "deploy-env.json",
        "deploy-keys.json",
        "deployment-attributes.json",
        "required-secrets.json",
    ] {
        std::fs::write(
            dir.path().join(name),
            files["etc"][format!("fediversity-windmill/{name}")].as_str().unwrap(),
        )
        .unwrap();
    }
    // What the agent would render: the NODE's deploy secret and tf-token.env.
    std::fs::create_dir(dir.path().join("secrets")).unwrap();
    std::fs::write(dir.path().join("secrets/TF_VAR_hcloud_token"), "hcloud-secret-0f3a9c").unwrap();
    std::fs::write(dir.path().join("tf-token.env"), "TF_VAR_token=incus-secret-7b21e4\n").unwrap();
    std::fs::create_dir(dir.path().join("state")).unwrap();
    let mut command = Command::new(jobenv);
    command
        .args(["run", "--verb", "apply"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", dir.path())
        .env("JOBENV_DEPLOY_ENV", dir.path().join("deploy-env.json"))
        .env("JOBENV_KEYS", dir.path().join("deploy-keys.json"))
        .env("JOBENV_ATTRIBUTES", dir.path().join("deployment-attributes.json"))
        .env("JOBENV_REQUIRED_SECRETS", dir.path().join("required-secrets.json"))
        .env("JOBENV_SECRETS_DIRS", dir.path().join("secrets"))
        .env("JOBENV_SECRETS_ENV_FILES", dir.path().join("tf-token.env"))
        .env("JOBENV_STATE_DIR", dir.path().join("state"));
    let out = fediversity_testkit::nix_fixture::run_with_payload(command, payload);
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_seed_shaped_deploy_runs_on_the_rendered_node_and_no_payload_sets_a_node_only_key() {
    let jobenv = jobenv_binary();
    // What a seed front-end sends (FR-014), plus values for the pins and the node's keys.
    let payload = json!({
        "ATTRIBUTE": "mastodon",
        "TF_HTTP_ADDRESS": "https://state.example.org/tofu/team-a",
        "DOMAIN": "team-a.example",
        "INTERNAL_HOSTS": ["10.0.0.1", "10.0.0.2"],
        "PUBLISHED_HOSTS": ["team-a.example"],
        "ENVIRONMENTS": {"production": false},
        "SSH_PRIVATE_KEY_FILE": "/run/keys/team-a",
        "SELF_MODULE_SOURCE": "/payload/module-source",
        "HOSTING_CONFIG": "/payload/hosting",
        "NODE_REGION": "payload-region",
        "NODE_SITE": "payload-site",
    });
    let (code, output) = run_job_on_rendered_node(&jobenv, "{ }", &payload);
    assert_eq!(code, 0, "{output}");
    for line in [
        "DOMAIN=team-a.example",
        r#"INTERNAL_HOSTS=["10.0.0.1","10.0.0.2"]"#,
        r#"PUBLISHED_HOSTS=["team-a.example"]"#,
        r#"ENVIRONMENTS={"production":false}"#,
        "SSH_PRIVATE_KEY_FILE=/run/keys/team-a",
        // The node's value of a pin and of a node key wins; a node-only key the node leaves
        // unset gets its declared default, or nothing: never the payload's value.
        "HOSTING_CONFIG=/node/hosting",
        "NODE_SITE=ams",
        "NODE_REGION=eu",
        "SELF_MODULE_SOURCE=unset",
    ] {
        assert!(output.lines().any(|l| l.ends_with(line)), "{line} not in:\n{output}");
    }
    for value in [
        "/payload/module-source",
        "/payload/hosting",
        "payload-region",
        "payload-site",
    ] {
        assert!(
            !output.contains(&format!("={value}")),
            "{value} reached the program:\n{output}"
        );
    }
    // The secrets the module requires were there, and stayed out of the output.
    assert!(
        !output.contains("hcloud-secret-0f3a9c") && !output.contains("incus-secret-7b21e4"),
        "{output}"
    );

    // The control: an operator who opens a pin explicitly lets the payload's value through.
    let (code, output) =
        run_job_on_rendered_node(&jobenv, "{ deployKeys.SELF_MODULE_SOURCE.nodeOnly = false; }", &payload);
    assert_eq!(code, 0, "{output}");
    assert!(
        output
            .lines()
            .any(|l| l.ends_with("SELF_MODULE_SOURCE=/payload/module-source")),
        "{output}"
    );
    assert!(
        output.lines().any(|l| l.ends_with("HOSTING_CONFIG=/node/hosting")),
        "{output}"
    );
}
