//! Nothing undeclared reaches a deployment, and two deployments never share state.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, parse_env_lines, run_with_payload};
use serde_json::json;

#[test]
fn job_runner_variables_do_not_reach_the_program_but_declared_keys_do() {
    let mut f = Fixture::new();
    f.program("web", "apply", "/usr/bin/env").declare("DECLARED", None);
    let mut command = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    command
        .env("WM_TOKEN", "jwt_job_token")
        .env("WM_JOB_ID", "0192-job")
        .env("BASE_INTERNAL_URL", "http://localhost:1234")
        .env("PYTHONPATH", "/tmp/python-path")
        .env("SOME_RANDOM_VARIABLE", "random")
        .env("LD_PRELOAD", "/tmp/evil.so")
        .env("DECLARED", "yes");
    let out = run_with_payload(command, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let env = parse_env_lines(&String::from_utf8_lossy(&out.stdout));
    // Positive control: the same mechanism passes a declared key.
    assert_eq!(env.get("DECLARED").map(String::as_str), Some("yes"), "{env:?}");
    for leaked in ["WM_TOKEN", "WM_JOB_ID", "BASE_INTERNAL_URL", "PYTHONPATH", "SOME_RANDOM_VARIABLE", "LD_PRELOAD"] {
        assert!(!env.contains_key(leaked), "{leaked} reached the program: {env:?}");
    }
    assert!(!String::from_utf8_lossy(&out.stdout).contains("jwt_job_token"));
}

#[test]
fn two_namespaces_get_two_state_addresses() {
    let mut f = Fixture::new();
    f.program("web", "apply", r#"echo "address=$TF_HTTP_ADDRESS lock=$TF_HTTP_LOCK_ADDRESS unlock=$TF_HTTP_UNLOCK_ADDRESS ns=$DEPLOYMENT_NAMESPACE""#);
    f.node("STATE_BASE_ADDRESS", "https://state.example/tf/");
    let run = |ns: &str| {
        let out = f.run(jobenv_bin!(), &["run", "--verb", "apply"], &json!({"ATTRIBUTE": "web", "NAMESPACE": ns}));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        run("team-a"),
        "address=https://state.example/tf/team-a lock=https://state.example/tf/team-a/lock unlock=https://state.example/tf/team-a/lock ns=team-a\n"
    );
    assert_eq!(
        run("team-b"),
        "address=https://state.example/tf/team-b lock=https://state.example/tf/team-b/lock unlock=https://state.example/tf/team-b/lock ns=team-b\n"
    );
}

#[test]
fn a_payload_cannot_set_the_state_address() {
    let mut f = Fixture::new();
    let started = f.path().join("started");
    f.program("web", "apply", &format!("touch {}", started.display()));
    f.node("STATE_BASE_ADDRESS", "https://state.example/tf");
    let out = f.run(
        jobenv_bin!(),
        &["run", "--verb", "apply"],
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "a", "TF_HTTP_ADDRESS": "https://state.example/tf/b"}),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("payload rejected: reserved keys: TF_HTTP_ADDRESS"));
    assert!(!started.exists(), "the program ran");
}

#[test]
fn the_program_gets_the_node_pin_of_nixpkgs() {
    let mut f = Fixture::new();
    f.program("web", "apply", "/usr/bin/env");
    let out = f.run(jobenv_bin!(), &["run", "--verb", "apply"], &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    let env = parse_env_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(env["NIX_PATH"], format!("nixpkgs={}", f.root().display()));
}

#[test]
fn descriptors_jobenv_inherits_do_not_reach_the_program() {
    use std::os::fd::AsRawFd;
    let mut f = Fixture::new();
    // One `ls`, no command substitution: the shell itself opens no pipe while listing.
    f.program("web", "apply", "ls -l /proc/$$/fd/");
    // A file opened without close-on-exec, as a job runner's socket or a caller's pipe would be.
    let marker = f.path().join("inherited-marker");
    std::fs::write(&marker, "x").unwrap();
    let file = std::fs::File::open(&marker).unwrap();
    let inherited = nix::unistd::dup(&file).unwrap();
    let command = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    let out = run_with_payload(command, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    let fds = String::from_utf8_lossy(&out.stdout).into_owned();
    // Positive control: the same listing, run without jobenv by this process (which passes the
    // descriptor on, as a job runner would), does show it.
    assert!(inherited.as_raw_fd() > 2);
    let direct = std::process::Command::new("/bin/sh").args(["-c", "ls -l /proc/$$/fd/"]).output().unwrap();
    assert!(String::from_utf8_lossy(&direct.stdout).contains("inherited-marker"), "the check cannot see an inherited descriptor");
    assert!(!fds.contains("inherited-marker"), "an inherited descriptor reached the program:\n{fds}");
    assert!(!fds.contains(&f.state_dir().display().to_string()), "a lock or journal descriptor leaked:\n{fds}");
    assert!(!fds.contains("socket:"), "{fds}");
    let pipes: Vec<&str> = fds
        .lines()
        .filter(|l| l.contains("pipe:"))
        .filter_map(|l| l.split(" -> ").next()?.rsplit(' ').next())
        .collect();
    assert_eq!(pipes, ["1", "2"], "only stdout and stderr are pipes:\n{fds}");
}
