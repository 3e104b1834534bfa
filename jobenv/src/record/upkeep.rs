//! Keeping the journal true when no run of a job is there to do it: `recover` (jobs whose jobenv
//! died), `prune` (old entries) and `drain` (a node that stops).
//!
//! Each touches an entry only under that job's lock and only by the file it read: an entry's
//! identity is its file name, checked when it is read ([`Journal::entries`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::ending::InterruptedBy;
use super::journal::{Entry, Journal, STOP_MARGIN};
use super::locks;
use super::ending::Status;
use crate::process;

/// The file `drain` creates before it signals a job's jobenv: that jobenv then records the
/// attempt as stopped by the node, not as canceled.
pub fn stop_request(journal: &Journal, job_id: &str) -> PathBuf {
    journal.jobs.join(format!(".{job_id}.stop"))
}


/// What `drain` leaves in the state directory: from its start until `recover` (which the worker
/// runs when it starts again), no program starts on this node, in this boot.
#[derive(serde::Serialize, serde::Deserialize)]
struct Draining {
    boot_id: Option<String>,
    since: String,
}

impl Journal {
    fn draining_path(&self) -> PathBuf {
        self.jobs.with_file_name("draining")
    }

    /// Since when the node drains, when a drain of this boot is under way: then no program may
    /// start. An unreadable or foreign mark (another boot's) is no drain.
    pub fn draining(&self) -> Option<String> {
        let mark: Draining = serde_json::from_slice(&std::fs::read(self.draining_path()).ok()?).ok()?;
        let this_boot = mark.boot_id.as_deref() == process::boot_id();
        let since = humantime::parse_rfc3339(&mark.since).is_ok().then_some(mark.since)?;
        this_boot.then_some(since)
    }

    /// The node starts again: programs may start (`recover`, at the worker's start).
    pub fn end_draining(&self) -> std::io::Result<()> {
        match std::fs::remove_file(self.draining_path()) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Stops what deploys whose jobenv is gone left running in their cgroups (recording it in
    /// their entries, see [`super::orphans`]), marks every `running` entry whose jobenv is gone
    /// as failed (`interrupted`), and returns the entries it changed. Each is re-read and
    /// rewritten under its job lock, so a run of that job id that starts meanwhile either waits
    /// for it or has the lock first (then the entry is its own).
    pub fn recover(&self) -> std::io::Result<Vec<Entry>> {
        let orphaned = self.stop_orphans("recover")?;
        let mut recovered = Vec::new();
        for (_, entry) in self.entries()? {
            if orphaned.contains(&entry.job_id) {
                recovered.push(entry);
                continue;
            }
            if entry.status != Status::Running || entry.is_live() {
                continue;
            }
            if let Some(entry) = self.interrupt(&entry.job_id, InterruptedBy::JobenvGone)? {
                recovered.push(entry);
            }
        }
        Ok(recovered)
    }

    /// Under the job's lock: if the entry is still `running` and its jobenv gone, records it
    /// interrupted by `by`. `None` when a live run owns it, or it ended meanwhile.
    fn interrupt(&self, job_id: &str, by: InterruptedBy) -> std::io::Result<Option<Entry>> {
        let holder = format!("jobenv upkeep, pid {}", std::process::id());
        let _lock = match self.acquire(&locks::job_path(&self.locks, job_id), Duration::ZERO, &holder, None) {
            Ok(lock) => lock,
            // Held: a live run of this job id owns the entry.
            Err(locks::Refused::Busy { .. } | locks::Refused::Cancelled(_)) => return Ok(None),
            Err(locks::Refused::Io(error)) => return Err(error),
        };
        let Some(mut entry) = self.read(job_id)? else { return Ok(None) };
        if entry.status != Status::Running || entry.is_live() {
            return Ok(None);
        }
        entry.mark_interrupted(by);
        self.write(&entry)?;
        Ok(Some(entry))
    }

    /// Deletes what is older than `retain` (at least a day: see `--retain-days`, docs/operators/jobenv.md), except the entry of
    /// `keep` (the job that runs now): entries that finished then, with their job locks and stop
    /// requests; job locks that never got an entry (jobs refused or cancelled before they
    /// started); temporary files an interrupted write left behind. Only files read and checked
    /// here are deleted; one that is gone meanwhile is skipped.
    pub fn prune(&self, retain: Duration, keep: Option<&str>) -> std::io::Result<usize> {
        // A retention longer than the clock's past keeps everything.
        let Some(cutoff) = SystemTime::now().checked_sub(retain) else { return Ok(0) };
        let gone = |result: std::io::Result<()>| match result {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            other => other.map(|()| true),
        };
        let mut pruned = 0;
        for (path, entry) in self.entries()? {
            let finished = entry.finished_at.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
            if entry.status == Status::Running || keep == Some(entry.job_id.as_str()) || finished.is_none_or(|t| t >= cutoff) {
                continue;
            }
            // Under the job's lock, and only if nobody holds it: a run of this job id that is
            // starting owns the entry and its lock file (deleting them under it would let a
            // second run of the same id start beside it).
            let lock_path = locks::job_path(&self.locks, &entry.job_id);
            let Ok(_held) = self.acquire(&lock_path, Duration::ZERO, "jobenv prune", None) else { continue };
            pruned += usize::from(gone(std::fs::remove_file(&path))?);
            let _ = std::fs::remove_file(stop_request(self, &entry.job_id));
            let _ = std::fs::remove_file(&lock_path);
        }
        let older = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).is_ok_and(|t| t < cutoff);
        for dirent in std::fs::read_dir(&self.locks)?.flatten() {
            let path = dirent.path();
            let name = dirent.file_name();
            let Some(job_id) = name.to_str().and_then(|n| n.strip_prefix("job-")?.strip_suffix(".lock")) else { continue };
            if super::journal::is_valid_job_id(job_id) && !self.entry_path(job_id).exists() && older(&path) {
                // Only when nobody holds it: a run that is starting keeps its lock file.
                if let Ok(_held) = self.acquire(&path, Duration::ZERO, "jobenv prune", None) {
                    pruned += usize::from(gone(std::fs::remove_file(&path))?);
                }
            }
        }
        for dirent in std::fs::read_dir(&self.jobs)?.flatten() {
            let path = dirent.path();
            if dirent.file_name().to_str().is_some_and(|n| n.starts_with('.')) && older(&path) {
                pruned += usize::from(gone(std::fs::remove_file(&path))?);
            }
        }
        Ok(pruned)
    }

    /// For a node that stops: lets the running journaled jobs finish for up to `wait`, then
    /// stops each through its own jobenv (a stop request, then SIGTERM: jobenv stops its program
    /// tree with its grace and records the attempt interrupted by the node). A jobenv that has
    /// not ended by its grace plus a margin ([`Entry::stop_wait`]) is SIGKILLed with its process
    /// group if it leads one, what its program tree left running in its cgroup is stopped too,
    /// and its entry recorded here. Returns what it did, one entry per job.
    ///
    /// From its start on, no program starts on the node ([`Journal::draining`]): a job that was
    /// waiting for a lock or still being validated refuses at its program's start, recorded like
    /// a drained job; those that did so while this drain ran are returned too.
    pub fn drain(&self, wait: Duration) -> std::io::Result<Vec<Entry>> {
        let since = super::journal::now();
        let mark = Draining { boot_id: process::boot_id().map(str::to_owned), since: since.clone() };
        self.write_file(&self.draining_path(), &serde_json::to_vec(&mark)?)?;
        let mut stopped = self.drain_live(wait)?;
        // Runs of a job id that were still before their program (waiting for a lock, being
        // validated) hold their job lock: they refuse at their program's start now; a moment is
        // given to them to do so and be counted.
        let until = Instant::now() + STOP_MARGIN;
        while !self.busy_job_ids()?.is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let began = humantime::parse_rfc3339(&since).expect("written just now");
        for (_, entry) in self.entries()? {
            let ended = entry.finished_at.as_deref().and_then(|t| humantime::parse_rfc3339(t).ok());
            let refused = entry.interrupted_by == Some(InterruptedBy::NodeStopped) && ended.is_some_and(|t| t >= began);
            if refused && !stopped.iter().any(|e: &Entry| e.job_id == entry.job_id) {
                stopped.push(entry);
            }
        }
        Ok(stopped)
    }

    /// The job ids whose job lock a run holds right now.
    fn busy_job_ids(&self) -> std::io::Result<Vec<String>> {
        let mut busy = Vec::new();
        for dirent in std::fs::read_dir(&self.locks)?.flatten() {
            let name = dirent.file_name();
            let Some(job_id) = name.to_str().and_then(|n| n.strip_prefix("job-")?.strip_suffix(".lock")) else { continue };
            let held = safe_io::lock::LockFile::open(&dirent.path()).and_then(|lock| lock.try_exclusive());
            if matches!(held, Ok(None)) {
                busy.push(job_id.to_owned());
            }
        }
        Ok(busy)
    }

    fn drain_live(&self, wait: Duration) -> std::io::Result<Vec<Entry>> {
        let running = || -> std::io::Result<Vec<Entry>> {
            Ok(self.entries()?.into_iter().map(|(_, e)| e).filter(Entry::is_live).collect())
        };
        let deadline = Instant::now() + wait;
        let mut live = running()?;
        if !live.is_empty() {
            tracing::info!("draining: {} running job(s); waiting up to {wait:?} for them to finish", live.len());
        }
        while !live.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200).min(deadline.saturating_duration_since(Instant::now())));
            live = running()?;
        }
        let mut stopped = Vec::new();
        for entry in &live {
            self.write_file(&stop_request(self, &entry.job_id), b"")?;
            tracing::warn!("draining: stopping job {} (attempt {}, jobenv pid {})", entry.job_id, entry.attempt, entry.pid);
            signal(entry, Signal::SIGTERM, false);
        }
        for entry in live {
            let bound = entry.stop_wait();
            let until = Instant::now() + bound;
            while process::is_jobenv(entry.pid, entry.pid_start) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50));
            }
            if process::is_jobenv(entry.pid, entry.pid_start) {
                tracing::error!("draining: jobenv pid {} of job {} did not end within {bound:?}: SIGKILL", entry.pid, entry.job_id);
                signal(&entry, Signal::SIGKILL, true);
                let until = Instant::now() + Duration::from_secs(2);
                while process::is_jobenv(entry.pid, entry.pid_start) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            // jobenv records its own end; one that could not is recorded here.
            self.interrupt(&entry.job_id, InterruptedBy::NodeStopped)?;
            // What left the process group of a jobenv that had to be SIGKILLed (a `setsid`'d
            // helper) is still in its cgroup.
            let namespace = locks::namespace_path(&self.locks, &entry.namespace);
            if let Ok(_held) = self.acquire(&namespace, Duration::from_secs(1), "jobenv drain", None) {
                super::orphans::stop_left(self, &entry.namespace, "drain", None)?;
            }
            stopped.push(self.read(&entry.job_id)?.unwrap_or(entry));
        }
        Ok(stopped)
    }
}

/// Signals the jobenv of `entry` if it is still that process, and a jobenv (an entry names a pid;
/// a forged or stale one must not make `drain` signal an unrelated process); with `group`, its
/// process group too when it leads one (a Windmill job process keeps its program tree there).
fn signal(entry: &Entry, signal: Signal, group: bool) {
    if !process::is_jobenv(entry.pid, entry.pid_start) {
        return;
    }
    let pid = Pid::from_raw(entry.pid);
    if group && nix::unistd::getpgid(Some(pid)) == Ok(pid) {
        let _ = nix::sys::signal::killpg(pid, signal);
    } else {
        let _ = nix::sys::signal::kill(pid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::super::journal::tests::entry;
    use super::*;

    fn finished(job_id: &str, days_ago: u64) -> Entry {
        let mut e = entry(Status::Failed, 1, 0);
        e.job_id = job_id.into();
        e.exit_code = Some(1);
        e.finished_at = Some(humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(days_ago * 86400)).to_string());
        e
    }

    #[test]
    fn write_read_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        journal.write(&finished("j1", 40)).unwrap();
        journal.write(&finished("j2", 0)).unwrap();
        journal.write(&finished("kept", 40)).unwrap();
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400), Some("kept")).unwrap(), 1);
        assert_eq!(journal.read("j1").unwrap(), None);
        assert!(journal.read("j2").unwrap().is_some());
        assert!(journal.read("kept").unwrap().is_some(), "the entry of the job that runs now was pruned");
    }

    #[test]
    fn pruning_deletes_only_the_files_it_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        journal.write(&finished("real", 0)).unwrap();
        // A copy of an old entry under another name claims to be `real`; a forged one names a
        // file outside the state directory.
        let old = finished("real", 40);
        std::fs::write(dir.path().join("jobs/copy.json"), serde_json::to_vec(&old).unwrap()).unwrap();
        let outside = dir.path().join("outside.json");
        std::fs::write(&outside, "{}").unwrap();
        let forged = finished("../outside", 40);
        std::fs::write(dir.path().join("jobs/forged.json"), serde_json::to_vec(&forged).unwrap()).unwrap();
        journal.write(&finished("old", 40)).unwrap();
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400), None).unwrap(), 1, "only `old` goes");
        assert!(journal.read("real").unwrap().is_some(), "a copied entry deleted the real one");
        assert!(outside.exists(), "a forged entry deleted a file outside the journal");
        assert!(dir.path().join("jobs/copy.json").exists() && dir.path().join("jobs/forged.json").exists(), "corrupt entries are left for a person");
    }

    #[test]
    fn pruning_leaves_an_entry_whose_job_lock_a_run_holds() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        journal.write(&finished("starting", 40)).unwrap();
        let held = locks::acquire(&locks::job_path(journal.locks(), "starting"), Duration::ZERO, "a run", None).ok().unwrap();
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400), None).unwrap(), 0);
        assert!(journal.read("starting").unwrap().is_some() && locks::job_path(journal.locks(), "starting").exists());
        // Positive control: once the run let go, the old entry goes.
        drop(held);
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400), None).unwrap(), 1);
    }

    #[test]
    fn drain_signals_only_a_jobenv_however_an_entry_names_a_process() {
        let dir = tempfile::tempdir().unwrap();
        let named = |name: &str| {
            let program = dir.path().join(name);
            std::os::unix::fs::symlink("/bin/sleep", &program).unwrap();
            let child = std::process::Command::new(&program).arg("30").spawn().unwrap();
            let pid = child.id() as i32;
            // The kernel names the process after its file once it has exec'd.
            let comm = &name[..name.len().min(15)];
            while std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim() != comm {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut e = entry(Status::Running, pid, process::start_time(pid).unwrap());
            e.job_id = name.into();
            (child, e)
        };
        let (mut other, forged) = named("not-jobenv");
        signal(&forged, Signal::SIGKILL, false);
        std::thread::sleep(Duration::from_millis(100));
        assert!(other.try_wait().unwrap().is_none(), "drain killed a process that is not a jobenv");
        // Positive control: a process named like jobenv is signalled.
        let (mut jobenv, real) = named("fediversity-jobenv");
        signal(&real, Signal::SIGKILL, false);
        assert!(jobenv.wait().unwrap().code().is_none(), "a jobenv was not signalled");
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn drain_waits_only_for_a_jobenv_and_not_longer_than_a_bounded_grace() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        // A forged entry naming a live process that is no jobenv, claiming a grace of days.
        let mut other = std::process::Command::new("/bin/sleep").arg("30").spawn().unwrap();
        let pid = other.id() as i32;
        let mut forged = entry(Status::Running, pid, process::start_time(pid).unwrap());
        forged.job_id = "forged".into();
        forged.grace_ms = Some(3 * 86_400_000);
        journal.write(&forged).unwrap();
        let started = Instant::now();
        assert!(journal.drain(Duration::ZERO).unwrap().is_empty(), "no jobenv ran");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(other.try_wait().unwrap().is_none(), "drain signalled a process that is not a jobenv");
        let _ = other.kill();
        let _ = other.wait();
        // Positive control: a live jobenv is drained (signalled; this one dies of its SIGTERM).
        let (mut jobenv, mut live) = super::super::journal::tests::jobenv_named(dir.path());
        live.job_id = "live".into();
        live.grace_ms = Some(1000);
        journal.write(&live).unwrap();
        let drained = journal.drain(Duration::ZERO).unwrap();
        assert_eq!(drained.iter().map(|e| e.job_id.as_str()).collect::<Vec<_>>(), ["live"]);
        assert!(jobenv.wait().unwrap().code().is_none(), "the jobenv was signalled");
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
        assert_eq!(journal.prune(Duration::from_secs(30 * 86400), None).unwrap(), 2);
        assert!(!orphan.exists() && !temp.exists());
        assert!(recent.exists(), "a lock younger than the retention was removed");
        assert!(held_path.exists(), "a held lock was removed");
    }
}
