//! The one error type of jobenv, and the findings of validation.
//!
//! Every message here names the problem (a key, a file, a rule) and never a value: a value can
//! be a secret, and these lines end up in job logs.

use std::io;
use std::path::PathBuf;

/// Exit code for jobenv's own configuration or input errors (nothing was started).
pub const EXIT_REJECTED: i32 = 2;
/// Exit code when the wall-clock limit (`--timeout`) ended the program.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code when jobenv itself failed after validation (like GNU timeout's 125).
pub const EXIT_INTERNAL: i32 = 125;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Validation found problems; nothing was started. One line per problem.
    #[error("{}", render_problems(.0))]
    Rejected(Vec<Problem>),
    #[error("cannot start {program}: {source}")]
    Spawn { program: PathBuf, source: io::Error },
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("{context}: {source}")]
    Sys { context: String, source: nix::Error },
}

impl Error {
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Rejected(_) => EXIT_REJECTED,
            _ => EXIT_INTERNAL,
        }
    }

    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    pub fn sys(context: impl Into<String>, source: nix::Error) -> Self {
        Error::Sys { context: context.into(), source }
    }
}

impl From<Vec<Problem>> for Error {
    fn from(problems: Vec<Problem>) -> Self {
        Error::Rejected(problems)
    }
}

impl From<Problem> for Error {
    fn from(problem: Problem) -> Self {
        Error::Rejected(vec![problem])
    }
}

fn render_problems(problems: &[Problem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

/// One finding of validation. Values never appear; keys, paths and rules do.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    #[error("{what} {} does not exist", path.display())]
    MissingFile { what: &'static str, path: PathBuf },
    #[error("{what} {} cannot be read: {source}", path.display())]
    UnreadableFile { what: &'static str, path: PathBuf, source: io::Error },
    /// `detail` is serde_json's syntax message: a position, never the text around it.
    #[error("{what} {origin} is not valid JSON: {detail}")]
    NotJson { what: &'static str, origin: String, detail: String },
    #[error("{what} {origin} must be {expected}")]
    WrongShape { what: &'static str, origin: String, expected: &'static str },
    #[error("payload is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("invalid variable name {key:?} in {origin}: a name must be non-empty and contain no '=' or NUL")]
    InvalidKey { key: String, origin: String },
    #[error("the value of {key} in {origin} contains a NUL byte")]
    NulInValue { key: String, origin: String },
    #[error("{origin} sets {key}, which is neither declared in the keys file nor a Nix/OpenTofu variable a node may set")]
    UndeclaredNodeKey { key: String, origin: String },
    #[error("{origin} sets {key}, which only a job payload may set")]
    PayloadOnlyKeyOnNode { key: String, origin: String },
    #[error("{origin} sets {key}, which jobenv derives itself")]
    DerivedKeyOnNode { key: String, origin: String },
    #[error("{key} is set by two node sources: {first} and {second}")]
    DuplicateNodeKey { key: String, first: String, second: String },
    #[error("payload rejected: undeclared keys: {}", .0.join(", "))]
    UndeclaredPayloadKeys(Vec<String>),
    #[error("payload rejected: keys only the node may set: {}", .0.join(", "))]
    NodeOnlyPayloadKeys(Vec<String>),
    #[error("payload rejected: reserved keys: {}", .0.join(", "))]
    ReservedPayloadKeys(Vec<String>),
    #[error("{key} is required but not set{hint}")]
    MissingControl { key: &'static str, hint: &'static str },
    #[error("{key} {shown} is invalid: {rule}")]
    BadControl { key: &'static str, shown: String, rule: &'static str },
    #[error("NIXPKGS and DEPLOYMENT_NIXPKGS are both set and differ")]
    ConflictingNixpkgs,
    #[error("unknown ATTRIBUTE {0:?}: it is not in the published attribute list")]
    UnknownAttribute(String),
    #[error("EXECUTABLE {given:?} is not allowed: it must be {expected:?} (<ATTRIBUTE>-<VERB>)")]
    BadExecutable { given: String, expected: String },
    #[error("unknown verb {verb:?}: expected one of {}", crate::policy::VERBS.join(", "))]
    UnknownVerb { verb: String },
    #[error("secrets directory {} does not exist", .0.display())]
    MissingSecretsDir(PathBuf),
    #[error("secret file {} {reason}", path.display())]
    BadSecretFile { path: PathBuf, reason: &'static str },
    #[error("{}:{line}: {reason}", path.display())]
    BadEnvFileLine { path: PathBuf, line: usize, reason: &'static str },
    #[error("nix-shell {0:?} was not found or is not executable")]
    NixShellNotFound(String),
    #[error("invalid job id {0:?}: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$")]
    InvalidJobId(String),
    #[error("the journal in {} cannot be used: {source}", path.display())]
    Journal { path: PathBuf, source: io::Error },
    #[error("job {job_id} is already running ({holder})")]
    JobRunning { job_id: String, holder: String },
    #[error("namespace {namespace} is locked by another deploy: {holder}")]
    NamespaceLocked { namespace: String, holder: String },
}
