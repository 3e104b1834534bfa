//! Keeping the journal true when no run of a job is there to do it: `recover` (jobs whose jobenv
//! died), `prune` (old entries) and `drain` (a node that stops).
//!
//! Each touches an entry only under that job's lock and only by the file it read: an entry's
//! identity is its file name, checked when it is read ([`Journal::for_each_entry`]). A file it cannot
//! use (a link, a FIFO, a lock file it cannot open) is skipped with a warning: one planted file
//! must not keep `recover` or `drain` from the rest.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::ending::InterruptedBy;
use super::ending::Status;
use super::entry::{Entry, STOP_MARGIN, is_valid_job_id};
use super::journal::Journal;
use super::locks::{self, Lock};
use crate::error::Refusal;
use crate::process;
use crate::state_dir::{self, Dir};

/// The file `drain` creates in `jobs/` before it signals a job's jobenv: that jobenv then
/// records the attempt as stopped by the node, not as canceled.
#[derive(Debug)]
pub struct StopRequest {
    jobs: Dir,
    name: String,
}

impl crate::run::StopRequested for StopRequest {
    fn exists(&self) -> bool {
        StopRequest::exists(self)
    }
}

impl StopRequest {
    pub fn of(journal: &Journal, job_id: &str) -> std::io::Result<StopRequest> {
        Ok(StopRequest {
            jobs: journal.jobs.try_clone()?,
            name: format!(".{job_id}.stop"),
        })
    }

    /// Whether `drain` asked for this job's stop (anything of that name counts: only the
    /// worker's user and root can write there).
    pub fn exists(&self) -> bool {
        self.jobs.stat(&self.name).is_ok_and(|stat| stat.is_some())
    }

    /// Best effort: a request left behind only makes a later cancel of this job id look like a
    /// node that stops, and the job lock's holder removes it first.
    pub fn remove(&self) {
        let _ = self.jobs.remove(&self.name);
    }
}

/// How long `drain` waits for a jobenv it SIGKILLed to be gone, locks and all.
const KILL_WAIT: Duration = Duration::from_secs(5);

/// The drain mark's name in the state directory.
const DRAINING: &str = "draining";

/// What `drain` leaves in the state directory: from its start until `recover` (which the worker
/// runs when it starts again), no program starts on this node, in this boot.
#[derive(serde::Serialize, serde::Deserialize)]
struct Draining {
    boot_id: Option<String>,
    since: String,
}

/// Since when the node drains, when a drain of this boot is under way: then no program may
/// start. An unreadable or foreign mark (another boot's) is no drain; so is one that is no
/// regular file (the worker's user, who could plant it, can also delete it).
pub fn draining(journal: &Journal) -> Option<String> {
    let bytes = match journal.state.read(DRAINING) {
        Ok(bytes) => bytes?,
        Err(error) => {
            tracing::warn!("{error}: taken as no drain");
            return None;
        }
    };
    let mark: Draining = serde_json::from_slice(&bytes).ok()?;
    let this_boot = mark.boot_id.as_deref() == process::boot_id();
    let since = humantime::parse_rfc3339(&mark.since).is_ok().then_some(mark.since)?;
    this_boot.then_some(since)
}

/// The node starts again: programs may start (`recover`, at the worker's start). Needs only
/// the state directory itself, so that it works whatever else there is broken.
pub fn end_draining(state_dir: &Path) -> std::io::Result<()> {
    match Dir::open(state_dir) {
        Ok(state) => state.remove(DRAINING).map(drop),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Stops what deploys whose jobenv is gone left running in their cgroups (recording it in
/// their entries, see [`super::orphans`]), marks every `running` entry whose jobenv is gone
/// as failed (`interrupted`), and gives each entry it changed to `changed`, one at a time.
/// Each is re-read and rewritten under its job lock, so a run of that job id that starts
/// meanwhile either waits for it or has the lock first (then the entry is its own).
pub fn recover(journal: &Journal, mut changed: impl FnMut(&Entry) -> std::io::Result<()>) -> std::io::Result<()> {
    let orphaned = super::orphans::stop_orphans(journal, "recover")?;
    journal.for_each_entry(|entry| {
        if orphaned.contains(&entry.job_id) {
            return changed(&entry);
        }
        if entry.status != Status::Running || entry.is_live() {
            return Ok(());
        }
        match interrupt(journal, &entry.job_id, InterruptedBy::JobenvGone, Duration::ZERO)? {
            Some(entry) => changed(&entry),
            None => Ok(()),
        }
    })
}

/// Under the job's lock (waited for up to `wait`): if the entry is still `running` and its
/// jobenv gone, records it interrupted by `by`. `None` when a live run owns it, or it ended
/// meanwhile, or its lock file cannot be used (a warning says why).
fn interrupt(journal: &Journal, job_id: &str, by: InterruptedBy, wait: Duration) -> std::io::Result<Option<Entry>> {
    let holder = format!("jobenv upkeep, pid {}", std::process::id());
    let _lock = match journal.acquire(Lock::Job(job_id), wait, &holder, None) {
        Ok(lock) => lock,
        Err(Refusal::Journal { source, .. }) => {
            tracing::warn!("job {job_id} is left as it is: its job lock cannot be taken: {source}");
            return Ok(None);
        }
        // Held: a live run of this job id owns the entry.
        Err(_) => return Ok(None),
    };
    let Some(mut entry) = journal.read(job_id)? else {
        return Ok(None);
    };
    if entry.status != Status::Running || entry.is_live() {
        return Ok(None);
    }
    entry.mark_interrupted(by);
    journal.write(&entry)?;
    Ok(Some(entry))
}

/// Deletes what is older than `retain` (at least a day: see `--retain-days`,
/// docs/operators/jobenv.md): entries that finished then, with their job locks and stop
/// requests; job locks that never got an entry (jobs refused or cancelled before they
/// started); temporary files an interrupted write left behind. Only files read and checked
/// here are deleted, by name in their own directory (a link is deleted, never its target);
/// one that is gone meanwhile is skipped. `recover` and `prune` (the module's timer) call it,
/// never a run: a run's cost must not grow with the journal.
pub fn prune(journal: &Journal, retain: Duration) -> std::io::Result<usize> {
    // A retention longer than the clock's past keeps everything.
    let Some(cutoff) = SystemTime::now().checked_sub(retain) else {
        return Ok(0);
    };
    let older = |dir: &Dir, name: &str| {
        dir.stat(name)
            .ok()
            .flatten()
            .is_some_and(|stat| state_dir::modified(&stat) < cutoff)
    };
    let mut pruned = 0;
    // An entry whose end the shared journal did not take yet is kept with it, however old.
    let unshared = journal.state.subdir(super::journal::UNSHARED, None).ok().flatten();
    let kept = |job_id: &str| {
        unshared
            .as_ref()
            .is_some_and(|dir| dir.stat(&format!("{job_id}.json")).ok().flatten().is_some())
    };
    // Only entries whose file is older than the cutoff are read: an entry's end is written
    // before its file's time, so a newer file holds no entry to prune (a file made to look
    // older is read and checked like any other). A pass costs a stat per entry, not a parse.
    for name in journal.jobs.names()? {
        let Some(Some(job_id)) = super::journal::entry_of(&name) else {
            continue;
        };
        if !is_valid_job_id(job_id) || !older(&journal.jobs, &Journal::entry_name(job_id)) || kept(job_id) {
            continue;
        }
        let entry = match journal.read(job_id) {
            Ok(Some(entry)) => entry,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!("skipping a journal entry: {error}");
                continue;
            }
        };
        let finished = entry
            .finished_at
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        if entry.status == Status::Running || finished.is_none_or(|t| t >= cutoff) {
            continue;
        }
        // Under the job's lock, and only if nobody holds it: a run of this job id that is
        // starting owns the entry and its lock file (deleting them under it would let a
        // second run of the same id start beside it).
        let lock = locks::job_name(&entry.job_id);
        let Some(_held) = journal.try_lock(Lock::Job(&entry.job_id), "jobenv prune") else {
            continue;
        };
        pruned += usize::from(journal.jobs.remove(&Journal::entry_name(&entry.job_id))?);
        if let Ok(request) = StopRequest::of(journal, &entry.job_id) {
            request.remove();
        }
        let _ = journal.locks.remove(&lock);
    }
    for name in journal.locks.names()? {
        let Some(job_id) = locks::job_of(&name) else { continue };
        let lock = locks::job_name(job_id);
        if journal.jobs.stat(&Journal::entry_name(job_id))?.is_none() && older(&journal.locks, &lock) {
            // Only when nobody holds it: a run that is starting keeps its lock file.
            if let Some(_held) = journal.try_lock(Lock::Job(job_id), "jobenv prune") {
                pruned += usize::from(journal.locks.remove(&lock)?);
            }
        }
    }
    for name in journal.jobs.names()? {
        let Some(name) = name.to_str().filter(|n| n.starts_with('.')) else {
            continue;
        };
        if older(&journal.jobs, name) {
            pruned += usize::from(journal.jobs.remove(name)?);
        }
    }
    Ok(pruned)
}

/// For a node that stops: lets the running journaled jobs finish for up to `wait`, then
/// stops each through its own jobenv (a stop request, then SIGTERM: jobenv stops its program
/// tree with its grace and records the attempt interrupted by the node). The jobenvs stop
/// together, under one deadline: the longest of their graces plus a margin
/// ([`Entry::stop_wait`]), however many there are. One that has not ended by then is
/// SIGKILLed with its process group if it leads one, what its program tree left running in
/// its cgroup is stopped too, and its entry recorded here. Gives what it did to `done`, one
/// entry per job.
///
/// From its start on, no program starts on the node ([`draining`]): a job that was
/// waiting for a lock or still being validated refuses at its program's start, recorded like
/// a drained job; those that did so while this drain ran are given to `done` too.
pub fn drain(
    journal: &Journal,
    wait: Duration,
    mut done: impl FnMut(&Entry) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let since = super::entry::now();
    let mark = Draining {
        boot_id: process::boot_id().map(str::to_owned),
        since: since.clone(),
    };
    journal
        .state
        .write_atomically(DRAINING, &serde_json::to_vec(&mark)?, true)?;
    // As many as jobenvs of this state directory ran (each holds its own job lock).
    let stopped = drain_live(journal, wait)?;
    for entry in &stopped {
        done(entry)?;
    }
    // Runs of a job id that were still before their program (waiting for a lock, being
    // validated) hold their job lock: they refuse at their program's start now; a moment is
    // given to them to do so and be counted.
    let until = Instant::now() + STOP_MARGIN;
    while !busy_job_ids(journal)?.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let began = humantime::parse_rfc3339(&since).expect("written just now");
    journal.for_each_entry(|entry| {
        let ended = entry
            .finished_at
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        let refused = entry.interrupted_by == Some(InterruptedBy::NodeStopped) && ended.is_some_and(|t| t >= began);
        if refused && !stopped.iter().any(|e: &Entry| e.job_id == entry.job_id) {
            done(&entry)?;
        }
        Ok(())
    })
}

/// Whether the jobenv an entry names holds the entry's job lock (in `flocks`, a reading of
/// `/proc/locks`), as a jobenv of this state directory does while its job runs: a pid, its
/// start time and jobenv's name are all a planted entry can copy from /proc of another
/// jobenv (another node's state directory, an operator's run), which `drain` must leave
/// alone.
fn holds_its_job_lock(journal: &Journal, flocks: &str, entry: &Entry) -> bool {
    journal
        .locks
        .stat(&locks::job_name(&entry.job_id))
        .ok()
        .flatten()
        .is_some_and(|stat| process::holds_flock(flocks, entry.pid, stat.st_dev, stat.st_ino))
}

/// The job ids whose job lock a run holds right now (a lock file that cannot be opened as
/// one is no run's).
fn busy_job_ids(journal: &Journal) -> std::io::Result<Vec<String>> {
    let names = journal.locks.names()?;
    Ok(names
        .iter()
        .filter_map(|name| locks::job_of(name))
        .filter(|id| locks::is_held(&journal.locks, &locks::job_name(id)))
        .map(str::to_owned)
        .collect())
}

fn drain_live(journal: &Journal, wait: Duration) -> std::io::Result<Vec<Entry>> {
    // Said once per job, not at every look.
    let mut left_alone = std::collections::BTreeSet::new();
    let mut running = || -> std::io::Result<Vec<Entry>> {
        let flocks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
        let mut live = Vec::new();
        journal.for_each_entry(|entry| {
            if entry.is_live() {
                if holds_its_job_lock(journal, &flocks, &entry) {
                    live.push(entry);
                } else if left_alone.insert(entry.job_id.clone()) {
                    tracing::warn!(
                        "draining: job {} names jobenv pid {}, which does not hold the job's lock: left alone",
                        entry.job_id,
                        entry.pid
                    );
                }
            }
            Ok(())
        })?;
        Ok(live)
    };
    let deadline = Instant::now() + wait;
    let mut live = running()?;
    if !live.is_empty() {
        tracing::info!(
            "draining: {} running job(s); waiting up to {wait:?} for them to finish",
            live.len()
        );
    }
    while !live.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200).min(deadline.saturating_duration_since(Instant::now())));
        live = running()?;
    }
    for entry in &live {
        StopRequest::of(journal, &entry.job_id)
            .and_then(|request| journal.jobs.write_atomically(&request.name, b"", true))?;
        tracing::warn!(
            "draining: stopping job {} (attempt {}, jobenv pid {})",
            entry.job_id,
            entry.attempt,
            entry.pid
        );
        signal(entry, Signal::SIGTERM, false);
    }
    // One deadline for all, each waited for in a thread of its own: N jobs stop in the time
    // of the slowest, not in N times that.
    let bound = live.iter().map(Entry::stop_wait).max().unwrap_or_default();
    let until = Instant::now() + bound;
    std::thread::scope(|scope| {
        let stopping: Vec<_> = live
            .into_iter()
            .map(|entry| scope.spawn(move || stop_one(journal, entry, bound, until)))
            .collect();
        stopping
            .into_iter()
            .map(|thread| thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    })
}

/// One job `drain` signalled: waits for its jobenv until `until` (`bound` from the start),
/// SIGKILLs it then, and records what its jobenv could not.
fn stop_one(journal: &Journal, entry: Entry, bound: Duration, until: Instant) -> std::io::Result<Entry> {
    while process::is_jobenv(entry.pid, entry.pid_start) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    // A jobenv that ended on its own recorded its end: its lock is free, or taken by nobody
    // who matters.
    let mut lock_wait = Duration::ZERO;
    if process::is_jobenv(entry.pid, entry.pid_start) {
        tracing::error!(
            "draining: jobenv pid {} of job {} did not end within {bound:?}: SIGKILL",
            entry.pid,
            entry.job_id
        );
        signal(&entry, Signal::SIGKILL, true);
        // Its locks go once its last thread has exited, which on a loaded node can be a
        // while after the process shows as gone: its job lock is waited for, as long.
        let until = Instant::now() + KILL_WAIT;
        while process::is_jobenv(entry.pid, entry.pid_start) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        lock_wait = until.saturating_duration_since(Instant::now());
    }
    // jobenv records its own end; one that could not is recorded here.
    interrupt(journal, &entry.job_id, InterruptedBy::NodeStopped, lock_wait)?;
    // What left the process group of a jobenv that had to be SIGKILLed (a `setsid`'d
    // helper) is still in its cgroup.
    if let Ok(_held) = journal.acquire(
        Lock::Namespace(&entry.namespace),
        Duration::from_secs(1),
        "jobenv drain",
        None,
    ) {
        super::orphans::stop_left(journal, &entry.namespace, "drain", None)?;
    }
    Ok(journal.read(&entry.job_id)?.unwrap_or(entry))
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
        e.finished_at = Some(
            humantime::format_rfc3339_millis(SystemTime::now() - Duration::from_secs(days_ago * 86400)).to_string(),
        );
        e
    }

    /// Writes `entry` and gives its file the time of its end, as a file written then has.
    fn write_then(journal: &Journal, entry: &Entry) {
        journal.write(entry).unwrap();
        let path = journal.jobs.path().join(Journal::entry_name(&entry.job_id));
        age(&path, entry);
    }

    fn age(path: &Path, entry: &Entry) {
        let ended = humantime::parse_rfc3339(entry.finished_at.as_deref().unwrap()).unwrap();
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(ended)
            .unwrap();
    }

    /// What `drain --wait 0` gives out.
    fn drained(journal: &Journal) -> Vec<Entry> {
        let mut drained = Vec::new();
        drain(journal, Duration::ZERO, |e| {
            drained.push(e.clone());
            Ok(())
        })
        .unwrap();
        drained
    }

    #[test]
    fn write_read_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        write_then(&journal, &finished("j1", 40));
        write_then(&journal, &finished("j2", 0));
        assert_eq!(prune(&journal, Duration::from_secs(30 * 86400)).unwrap(), 1);
        assert_eq!(journal.read("j1").unwrap(), None);
        assert!(journal.read("j2").unwrap().is_some());
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
        age(&dir.path().join("jobs/copy.json"), &old);
        let outside = dir.path().join("outside.json");
        std::fs::write(&outside, "{}").unwrap();
        let forged = finished("../outside", 40);
        std::fs::write(
            dir.path().join("jobs/forged.json"),
            serde_json::to_vec(&forged).unwrap(),
        )
        .unwrap();
        age(&dir.path().join("jobs/forged.json"), &forged);
        write_then(&journal, &finished("old", 40));
        assert_eq!(
            prune(&journal, Duration::from_secs(30 * 86400)).unwrap(),
            1,
            "only `old` goes"
        );
        assert!(
            journal.read("real").unwrap().is_some(),
            "a copied entry deleted the real one"
        );
        assert!(outside.exists(), "a forged entry deleted a file outside the journal");
        assert!(
            dir.path().join("jobs/copy.json").exists() && dir.path().join("jobs/forged.json").exists(),
            "corrupt entries are left for a person"
        );
    }

    /// What keeps pruning's cost a stat per entry: a file newer than the cutoff is not read. An
    /// entry is written at its end at the latest, so such a file holds nothing to prune yet.
    #[test]
    fn pruning_reads_only_entries_whose_file_is_older_than_the_cutoff() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let (backdated, fresh) = (finished("backdated", 40), finished("fresh-file", 40));
        write_then(&journal, &backdated);
        journal.write(&fresh).unwrap();
        // A file that is not an entry, but new: never read, so not even reported.
        std::fs::write(journal.jobs.path().join("new-garbage.json"), "{not json").unwrap();
        assert_eq!(prune(&journal, Duration::from_secs(30 * 86400)).unwrap(), 1);
        assert_eq!(
            journal.read("backdated").unwrap(),
            None,
            "positive control: an old file is read and pruned"
        );
        assert!(
            journal.read("fresh-file").unwrap().is_some(),
            "a file newer than the cutoff was read"
        );
        age(&journal.jobs.path().join(Journal::entry_name("fresh-file")), &fresh);
        assert_eq!(
            prune(&journal, Duration::from_secs(30 * 86400)).unwrap(),
            1,
            "once its file is as old as its end, it goes"
        );
    }

    #[test]
    fn pruning_leaves_an_entry_whose_job_lock_a_run_holds() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        write_then(&journal, &finished("starting", 40));
        let held = journal
            .acquire(Lock::Job("starting"), Duration::ZERO, "a run", None)
            .ok()
            .unwrap();
        assert_eq!(prune(&journal, Duration::from_secs(30 * 86400)).unwrap(), 0);
        assert!(
            journal.read("starting").unwrap().is_some()
                && journal.locks().stat(&locks::job_name("starting")).unwrap().is_some()
        );
        // Positive control: once the run let go, the old entry goes.
        drop(held);
        assert_eq!(prune(&journal, Duration::from_secs(30 * 86400)).unwrap(), 1);
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
            while std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .unwrap_or_default()
                .trim()
                != comm
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut e = entry(Status::Running, pid, process::start_time(pid).unwrap());
            e.job_id = name.into();
            (child, e)
        };
        let (mut other, forged) = named("not-jobenv");
        signal(&forged, Signal::SIGKILL, false);
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            other.try_wait().unwrap().is_none(),
            "drain killed a process that is not a jobenv"
        );
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
        assert!(drained(&journal).is_empty(), "no jobenv ran");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(
            other.try_wait().unwrap().is_none(),
            "drain signalled a process that is not a jobenv"
        );
        let _ = other.kill();
        let _ = other.wait();
        // Positive control: a live jobenv is drained (signalled; this one dies of its SIGTERM).
        let lock = journal.locks().path().join(locks::job_name("live"));
        let (mut jobenv, mut live) = super::super::journal::tests::jobenv_holding(dir.path(), Some(&lock));
        live.job_id = "live".into();
        live.grace_ms = Some(1000);
        journal.write(&live).unwrap();
        let drained = drained(&journal);
        assert_eq!(drained.iter().map(|e| e.job_id.as_str()).collect::<Vec<_>>(), ["live"]);
        assert!(jobenv.wait().unwrap().code().is_none(), "the jobenv was signalled");
    }

    #[test]
    fn pruning_removes_old_orphan_locks_and_temporary_files_but_not_new_or_held_ones() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let backdate = |path: &Path| {
            let old = SystemTime::now() - Duration::from_secs(40 * 86400);
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(old)
                .unwrap();
        };
        let path = |id: &str| journal.locks().path().join(locks::job_name(id));
        let (orphan, recent, held_path) = (path("refused-job"), path("recent-job"), path("held-job"));
        let temp = dir.path().join("jobs/.j1.json.abc123");
        for path in [&orphan, &recent, &held_path, &temp] {
            std::fs::write(path, "x").unwrap();
        }
        for path in [&orphan, &held_path, &temp] {
            backdate(path);
        }
        let _held = journal
            .acquire(Lock::Job("held-job"), Duration::ZERO, "a run", None)
            .ok()
            .unwrap();
        assert_eq!(prune(&journal, Duration::from_secs(30 * 86400)).unwrap(), 2);
        assert!(!orphan.exists() && !temp.exists());
        assert!(recent.exists(), "a lock younger than the retention was removed");
        assert!(held_path.exists(), "a held lock was removed");
    }
}
