use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use jobenv::cli::{Cli, Command, EnvArgs, KeysArgs, RecoverArgs, RunArgs, StatusArgs};
use jobenv::error::{EXIT_INTERNAL, EXIT_REJECTED, Error, Problem};
use jobenv::journal::Journal;
use jobenv::result::JobResult;
use jobenv::{files, report};

fn main() -> ExitCode {
    jobenv::logging::init();
    let code = match Cli::parse().command {
        Command::Run(args) => run(args),
        Command::Env(args) => env(args),
        Command::Keys(args) => keys(args),
        Command::Recover(args) => recover(args),
        Command::Status(args) => status(args),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

fn run(args: RunArgs) -> i32 {
    let started = Instant::now();
    let ending = jobenv::job::run(&args);
    let mut code = ending.exit_code;
    if let Ok(job_id) = std::env::var("WM_JOB_ID") {
        let result = JobResult {
            status: ending.status,
            exit_code: code,
            verb: args.job.verb.clone(),
            attribute: ending.identity.attribute,
            namespace: ending.identity.namespace,
            duration_ms: started.elapsed().as_millis() as u64,
            job_id: Some(job_id),
            attempt: ending.attempt,
            replayed: ending.replayed,
            errors: ending.errors,
        };
        if let Err(error) = write_result(&result) {
            tracing::error!("{error:#}");
            // Without the file Windmill would fail the job anyway, with a worse message.
            if code == 0 {
                code = EXIT_INTERNAL;
            }
        }
    }
    // Last, after result.json: a worker that kills jobenv during this wait loses nothing.
    ending.events.wait();
    code
}

fn write_result(result: &JobResult) -> anyhow::Result<()> {
    let dir = std::env::current_dir().context("finding the job directory")?;
    jobenv::result::write(&dir, result).with_context(|| format!("cannot write {}/result.json", dir.display()))
}

fn env(args: EnvArgs) -> i32 {
    match jobenv::prepare(&args.job).plan {
        Err(error) => {
            error.log();
            error.exit_code()
        }
        Ok(plan) => {
            for warning in &plan.warnings {
                tracing::warn!("{warning}");
            }
            print(&report::env(&plan, args.format))
        }
    }
}

fn keys(args: KeysArgs) -> i32 {
    match files::read_keys(&args.keys) {
        Err(problems) => {
            Error::Rejected(problems).log();
            EXIT_REJECTED
        }
        Ok(declared) => print(report::keys(&declared, args.format).as_bytes()),
    }
}

fn open_journal(dir: &std::path::Path) -> Result<Journal, Error> {
    Journal::open(dir).map_err(|source| Problem::Journal { path: dir.to_owned(), source }.into())
}

fn recover(args: RecoverArgs) -> i32 {
    let dir = args.state.dir();
    let recovered = open_journal(&dir).and_then(|journal| {
        let recovered = journal.recover().map_err(|source| Problem::Journal { path: dir.clone(), source })?;
        let retain = std::time::Duration::from_secs(u64::from(args.retain_days) * 86_400);
        if let Err(error) = journal.prune(retain) {
            tracing::warn!("cannot prune the journal: {error}");
        }
        Ok(recovered)
    });
    match recovered {
        Err(error) => {
            error.log();
            error.exit_code()
        }
        Ok(entries) => {
            for entry in &entries {
                tracing::warn!("job {} (attempt {}) was interrupted: its jobenv is gone; marked failed", entry.job_id, entry.attempt);
            }
            print(json_line(&entries).as_bytes())
        }
    }
}

fn status(args: StatusArgs) -> i32 {
    // A job id names a file in the journal: never a path that leaves it.
    if let Some(id) = args.job_id.as_ref().filter(|id| !jobenv::journal::is_valid_job_id(id)) {
        let error = Error::from(Problem::InvalidJobId(id.clone()));
        error.log();
        return error.exit_code();
    }
    let dir = args.state.dir();
    let journal = match open_journal(&dir) {
        Ok(journal) => journal,
        Err(error) => {
            error.log();
            return error.exit_code();
        }
    };
    let shown = match &args.job_id {
        Some(id) => journal.read(id).map(|entry| entry.map(|e| json_line(&e))),
        None => journal.entries().map(|entries| Some(json_line(&entries))),
    };
    match shown {
        Ok(Some(text)) => print(text.as_bytes()),
        Ok(None) => {
            tracing::error!("no journal entry for job {}", args.job_id.unwrap_or_default());
            1
        }
        Err(source) => {
            Error::from(Problem::Journal { path: dir, source }).log();
            EXIT_REJECTED
        }
    }
}

fn json_line(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("journal entries serialize");
    text.push('\n');
    text
}

fn print(bytes: &[u8]) -> i32 {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => 0,
        Err(_) => EXIT_INTERNAL,
    }
}
