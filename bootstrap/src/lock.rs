//! One bootstrap at a time: an exclusive `flock` on the lock file, held until the process
//! exits. Two runs started together (a manual run during the boot run) then happen one after
//! the other, and the second finds a converged node.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, Result};

pub struct Lock {
    _held: Flock<File>,
}

pub fn acquire(path: &Path) -> Result<Lock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(format!("cannot open the lock file {}", path.display()), e))?;
    let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => return Ok(Lock { _held: held }),
        Err((file, Errno::EWOULDBLOCK)) => file,
        Err((_, errno)) => return Err(Error::sys(format!("cannot lock {}", path.display()), errno)),
    };
    tracing::info!("another bootstrap holds {}; waiting for it to finish", path.display());
    // Blocking is bounded by the unit's TimeoutStartSec; the other run is making progress.
    match Flock::lock(file, FlockArg::LockExclusive) {
        Ok(held) => Ok(Lock { _held: held }),
        Err((_, errno)) => Err(Error::sys(format!("cannot lock {}", path.display()), errno)),
    }
}
