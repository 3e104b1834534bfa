//! `env` prints exactly what `run` would execute, with each variable's source, and runs
//! nothing; `keys` lists the declared keys.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::{Value, json};

#[test]
fn env_json_shows_argv_and_every_source() {
    let mut f = Fixture::new();
    let started = f.path().join("started");
    f.program("web", "apply", &format!("touch {}", started.display()));
    f.declare("FROM_NODE", None)
        .declare("FROM_PAYLOAD", None)
        .declare("FROM_ENVIRON", None)
        .declare("FROM_DEFAULT", Some("d"));
    f.declare("FROM_SECRET", None).secret("FROM_SECRET", "secret-value-1");
    f.node("FROM_NODE", "n").node("STATE_BASE_ADDRESS", "http://state/tf");
    let done = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply", "--format", "json"])
        .env("FROM_ENVIRON", "e")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "FROM_PAYLOAD": "p"}))
        .expect_success()
        .run();
    assert!(!started.exists(), "env ran the program");
    let shown: Value = serde_json::from_str(&done.stdout).unwrap();
    let root = f.root().display().to_string();
    assert_eq!(
        shown["argv"],
        json!([
            which_nix_shell(),
            root,
            "-I",
            format!("nixpkgs={root}"),
            "-A",
            format!("devShells.{}-linux.web", std::env::consts::ARCH),
            "--run",
            "exec web-apply"
        ])
    );
    let source = |key: &str| shown["env"][key]["source"].as_str().unwrap_or("absent").to_owned();
    assert_eq!(source("FROM_NODE"), "node");
    assert_eq!(source("FROM_SECRET"), "secret");
    assert_eq!(source("FROM_PAYLOAD"), "payload");
    assert_eq!(source("FROM_ENVIRON"), "environ");
    assert_eq!(source("FROM_DEFAULT"), "default");
    assert_eq!(source("TF_HTTP_ADDRESS"), "derived");
    assert_eq!(source("PATH"), "environ");
    assert_eq!(shown["env"]["TF_HTTP_ADDRESS"]["value"], "http://state/tf/ns");
    assert_eq!(shown["env"]["FROM_SECRET"]["value"], "[REDACTED]");
}

#[test]
fn env_text_has_one_line_per_variable_with_its_source() {
    let mut f = Fixture::new();
    f.program("web", "apply", "true").declare("DOMAIN", Some("example.org"));
    let text = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply"])
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
        .expect_success()
        .run()
        .stdout;
    assert!(text.contains("DOMAIN=example.org  # default\n"), "{text}");
    assert!(text.contains("DEPLOYMENT_NAMESPACE=ns  # derived\n"), "{text}");
    assert!(text.contains("exec web-apply\n"), "{text}");
}

#[test]
fn env_refuses_what_run_refuses() {
    let mut f = Fixture::new();
    f.program("web", "apply", "true");
    let done = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply"])
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "UNDECLARED": "x"}))
        .expect_code(2)
        .expect_stdout("")
        .run();
    assert_eq!(
        done.stderr,
        "jobenv: error: payload rejected: undeclared keys: UNDECLARED\n"
    );
}

#[test]
fn keys_lists_descriptions_and_defaults() {
    let mut f = Fixture::new();
    f.declare("DOMAIN", Some("example.org")).declare("HOSTING_CONFIG", None);
    f.write();
    let out = std::process::Command::new(jobenv_bin!())
        .args(["keys", "--keys"])
        .arg(f.keys_path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "DOMAIN\n    test key DOMAIN\n    default: example.org\nHOSTING_CONFIG\n    test key HOSTING_CONFIG\n"
    );
    let out = std::process::Command::new(jobenv_bin!())
        .args(["keys", "--format", "json", "--keys"])
        .arg(f.keys_path())
        .output()
        .unwrap();
    let keys: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        keys["DOMAIN"],
        json!({"description": "test key DOMAIN", "default": "example.org"})
    );
}

#[test]
fn keys_and_env_say_which_keys_are_node_only() {
    let mut f = Fixture::new();
    f.program("web", "apply", "true")
        .declare_node_only("HOSTING_CONFIG", Some("/etc/hosting"))
        .declare("DOMAIN", None);
    f.write();
    let out = std::process::Command::new(jobenv_bin!())
        .args(["keys", "--keys"])
        .arg(f.keys_path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "DOMAIN\n    test key DOMAIN\nHOSTING_CONFIG\n    test key HOSTING_CONFIG\n    default: /etc/hosting\n    node-only: set by the node; a payload value is ignored\n"
    );
    let out = std::process::Command::new(jobenv_bin!())
        .args(["keys", "--format", "json", "--keys"])
        .arg(f.keys_path())
        .output()
        .unwrap();
    let keys: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        keys["HOSTING_CONFIG"],
        json!({"description": "test key HOSTING_CONFIG", "default": "/etc/hosting", "node_only": true})
    );
    assert_eq!(
        keys["DOMAIN"],
        json!({"description": "test key DOMAIN"}),
        "an ordinary key says nothing of it"
    );

    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "HOSTING_CONFIG": "/payload"});
    let run = |format: &str| {
        f.jobenv(jobenv_bin!())
            .args(["env", "--verb", "apply", "--format", format])
            .payload(&payload)
            .expect_success()
            .run()
            .stdout
    };
    let text = run("text");
    assert!(text.contains("HOSTING_CONFIG=/etc/hosting  # default\n"), "{text}");
    assert!(text.ends_with("# payload keys ignored, the node wins: HOSTING_CONFIG\n# node-only keys, never taken from a payload: HOSTING_CONFIG\n"), "{text}");
    let shown: Value = serde_json::from_str(&run("json")).unwrap();
    assert_eq!(shown["node_only"], json!(["HOSTING_CONFIG"]));
    assert_eq!(shown["ignored"], json!({"HOSTING_CONFIG": "node"}));
}

#[test]
fn the_nix_shell_option_picks_the_program_that_runs() {
    let mut f = Fixture::new();
    f.program("web", "apply", "true");
    let stand_in = f.path().join("fake-nix-shell");
    fediversity_testkit::nix_fixture::write_executable(&stand_in, "#!/bin/sh\necho stand-in \"$@\"\n");
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"});
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--nix-shell", stand_in.to_str().unwrap()])
        .payload(&payload)
        .run();
    assert!(done.stdout.starts_with("stand-in "), "{done:?}");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--nix-shell", "/nonexistent/nix-shell"])
        .payload(&payload)
        .expect_code(2)
        .expect_stderr_contains("nix-shell \"/nonexistent/nix-shell\" was not found or is not executable")
        .run();
}

fn which_nix_shell() -> String {
    fediversity_testkit::nix_fixture::TEST_PATH
        .split(':')
        .map(|dir| format!("{dir}/nix-shell"))
        .find(|p| std::path::Path::new(p).exists())
        .expect("nix-shell installed")
}
