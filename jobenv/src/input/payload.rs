//! The job payload: a JSON object of at most 1 MiB, from a file or stdin. Its values become the
//! text of environment variables as [`super::json::text`] says.

use std::os::fd::AsFd;
use std::path::Path;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::json::{Members, parse_object};
use crate::error::Problem;

/// Larger payloads are refused before parsing: a job has no business sending more.
pub const PAYLOAD_LIMIT: usize = 1 << 20;

/// Reads the payload from `path`, or from stdin when `path` is `-`.
pub fn read(path: &Path) -> Result<Members, Problem> {
    read_until(path, || None::<std::convert::Infallible>).unwrap_or_else(|never| match never {})
}

/// [`read`], giving up as soon as `stop` says so (a cancel signal, a lost worker): a front-end
/// that pipes the payload and stalls must not make jobenv deaf to its cancel. A pipe or a FIFO
/// is waited on in short polls between which `stop` is asked; a regular file or Windmill's
/// memfd is read at once.
pub fn read_until<S>(path: &Path, mut stop: impl FnMut() -> Option<S>) -> Result<Result<Members, Problem>, S> {
    let what = "payload";
    let origin = if path == Path::new("-") {
        "on stdin".to_owned()
    } else {
        path.display().to_string()
    };
    let unreadable = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound => Problem::MissingFile {
            what,
            path: path.to_owned(),
        },
        _ => Problem::UnreadableFile {
            what,
            path: path.to_owned(),
            source,
        },
    };
    let (stdin, file);
    let fd = if path == Path::new("-") {
        stdin = std::io::stdin();
        stdin.as_fd()
    } else {
        // Non-blocking open: a FIFO without a writer yet must not block the open itself.
        use std::os::unix::fs::OpenOptionsExt;
        match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
        {
            Ok(opened) => file = opened,
            Err(source) => return Ok(Err(unreadable(source))),
        }
        file.as_fd()
    };
    let mut bytes = Vec::new();
    let mut chunk = vec![0; 64 << 10];
    loop {
        if let Some(stopped) = stop() {
            return Err(stopped);
        }
        let mut ready = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut ready, PollTimeout::from(POLL_MS)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(errno) => return Ok(Err(unreadable(errno.into()))),
        }
        match nix::unistd::read(fd, &mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(errno) => return Ok(Err(unreadable(errno.into()))),
        }
        if bytes.len() > PAYLOAD_LIMIT {
            break;
        }
    }
    Ok(parse(&origin, &bytes))
}

/// How long one wait for payload bytes lasts before a cancel is looked for again.
const POLL_MS: u16 = 50;

pub fn parse(origin: &str, bytes: &[u8]) -> Result<Members, Problem> {
    if bytes.len() > PAYLOAD_LIMIT {
        return Err(Problem::PayloadTooLarge { limit: PAYLOAD_LIMIT });
    }
    parse_object("payload", origin, bytes, "a JSON object")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_an_object_of_at_most_one_mebibyte() {
        assert_eq!(
            parse("x", b"[]").unwrap_err().to_string(),
            "payload x must be a JSON object"
        );
        let big = format!(r#"{{"A": "{}"}}"#, "a".repeat(PAYLOAD_LIMIT));
        assert_eq!(
            parse("x", big.as_bytes()).unwrap_err().to_string(),
            "payload is larger than 1048576 bytes"
        );
        assert_eq!(parse("x", br#"{"A": 1e2}"#).unwrap()["A"].get(), "1e2");
    }
}
