//! `run`: one job, through the spine (`jobenv::job`).

use jobenv::cli::RunArgs;
use jobenv::error::Error;
use jobenv::settings::Runner;

use super::{Exit, as_owner, rejected_before_start};

pub fn run(args: RunArgs) -> Result<Exit, Error> {
    if let Err(exit) = as_owner(&args.state.dir()) {
        return Ok(exit);
    }
    Ok(match args.settings(Runner::from_environment()) {
        Ok(settings) => Exit::Job(jobenv::job::run(&settings)),
        Err(error) => rejected_before_start(&[error]),
    })
}
