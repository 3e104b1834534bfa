//! Advisory locks in the state directory: one deploy per namespace, one run per job id.
//!
//! `flock` locks belong to the open file description: the kernel releases them when jobenv
//! exits in any way, SIGKILL included, so a crash never leaves a namespace locked. The file is
//! opened close-on-exec, so the deployment program does not inherit (and prolong) the lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// A held lock; dropping it releases the lock.
pub struct Held {
    _lock: Flock<File>,
}

/// Why a lock could not be taken.
pub enum Refused {
    /// Another process holds it; `holder` is what that process wrote into the lock file.
    Busy { holder: String },
    Io(std::io::Error),
}

/// Takes the exclusive lock on `path`, waiting up to `wait` (zero: try once). On success,
/// records `holder` in the file so that a refused job can say who holds it.
pub fn acquire(path: &Path, wait: Duration, holder: &str) -> Result<Held, Refused> {
    let deadline = Instant::now() + wait;
    loop {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(Refused::Io)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                // Best effort: the holder text only makes error messages better.
                let _ = lock.set_len(0).and_then(|()| lock.rewind()).and_then(|()| lock.write_all(holder.as_bytes()));
                return Ok(Held { _lock: lock });
            }
            Err((mut file, Errno::EWOULDBLOCK)) => {
                if Instant::now() >= deadline {
                    let mut holder = String::new();
                    let _ = file.read_to_string(&mut holder);
                    return Err(Refused::Busy { holder: holder.trim().to_owned() });
                }
                std::thread::sleep(Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())));
            }
            Err((_, errno)) => return Err(Refused::Io(errno.into())),
        }
    }
}

/// True when some process holds the lock on `path` right now.
pub fn is_held(path: &Path) -> bool {
    match File::open(path) {
        Ok(file) => matches!(Flock::lock(file, FlockArg::LockExclusiveNonblock), Err((_, Errno::EWOULDBLOCK))),
        Err(_) => false,
    }
}

/// The lock file of a namespace.
pub fn namespace_path(locks: &Path, namespace: &str) -> PathBuf {
    locks.join(format!("namespace-{namespace}.lock"))
}

/// The lock file of a job id.
pub fn job_path(locks: &Path, job_id: &str) -> PathBuf {
    locks.join(format!("job-{job_id}.lock"))
}
