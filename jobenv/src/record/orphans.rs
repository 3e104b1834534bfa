//! What a deploy's program tree leaves behind when its jobenv is gone (SIGKILLed, or a group
//! SIGKILL from Windmill that missed a `setsid`'d helper): the processes still running in its
//! cgroup. They are never left running unsupervised beside a later deploy of the namespace,
//! and never stopped without a record:
//!
//! - before its program starts, a run writes which cgroup holds the namespace's program tree
//!   (`locks/namespace-<ns>.tree.json`, [`Recorded`]); the record goes once that cgroup is gone;
//! - the next holder of the namespace's lock (the next run of that namespace, `recover`, or
//!   `drain` after it had to SIGKILL a jobenv) stops a populated recorded cgroup with its
//!   deploy's grace ([`stop_left`]), and records it in that job's journal entry (`orphans`); the
//!   namespace stays locked until it is empty.
//!
//! Holding the namespace's lock (jobenv's own, held from step 7 until it exits) is what tells
//! that the deploy's jobenv is gone.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ending::{InterruptedBy, Status};
use super::entry::{MAX_STOP_GRACE, Orphans, is_valid_job_id, now};
use super::journal::{Journal, StateDirId};
use super::locks::{self, Lock};
use crate::error::Refusal;
use crate::error::shown_path;
use crate::input::names::is_valid_namespace;
use crate::run::tree::{Cgroup, ProgramTree, Stopped, is_deploy_cgroup, stop_together};
use crate::state_dir::Dir;

/// How many namespaces `recover` stops together: each holds a lock and a cgroup's descriptor
/// until it is recorded, and a node has 1,024 descriptors to share.
const BATCH: usize = 64;

/// Which cgroup holds a namespace's program tree, and whose deploy it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeRecord {
    pub cgroup: PathBuf,
    /// The deploy's job, when it was journaled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    pub jobenv_pid: i32,
    /// The deploy's `--grace`: its orphans get the same.
    pub grace_ms: u64,
    /// The state directory whose jobenv wrote it. A copy of the state directory made while the
    /// deploy ran holds the record too, and its own copies of the locks, which say nothing of
    /// that deploy's jobenv: only the directory that wrote a record acts on it. (Absent in a
    /// record written before jobenv recorded it, by a deploy that ran across an upgrade:
    /// acted on, as it was then.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<StateDirId>,
}

/// The record of a namespace's program tree, in the locks directory.
pub fn record_name(namespace: &str) -> String {
    format!("namespace-{namespace}.tree.json")
}

/// Whether `name` is a program tree's record: `Some(Ok(namespace))`; `Some(Err(()))` when it is
/// named like one but not for a valid namespace; `None` for every other file.
fn namespace_of(name: &std::ffi::OsStr) -> Option<Result<&str, ()>> {
    let bytes = name.as_encoded_bytes();
    if !bytes.starts_with(b"namespace-") || !bytes.ends_with(b".tree.json") {
        return None;
    }
    let namespace = name
        .to_str()
        .and_then(|n| n.strip_prefix("namespace-")?.strip_suffix(".tree.json"));
    Some(namespace.filter(|ns| is_valid_namespace(ns)).ok_or(()))
}

/// A run's record of its cgroup. Dropped (after the cgroup was, see `run::tree::Cgroup`), it
/// removes the record once the cgroup is gone; a cgroup that is still populated keeps it.
pub struct Recorded {
    locks: Dir,
    name: String,
    cgroup: PathBuf,
}

impl Recorded {
    /// Written before the cgroup is made, under the namespace's lock: a new file renamed into
    /// place, so a reader never sees half of one. Not synced to disk: it must outlive jobenv, not the machine (a
    /// reboot ends every cgroup), and a sync would cost every run.
    pub fn write(journal: &Journal, namespace: &str, record: &TreeRecord) -> std::io::Result<Recorded> {
        let name = record_name(namespace);
        journal
            .locks()
            .write_atomically(&name, &serde_json::to_vec(record)?, false)?;
        Ok(Recorded {
            locks: journal.locks().try_clone()?,
            name,
            cgroup: record.cgroup.clone(),
        })
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if !self.cgroup.exists() {
            let _ = self.locks.remove(&self.name);
        }
    }
}

/// What an earlier deploy of a namespace had left running, and what became of it.
#[derive(Debug, Clone)]
pub struct Left {
    pub job_id: Option<String>,
    pub attempt: Option<u32>,
    pub orphans: Orphans,
    /// Still running after SIGKILL (uninterruptible): the namespace stays locked.
    pub survived: bool,
}

/// A populated cgroup of an earlier deploy of a namespace, found by its record, to be stopped.
struct Found {
    namespace: String,
    record: TreeRecord,
    cgroup: Cgroup,
    /// How many processes it held when found.
    count: usize,
    grace: Duration,
}

/// Under the namespace's lock: stops what the deploy recorded for `namespace` left running in
/// its cgroup (SIGTERM, its grace, SIGKILL), and records it in that job's entry, unless it is
/// `own_job`'s (whose run holds that entry and records it itself). `by` names who stopped them.
/// Removes the record once its cgroup is gone. `None` when nothing was left running.
pub fn stop_left(journal: &Journal, namespace: &str, by: &str, own_job: Option<&str>) -> std::io::Result<Option<Left>> {
    let Some(found) = find_left(journal, namespace)? else {
        return Ok(None);
    };
    let stopped = found.cgroup.stop(found.grace);
    settle(journal, found, stopped, by, own_job).map(Some)
}

/// The populated cgroup the record of `namespace` names, if it is one of this state directory's
/// deploys of that namespace; a record that names anything else is removed, saying why.
///
/// A record is a file of the worker's user, who can name any path in it. What makes a cgroup
/// one of this state directory's deploys: under a cgroup2 mount, named for a deploy of the
/// namespace (`jobenv-<namespace>-<pid>-<start>`), and owned by the state directory's owner (a
/// jobenv of it makes its cgroups so, see `Cgroup::create`); and the record written in this
/// very state directory, not copied into it with the rest (the copy's locks, free, say nothing
/// of the jobenv that wrote it, which may be alive). Another node's, another state directory's
/// or another service's cgroup, whatever it is named, is never stopped.
fn find_left(journal: &Journal, namespace: &str) -> std::io::Result<Option<Found>> {
    let name = record_name(namespace);
    let forget = |why: &str| forget(journal.locks(), &name, why).map(|()| None);
    let record: TreeRecord = match journal.locks().read(&name) {
        Ok(Some(bytes)) => match serde_json::from_slice(&bytes) {
            // Its text is the worker's user's: escaped, like everything else of it below.
            Err(error) => {
                return forget(&format!(
                    "it is not a record of a program tree ({})",
                    crate::error::name(&error.to_string())
                ));
            }
            Ok(record) => record,
        },
        Ok(None) => return Ok(None),
        Err(error) => return forget(&error.to_string()),
    };
    if !is_deploy_cgroup(&record.cgroup, namespace) {
        return forget(&format!(
            "{} is not the cgroup of a deploy of namespace {namespace}",
            shown_path(&record.cgroup)
        ));
    }
    if record.job_id.as_deref().is_some_and(|id| !is_valid_job_id(id)) {
        return forget("its job id is not one");
    }
    let here = journal.state_dir_id()?;
    if let Some(there) = record.state_dir.filter(|there| *there != here) {
        return forget(&format!(
            "it was written in another state directory (device {}, inode {}; this one is a copy of it?): the program tree it names is that directory's to stop, not this one's",
            there.dev, there.ino
        ));
    }
    let Some(cgroup) = Cgroup::open(&record.cgroup) else {
        return forget("");
    };
    let owner = journal.owner_uid()?;
    let foreign = match cgroup.owner() {
        Ok(uid) if uid == owner => None,
        Ok(uid) => Some(format!(
            "{} belongs to uid {uid}, not to the state directory's owner (uid {owner}): it is no deploy of this state directory",
            shown_path(&record.cgroup)
        )),
        Err(error) => Some(format!("{}: {error}", shown_path(&record.cgroup))),
    };
    if let Some(why) = foreign {
        cgroup.leave();
        return forget(&why);
    }
    if cgroup.is_empty() {
        drop(cgroup);
        return forget("");
    }
    // Bounded like an entry's: a record claiming days must not hold `recover` for days.
    let grace = Duration::from_millis(record.grace_ms).min(MAX_STOP_GRACE);
    let count = cgroup.members().len();
    tracing::warn!(
        "namespace {namespace}: {count} process(es) of the program tree of {} still running without their jobenv: stopping them (grace {grace:?})",
        whose(&record)
    );
    Ok(Some(Found {
        namespace: namespace.to_owned(),
        record,
        cgroup,
        count,
        grace,
    }))
}

/// Whose deploy a record names, as messages say it.
fn whose(record: &TreeRecord) -> String {
    match (&record.job_id, record.attempt) {
        (Some(id), Some(attempt)) => format!("job {id} (attempt {attempt}, jobenv pid {})", record.jobenv_pid),
        _ => format!("the deploy of jobenv pid {}", record.jobenv_pid),
    }
}

/// After `found` was stopped: records its orphans in their job's entry (unless it is
/// `own_job`'s), and removes the record once the cgroup is gone.
fn settle(journal: &Journal, found: Found, stopped: Stopped, by: &str, own_job: Option<&str>) -> std::io::Result<Left> {
    let Found {
        namespace,
        record,
        cgroup,
        count,
        ..
    } = found;
    let orphans = Orphans {
        found: count.max(stopped.signalled).max(stopped.killed),
        killed: stopped.killed,
        stopped_by: by.to_owned(),
        stopped_at: now(),
    };
    let left = Left {
        job_id: record.job_id.clone(),
        attempt: record.attempt,
        orphans,
        survived: !stopped.empty,
    };
    if let (Some(id), Some(attempt)) = (&record.job_id, record.attempt) {
        if own_job != Some(id.as_str()) {
            match record_orphans(journal, id, attempt, &left.orphans) {
                Ok(true) => {}
                Ok(false) => tracing::warn!(
                    "namespace {namespace}: the stopped processes of {} cannot be recorded in its journal entry (a run of that job holds it, or it is gone)",
                    whose(&record)
                ),
                Err(error) => tracing::warn!(
                    "namespace {namespace}: the stopped processes of {} cannot be recorded in its journal entry: {error}",
                    whose(&record)
                ),
            }
        }
    }
    if stopped.empty {
        drop(cgroup);
        forget(journal.locks(), &record_name(&namespace), "")?;
    }
    Ok(left)
}

/// Removes a record that names nothing to stop (saying why, when it was not just empty; `why`
/// is escaped already). A link is removed, never its target. One that cannot be removed (a
/// directory planted under its name) is left, with a warning: it must not keep a run of the
/// namespace or `recover` from the rest.
fn forget(locks: &Dir, name: &str, why: &str) -> std::io::Result<()> {
    if !why.is_empty() {
        tracing::warn!("ignoring {}: {why}", locks.shown(name.as_ref()));
    }
    if let Err(error) = locks.remove(name) {
        tracing::warn!("{error}: left as it is");
    }
    Ok(())
}

/// Under the job's lock: records `orphans` in attempt `attempt` of job `job_id`, and the
/// attempt as interrupted if it is still `running` under a dead jobenv. False when a run of
/// that job holds its lock (it owns the entry), or there is no such attempt.
fn record_orphans(journal: &Journal, job_id: &str, attempt: u32, orphans: &Orphans) -> std::io::Result<bool> {
    let holder = format!("jobenv upkeep, pid {}", std::process::id());
    let _lock = match journal.acquire(Lock::Job(job_id), Duration::ZERO, &holder, None) {
        Ok(lock) => lock,
        Err(Refusal::Journal { source, .. }) => {
            tracing::warn!("job {job_id}: its job lock cannot be taken: {source}");
            return Ok(false);
        }
        // Held: a live run of this job id owns the entry.
        Err(_) => return Ok(false),
    };
    let Some(mut entry) = journal.read(job_id)? else {
        return Ok(false);
    };
    if !entry.note_orphans(attempt, orphans.clone()) {
        return Ok(false);
    }
    if entry.status == Status::Running && !entry.is_live() {
        entry.mark_interrupted(InterruptedBy::JobenvGone);
    }
    journal.write(&entry)?;
    Ok(true)
}

/// For `recover`: stops what every deploy whose jobenv is gone left running (see
/// [`stop_left`]); a namespace whose lock a live jobenv holds is left alone. They are
/// stopped together, under one deadline (the longest of their graces), [`BATCH`] at a time
/// (each holds two descriptors until it is recorded). What goes wrong with one namespace is
/// said and the others go on. Returns the jobs whose entries now record it.
pub fn stop_orphans(journal: &Journal, by: &str) -> std::io::Result<Vec<String>> {
    let holder = format!("jobenv {by}, pid {}", std::process::id());
    let mut recorded = Vec::new();
    // Each namespace's lock is held until what its deploy left is stopped and recorded.
    let mut found = Vec::new();
    for name in journal.locks().names()? {
        let namespace = match namespace_of(&name) {
            None => continue,
            Some(Ok(namespace)) => namespace,
            Some(Err(())) => {
                tracing::warn!(
                    "skipping {}: its name is not that of a program tree's record (namespace-<namespace>.tree.json)",
                    journal.locks().shown(&name)
                );
                continue;
            }
        };
        let Some(held) = journal.try_lock(Lock::Namespace(namespace), &holder) else {
            continue;
        };
        match find_left(journal, namespace) {
            Ok(Some(left)) => found.push((left, held)),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!("namespace {namespace}: what its deploy left cannot be looked at: {error}")
            }
        }
        if found.len() >= BATCH {
            stop_found(journal, std::mem::take(&mut found), by, &mut recorded);
        }
    }
    stop_found(journal, found, by, &mut recorded);
    Ok(recorded)
}

/// Stops what `found` names together, and records each (adding its job to `recorded`).
fn stop_found(journal: &Journal, found: Vec<(Found, locks::Held)>, by: &str, recorded: &mut Vec<String>) {
    let trees: Vec<(&dyn ProgramTree, Duration)> = found
        .iter()
        .map(|(f, _)| (&f.cgroup as &dyn ProgramTree, f.grace))
        .collect();
    let stopped = stop_together(&trees);
    drop(trees);
    for ((left, _held), stopped) in found.into_iter().zip(stopped) {
        let namespace = left.namespace.clone();
        match settle(journal, left, stopped, by, None) {
            Ok(left) => recorded.extend(left.job_id),
            Err(error) => tracing::warn!(
                "namespace {namespace}: what its deploy left was stopped but cannot be recorded: {error}"
            ),
        }
    }
}
