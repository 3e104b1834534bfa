//! The commands of `fediversity-jobenv`, one file each. A command returns what it did, an
//! [`Exit`] or jobenv's [`Error`]; [`exit_code`] alone turns that into the process's exit code
//! (the table is in the operators' manual, "jobenv's exit codes").
//!
//! These belong to the binary: the library (`jobenv`) has the spine they call.

mod drain;
mod env;
mod keys;
mod output;
mod prune;
mod recover;
mod run;
mod schema;
mod status;

use jobenv::cli::Command;
use jobenv::error::{EXIT_INTERNAL, EXIT_REJECTED, Error};
use jobenv::settings::Runner;

/// How a command ended, when it did not end in an [`Error`].
pub enum Exit {
    /// Done, and everything it had to print was printed.
    Success,
    /// `run`: the job's exit code (the program's status, or jobenv's own for a job that did not
    /// run it), decided by the spine (`jobenv::job`).
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
pub fn exit_code(result: Result<Exit, Error>) -> i32 {
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

pub fn run(command: Command) -> Result<Exit, Error> {
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
pub fn rejected_before_start(errors: &[String]) -> Exit {
    for error in errors {
        tracing::error!("{error}");
    }
    let verb = std::env::args()
        .skip_while(|arg| arg != "--verb")
        .nth(1)
        .unwrap_or_default();
    jobenv::record::result_file::record_rejected_before_start(&Runner::from_environment(), &verb, errors);
    Exit::RejectedBeforeStart
}

/// Root on a state directory of another user's becomes that user before anything touches it
/// (see `jobenv::record::owner`): every command that takes `--state-dir` calls this first. The
/// error is its refusal, said.
fn as_owner(state_dir: &std::path::Path) -> Result<(), Exit> {
    use jobenv::record::owner::{Identity, become_owner};
    match become_owner(state_dir) {
        Ok(Identity::Unchanged) => Ok(()),
        Ok(Identity::Became { uid, gid, name }) => {
            tracing::debug!(
                "the state directory {} is {name}'s: jobenv runs as that user (uid {uid}, gid {gid}), not as root",
                jobenv::error::shown_path(state_dir)
            );
            Ok(())
        }
        Err(problem) => Err(rejected_before_start(&[problem.to_string()])),
    }
}

/// The journal at `dir`, for the commands that change it.
fn open_journal(dir: &std::path::Path) -> Result<jobenv::record::journal::Journal, Error> {
    jobenv::record::journal::Journal::open(dir).map_err(|source| journal_problem(dir, source))
}

/// The journal at `dir` could not be read or written.
fn journal_problem(dir: &std::path::Path, source: std::io::Error) -> Error {
    jobenv::error::Problem::Journal {
        path: dir.to_owned(),
        source,
    }
    .into()
}
