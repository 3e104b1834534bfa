//! Cluster mode, with a cgroup: the program tree never outlives the jobenv that renews its
//! leases by more than a moment. A SIGKILLed jobenv renews nothing, and its leases expire one
//! lease later; its program dies with it (the parent-death signal), but what of the tree left
//! jobenv's process group (a `setsid`'d helper, which Windmill's group SIGKILL misses) would run
//! on in the cgroup, past the lease, beside another node's deploy of the namespace. So the
//! deploy gets a guard: a tiny process outside the cgroup and in a session of its own, forked
//! before the program starts, whose one task is to write `1` to the cgroup's `cgroup.kill` when
//! jobenv is gone without saying it is done (the pipe between them reaches end of file).
//!
//! The guard is a grandchild (the child exits at once), so it is never jobenv's child: jobenv's
//! reaper would otherwise wait for it. Between the forks only async-signal-safe system calls
//! run. Without `cgroup.kill` (Linux before 5.14) there is no guard.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

use nix::libc;

/// A deploy's guard; dropping it (once the tree is gone) tells it to leave the cgroup alone.
pub struct Guard {
    done: Option<OwnedFd>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            // A byte, then end of file: done. Without the byte (jobenv died) the guard kills.
            let _ = nix::unistd::write(&done, b"d");
        }
    }
}

/// Starts the guard of the cgroup at `dir`; `None` where the kernel has no `cgroup.kill`.
pub fn start(dir: &Path) -> std::io::Result<Option<Guard>> {
    use std::os::unix::fs::OpenOptionsExt;
    let kill = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.kill"))
    {
        Ok(file) => OwnedFd::from(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (pipe, cgroup_kill) = (read.as_raw_fd(), kill.as_raw_fd());
    // SAFETY: the child and the grandchild run only async-signal-safe system calls (fork,
    // setsid, fcntl, dup2, close_range, read, write, _exit) on descriptors opened before the fork.
    let child = unsafe { libc::fork() };
    match child {
        -1 => return Err(std::io::Error::last_os_error()),
        0 => unsafe {
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            libc::setsid();
            // Only the pipe (as 0) and cgroup.kill (as 1) stay open: not the job's log, not
            // jobenv's locks, not the pipe's write end (whose closing is the signal). Moved up
            // first, in case either is 0 or 1 (a jobenv started with those closed).
            let (pipe, cgroup_kill) = (
                libc::fcntl(pipe, libc::F_DUPFD, 10),
                libc::fcntl(cgroup_kill, libc::F_DUPFD, 10),
            );
            if pipe < 0 || cgroup_kill < 0 || libc::dup2(pipe, 0) < 0 || libc::dup2(cgroup_kill, 1) < 0 {
                libc::_exit(1);
            }
            libc::syscall(libc::SYS_close_range, 2u32, u32::MAX, 0u32);
            let mut byte = 0u8;
            let read = loop {
                let n = libc::read(0, (&raw mut byte).cast(), 1);
                if n >= 0 || *libc::__errno_location() != libc::EINTR {
                    break n;
                }
            };
            if read != 1 {
                libc::write(1, b"1".as_ptr().cast(), 1);
            }
            libc::_exit(0);
        },
        child => {
            let mut status = 0;
            // SAFETY: waits for the child forked above, which exits at once.
            unsafe { libc::waitpid(child, &mut status, 0) };
        }
    }
    drop(read);
    drop(kill);
    Ok(Some(Guard { done: Some(write) }))
}
