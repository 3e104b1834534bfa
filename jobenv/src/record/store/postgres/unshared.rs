//! Ends this node holds that the cluster journal did not take: the database could not be
//! reached right as a program ended (for as long as the run's lease lasted). The node's own
//! journal has the end; a file in the state directory's `unshared/` (`<job id>.json`) keeps the
//! epoch of the lease it was written under, and the end is handed on, fenced by that epoch, once
//! the database answers: after this node's next job in cluster mode (a few at a time), and by
//! `recover` and `prune` (all of them). Fenced: the row takes it only if no other node took the
//! job id over since, in which case that node ran the job again (its lease had expired) and its
//! attempt is the cluster's record; this node's end then stays its own, and it says so.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::keeper::{Keeper, Trouble};
use super::tables;
use crate::record::dir::Dir;
use crate::record::entry::{Entry, is_valid_job_id};
use crate::record::journal::Journal;
use crate::record::locks;

/// The directory of kept ends, in the state directory.
const DIR: &str = "unshared";

/// What is kept of an end: the lease it was written under.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    epoch: i64,
    attempt: u32,
}

/// Keeps `entry`'s end (its attempt's lease had epoch `epoch`) to hand it on later.
pub(super) fn keep(journal: &Journal, entry: &Entry, epoch: i64) -> std::io::Result<()> {
    let dir = journal.state.subdir(DIR, Some(0o750))?.expect("created if missing");
    if let Some(owner) = journal.owner {
        dir.chown(owner)?;
    }
    let kept = serde_json::to_vec(&Kept { epoch, attempt: entry.attempt })?;
    dir.write_atomically(&format!("{}.json", entry.job_id), &kept, journal.owner, true)
}

/// What handing kept ends on did.
#[derive(Debug, Default)]
pub struct Handed {
    /// The cluster journal has them now.
    pub taken: usize,
    /// Another node took their job id over first: they stay this node's own.
    pub superseded: usize,
    /// Still kept: the database did not answer (then why), a run of their job holds them, or
    /// over the limit.
    pub left: usize,
    pub unreachable: Option<String>,
}

/// Hands on up to `limit` kept ends, each within `each` (a database that does not answer ends
/// it: the rest wait for the next time). Each is handed on under its job's lock, and only if
/// this node's entry still holds that attempt's end; a kept file that names nothing to hand on
/// is removed.
pub(super) fn hand_on(journal: &Journal, keeper: &Keeper, limit: usize, each: Duration) -> std::io::Result<Handed> {
    let mut handed = Handed::default();
    let Some(dir) = journal.state.subdir(DIR, None)? else { return Ok(handed) };
    let holder = format!("jobenv handing kept ends on, pid {}", std::process::id());
    for name in dir.names()? {
        if handed.taken + handed.superseded >= limit || handed.unreachable.is_some() {
            handed.left += 1;
            continue;
        }
        let Some(job_id) = name.to_str().and_then(|n| n.strip_suffix(".json")).filter(|id| is_valid_job_id(id)).map(str::to_owned) else {
            // Temporary files of an interrupted write (`.`-names) are pruning's; anything else
            // is no kept end.
            if !name.as_encoded_bytes().starts_with(b".") {
                tracing::warn!("ignoring {}: it is no kept end (<job id>.json)", dir.shown(&name));
            }
            continue;
        };
        // A run of this job id holds it: it hands its own end on.
        let Some(_held) = journal.try_lock(&locks::job_name(&job_id), &holder) else {
            handed.left += 1;
            continue;
        };
        let Some((kept, entry)) = kept_end(journal, &dir, &job_id)? else { continue };
        let written = keeper.block_on(keeper.shared.run(each, async |client| tables::write_end(client, &entry, kept.epoch).await));
        match written {
            Ok(true) => {
                tracing::info!("job {job_id}: the end of attempt {} is on the cluster journal now", entry.attempt);
                handed.taken += 1;
                dir.remove(&format!("{job_id}.json"))?;
            }
            Ok(false) => {
                tracing::warn!(
                    "job {job_id}: another node took it over on the cluster journal after this node's lease expired (it ran the job again): the end of attempt {} stays in this node's journal only",
                    entry.attempt
                );
                handed.superseded += 1;
                dir.remove(&format!("{job_id}.json"))?;
            }
            Err(Trouble::Unreachable(why)) => {
                handed.left += 1;
                handed.unreachable = Some(why);
                break;
            }
            Err(Trouble::Newer(why) | Trouble::Refused(why)) => {
                tracing::warn!("job {job_id}: its kept end is not handed on: {why}");
                handed.left += 1;
            }
        }
    }
    Ok(handed)
}

/// The kept file of `job_id` and this node's entry, when the entry still holds the end of the
/// attempt kept; otherwise the kept file goes (a pruned entry, a later attempt, a planted file).
fn kept_end(journal: &Journal, dir: &Dir, job_id: &str) -> std::io::Result<Option<(Kept, Entry)>> {
    let name = format!("{job_id}.json");
    let kept = match dir.read(&name) {
        Ok(Some(bytes)) => serde_json::from_slice::<Kept>(&bytes).ok(),
        Ok(None) => return Ok(None),
        Err(error) => {
            tracing::warn!("{error}: removed");
            None
        }
    };
    let entry = match journal.read(job_id) {
        Ok(entry) => entry,
        Err(error) => {
            tracing::warn!("job {job_id}: its kept end is not handed on: {error}");
            return Ok(None);
        }
    };
    match (kept, entry) {
        (Some(kept), Some(entry)) if entry.is_result() && entry.attempt == kept.attempt => Ok(Some((kept, entry))),
        _ => {
            dir.remove(&name)?;
            Ok(None)
        }
    }
}
