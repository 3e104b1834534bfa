//! `env`: what `run` would execute, and with which environment; runs nothing.

use crate::cli::EnvArgs;
use crate::error::Error;
use crate::show;

use super::output::print;
use super::{Exit, as_owner};

pub(crate) fn env(args: EnvArgs) -> Result<Exit, Error> {
    if let Err(exit) = as_owner(&args.state.dir()) {
        return Ok(exit);
    }
    let plan = crate::input::gather(&args.job.settings())
        .inputs
        .and_then(|inputs| crate::input::check(&inputs).and_then(|checked| crate::plan::plan(&inputs, checked)))
        .map_err(Error::from)?;
    for warning in &plan.warnings {
        tracing::warn!("{warning}");
    }
    let look = crate::evaluation::look(&plan.evaluation, &args.state.dir());
    Ok(print(&show::env(&plan, &look, args.format)))
}
