//! What is recorded of a job, so that its result is never lost or executed twice by accident:
//! steps 2 (journal), 3 (job lock), 4 (decision), 7 (the namespace's lock and what an earlier
//! deploy left), 8 (running entry), 10 (terminal entry) and 11 (`result.json`) of the spine
//! ([`crate::job`]), and the commands that keep the journal true between runs (`recover`,
//! `drain`, `prune`, `status`).
//!
//! - [`ending`]: how a job ended (one [`Status`], one [`Ending`], the typed [`Reason`] and
//!   [`InterruptedBy`]), and the table from the run's outcome to each record of it;
//! - [`entry`]: a job id's journal entry, and what a second run of the same job id does;
//! - [`identity`]: who this node is to the other nodes of a cluster (a random id made once in
//!   its state directory, and the boot id);
//! - [`journal`]: the entries in the state directory, written before the program runs and when
//!   it ends, and its locks;
//! - [`locks`]: one run per job id, one deploy per namespace (`flock`s);
//! - [`orphans`]: which cgroup holds a namespace's program tree, and what its deploy left
//!   running there once its jobenv is gone, stopped and recorded;
//! - [`owner`]: root on a state directory of another user's becomes that user first;
//! - [`result_file`]: the Windmill job result, `result.json`;
//! - [`store`]: where a run's record lives and who may act on a job id and a namespace: the
//!   node's own journal, or in cluster mode a PostgreSQL database shared by the nodes, with
//!   leases;
//! - [`upkeep`]: `recover`, `prune` and `drain`, which keep the journal true between runs.
//!
//! Every file of it is reached through a directory held by its descriptor
//! ([`crate::state_dir`]).

mod ending;
mod entry;
mod identity;
mod journal;
mod locks;
mod orphans;
mod owner;
mod result_file;
pub mod store;
mod upkeep;

use std::path::Path;

// The record's face: what the spine and the commands use of it, so that a job's path enters the
// record here (and at its seam, [`store`]) rather than through each of its parts.
pub use ending::{Ending, Status};
pub use entry::Entry;
pub(crate) use entry::{Attempt, Decision, Request, decide_known, is_valid_job_id, note_orphans};
pub(crate) use journal::Journal;
pub(crate) use locks::{Held, Lock};
pub(crate) use orphans::{Recorded, TreeRecord, stop_left};
pub(crate) use owner::{Identity as Owner, become_owner};
pub(crate) use result_file::{JobResult, record_rejected_before_start, write_here as write_result_here};
pub(crate) use upkeep::{StopRequest, drain, draining, end_draining, prune, recover};
// What the spine's unit tests build their memory store's answers from.
#[cfg(test)]
pub(crate) use {
    ending::{InterruptedBy, Reason},
    entry::Known,
};

/// Replaces `dir/name` with `bytes` atomically (see [`safe_io::atomic`]): a crash leaves the old
/// file or the new one, never a torn one.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    safe_io::atomic::write(&dir.join(name), bytes, safe_io::atomic::Options::default()).map_err(std::io::Error::other)
}
