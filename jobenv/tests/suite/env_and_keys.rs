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
    // The run step: the derivation the evaluation makes, and the program.
    assert_eq!(
        shown["argv"],
        json!([
            which_nix_shell(),
            "<the derivation the evaluation makes>",
            "-I",
            format!("nixpkgs={root}"),
            "--run",
            "exec web-apply"
        ])
    );
    // The evaluation before it: what nix-shell would have evaluated, rooted in a directory of
    // the job's own (the fixture's tree is not in the store: it is not cached).
    let nix_instantiate = which_nix_shell().replace("nix-shell", "nix-instantiate");
    assert_eq!(
        shown["evaluation"]["argv"],
        json!([
            nix_instantiate,
            root,
            "-I",
            format!("nixpkgs={root}"),
            "-A",
            format!("devShells.{}-linux.web", std::env::consts::ARCH),
            "--arg",
            "inNixShell",
            "true",
            "--add-root",
            format!("{}/shells/job-<pid>-<start>/shell.drv", f.state_dir().display())
        ])
    );
    assert_eq!(shown["evaluation"]["cache"], "off");
    assert_eq!(
        shown["evaluation"]["why"],
        format!("DEPLOYMENT_ROOT {root} is not in the Nix store (/nix/store)")
    );
    // Its environment: the node's, never the payload's, a secret's or a default's of a key
    // that is not node-only.
    let evaluated: Vec<&str> = shown["evaluation"]["env"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        evaluated,
        [
            "HOME",
            "IN_NIX_SHELL",
            "NIX_PATH",
            "NIX_USER_CONF_FILES",
            "PATH",
            "XDG_CACHE_HOME"
        ]
    );
    assert_eq!(shown["evaluation"]["env"]["HOME"]["value"], "/homeless-shelter");
    assert_eq!(
        shown["evaluation"]["env"]["NIX_PATH"]["value"],
        format!("nixpkgs={root}")
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
    assert!(
        text.starts_with("# cache: off, evaluated by every job: DEPLOYMENT_ROOT "),
        "{text}"
    );
    let evaluation = text
        .split("# evaluation environment: KEY=VALUE  # source\n")
        .nth(1)
        .and_then(|rest| rest.split("# argv, one argument per line\n").next())
        .unwrap_or_else(|| panic!("{text}"));
    assert!(evaluation.contains("HOME=/homeless-shelter  # derived\n"), "{text}");
    assert!(!evaluation.contains("DOMAIN"), "{text}");
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
    // nix-instantiate and nix-store stand in too: beside the nix-shell given.
    let stand_in = f.nix_shell_stand_in();
    fediversity_testkit::nix_fixture::write_executable(&stand_in, "#!/bin/sh\necho stand-in \"$@\"\n");
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"});
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--nix-shell", stand_in.to_str().unwrap()])
        .payload(&payload)
        .run();
    assert_eq!(
        done.stdout,
        format!(
            "stand-in {} -I nixpkgs={} --run exec web-apply\n",
            fediversity_testkit::nix_fixture::STAND_IN_DRV,
            f.root().display()
        ),
        "{done:?}"
    );
    // A nix-shell without Nix's other programs beside it is refused before anything runs.
    let alone = f.path().join("alone");
    std::fs::create_dir(&alone).unwrap();
    fediversity_testkit::nix_fixture::write_executable(&alone.join("nix-shell"), "#!/bin/sh\nexit 0\n");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--nix-shell", alone.join("nix-shell").to_str().unwrap()])
        .payload(&payload)
        .expect_code(2)
        .expect_stderr_contains(format!(
            "nix-instantiate {}/nix-instantiate (beside nix-shell) was not found or is not executable",
            alone.display()
        ))
        .expect_stderr_contains("nix-store ")
        .run();
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
