//! Starting the deployment program as `posix_spawn` does, plus the two things `posix_spawn`
//! cannot do, which is why std's `Command` would fall back to `fork` here: `PR_SET_PDEATHSIG`
//! and the check that jobenv is still its parent. Descriptors jobenv inherited are marked
//! close-on-exec in jobenv itself first (it never execs anything but the program).
//!
//! Why not `fork`: it copies jobenv's page tables, and on the VMs this runs on the first fork of
//! a process costs most of a millisecond (measured in BENCHMARKS.md, "Start-up overhead"). A
//! child made with `CLONE_VM | CLONE_VFORK` shares jobenv's memory and runs on a stack of its own
//! while jobenv's thread waits, until the child has exec'd or exited.
//!
//! Rules for the child (it runs in jobenv's memory, so it must not disturb it): every byte it
//! reads was prepared before the clone; it calls only async-signal-safe system calls, never
//! allocates, never takes a lock, never unwinds; errno it touches is the waiting thread's.
//! Signals are blocked across the clone, and the child resets every caught signal to its
//! default before unblocking them, so none of jobenv's handlers can run in the child.

use std::ffi::{CString, c_char, c_int, c_void};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;

use nix::fcntl::OFlag;
use nix::libc;
use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
use nix::unistd::{Pid, getpid, pipe2};

/// The started program: its pid and the read ends of its stdout and stderr.
pub struct Spawned {
    pub pid: Pid,
    pub stdout: File,
    pub stderr: File,
}

/// Everything the child reads, prepared before the clone.
#[repr(C)]
struct ChildArgs {
    program: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    /// Where the child writes its errno if it cannot exec (close-on-exec: closed on success).
    report: RawFd,
    own_group: bool,
    parent: libc::pid_t,
}

const CHILD_STACK: usize = 64 * 1024;

/// Starts `argv[0]` (a path) with `argv` and exactly `env`, stdin from /dev/null, stdout and
/// stderr into new pipes; in a process group of its own when `own_group`.
pub fn spawn(argv: &[String], env: &[(&str, &str)], own_group: bool) -> io::Result<Spawned> {
    let c = |s: &str| CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in an argument or variable"));
    let argv_c: Vec<CString> = argv.iter().map(|a| c(a)).collect::<io::Result<_>>()?;
    let env_c: Vec<CString> = env.iter().map(|(k, v)| c(&format!("{k}={v}"))).collect::<io::Result<_>>()?;
    let program = argv_c.first().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no program"))?;
    let argv_p: Vec<*const c_char> = argv_c.iter().map(|s| s.as_ptr()).chain([ptr::null()]).collect();
    let envp_p: Vec<*const c_char> = env_c.iter().map(|s| s.as_ptr()).chain([ptr::null()]).collect();

    close_inherited_descriptors();
    let stdin = File::open("/dev/null")?;
    let (out_r, out_w) = pipe2(OFlag::O_CLOEXEC)?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC)?;
    let (report_r, report_w) = pipe2(OFlag::O_CLOEXEC)?;
    let args = ChildArgs {
        program: program.as_ptr(),
        argv: argv_p.as_ptr(),
        envp: envp_p.as_ptr(),
        stdin: stdin.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        report: report_w.as_raw_fd(),
        own_group,
        parent: getpid().as_raw(),
    };
    let mut stack = vec![0u8; CHILD_STACK];
    // The stack grows down; the ABI wants its top 16-byte aligned.
    let top = ((stack.as_mut_ptr() as usize + CHILD_STACK) & !15) as *mut c_void;

    let mut previous = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut previous))?;
    // SAFETY: `child_main` follows the rules in the module comment; `args`, the strings and the
    // stack stay alive and untouched until clone returns, which with CLONE_VFORK is after the
    // child has exec'd or exited.
    let pid = unsafe {
        libc::clone(child_main, top, libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD, &args as *const ChildArgs as *mut c_void)
    };
    let clone_error = io::Error::last_os_error();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None)?;
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    let pid = Pid::from_raw(pid);
    // Our copies of the child's ends: the pipes must reach end of file when the program is done.
    drop((stdin, out_w, err_w, report_w));

    let mut errno = [0u8; 4];
    match File::from(report_r).read(&mut errno)? {
        0 => Ok(Spawned { pid, stdout: File::from(out_r), stderr: File::from(err_r) }),
        _ => {
            // The child could not exec and has exited: reap it before the reaper exists.
            let _ = nix::sys::wait::waitpid(pid, None);
            Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
        }
    }
}

/// The program gets stdin, stdout and stderr only: whatever jobenv inherited from its caller (a
/// worker's sockets, a front-end's pipes) is marked close-on-exec. Everything jobenv opens
/// itself already is (Rust opens all files and sockets that way).
fn close_inherited_descriptors() {
    // SAFETY: a system call on descriptor numbers; no memory is touched.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) } == 0 {
        return;
    }
    // Kernels before 5.11: every open descriptor, as /proc lists them.
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return };
    for fd in entries.flatten().filter_map(|e| e.file_name().to_str()?.parse::<RawFd>().ok()).filter(|fd| *fd > 2) {
        // SAFETY: as above; a descriptor closed meanwhile (the directory's own) gives EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// Runs in the child, on its own stack, in jobenv's memory: raw system calls only.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: the parent passes a live `ChildArgs` and waits (CLONE_VFORK) until we exec or exit.
    let a = unsafe { &*(arg as *const ChildArgs) };
    // SAFETY: plain system calls on prepared data; see the module comment.
    unsafe {
        // jobenv's handlers are jobenv's code: every caught signal goes back to its default, and
        // SIGPIPE, which Rust ignores in jobenv, too (as std does for its children).
        for signal in 1..=libc::SIGRTMAX() {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, ptr::null(), &mut current) == 0
                && (current.sa_sigaction != libc::SIG_DFL && current.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE)
            {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, ptr::null_mut());
            }
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, ptr::null_mut());

        if libc::dup2(a.stdin, 0) < 0 || libc::dup2(a.stdout, 1) < 0 || libc::dup2(a.stderr, 2) < 0 {
            fail(a.report);
        }
        if a.own_group && libc::setpgid(0, 0) < 0 {
            fail(a.report);
        }
        // The program dies with jobenv, even when jobenv alone is SIGKILLed.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) < 0 {
            fail(a.report);
        }
        // jobenv died before the prctl: that signal will never come, so do not start at all.
        if libc::getppid() != a.parent {
            *libc::__errno_location() = libc::ESRCH;
            fail(a.report);
        }
        libc::execve(a.program, a.argv, a.envp);
        fail(a.report)
    }
}

/// Tells the parent why the child cannot go on (errno), and ends the child.
unsafe fn fail(report: RawFd) -> ! {
    // SAFETY: async-signal-safe calls only.
    unsafe {
        let errno = *libc::__errno_location();
        libc::write(report, (&errno as *const c_int).cast(), std::mem::size_of::<c_int>());
        libc::_exit(127)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str], env: &[(&str, &str)]) -> io::Result<(String, i32)> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut spawned = spawn(&argv, env, false)?;
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
    fn the_child_gets_a_clean_signal_state_and_the_parent_keeps_its_own() {
        // A parent with a blocked signal: the child must start with an empty mask.
        let mut block = SigSet::empty();
        block.add(nix::sys::signal::Signal::SIGUSR1);
        let mut before = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&block), Some(&mut before)).unwrap();
        let (out, _) = run(&["/bin/sh", "-c", "grep -E '^Sig(Blk|Ign):' /proc/self/status"], &[]).unwrap();
        let mut after = SigSet::empty();
        pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&before), Some(&mut after)).unwrap();
        assert!(after.contains(nix::sys::signal::Signal::SIGUSR1), "the parent's mask was restored");
        assert!(out.contains("SigBlk:\t0000000000000000"), "{out}");
    }
}
