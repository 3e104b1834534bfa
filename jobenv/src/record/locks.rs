//! The locks in the state directory: one deploy per namespace, one run per job id. They are
//! [`safe_io::lock`]'s `flock`s: the kernel releases one when its holders exit in any way, so a
//! crash never leaves a namespace locked. What is added here: a wait bounded in time that a
//! cancel signal ends, and the holder's name in the file, for the message of a refused job.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use safe_io::lock::LockFile;

use crate::run::cancel::{Cancel, Cancelled};

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

/// Why a lock could not be taken.
pub enum Refused {
    /// Another process holds it; `holder` is what that process wrote into the lock file.
    Busy { holder: String },
    /// A cancel signal came while waiting, or the worker that started jobenv died.
    Cancelled(Cancelled),
    Io(std::io::Error),
}

/// Takes the exclusive lock on `path`, waiting up to `wait` (zero: try once). On success,
/// records `holder` in the file so that a refused job can say who holds it.
pub fn acquire(path: &Path, wait: Duration, holder: &str, mut cancel: Option<&mut Cancel>) -> Result<Held, Refused> {
    let deadline = Instant::now() + wait;
    let io = |error: safe_io::Error| Refused::Io(std::io::Error::other(error));
    let mut file = LockFile::open(path).map_err(io)?;
    let mut said_waiting = false;
    loop {
        if let Some(held) = file.try_exclusive().map_err(io)? {
            // A lock file pruned and made again while we waited is not this path's lock any
            // more: take the one the path names now.
            if !same_file(held.file(), path) {
                file = LockFile::open(path).map_err(io)?;
                continue;
            }
            // Best effort: the holder text only makes error messages better. A fixed-size record
            // written in place, so no rewrite of the file is needed.
            let _ = held.file().write_all_at(&holder_record(holder), 0);
            return Ok(Held { held });
        }
        if let Some(cancelled) = cancel.as_mut().and_then(|c| c.check()) {
            return Err(Refused::Cancelled(cancelled));
        }
        if !said_waiting && Instant::now() < deadline {
            tracing::info!("{} is held by {}: waiting up to {wait:?}", path.display(), holder_of(file.file()));
            said_waiting = true;
        }
        if Instant::now() >= deadline {
            return Err(Refused::Busy { holder: holder_of(file.file()) });
        }
        std::thread::sleep(Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())));
    }
}

/// Whether `file` is still the file at `path` (not one unlinked meanwhile).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
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
    String::from_utf8_lossy(&holder).trim_end_matches([' ', '\n', '\0']).escape_debug().to_string()
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

/// The lock file of a namespace.
pub fn namespace_path(locks: &Path, namespace: &str) -> PathBuf {
    locks.join(format!("namespace-{namespace}.lock"))
}

/// The lock a namespace's program tree holds (see `run::spawn::Passed::lock`).
pub fn tree_path(locks: &Path, namespace: &str) -> PathBuf {
    locks.join(format!("namespace-{namespace}.tree.lock"))
}

/// The lock file of a job id.
pub fn job_path(locks: &Path, job_id: &str) -> PathBuf {
    locks.join(format!("job-{job_id}.lock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_text_cannot_start_a_line_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.lock");
        // What any process of the worker's user could write into a lock file of the node.
        std::fs::write(&path, "job a\njobenv: web-apply succeeded with exit code 0\u{1b}[2K").unwrap();
        let _held = safe_io::lock::LockFile::open(&path).unwrap().try_exclusive().unwrap().unwrap();
        match acquire(&path, Duration::ZERO, "job b", None) {
            Err(Refused::Busy { holder }) => {
                assert_eq!(holder, r"job a\njobenv: web-apply succeeded with exit code 0\u{1b}[2K");
            }
            _ => panic!("the lock should be busy"),
        }
    }

    #[test]
    fn a_shorter_holder_replaces_a_longer_one_entirely() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.lock");
        drop(acquire(&path, Duration::ZERO, "job a-very-long-job-identifier, jobenv pid 123456", None));
        let _held = acquire(&path, Duration::ZERO, "job b, jobenv pid 7", None).ok().unwrap();
        match acquire(&path, Duration::ZERO, "job c", None) {
            Err(Refused::Busy { holder }) => assert_eq!(holder, "job b, jobenv pid 7"),
            _ => panic!("the lock should be busy"),
        }
    }
}
