//! Watching processes from a test: liveness, waiting with a deadline, reading pid files that
//! test programs write, and reading a child's output while it still runs.

use std::io::Read;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::unistd::Pid;

/// Alive and not a zombie.
pub fn is_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The parent of a process, from `/proc/<pid>/stat` (comm may hold spaces and parens).
pub fn ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
}

/// The process group of a live process.
pub fn pgid(pid: i32) -> Option<i32> {
    nix::unistd::getpgid(Some(Pid::from_raw(pid))).ok().map(Pid::as_raw)
}

/// Polls `condition` every 10 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Pids written one per line to `path`, once at least `count` are there.
pub fn read_pids(path: &Path, count: usize, limit: Duration) -> Vec<i32> {
    let mut pids = Vec::new();
    let found = wait_until(limit, || {
        pids = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        pids.len() >= count
    });
    assert!(found, "expected {count} pids in {}, got {pids:?}", path.display());
    pids
}

/// SIGKILLs whatever of `pids` is still alive (cleanup after a test that expects survivors).
pub fn kill_all(pids: &[i32]) {
    for &pid in pids {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

/// Collects a stream on a thread and lets the test wait for a pattern while the writer runs.
pub struct StreamWatch {
    rx: mpsc::Receiver<Vec<u8>>,
    pub seen: Vec<u8>,
}

impl StreamWatch {
    pub fn new(mut stream: impl Read + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        StreamWatch { rx, seen: Vec::new() }
    }

    /// Waits until the collected bytes contain `needle`; false if `limit` passes first.
    pub fn wait_for(&mut self, needle: &[u8], limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.seen.windows(needle.len()).any(|w| w == needle) {
                return true;
            }
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(chunk) => self.seen.extend(chunk),
                Err(_) => return false,
            }
        }
    }

    /// What arrived so far, without waiting.
    pub fn text(&mut self) -> String {
        while let Ok(chunk) = self.rx.try_recv() {
            self.seen.extend(chunk);
        }
        String::from_utf8_lossy(&self.seen).into_owned()
    }

    /// Everything, once the writer closed the stream.
    pub fn finish(mut self) -> Vec<u8> {
        while let Ok(chunk) = self.rx.recv() {
            self.seen.extend(chunk);
        }
        self.seen
    }
}

/// A started jobenv that a failing test would otherwise leave behind: dropped while still
/// running, it gets SIGTERM (jobenv then stops its whole program tree) and is waited for.
/// Derefs to the `Child`.
pub struct Running(pub std::process::Child);

impl std::ops::Deref for Running {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = nix::sys::signal::kill(Pid::from_raw(self.0.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let _ = self.0.wait();
        }
    }
}

/// Waits up to `limit` for `child` to exit; `None` if it is still running then.
pub fn wait_exit(child: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
