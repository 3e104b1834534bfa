//! The one error type of jobenv, and the findings of validation.
//!
//! Every message here names the problem (a key, a file, a rule) and never a value: a value can
//! be a secret, and these lines end up in job logs.

use std::io;
use std::path::PathBuf;

use crate::cancel::Cancelled;

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

/// Everything that ends a command or a job without its program's own status: what the command
/// line, the node or the payload got wrong (all of it, at once), what refused the job at run
/// time, and what failed in jobenv itself. [`Error::exit_code`] is the one table of their exit
/// codes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Validation found problems; nothing was started. One line per problem.
    #[error("{}", render_problems(.0))]
    Rejected(Vec<Problem>),
    /// The job was refused at run time (a lock, the journal, the node): nothing was started.
    #[error(transparent)]
    Refused(#[from] Refusal),
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
            Error::Refused(refusal) => refusal.exit_code(),
            Error::Spawn { .. } | Error::Io { .. } | Error::Sys { .. } => EXIT_INTERNAL,
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

/// The problems of a job's inputs, as the job ends on them. A node that is not ready (a secret
/// its agent has not rendered yet), and nothing else wrong, is a refusal a retry may get past
/// (75); with anything else wrong too, one rejection lists it all (2: a person is needed anyway).
impl From<Vec<Problem>> for Error {
    fn from(problems: Vec<Problem>) -> Self {
        let not_ready: Vec<&str> = problems
            .iter()
            .filter_map(|p| match p {
                Problem::NodeNotReady(why) => Some(why.as_str()),
                _ => None,
            })
            .collect();
        if !problems.is_empty() && not_ready.len() == problems.len() {
            // One line per reason, each said as the refusal says one.
            return Refusal::NotReady(not_ready.join("\nnode not ready: ")).into();
        }
        Error::Rejected(problems)
    }
}

impl From<Problem> for Error {
    fn from(problem: Problem) -> Self {
        vec![problem].into()
    }
}

/// Why a job was refused at run time, before its program started, wherever that was found: a
/// lock of the state directory, the journal, a store's claim or write (the node's own or the
/// cluster's), the program tree. One type from where it is raised to its exit code
/// ([`Refusal::exit_code`]).
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The job id is held by a live run (in cluster mode, a live lease).
    #[error("job {job_id} is already running ({holder})")]
    JobRunning { job_id: String, holder: String },
    /// The namespace is held by another deploy (or its processes are still there).
    #[error("namespace {namespace} is locked by another deploy: {holder}")]
    NamespaceLocked { namespace: String, holder: String },
    /// The node cannot take the job now, and a retry later may succeed.
    #[error("node not ready: {0}")]
    NotReady(String),
    /// The cluster journal cannot be reached now (refused, timed out, shut down): a node that
    /// is not ready.
    #[error("node not ready: the cluster journal cannot be reached: {0}")]
    Unreachable(String),
    /// A cancel signal came while waiting, or the worker that started jobenv died: the job ends
    /// as one canceled before its start (`run::not_started` says it, in these words).
    #[error("{}", cancelled_text(.0))]
    Cancelled(Cancelled),
    /// The node's journal (its state directory) cannot be read or written.
    #[error("the journal in {} cannot be used: {source}", shown_path(path))]
    Journal { path: PathBuf, source: io::Error },
    /// The cluster journal answered, but not as jobenv needs (a right missing, a row it cannot
    /// act on, a certificate that does not verify).
    #[error("the cluster journal cannot be used: {0}")]
    Cluster(String),
    /// The program tree must be a cgroup of its own, and none can be made.
    #[error("the program tree must be a cgroup of its own ({because}), and none can be made: {why}")]
    NoCgroup { because: &'static str, why: String },
}

impl Refusal {
    /// The exit code of a job refused so, one arm per refusal.
    pub fn exit_code(&self) -> i32 {
        match self {
            Refusal::JobRunning { .. } => EXIT_REJECTED,
            Refusal::NamespaceLocked { .. } => EXIT_REJECTED,
            // Not this job's fault, and not for good: try again later (sysexits' EX_TEMPFAIL).
            Refusal::NotReady(_) | Refusal::Unreachable(_) => EXIT_NOT_READY,
            // As the job's ending says it (`run::Outcome::exit_code`): by the signal, or as if
            // hung up when the worker is gone.
            Refusal::Cancelled(Cancelled::Signal(signal)) => 128 + *signal as i32,
            Refusal::Cancelled(Cancelled::WorkerLost) => 128 + nix::sys::signal::Signal::SIGHUP as i32,
            Refusal::Journal { .. } => EXIT_REJECTED,
            Refusal::Cluster(_) => EXIT_REJECTED,
            Refusal::NoCgroup { .. } => EXIT_REJECTED,
        }
    }
}

fn cancelled_text(cancelled: &Cancelled) -> String {
    match cancelled {
        Cancelled::Signal(signal) => format!(
            "received {}: the job is canceled before its program started",
            signal.as_str()
        ),
        Cancelled::WorkerLost => "the worker that started this job is gone: the program is not started".into(),
    }
}

/// Why a journal entry (a file of the node's journal, or a row of the cluster's) cannot be
/// acted on.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Not an entry as jobenv writes them; `why` is never more than serde's escaped message.
    #[error("{shown} is corrupt: {why}")]
    Corrupt { shown: String, why: String },
    /// An entry written by a newer jobenv (before a rollback of the node, say). What it means
    /// cannot be known here, so nothing acts on its job id: running the job could run it twice,
    /// replaying it could report what it did not mean. The node is not ready for that job.
    #[error(
        "the journal entry of job {job_id} has format {format}, newer than this jobenv's {known}: nothing acts on the job until a jobenv that reads format {format} runs it (upgrade jobenv)"
    )]
    Newer { job_id: String, format: u32, known: u32 },
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl ReadError {
    /// A run of the job id reads the entry: one of a newer format is a node not ready for that
    /// job; anything else is a journal that cannot be used.
    pub fn refusal(self, journal: &std::path::Path) -> Refusal {
        match self {
            ReadError::Newer { .. } => Refusal::NotReady(self.to_string()),
            other => Refusal::Journal {
                path: journal.to_owned(),
                source: other.into(),
            },
        }
    }
}

/// For what reports a journal's trouble as I/O (`recover`, `drain`, `status`): the text, no type
/// to look for again.
impl From<ReadError> for io::Error {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Io(error) => error,
            ReadError::Corrupt { .. } => io::Error::new(io::ErrorKind::InvalidData, error.to_string()),
            ReadError::Newer { .. } => io::Error::new(io::ErrorKind::Unsupported, error.to_string()),
        }
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
    /// A secret the node declares is not rendered yet: alone, a refusal a retry may get past
    /// (see `From<Vec<Problem>> for Error`).
    #[error("node not ready: {0}")]
    NodeNotReady(String),
    #[error("the cluster DSN file {} {why}", path.display())]
    ClusterDsn { path: PathBuf, why: &'static str },
    #[error("the cluster CA file {} {why}", path.display())]
    ClusterCa { path: PathBuf, why: String },
    #[error("TLS to the cluster journal cannot be set up: {0}")]
    ClusterTls(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_whose_only_problems_are_secrets_not_rendered_is_refused_as_not_ready() {
        let not_ready = |why: &str| Problem::NodeNotReady(why.into());
        let alone = Error::from(vec![
            not_ready("the secret A is missing"),
            not_ready("the secret B is missing"),
        ]);
        assert_eq!(alone.exit_code(), EXIT_NOT_READY);
        assert_eq!(
            alone.to_string(),
            "node not ready: the secret A is missing\nnode not ready: the secret B is missing"
        );
        // Beside any other problem, a person is needed anyway: one rejection lists it all.
        let mixed = Error::from(vec![not_ready("the secret A is missing"), Problem::ConflictingNixpkgs]);
        assert_eq!(mixed.exit_code(), EXIT_REJECTED);
        assert_eq!(mixed.to_string().lines().count(), 2);
    }

    #[test]
    fn an_entry_of_a_newer_format_is_a_node_not_ready_and_a_corrupt_one_a_journal_that_cannot_be_used() {
        let journal = std::path::Path::new("/var/lib/jobenv");
        let newer = ReadError::Newer {
            job_id: "j1".into(),
            format: 9,
            known: 2,
        };
        let refusal = newer.refusal(journal);
        assert_eq!(refusal.exit_code(), EXIT_NOT_READY);
        assert!(
            refusal
                .to_string()
                .starts_with("node not ready: the journal entry of job j1 has format 9"),
            "{refusal}"
        );
        let corrupt = ReadError::Corrupt {
            shown: "jobs/j1.json".into(),
            why: "EOF".into(),
        };
        let refusal = corrupt.refusal(journal);
        assert_eq!(refusal.exit_code(), EXIT_REJECTED);
        assert_eq!(
            refusal.to_string(),
            "the journal in /var/lib/jobenv cannot be used: jobs/j1.json is corrupt: EOF"
        );
    }

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
