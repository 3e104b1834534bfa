use std::process::ExitCode;

/// jobenv holds every secret of the node, the job's payload (a tenant's state password) and its
/// job runner's variables: it must not be readable by the processes of its own user (the program
/// it runs, another job's). A process that is not dumpable has its `/proc/<pid>/` files
/// (`environ`, `fd/`, `mem`, `maps`, ...) owned by root and refuses ptrace to every process
/// without `CAP_SYS_PTRACE`. The kernel makes a process dumpable at each exec (of a readable
/// binary), so this runs as a constructor: before std's runtime and `main`. The program is
/// dumpable again after its own exec; its environment is its own.
#[ctor::ctor(unsafe)]
fn seal() {
    // A bare system call: nothing of std is set up yet. Cannot fail with these arguments;
    // `main` checks the result anyway.
    let _ = nix::sys::prctl::set_dumpable(false);
}

fn main() -> ExitCode {
    if !matches!(nix::sys::prctl::get_dumpable(), Ok(false)) {
        // A build whose constructor did not run (a linker that dropped it) must not run jobs.
        eprintln!(
            "jobenv: error: cannot make this process non-dumpable: its environment and memory would be readable by the program it runs"
        );
        return ExitCode::from(125); // EXIT_INTERNAL
    }
    jobenv::main()
}
