//! The locks in the state directory: one deploy per namespace, one run per job id. They are
//! [`safe_io::lock`]'s `flock`s: the kernel releases one when its holders exit in any way, so a
//! crash never leaves a namespace locked. What is added here: a wait bounded in time that a
//! cancel signal ends, the holder's name in the file, for the message of a refused job, and a
//! lock file opened only as [`Dir`] opens files (never through a link, a regular file): the
//! directory is the worker's user's, and root writes the holder's name into the file.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use safe_io::lock::LockFile;

use crate::cancel::Cancel;
use crate::error::Refusal;
use crate::state_dir::Dir;

/// A held lock; dropping it releases the lock.
pub struct Held {
    held: safe_io::lock::Held,
}

impl Held {
    /// The locked file: a descriptor of it, passed to the program tree, keeps the lock held for
    /// as long as any process of the tree lives.
    pub fn file(&self) -> &File {
        self.held.file()
    }
}

/// What a lock of the state directory guards: its file's name, and what a run that finds it
/// held is refused with.
#[derive(Debug, Clone, Copy)]
pub enum Lock<'a> {
    /// One run per job id.
    Job(&'a str),
    /// One deploy per namespace: jobenv's own lock of it.
    Namespace(&'a str),
    /// The lock a namespace's program tree holds (see `run::spawn::Passed::lock`).
    Tree(&'a str),
}

impl Lock<'_> {
    /// Its file, in `locks/`.
    pub fn file_name(self) -> String {
        match self {
            Lock::Job(id) => job_name(id),
            Lock::Namespace(namespace) => namespace_name(namespace),
            Lock::Tree(namespace) => tree_name(namespace),
        }
    }

    /// The refusal of a run that finds it held by `holder` (what the holder wrote in the file).
    fn busy(self, holder: String) -> Refusal {
        match self {
            Lock::Job(id) => Refusal::JobRunning {
                job_id: id.to_owned(),
                holder,
            },
            Lock::Namespace(namespace) => Refusal::NamespaceLocked {
                namespace: namespace.to_owned(),
                holder,
            },
            // Held by nothing but a tree: its jobenv, which wrote the holder text, is gone.
            Lock::Tree(namespace) => Refusal::NamespaceLocked {
                namespace: namespace.to_owned(),
                holder: "the program tree of an earlier deploy, whose jobenv is gone, still runs".into(),
            },
        }
    }
}

/// Takes the exclusive lock `lock` in `dir` (the `locks/` of the journal at `journal`), waiting
/// up to `wait` (zero: try once). On success, records `holder` in the file so that a refused job
/// can say who holds it.
pub fn acquire(
    dir: &Dir,
    journal: &Path,
    lock: Lock<'_>,
    wait: Duration,
    holder: &str,
    mut cancel: Option<&mut Cancel>,
) -> Result<Held, Refusal> {
    let deadline = Instant::now() + wait;
    let name = lock.file_name();
    let unusable = |source: std::io::Error| Refusal::Journal {
        path: journal.to_owned(),
        source,
    };
    let io = |error: safe_io::Error| unusable(std::io::Error::other(error));
    let mut file = open(dir, &name).map_err(unusable)?;
    let mut said_waiting = false;
    loop {
        if let Some(held) = file.try_exclusive().map_err(io)? {
            // A lock file pruned and made again while we waited is not this name's lock any
            // more: take the one the name is now.
            if !same_file(held.file(), dir, &name) {
                file = open(dir, &name).map_err(unusable)?;
                continue;
            }
            // Best effort: the holder text only makes error messages better. A fixed-size record
            // written in place, so no rewrite of the file is needed.
            let _ = held.file().write_all_at(&holder_record(holder), 0);
            return Ok(Held { held });
        }
        if let Some(cancelled) = cancel.as_mut().and_then(|c| c.check()) {
            return Err(Refusal::Cancelled(cancelled));
        }
        if !said_waiting && Instant::now() < deadline {
            tracing::info!(
                "{} is held by {}: waiting up to {wait:?}",
                crate::error::shown_path(file.path()),
                holder_of(file.file())
            );
            said_waiting = true;
        }
        if Instant::now() >= deadline {
            return Err(lock.busy(holder_of(file.file())));
        }
        std::thread::sleep(Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// The lock file `name`, created if missing.
fn open(dir: &Dir, name: &str) -> std::io::Result<LockFile> {
    let file = dir.open_rw(name, true)?.expect("created if missing");
    Ok(LockFile::from_file(file, dir.path().join(name)))
}

/// Whether a lock held by someone else right now is `name` (false if it is free, missing, or
/// cannot be opened as a lock file).
pub fn is_held(dir: &Dir, name: &str) -> bool {
    let Ok(Some(file)) = dir.open_rw(name, false) else {
        return false;
    };
    matches!(
        LockFile::from_file(file, dir.path().join(name)).try_exclusive(),
        Ok(None)
    )
}

/// Whether `file` is still the file `name` (not one unlinked meanwhile).
fn same_file(file: &File, dir: &Dir, name: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), dir.stat(name)) {
        (Ok(a), Ok(Some(b))) => a.dev() == b.st_dev && a.ino() == b.st_ino,
        _ => false,
    }
}

/// What the holder of a lock wrote into its file.
fn holder_of(file: &File) -> String {
    let mut holder = vec![0; HOLDER_RECORD];
    let read = file.read_at(&mut holder, 0).unwrap_or(0);
    holder.truncate(read);
    // Escaped: the program tree holds a descriptor of its namespace's lock file and may write
    // anything there, which a refused job's message then quotes.
    String::from_utf8_lossy(&holder)
        .trim_end_matches([' ', '\n', '\0'])
        .escape_debug()
        .to_string()
}

/// The holder text, cut or padded with spaces to one fixed size so that it always overwrites
/// the previous holder's whole record.
fn holder_record(holder: &str) -> [u8; HOLDER_RECORD] {
    let mut record = [b' '; HOLDER_RECORD];
    let mut len = holder.len().min(HOLDER_RECORD - 1);
    while !holder.is_char_boundary(len) {
        len -= 1;
    }
    record[..len].copy_from_slice(&holder.as_bytes()[..len]);
    record[HOLDER_RECORD - 1] = b'\n';
    record
}

const HOLDER_RECORD: usize = 256;

/// The lock file of a namespace, in `locks/`.
pub fn namespace_name(namespace: &str) -> String {
    format!("namespace-{namespace}.lock")
}

/// The lock a namespace's program tree holds (see `run::spawn::Passed::lock`).
pub fn tree_name(namespace: &str) -> String {
    format!("namespace-{namespace}.tree.lock")
}

/// The lock file of a job id.
pub fn job_name(job_id: &str) -> String {
    format!("job-{job_id}.lock")
}

/// The job id whose lock file `name` is, if it is one (of a valid job id).
pub fn job_of(name: &std::ffi::OsStr) -> Option<&str> {
    name.to_str()?
        .strip_prefix("job-")?
        .strip_suffix(".lock")
        .filter(|id| super::entry::is_valid_job_id(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_dir::tests::dir as locks;

    #[test]
    fn a_holder_text_cannot_start_a_line_of_its_own() {
        let (temp, dir) = locks();
        let path = temp.path().join("job-l.lock");
        // What any process of the worker's user could write into a lock file of the node.
        std::fs::write(&path, "job a\njobenv: web-apply succeeded with exit code 0\u{1b}[2K").unwrap();
        let _held = safe_io::lock::LockFile::open(&path)
            .unwrap()
            .try_exclusive()
            .unwrap()
            .unwrap();
        assert!(is_held(&dir, "job-l.lock"));
        match acquire(&dir, temp.path(), Lock::Job("l"), Duration::ZERO, "job b", None) {
            Err(Refusal::JobRunning { holder, .. }) => {
                assert_eq!(holder, r"job a\njobenv: web-apply succeeded with exit code 0\u{1b}[2K");
            }
            _ => panic!("the lock should be busy"),
        }
    }

    #[test]
    fn a_shorter_holder_replaces_a_longer_one_entirely() {
        let (temp, dir) = locks();
        drop(acquire(
            &dir,
            temp.path(),
            Lock::Job("l"),
            Duration::ZERO,
            "job a-very-long-job-identifier, jobenv pid 123456",
            None,
        ));
        let _held = acquire(
            &dir,
            temp.path(),
            Lock::Job("l"),
            Duration::ZERO,
            "job b, jobenv pid 7",
            None,
        )
        .ok()
        .unwrap();
        match acquire(&dir, temp.path(), Lock::Job("l"), Duration::ZERO, "job c", None) {
            Err(Refusal::JobRunning { holder, .. }) => assert_eq!(holder, "job b, jobenv pid 7"),
            _ => panic!("the lock should be busy"),
        }
    }

    #[test]
    fn a_lock_file_that_is_a_link_is_never_written_through() {
        let (temp, dir) = locks();
        let target = temp.path().join("target");
        std::fs::write(&target, "root's file").unwrap();
        std::os::unix::fs::symlink(&target, temp.path().join("job-l.lock")).unwrap();
        match acquire(&dir, temp.path(), Lock::Job("l"), Duration::ZERO, "job a", None) {
            Err(Refusal::Journal { source, .. }) => assert!(
                source
                    .to_string()
                    .contains("job-l.lock is refused: it is a symbolic link"),
                "{source}"
            ),
            _ => panic!("a linked lock file was taken"),
        }
        assert!(!is_held(&dir, "job-l.lock"));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's file");
        // Positive control: a lock file of its own is taken and holds the holder's name.
        assert!(acquire(&dir, temp.path(), Lock::Job("m"), Duration::ZERO, "job a", None).is_ok());
        assert!(
            std::fs::read_to_string(temp.path().join("job-m.lock"))
                .unwrap()
                .starts_with("job a ")
        );
    }
}
