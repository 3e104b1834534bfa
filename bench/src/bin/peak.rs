//! `bench-peak FILE PROGRAM ARGS...`: runs the program (environment and standard streams
//! inherited) and writes the peak resident memory of its largest process, in KiB, into FILE
//! (`wait4`'s `ru_maxrss`, which covers every descendant that was waited for); exits as the
//! program did. Started from this small process, the figure is the program's own: a process
//! forked from a large one (the benchmark, after others) keeps its parent's high-water mark
//! through exec, and would report at least that.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [out, program, rest @ ..] = args.as_slice() else {
        eprintln!("usage: bench-peak FILE PROGRAM [ARGS...]");
        std::process::exit(2);
    };
    let child = match Command::new(program).args(rest).spawn() {
        Ok(child) => child,
        Err(error) => {
            eprintln!("bench-peak: cannot start {}: {error}", program.to_string_lossy());
            std::process::exit(127);
        }
    };
    let pid = child.id() as nix::libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value, and wait4 fills it for our own child (which
    // std's Child then never waits for).
    let mut usage: nix::libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { nix::libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        eprintln!("bench-peak: wait4: {}", std::io::Error::last_os_error());
        std::process::exit(125);
    }
    if let Err(error) = std::fs::write(out, usage.ru_maxrss.to_string()) {
        eprintln!("bench-peak: cannot write {}: {error}", out.to_string_lossy());
        std::process::exit(125);
    }
    let status = std::process::ExitStatus::from_raw(status);
    std::process::exit(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
}
