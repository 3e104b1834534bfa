//! The command line. Every option can also come from the environment variable in brackets in
//! its help; a flag wins over the variable. What a command runs with is resolved here into
//! [`crate::settings`], once: nothing below reads a flag or an option's variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::settings::{self, Runner};

pub const DEFAULT_DEPLOY_ENV: &str = "/etc/fediversity-windmill/deploy-env.json";
pub const DEFAULT_SECRETS_DIR: &str = "/run/fediversity-windmill/deploy-secrets";
pub const DEFAULT_KEYS: &str = "/etc/fediversity-windmill/deploy-keys.json";
pub const DEFAULT_ATTRIBUTES: &str = "/etc/fediversity-windmill/deployment-attributes.json";
/// `--grace`, in seconds.
pub const DEFAULT_GRACE: &str = "3";

#[derive(Debug, Parser)]
#[command(
    name = "fediversity-jobenv",
    version,
    about = "Run a deployment program with a vetted environment"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the deployment program for a job payload.
    Run(Box<RunArgs>),
    /// Print what `run` would execute and with which environment; run nothing.
    Env(EnvArgs),
    /// List the declared keys with their descriptions and defaults.
    Keys(KeysArgs),
    /// Mark every journaled job whose jobenv died as failed (interrupted), print them as JSON,
    /// and prune old entries.
    Recover(RecoverArgs),
    /// Print journal entries as JSON: one job's, or all of them.
    Status(StatusArgs),
    /// Delete journal entries that finished more than --retain-days ago (and the lock files of
    /// jobs that never got an entry, and temporary files), print how many as JSON. For a timer:
    /// runs never prune.
    Prune(PruneArgs),
    /// For a node that stops: let running journaled jobs finish for up to --wait, then stop
    /// each through its own jobenv (grace, then SIGKILL of its tree), recorded as interrupted;
    /// print them as JSON. Exit 0 when none is left running.
    Drain(DrainArgs),
    /// Print a JSON Schema (draft 2020-12) of the front-end contract: `payload` is what this
    /// node accepts (its attributes, its declared keys); the others are jobenv's own, as under
    /// schemas/.
    Schema(SchemaArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchemaName {
    /// The payload this node accepts
    Payload,
    /// A Windmill job's result.json
    Result,
    /// A progress event in jobenv's format
    EventJobenv,
    /// A progress event in DD-0012's format
    #[value(name = "event-dd-0012")]
    EventDd0012,
    /// A journal entry as `status JOB_ID` prints it
    JournalEntry,
}

#[derive(Debug, Args)]
pub struct SchemaArgs {
    #[arg(value_enum)]
    pub what: SchemaName,
    #[command(flatten)]
    pub node: NodeArgs,
}

pub const DEFAULT_STATE_DIR: &str = "/var/lib/fediversity-jobenv";

#[derive(Debug, Args)]
pub struct StateArgs {
    /// The journal and the locks [JOBENV_STATE_DIR; default $STATE_DIRECTORY, else /var/lib/fediversity-jobenv]
    #[arg(long, value_name = "DIR", env = "JOBENV_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
}

impl StateArgs {
    /// The flag, else JOBENV_STATE_DIR, else systemd's `$STATE_DIRECTORY` (its first entry when
    /// the unit has several), else the default.
    pub fn dir(&self) -> PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.clone();
        }
        std::env::var_os("STATE_DIRECTORY")
            .and_then(|dirs| std::env::split_paths(&dirs).find(|p| !p.as_os_str().is_empty()))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR))
    }
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// The node's deploy-env.json: cached shells of another DEPLOYMENT_ROOT or NIXPKGS than it
    /// sets are dropped [JOBENV_DEPLOY_ENV]
    #[arg(long, value_name = "FILE", env = "JOBENV_DEPLOY_ENV", default_value = DEFAULT_DEPLOY_ENV)]
    pub deploy_env: PathBuf,
    #[command(flatten)]
    pub retain: RetainArgs,
    /// Cluster mode: the ends the shared journal did not take are handed on first, and its
    /// ended rows are pruned by the same retention.
    #[command(flatten)]
    pub cluster: ClusterDatabaseArgs,
}

#[derive(Debug, Args)]
pub struct RecoverArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// Cluster mode: the ends the shared journal did not take when their jobs ended are handed
    /// on to it.
    #[command(flatten)]
    pub cluster: ClusterDatabaseArgs,
    #[command(flatten)]
    pub retain: RetainArgs,
}

/// How long finished entries are kept (`recover` and `prune` prune by it).
#[derive(Debug, Args)]
pub struct RetainArgs {
    /// Delete entries that finished more than this many days ago, at least 1 (a job id must
    /// never run twice because its entry went too soon) [JOBENV_RETAIN_DAYS]
    #[arg(long, value_name = "DAYS", env = "JOBENV_RETAIN_DAYS", default_value = "30", value_parser = clap::value_parser!(u32).range(1..))]
    pub retain_days: u32,
}

impl RetainArgs {
    pub fn retention(&self) -> Duration {
        days(self.retain_days)
    }
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// How long running jobs may go on before they are stopped [JOBENV_DRAIN_WAIT]
    #[arg(long, value_name = "SECONDS", env = "JOBENV_DRAIN_WAIT", default_value = "300", value_parser = parse_seconds)]
    pub wait: Duration,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub state: StateArgs,
    /// One job's entry; without it, every entry
    pub job_id: Option<String>,
}

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Node-owned keys, a JSON object [JOBENV_DEPLOY_ENV]
    #[arg(long, value_name = "FILE", env = "JOBENV_DEPLOY_ENV", default_value = DEFAULT_DEPLOY_ENV)]
    pub deploy_env: PathBuf,
    /// Directory with one file per secret variable; repeatable [JOBENV_SECRETS_DIRS, ':'-separated]
    #[arg(long = "secrets-dir", value_name = "DIR")]
    pub secrets_dirs: Vec<PathBuf>,
    /// File of KEY=VALUE secret lines; repeatable [JOBENV_SECRETS_ENV_FILES, ':'-separated]
    #[arg(long = "secrets-env-file", value_name = "FILE")]
    pub secrets_env_files: Vec<PathBuf>,
    /// Declared keys with descriptions and defaults [JOBENV_KEYS]
    #[arg(long, value_name = "FILE", env = "JOBENV_KEYS", default_value = DEFAULT_KEYS)]
    pub keys: PathBuf,
    /// JSON array of the deployment attributes that exist [JOBENV_ATTRIBUTES]
    #[arg(long, value_name = "FILE", env = "JOBENV_ATTRIBUTES", default_value = DEFAULT_ATTRIBUTES)]
    pub attributes: PathBuf,
    /// The nix-shell to run: a name looked up in PATH, or a path [JOBENV_NIX_SHELL]
    #[arg(long, value_name = "PATH", env = "JOBENV_NIX_SHELL", default_value = "nix-shell")]
    pub nix_shell: String,
    /// JSON array of the secret names the node must provide; a job finds one missing: exit 75,
    /// the node is not ready [JOBENV_REQUIRED_SECRETS]
    #[arg(long, value_name = "FILE", env = "JOBENV_REQUIRED_SECRETS")]
    pub required_secrets: Option<PathBuf>,
}

impl NodeArgs {
    pub fn settings(&self) -> settings::NodeFiles {
        settings::NodeFiles {
            deploy_env: self.deploy_env.clone(),
            // Repeatable options whose variable holds a ':'-separated list; the flags win.
            secrets_dirs: list_or_env(&self.secrets_dirs, "JOBENV_SECRETS_DIRS", Some(DEFAULT_SECRETS_DIR)),
            secrets_env_files: list_or_env(&self.secrets_env_files, "JOBENV_SECRETS_ENV_FILES", None),
            keys: self.keys.clone(),
            attributes: self.attributes.clone(),
            nix_shell: self.nix_shell.clone(),
            required_secrets: self.required_secrets.clone(),
        }
    }
}

fn list_or_env(flags: &[PathBuf], var: &str, default: Option<&str>) -> Vec<PathBuf> {
    if !flags.is_empty() {
        return flags.to_vec();
    }
    match std::env::var_os(var) {
        // Set but empty means "none": a node without secrets says so explicitly.
        Some(value) => std::env::split_paths(&value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect(),
        None => default.map(PathBuf::from).into_iter().collect(),
    }
}

#[derive(Debug, Args)]
pub struct JobArgs {
    /// The verb of the deployment program (apply, destroy, plan, ...)
    #[arg(long)]
    pub verb: String,
    /// The job payload, a JSON object; `-` reads stdin
    #[arg(long, value_name = "FILE", default_value = "-")]
    pub payload: PathBuf,
    #[command(flatten)]
    pub node: NodeArgs,
}

impl JobArgs {
    pub fn settings(&self) -> settings::JobSettings {
        settings::JobSettings {
            verb: self.verb.clone(),
            payload: self.payload.clone(),
            node: self.node.settings(),
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Seconds between SIGTERM and SIGKILL of the program tree [JOBENV_GRACE]
    #[arg(long, value_name = "SECONDS", env = "JOBENV_GRACE", default_value = DEFAULT_GRACE, value_parser = parse_seconds)]
    pub grace: Duration,
    /// Wall-clock limit of the program in seconds [JOBENV_TIMEOUT]
    #[arg(long, value_name = "SECONDS", env = "JOBENV_TIMEOUT", value_parser = parse_positive_seconds)]
    pub timeout: Option<Duration>,
    /// The job's identity in the journal [WM_JOB_ID]; without one the run is not journaled
    #[arg(long, value_name = "ID", env = "WM_JOB_ID")]
    pub job_id: Option<String>,
    #[command(flatten)]
    pub state: StateArgs,
    /// How long to wait for another job of the same namespace to finish; 0 fails at once [JOBENV_LOCK_TIMEOUT]
    #[arg(long, value_name = "SECONDS", env = "JOBENV_LOCK_TIMEOUT", default_value = "0", value_parser = parse_seconds)]
    pub lock_timeout: Duration,
    /// How the program tree is kept: a cgroup of its own where jobenv may create one (auto; in
    /// cluster mode, always), always (cgroup: the job is not run without one), or jobenv's
    /// descendants in /proc (proc; not in cluster mode) [JOBENV_CONTAINMENT]
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        env = "JOBENV_CONTAINMENT",
        default_value = "auto"
    )]
    pub containment: ContainmentArg,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub otlp: OtlpArgs,
}

/// Export of the job's trace and log over OTLP: on when the OpenTelemetry variables name an
/// endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`, ...); these are jobenv's own two settings of it.
#[derive(Debug, Args)]
pub struct OtlpArgs {
    /// Seconds the end of a job waits, at most, for what is not yet delivered to the collector
    /// [JOBENV_OTLP_FLUSH_TIMEOUT]
    #[arg(long = "otlp-flush-timeout", value_name = "SECONDS", env = "JOBENV_OTLP_FLUSH_TIMEOUT", default_value = crate::telemetry::config::DEFAULT_FLUSH, value_parser = parse_seconds)]
    pub flush_timeout: Duration,
    /// A file holding the headers of every export request (a collector's API key), in
    /// OTEL_EXPORTER_OTLP_HEADERS' form [JOBENV_OTLP_HEADERS_FILE]
    #[arg(long = "otlp-headers-file", value_name = "FILE", env = "JOBENV_OTLP_HEADERS_FILE")]
    pub headers_file: Option<PathBuf>,
}

/// Cluster mode's database: off unless a DSN file is given. Declared once, for `run`,
/// `recover` and `prune`.
#[derive(Debug, Args)]
pub struct ClusterDatabaseArgs {
    /// Cluster mode: a file holding the connection string (a secret) of the PostgreSQL database
    /// where the nodes share the journal and the namespace locks [JOBENV_CLUSTER_DSN_FILE]
    #[arg(long = "cluster-dsn-file", value_name = "FILE", env = "JOBENV_CLUSTER_DSN_FILE")]
    pub dsn_file: Option<PathBuf>,
    /// With sslmode=require in the DSN: the CA certificates (PEM) the database's certificate is
    /// verified against, instead of the system's trust store [JOBENV_CLUSTER_CA_FILE]
    #[arg(long = "cluster-ca-file", value_name = "FILE", env = "JOBENV_CLUSTER_CA_FILE")]
    pub ca_file: Option<PathBuf>,
}

impl ClusterDatabaseArgs {
    /// The DSN file, if cluster mode is on; a CA file without one is a configuration error.
    pub fn dsn_file(&self) -> Result<Option<&std::path::Path>, String> {
        match (&self.dsn_file, &self.ca_file) {
            (None, Some(_)) => Err(CA_WITHOUT_DSN.into()),
            (dsn, _) => Ok(dsn.as_deref()),
        }
    }
}

/// Cluster mode for `run`: the database and the leases' timing.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub database: ClusterDatabaseArgs,
    /// Seconds a lease lasts after each renewal, by the database's clock [JOBENV_CLUSTER_LEASE]
    #[arg(long = "cluster-lease", value_name = "SECONDS", env = "JOBENV_CLUSTER_LEASE", default_value = settings::Cluster::LEASE, value_parser = parse_positive_seconds)]
    pub lease: Duration,
    /// Seconds between renewals of a run's leases [JOBENV_CLUSTER_RENEW_EVERY]
    #[arg(long = "cluster-renew-every", value_name = "SECONDS", env = "JOBENV_CLUSTER_RENEW_EVERY", default_value = settings::Cluster::RENEW_EVERY, value_parser = parse_positive_seconds)]
    pub renew_every: Duration,
    /// Seconds without a renewal after which a run stops its program, before its lease can
    /// expire [JOBENV_CLUSTER_RENEW_DEADLINE]
    #[arg(long = "cluster-renew-deadline", value_name = "SECONDS", env = "JOBENV_CLUSTER_RENEW_DEADLINE", default_value = settings::Cluster::RENEW_DEADLINE, value_parser = parse_positive_seconds)]
    pub renew_deadline: Duration,
}

impl ClusterArgs {
    fn settings(&self) -> Result<Option<settings::Cluster>, String> {
        let Some(dsn_file) = self.database.dsn_file()? else {
            return Ok(None);
        };
        let cluster = settings::Cluster {
            dsn_file: dsn_file.to_owned(),
            ca_file: self.database.ca_file.clone(),
            lease: self.lease,
            renew_every: self.renew_every,
            renew_deadline: self.renew_deadline,
        };
        cluster.check()?;
        Ok(Some(cluster))
    }
}

/// The message of a CA file given without cluster mode.
pub const CA_WITHOUT_DSN: &str = "--cluster-ca-file (JOBENV_CLUSTER_CA_FILE) is given without --cluster-dsn-file (JOBENV_CLUSTER_DSN_FILE): it is for cluster mode's database";

/// `--containment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContainmentArg {
    Auto,
    Cgroup,
    Proc,
}

impl RunArgs {
    /// The settings of `run` under `runner` (see [`Runner::from_environment`]); an error names
    /// options that do not fit together.
    pub fn settings(&self, runner: Runner) -> Result<settings::RunSettings, String> {
        let cluster = self.cluster.settings()?;
        // Cluster mode's promise that no two nodes run one namespace at once holds only while
        // a program tree cannot outlive its jobenv's lease: its cgroup's guard kills what a
        // SIGKILLed jobenv left. So a cgroup, or no run.
        let containment = match (self.containment, &cluster) {
            (ContainmentArg::Proc, Some(_)) => {
                return Err("--containment proc (JOBENV_CONTAINMENT=proc) cannot be used in cluster mode: the program tree must be a cgroup, which its guard kills when a SIGKILLed jobenv no longer renews its leases".into());
            }
            (ContainmentArg::Auto, Some(_)) | (ContainmentArg::Cgroup, _) => settings::Containment::Cgroup,
            (ContainmentArg::Auto, None) => settings::Containment::Auto,
            (ContainmentArg::Proc, None) => settings::Containment::Proc,
        };
        // A stop that cannot end before the lease can expire is refused here, not cut short
        // later: the grace a program is told is the one it gets.
        if let Some(cluster) = &cluster {
            cluster.check_grace(self.grace)?;
        }
        Ok(settings::RunSettings {
            job: self.job.settings(),
            runner,
            job_id: self.job_id.clone(),
            state_dir: self.state.dir(),
            grace: self.grace,
            timeout: self.timeout,
            lock_timeout: self.lock_timeout,
            containment,
            cluster,
            telemetry: crate::telemetry::Options {
                flush: self.otlp.flush_timeout,
                headers_file: self.otlp.headers_file.clone(),
            },
        })
    }
}

/// A retention in days, as a duration.
pub fn days(days: u32) -> Duration {
    Duration::from_secs(u64::from(days) * 86_400)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Where the cached shells are: `env` says whether the job's is (it reads, never writes)
    #[command(flatten)]
    pub state: StateArgs,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct KeysArgs {
    /// Declared keys with descriptions and defaults [JOBENV_KEYS]
    #[arg(long, value_name = "FILE", env = "JOBENV_KEYS", default_value = DEFAULT_KEYS)]
    pub keys: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

/// A year: longer waits are typos, and deadlines computed from them must not overflow.
const MAX_SECONDS: f64 = 365.0 * 86_400.0;

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if seconds > MAX_SECONDS {
        return Err(format!("{text:?} is more than a year"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is not a non-negative number of seconds"))
}

fn parse_positive_seconds(text: &str) -> Result<Duration, String> {
    match parse_seconds(text)? {
        d if d.is_zero() => Err("must be more than 0 seconds".into()),
        d => Ok(d),
    }
}
