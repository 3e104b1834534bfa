//! The configuration the NixOS module renders is one the bootstrap accepts and converges a node
//! with: nixos-module/lib.nix's renderer, evaluated by real nix-instantiate with the module's
//! option defaults plus this test node's addresses and files, drives the real binary against the
//! test node (PostgreSQL, OpenBao, the Windmill fake).

use std::path::Path;
use std::process::Command;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use serde_json::{Value, json};

use crate::support;

fn render(node: &Node) -> Value {
    let (config, _) = render_with(node, "b: b");
    config
}

/// The module's rendering of the bootstrap's configuration for `node`, with `patch` (a Nix
/// function of the bootstrap options) applied last; and the problems lib.nix's evaluation-time
/// checks find in those options (for a unit with no environment of its own).
fn render_with(node: &Node, patch: &str) -> (Value, Value) {
    let c = &node.config;
    let s = |v: &Value| v.as_str().expect("a string in the test node's config").to_owned();
    // The node's own values, as Nix strings (JSON string syntax is valid Nix here).
    let overrides = format!(
        r#"{{
             windmill = {{ url = {url}; adminPasswordFile = {pw}; databaseUrlFile = {db}; }};
             openbao = {{ addr = {addr}; tokenFile = {token}; path = {path}; }};
             uiAuth = {{ file = {file}; group = {group}; }};
           }}"#,
        url = json!(s(&c["windmill"]["url"])),
        pw = json!(s(&c["windmill"]["admin_password_file"])),
        db = json!(s(&c["windmill"]["database_url_file"])),
        addr = json!(s(&c["openbao"]["addr"])),
        token = json!(s(&c["openbao"]["token_file"])),
        path = json!(s(&c["openbao"]["path"])),
        file = json!(s(&c["ui_auth"]["file"])),
        group = json!(s(&c["ui_auth"]["group"])),
    );
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nixos-module/lib.nix");
    // Each option group of the module's defaults, updated with the node's values.
    let expr = format!(
        r#"let
             lib = import {lib};
             o = {overrides};
             d = lib.bootstrapDefaults;
             bootstrap = ({patch}) (d // {{ windmill = d.windmill // o.windmill; openbao = d.openbao // o.openbao; uiAuth = d.uiAuth // o.uiAuth; }});
           in {{
             config = lib.renderBootstrapConfig {{ inherit bootstrap; scriptsDir = {scripts}; }};
             problems = lib.bootstrapProblems {{ inherit bootstrap; }};
           }}"#,
        lib = json!(lib.display().to_string()),
        scripts = json!(node.scripts_dir().display().to_string()),
    );
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "--expr", &expr])
        .output()
        .expect("nix-instantiate (apt-get install nix-bin)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut both: Value = serde_json::from_slice(&out.stdout).expect("the renderer prints JSON");
    (both["config"].take(), both["problems"].take())
}

#[test]
fn the_config_the_module_renders_converges_a_node_and_checks_clean() {
    let mut node = support::node();
    let mut rendered = render(&node);
    // The module leaves the lock and the state file at the bootstrap's defaults (under /run and
    // /var/lib); a test keeps its own.
    assert!(rendered.get("lock_file").is_none());
    rendered["lock_file"] = node.config["lock_file"].clone();
    rendered["state_file"] = node.config["state_file"].clone();
    // Positive control: this is the module's file, not the test node's (its retry settings are
    // the module defaults, which the test node shortens).
    assert_eq!(
        rendered["retry"],
        json!({"login_attempts": 12, "delay_seconds": 5, "ready_timeout_seconds": 300})
    );
    node.config = rendered;

    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.step_lines().len(), 9, "{run:?}");
    let token = node.include_token().expect("the include holds a token");
    assert!(node.token_works(&token));

    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 0, "a converged node checks clean: {check:?}");
}

#[test]
fn what_the_modules_checks_refuse_the_bootstrap_refuses() {
    // Each value lib.nix's bootstrapProblems reports at evaluation (a module assertion) is one
    // the bootstrap exits 2 on; the control (the values as the module defaults them) passes
    // both.
    let (_, problems) = render_with(&support::node(), "b: b");
    assert_eq!(problems, json!([]));
    for (patch, problem, refusal) in [
        (
            r#"b: b // { uiAuth = b.uiAuth // { mode = "0444"; }; }"#,
            "bootstrap.uiAuth.mode 0444 gives others access",
            "ui_auth.mode 0444 gives access to others",
        ),
        (
            r#"b: b // { openbao = b.openbao // { addr = null; }; }"#,
            "bootstrap.openbao.addr is null",
            "openbao.addr is required",
        ),
        (
            r#"b: b // { token = b.token // { label = "session"; }; }"#,
            "bootstrap.token.label \"session\" is a label Windmill gives its own tokens",
            "token.label",
        ),
        (
            r#"b: b // { token = b.token // { label = " Ephemeral-Script"; }; }"#,
            "bootstrap.token.label \" Ephemeral-Script\" is a label Windmill gives its own tokens",
            "token.label",
        ),
        (
            r#"b: b // { workspace = b.workspace // { id = "two words"; }; }"#,
            "bootstrap.workspace.id \"two words\"",
            "workspace.id \"two words\" is invalid",
        ),
        (
            r#"b: b // { workspace = b.workspace // { folder = "with-hyphen"; }; }"#,
            "bootstrap.workspace.folder \"with-hyphen\"",
            "workspace.folder \"with-hyphen\" is invalid",
        ),
        // The UI include's own token label (the bootstrap's `ui_auth.label`).
        (
            r#"b: b // { uiAuth = b.uiAuth // { tokenLabel = "session"; }; }"#,
            "bootstrap.uiAuth.tokenLabel \"session\" is a label Windmill gives its own tokens",
            "ui_auth.label",
        ),
        (
            r#"b: b // { uiAuth = b.uiAuth // { tokenLabel = b.token.label; }; }"#,
            "bootstrap.token.label and bootstrap.uiAuth.tokenLabel are both",
            "ui_auth.label",
        ),
    ] {
        let mut node = support::node();
        let (config, problems) = render_with(&node, patch);
        let problems: Vec<&str> = problems
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap())
            .collect();
        assert_eq!(problems.len(), 1, "{patch}: {problems:?}");
        assert!(problems[0].starts_with(problem), "{patch}: {problems:?}");
        let mut config = config;
        config["lock_file"] = node.config["lock_file"].clone();
        config["state_file"] = node.config["state_file"].clone();
        node.config = config;
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 2, "{patch}: {run:?}");
        assert!(run.stderr.contains(refusal), "{patch}: {run:?}");
    }
}
