//! A secrets env file never has its text quoted. Its lines are `KEY=VALUE` with a key like
//! `^[A-Za-z_][A-Za-z0-9_]*$`; any other line (a wrapped PEM or base64 line, a stray
//! `MY PASSWORD x=`) is reported by file and line number only, and nothing of a line reaches an
//! error, `result.json` or a progress event but a valid key name.

use std::path::PathBuf;

use fediversity_testkit::events_receiver::Receiver;
use fediversity_testkit::job_run::{Done, JobRun};
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::json;

const EVENTS_SECRET: &str = "events-secret-9f8e7d6c5b4a";

/// Pieces of secret text that may stand in an env file; none may show anywhere.
const PEM_LINE: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7+/x9Zk=";
const SPACED: &str = "MY PASSWORD hunter2-spaced";
/// The last line of a wrapped base64 value can be all letters and digits: then its text before
/// the padding looks like a variable name.
const BASE64_TAIL: &str = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0123";

struct Node {
    f: Fixture,
    env_file: PathBuf,
    started: PathBuf,
}

impl Node {
    fn new(env_text: &str) -> Self {
        let mut f = Fixture::new();
        let started = f.path().join("started");
        f.program(
            "web",
            "apply",
            &format!("touch {}; echo \"token=$TF_VAR_token\"", started.display()),
        );
        let env_file = f.path().join("secrets.env");
        std::fs::write(&env_file, env_text).unwrap();
        Node { f, env_file, started }
    }

    fn run(&self) -> JobRun {
        self.f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .env("JOBENV_SECRETS_ENV_FILES", &self.env_file)
            .env("WM_JOB_ID", "0192-env-file")
            .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
    }

    fn rejected(&self, run: JobRun) -> Done {
        let mut run = run.expect_code(2);
        for text in [PEM_LINE, "x9Zk", "hunter2", "MY PASSWORD", BASE64_TAIL, "UFFSU1RV"] {
            run = run.expect_nowhere(text, text);
        }
        let done = run.run();
        assert!(!self.started.exists(), "the program was started");
        let result = self.f.result_json().to_string();
        for text in [PEM_LINE, "hunter2", "MY PASSWORD", BASE64_TAIL, "UFFSU1RV"] {
            assert!(!result.contains(text), "result.json holds {text:?}: {result}");
        }
        done
    }

    fn at(&self, line: usize) -> String {
        format!("{}:{line}:", self.env_file.display())
    }
}

#[test]
fn a_line_whose_key_is_not_a_variable_name_is_named_by_its_number_only() {
    let node = Node::new(&format!(
        "# the token\nTF_VAR_token=-----BEGIN PRIVATE KEY-----\n{PEM_LINE}\n{SPACED}=\n{SPACED} x=y\n"
    ));
    let done = node.rejected(node.run());
    for line in [3, 4, 5] {
        assert!(
            done.stderr
                .contains(&format!("{} has an invalid variable name", node.at(line))),
            "line {line}: {done:?}"
        );
    }
    assert_eq!(
        done.stderr_lines().len(),
        3,
        "one line per bad line, nothing else: {done:?}"
    );
    assert_eq!(node.f.result_json()["errors"].as_array().unwrap().len(), 3);
}

#[test]
fn an_undeclared_key_that_may_be_the_tail_of_a_wrapped_value_is_not_named() {
    // This one passes the env file's syntax and is refused later, as an undeclared node key:
    // with the node's progress events working, so its error line is sent to the receiver too.
    let receiver = Receiver::start(EVENTS_SECRET);
    let mut node = Node::new(&format!(
        "TF_VAR_token=abc-token-value\n{BASE64_TAIL}==\nUNDECLARED_NAME=value\n"
    ));
    node.f
        .node("EVENTS_URL", receiver.url())
        .secret("EVENTS_SECRET", EVENTS_SECRET);
    let done = node.rejected(node.run());
    assert!(
        done.stderr.contains(&format!(
            "{}:2 sets a key that is neither declared in the keys file nor a Nix/OpenTofu variable a node may set (the key is not shown",
            node.env_file.display()
        )),
        "{done:?}"
    );
    // Positive control: an undeclared key with a value is named, as a key name may be.
    assert!(
        done.stderr.contains("sets UNDECLARED_NAME, which is neither declared"),
        "{done:?}"
    );
    let bodies: Vec<String> = receiver
        .recorded()
        .bodies
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert!(
        bodies.iter().any(|b| b.contains("UNDECLARED_NAME")),
        "the error lines were sent: {bodies:?}"
    );
    assert!(
        !bodies
            .iter()
            .any(|b| b.contains("UFFSU1RV") || b.contains("abc-token-value")),
        "{bodies:?}"
    );
}

#[test]
fn good_lines_pass_and_are_redacted() {
    let node = Node::new("# c\n\nexport TF_VAR_token = spaced=value\r\n");
    node.run()
        .expect_success()
        .expect_stdout("token=[REDACTED]\n")
        .expect_nowhere("the token", "spaced=value")
        .run();
    assert!(node.started.exists());
}
