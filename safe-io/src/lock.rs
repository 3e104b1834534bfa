//! An advisory lock on a file (`flock`), for "one at a time": one bootstrap per node,
//! one deploy per namespace; or shared, for "many may use it while none changes it".
//!
//! Why `flock`: the lock belongs to the open file description, so the kernel releases it when the
//! holder exits in any way, SIGKILL included; a crash never leaves anything locked. The file is
//! opened close-on-exec (the standard library's default), so a program started while the lock
//! is held does not inherit it and prolong it; it is created 0600, as only its owner needs it.
//!
//! What a caller builds on top (a timed wait, a holder record, a message while it waits) stays
//! with the caller: [`LockFile::try_exclusive`] and [`LockFile::try_shared`] never block, and [`LockFile::file`] gives the
//! file to read or write a holder text in.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::{Error, Result};

/// An open lock file, not yet locked.
#[derive(Debug)]
pub struct LockFile {
    file: File,
    path: PathBuf,
}

/// The lock, held until this is dropped (or the process ends).
#[derive(Debug)]
pub struct Held {
    lock: Flock<File>,
}

impl LockFile {
    /// Opens `path` for reading and writing, creating it (mode 0600) if it is missing; an
    /// existing file keeps its contents.
    pub fn open(path: &Path) -> Result<LockFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|source| Error::Lock {
                doing: "open the lock file",
                path: path.to_owned(),
                source,
            })?;
        Ok(LockFile {
            file,
            path: path.to_owned(),
        })
    }

    /// A lock file the caller opened itself, in a way [`LockFile::open`] does not: relative to a
    /// directory's descriptor and never through a link (jobenv's state directory, which another
    /// user may write). `path` names it in errors.
    pub fn from_file(file: File, path: PathBuf) -> LockFile {
        LockFile { file, path }
    }

    /// Takes the lock if nobody holds it; `None` when someone does.
    pub fn try_exclusive(&self) -> Result<Option<Held>> {
        match Flock::lock(self.handle()?, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => Ok(Some(Held { lock })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(self.error(errno)),
        }
    }

    /// Takes the lock shared with other shared holders, if nobody holds it exclusively; `None`
    /// when someone does. (For "many may use it, one may change it": the exclusive holder waits
    /// until every shared one is gone.)
    pub fn try_shared(&self) -> Result<Option<Held>> {
        match Flock::lock(self.handle()?, FlockArg::LockSharedNonblock) {
            Ok(lock) => Ok(Some(Held { lock })),
            Err((_, Errno::EWOULDBLOCK)) => Ok(None),
            Err((_, errno)) => Err(self.error(errno)),
        }
    }

    /// Waits as long as it takes for the lock (a signal that interrupts the wait does not end
    /// it). Bound the wait from outside, or build a timed one on [`try_exclusive`](Self::try_exclusive).
    pub fn exclusive(&self) -> Result<Held> {
        loop {
            match Flock::lock(self.handle()?, FlockArg::LockExclusive) {
                Ok(lock) => return Ok(Held { lock }),
                Err((_, Errno::EINTR)) => continue,
                Err((_, errno)) => return Err(self.error(errno)),
            }
        }
    }

    /// The lock file, to read what its holder wrote.
    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A second descriptor of the same open file description: the lock taken through it is the
    /// description's, and dropping [`Held`] releases it, whether or not this `LockFile` lives on.
    fn handle(&self) -> Result<File> {
        self.file.try_clone().map_err(|source| Error::Lock {
            doing: "duplicate the descriptor of",
            path: self.path.clone(),
            source,
        })
    }

    fn error(&self, errno: Errno) -> Error {
        Error::Lock {
            doing: "lock",
            path: self.path.clone(),
            source: errno.into(),
        }
    }
}

impl Held {
    /// The locked file, to write a holder text in.
    pub fn file(&self) -> &File {
        &self.lock
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn one_holder_at_a_time_until_the_guard_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        // Two opens are two open file descriptions, as two processes would have.
        let (a, b) = (LockFile::open(&path).unwrap(), LockFile::open(&path).unwrap());
        let held = a.try_exclusive().unwrap().expect("free");
        assert!(b.try_exclusive().unwrap().is_none(), "busy while held");
        drop(held);
        let held = b.try_exclusive().unwrap().expect("free again after the drop");
        // Released on drop even when the LockFile it came from is gone first.
        drop(b);
        assert!(a.try_exclusive().unwrap().is_none(), "still held by the guard");
        drop(held);
        assert!(a.exclusive().is_ok());
    }

    #[test]
    fn shared_holders_exclude_an_exclusive_one_and_not_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let (a, b, c) = (
            LockFile::open(&path).unwrap(),
            LockFile::open(&path).unwrap(),
            LockFile::open(&path).unwrap(),
        );
        let first = a.try_shared().unwrap().expect("free");
        let second = b.try_shared().unwrap().expect("shared with the first");
        assert!(c.try_exclusive().unwrap().is_none(), "busy while shared holders live");
        drop(first);
        assert!(
            c.try_exclusive().unwrap().is_none(),
            "busy while one shared holder lives"
        );
        drop(second);
        let exclusive = c.try_exclusive().unwrap().expect("free once both are gone");
        assert!(
            a.try_shared().unwrap().is_none(),
            "no shared holder beside an exclusive one"
        );
        drop(exclusive);
    }

    #[test]
    fn the_file_is_created_0600_and_keeps_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let lock = LockFile::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let held = lock.exclusive().unwrap();
        writeln!(held.file(), "holder 1").unwrap();
        drop(held);
        let mut text = String::new();
        let mut file = LockFile::open(&path).unwrap().file().try_clone().unwrap();
        file.rewind().unwrap();
        file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "holder 1\n");
    }

    #[test]
    fn the_descriptors_are_close_on_exec() {
        let dir = tempfile::tempdir().unwrap();
        let lock = LockFile::open(&dir.path().join("x.lock")).unwrap();
        let held = lock.exclusive().unwrap();
        for file in [lock.file(), held.file()] {
            let flags = nix::fcntl::fcntl(file, nix::fcntl::FcntlArg::F_GETFD).unwrap();
            assert!(nix::fcntl::FdFlag::from_bits_truncate(flags).contains(nix::fcntl::FdFlag::FD_CLOEXEC));
        }
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let error = LockFile::open(&dir.path().join("no-such-dir/x.lock"))
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("cannot open the lock file ")
                && error.contains("no-such-dir/x.lock: No such file or directory"),
            "{error}"
        );
    }
}
