//! `drain`: for a node that stops. Running journaled jobs may finish for up to `--wait`; each
//! left is stopped through its own jobenv, recorded as interrupted, and printed.

use crate::cli::DrainArgs;
use crate::error::Error;
use crate::record::{self, Entry, Status};

use super::output::JsonArray;
use super::{Exit, as_owner, journal_refusal, open_journal};

pub(crate) fn drain(args: DrainArgs) -> Result<Exit, Error> {
    let dir = args.state.dir();
    if let Err(exit) = as_owner(&dir) {
        return Ok(exit);
    }
    let (mut printed, mut stopped, mut left) = (JsonArray::new(), 0, Vec::new());
    let drained = open_journal(&dir).and_then(|journal| {
        let each = |entry: &Entry| {
            match entry.status {
                Status::Running => left.push(entry.job_id.clone()),
                _ => stopped += 1,
            }
            printed.push(entry)
        };
        record::drain(&journal, args.wait, each).map_err(|source| journal_refusal(&dir, source))
    });
    if let Err(error) = drained {
        printed.finish();
        return Err(error);
    }
    if !left.is_empty() {
        tracing::error!("draining: still running after being stopped: {}", left.join(", "));
    }
    tracing::info!("drained: {stopped} job(s) stopped, {} still running", left.len());
    Ok(match (printed.finish(), left.is_empty()) {
        (Exit::Success, true) => Exit::Success,
        (Exit::Success, false) => Exit::StillRunning,
        (lost, _) => lost,
    })
}
