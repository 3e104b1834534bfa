//! The NixOS module's pure parts (nixos-module/lib.nix), evaluated for real with
//! `nix-instantiate --eval --strict --json` and no nixpkgs: the files it renders (jobenv's
//! deploy-env.json, keys and attributes; the bootstrap's configuration), the option defaults,
//! and the settings it adds to systemd units, nginx and Nix. The module (default.nix) only
//! wires these into NixOS options; the VM test (nixos-module/test.nix, needs nixpkgs) checks
//! the wiring on a running node.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn nix_eval(expr: &str) -> std::process::Output {
    let lib = repo().join("nixos-module/lib.nix").display().to_string();
    let full = format!("let lib = import {}; in {expr}", Value::from(lib));
    Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "-E", &full])
        .output()
        .expect("nix-instantiate is on PATH (Debian: apt-get install nix-bin)")
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
    assert!(!out.status.success(), "{expr} evaluated to {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A string constant of jobenv's command line (jobenv/src/cli.rs), so that the module and
/// jobenv cannot drift apart.
fn jobenv_const(name: &str) -> String {
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    let prefix = format!("pub const {name}: &str = \"");
    let line = cli.lines().find_map(|l| l.strip_prefix(&prefix)).unwrap_or_else(|| panic!("{name} in cli.rs"));
    line.split('"').next().unwrap().to_owned()
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
}

#[test]
fn the_ui_domain_defaults_to_jobs_under_the_parent_of_the_domain() {
    assert_eq!(eval(r#"lib.defaultUiDomain "windmill.example.org""#), "jobs.example.org");
    assert_eq!(eval(r#"lib.defaultUiDomain "api.fedi.example.co.uk""#), "jobs.fedi.example.co.uk");
    let error = eval_error(r#"lib.defaultUiDomain "localhost""#);
    assert!(error.contains("cannot derive jobs.<parent> from the domain \"localhost\"") && error.contains("set uiDomain"), "{error}");
}

#[test]
fn deploy_env_json_is_the_node_keys_as_an_object_of_strings() {
    let rendered = eval(r#"lib.renderDeployEnv { DEPLOYMENT_ROOT = "/nix/store/abc-deployment"; DEPLOYMENT_NIXPKGS = "/nix/store/def-source"; STATE_BASE_ADDRESS = "https://state.example.org/tofu"; }"#);
    assert_eq!(
        rendered,
        json!({"DEPLOYMENT_ROOT": "/nix/store/abc-deployment", "DEPLOYMENT_NIXPKGS": "/nix/store/def-source", "STATE_BASE_ADDRESS": "https://state.example.org/tofu"})
    );
    let error = eval_error("lib.renderDeployEnv { PORT = 8080; }");
    assert!(error.contains("deployEnv.PORT must be a string"), "{error}");
}

#[test]
fn deploy_keys_json_holds_the_operators_keys_and_the_structural_pins() {
    let rendered = eval(
        r#"lib.renderDeployKeys {
             DOMAIN = { description = "The domain"; default = "example.org"; };
             INTERNAL_HOSTS = { description = "Hosts, a JSON array"; default = null; };
             DNS_DOMAIN = { description = "Overridden by the operator"; default = "dns.example"; };
           }"#,
    );
    let keys = rendered.as_object().unwrap();
    assert_eq!(rendered["DOMAIN"], json!({"description": "The domain", "default": "example.org"}));
    // A key without a default has none in the file (jobenv: "simply absent" when unset).
    assert_eq!(rendered["INTERNAL_HOSTS"], json!({"description": "Hosts, a JSON array"}));
    assert_eq!(rendered["DNS_DOMAIN"], json!({"description": "Overridden by the operator", "default": "dns.example"}));
    for pin in ["HOSTING_CONFIG", "PIN_EFFECT", "SELF_MODULE_SOURCE", "OPERATOR_MODULE_SOURCE", "VERSION_LAYERS"] {
        let description = rendered[pin]["description"].as_str().unwrap_or_else(|| panic!("{pin}: {rendered}"));
        assert!(description.starts_with("Structural pin: "), "{pin}: {description}");
        assert!(rendered[pin].get("default").is_none());
    }
    assert_eq!(keys.len(), 3 + 5);
}

#[test]
fn deployment_attributes_json_is_a_sorted_array_without_repeats() {
    assert_eq!(eval(r#"lib.renderDeploymentAttributes [ "web" "mastodon-vm" "web" "db" ]"#), json!(["db", "mastodon-vm", "web"]));
    assert_eq!(eval("lib.renderDeploymentAttributes [ ]"), json!([]));
}

#[test]
fn problems_of_the_node_configuration_are_found_before_anything_is_built() {
    let problems = eval(
        r#"lib.deployEnvProblems {
             deployEnv = { STATE_BASE_ADDRESS = "http://s"; TF_VAR_token = "x"; };
             deploySecrets = { "bad-name" = "t"; TF_VAR_token = "t"; good_NAME_2 = "t"; };
           }"#,
    );
    assert_eq!(
        problems,
        json!([
            "deployEnv.DEPLOYMENT_ROOT is required: the tree that holds the deployment programs",
            "deployEnv.DEPLOYMENT_NIXPKGS (or NIXPKGS) is required: the nixpkgs the programs run with",
            "deploySecrets.bad-name: a secret's name is a variable name ([A-Za-z_][A-Za-z0-9_]*)",
            "TF_VAR_token is set both in deployEnv and in deploySecrets; jobenv refuses a key from two node sources"
        ])
    );
    // The control: a complete node has none (either spelling of the nixpkgs key).
    for nixpkgs in ["DEPLOYMENT_NIXPKGS", "NIXPKGS"] {
        let clean = eval(&format!(
            r#"lib.deployEnvProblems {{ deployEnv = {{ DEPLOYMENT_ROOT = "/r"; {nixpkgs} = "/n"; }}; deploySecrets = {{ TF_VAR_token = "t"; }}; }}"#
        ));
        assert_eq!(clean, json!([]));
    }
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
    for (mode, refused) in [("0440", false), ("440", false), ("0640", false), ("0750", false), ("0444", true), ("0441", true), ("644", true)] {
        let patch = format!(r#"b: (({addr}) b) // {{ uiAuth = b.uiAuth // {{ mode = "{mode}"; }}; }}"#);
        let problems = bootstrap_problems(&patch, "{ }", "null");
        let expected = if refused {
            json!([format!("bootstrap.uiAuth.mode {mode} gives others access to the nginx include, which holds a superadmin token; the bootstrap refuses it (e.g. 0440)")])
        } else {
            json!([])
        };
        assert_eq!(problems, expected, "mode {mode}");
    }

    // openbao.addr null: fine only when the unit gives the bootstrap BAO_ADDR or VAULT_ADDR.
    let missing = json!(["bootstrap.openbao.addr is null and the bootstrap unit's environment sets neither BAO_ADDR nor VAULT_ADDR; the bootstrap would refuse to start: set bootstrap.openbao.addr"]);
    assert_eq!(bootstrap_problems("b: b", "{ }", "null"), missing);
    assert_eq!(bootstrap_problems("b: b", r#"{ PATH = "/bin"; BAO_ADDR = ""; }"#, "null"), missing);
    assert_eq!(bootstrap_problems("b: b", r#"{ BAO_ADDR = null; }"#, "null"), missing);
    assert_eq!(bootstrap_problems("b: b", r#"{ BAO_ADDR = "http://127.0.0.1:8100"; }"#, "null"), json!([]));
    assert_eq!(bootstrap_problems("b: b", r#"{ VAULT_ADDR = "http://127.0.0.1:8100"; }"#, "null"), json!([]));
    assert_eq!(bootstrap_problems("b: b", "{ }", r#""/run/keys/bootstrap.env""#), json!([]));

    // Windmill's own rules, and the label Windmill gives its sessions.
    let problems = bootstrap_problems(
        &format!(r#"b: (({addr}) b) // {{ token = b.token // {{ label = "session"; }}; workspace = {{ id = "a b"; name = "n"; folder = "a-b"; }}; }}"#),
        "{ }",
        "null",
    );
    assert_eq!(
        problems,
        json!([
            "bootstrap.token.label must not be \"session\": Windmill labels its login sessions so, and revoking older tokens of the label would log out every session",
            "bootstrap.workspace.id \"a b\" is not a Windmill workspace id (word characters, single hyphens between them)",
            "bootstrap.workspace.folder \"a-b\" is not a Windmill folder name (letters, digits and underscores)"
        ])
    );
    let fine = bootstrap_problems(&format!(r#"b: (({addr}) b) // {{ workspace = {{ id = "fedi-ops_2"; name = "n"; folder = "deploy_2"; }}; }}"#), "{ }", "null");
    assert_eq!(fine, json!([]));
}

#[test]
fn deploy_secrets_become_agent_templates_readable_by_the_worker_group_only() {
    let templates = eval(
        r#"lib.agentTemplates {
             deploySecrets = { TF_VAR_hcloud_token = "{{ with secret \"secret/data/hc\" }}{{ .Data.data.token }}{{ end }}"; SSH_KEY = "k"; };
             group = "windmill";
           }"#,
    );
    let secrets_dir = jobenv_const("DEFAULT_SECRETS_DIR");
    assert_eq!(
        templates,
        json!([
            {"contents": "k", "destination": format!("{secrets_dir}/SSH_KEY"), "perms": "0440", "group": "windmill", "error_on_missing_key": true},
            {"contents": "{{ with secret \"secret/data/hc\" }}{{ .Data.data.token }}{{ end }}", "destination": format!("{secrets_dir}/TF_VAR_hcloud_token"), "perms": "0440", "group": "windmill", "error_on_missing_key": true}
        ])
    );
    let rules = eval(r#"lib.tmpfilesRules { group = "windmill"; }"#);
    assert_eq!(
        rules,
        json!([
            "d /run/fediversity-windmill 0755 root root - -",
            format!("d {secrets_dir} 0750 root windmill - -"),
            format!("d {} 0750 windmill windmill - -", jobenv_const("DEFAULT_STATE_DIR")),
            "d /run/windmill-ui-auth 0750 root nginx - -"
        ])
    );
}

/// The bootstrap configuration of the README ("fediversity-windmill-bootstrap", "Configuration"):
/// every field with its default. `null` marks a required field (or one with an environment
/// fallback); the module has no default for it.
fn spec_fields() -> Vec<(&'static str, Value)> {
    vec![
        ("/windmill/url", json!("http://127.0.0.1:8001")),
        ("/windmill/admin_email", json!("admin@windmill.dev")),
        ("/windmill/admin_password_file", Value::Null),
        ("/windmill/default_password", json!("changeme")),
        ("/windmill/database_url_file", Value::Null),
        ("/windmill/database_role", json!("windmill_admin")),
        ("/workspace/id", json!("fediversity")),
        ("/workspace/name", json!("fediversity")),
        ("/workspace/folder", json!("fediversity")),
        ("/scripts/dir", Value::Null),
        ("/token/label", json!("fediversity")),
        ("/token/revoke_previous", json!(true)),
        ("/settings", json!({"instance_python_version": "3.12"})),
        ("/openbao/addr", Value::Null),
        ("/openbao/token_file", Value::Null),
        ("/openbao/path", Value::Null),
        ("/openbao/field", json!("value")),
        ("/ui_auth/file", json!("/run/windmill-ui-auth/token.conf")),
        ("/ui_auth/owner", json!("root")),
        ("/ui_auth/group", json!("nginx")),
        ("/ui_auth/mode", json!("0440")),
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
    // Fields with an environment fallback are left out when not set.
    let mut expected: Vec<String> = spec_fields()
        .into_iter()
        .map(|(p, _)| p.to_owned())
        .filter(|p| p != "/openbao/addr" && p != "/openbao/token_file")
        .collect();
    expected.sort();
    assert_eq!(rendered, expected, "{config:#}");
    for (pointer, default) in spec_fields() {
        if !default.is_null() {
            assert_eq!(config.pointer(pointer), Some(&default), "{pointer}");
        }
    }
    assert_eq!(config["windmill"]["admin_password_file"], "/run/fediversity-windmill/admin-password");
    assert_eq!(config["windmill"]["database_url_file"], "/run/keys/windmill-dsn");
    assert_eq!(config["scripts"]["dir"], "/nix/store/xyz-fediversity-windmill-scripts");
    assert_eq!(config["openbao"]["path"], "fediversity/secret/windmill/apiToken");
}

#[test]
fn the_bootstrap_configuration_renders_every_option_that_is_set() {
    let config = eval(
        r#"lib.renderBootstrapConfig {
             scriptsDir = "/s";
             bootstrap = {
               windmill = { url = "http://127.0.0.1:9001"; adminEmail = "root@example.org"; adminPasswordFile = "/p"; defaultPassword = "fresh"; databaseUrlFile = "/d"; databaseRole = "other_admin"; };
               workspace = { id = "ws"; name = "Workspace"; folder = "deploys"; };
               token = { label = "front"; revokePrevious = false; };
               settings = { instance_python_version = "3.12"; base_url = "https://jobs.example.org"; };
               openbao = { addr = "http://127.0.0.1:8100"; tokenFile = "/t"; path = "p/secret/x"; field = "token"; };
               uiAuth = { file = "/run/ui/token.conf"; owner = "root"; group = "www"; mode = "0400"; };
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
            "token": {"label": "front", "revoke_previous": false},
            "settings": {"instance_python_version": "3.12", "base_url": "https://jobs.example.org"},
            "openbao": {"addr": "http://127.0.0.1:8100", "token_file": "/t", "path": "p/secret/x", "field": "token"},
            "ui_auth": {"file": "/run/ui/token.conf", "owner": "root", "group": "www", "mode": "0400"},
            "retry": {"login_attempts": 3, "delay_seconds": 1, "ready_timeout_seconds": 60}
        })
    );
}

#[test]
fn a_missing_required_bootstrap_option_is_named() {
    for (option, set) in [
        ("windmill.adminPasswordFile", r#"adminPasswordFile = "/run/fediversity-windmill/admin-password";"#),
        ("windmill.databaseUrlFile", r#"databaseUrlFile = "/run/keys/windmill-dsn";"#),
        ("openbao.path", r#"// { path = "fediversity/secret/windmill/apiToken"; }"#),
    ] {
        let broken = MINIMAL_BOOTSTRAP.replace(set, "");
        assert_ne!(broken, MINIMAL_BOOTSTRAP);
        let error = eval_error(&broken);
        assert!(error.contains(&format!("services.fediversity-windmill.bootstrap.{option} is required")), "{option}: {error}");
    }
}

#[test]
fn windmill_units_restart_after_5s_start_after_the_agent_and_report_to_otel_when_asked() {
    let units = eval(r#"lib.units { otelEndpoint = "http://otel.example:4318"; }"#);
    for (unit, role) in [("windmill-server", "server"), ("windmill-worker", "worker"), ("windmill-worker-native", "worker-native")] {
        let u = &units[unit];
        assert_eq!(u["serviceConfig"]["RestartSec"], "5s", "{unit}");
        assert_eq!(u["after"], json!(["openbao-agent-default.service"]), "{unit}");
        let env = &u["environment"];
        assert_eq!(env["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://otel.example:4318", "{unit}");
        assert_eq!(env["OTEL_EXPORTER_OTLP_PROTOCOL"], "http/protobuf");
        assert_eq!(env["OTEL_SERVICE_NAME"], format!("windmill-{role}"));
        assert_eq!(env["OTEL_RESOURCE_ATTRIBUTES"], "service.namespace=fediversity");
    }
    // Without an endpoint, no OTEL_ variable at all.
    let units = eval("lib.units { }");
    for unit in ["windmill-server", "windmill-worker", "windmill-worker-native"] {
        let env = units[unit]["environment"].as_object().unwrap();
        assert!(env.keys().all(|k| !k.starts_with("OTEL_")), "{unit}: {env:?}");
    }
    assert_eq!(units["windmill-server"]["environment"], json!({}));
}

#[test]
fn the_worker_lets_jobenv_finish_a_cancel_and_finds_it_and_nix_on_its_path() {
    let units = eval("lib.units { }");
    let worker = &units["windmill-worker"];
    assert_eq!(worker["serviceConfig"]["KillMode"], "mixed");
    let wait: u64 = worker["environment"]["MAX_WAIT_FOR_SIGINT"].as_str().unwrap().parse().unwrap();
    // jobenv's default grace (SIGTERM to SIGKILL of the program tree) must fit well inside it.
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    let grace_line = cli.lines().find(|l| l.contains("env = \"JOBENV_GRACE\"")).unwrap();
    let grace: u64 = grace_line.split("default_value = \"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap();
    assert!(wait >= grace + 5, "MAX_WAIT_FOR_SIGINT={wait} leaves jobenv's grace of {grace}s too little room");
    assert_eq!(worker["environment"]["HOME"], "/var/lib/windmill-worker");
    assert_eq!(eval("lib.workerPath"), json!(["nix", "openssh", "git", "bash", "fediversity-jobenv"]));
}

#[test]
fn jobs_get_jobenvs_state_dir_and_nix_shell_through_windmills_env_whitelist() {
    // Windmill clears a job's environment except for WHITELIST_ENVS: jobenv, exec'd by the
    // job, sees these worker variables, and its journal directory is writable by the worker.
    let cli = std::fs::read_to_string(repo().join("jobenv/src/cli.rs")).unwrap();
    let state_dir = jobenv_const("DEFAULT_STATE_DIR");
    let units = eval(r#"lib.units { nixShell = "/nix/store/abc-nix-2.28/bin/nix-shell"; }"#);
    let worker = &units["windmill-worker"];
    let env = &worker["environment"];
    assert_eq!(env["WHITELIST_ENVS"], "JOBENV_NIX_SHELL,JOBENV_STATE_DIR");
    for name in env["WHITELIST_ENVS"].as_str().unwrap().split(',') {
        assert!(env.get(name).is_some(), "{name} is whitelisted but not set");
        assert!(cli.contains(&format!("env = \"{name}\"")), "jobenv does not read {name}");
    }
    assert_eq!(env["JOBENV_NIX_SHELL"], "/nix/store/abc-nix-2.28/bin/nix-shell");
    assert_eq!(env["JOBENV_STATE_DIR"], state_dir.as_str());
    assert_eq!(worker["serviceConfig"]["ReadWritePaths"], json!([state_dir]));
    // Only the worker gets them.
    for unit in ["windmill-server", "windmill-worker-native"] {
        assert!(units[unit]["environment"].get("WHITELIST_ENVS").is_none(), "{unit}");
    }
    // Without a nix-shell given, jobenv looks it up on the worker's PATH.
    let units = eval("lib.units { }");
    assert_eq!(units["windmill-worker"]["environment"]["WHITELIST_ENVS"], "JOBENV_STATE_DIR");
    assert!(units["windmill-worker"]["environment"].get("JOBENV_NIX_SHELL").is_none());
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
        assert!(unit["after"].as_array().unwrap().contains(&json!(dependency)), "after {dependency}");
        assert!(unit["wants"].as_array().unwrap().contains(&json!(dependency)), "wants {dependency}");
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
    assert_eq!(service["RestrictAddressFamilies"], json!(["AF_UNIX", "AF_INET", "AF_INET6"]));
    assert!(service.get("PrivateNetwork").is_none() && service.get("IPAddressDeny").is_none());
    assert_eq!(service["CapabilityBoundingSet"], json!(["CAP_CHOWN", "CAP_DAC_READ_SEARCH"]));
    assert!(service["ReadWritePaths"].as_array().unwrap().contains(&json!("/run/nginx-includes")));
    assert!(service.get("DynamicUser").is_none() && service.get("User").is_none(), "it runs as root");
}

#[test]
fn a_changed_admin_password_reruns_the_bootstrap_and_a_new_token_reloads_nginx() {
    let paths = eval(r#"lib.pathUnits { adminPasswordFile = "/run/fediversity-windmill/admin-password"; }"#);
    let password = &paths["fediversity-windmill-bootstrap-password"];
    assert_eq!(password["pathConfig"]["PathChanged"], "/run/fediversity-windmill/admin-password");
    assert_eq!(password["pathConfig"]["Unit"], "fediversity-windmill-bootstrap-rerun.service");
    assert_eq!(password["wantedBy"], json!(["multi-user.target"]));
    let ui = &paths["fediversity-windmill-ui-auth"];
    assert_eq!(ui["pathConfig"]["PathChanged"], "/run/windmill-ui-auth/token.conf");
    assert_eq!(ui["pathConfig"]["Unit"], "fediversity-windmill-nginx-reload.service");
    let units = eval("lib.units { }");
    for unit in ["fediversity-windmill-bootstrap-rerun", "fediversity-windmill-nginx-reload"] {
        assert_eq!(units[unit]["serviceConfig"]["Type"], "oneshot", "{unit}");
    }
}

#[test]
fn nginx_serves_only_the_api_on_the_domain_and_the_ui_with_the_token_include() {
    let hosts = eval(r#"lib.virtualHosts { domain = "windmill.example.org"; uiDomain = "jobs.example.org"; }"#);
    assert_eq!(hosts.as_object().unwrap().len(), 2);
    assert_eq!(
        hosts["windmill.example.org"],
        json!({"locations": {"/": {"return": "404"}, "/api/": {"proxyPass": "http://127.0.0.1:8001"}}})
    );
    assert_eq!(
        hosts["jobs.example.org"],
        json!({"locations": {"/": {"proxyPass": "http://127.0.0.1:8001", "proxyWebsockets": true, "extraConfig": "include /run/windmill-ui-auth/*.conf;"}}})
    );

    // The forward-auth hook goes before the include; another port follows services.windmill.
    let hosts = eval(
        r#"lib.virtualHosts { domain = "a.example"; uiDomain = "jobs.example"; port = 9001; forwardAuth = "auth_request /oauth2/auth;"; }"#,
    );
    assert_eq!(hosts["a.example"]["locations"]["/api/"]["proxyPass"], "http://127.0.0.1:9001");
    assert_eq!(hosts["jobs.example"]["locations"]["/"]["extraConfig"], "auth_request /oauth2/auth;\ninclude /run/windmill-ui-auth/*.conf;");

    let error = eval_error(r#"lib.virtualHosts { domain = "same.example"; uiDomain = "same.example"; }"#);
    assert!(error.contains("domain and uiDomain must differ"), "{error}");
}

#[test]
fn nix_trusts_the_worker_pins_nixpkgs_and_uses_no_downloaded_registry() {
    let settings = eval(r#"lib.nixSettings { user = "windmill"; }"#);
    assert_eq!(
        settings,
        json!({"trusted-users": ["root", "windmill"], "flake-registry": "", "experimental-features": ["nix-command", "flakes"]})
    );
    assert_eq!(
        eval(r#"lib.registry (lib.deploymentNixpkgs { DEPLOYMENT_ROOT = "/r"; DEPLOYMENT_NIXPKGS = "/nix/store/aaa-source"; })"#),
        json!({"nixpkgs": {"to": {"type": "path", "path": "/nix/store/aaa-source"}}})
    );
    assert_eq!(eval(r#"lib.deploymentNixpkgs { NIXPKGS = "/nix/store/bbb-source"; }"#), "/nix/store/bbb-source");
    assert_eq!(eval("lib.registry (lib.deploymentNixpkgs { })"), json!({}));
}

#[test]
fn the_modules_option_defaults_come_from_the_library_tested_here() {
    // The module (not evaluable without nixpkgs) must take its defaults and renderers from
    // lib.nix rather than restate them; this guards the wiring the tests above rely on.
    let module = std::fs::read_to_string(repo().join("nixos-module/default.nix")).unwrap();
    for use_of_lib in [
        "fw = import ./lib.nix;",
        "d = fw.bootstrapDefaults;",
        "fw.renderBootstrapConfig",
        "fw.renderDeployEnv cfg.deployEnv",
        "fw.renderDeployKeys cfg.deployKeys",
        "fw.renderDeploymentAttributes cfg.deploymentAttributes",
        "fw.units {",
        "fw.pathUnits {",
        "fw.tmpfilesRules {",
        "fw.virtualHosts {",
        "fw.nixSettings { user = windmillUser; }",
        "fw.registry (fw.deploymentNixpkgs cfg.deployEnv)",
        "fw.agentTemplates {",
        "fw.deployEnvProblems {",
        "fw.bootstrapProblems {",
        "unitEnvironment = unit.environment;",
        "unitEnvironmentFile = unit.serviceConfig.EnvironmentFile or null;",
        "map (name: workerPackages.${name}) fw.workerPath",
        "nixShell = \"${config.nix.package}/bin/nix-shell\";",
        "/bin/fediversity-jobenv recover --state-dir ${fw.paths.stateDir}",
        "user = windmillUser;",
        "\"fediversity-windmill/deploy-env.json\"",
        "\"fediversity-windmill/deploy-keys.json\"",
        "\"fediversity-windmill/deployment-attributes.json\"",
        "\"fediversity-windmill/bootstrap.json\"",
    ] {
        assert!(module.contains(use_of_lib), "nixos-module/default.nix no longer uses {use_of_lib:?}");
    }
    // The paths the module writes /etc files to are lib.paths (relative to /etc).
    let paths = eval("lib.paths");
    for key in ["deployEnv", "deployKeys", "deploymentAttributes", "bootstrapConfig"] {
        let path = paths[key].as_str().unwrap();
        let relative = path.strip_prefix("/etc/").unwrap();
        assert!(module.contains(&format!("\"{relative}\"")), "{relative}");
    }
}

#[test]
fn the_vm_tests_script_is_valid_python() {
    // The VM test needs nixpkgs to run; its Python test script can still be extracted (with
    // stand-ins for the node's store paths) and compiled here.
    let test = repo().join("nixos-module/test.nix").display().to_string();
    let expr = format!(
        r#"((import {} {{ lib = null; }}).testScript {{ nodes.machine.services.fediversity-windmill = {{ scriptsPackage = "/nix/store/s"; package = "/nix/store/p"; deployEnv.DEPLOYMENT_NIXPKGS = "/nix/store/n"; }}; }})"#,
        Value::from(test)
    );
    let script = eval(&expr);
    let script = script.as_str().unwrap();
    assert!(script.contains("with subtest(\"a deploy job runs the deployment program through jobenv\"):"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("test_script.py");
    std::fs::write(&file, script).unwrap();
    let check = format!("import ast, sys; ast.parse(open({:?}).read())", file.display().to_string());
    let out = Command::new("python3").args(["-c", &check]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Positive control: a script with a syntax error is caught the same way.
    std::fs::write(&file, format!("{script}\n    if\n")).unwrap();
    assert!(!Command::new("python3").args(["-c", &check]).output().unwrap().status.success());
}
