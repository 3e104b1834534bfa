//! Ends this node holds that the cluster journal did not take: the database could not be
//! reached right as a program ended (for as long as the run's lease lasted). The node's own
//! journal has the end; a file in the state directory's `unshared/` (`<job id>.json`) keeps the
//! epoch of the lease it was written under, and the end is handed on, fenced by that epoch, once
//! the database answers: after this node's next job in cluster mode (a few, within a second),
//! and by `recover` and `prune` (all of them). Fenced: the row takes it while it is still at
//! that lease, or still shows that attempt `running` under a lease that expired (another node
//! claimed the job id but never ran it); never over a later attempt or an end (another node ran
//! the job again once the lease had expired: its attempt is the cluster's record, this node's end
//! stays its own, and it says so), nor under a live lease (it waits for the next time).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::keeper::{Keeper, why};
use super::tables::{self, HandedOn};
use crate::error::Refusal;
use crate::record::entry::{Entry, is_valid_job_id};
use crate::record::journal::Journal;
use crate::record::locks::Lock;
use crate::state_dir::Dir;

/// The directory of kept ends, in the state directory.
const DIR: &str = crate::record::journal::UNSHARED;

/// What is kept of an end: the lease it was written under.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    epoch: i64,
    attempt: u32,
}

/// Keeps `entry`'s end (its attempt's lease had epoch `epoch`) to hand it on later: written
/// and synced before the end is written anywhere else, so that no end reaches this node's
/// journal without it.
pub(super) fn keep(journal: &Journal, entry: &Entry, epoch: i64) -> std::io::Result<()> {
    let dir = journal.state.subdir(DIR, Some(0o750))?.expect("created if missing");
    let kept = serde_json::to_vec(&Kept {
        epoch,
        attempt: entry.attempt,
    })?;
    dir.write_atomically(&format!("{}.json", entry.job_id), &kept, true)
}

/// The cluster journal took the end of `job_id`: it is kept no more. One left (this jobenv died
/// first, or the removal failed) is found taken when it is handed on.
pub(super) fn taken(journal: &Journal, job_id: &str) {
    match journal.state.subdir(DIR, None) {
        Ok(Some(dir)) => forget(&dir, job_id),
        Ok(None) => {}
        Err(error) => tracing::warn!("{error}: the kept end of job {job_id} is left as it is"),
    }
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

/// Hands on up to `limit` kept ends within `budget` all told, each statement within `each` (a
/// database that does not answer ends it: the rest wait for the next time). A kept end is read
/// under its job's lock, and only if this node's entry still holds that attempt's end; the
/// write itself, fenced, is made after the lock is let go (a re-run of the job meanwhile is
/// replayed from this node's entry). What goes wrong with one kept file is said, and the others
/// go on.
pub(super) fn hand_on(journal: &Journal, keeper: &Keeper, limit: usize, budget: Duration, each: Duration) -> Handed {
    let mut handed = Handed::default();
    let dir = match journal.state.subdir(DIR, None) {
        Ok(Some(dir)) => dir,
        Ok(None) => return handed,
        Err(error) => {
            tracing::warn!("kept ends cannot be handed on: {error}");
            return handed;
        }
    };
    let names = match dir.names() {
        Ok(names) => names,
        Err(error) => {
            tracing::warn!("kept ends cannot be handed on: {error}");
            return handed;
        }
    };
    // A budget longer than the clock can count is no bound.
    let until = Instant::now().checked_add(budget);
    let holder = format!("jobenv handing kept ends on, pid {}", std::process::id());
    for name in names {
        let left = until.map_or(Duration::MAX, |until| until.saturating_duration_since(Instant::now()));
        if handed.taken + handed.superseded >= limit || handed.unreachable.is_some() || left.is_zero() {
            handed.left += 1;
            continue;
        }
        let Some(job_id) = name
            .to_str()
            .and_then(|n| n.strip_suffix(".json"))
            .filter(|id| is_valid_job_id(id))
            .map(str::to_owned)
        else {
            // Temporary files of an interrupted write (`.`-names) are left; anything else is no
            // kept end.
            if !name.as_encoded_bytes().starts_with(b".") {
                tracing::warn!("ignoring {}: it is no kept end (<job id>.json)", dir.shown(&name));
            }
            continue;
        };
        let found = {
            // A run of this job id holds it: it is replayed from this node's entry, or hands on
            // its own end; this one waits for the next time.
            let Some(_held) = journal.try_lock(Lock::Job(&job_id), &holder) else {
                handed.left += 1;
                continue;
            };
            kept_end(journal, &dir, &job_id)
        };
        let Some((kept, entry)) = found else { continue };
        let written = keeper.block_on(keeper.shared.run(left.min(each), async |client| {
            tables::hand_on_end(client, &entry, Some(kept.epoch), None).await
        }));
        let done = match written {
            Ok(HandedOn::Taken) => {
                tracing::info!(
                    "job {job_id}: the end of attempt {} is on the cluster journal now",
                    entry.attempt
                );
                handed.taken += 1;
                true
            }
            Ok(HandedOn::Superseded) => {
                tracing::warn!(
                    "job {job_id}: the cluster journal records a later attempt or an end of it (another node ran it again once this node's lease expired): the end of attempt {} stays in this node's journal only",
                    entry.attempt
                );
                handed.superseded += 1;
                true
            }
            Ok(HandedOn::Held) => {
                handed.left += 1;
                false
            }
            Err(Refusal::Unreachable(why)) => {
                handed.left += 1;
                handed.unreachable = Some(why);
                false
            }
            Err(refusal) => {
                tracing::warn!("job {job_id}: its kept end is not handed on: {}", why(refusal));
                handed.left += 1;
                false
            }
        };
        if done {
            forget(&dir, &job_id);
        }
    }
    handed
}

/// `recover`: the ends in this node's journal whose shared row still shows that very attempt
/// `running` (its number, start and jobenv) with no kept file naming them (a jobenv of before
/// the kept intent, or a kept file lost), handed on as kept ends are (fenced the same way, read
/// and written under the job's lock, which proves a holder of this node's identity gone). What a
/// row shows comes from the database; only an end this node's
/// journal holds is ever written.
pub(super) fn reconcile(journal: &Journal, keeper: &Keeper, each: Duration) -> Handed {
    let mut handed = Handed::default();
    let rows = match keeper.block_on(keeper.shared.run(each, async |client| tables::unended(client).await)) {
        Ok(rows) => rows,
        Err(Refusal::Unreachable(why)) => {
            handed.unreachable = Some(why);
            return handed;
        }
        Err(refusal) => {
            tracing::warn!(
                "the cluster journal's running attempts cannot be compared with this node's journal: {}",
                why(refusal)
            );
            return handed;
        }
    };
    let kept = journal.state.subdir(DIR, None).ok().flatten();
    let holder = format!("jobenv reconciling ends, pid {}", std::process::id());
    // A row this node's gone jobenv holds is taken as a run would take it (the job's lock, held
    // below, proves that jobenv gone); without the identity, only one whose lease expired.
    let mine = crate::record::identity::node_identity(journal)
        .inspect_err(|error| tracing::warn!("{error}"))
        .ok();
    for (job_id, text) in rows {
        if !is_valid_job_id(&job_id) {
            continue;
        }
        if kept
            .as_ref()
            .is_some_and(|dir| dir.stat(&format!("{job_id}.json")).ok().flatten().is_some())
        {
            continue;
        }
        let Ok(shared) = crate::record::entry::parse(&job_id, "the cluster journal's row", text.as_bytes()) else {
            continue;
        };
        let Some(_held) = journal.try_lock(Lock::Job(&job_id), &holder) else {
            continue;
        };
        let Ok(Some(entry)) = journal.read(&job_id) else {
            continue;
        };
        let same_attempt = entry.attempt == shared.attempt
            && entry.started_at == shared.started_at
            && entry.pid == shared.pid
            && entry.pid_start == shared.pid_start;
        if !entry.is_result() || !same_attempt {
            continue;
        }
        match keeper.block_on(keeper.shared.run(each, async |client| {
            tables::hand_on_end(client, &entry, None, mine.as_deref()).await
        })) {
            Ok(HandedOn::Taken) => {
                tracing::info!(
                    "job {job_id}: the end of attempt {} is on the cluster journal now (its row still showed that attempt running)",
                    entry.attempt
                );
                handed.taken += 1;
            }
            Ok(HandedOn::Held) => handed.left += 1,
            Ok(HandedOn::Superseded) => handed.superseded += 1,
            Err(Refusal::Unreachable(why)) => {
                handed.left += 1;
                handed.unreachable = Some(why);
                break;
            }
            Err(refusal) => {
                tracing::warn!("job {job_id}: its end is not handed on: {}", why(refusal));
                handed.left += 1;
            }
        }
    }
    handed
}

/// Removes the kept file of `job_id`; one that cannot be removed is said and left.
fn forget(dir: &Dir, job_id: &str) {
    if let Err(error) = dir.remove(&format!("{job_id}.json")) {
        tracing::warn!("{error}: left as it is");
    }
}

/// The kept file of `job_id` and this node's entry, when the entry still holds the end of the
/// attempt kept; otherwise the kept file goes (a pruned entry, a later attempt, a planted file),
/// saying why.
fn kept_end(journal: &Journal, dir: &Dir, job_id: &str) -> Option<(Kept, Entry)> {
    let name = format!("{job_id}.json");
    let kept = match dir.read(&name) {
        Ok(Some(bytes)) => serde_json::from_slice::<Kept>(&bytes).ok(),
        Ok(None) => return None,
        Err(error) => {
            tracing::warn!("{error}: it is no kept end");
            return None;
        }
    };
    let entry = match journal.read(job_id) {
        Ok(entry) => entry,
        Err(error) => {
            tracing::warn!("job {job_id}: its kept end is not handed on: {error}");
            return None;
        }
    };
    match (kept, entry) {
        (Some(kept), Some(entry)) if entry.is_result() && entry.attempt == kept.attempt => Some((kept, entry)),
        (kept, entry) => {
            let why = match (kept, entry) {
                (None, _) => "it is not one as jobenv writes them",
                (_, None) => "this node's journal has no entry of the job any more",
                (Some(kept), Some(entry)) if entry.attempt == kept.attempt => {
                    "its jobenv died before it wrote the end anywhere (the attempt was interrupted)"
                }
                _ => "this node's journal holds another attempt of the job now",
            };
            tracing::info!("job {job_id}: its kept end is dropped: {why}");
            forget(dir, job_id);
            None
        }
    }
}
