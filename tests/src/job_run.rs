//! One invocation of jobenv and what the test expects of it, in the spirit of
//! cargo-test-support's `p.cargo("build").with_status(101).with_stderr_contains(..).run()`:
//!
//! ```text
//! f.jobenv(jobenv_bin!())
//!     .verb("apply")
//!     .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}))
//!     .expect_code(2)
//!     .expect_stderr_contains("payload rejected: undeclared keys: NOPE")
//!     .expect_nowhere(SECRET)
//!     .run();
//! ```
//!
//! A failed expectation panics with the whole output, so a test states only what it expects.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::process::Running;

/// A jobenv command, its input, and the expectations [`JobRun::run`] checks.
pub struct JobRun {
    command: Command,
    stdin: Vec<u8>,
    code: Option<Option<i32>>,
    stderr_contains: Vec<String>,
    stdout: Option<String>,
    stderr: Option<String>,
    nowhere: Vec<(String, String)>,
}

/// What a finished run printed.
pub struct Done {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// stdout as the bytes it was (redaction tests look at invalid UTF-8).
    pub raw_stdout: Vec<u8>,
}

impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Done {
    /// stdout parsed as `KEY=VALUE` lines (a program that runs `env`).
    pub fn env(&self) -> BTreeMap<String, String> {
        crate::nix_fixture::parse_env_lines(&self.stdout)
    }

    /// stderr's lines, each of jobenv's own starting with `jobenv: `.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().collect()
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl JobRun {
    pub fn new(command: Command) -> Self {
        JobRun {
            command,
            stdin: Vec::new(),
            code: None,
            stderr_contains: Vec::new(),
            stdout: None,
            stderr: None,
            nowhere: Vec::new(),
        }
    }

    /// `run --verb <verb>`.
    pub fn verb(self, verb: &str) -> Self {
        self.args(["run", "--verb", verb])
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Self {
        self.command.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.command.env_remove(key);
        self
    }

    /// The payload, as JSON on stdin.
    pub fn payload(self, payload: &Value) -> Self {
        self.stdin(payload.to_string().into_bytes())
    }

    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = bytes.into();
        self
    }

    /// The exit code (`None`: killed by a signal).
    pub fn expect_code(mut self, code: impl Into<Option<i32>>) -> Self {
        self.code = Some(code.into());
        self
    }

    pub fn expect_success(self) -> Self {
        self.expect_code(0)
    }

    pub fn expect_stderr_contains(mut self, text: impl Into<String>) -> Self {
        self.stderr_contains.push(text.into());
        self
    }

    /// stderr as a whole, as the manual (docs/) specifies jobenv's lines: `[..]` stands for any text
    /// within a line (a duration, a pid), `...` on a line of its own for any lines.
    pub fn expect_stderr(mut self, expected: impl Into<String>) -> Self {
        self.stderr = Some(expected.into());
        self
    }

    pub fn expect_stdout(mut self, text: impl Into<String>) -> Self {
        self.stdout = Some(text.into());
        self
    }

    /// `text` (a secret) appears in neither stdout nor stderr; the failure message names it by
    /// `name` only.
    pub fn expect_nowhere(mut self, name: &str, text: &str) -> Self {
        self.nowhere.push((name.to_owned(), text.to_owned()));
        self
    }

    /// Runs to completion and checks every expectation.
    pub fn run(mut self) -> Done {
        let mut child = self
            .command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start jobenv");
        // jobenv may refuse a job before it reads its payload: a closed pipe is not an error here.
        match child.stdin.take().expect("stdin").write_all(&self.stdin) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write the payload: {e}"),
            _ => {}
        }
        let out = child.wait_with_output().expect("wait for jobenv");
        let done = Done {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            raw_stdout: out.stdout,
        };
        for (name, text) in &self.nowhere {
            let seen = done.stdout.contains(text.as_str()) || done.stderr.contains(text.as_str());
            assert!(!seen, "{name} was printed (output withheld: it holds the secret)");
        }
        if let Some(code) = self.code {
            assert_eq!(done.code, code, "exit code\n{done:?}");
        }
        for text in &self.stderr_contains {
            assert!(
                done.stderr.contains(text.as_str()),
                "expected {text:?} on stderr\n{done:?}"
            );
        }
        if let Some(stdout) = &self.stdout {
            assert_eq!(&done.stdout, stdout, "stdout\n{done:?}");
        }
        if let Some(expected) = &self.stderr {
            snapbox::Assert::new().eq(without_nix_retry_notices(&done.stderr), expected.as_str());
        }
        // What `status`, `recover` and `drain` print are journal entries: each fits the
        // published schema.
        let command = self.command.get_args().next().and_then(|arg| arg.to_str());
        if matches!(command, Some("status" | "recover" | "drain")) && done.success() {
            let printed: Value = serde_json::from_str(&done.stdout)
                .unwrap_or_else(|e| panic!("{command:?} printed no JSON ({e})\n{done:?}"));
            crate::schemas::Contract::JournalEntry.check_each(&printed);
        }
        done
    }

    /// Starts it with stdout and stderr piped and the input written; a [`Running`] stops it
    /// (SIGTERM, then waits) if the test fails before it ended. Expectations are not checked.
    pub fn spawn(mut self) -> Running {
        let mut child = self
            .command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start jobenv");
        let _ = child.stdin.take().expect("stdin").write_all(&self.stdin);
        Running(child)
    }

    /// The same run, started through `program` with `args` before jobenv's own command line (a
    /// wrapper that execs it: `unshare`, say), with the same environment (from a clear one, as
    /// [`crate::nix_fixture::Fixture::command`] starts), directory, input and expectations.
    pub fn wrapped<S: AsRef<OsStr>>(self, program: impl AsRef<OsStr>, args: impl IntoIterator<Item = S>) -> Self {
        let mut command = Command::new(program);
        command
            .args(args)
            .arg(self.command.get_program())
            .args(self.command.get_args());
        command.env_clear();
        for (key, value) in self.command.get_envs() {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        if let Some(dir) = self.command.get_current_dir() {
            command.current_dir(dir);
        }
        JobRun { command, ..self }
    }

    /// The command itself, for what the builder does not offer (a process group, say).
    pub fn command(&mut self) -> &mut Command {
        &mut self.command
    }
}

impl Running {
    /// Waits for it to end ([`JobRun::spawn`]'s), with everything it printed.
    pub fn finish(mut self) -> Done {
        use std::io::Read;
        let mut stderr = self.0.stderr.take().expect("stderr is piped");
        let reading = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stderr.read_to_end(&mut bytes);
            bytes
        });
        let mut stdout = Vec::new();
        if let Some(mut out) = self.0.stdout.take() {
            let _ = out.read_to_end(&mut stdout);
        }
        let stderr = reading.join().expect("the stderr reader");
        let status = self.0.wait().expect("wait for jobenv");
        Done {
            code: status.code(),
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            raw_stdout: stdout,
        }
    }
}

/// The stderr without Nix's own notice that it retries a busy store database: tests run many
/// nix-shells on one store at once, which a node does not, and the notice is Nix's, not
/// jobenv's (`warning: error: SQLite database '/nix/var/nix/db/db.sqlite' is busy`).
pub fn without_nix_retry_notices(stderr: &str) -> String {
    stderr
        .split_inclusive('\n')
        .filter(|line| !is_nix_retry_notice(line))
        .collect()
}

/// Whether one line of output is that notice of Nix's.
pub fn is_nix_retry_notice(line: &str) -> bool {
    line.starts_with("warning: error: SQLite database '") && line.trim_end().ends_with("' is busy")
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_nixs_busy_database_notice_is_left_out() {
        let stderr = "jobenv: running a\nwarning: error: SQLite database '/nix/var/nix/db/db.sqlite' is busy\nwarning: error: something else is busy\njobenv: a succeeded\n";
        assert_eq!(
            super::without_nix_retry_notices(stderr),
            "jobenv: running a\nwarning: error: something else is busy\njobenv: a succeeded\n"
        );
    }
}
