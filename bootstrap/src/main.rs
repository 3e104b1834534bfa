use std::process::ExitCode;

use anyhow::Context;
use bootstrap::cli::Cli;
use bootstrap::error::{EXIT_DRIFT, EXIT_OK, EXIT_STEP_FAILED, Error};
use bootstrap::steps::{self, Finish};
use bootstrap::{config, scripts};
use clap::Parser;
use safe_io::lock::{Held, LockFile};
use safe_io::secret::{Secret, scrub};

/// The prefix of every line the bootstrap logs, so the journal and a terminal tell them apart.
const LOG_PREFIX: &str = "fediversity-windmill-bootstrap: ";

fn main() -> ExitCode {
    // Only our own crate's events: reqwest, hyper and tokio-postgres stay silent, so nothing
    // they might format (a URL, a connection string) reaches the log. (The library's events
    // have target `bootstrap`, the binary's `fediversity_windmill_bootstrap`.)
    let logging = safe_io::log::init(
        LOG_PREFIX,
        "BOOTSTRAP_LOG",
        &["bootstrap", "fediversity_windmill_bootstrap"],
    );
    let cli = Cli::parse();
    if let Err(bad_level) = logging {
        return ExitCode::from(report(&Error::from(bad_level), &[]));
    }
    ExitCode::from(run(&cli))
}

fn run(cli: &Cli) -> u8 {
    let config = match config::load(&cli.config) {
        Ok(config) => config,
        Err(error) => return report(&error, &[]),
    };
    let local = match scripts::scan(&config.scripts.dir) {
        Ok(local) => local,
        Err(error) => return report(&error, &config.secrets()),
    };
    // --check writes nothing, so it need not wait for a running bootstrap.
    let _lock = if cli.check {
        None
    } else {
        match lock(&config.lock_file) {
            Ok(lock) => Some(lock),
            Err(error) => return report(&Error::Lock(Box::new(error)), &config.secrets()),
        }
    };
    let mut found = Vec::new();
    let result = match runtime() {
        Ok(runtime) => runtime.block_on(steps::run(&config, local, cli.check, &mut found)),
        Err(error) => {
            tracing::error!("{error:#}");
            return EXIT_STEP_FAILED;
        }
    };
    match result {
        Ok(Finish::Converged) => {
            if cli.check {
                tracing::info!("check: the node is converged");
            } else {
                tracing::info!("converged");
            }
            EXIT_OK
        }
        Ok(Finish::Drift(steps)) => {
            let names: Vec<String> = steps.iter().map(ToString::to_string).collect();
            tracing::info!("check: a run would change: {}", names.join(", "));
            EXIT_DRIFT
        }
        Err(error) => {
            let mut secrets = config.secrets();
            secrets.extend(found.iter());
            report(&error, &secrets)
        }
    }
}

/// One bootstrap at a time: the lock file's `flock`, held until the process exits. Two runs
/// started together (a manual run during the boot run) then happen one after the other, and
/// the second finds a converged node.
fn lock(path: &std::path::Path) -> Result<Held, Error> {
    let file = LockFile::open(path)?;
    if let Some(held) = file.try_exclusive()? {
        return Ok(held);
    }
    tracing::info!("another bootstrap holds {}; waiting for it to finish", path.display());
    // Blocking is bounded by the unit's TimeoutStartSec; the other run is making progress.
    Ok(file.exclusive()?)
}

/// One `error:` line per line of the message; secrets scrubbed as a last resort.
fn report(error: &Error, secrets: &[&Secret]) -> u8 {
    for line in scrub(&error.to_string(), secrets).lines() {
        tracing::error!("{line}");
    }
    error.exit_code()
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // One thread: the work is waiting on the network; scripts run concurrently as tasks.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
