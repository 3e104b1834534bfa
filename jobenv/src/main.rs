use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use jobenv::cli::{Cli, Command, EnvArgs, KeysArgs, RunArgs};
use jobenv::error::{EXIT_INTERNAL, EXIT_REJECTED, Error};
use jobenv::result::JobResult;
use jobenv::supervise::{self, RunOptions};
use jobenv::{files, report};

fn main() -> ExitCode {
    jobenv::logging::init();
    let code = match Cli::parse().command {
        Command::Run(args) => run(args),
        Command::Env(args) => env(args),
        Command::Keys(args) => keys(args),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// One `jobenv: error:` line per problem; the messages never hold a value.
fn report_error(error: &Error) {
    for line in error.to_string().lines() {
        tracing::error!("{line}");
    }
}

fn run(args: RunArgs) -> i32 {
    let started = Instant::now();
    let prepared = jobenv::prepare(&args.job);
    let identity = prepared.identity;
    let (status, mut code, errors) = match prepared.plan {
        Err(error) => {
            report_error(&error);
            ("rejected", error.exit_code(), error.to_string().lines().map(str::to_owned).collect())
        }
        Ok(plan) => {
            for warning in &plan.warnings {
                tracing::warn!("{warning}");
            }
            tracing::info!(
                "running {} in namespace {} (system {}, verb {})",
                plan.executable, plan.namespace, plan.system, plan.verb
            );
            let options = RunOptions { grace: args.grace, timeout: args.timeout };
            match execute(&plan, &options) {
                Ok(outcome) => {
                    tracing::info!(
                        "{} {} with exit code {} after {:.1}s",
                        plan.executable,
                        outcome.status(),
                        outcome.exit_code(),
                        started.elapsed().as_secs_f64()
                    );
                    (outcome.status(), outcome.exit_code(), Vec::new())
                }
                Err(error) => {
                    tracing::error!("{error:#}");
                    ("failed", EXIT_INTERNAL, vec![format!("{error:#}")])
                }
            }
        }
    };
    if let Ok(job_id) = std::env::var("WM_JOB_ID") {
        let result = JobResult {
            status,
            exit_code: code,
            verb: args.job.verb.clone(),
            attribute: identity.attribute,
            namespace: identity.namespace,
            duration_ms: started.elapsed().as_millis() as u64,
            job_id: Some(job_id),
            errors,
        };
        if let Err(error) = write_result(&result) {
            tracing::error!("{error:#}");
            // Without the file Windmill would fail the job anyway, with a worse message.
            if code == 0 {
                code = EXIT_INTERNAL;
            }
        }
    }
    code
}

fn execute(plan: &jobenv::plan::Plan, options: &RunOptions) -> anyhow::Result<supervise::Outcome> {
    // One thread drives everything async: the program is forked from this thread, and its
    // parent-death signal is tied to the forking thread, not to the process.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the runtime")?;
    Ok(runtime.block_on(supervise::run(plan, options))?)
}

fn write_result(result: &JobResult) -> anyhow::Result<()> {
    let dir = std::env::current_dir().context("finding the job directory")?;
    jobenv::result::write(&dir, result).with_context(|| format!("cannot write {}/result.json", dir.display()))
}

fn env(args: EnvArgs) -> i32 {
    match jobenv::prepare(&args.job).plan {
        Err(error) => {
            report_error(&error);
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
            report_error(&Error::Rejected(problems));
            EXIT_REJECTED
        }
        Ok(declared) => print(report::keys(&declared, args.format).as_bytes()),
    }
}

fn print(bytes: &[u8]) -> i32 {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => 0,
        Err(_) => EXIT_INTERNAL,
    }
}
