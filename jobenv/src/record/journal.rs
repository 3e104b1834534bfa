//! The job journal in the state directory: one [`Entry`] per job id in `jobs/<id>.json`, written
//! atomically before the program starts (`running`) and again when it ends, and the locks in
//! `locks/`. What an entry means and what a run does with it: [`super::entry`].
//!
//! The state directory is the worker's user's (and so every deploy program's), and jobenv runs
//! there as that user (root becomes it first: see [`super::owner`]): it is reached only through
//! [`Dir`], which never follows a link, reads only regular files and only so much of them, and
//! names every file in messages escaped. `jobs/` and `locks/` themselves must be directories (not
//! links): anything else is refused.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use super::ending::{Reason, Status};
use super::entry::parse;
use super::entry::{Entry, is_valid_job_id};
use super::locks::{self, Lock};
use crate::cancel::Cancel;
use crate::error::{EXIT_INTERNAL, ReadError, Refusal};
use crate::state_dir::Dir;

/// How long a run waits for its job id's lock: `recover` takes it for a moment when it checks
/// whether a job is still running.
pub(crate) const JOB_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The state directory's `unshared/`: in cluster mode, the ends the shared journal did not take
/// yet (see `record::store::postgres::unshared`).
pub(crate) const UNSHARED: &str = "unshared";

/// Room left after a `running` entry, so that the terminal entry can overwrite it in place when
/// a new file cannot be written (a full disk): no new block is needed for that.
const PADDING: usize = 2048;

/// The state directory: `jobs/<id>.json` entries and `locks/`.
pub struct Journal {
    pub(super) state: Dir,
    pub(super) jobs: Dir,
    pub(super) locks: Dir,
}

/// A state directory's device and inode. Within one boot no two directories share them, and a
/// copy of a state directory (`cp -a`, a restored backup, one baked into an image) has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StateDirId {
    pub dev: u64,
    pub ino: u64,
}

/// `sub`, a directory of the state directory's, unless jobenv runs as root and it belongs to
/// another user than the state directory does (a state directory of root's, given back to root
/// after its owner made its journal, say): that user could change it under root. As the cache
/// refuses a `shells/` of someone else's (`evaluation::cache`).
fn owned_alike(state: &Dir, sub: Dir) -> std::io::Result<Dir> {
    if nix::unistd::geteuid().is_root() {
        state.owned_alike(sub)
    } else {
        Ok(sub)
    }
}

impl Journal {
    /// Creates the directories if needed (mode 0750: entries hold no secret, but no one else
    /// needs to read them).
    pub fn open(state_dir: &Path) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        // Opened first: the directory may be one root opened for its owner ([`Dir::open`]), at a
        // path that owner cannot follow to make it.
        let state = match Dir::open(state_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o750)
                    .create(state_dir)?;
                Dir::open(state_dir)?
            }
            other => other?,
        };
        let [jobs, locks] = ["jobs", "locks"].map(|name| -> std::io::Result<Dir> {
            owned_alike(&state, state.subdir(name, Some(0o750))?.expect("created if missing"))
        });
        Ok(Journal {
            state,
            jobs: jobs?,
            locks: locks?,
        })
    }

    /// The journal of `state_dir` as it is, creating nothing: for what only reads it (`status`).
    /// `None`: a state directory without a journal yet (no entries; `jobs/` and `locks/` are
    /// made together).
    pub fn at(state_dir: &Path) -> std::io::Result<Option<Self>> {
        let state = match Dir::open(state_dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            other => other?,
        };
        let (Some(jobs), Some(locks)) = (state.subdir("jobs", None)?, state.subdir("locks", None)?) else {
            return Ok(None);
        };
        let (jobs, locks) = (owned_alike(&state, jobs)?, owned_alike(&state, locks)?);
        Ok(Some(Journal { state, jobs, locks }))
    }

    /// A lock of this state directory ([`locks::acquire`]).
    pub fn acquire(
        &self,
        lock: Lock<'_>,
        wait: Duration,
        holder: &str,
        cancel: Option<&mut Cancel>,
    ) -> Result<locks::Held, Refusal> {
        locks::acquire(&self.locks, self.state.path(), lock, wait, holder, cancel)
    }

    /// The job's lock. A run of the same job id holds it until it exits; if that run is an
    /// attempt whose worker died (Windmill re-runs such a job with the same id, maybe before the
    /// old attempt has stopped), it is waited for up to its grace plus a margin, then this run goes
    /// on as the next attempt.
    pub fn lock_job(&self, id: &str, holder: &str, cancel: &mut Cancel) -> Result<locks::Held, Refusal> {
        let lock = Lock::Job(id);
        match self.acquire(lock, Duration::ZERO, holder, Some(cancel)) {
            Err(Refusal::JobRunning { .. }) => match self.read(id) {
                Ok(Some(entry)) if entry.is_stopping() => {
                    let wait = entry.stop_wait();
                    tracing::warn!(
                        "job {id}: attempt {} lost its worker and is stopping (jobenv pid {}): waiting up to {wait:?}",
                        entry.attempt,
                        entry.pid
                    );
                    self.acquire(lock, wait, holder, Some(cancel))
                }
                _ => self.acquire(lock, JOB_LOCK_WAIT, holder, Some(cancel)),
            },
            other => other,
        }
    }

    /// The lock `lock`, if nobody holds it; a lock file that cannot be used (a link planted in
    /// its place) is left as it is, with a warning.
    pub fn try_lock(&self, lock: Lock<'_>, holder: &str) -> Option<locks::Held> {
        match self.acquire(lock, Duration::ZERO, holder, None) {
            Ok(held) => Some(held),
            Err(Refusal::Journal { source, .. }) => {
                tracing::warn!("{source}: left as it is");
                None
            }
            Err(_) => None,
        }
    }

    /// The state directory, as it was given.
    pub fn path(&self) -> &Path {
        self.state.path()
    }

    /// The journal's trouble `source`, as a run is refused on it.
    pub fn refusal(&self, source: std::io::Error) -> Refusal {
        Refusal::Journal {
            path: self.state.path().to_owned(),
            source,
        }
    }

    /// The state directory's owner (uid): a deploy cgroup of this state directory belongs to it
    /// (see `record::orphans`).
    pub fn owner_uid(&self) -> std::io::Result<u32> {
        self.state.owner()
    }

    /// The state directory itself (its device and inode): what tells it from a copy of it,
    /// which has its own (`record::identity`, `record::orphans`).
    pub fn state_dir_id(&self) -> std::io::Result<StateDirId> {
        let stat = nix::sys::stat::fstat(&self.state).map_err(std::io::Error::from)?;
        Ok(StateDirId {
            dev: stat.st_dev,
            ino: stat.st_ino,
        })
    }

    pub fn locks(&self) -> &Dir {
        &self.locks
    }

    /// The file name of `job_id`'s entry, in `jobs/`.
    pub(super) fn entry_name(job_id: &str) -> String {
        format!("{job_id}.json")
    }

    /// The entry of `job_id`, if there is one; a corrupt one (or one that is no regular file of
    /// its own, or too large) is an error naming its file.
    pub fn read(&self, job_id: &str) -> Result<Option<Entry>, ReadError> {
        let name = Self::entry_name(job_id);
        match self.jobs.read(&name)? {
            Some(bytes) => parse(job_id, &self.jobs.shown(name.as_ref()), &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Atomically: a temporary file beside the entry, synced, renamed over it, directory synced.
    /// A crash leaves either the old entry or the new one, never a torn file. A `running` entry
    /// is padded (see [`PADDING`]).
    pub fn write(&self, entry: &Entry) -> std::io::Result<()> {
        self.jobs
            .write_atomically(&Self::entry_name(&entry.job_id), &text(entry), true)
    }

    /// The end of an attempt. If the new file cannot be written, the padded `running` entry is
    /// overwritten in place with `result_unknown` (no new block needed), so that a rerun neither
    /// runs the job again nor reports a result that was never recorded; the error is returned
    /// either way.
    pub fn write_end(&self, entry: &Entry) -> std::io::Result<()> {
        let error = match self.write(entry) {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let mut unknown = entry.clone();
        unknown.program_exit_code = entry.exit_code;
        unknown.status = Status::Failed;
        unknown.exit_code = Some(EXIT_INTERNAL);
        unknown.reason = Some(Reason::ResultUnknown);
        let bytes = serde_json::to_vec(&unknown)?;
        let opened = self
            .jobs
            .open_rw(&Self::entry_name(&entry.job_id), false)
            .and_then(|file| file.ok_or_else(|| std::io::Error::other("the running entry is gone")));
        let in_place = opened.and_then(|file| {
            use std::os::unix::fs::FileExt;
            let old_len = file.metadata()?.len() as usize;
            if bytes.len() > old_len {
                return Err(std::io::Error::other("the running entry has no room left"));
            }
            // The rest of the old text becomes spaces: JSON allows them after the value.
            let mut whole = bytes.clone();
            whole.resize(old_len, b' ');
            file.write_all_at(&whole, 0)?;
            file.sync_all()
        });
        match in_place {
            Ok(()) => tracing::error!(
                "the end of job {} was recorded in place as result_unknown",
                entry.job_id
            ),
            Err(also) => tracing::error!(
                "the end of job {} could not be recorded in place either: {also}",
                entry.job_id
            ),
        }
        Err(error)
    }

    /// Every entry, one at a time, in no particular order: `each` is given each in turn, and
    /// nothing holds more than one (a state directory of the worker's user may hold 100,000
    /// entries of up to 1 MiB: `recover`, `drain` and `status` must not hold them all).
    /// Files that are no entry are skipped: temporary files and stop requests (`.`-names) and
    /// other names silently, a `.json` not named for a valid job id, or corrupt (unreadable, no
    /// regular file of its own, too large, not JSON, not named for its `job_id`, of a newer
    /// format), with a warning naming the file (escaped).
    pub fn for_each_entry(&self, mut each: impl FnMut(Entry) -> std::io::Result<()>) -> std::io::Result<()> {
        for job_id in self.entry_ids()? {
            if let Some(entry) = self.read_listed(&job_id) {
                each(entry)?;
            }
        }
        Ok(())
    }

    /// [`Journal::for_each_entry`], oldest start first (then by job id). What orders them is
    /// kept of each entry, in a few bytes (its start as a time, and its id), not the entry: each
    /// is read twice.
    pub fn for_each_entry_by_start(&self, mut each: impl FnMut(Entry) -> std::io::Result<()>) -> std::io::Result<()> {
        #[derive(serde::Deserialize)]
        struct Start<'a> {
            #[serde(borrow)]
            started_at: Option<std::borrow::Cow<'a, str>>,
        }
        let mut order: Vec<(Option<std::time::SystemTime>, String)> = self
            .entry_ids()?
            .into_iter()
            .map(|id| {
                // Only the start is parsed here, as a time (a text any longer is no time jobenv
                // wrote: the file's own text is never kept); what is wrong with a file is said
                // once, below.
                let bytes = self.jobs.read(&Self::entry_name(&id)).ok().flatten();
                let start = bytes
                    .as_deref()
                    .and_then(|b| serde_json::from_slice::<Start>(b).ok())
                    .and_then(|s| s.started_at);
                (
                    start
                        .filter(|t| t.len() <= 64)
                        .and_then(|t| humantime::parse_rfc3339(&t).ok()),
                    id,
                )
            })
            .collect();
        order.sort();
        for (_, job_id) in order {
            if let Some(entry) = self.read_listed(&job_id) {
                each(entry)?;
            }
        }
        Ok(())
    }

    /// The job ids the entries in `jobs/` are named for; a `.json` named for no valid job id is
    /// skipped with a warning.
    fn entry_ids(&self) -> std::io::Result<Vec<String>> {
        let mut ids = Vec::new();
        for name in self.jobs.names()? {
            let Some(job_id) = entry_of(&name) else { continue };
            match job_id.filter(|id| is_valid_job_id(id)) {
                Some(id) => ids.push(id.to_owned()),
                None => tracing::warn!(
                    "skipping {}: its name is not that of a journal entry (<job id>.json)",
                    self.jobs.shown(&name)
                ),
            }
        }
        Ok(ids)
    }

    /// The entry of a job id found in a listing; one that cannot be used is skipped, saying why.
    fn read_listed(&self, job_id: &str) -> Option<Entry> {
        match self.read(job_id) {
            Ok(entry) => entry,
            Err(error) => {
                tracing::warn!("skipping a journal entry: {error}");
                None
            }
        }
    }
}

/// A `.json` name in `jobs/` that is not hidden: `Some(its stem)`, the stem `None` when it is no
/// UTF-8; `None` for every other name.
pub(super) fn entry_of(name: &OsStr) -> Option<Option<&str>> {
    let bytes = name.as_encoded_bytes();
    if bytes.starts_with(b".") || !bytes.ends_with(b".json") {
        return None;
    }
    Some(name.to_str().and_then(|n| n.strip_suffix(".json")))
}

/// An entry's text: pretty JSON, and for a `running` entry the padding.
fn text(entry: &Entry) -> Vec<u8> {
    let mut text = serde_json::to_vec_pretty(entry).expect("an entry serializes");
    text.push(b'\n');
    if entry.status == Status::Running {
        text.resize(text.len() + PADDING, b' ');
        text.push(b'\n');
    }
    text
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::ending::{Ending, InterruptedBy};
    use super::super::entry::{Decision, MAX_STOP_GRACE, STOP_MARGIN, decide, now};
    use super::*;
    use crate::process;

    pub(crate) fn entry_path(journal: &Journal, job_id: &str) -> std::path::PathBuf {
        journal.jobs.path().join(Journal::entry_name(job_id))
    }

    pub(crate) fn entry(status: Status, pid: i32, pid_start: u64) -> Entry {
        Entry {
            format: super::super::entry::FORMAT,
            job_id: "j1".into(),
            attempt: 1,
            verb: "apply".into(),
            attribute: "web".into(),
            namespace: "ns".into(),
            pid,
            pid_start,
            boot_id: None,
            parent: None,
            grace_ms: None,
            started_at: now(),
            status,
            exit_code: None,
            program_exit_code: None,
            finished_at: None,
            reason: None,
            interrupted_by: None,
            orphans: None,
            earlier: Vec::new(),
        }
    }

    #[test]
    fn a_terminal_entry_is_replayed() {
        let mut done = entry(Status::Succeeded, 1, 0);
        done.exit_code = Some(0);
        assert!(matches!(decide(Some(done)), Decision::Replay(e) if e.exit_code == Some(0)));
    }

    /// A process named as jobenv is (`sleep` under jobenv's name), and its entry.
    pub(crate) fn jobenv_named(dir: &Path) -> (std::process::Child, Entry) {
        jobenv_holding(dir, None)
    }

    /// A process named like jobenv that, with `lock`, holds a flock on that file as a jobenv
    /// holds its job lock (taken by the process itself, which then execs: `/proc/locks` names it).
    pub(crate) fn jobenv_holding(dir: &Path, lock: Option<&Path>) -> (std::process::Child, Entry) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let program = dir.join("fediversity-jobenv");
        if !program.exists() {
            std::os::unix::fs::symlink("/bin/sleep", &program).unwrap();
        }
        let mut command = std::process::Command::new(&program);
        command.arg("30");
        let file = lock.map(|path| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap()
        });
        if let Some(fd) = file.as_ref().map(|f| f.as_raw_fd()) {
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    if nix::libc::flock(fd, nix::libc::LOCK_EX) != 0 || nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = command.spawn().unwrap();
        drop(file);
        let pid = child.id() as i32;
        // The kernel names the process after its file once it has exec'd.
        while std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap_or_default()
            .trim()
            != "fediversity-job"
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        (child, entry(Status::Running, pid, process::start_time(pid).unwrap()))
    }

    #[test]
    fn a_running_entry_of_a_live_jobenv_is_refused_and_of_another_process_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (mut jobenv, live) = jobenv_named(dir.path());
        assert!(matches!(decide(Some(live)), Decision::Refuse));
        let _ = jobenv.kill();
        let _ = jobenv.wait();
        // An entry that names a live process which is no jobenv (this test's own) is no live
        // attempt: forged or stale, it must not hold the job id.
        let me = std::process::id() as i32;
        let forged = entry(Status::Running, me, process::start_time(me).unwrap());
        assert!(matches!(decide(Some(forged)), Decision::Run { attempt: 2, .. }));
    }

    #[test]
    fn an_entry_not_as_jobenv_writes_it_is_corrupt_and_its_text_never_reaches_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let mut e = entry(Status::Succeeded, 1, 0);
        journal.write(&e).unwrap();
        assert!(journal.read("j1").is_ok(), "positive control: as jobenv writes it");
        for (field, value) in [
            ("namespace", "ns\njobenv: forged"),
            ("verb", "apply\n"),
            ("attribute", "web x"),
            ("started_at", "yesterday\n"),
        ] {
            let mut forged = serde_json::to_value(&e).unwrap();
            forged[field] = serde_json::Value::from(value);
            std::fs::write(entry_path(&journal, "j1"), forged.to_string()).unwrap();
            let error = journal.read("j1").unwrap_err().to_string();
            assert!(
                error.ends_with("is corrupt: its verb, attribute, namespace or times are not as jobenv writes them"),
                "{field}: {error}"
            );
        }
        let mut forged = serde_json::to_value(&e).unwrap();
        forged["status"] = serde_json::Value::from("running\njobenv: web-apply succeeded");
        std::fs::write(entry_path(&journal, "j1"), forged.to_string()).unwrap();
        let error = journal.read("j1").unwrap_err().to_string();
        assert_eq!(error.lines().count(), 1, "{error}");
        e.grace_ms = Some(u64::MAX / 2);
        assert_eq!(e.stop_wait(), MAX_STOP_GRACE + STOP_MARGIN, "a forged grace is bounded");
    }

    #[test]
    fn a_running_entry_of_a_dead_process_runs_again_as_the_next_attempt() {
        let me = std::process::id() as i32;
        // Same pid, another start time: the process that wrote the entry is gone.
        let dead = entry(Status::Running, me, process::start_time(me).unwrap() + 1);
        match decide(Some(dead)) {
            Decision::Run { attempt, earlier } => {
                assert_eq!(attempt, 2);
                assert_eq!(earlier.len(), 1);
                assert_eq!(earlier[0].status, Status::Failed);
                assert_eq!(earlier[0].reason, Some(Reason::Interrupted));
                assert_eq!(earlier[0].interrupted_by, Some(InterruptedBy::JobenvGone));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_interrupted_entry_is_not_a_result_and_an_unknown_one_is() {
        let mut interrupted = entry(Status::Running, 1, 0);
        interrupted.mark_interrupted(InterruptedBy::WorkerLost);
        assert!(matches!(decide(Some(interrupted)), Decision::Run { attempt: 2, .. }));
        let mut unknown = entry(Status::Failed, 1, 0);
        (unknown.reason, unknown.exit_code, unknown.program_exit_code) =
            (Some(Reason::ResultUnknown), Some(125), Some(0));
        match decide(Some(unknown)) {
            Decision::Replay(entry) => {
                let ending = entry.ending();
                assert_eq!(ending.exit_code, 125);
                assert!(
                    ending.errors[0].contains("exit code 0") && ending.errors[0].contains("the result is unknown"),
                    "{ending:?}"
                );
            }
            other => panic!("{other:?}"),
        }
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
    fn an_entry_is_its_file_name() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let mut e = entry(Status::Succeeded, 1, 0);
        journal.write(&e).unwrap();
        assert_eq!(journal.read("j1").unwrap().unwrap().job_id, "j1");
        // A copy under another name, and a forged id: corrupt, named by path.
        std::fs::copy(entry_path(&journal, "j1"), entry_path(&journal, "j2")).unwrap();
        let error = journal.read("j2").unwrap_err().to_string();
        assert!(
            error.contains("j2.json is corrupt: its job_id is not its file name"),
            "{error}"
        );
        e.job_id = "../../x".into();
        std::fs::write(entry_path(&journal, "j3"), serde_json::to_vec(&e).unwrap()).unwrap();
        assert!(journal.read("j3").is_err());
        let mut listed = Vec::new();
        journal
            .for_each_entry(|e| {
                listed.push(e.job_id);
                Ok(())
            })
            .unwrap();
        assert_eq!(listed, ["j1"]);
    }

    #[test]
    fn a_running_entry_leaves_room_for_its_end_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let mut e = entry(Status::Running, 1, 0);
        e.earlier = vec![entry(Status::Failed, 1, 0).as_attempt(); 3];
        journal.write(&e).unwrap();
        let running_len = std::fs::metadata(entry_path(&journal, "j1")).unwrap().len();
        e.end(&Ending {
            status: Status::Succeeded,
            exit_code: 0,
            errors: Vec::new(),
            interrupted_by: None,
        });
        let mut unknown = e.clone();
        // The longest of each.
        (unknown.reason, unknown.program_exit_code, unknown.interrupted_by) = (
            Some(Reason::ResultUnknown),
            Some(-2147483648),
            Some(InterruptedBy::NodeStopped),
        );
        assert!(
            (serde_json::to_vec(&unknown).unwrap().len() as u64) < running_len,
            "no room for the end"
        );
        assert_eq!(
            journal.read("j1").unwrap().unwrap().status,
            Status::Running,
            "the padding is valid JSON"
        );
    }
}
