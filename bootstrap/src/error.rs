//! The one error type of the bootstrap, and its exit codes.
//!
//! Every message names what failed (a step, a call, a file, a field) and never a secret: the
//! admin password, the API token, the DSN and the OpenBao token are only ever held in
//! [`crate::secret::Secret`], and the texts of reqwest and tokio-postgres errors are rebuilt
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
    ReadFile { what: &'static str, path: PathBuf, source: io::Error },
    /// The request never got an answer (connect, reset, timeout), after `tries` tries.
    #[error("{service} {call}: {detail} (after {tries} tries)")]
    Transport { service: &'static str, call: String, detail: String, tries: usize },
    /// An answer the bootstrap cannot go on with. `message` is the server's own error text
    /// (Windmill's `<Kind>: <message>`, OpenBao's `errors`), shortened.
    #[error("{service} {call} answered {status}{}: {message}", tries_suffix(*.tries))]
    Status { service: &'static str, call: String, status: u16, message: String, tries: usize },
    /// A 2xx answer whose body is not what the API documents.
    #[error("{service} {call}: unexpected answer: {detail}")]
    Unexpected { service: &'static str, call: String, detail: String },
    #[error("Windmill did not answer GET /api/version within {seconds} s: {last}")]
    NotReady { seconds: f64, last: String },
    #[error("PostgreSQL: {0}")]
    Database(String),
    #[error("no row in Windmill's password table for {email} with login_type 'password' (zero rows updated)")]
    NoPasswordRow { email: String },
    #[error("the argon2 hash is {len} characters, longer than password.password_hash (VARCHAR(100))")]
    HashTooLong { len: usize },
    #[error("argon2 could not hash the password: {0}")]
    Hash(String),
    #[error("the password hash of {email} was written, but Windmill still rejects the node password after {attempts} logins")]
    LoginStillRejected { email: String, attempts: u32 },
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
}

fn tries_suffix(tries: usize) -> String {
    if tries > 1 { format!(" after {tries} tries") } else { String::new() }
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Config(_) | Error::ReadFile { .. } => EXIT_CONFIG,
            _ => EXIT_STEP_FAILED,
        }
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    pub fn sys(context: impl Into<String>, source: nix::Error) -> Self {
        Error::Sys { context: context.into(), source }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
