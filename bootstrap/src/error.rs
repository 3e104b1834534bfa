//! The one error type of the bootstrap, and its exit codes.
//!
//! Every message names what failed (a step, a call, a file, a field) and never a secret: the
//! admin password, the API token, the DSN and the OpenBao token are only ever held in
//! [`safe_io::secret::Secret`], and the texts of reqwest and tokio-postgres errors are rebuilt
//! without URLs or connection strings before they get here.

use std::io;
use std::path::PathBuf;

/// Every step held (or, with `--check`, the node is converged).
pub const EXIT_OK: u8 = 0;
/// `--check` found something that a run would change.
pub const EXIT_DRIFT: u8 = 1;
/// The configuration or a file it names is wrong; nothing was changed.
pub const EXIT_CONFIG: u8 = 2;
/// A step failed; the error line names it. systemd's `Restart=on-failure` retries.
pub const EXIT_STEP_FAILED: u8 = 3;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration problem found before anything was touched.
    #[error("{0}")]
    Config(String),
    #[error("{what} {} cannot be read: {source}", path.display())]
    ReadFile {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// The request never got an answer (connect, reset, timeout), after `tries` tries;
    /// `reached`: whether a try may have reached the server (any failure but a connect's).
    #[error("{service} {call}: {detail} (after {tries} tries)")]
    Transport {
        service: &'static str,
        call: String,
        detail: String,
        tries: usize,
        reached: bool,
    },
    /// An answer the bootstrap cannot go on with. `message` is the server's own error text
    /// (Windmill's `<Kind>: <message>`, OpenBao's `errors`), shortened.
    #[error("{service} {call} answered {status}{}: {message}", tries_suffix(*.tries))]
    Status {
        service: &'static str,
        call: String,
        status: u16,
        message: String,
        tries: usize,
    },
    /// An answer longer than the bound on what is read (`http::MAX_BODY`): not read further,
    /// not retried.
    #[error("{service} {call}: the answer is larger than {limit_mib} MiB, the most that is read")]
    TooLarge {
        service: &'static str,
        call: String,
        limit_mib: usize,
    },
    /// A 2xx answer whose body is not what the API documents.
    #[error("{service} {call}: unexpected answer: {detail}")]
    Unexpected {
        service: &'static str,
        call: String,
        detail: String,
    },
    /// reqwest could not set up its client (TLS backend, resolver): nothing was sent.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
    /// `openbao.path` is a KV v2 mount itself: there is no secret to write (found by the
    /// preflight, so only at run time).
    #[error("openbao.path {path:?} names the KV v2 mount {mount:?} itself, not a secret in it")]
    PathIsMount { path: String, mount: String },
    #[error("Windmill did not answer GET /api/version within {seconds} s: {last}")]
    NotReady { seconds: f64, last: String },
    /// A job submission still answered the 400 of a server migrating its job tables (Windmill
    /// 1.509 to about 1.614 after a fresh start) when the wait for it was over.
    #[error(
        "Windmill {call} still answered 400 null value in column \"__job_kind\" after {seconds:.0} s: the server has not finished \
         migrating its job tables (its startup \"v2 finalization\", which waits for every worker to run at least 1.461: is a worker \
         of an older or unknown version registered?)"
    )]
    StillMigrating { call: String, seconds: f64 },
    #[error("PostgreSQL: {0}")]
    Database(String),
    #[error("no row in Windmill's password table for {email} with login_type 'password' (zero rows updated)")]
    NoPasswordRow { email: String },
    #[error("the argon2 hash is {len} characters, longer than password.password_hash (VARCHAR(100))")]
    HashTooLong { len: usize },
    #[error("argon2 could not hash the password: {0}")]
    Hash(String),
    #[error(
        "the password hash of {email} was written, but Windmill still rejects the node password after {attempts} logins"
    )]
    LoginStillRejected { email: String, attempts: u32 },
    /// The proof of step 7: the new front-end token could not do what the front-end needs (run
    /// a script of its scopes, read that job, cancel it).
    #[error(
        "Windmill {version} did not let the new token labeled {label} {what}: {call} answered {why}; the token was not stored"
    )]
    ProofRun {
        version: String,
        label: String,
        what: String,
        call: String,
        why: String,
    },
    /// The proof of step 7: Windmill granted the new front-end token a call it must be refused.
    #[error(
        "Windmill {version} granted the new token labeled {label} {what} ({call} answered {status}), which the front-end's \
         operator token must be refused; the token was not stored"
    )]
    Granted {
        version: String,
        label: String,
        what: String,
        call: String,
        status: u16,
    },
    /// The proof of step 7: Windmill answered a call the new token must be refused with
    /// something that is no refusal and no grant (`why`: the status and what it means).
    #[error(
        "Windmill {version} answered the new token labeled {label} {call} with {why}, where it must be refused (401 or 403); \
         the token was not stored"
    )]
    LimitNotShown {
        version: String,
        label: String,
        call: String,
        why: String,
    },
    /// The state file (`state.rs`) cannot be read, is not one the bootstrap wrote, or cannot be
    /// written.
    #[error("state file {}: {detail}", path.display())]
    StateFile { path: PathBuf, detail: String },
    /// Step 7's write to OpenBao failed in a way that may have written it (no answer, a 5xx), and
    /// the secret could not be read back: whether OpenBao holds the new token is unknown.
    #[error(
        "{write}; reading the secret back to see whether the write happened failed too ({read}): OpenBao may hold the new token, \
         so it was kept, not deleted (a later run's step 9 revokes it if it is not the one stored)"
    )]
    MaybeStored { write: Box<Error>, read: Box<Error> },
    /// Step 8: the include's directory may be written by others.
    #[error("{} {why}; not written (make the directory writable by its owner and group only)", file.display())]
    UnsafeDirectory { file: PathBuf, why: String },
    /// Step 5: a version that needs a lock got none within `retry.lock_timeout_seconds`.
    #[error(
        "no worker locked {paths} within {seconds} s (Windmill runs a new version only once a worker has computed its lock): \
         is a worker running?"
    )]
    LockTimeout { paths: String, seconds: f64 },
    /// Step 5, reported at the end of a run: the dependency job of a version failed.
    #[error(
        "the dependency job of {paths} failed, so that version does not run; the next run uploads it again \
         (with the settings of step 6 in place)"
    )]
    LocksFailed { paths: String },
    #[error("{path}: a concurrent writer changed the script again after it was re-read; not retried twice")]
    ScriptConflict { path: String },
    /// A failure while converging one script.
    #[error("{path}: {source}")]
    Script { path: String, source: Box<Error> },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("{context}: {source}")]
    Sys { context: String, source: nix::Error },
    /// A failed step, named as in the step lines (`5/9 scripts`).
    #[error("step {step} failed: {source}")]
    Step { step: String, source: Box<Error> },
    /// The lock file (one run at a time) could not be taken, before step 1.
    #[error("lock failed: {0}")]
    Lock(Box<Error>),
    /// From the shared crate: a bad `BOOTSTRAP_LOG`, the lock file, the include's atomic write.
    #[error(transparent)]
    SafeIo(#[from] safe_io::Error),
}

fn tries_suffix(tries: usize) -> String {
    if tries > 1 {
        format!(" after {tries} tries")
    } else {
        String::new()
    }
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::ReadFile { .. } | Error::SafeIo(safe_io::Error::BadLevel { .. }) => EXIT_CONFIG,
            _ => EXIT_STEP_FAILED,
        }
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub fn sys(context: impl Into<String>, source: nix::Error) -> Self {
        Error::Sys {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `text` followed by the messages of the chain of causes starting at `source` (`text: cause:
/// cause …`), for the errors of libraries (reqwest, tokio-postgres) whose own message leaves
/// the useful part (the OS error, hyper's "connection closed") to their causes. A cause that the
/// text already ends with is skipped: some layers repeat their inner error in their own message.
pub fn with_causes(text: impl Into<String>, source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = text.into();
    let mut source = source;
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn causes_follow_the_text_without_repeats() {
        let error = Layer(
            "error connecting",
            Some(Box::new(Layer("refused", Some(Box::new(Layer("refused", None)))))),
        );
        assert_eq!(
            with_causes("cannot connect", Some(&error)),
            "cannot connect: error connecting: refused"
        );
        assert_eq!(with_causes("alone", None), "alone");
    }
}
