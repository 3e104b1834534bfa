//! `run`: one job, through the spine (`crate::job`).

use crate::cli::RunArgs;
use crate::error::Error;
use crate::settings::Runner;

use super::{Exit, as_owner, rejected_before_start};

pub(crate) fn run(args: RunArgs) -> Result<Exit, Error> {
    if let Err(exit) = as_owner(&args.state.dir()) {
        return Ok(exit);
    }
    Ok(match args.settings(Runner::from_environment()) {
        Ok(settings) => Exit::Job(crate::job::run(&settings)),
        Err(error) => rejected_before_start(&[error]),
    })
}
