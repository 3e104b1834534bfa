//! `safe_io`: what `fediversity-jobenv` and `fediversity-windmill-bootstrap` both need in order to
//! touch the outside world without leaking a secret or leaving a half-done file behind. One copy,
//! so that the two binaries cannot drift apart.
//!
//! - [`log`]: stderr log lines with the binary's prefix; only the binary's own events, so that no
//!   library ever formats a URL or a connection string into the log;
//! - [`lock`]: an exclusive `flock` on a lock file, released on drop or when the process dies;
//! - [`atomic`]: replacing a file so that readers see the old file or the new one, never a torn
//!   one, with its mode and owner set before it appears;
//! - [`secret`]: a secret in memory that cannot be formatted by accident, and the scrubbing of
//!   every secret from a text in each form a server may echo it in.
//!
//! Every fallible function returns [`Error`], whose messages name the file or variable at fault
//! and never a secret.

pub mod atomic;
pub mod lock;
pub mod log;
pub mod secret;

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The log level variable holds something other than a level. [`log::init`] has still
    /// installed the formatter (at `info`), so the caller can log this error and stop.
    #[error("{var} is {value:?}, not a log level: use debug, info, warn or error (empty means info)")]
    BadLevel { var: String, value: String },
    /// A step of [`atomic::write`] failed; the old file, if any, is as it was.
    #[error("cannot {doing} {}: {source}", path.display())]
    Write {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A step of [`lock`] failed (not: the lock is busy, which is not an error).
    #[error("cannot {doing} {}: {source}", path.display())]
    Lock {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
