//! Cluster mode, with a cgroup: the program tree never outlives the leases of the jobenv that
//! runs it. Two ways it could:
//!
//! - a SIGKILLed jobenv renews nothing, and its leases expire one lease later; its program dies
//!   with it (the parent-death signal), but what of the tree left jobenv's process group (a
//!   `setsid`'d helper, which Windmill's group SIGKILL misses) would run on in the cgroup;
//! - a frozen jobenv (SIGSTOP, a debugger) renews nothing either, and cannot stop its tree when
//!   its leases run out, while the tree runs on.
//!
//! Either way the tree would run beside another node's deploy of the namespace. So the deploy
//! gets a guard: a tiny process outside the cgroup and in a session of its own (a signal to
//! jobenv or its process group does not reach it), forked before the program starts, which
//! writes `1` to the cgroup's `cgroup.kill` when jobenv is gone without saying it is done (the
//! pipe between them reaches end of file), or when the time by which the tree must be killed
//! passes ([`Deadline`]: the leases' expiry as jobenv vouches for it, less the margin, moved on
//! by every renewal; see `run::lease`). jobenv kills the tree by then itself; the guard is what
//! holds while jobenv cannot. The guard kills once: what enters the cgroup later (the program's
//! first process, or a step of the shell's evaluation before it) looks at the same deadline
//! ([`Gate`]) once in the cgroup and kills itself if it passed (a jobenv frozen right before it
//! started it).
//!
//! The guard is a grandchild (the child exits at once), so it is never jobenv's child: jobenv's
//! reaper would otherwise wait for it. It runs only async-signal-safe system calls (jobenv has
//! threads when it forks), and reads the deadline from a page shared with jobenv (an atomic
//! word: no message to queue, none to lose). Without `cgroup.kill` (Linux before 5.14) there
//! is no guard.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use nix::libc;

/// No deadline: only jobenv's end makes the guard kill.
const NONE: u64 = u64::MAX;

/// A deploy's guard; dropping it (once the tree is gone) tells it to leave the cgroup alone.
pub struct Guard {
    deadline: Deadline,
}

/// The time by which the guard kills the tree, shared with it; cloned for the supervisor,
/// which moves it on at each renewal.
#[derive(Clone)]
pub struct Deadline {
    page: Arc<Page>,
    /// The pipe's write end: its end of file (jobenv gone) makes the guard kill, a byte wakes it.
    pipe: Arc<OwnedFd>,
}

/// One page shared with the guard (`MAP_SHARED`, made before the fork), holding the deadline:
/// CLOCK_MONOTONIC nanoseconds, the clock of [`Instant`].
struct Page(*mut AtomicU64);

// SAFETY: the page holds one atomic word, read and written only through atomic operations.
unsafe impl Send for Page {}
unsafe impl Sync for Page {}

impl Page {
    fn new() -> std::io::Result<Page> {
        // SAFETY: an anonymous shared mapping of one page, zero-filled, unmapped in `drop`.
        let page = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if page == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let page = Page(page.cast());
        page.word().store(NONE, Ordering::SeqCst);
        Ok(page)
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: a live mapping of a page, aligned, of which this word is the start.
        unsafe { &*self.0 }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer referenced (the guard keeps its own).
        unsafe { libc::munmap(self.0.cast(), 4096) };
    }
}

/// CLOCK_MONOTONIC now, in nanoseconds.
fn monotonic_now() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes the time into `now`; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64).saturating_mul(1_000_000_000) + now.tv_nsec as u64
}

/// `at` on CLOCK_MONOTONIC, in nanoseconds (an [`Instant`] is that clock, without a way to read
/// it: measured from now).
fn monotonic(at: Instant) -> u64 {
    let (nanos, now) = (monotonic_now(), Instant::now());
    if at >= now {
        nanos.saturating_add(u64::try_from((at - now).as_nanos()).unwrap_or(u64::MAX))
    } else {
        nanos.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX))
    }
}

impl Deadline {
    /// From now on the guard kills the tree at `at` (none: only when jobenv is gone). An
    /// earlier one than before wakes the guard at once.
    pub fn set(&self, at: Option<Instant>) {
        let at = match at {
            Some(at) => monotonic(at).min(NONE - 1),
            None => NONE,
        };
        let before = self.page.word().swap(at, Ordering::SeqCst);
        if at < before {
            // Non-blocking: a guard that does not read (frozen itself) has a byte waiting.
            let _ = nix::unistd::write(&*self.pipe, b"w");
        }
    }
}

/// The guard's deadline as each process jobenv starts in the tree looks at it, between fork and exec
/// (`tree::Placement`): a copy of the page's address, valid while its [`Deadline`] lives
/// (jobenv keeps it until the program tree is gone).
#[derive(Debug, Clone, Copy)]
pub struct Gate(*const AtomicU64);

// SAFETY: the page holds one atomic word, read only through atomic operations.
unsafe impl Send for Gate {}
unsafe impl Sync for Gate {}

impl Gate {
    /// Whether the deadline has passed. Async-signal-safe: an atomic load and clock_gettime.
    pub fn passed(self) -> bool {
        // SAFETY: the mapping outlives every child that looks (see above).
        let deadline = unsafe { &*self.0 }.load(Ordering::SeqCst);
        deadline != NONE && deadline <= monotonic_now()
    }
}

impl Deadline {
    /// What each process jobenv starts in the tree looks at before it execs.
    pub fn gate(&self) -> Gate {
        Gate(self.page.0.cast_const())
    }
}

impl Guard {
    /// The guard's deadline, for the supervisor to move on.
    pub fn deadline(&self) -> Deadline {
        self.deadline.clone()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // A `d`, then end of file: done. Without it (jobenv died) the guard kills.
        let _ = nix::unistd::write(&*self.deadline.pipe, b"d");
    }
}

/// Starts the guard of the cgroup at `dir`, without a deadline yet; `None` where the kernel has
/// no `cgroup.kill`.
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
    let page = Page::new()?;
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    let (pipe, cgroup_kill, word) = (read.as_raw_fd(), kill.as_raw_fd(), page.0.cast_const());
    // SAFETY: the child and the grandchild run only async-signal-safe system calls (fork,
    // setsid, fcntl, dup2, close_range, clock_gettime, poll, read, write, _exit) and atomic
    // loads of the shared page, on descriptors and a mapping made before the fork.
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
            watch(&*word);
        },
        child => {
            let mut status = 0;
            // SAFETY: waits for the child forked above, which exits at once.
            unsafe { libc::waitpid(child, &mut status, 0) };
        }
    }
    drop(read);
    drop(kill);
    Ok(Some(Guard {
        deadline: Deadline {
            page: Arc::new(page),
            pipe: Arc::new(write),
        },
    }))
}

/// The guard's life, in the grandchild: the pipe is 0, `cgroup.kill` is 1. Kills the tree once
/// when the deadline in `word` passes, and when jobenv is gone without a `d`; ends on a `d`.
///
/// # Safety
/// Only in the forked guard, with 0 and 1 as above.
unsafe fn watch(word: &AtomicU64) -> ! {
    let kill = || unsafe {
        libc::write(1, b"1".as_ptr().cast(), 1);
    };
    let mut fired = false;
    loop {
        let deadline = word.load(Ordering::SeqCst);
        let now = monotonic_now();
        if !fired && deadline <= now {
            kill();
            fired = true;
        }
        // Asleep until the deadline (looked at again then: renewals move it on), or a byte.
        let timeout = if fired || deadline == NONE {
            -1
        } else {
            i32::try_from((deadline - now) / 1_000_000 + 1).unwrap_or(i32::MAX)
        };
        let mut pipe = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        if unsafe { libc::poll(&mut pipe, 1, timeout) } <= 0 {
            continue;
        }
        let mut bytes = [0u8; 64];
        let read = unsafe { libc::read(0, bytes.as_mut_ptr().cast(), bytes.len()) };
        match read {
            0 => {
                // jobenv is gone without saying it is done.
                kill();
                unsafe { libc::_exit(0) };
            }
            n if n > 0 && bytes[..n as usize].contains(&b'd') => unsafe { libc::_exit(0) },
            // A wake-up (`w`: an earlier deadline), EAGAIN, EINTR: look again.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::tree::{Cgroup, ProgramTree};
    use std::time::Duration;

    /// A cgroup of this test's own holding a `sleep`, as the tests of `cgroup` make them (they
    /// run as root on a machine with cgroup v2).
    fn populated(tag: &str) -> (Cgroup, std::process::Child) {
        let own = crate::run::tree::hierarchy::own_cgroup().expect("a writable cgroup v2 (run the tests as root)");
        let cgroup = Cgroup::create(&own.join(format!("jobenv-unit-guard-{tag}-{}", std::process::id())), 0)
            .expect("a writable cgroup v2 (run the tests as root)");
        let placement = cgroup.place();
        let mut command = std::process::Command::new("/bin/sleep");
        command.arg("30");
        // SAFETY: `enter` is one write(2) on a descriptor opened before the fork.
        unsafe { std::os::unix::process::CommandExt::pre_exec(&mut command, move || placement.enter()) };
        let child = command.spawn().unwrap();
        assert!(crate::process::start_time(child.id() as i32).is_some());
        (cgroup, child)
    }

    #[test]
    fn the_guard_kills_the_tree_when_its_deadline_passes_and_not_before() {
        let (cgroup, mut child) = populated("deadline");
        let guard = start(cgroup.dir())
            .unwrap()
            .expect("cgroup.kill (Linux 5.14 and later)");
        let deadline = guard.deadline();
        // No deadline, then one that is moved on before it passes: the tree runs on.
        std::thread::sleep(Duration::from_millis(200));
        deadline.set(Some(Instant::now() + Duration::from_millis(300)));
        std::thread::sleep(Duration::from_millis(150));
        deadline.set(Some(Instant::now() + Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(400));
        assert!(child.try_wait().unwrap().is_none(), "killed before its deadline");
        // An earlier one wakes the guard at once.
        let set = Instant::now();
        deadline.set(Some(Instant::now() + Duration::from_millis(100)));
        let status = child.wait().unwrap();
        assert!(set.elapsed() < Duration::from_secs(2), "{:?}", set.elapsed());
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
        drop(guard);
        assert!(cgroup.is_empty());
    }

    #[test]
    fn the_gate_is_passed_once_the_deadline_is_and_never_without_one() {
        let (cgroup, mut child) = populated("gate");
        let guard = start(cgroup.dir())
            .unwrap()
            .expect("cgroup.kill (Linux 5.14 and later)");
        let (deadline, gate) = (guard.deadline(), guard.deadline().gate());
        assert!(!gate.passed(), "no deadline");
        deadline.set(Some(Instant::now() + Duration::from_secs(30)));
        assert!(!gate.passed(), "a deadline to come");
        // Positive control: one that passed.
        deadline.set(Some(Instant::now()));
        assert!(gate.passed());
        child.wait().unwrap();
        drop(guard);
    }

    #[test]
    fn a_guard_told_it_is_done_leaves_the_tree_alone() {
        let (cgroup, mut child) = populated("done");
        let guard = start(cgroup.dir())
            .unwrap()
            .expect("cgroup.kill (Linux 5.14 and later)");
        guard.deadline().set(Some(Instant::now() + Duration::from_millis(300)));
        guard.deadline().set(None);
        drop(guard);
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            child.try_wait().unwrap().is_none(),
            "a guard that was done killed the tree"
        );
        cgroup.kill();
        child.wait().unwrap();
    }
}
