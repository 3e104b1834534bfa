//! `env`: what `run` would execute, and with which environment; runs nothing.

use jobenv::cli::EnvArgs;
use jobenv::error::Error;
use jobenv::show;

use super::Exit;
use super::output::print;

pub fn env(args: EnvArgs) -> Result<Exit, Error> {
    let plan = jobenv::input::gather(&args.job.settings())
        .inputs
        .and_then(|inputs| jobenv::input::check(&inputs).and_then(|checked| jobenv::plan::plan(&inputs, checked)))
        .map_err(Error::Rejected)?;
    for warning in &plan.warnings {
        tracing::warn!("{warning}");
    }
    let look = jobenv::evaluation::look(&plan.evaluation, &args.state.dir());
    Ok(print(&show::env(&plan, &look, args.format)))
}
