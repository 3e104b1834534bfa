//! `env`: what `run` would execute, and with which environment; runs nothing.

use jobenv::cli::EnvArgs;
use jobenv::error::Error;
use jobenv::show;

use super::output::print;
use super::{Exit, as_owner};

pub fn env(args: EnvArgs) -> Result<Exit, Error> {
    if let Err(exit) = as_owner(&args.state.dir()) {
        return Ok(exit);
    }
    let plan = jobenv::input::gather(&args.job.settings())
        .inputs
        .and_then(|inputs| jobenv::plan::plan(&inputs))
        .map_err(Error::Rejected)?;
    for warning in &plan.warnings {
        tracing::warn!("{warning}");
    }
    let look = jobenv::evaluation::look(&plan.evaluation, &args.state.dir());
    Ok(print(&show::env(&plan, &look, args.format)))
}
