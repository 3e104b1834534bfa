//! `prune`: for a timer (runs never prune). Finished entries past the retention, the cached
//! shells of trees no longer deployed, and in cluster mode the shared journal's ended rows.

use crate::cli::PruneArgs;
use crate::error::Error;

use super::output::print;
use super::{Exit, as_owner, journal_refusal, open_journal, rejected_before_start};

pub(crate) fn prune(args: PruneArgs) -> Result<Exit, Error> {
    let dsn_file = match args.cluster.dsn_file() {
        Ok(dsn_file) => dsn_file,
        Err(error) => return Ok(rejected_before_start(&[error])),
    };
    let ca_file = args.cluster.ca_file.as_deref();
    let dir = args.state.dir();
    if let Err(exit) = as_owner(&dir) {
        return Ok(exit);
    }
    let retain = args.retain.retention();
    let pruned = open_journal(&dir).and_then(|journal| {
        // Cluster mode: first the ends the shared journal did not take (its rows are pruned
        // below; a failure to reach it fails that too).
        if let Some(dsn) = dsn_file {
            if let Err(problem) = crate::record::store::postgres::hand_on_kept(&journal, dsn, ca_file, false) {
                tracing::warn!("{problem}");
            }
        }
        let pruned = crate::record::prune(&journal, retain).map_err(|source| journal_refusal(&dir, source))?;
        // The cached shells of trees no longer deployed (they hold garbage-collector roots). A
        // cache that cannot be pruned keeps what it holds: jobs still run.
        let shells = crate::evaluation::prune(&dir, &args.deploy_env).unwrap_or_else(|error| {
            tracing::warn!("cannot prune the cached shells: {error}");
            0
        });
        Ok((pruned, shells))
    });
    // Cluster mode: the shared journal's ended rows by the same retention.
    let shared = dsn_file.map(|dsn| crate::record::store::postgres::prune(dsn, ca_file, retain));
    let (pruned, shells) = pruned?;
    let counts = match shared.transpose()? {
        None => serde_json::json!({ "pruned": pruned, "shells_pruned": shells }),
        Some(shared) => serde_json::json!({ "pruned": pruned, "shells_pruned": shells, "cluster_pruned": shared }),
    };
    Ok(print(format!("{counts}\n").as_bytes()))
}
