//! The one error type of jobenv, and the findings of validation.
//!
//! Every message here names the problem (a key, a file, a rule) and never a value: a value can
//! be a secret, and these lines end up in job logs.

use std::io;
use std::path::PathBuf;

/// How many characters of a value from a job an error shows, unless it says otherwise.
pub const SHOWN_CHARS: usize = 64;

/// A value for a message that quotes it itself: at most `max` characters, `...` at the end when
/// it was cut.
pub fn cut(value: &str, max: usize) -> String {
    let mut cut: String = value.chars().take(max).collect();
    if cut.len() < value.len() {
        cut.push_str("...");
    }
    cut
}

/// Exit code for jobenv's own configuration or input errors (nothing was started).
pub const EXIT_REJECTED: i32 = 2;
/// Exit code when the node is not ready for a job (a secret it declares is not rendered yet, the
/// cluster journal cannot be reached): nothing was started, and a retry later may succeed
/// (sysexits' EX_TEMPFAIL). Also a run that lost its lease on the cluster journal mid-run: its
/// program was stopped, and a retry is safe.
pub const EXIT_NOT_READY: i32 = 75;
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
            Error::Rejected(problems)
                if !problems.is_empty()
                    && problems
                        .iter()
                        .all(|p| matches!(p, Problem::NodeNotReady(_) | Problem::NewerEntryFormat { .. })) =>
            {
                EXIT_NOT_READY
            }
            Error::Rejected(_) => EXIT_REJECTED,
            _ => EXIT_INTERNAL,
        }
    }

    /// One `jobenv: error:` line per line of the message (a rejection has one per problem).
    pub fn log(&self) {
        for line in self.to_string().lines() {
            tracing::error!("{line}");
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

/// A variable name as messages show it: control characters escaped, so that a key chosen by a
/// job (only `=` and NUL are forbidden in names) cannot start a line of its own in the log. The
/// same for any name a job could choose: a file name in the state directory (see [`shown_path`]).
pub fn name(key: &str) -> String {
    key.escape_debug().to_string()
}

/// A path as messages show it, escaped like [`name`]: the state directory belongs to the
/// worker's user, so every program it runs can name files there as it likes (a newline and a
/// forged `jobenv:` line included).
pub fn shown_path(path: &std::path::Path) -> String {
    name(&path.to_string_lossy())
}

fn names(keys: &[String]) -> String {
    keys.iter().map(|key| name(key)).collect::<Vec<_>>().join(", ")
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
    UnreadableFile {
        what: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// `detail` is serde_json's syntax message: a position, never the text around it.
    #[error("{what} {origin} is not valid JSON: {detail}")]
    NotJson {
        what: &'static str,
        origin: String,
        detail: String,
    },
    #[error("{what} {origin} must be {expected}")]
    WrongShape {
        what: &'static str,
        origin: String,
        expected: &'static str,
    },
    #[error("payload is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("invalid variable name {key:?} in {origin}: a name must be non-empty and contain no '=' or NUL")]
    InvalidKey { key: String, origin: String },
    #[error("the value of {} in {origin} contains a NUL byte", name(key))]
    NulInValue { key: String, origin: String },
    #[error(
        "{origin} sets {}, which is neither declared in the keys file nor a Nix/OpenTofu variable a node may set",
        name(key)
    )]
    UndeclaredNodeKey { key: String, origin: String },
    #[error("{origin} sets {}, which only a job payload may set", name(key))]
    PayloadOnlyKeyOnNode { key: String, origin: String },
    #[error("{origin} sets {}, which jobenv derives itself", name(key))]
    DerivedKeyOnNode { key: String, origin: String },
    #[error("{origin} {what} (the key is not shown: its line may be part of a wrapped secret)")]
    HiddenNodeKey { origin: String, what: &'static str },
    #[error("{} is set by two node sources: {first} and {second}", name(key))]
    DuplicateNodeKey { key: String, first: String, second: String },
    #[error("payload rejected: undeclared keys: {}", names(.0))]
    UndeclaredPayloadKeys(Vec<String>),
    #[error("payload rejected: reserved keys: {}", names(.0))]
    ReservedPayloadKeys(Vec<String>),
    #[error("{key} is required but not set{hint}")]
    MissingControl { key: &'static str, hint: &'static str },
    #[error("{key} {shown} is invalid: {rule}")]
    BadControl {
        key: &'static str,
        shown: String,
        rule: &'static str,
    },
    #[error("NAMESPACE {namespace:?} differs from the last segment of TF_HTTP_ADDRESS {address}")]
    NamespaceMismatch { namespace: String, address: String },
    #[error("TF_HTTP_ADDRESS has no path segment to name the namespace {namespace} (it must end in /<namespace>)")]
    AddressWithoutNamespace { namespace: String },
    #[error(
        "TF_HTTP_ADDRESS {shown} is not this node's state address of namespace {namespace} (<STATE_BASE_ADDRESS>/<namespace>)"
    )]
    ForeignStateAddress { shown: String, namespace: String },
    #[error(
        "{key} is given but the job has no state address (neither TF_HTTP_ADDRESS nor the node's STATE_BASE_ADDRESS)"
    )]
    LockWithoutState { key: &'static str },
    #[error("{key} {shown} is not under the job's state address")]
    LockOutsideState { key: &'static str, shown: String },
    #[error(
        "{} ({from}) cannot be passed to a program: {}=<value> is {bytes} bytes, the kernel takes at most {limit}",
        name(key),
        name(key)
    )]
    ValueTooLong {
        key: String,
        from: String,
        bytes: usize,
        limit: usize,
    },
    #[error("argument {index} of the program cannot be passed: it is {bytes} bytes, the kernel takes at most {limit}")]
    ArgumentTooLong { index: usize, bytes: usize, limit: usize },
    #[error(
        "the program's arguments and environment take {total} bytes, more than the {budget} that jobenv leaves them under this stack limit (largest: {largest})"
    )]
    ExecTooLarge {
        total: usize,
        budget: usize,
        largest: String,
    },
    #[error(
        "the node sets {key} but no STATE_BASE_ADDRESS: the node's state credentials go only to the node's own state backend, never to an address a job chose"
    )]
    CredentialsWithoutBase { key: &'static str },
    #[error("the payload's TF_HTTP_PASSWORD is longer than {max} bytes")]
    PayloadPasswordTooLong { max: usize },
    #[error("NIXPKGS and DEPLOYMENT_NIXPKGS are both set and differ")]
    ConflictingNixpkgs,
    #[error("unknown ATTRIBUTE {0:?}: it is not in the published attribute list")]
    UnknownAttribute(String),
    #[error("EXECUTABLE {given:?} is not allowed: it must be {expected:?} ({rule})")]
    BadExecutable {
        given: String,
        expected: String,
        rule: &'static str,
    },
    #[error("unknown verb {verb:?}: expected one of {expected}")]
    UnknownVerb { verb: String, expected: String },
    #[error("secrets directory {} does not exist", .0.display())]
    MissingSecretsDir(PathBuf),
    #[error("secret file {} {reason}", path.display())]
    BadSecretFile { path: PathBuf, reason: &'static str },
    #[error("{}:{line}: {reason}", path.display())]
    BadEnvFileLine {
        path: PathBuf,
        line: usize,
        reason: &'static str,
    },
    #[error("secrets env file {} {reason}", path.display())]
    BadEnvFile { path: PathBuf, reason: &'static str },
    #[error(
        "the node's secrets hold {total} bytes together, more than {limit}: each is redacted in every form it may be printed in"
    )]
    SecretsTooLarge { total: usize, limit: usize },
    #[error("{set} is set but {missing} is not: progress events need both")]
    EventsHalfConfigured { set: &'static str, missing: &'static str },
    #[error("EVENTS_KIND deployments is for apply and destroy: a {verb} job reports on a jobs row")]
    DeploymentRowVerb { verb: String },
    #[error(
        "{origin} sets EVENTS_SECRET, but EVENTS_FORMAT is dd-0012, whose rows have secrets of their own: one secret for every row would let any job post to any row. Remove EVENTS_SECRET from the node; the front-end sends each row's secret in the payload's EVENTS_SECRET"
    )]
    NodeSecretForRows { origin: String },
    #[error(
        "{origin} sets {}, which must come from a secrets directory or a secrets env file",
        name(key)
    )]
    SecretOutsideSecrets { key: &'static str, origin: String },
    #[error("nix-shell {0:?} was not found or is not executable")]
    NixShellNotFound(String),
    #[error("{tool} {} (beside nix-shell) was not found or is not executable", path.display())]
    NixToolNotFound { tool: &'static str, path: PathBuf },
    #[error(
        "keys file {origin} entry {} has an unknown field {field:?} (an entry has \"description\", \"default\" and \"node_only\")",
        name(key)
    )]
    UnknownKeysField { origin: String, key: String, field: String },
    #[error(
        "the keys file declares {}, a control key jobenv consumes and never passes to the program",
        name(key)
    )]
    DeclaredControlKey { key: String },
    #[error("invalid job id {0:?}: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{{0,127}}$")]
    InvalidJobId(String),
    #[error("the journal in {} cannot be used: {source}", shown_path(path))]
    Journal { path: PathBuf, source: io::Error },
    /// jobenv started as root on a state directory of another user's becomes that user before
    /// it touches the directory (`record::owner`); where it cannot, it does nothing there.
    #[error(
        "jobenv runs as root, and the state directory {} belongs to {user}, whom it cannot become ({why}): run it as that user",
        shown_path(path)
    )]
    CannotBecomeOwner { path: PathBuf, user: String, why: String },
    /// jobenv started as root takes a state directory only at a path no other user can change
    /// (`record::owner`): another could swap it for a link to a directory of its choosing.
    #[error(
        "jobenv runs as root, and the state directory {} is reached through {}, which {why}: as root, jobenv uses a state directory only at a path no other user can change (keep it in directories of root's, or run the command as that user)",
        shown_path(path),
        shown_path(through)
    )]
    UnsafeStateDirPath {
        path: PathBuf,
        through: PathBuf,
        why: String,
    },
    #[error("job {job_id} was already run for {recorded}; this run asks for {asked}: a job id names one request")]
    AnotherRequest {
        job_id: String,
        recorded: String,
        asked: String,
    },
    #[error("node not ready: {0}")]
    NodeNotReady(String),
    /// An entry written by a newer jobenv (before a rollback of the node, say). What it means
    /// cannot be known here, so nothing acts on its job id: running the job could run it twice,
    /// replaying it could report what it did not mean. The node is not ready for that job.
    #[error(
        "the journal entry of job {job_id} has format {format}, newer than this jobenv's {known}: nothing acts on the job until a jobenv that reads format {format} runs it (upgrade jobenv)"
    )]
    NewerEntryFormat { job_id: String, format: u32, known: u32 },
    #[error("the cluster DSN file {} {why}", path.display())]
    ClusterDsn { path: PathBuf, why: &'static str },
    #[error("the cluster CA file {} {why}", path.display())]
    ClusterCa { path: PathBuf, why: String },
    #[error("TLS to the cluster journal cannot be set up: {0}")]
    ClusterTls(String),
    #[error("the cluster journal cannot be used: {0}")]
    ClusterJournal(String),
    #[error("the program tree must be a cgroup of its own ({because}), and none can be made: {why}")]
    NoCgroup { because: &'static str, why: String },
    #[error("job {job_id} is already running ({holder})")]
    JobRunning { job_id: String, holder: String },
    #[error("namespace {namespace} is locked by another deploy: {holder}")]
    NamespaceLocked { namespace: String, holder: String },
}

impl Problem {
    /// The [`Problem::NewerEntryFormat`] a journal's read error holds, if it is one (the
    /// journal's reads are I/O: see `record::entry::parse`).
    pub fn newer_entry_format(error: &io::Error) -> Option<&Problem> {
        error
            .get_ref()
            .and_then(|e| e.downcast_ref::<Problem>())
            .filter(|p| matches!(p, Problem::NewerEntryFormat { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_cannot_forge_a_log_line() {
        let forged = "X\njobenv: web-apply succeeded with exit code 0".to_owned();
        let text = Problem::UndeclaredPayloadKeys(vec!["PLAIN".into(), forged]).to_string();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert_eq!(
            text,
            "payload rejected: undeclared keys: PLAIN, X\\njobenv: web-apply succeeded with exit code 0"
        );
    }
}
