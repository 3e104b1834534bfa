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
//! Holding the namespace's lock (jobenv's own, held from step 6 until it exits) is what tells
//! that the deploy's jobenv is gone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ending::{InterruptedBy, Status};
use super::journal::{Journal, Orphans, now};
use super::locks;
use crate::run::tree::{Cgroup, ProgramTree, hierarchy};

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
}

/// The record of a namespace's program tree, in the locks directory.
pub fn record_path(locks: &Path, namespace: &str) -> PathBuf {
    locks.join(format!("namespace-{namespace}.tree.json"))
}

/// A run's record of its cgroup. Dropped (after the cgroup was, see `run::tree::Cgroup`), it
/// removes the record once the cgroup is gone; a cgroup that is still populated keeps it.
pub struct Recorded {
    path: PathBuf,
    cgroup: PathBuf,
}

impl Recorded {
    /// Written before the cgroup is made, under the namespace's lock: a new file renamed into
    /// place, so a reader never sees half of one. Not synced to disk: it must outlive jobenv,
    /// not the machine (a reboot ends every cgroup), and a sync would cost every run.
    pub fn write(journal: &Journal, namespace: &str, record: &TreeRecord) -> std::io::Result<Recorded> {
        let path = record_path(journal.locks(), namespace);
        let mut file = tempfile::Builder::new().prefix(".tree.").tempfile_in(journal.locks())?;
        std::io::Write::write_all(&mut file, &serde_json::to_vec(record)?)?;
        // Readable by the worker's user, also when a person ran jobenv as root.
        journal.own(file.path())?;
        file.persist(&path).map_err(|e| e.error)?;
        Ok(Recorded { path, cgroup: record.cgroup.clone() })
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if !self.cgroup.exists() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// What an earlier deploy of a namespace had left running, and what became of it.
#[derive(Debug, Clone)]
pub struct Left {
    pub job_id: Option<String>,
    pub attempt: Option<u32>,
    pub jobenv_pid: i32,
    pub orphans: Orphans,
    /// Still running after SIGKILL (uninterruptible): the namespace stays locked.
    pub survived: bool,
}

/// Under the namespace's lock: stops what the deploy recorded for `namespace` left running in
/// its cgroup (SIGTERM, its grace, SIGKILL), and records it in that job's entry, unless it is
/// `own_job`'s (whose run holds that entry and records it itself). `by` names who stopped them.
/// Removes the record once its cgroup is gone. `None` when nothing was left running.
pub fn stop_left(journal: &Journal, namespace: &str, by: &str, own_job: Option<&str>) -> std::io::Result<Option<Left>> {
    let path = record_path(journal.locks(), namespace);
    let record: TreeRecord = match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(record) => record,
            Err(error) => return forget(&path, &format!("it is not a record of a program tree ({error})")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !hierarchy::is_deploy_cgroup(&record.cgroup, namespace) {
        return forget(&path, &format!("{} is not the cgroup of a deploy of namespace {namespace}", record.cgroup.display()));
    }
    let Some(cgroup) = Cgroup::open(&record.cgroup) else { return forget(&path, "") };
    if cgroup.is_empty() {
        drop(cgroup);
        return forget(&path, "");
    }
    let whose = match (&record.job_id, record.attempt) {
        (Some(id), Some(attempt)) => format!("job {id} (attempt {attempt}, jobenv pid {})", record.jobenv_pid),
        _ => format!("the deploy of jobenv pid {}", record.jobenv_pid),
    };
    let grace = Duration::from_millis(record.grace_ms);
    let found = cgroup.members().len();
    tracing::warn!("namespace {namespace}: {found} process(es) of the program tree of {whose} still running without their jobenv: stopping them (grace {grace:?})");
    let stopped = cgroup.stop(grace);
    let orphans = Orphans { found: found.max(stopped.signalled).max(stopped.killed), killed: stopped.killed, stopped_by: by.to_owned(), stopped_at: now() };
    let left = Left { job_id: record.job_id.clone(), attempt: record.attempt, jobenv_pid: record.jobenv_pid, orphans, survived: !stopped.empty };
    if let (Some(id), Some(attempt)) = (&record.job_id, record.attempt) {
        if own_job != Some(id.as_str()) && !journal.record_orphans(id, attempt, &left.orphans)? {
            tracing::warn!("namespace {namespace}: the stopped processes of {whose} cannot be recorded in its journal entry (a run of that job holds it, or it is gone)");
        }
    }
    if stopped.empty {
        drop(cgroup);
        forget(&path, "")?;
    }
    Ok(Some(left))
}

/// Removes a record that names nothing to stop (saying why, when it was not just empty).
fn forget(path: &Path, why: &str) -> std::io::Result<Option<Left>> {
    if !why.is_empty() {
        tracing::warn!("ignoring {}: {why}", path.display());
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(None),
    }
}

impl Journal {
    /// Under the job's lock: records `orphans` in attempt `attempt` of job `job_id`, and the
    /// attempt as interrupted if it is still `running` under a dead jobenv. False when a run of
    /// that job holds its lock (it owns the entry), or there is no such attempt.
    fn record_orphans(&self, job_id: &str, attempt: u32, orphans: &Orphans) -> std::io::Result<bool> {
        let holder = format!("jobenv upkeep, pid {}", std::process::id());
        let _lock = match self.acquire(&locks::job_path(self.locks(), job_id), Duration::ZERO, &holder, None) {
            Ok(lock) => lock,
            Err(locks::Refused::Busy { .. } | locks::Refused::Cancelled(_)) => return Ok(false),
            Err(locks::Refused::Io(error)) => return Err(error),
        };
        let Some(mut entry) = self.read(job_id)? else { return Ok(false) };
        if !entry.note_orphans(attempt, orphans.clone()) {
            return Ok(false);
        }
        if entry.status == Status::Running && !entry.is_live() {
            entry.mark_interrupted(InterruptedBy::JobenvGone);
        }
        self.write(&entry)?;
        Ok(true)
    }

    /// For `recover`: stops what every deploy whose jobenv is gone left running (see
    /// [`stop_left`]); a namespace whose lock a live jobenv holds is left alone. Returns the jobs
    /// whose entries now record it.
    pub fn stop_orphans(&self, by: &str) -> std::io::Result<Vec<String>> {
        let holder = format!("jobenv {by}, pid {}", std::process::id());
        let mut recorded = Vec::new();
        for dirent in std::fs::read_dir(self.locks())?.flatten() {
            let name = dirent.file_name();
            let Some(namespace) = name.to_str().and_then(|n| n.strip_prefix("namespace-")?.strip_suffix(".tree.json")) else { continue };
            let Ok(_held) = self.acquire(&locks::namespace_path(self.locks(), namespace), Duration::ZERO, &holder, None) else { continue };
            if let Some(left) = stop_left(self, namespace, by, None)? {
                recorded.extend(left.job_id);
            }
        }
        Ok(recorded)
    }
}
