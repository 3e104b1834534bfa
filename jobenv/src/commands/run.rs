//! `run`: one job, through the spine (`jobenv::job`).

use jobenv::cli::RunArgs;
use jobenv::error::Error;
use jobenv::settings::Runner;

use super::{Exit, rejected_before_start};

pub fn run(args: RunArgs) -> Result<Exit, Error> {
    Ok(match args.settings(Runner::from_environment()) {
        Ok(settings) => Exit::Job(jobenv::job::run(&settings)),
        Err(error) => rejected_before_start(&[error]),
    })
}
