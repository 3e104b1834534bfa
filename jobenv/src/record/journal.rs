//! The job journal: one JSON entry per job id in the state directory, written atomically
//! before the program starts (`running`) and again when it ends (the terminal status). It is
//! what makes a job's result impossible to lose or to execute twice by accident:
//! - the same job id again replays a terminal entry instead of running the program;
//! - an entry still `running` under a live jobenv is refused;
//! - one `running` under a dead jobenv was interrupted: it is recorded as failed
//!   (`interrupted`) and the job runs again as the next attempt.
//!
//! An interrupted attempt is not a result: a later run of that job id runs it again, even after
//! `recover` marked it (that is what a worker that re-pulls a crashed job needs).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::ending::{Ending, Status};
use super::locks;
use crate::run::tree;

/// The reason recorded for an attempt whose jobenv died before it could record the end.
pub const INTERRUPTED: &str = "interrupted";

/// An attempt that ended before the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: u32,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
}

/// The journal entry of one job id: its latest attempt, plus the earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub job_id: String,
    pub attempt: u32,
    pub verb: String,
    pub attribute: String,
    pub namespace: String,
    /// jobenv's pid and the pid's start time (together they name one process).
    pub pid: i32,
    pub pid_start: u64,
    pub started_at: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<Attempt>,
}

impl Entry {
    /// Ended with a result of its own (an interrupted attempt has none).
    pub fn is_result(&self) -> bool {
        self.status != Status::Running && self.reason.as_deref() != Some(INTERRUPTED)
    }

    /// Still `running` under a jobenv that is alive.
    pub fn is_live(&self) -> bool {
        self.status == Status::Running && tree::is_running(self.pid, self.pid_start)
    }

    /// Records that this attempt's jobenv died: failed, interrupted.
    pub fn mark_interrupted(&mut self) {
        self.status = Status::Failed;
        self.reason = Some(INTERRUPTED.to_owned());
        self.exit_code = None;
        self.finished_at = Some(now());
    }

    /// Records how this attempt ended.
    pub fn end(&mut self, ending: &Ending) {
        self.status = ending.status;
        self.exit_code = Some(ending.exit_code);
        self.finished_at = Some(now());
    }

    /// How the recorded attempt ended, for a replay.
    pub fn ending(&self) -> Ending {
        Ending { status: self.status, exit_code: self.exit_code.unwrap_or(crate::error::EXIT_INTERNAL), errors: Vec::new() }
    }

    fn as_attempt(&self) -> Attempt {
        Attempt {
            attempt: self.attempt,
            status: self.status,
            exit_code: self.exit_code,
            reason: self.reason.clone(),
            started_at: self.started_at.clone(),
            finished_at: self.finished_at.clone(),
        }
    }
}

/// What to do with a job id, given its entry.
#[derive(Debug)]
pub enum Decision {
    /// It already ended: report the recorded result, run nothing.
    Replay(Entry),
    /// It is running under another jobenv right now.
    Refuse(Entry),
    /// Run it as this attempt, keeping the earlier ones.
    Run { attempt: u32, earlier: Vec<Attempt> },
}

pub fn decide(existing: Option<Entry>) -> Decision {
    match existing {
        None => Decision::Run { attempt: 1, earlier: Vec::new() },
        Some(entry) if entry.is_result() => Decision::Replay(entry),
        Some(entry) if entry.is_live() => Decision::Refuse(entry),
        Some(mut entry) => {
            if entry.status == Status::Running {
                entry.mark_interrupted();
            }
            let mut earlier = std::mem::take(&mut entry.earlier);
            earlier.push(entry.as_attempt());
            Decision::Run { attempt: entry.attempt + 1, earlier }
        }
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`: a job id becomes a file name.
pub fn is_valid_job_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    id.len() <= 128
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

pub fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The state directory: `jobs/<id>.json` entries and `locks/`.
pub struct Journal {
    jobs: PathBuf,
    locks: PathBuf,
}

impl Journal {
    /// Creates the directories if needed (mode 0750: entries hold no secret, but no one else
    /// needs to read them).
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        let jobs = state_dir.join("jobs");
        let locks = state_dir.join("locks");
        for dir in [&jobs, &locks] {
            std::fs::DirBuilder::new().recursive(true).mode(0o750).create(dir)?;
        }
        Ok(Journal { jobs, locks })
    }

    pub fn locks(&self) -> &Path {
        &self.locks
    }

    fn entry_path(&self, job_id: &str) -> PathBuf {
        self.jobs.join(format!("{job_id}.json"))
    }

    pub fn read(&self, job_id: &str) -> std::io::Result<Option<Entry>> {
        match std::fs::read(self.entry_path(job_id)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Atomically: a temporary file beside the entry, synced, renamed over it, directory synced.
    /// A crash leaves either the old entry or the new one, never a torn file.
    pub fn write(&self, entry: &Entry) -> std::io::Result<()> {
        let mut text = serde_json::to_vec_pretty(entry)?;
        text.push(b'\n');
        super::write_atomically(&self.jobs, &format!("{}.json", entry.job_id), &text)
    }

    /// Every entry, oldest start first; unreadable files are skipped with a warning.
    pub fn entries(&self) -> std::io::Result<Vec<Entry>> {
        let mut entries = Vec::new();
        for dirent in std::fs::read_dir(&self.jobs)? {
            let path = dirent?.path();
            if path.extension().is_none_or(|ext| ext != "json") {
                continue;
            }
            match std::fs::read(&path).map_err(std::io::Error::other).and_then(|b| serde_json::from_slice(&b).map_err(std::io::Error::other)) {
                Ok(entry) => entries.push(entry),
                Err(error) => tracing::warn!("skipping journal entry {}: {error}", path.display()),
            }
        }
        entries.sort_by(|a: &Entry, b: &Entry| a.started_at.cmp(&b.started_at).then_with(|| a.job_id.cmp(&b.job_id)));
        Ok(entries)
    }

    /// Marks every `running` entry whose jobenv is gone as failed (`interrupted`) and returns
    /// them. Each is re-read and rewritten under its job lock, so a run of that job id that
    /// starts meanwhile either waits for it or has the lock first (then the entry is its own).
    pub fn recover(&self) -> std::io::Result<Vec<Entry>> {
        let mut recovered = Vec::new();
        for entry in self.entries()? {
            if entry.status != Status::Running || entry.is_live() {
                continue;
            }
            let holder = format!("jobenv recover, pid {}", std::process::id());
            let _lock = match locks::acquire(&locks::job_path(&self.locks, &entry.job_id), Duration::ZERO, &holder, None) {
                Ok(lock) => lock,
                // Held: a live run of this job id owns the entry.
                Err(locks::Refused::Busy { .. } | locks::Refused::Cancelled(_)) => continue,
                Err(locks::Refused::Io(error)) => return Err(error),
            };
            let Some(mut entry) = self.read(&entry.job_id)? else { continue };
            if entry.status != Status::Running || entry.is_live() {
                continue;
            }
            entry.mark_interrupted();
            self.write(&entry)?;
            recovered.push(entry);
        }
        Ok(recovered)
    }

    /// Deletes what is older than `retain`: entries that finished then (and their job locks),
    /// job locks that never got an entry (jobs refused or cancelled before they started), and
    /// temporary files an interrupted write left behind.
    pub fn prune(&self, retain: Duration) -> std::io::Result<usize> {
        // A retention longer than the clock's past keeps everything.
        let Some(cutoff) = SystemTime::now().checked_sub(retain) else { return Ok(0) };
        let mut pruned = 0;
        for entry in self.entries()? {
            let finished = entry.finished_at.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
            if entry.status != Status::Running && finished.is_some_and(|t| t < cutoff) {
                std::fs::remove_file(self.entry_path(&entry.job_id))?;
                let _ = std::fs::remove_file(locks::job_path(&self.locks, &entry.job_id));
                pruned += 1;
            }
        }
        let older = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t < cutoff);
        for dirent in std::fs::read_dir(&self.locks)?.flatten() {
            let path = dirent.path();
            let name = dirent.file_name();
            let Some(job_id) = name.to_str().and_then(|n| n.strip_prefix("job-")?.strip_suffix(".lock")) else { continue };
            if !self.entry_path(job_id).exists() && older(&path) {
                // Only when nobody holds it: a run that is starting keeps its lock file.
                if let Ok(_held) = locks::acquire(&path, Duration::ZERO, "jobenv prune", None) {
                    std::fs::remove_file(&path)?;
                    pruned += 1;
                }
            }
        }
        for dirent in std::fs::read_dir(&self.jobs)?.flatten() {
            let path = dirent.path();
            if dirent.file_name().to_str().is_some_and(|n| n.starts_with('.')) && older(&path) {
                std::fs::remove_file(&path)?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(status: Status, pid: i32, pid_start: u64) -> Entry {
        Entry {
            job_id: "j1".into(),
            attempt: 1,
            verb: "apply".into(),
            attribute: "web".into(),
            namespace: "ns".into(),
            pid,
            pid_start,
            started_at: now(),
            status,
            exit_code: None,
            finished_at: None,
            reason: None,
            earlier: Vec::new(),
        }
    }

    #[test]
    fn a_terminal_entry_is_replayed() {
        let mut done = entry(Status::Succeeded, 1, 0);
        done.exit_code = Some(0);
        assert!(matches!(decide(Some(done)), Decision::Replay(e) if e.exit_code == Some(0)));
    }

    #[test]
    fn a_running_entry_of_a_live_process_is_refused() {
        let me = std::process::id() as i32;
        let live = entry(Status::Running, me, tree::start_time(me).unwrap());
        assert!(matches!(decide(Some(live)), Decision::Refuse(_)));
    }

    #[test]
    fn a_running_entry_of_a_dead_process_runs_again_as_the_next_attempt() {
        let me = std::process::id() as i32;
        // Same pid, another start time: the process that wrote the entry is gone.
        let dead = entry(Status::Running, me, tree::start_time(me).unwrap() + 1);
        match decide(Some(dead)) {
            Decision::Run { attempt, earlier } => {
                assert_eq!(attempt, 2);
                assert_eq!(earlier.len(), 1);
                assert_eq!(earlier[0].status, Status::Failed);
                assert_eq!(earlier[0].reason.as_deref(), Some(INTERRUPTED));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interrupted_entry_is_not_a_result() {
        let mut interrupted = entry(Status::Running, 1, 0);
        interrupted.mark_interrupted();
        assert!(matches!(decide(Some(interrupted)), Decision::Run { attempt: 2, .. }));
    }

    #[test]
    fn job_ids() {
        assert!(is_valid_job_id("0192d3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"));
        assert!(is_valid_job_id("local.42_x"));
        assert!(!is_valid_job_id("../etc/passwd"));
        assert!(!is_valid_job_id(".hidden"));
        assert!(!is_valid_job_id(""));
        assert!(!is_valid_job_id(&"a".repeat(129)));
    }

    #[test]
    fn write_read_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let mut old = entry(Status::Failed, 1, 0);
        old.finished_at = Some(humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(40 * 86400)).to_string());
        journal.write(&old).unwrap();
        assert_eq!(journal.read("j1").unwrap(), Some(old.clone()));
        let mut fresh = old.clone();
        fresh.job_id = "j2".into();
        fresh.finished_at = Some(now());
        journal.write(&fresh).unwrap();
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400)).unwrap(), 1);
        assert_eq!(journal.read("j1").unwrap(), None);
        assert!(journal.read("j2").unwrap().is_some());
    }

    #[test]
    fn pruning_removes_old_orphan_locks_and_temporary_files_but_not_new_or_held_ones() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let backdate = |path: &Path| {
            let old = SystemTime::now() - Duration::from_secs(40 * 86400);
            std::fs::File::options().write(true).open(path).unwrap().set_modified(old).unwrap();
        };
        let orphan = locks::job_path(journal.locks(), "refused-job");
        let recent = locks::job_path(journal.locks(), "recent-job");
        let held_path = locks::job_path(journal.locks(), "held-job");
        let temp = dir.path().join("jobs/.j1.json.abc123");
        for path in [&orphan, &recent, &held_path, &temp] {
            std::fs::write(path, "x").unwrap();
        }
        for path in [&orphan, &held_path, &temp] {
            backdate(path);
        }
        let _held = locks::acquire(&held_path, Duration::ZERO, "a run", None).ok().unwrap();
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400)).unwrap(), 2);
        assert!(!orphan.exists() && !temp.exists());
        assert!(recent.exists(), "a lock younger than the retention was removed");
        assert!(held_path.exists(), "a held lock was removed");
    }
}
