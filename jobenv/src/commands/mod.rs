//! The commands of `fediversity-jobenv`, one file each. A command returns what it did, an
//! [`Exit`] or jobenv's [`Error`]; [`exit_code`] alone turns that into the process's exit code
//! (the table is in the operators' manual, "jobenv's exit codes").
//!
//! [`main`] is all the binary calls (after it sealed itself).

mod drain;
mod env;
mod keys;
mod output;
mod prune;
mod recover;
mod run;
mod schema;
mod status;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::error::{EXIT_INTERNAL, EXIT_REJECTED, Error};
use crate::settings::Runner;

/// jobenv's command line, from the process's arguments and environment to its exit code.
pub fn main() -> ExitCode {
    drop_empty_options();
    // Only jobenv's own events: a library's debug line could hold the events URL.
    // Through the tee: while a job exports, its log gets jobenv's lines as printed.
    let logging = safe_io::log::init_writing_to(
        "jobenv: ",
        "JOBENV_LOG",
        &["jobenv", "fediversity_jobenv"],
        crate::telemetry::LogTee,
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
        Ok(cli) => run(cli.command),
        Err(errors) => Ok(rejected_before_start(&errors)),
    };
    exit(exit_code(result))
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

/// How a command ended, when it did not end in an [`Error`].
pub(crate) enum Exit {
    /// Done, and everything it had to print was printed.
    Success,
    /// `run`: the job's exit code (the program's status, or jobenv's own for a job that did not
    /// run it), decided by the spine (`crate::job`).
    Job(i32),
    /// `drain`: a job still running after being stopped.
    StillRunning,
    /// `status JOB_ID`: the journal has no entry for the job.
    NoEntry,
    /// The command line or jobenv's own environment was wrong: said, and recorded under a job
    /// runner, by [`rejected_before_start`].
    RejectedBeforeStart,
    /// Standard output was gone (a closed pipe, a full disk): not all was printed.
    OutputLost,
}

/// The one place a command's result becomes an exit code. An error is logged here, one
/// `jobenv: error:` line per line of it.
fn exit_code(result: Result<Exit, Error>) -> i32 {
    match result {
        Ok(Exit::Success) => 0,
        Ok(Exit::Job(code)) => code,
        Ok(Exit::StillRunning | Exit::NoEntry) => 1,
        Ok(Exit::RejectedBeforeStart) => EXIT_REJECTED,
        Ok(Exit::OutputLost) => EXIT_INTERNAL,
        Err(error) => {
            error.log();
            error.exit_code()
        }
    }
}

fn run(command: Command) -> Result<Exit, Error> {
    match command {
        Command::Run(args) => run::run(*args),
        Command::Env(args) => env::env(args),
        Command::Keys(args) => keys::keys(args),
        Command::Recover(args) => recover::recover(args),
        Command::Status(args) => status::status(args),
        Command::Prune(args) => prune::prune(args),
        Command::Drain(args) => drain::drain(args),
        Command::Schema(args) => schema::schema(args),
    }
}

/// The command line or jobenv's own environment is wrong: every problem on its own
/// `jobenv: error:` line, exit 2, and under a job runner a `result.json` that says so.
pub(crate) fn rejected_before_start(errors: &[String]) -> Exit {
    for error in errors {
        tracing::error!("{error}");
    }
    let verb = std::env::args()
        .skip_while(|arg| arg != "--verb")
        .nth(1)
        .unwrap_or_default();
    crate::record::record_rejected_before_start(&Runner::from_environment(), &verb, errors);
    Exit::RejectedBeforeStart
}

/// Root on a state directory of another user's becomes that user before anything touches it
/// (see `record/owner.rs`): every command that takes `--state-dir` calls this first. The
/// error is its refusal, said.
fn as_owner(state_dir: &std::path::Path) -> Result<(), Exit> {
    use crate::record::{Owner, become_owner};
    match become_owner(state_dir) {
        Ok(Owner::Unchanged) => Ok(()),
        Ok(Owner::Became { uid, gid, name }) => {
            tracing::debug!(
                "the state directory {} is {name}'s: jobenv runs as that user (uid {uid}, gid {gid}), not as root",
                crate::error::shown_path(state_dir)
            );
            Ok(())
        }
        Err(problem) => Err(rejected_before_start(&[problem.to_string()])),
    }
}

/// The journal at `dir`, for the commands that change it.
fn open_journal(dir: &std::path::Path) -> Result<crate::record::Journal, Error> {
    crate::record::Journal::open(dir).map_err(|source| journal_refusal(dir, source))
}

/// The journal at `dir` could not be read or written.
fn journal_refusal(dir: &std::path::Path, source: std::io::Error) -> Error {
    crate::error::Refusal::Journal {
        path: dir.to_owned(),
        source,
    }
    .into()
}
