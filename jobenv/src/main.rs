use std::process::ExitCode;

use clap::Parser;
use jobenv::cli::Cli;
use jobenv::error::EXIT_INTERNAL;

mod commands;

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
        return exit(EXIT_INTERNAL);
    }
    drop_empty_options();
    // Only jobenv's own events: a library's debug line could hold the events URL.
    // Through the tee: while a job exports, its log gets jobenv's lines as printed.
    let logging = safe_io::log::init_writing_to(
        "jobenv: ",
        "JOBENV_LOG",
        &["jobenv", "fediversity_jobenv"],
        jobenv::telemetry::LogTee,
    );
    let cli = match (Cli::try_parse(), logging) {
        (Err(error), _) if !error.use_stderr() => {
            // --help, --version
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        (Err(error), _) => Err(clap_lines(&error)),
        (Ok(_), Err(error)) => Err(vec![error.to_string()]),
        (Ok(cli), Ok(())) => Ok(cli),
    };
    let result = match cli {
        Ok(cli) => commands::run(cli.command),
        Err(errors) => Ok(commands::rejected_before_start(&errors)),
    };
    exit(commands::exit_code(result))
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// An empty `JOBENV_*` variable means "unset", for every option alike (a unit or a whitelist
/// that passes a variable it does not set gives it empty: clap would take "" as a value).
fn drop_empty_options() {
    let empty: Vec<_> = std::env::vars_os()
        .filter(|(key, value)| value.is_empty() && key.to_str().is_some_and(|k| k.starts_with("JOBENV_")))
        .map(|(k, _)| k)
        .collect();
    for key in empty {
        // SAFETY: the first thing main does, while jobenv has no other thread that could read
        // the environment concurrently.
        unsafe { std::env::remove_var(key) };
    }
}

/// clap's message, without its `error: ` label and usage hints: the problem, naming the option.
fn clap_lines(error: &clap::Error) -> Vec<String> {
    let text = error.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    text.split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}
