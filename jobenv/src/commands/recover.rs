//! `recover`: run when the worker starts again. Every journaled job whose jobenv is gone is
//! marked interrupted (its orphans stopped) and printed; in cluster mode the ends the shared
//! journal did not take are handed on; old entries are pruned.

use crate::cli::RecoverArgs;
use crate::error::Error;
use crate::record;

use super::output::JsonArray;
use super::{Exit, as_owner, journal_refusal, open_journal, rejected_before_start};

pub(crate) fn recover(args: RecoverArgs) -> Result<Exit, Error> {
    let dsn_file = match args.cluster.dsn_file() {
        Ok(dsn_file) => dsn_file,
        Err(error) => return Ok(rejected_before_start(&[error])),
    };
    let dir = args.state.dir();
    if let Err(exit) = as_owner(&dir) {
        return Ok(exit);
    }
    // Programs may start from now on. First, and whatever becomes of the rest: a drain mark left
    // by a recover that failed would refuse every job of this boot.
    let ended = record::end_draining(&dir).map_err(|source| journal_refusal(&dir, source));
    let mut printed = JsonArray::new();
    let recovered = open_journal(&dir).and_then(|journal| {
        record::recover(&journal, |entry| {
            tracing::warn!(
                "job {} (attempt {}) was interrupted: its jobenv is gone; marked failed",
                entry.job_id,
                entry.attempt
            );
            printed.push(entry)
        })
        .map_err(|source| journal_refusal(&dir, source))?;
        // Cluster mode: the ends the shared journal did not take, and the ends whose shared row
        // still shows their attempt running. They stay kept if it does not answer now (and
        // their entries are not pruned): the node's next job or `prune` hands them on.
        if let Some(dsn) = dsn_file {
            if let Err(problem) =
                crate::record::store::postgres::hand_on_kept(&journal, dsn, args.cluster.ca_file.as_deref(), true)
            {
                tracing::warn!("{problem}");
            }
        }
        if let Err(error) = record::prune(&journal, args.retain.retention()) {
            tracing::warn!("cannot prune the journal: {error}");
        }
        Ok(())
    });
    // What was changed before a failure is printed, as a whole array, all the same.
    let printed = printed.finish();
    match (recovered, ended) {
        (Err(error), ended) => {
            if let Err(first) = ended {
                first.log();
            }
            Err(error)
        }
        (Ok(()), Err(error)) if matches!(printed, Exit::Success) => Err(error),
        (Ok(()), ended) => {
            if let Err(error) = ended {
                error.log();
            }
            Ok(printed)
        }
    }
}
