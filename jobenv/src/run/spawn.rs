//! Starting the deployment program with `std::process::Command`: exactly the planned argv and
//! environment, stdin from /dev/null, stdout and stderr into pipes, and in the child, just
//! before the exec:
//! - entering the program tree ([`super::tree::Placement`]: its cgroup, where there is one), so
//!   that no process of the program ever runs outside it;
//! - the cancel signals back to their default (jobenv catches them; see [`crate::cancel`]);
//! - `PR_SET_PDEATHSIG`, so the program dies with jobenv even when jobenv alone is SIGKILLed
//!   (tied to the thread that spawns: jobenv spawns from its main thread, which lives until
//!   jobenv exits), and the check that jobenv is still its parent (if jobenv died before the
//!   prctl, that signal would never come);
//! - every descriptor but 0, 1, 2 close-on-exec (descriptors jobenv inherited must not reach the
//!   program), except the ones passed on by [`Passed`];
//! - no controlling terminal: a shell's, when jobenv runs in one ([`leave_the_terminal`]).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
#[cfg(test)]
use std::process::{ChildStderr, ChildStdout};
use std::process::{Command, Stdio};

use nix::libc;
use nix::unistd::{Pid, getpid};

use super::tree::Placement;

/// The started program: its pid and the read ends of its stdout and stderr.
#[cfg(test)]
pub struct Spawned {
    pub pid: Pid,
    pub stdout: ChildStdout,
    /// Held open while the test reads stdout: the child's writes to stderr must not fail.
    pub _stderr: ChildStderr,
}

/// Descriptors the program tree gets on purpose, at fixed numbers.
#[derive(Default)]
pub struct Passed {
    /// Fd 3 of the child: the write end of the ready pipe of progress events.
    pub ready: Option<OwnedFd>,
    /// Fd 4 of the child: the namespace's tree lock. A `flock` belongs to the open file
    /// description, so while any process of the program tree keeps this descriptor the namespace
    /// stays locked for the next deploy, even after jobenv itself was SIGKILLed. (It is not
    /// jobenv's own namespace lock, which nothing but jobenv holds: a program that unlocks what
    /// it holds cannot let another deploy start while its jobenv runs.)
    pub lock: Option<OwnedFd>,
}

/// Where the child parks a passed descriptor before moving it to its number: above every fixed
/// number, so that moving one into place can never overwrite another.
const PARKED: RawFd = 10;
/// At most this many descriptors are passed.
const MAX_PASSED: usize = 2;

/// Starts `argv[0]` (a path) with `argv` and exactly `env`, placed in the program tree by
/// `placement`; in a process group of its own when `own_group`. Its stdout and stderr are pipes
/// of their own. (For tests: a job's processes write into pipes jobenv made, [`spawn_into`].)
#[cfg(test)]
pub fn spawn(
    argv: &[String],
    env: &[(&str, &str)],
    own_group: bool,
    passed: Passed,
    placement: Placement,
) -> io::Result<Spawned> {
    let mut child = start(argv, env, own_group, passed, placement, Stdio::piped(), Stdio::piped())?;
    let pid = Pid::from_raw(child.id() as i32);
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    // The child is reaped by jobenv's reaper (it reaps every child), not by `Child::wait`.
    drop(child);
    Ok(Spawned {
        pid,
        stdout: stdout.expect("stdout is piped"),
        _stderr: stderr.expect("stderr is piped"),
    })
}

/// [`spawn`], with stdout and stderr given: several processes of one job (the steps before its
/// program, and the program) write into the same pipes, which jobenv made.
pub fn spawn_into(
    argv: &[String],
    env: &[(&str, &str)],
    own_group: bool,
    passed: Passed,
    placement: Placement,
    stdout: Stdio,
    stderr: Stdio,
) -> io::Result<Pid> {
    let child = start(argv, env, own_group, passed, placement, stdout, stderr)?;
    // Reaped by jobenv's reaper, as above.
    Ok(Pid::from_raw(child.id() as i32))
}

fn start(
    argv: &[String],
    env: &[(&str, &str)],
    own_group: bool,
    passed: Passed,
    placement: Placement,
    stdout: Stdio,
    stderr: Stdio,
) -> io::Result<std::process::Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no program"))?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    if own_group {
        command.process_group(0);
    }
    let passed = [passed.ready.map(|fd| (fd, 3)), passed.lock.map(|fd| (fd, 4))];
    let mut moves = [(-1, -1); MAX_PASSED];
    for (slot, (fd, to)) in moves.iter_mut().zip(passed.iter().flatten()) {
        *slot = (fd.as_raw_fd(), *to);
    }
    let parent = getpid();
    // SAFETY: `prepare_child` runs between fork and exec and makes only async-signal-safe system
    // calls on data prepared before the fork; it allocates nothing and takes no lock.
    unsafe { command.pre_exec(move || prepare_child(parent, moves, placement)) };
    let child = command.spawn()?;
    // Our copies of the passed descriptors close here: only the program tree holds them now.
    drop(passed);
    Ok(child)
}

/// The child's side of [`spawn`]; see the module comment for what and why. `moves` are
/// `(descriptor, number it gets)`, unused slots `(-1, -1)`.
fn prepare_child(parent: Pid, moves: [(RawFd, RawFd); MAX_PASSED], placement: Placement) -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
    if nix::unistd::getppid() != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // Before anything of the program runs: a child that cannot enter its cgroup never execs.
    placement.enter()?;
    leave_the_terminal()?;
    // SAFETY: plain system calls on signal and descriptor numbers (a default disposition
    // installs no handler code); errors are reported, nothing else.
    unsafe {
        for cancel in crate::cancel::CANCEL {
            libc::signal(cancel as libc::c_int, libc::SIG_DFL);
        }
        let all = libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if all != 0 {
            // Kernels before 5.11: one descriptor at a time, up to the process's limit.
            let mut limit: libc::rlimit = std::mem::zeroed();
            let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                limit.rlim_cur.min(1 << 16) as RawFd
            } else {
                1024
            };
            for fd in 3..max {
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        // Parked first, then moved: dup2 gives the new number without close-on-exec, so it is
        // passed on.
        let mut parked = [-1; MAX_PASSED];
        for (slot, &(from, _)) in parked.iter_mut().zip(&moves).filter(|(_, (from, _))| *from >= 0) {
            *slot = libc::fcntl(from, libc::F_DUPFD_CLOEXEC, PARKED);
            if *slot < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for (&from, &(_, to)) in parked.iter().zip(&moves).filter(|(from, _)| **from >= 0) {
            if libc::dup2(from, to) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The child gives up jobenv's controlling terminal, if jobenv has one (a run by hand in a
/// shell): the program never reads nor needs it (its stdin is /dev/null), and a job started as
/// root on the worker's state directory runs its program as the worker (`record::owner`), whose
/// processes could otherwise open `/dev/tty` (which no file permission guards) and read the
/// root shell's keystrokes, write on its screen, or type a command into it (`TIOCSTI`) for
/// root's shell to run once jobenv exits. `TIOCNOTTY` drops the terminal for this process alone
/// (it leads no session: jobenv's process group, and so Windmill's group kill, stay as they
/// are), and nothing it starts can take one back: only a session leader acquires a terminal,
/// and the terminal's own device is not the worker's to open. Between fork and exec: only
/// async-signal-safe system calls.
fn leave_the_terminal() -> io::Result<()> {
    // SAFETY: open, ioctl and close on a descriptor of this process alone.
    unsafe {
        let tty = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        );
        if tty < 0 {
            // No controlling terminal (Windmill, a unit), no /dev/tty (a container), or one
            // that hung up: nothing the program could open either.
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                Some(libc::ENXIO | libc::ENOENT | libc::EIO) => Ok(()),
                _ => Err(error),
            };
        }
        let left = libc::ioctl(tty, libc::TIOCNOTTY);
        let error = io::Error::last_os_error();
        libc::close(tty);
        if left != 0 {
            return Err(error);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// No program tree to enter (the /proc walk's placement).
    const NOWHERE: Placement = Placement::new(None);

    fn run(argv: &[&str], env: &[(&str, &str)]) -> io::Result<(String, i32)> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut spawned = spawn(&argv, env, false, Passed::default(), NOWHERE)?;
        let mut out = String::new();
        spawned.stdout.read_to_string(&mut out)?;
        let status = nix::sys::wait::waitpid(spawned.pid, None).unwrap();
        let code = match status {
            nix::sys::wait::WaitStatus::Exited(_, code) => code,
            other => panic!("{other:?}"),
        };
        Ok((out, code))
    }

    #[test]
    fn runs_a_program_with_exactly_the_given_environment() {
        let (out, code) = run(&["/usr/bin/env"], &[("A", "1"), ("B", "two words")]).unwrap();
        assert_eq!(out, "A=1\nB=two words\n");
        assert_eq!(code, 0);
    }

    #[test]
    fn passes_arguments_and_the_exit_code() {
        let (out, code) = run(&["/bin/sh", "-c", "echo \"$0 $1\"; exit 7", "zero", "one"], &[]).unwrap();
        assert_eq!((out.as_str(), code), ("zero one\n", 7));
    }

    #[test]
    fn a_program_that_cannot_be_executed_is_an_error_naming_why() {
        let error = run(&["/nonexistent/program"], &[]).expect_err("an error");
        assert_eq!(error.raw_os_error(), Some(libc::ENOENT));
        let dir = tempfile::tempdir().unwrap();
        let not_executable = dir.path().join("data");
        std::fs::write(&not_executable, "x").unwrap();
        let error = run(&[not_executable.to_str().unwrap()], &[]).expect_err("an error");
        assert_eq!(error.raw_os_error(), Some(libc::EACCES));
    }

    #[test]
    fn only_the_standard_streams_and_the_passed_descriptors_reach_the_program() {
        // An inherited descriptor without close-on-exec, as a careless parent would leave one.
        let leaked = nix::fcntl::open("/dev/null", nix::fcntl::OFlag::O_RDONLY, nix::sys::stat::Mode::empty()).unwrap();
        let (read, write) = nix::unistd::pipe().unwrap();
        let argv: Vec<String> = ["/bin/sh", "-c", "ls /proc/self/fd; printf x >&3"]
            .map(String::from)
            .to_vec();
        let mut spawned = spawn(
            &argv,
            &[],
            false,
            Passed {
                ready: Some(write),
                lock: None,
            },
            NOWHERE,
        )
        .unwrap();
        let mut out = String::new();
        spawned.stdout.read_to_string(&mut out).unwrap();
        nix::sys::wait::waitpid(spawned.pid, None).unwrap();
        let fds: Vec<&str> = out.lines().collect();
        // ls itself opens one descriptor for /proc/self/fd.
        assert!(
            fds.starts_with(&["0", "1", "2", "3"]) && fds.len() == 5,
            "{fds:?} (leaked {})",
            leaked.as_raw_fd()
        );
        let mut byte = String::new();
        std::fs::File::from(read).read_to_string(&mut byte).unwrap();
        assert_eq!(
            byte, "x",
            "the passed descriptor is fd 3, and the parent's copy was closed"
        );
    }
}
