//! What a command runs with, resolved once in `main` from the command line and jobenv's own
//! environment (see [`crate::cli`]): the library below never reads a flag or an option's
//! variable itself, and whether jobenv runs under a job runner is decided here, once.

use std::path::PathBuf;
use std::time::Duration;

use nix::unistd::Pid;

/// Where the node's files are.
#[derive(Debug, Clone)]
pub struct NodeFiles {
    pub deploy_env: PathBuf,
    pub secrets_dirs: Vec<PathBuf>,
    pub secrets_env_files: Vec<PathBuf>,
    pub keys: PathBuf,
    pub attributes: PathBuf,
    /// A name looked up in jobenv's own `PATH`, or a path.
    pub nix_shell: String,
    pub required_secrets: Option<PathBuf>,
}

/// One job: its verb, its payload, and the node it runs on (`run` and `env`).
#[derive(Debug, Clone)]
pub struct JobSettings {
    pub verb: String,
    /// The payload file; `-` is stdin.
    pub payload: PathBuf,
    pub node: NodeFiles,
}

/// Who started jobenv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// A Windmill worker (`WM_JOB_ID` is set): jobenv is the job process, writes `result.json`
    /// for the worker, and ends the job when its parent, the worker, is gone.
    Windmill { job_id: String, worker: Pid },
    /// A front-end that runs jobenv as a subprocess, or a person.
    Standalone,
}

impl Runner {
    /// From jobenv's own environment, at its start: under Windmill, its parent is the worker.
    pub fn from_environment() -> Self {
        match std::env::var("WM_JOB_ID") {
            Ok(job_id) => Runner::Windmill {
                job_id,
                worker: nix::unistd::getppid(),
            },
            Err(_) => Runner::Standalone,
        }
    }

    /// The worker whose death ends the job, under a job runner.
    pub fn worker(&self) -> Option<Pid> {
        match self {
            Runner::Windmill { worker, .. } => Some(*worker),
            Runner::Standalone => None,
        }
    }

    /// The job id the runner gave, for `result.json`.
    pub fn job_id(&self) -> Option<&str> {
        match self {
            Runner::Windmill { job_id, .. } => Some(job_id),
            Runner::Standalone => None,
        }
    }
}

/// `run`.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub job: JobSettings,
    pub runner: Runner,
    /// The job's identity in the journal (`--job-id`, else the runner's); none: not journaled.
    pub job_id: Option<String>,
    pub state_dir: PathBuf,
    pub grace: Duration,
    pub timeout: Option<Duration>,
    pub lock_timeout: Duration,
    pub containment: Containment,
    /// Cluster mode: the journal and the locks are shared by the nodes, in PostgreSQL.
    pub cluster: Option<Cluster>,
    /// Export over OTLP: jobenv's own settings of it (the rest are the `OTEL_*` variables).
    pub telemetry: crate::telemetry::Options,
}

/// Cluster mode (`--cluster-dsn-file`): the decision on a job id and the namespace lock are
/// leases in a PostgreSQL database shared by the nodes (see `record::store::postgres`).
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The file holding the connection string: a secret, read when a run needs it and never
    /// shown.
    pub dsn_file: PathBuf,
    /// With `sslmode=require`: the CAs the database's certificate is verified against (else the
    /// system's trust store).
    pub ca_file: Option<PathBuf>,
    /// How long a lease lasts after each renewal, by the database's clock.
    pub lease: Duration,
    /// How often a holder renews its leases.
    pub renew_every: Duration,
    /// A holder that could not renew for this long stops its program: it must be stopped
    /// before its lease can expire.
    pub renew_deadline: Duration,
}

/// What a stop on a lost lease leaves for SIGKILL and for the tree to empty, for the watchdog's
/// wake-up, and for the rates of two clocks (the node's monotonic one, the database's) to
/// differ over one lease.
pub const LEASE_STOP_MARGIN: Duration = Duration::from_secs(1);

impl Cluster {
    /// The defaults: Kubernetes' leader election's (lease 15 s, renew deadline 10 s), renewed
    /// every 5 s.
    pub const LEASE: &str = "15";
    pub const RENEW_EVERY: &str = "5";
    pub const RENEW_DEADLINE: &str = "10";

    /// The three times must nest: renewals come more often than the deadline, and the deadline
    /// leaves time to stop the program before the lease expires.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_every >= self.renew_deadline {
            return Err(format!(
                "--cluster-renew-every ({:?}) must be shorter than --cluster-renew-deadline ({:?})",
                self.renew_every, self.renew_deadline
            ));
        }
        if self.renew_deadline + LEASE_STOP_MARGIN >= self.lease {
            return Err(format!(
                "--cluster-renew-deadline ({:?}) must be more than {LEASE_STOP_MARGIN:?} shorter than --cluster-lease ({:?}): a holder that cannot renew stops its program in between",
                self.renew_deadline, self.lease
            ));
        }
        Ok(())
    }

    /// The longest `--grace` cluster mode can give: every stop must end before the lease can
    /// expire, and one may start as late as the renew deadline (a cancel just before it, or the
    /// stop on a lease not renewed in time), with no renewal after: the deadline, the grace,
    /// SIGKILL and the margin fit in one lease.
    pub fn max_grace(&self) -> Duration {
        self.lease.saturating_sub(self.renew_deadline + LEASE_STOP_MARGIN)
    }

    /// [`Cluster::max_grace`] with the default lease and renew deadline.
    pub fn default_max_grace() -> Duration {
        let seconds = |text: &str| Duration::from_secs(text.parse().expect("a whole number of seconds"));
        seconds(Self::LEASE).saturating_sub(seconds(Self::RENEW_DEADLINE) + LEASE_STOP_MARGIN)
    }

    /// `grace` fits ([`Cluster::max_grace`]); otherwise what to say.
    pub fn check_grace(&self, grace: Duration) -> Result<(), String> {
        if grace <= self.max_grace() {
            return Ok(());
        }
        Err(format!(
            "--grace {grace:?} does not fit cluster mode's leases: a stop must end before the lease can expire, and with --cluster-lease {:?} and --cluster-renew-deadline {:?} the longest grace that fits is {:?} (the lease, less the renew deadline and {LEASE_STOP_MARGIN:?}); shorten --grace or lengthen --cluster-lease",
            self.lease,
            self.renew_deadline,
            self.max_grace()
        ))
    }
}

/// How the program tree is kept (`--containment`, `JOBENV_CONTAINMENT`; see `run::tree`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Containment {
    /// A cgroup of the deploy's own where jobenv may create one, else the /proc walk.
    #[default]
    Auto,
    /// A cgroup, or the job is not run.
    Cgroup,
    /// The /proc walk, even where a cgroup could be made.
    Proc,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(lease: u64, renew_every: u64, renew_deadline: u64) -> Cluster {
        let s = Duration::from_secs;
        Cluster {
            dsn_file: PathBuf::from("/dsn"),
            ca_file: None,
            lease: s(lease),
            renew_every: s(renew_every),
            renew_deadline: s(renew_deadline),
        }
    }

    #[test]
    fn the_lease_times_must_nest_and_the_stop_fits_before_the_expiry() {
        assert!(cluster(15, 5, 10).check().is_ok(), "the defaults");
        assert!(
            cluster(15, 10, 10)
                .check()
                .unwrap_err()
                .contains("--cluster-renew-every")
        );
        assert!(
            cluster(11, 5, 10)
                .check()
                .unwrap_err()
                .contains("more than 1s shorter than --cluster-lease")
        );
        // The longest grace: what is left of the lease after the deadline and the margin.
        let defaults = cluster(15, 5, 10);
        assert_eq!(defaults.max_grace(), Duration::from_secs(4));
        assert!(defaults.check_grace(Duration::from_secs(4)).is_ok());
        assert!(
            defaults.check_grace(Duration::from_secs(3)).is_ok(),
            "jobenv's default grace"
        );
        assert!(
            defaults
                .check_grace(Duration::from_millis(4001))
                .unwrap_err()
                .contains("the longest grace that fits is 4s")
        );
        assert!(defaults.renew_deadline + defaults.max_grace() + LEASE_STOP_MARGIN <= defaults.lease);
    }
}
