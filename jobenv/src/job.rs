//! One `run`, step by step. Nothing runs unless every step before the program held; every way
//! out of a step is an [`Ending`] that the last step reports (exit code, `result.json`, the
//! final progress event).
//!
//! 1. **cancel**: SIGTERM, SIGINT and SIGHUP are caught from here on; one that comes before the
//!    program starts ends the job as `canceled` without starting it.
//! 2. **journal**: the state directory, and the job id (a file name).
//! 3. **job lock**: one run per job id at a time. An attempt that is stopping because its worker
//!    died (Windmill re-runs such a job with the same id) is waited for, up to its grace.
//! 4. **decision**: a job id names one request (another verb, attribute or namespace is
//!    refused); a job that already ended is replayed; one running under a live jobenv is
//!    refused; anything else runs as the next attempt.
//! 5. **inputs and plan**: read, check and merge every input ([`crate::input`],
//!    [`crate::plan`]); from here front-ends see the job (`preparing`).
//! 6. **namespace lock**: one deploy per namespace, held by the program tree too.
//! 7. **running entry** in the journal.
//! 8. **program**: run and supervise it ([`crate::run`]).
//! 9. **terminal entry** in the journal, and pruning.
//! 10. **report**: `result.json` for Windmill, then the final progress event.

use std::path::Path;
use std::time::{Duration, Instant};


use crate::cli::RunArgs;
use crate::error::{Error, Problem};
use crate::events::{Events, Ids, Progress};
use crate::input::{self, Identity};
use crate::record::journal::{self, Decision, Entry, Journal};
use crate::record::locks::{self, Refused};
use crate::record::upkeep;
use crate::record::result_file::{self, JobResult};
use crate::record::{Ending, Status};
use crate::run::cancel::{self, Cancel};
use crate::run::{self, RunOptions, tree};

/// How long a run waits for its job id's lock: `recover` takes it for a moment when it checks
/// whether a job is still running.
const JOB_LOCK_WAIT: Duration = Duration::from_secs(2);

/// What a run found out, for its last step.
struct Report {
    ending: Ending,
    identity: Identity,
    attempt: Option<u32>,
    replayed: bool,
    /// The job's progress events (off until step 5).
    events: Events,
}

impl Report {
    fn new(ending: Ending, identity: Identity) -> Self {
        Report { ending, identity, attempt: None, replayed: false, events: Events::default() }
    }

    /// Refused before the program ran: every problem on its own `jobenv: error:` line.
    fn rejected(error: &Error, identity: Identity) -> Self {
        error.log();
        Report::new(Ending::rejected(error), identity)
    }

    /// A cancel signal came before the program started: nothing ran. With a stop request from
    /// `drain`, the node is stopping (an interruption, not a cancel).
    fn cancelled_before_start(signal: nix::sys::signal::Signal, identity: Identity, stop_request: Option<&Path>) -> Self {
        cancel::log_cancelled_before_start(signal);
        let outcome = match stop_request {
            Some(request) if request.exists() => run::Outcome::NodeStopped(signal as i32),
            _ => run::Outcome::Cancelled(signal as i32),
        };
        Report::new(outcome.into(), identity)
    }

    /// The worker that started jobenv died before the program started: nothing ran, and the
    /// job is not a result (a re-run is the next attempt).
    fn worker_lost_before_start(identity: Identity) -> Self {
        tracing::warn!("the worker that started this job is gone: the program is not started");
        Report::new(run::Outcome::WorkerLost.into(), identity)
    }

    fn with_events(self, events: Events) -> Self {
        Report { events, ..self }
    }
}

/// Runs the job and returns jobenv's exit code.
pub fn run(args: &RunArgs) -> i32 {
    let started = Instant::now();
    let report = steps(args, started);
    conclude(args, report, started)
}

fn steps(args: &RunArgs, started: Instant) -> Report {
    // 1. cancel, and under a job runner the worker that started jobenv: its death from now on
    // ends the job like a cancel.
    let worker = std::env::var_os("WM_JOB_ID").map(|_| nix::unistd::getppid());
    let mut cancel = match Cancel::install(worker) {
        Ok(cancel) => cancel,
        Err(e) => return Report::rejected(&Error::io("cannot handle the cancel signals", e), Identity::default()),
    };

    // 2. journal: first, so that a replay does not depend on today's node files being valid.
    let state_dir = args.state.dir();
    let journal_problem = |source| Error::from(Problem::Journal { path: state_dir.clone(), source });
    let journal = match Journal::open(&state_dir) {
        Ok(journal) => journal,
        Err(source) => return Report::rejected(&journal_problem(source), Identity::default()),
    };
    let job_id = match &args.job_id {
        Some(id) if !journal::is_valid_job_id(id) => {
            return Report::rejected(&Problem::InvalidJobId(id.clone()).into(), Identity::default());
        }
        other => other.clone(),
    };
    let holder = match &job_id {
        Some(id) => format!("job {id}, jobenv pid {}", std::process::id()),
        None => format!("jobenv pid {}", std::process::id()),
    };
    let stop_request = job_id.as_ref().map(|id| upkeep::stop_request(&journal, id));
    let stop_request = stop_request.as_deref();
    // The payload is read once, now: the decision compares what it asks for with the journal.
    let payload = input::payload::read(&args.job.payload);
    let asked = payload.as_ref().map(input::identity_of).unwrap_or_default();

    // 3. job lock: held until jobenv exits, so a second jobenv with the same job id waits.
    let _job_lock = match &job_id {
        None => None,
        Some(id) => match take_job_lock(&journal, id, &holder, &mut cancel) {
            Ok(held) => Some(held),
            Err(Refused::Busy { holder }) => {
                return Report::rejected(&Problem::JobRunning { job_id: id.clone(), holder }.into(), Identity::default());
            }
            Err(Refused::Cancelled(signal)) => return Report::cancelled_before_start(signal, Identity::default(), stop_request),
            Err(Refused::WorkerLost) => return Report::worker_lost_before_start(Identity::default()),
            Err(Refused::Io(source)) => return Report::rejected(&journal_problem(source), Identity::default()),
        },
    };
    // A stop request `drain` left for an earlier attempt must not make this one's cancel look
    // like a node that stops.
    if let Some(request) = stop_request {
        let _ = std::fs::remove_file(request);
    }

    // 4. decision
    let (attempt, earlier) = match &job_id {
        None => (None, Vec::new()),
        Some(id) => match journal.read(id) {
            Err(source) => return Report::rejected(&journal_problem(source), Identity::default()),
            // Whatever became of it: a job id names one request.
            Ok(Some(entry)) if entry.another_request(&args.job.verb, asked.attribute.as_deref(), asked.namespace.as_deref()).is_some() => {
                let error = entry.another_request(&args.job.verb, asked.attribute.as_deref(), asked.namespace.as_deref()).expect("checked");
                return Report::rejected(&error.into(), asked);
            }
            Ok(entry) => match journal::decide(entry) {
                Decision::Replay(entry) => return replay(&entry),
                Decision::Refuse(entry) => {
                    let holder = format!("journal entry of attempt {} under live jobenv pid {}", entry.attempt, entry.pid);
                    return Report::rejected(&Problem::JobRunning { job_id: id.clone(), holder }.into(), Identity::default());
                }
                Decision::Run { attempt, earlier } => {
                    if attempt > 1 {
                        tracing::warn!("job {id}: attempt {} was interrupted; running it again as attempt {attempt}", attempt - 1);
                    }
                    (Some(attempt), earlier)
                }
            },
        },
    };

    // 5. inputs and plan. From here on, front-ends see the job: `preparing` now, and every way
    // it ends below. A replay above is not shown again, nor a job refused before its node files
    // were read.
    let gathered = input::gather_with(&args.job, payload);
    let identity = gathered.identity;
    let plan = gathered.inputs.and_then(|inputs| crate::plan::plan(&inputs)).map_err(Error::Rejected);
    let target = match &plan {
        Ok(plan) => plan.events.clone(),
        Err(_) => gathered.events,
    };
    let events = start_events(target.as_ref(), &identity, &args.job.verb, job_id.as_deref());
    let plan = match plan {
        Ok(plan) => plan,
        Err(error) => return Report::rejected(&error, identity).with_events(events),
    };
    for warning in &plan.warnings {
        tracing::warn!("{warning}");
    }

    // 6. namespace lock
    let namespace_lock = locks::namespace_path(journal.locks(), &plan.namespace);
    let _namespace_lock = match locks::acquire(&namespace_lock, args.lock_timeout, &holder, Some(&mut cancel)) {
        Ok(held) => held,
        Err(Refused::Busy { holder }) => {
            let error = Problem::NamespaceLocked { namespace: plan.namespace.clone(), holder }.into();
            return Report::rejected(&error, identity).with_events(events);
        }
        Err(Refused::Cancelled(signal)) => return Report::cancelled_before_start(signal, identity, stop_request).with_events(events),
        Err(Refused::WorkerLost) => return Report::worker_lost_before_start(identity).with_events(events),
        Err(Refused::Io(source)) => return Report::rejected(&journal_problem(source), identity).with_events(events),
    };
    // The program tree keeps a lock of its own (see `run::spawn::Passed::lock`): held, it means
    // the tree of an earlier deploy whose jobenv was killed still runs.
    let tree_path = locks::tree_path(journal.locks(), &plan.namespace);
    let tree_lock = match locks::acquire(&tree_path, args.lock_timeout, &holder, Some(&mut cancel)) {
        Ok(held) => held,
        Err(Refused::Io(source)) => return Report::rejected(&journal_problem(source), identity).with_events(events),
        Err(Refused::Cancelled(signal)) => return Report::cancelled_before_start(signal, identity, stop_request).with_events(events),
        Err(Refused::WorkerLost) => return Report::worker_lost_before_start(identity).with_events(events),
        Err(Refused::Busy { .. }) => {
            let error = Problem::NamespaceLocked { namespace: plan.namespace.clone(), holder: "the program tree of an earlier deploy, whose jobenv is gone, still runs".into() };
            return Report::rejected(&error.into(), identity).with_events(events);
        }
    };
    let tree_lock = match tree_lock.file().try_clone() {
        Ok(file) => Some(std::os::fd::OwnedFd::from(file)),
        Err(e) => return Report::rejected(&Error::io("cannot pass the namespace lock on", e), identity).with_events(events),
    };

    // 7. running entry: if it cannot be written, nothing runs.
    let worker = cancel.worker();
    let worker_start = worker.and_then(|worker| Some((worker.as_raw(), tree::start_time(worker.as_raw())?)));
    let mut entry = job_id.as_ref().zip(attempt).map(|(id, attempt)| {
        Entry::running(id, attempt, earlier, [&plan.verb, &plan.attribute, &plan.namespace], worker_start, args.grace)
    });
    if let Some(entry) = &entry {
        if let Err(source) = journal.write(entry) {
            return Report::rejected(&journal_problem(source), identity).with_events(events);
        }
    }

    // 8. program
    tracing::info!("running {} in namespace {} (system {}, verb {})", plan.executable, plan.namespace, plan.system, plan.verb);
    let options = RunOptions {
        grace: args.grace,
        timeout: args.timeout,
        events: events.clone(),
        stop_request: stop_request.map(Path::to_owned),
        tree_lock,
    };
    let mut ending = match run::run(&plan, options, cancel) {
        Ok(outcome) => {
            let ending = Ending::from(outcome);
            let took = started.elapsed().as_secs_f64();
            tracing::info!("{} {} with exit code {} after {took:.1}s", plan.executable, ending.status, ending.exit_code);
            if ending.interrupted_by.is_some() {
                ending.errors.iter().for_each(|line| tracing::warn!("{line}"));
            }
            ending
        }
        Err(error) => {
            error.log();
            Ending::failed(&error)
        }
    };

    // 9. terminal entry. The program has run: an end that cannot be recorded is jobenv's
    // failure (125), and the entry says `result_unknown` if it can, so that a rerun neither runs
    // the job again nor reports a result that was never recorded.
    if let Some(entry) = &mut entry {
        entry.end(&ending);
        if let Err(error) = journal.write_end(entry) {
            let line = format!(
                "the end of job {} could not be recorded in the journal ({error}): the program ended {} with exit code {}; the result is unknown",
                entry.job_id, ending.status, ending.exit_code
            );
            tracing::error!("{line}");
            ending = Ending { status: Status::Failed, exit_code: crate::error::EXIT_INTERNAL, errors: vec![line], interrupted_by: None };
        }
        if let Some(request) = stop_request {
            let _ = std::fs::remove_file(request);
        }
        prune(&journal, args.retain_days, &entry.job_id);
    }
    Report { ending, identity, attempt, replayed: false, events }
}

/// Step 10, report: `result.json` (with `WM_JOB_ID`), then at most [`crate::events::FINAL_WAIT`] for
/// the final progress event. Returns the exit code.
fn conclude(args: &RunArgs, report: Report, started: Instant) -> i32 {
    let Report { ending, identity, attempt, replayed, events } = report;
    events.finish(progress(ending.status, &args.job.verb), ending.exit_code, &ending.errors);
    let mut code = ending.exit_code;
    if let Ok(job_id) = std::env::var("WM_JOB_ID") {
        let result = JobResult {
            verb: &args.job.verb,
            attribute: identity.attribute.as_deref(),
            namespace: identity.namespace.as_deref(),
            duration_ms: started.elapsed().as_millis() as u64,
            job_id: Some(&job_id),
            attempt,
            replayed,
            ..JobResult::of(&ending)
        };
        let dir = std::env::current_dir().unwrap_or_default();
        if let Err(error) = result_file::write(&dir, &result) {
            tracing::error!("cannot write {}/result.json: {error}", dir.display());
            // Without the file Windmill would fail the job anyway, with a worse message.
            if code == 0 {
                code = crate::error::EXIT_INTERNAL;
            }
        }
    }
    // Last, after result.json: a worker that kills jobenv during this wait loses nothing.
    events.wait();
    code
}

/// Under a job runner (`WM_JOB_ID`), a job refused before its options could be read still gets
/// its `result.json`: Windmill would otherwise record a failure without a word of why.
pub fn record_rejected_before_start(verb: &str, errors: &[String]) {
    let Ok(job_id) = std::env::var("WM_JOB_ID") else { return };
    let ending = Ending { status: Status::Rejected, exit_code: crate::error::EXIT_REJECTED, errors: errors.to_vec(), interrupted_by: None };
    let result = JobResult { verb, job_id: Some(&job_id), ..JobResult::of(&ending) };
    let dir = std::env::current_dir().unwrap_or_default();
    if let Err(error) = result_file::write(&dir, &result) {
        tracing::error!("cannot write {}/result.json: {error}", dir.display());
    }
}

/// The events of a job, if the node configures them and the job names its deployment: a
/// rejected job whose payload has no valid NAMESPACE cannot be shown on any channel.
fn start_events(target: Option<&crate::events::Target>, identity: &Identity, verb: &str, job_id: Option<&str>) -> Events {
    let Some(target) = target else { return Events::default() };
    let Some(deployment) = identity.namespace.clone().filter(|ns| input::names::is_valid_namespace(ns)) else {
        tracing::debug!("progress events are not sent: the job names no valid NAMESPACE");
        return Events::default();
    };
    // BUILD_ID from the payload, else the job id.
    let build = identity.build_id.clone().or_else(|| job_id.map(str::to_owned));
    Events::start(target, Ids { deployment, build, verb: verb.to_owned() })
}

/// The terminal status front-ends see for a job that ended with `status`.
fn progress(status: Status, verb: &str) -> Progress {
    match status {
        Status::Succeeded if verb == "destroy" => Progress::Destroyed,
        Status::Succeeded => Progress::Succeeded,
        Status::Canceled => Progress::Canceled,
        Status::TimedOut => Progress::TimedOut,
        // A job refused before it ran has failed for its watchers. (A job is never `Running`
        // when it ends.)
        Status::Failed | Status::Rejected | Status::Running => Progress::Failed,
    }
}

/// The job's lock. A run of the same job id holds it until it exits; if that run is an attempt
/// whose worker died (Windmill re-runs such a job with the same id, maybe before the old attempt
/// has stopped), it is waited for up to its grace plus a margin, then this run goes on as the
/// next attempt.
fn take_job_lock(journal: &Journal, id: &str, holder: &str, cancel: &mut Cancel) -> Result<locks::Held, Refused> {
    let path = locks::job_path(journal.locks(), id);
    match locks::acquire(&path, Duration::ZERO, holder, Some(cancel)) {
        Err(Refused::Busy { .. }) => match journal.read(id) {
            Ok(Some(entry)) if entry.is_stopping() => {
                let wait = Duration::from_millis(entry.grace_ms.unwrap_or(3000)) + upkeep::STOP_MARGIN;
                tracing::warn!("job {id}: attempt {} lost its worker and is stopping (jobenv pid {}): waiting up to {wait:?}", entry.attempt, entry.pid);
                locks::acquire(&path, wait, holder, Some(cancel))
            }
            _ => locks::acquire(&path, JOB_LOCK_WAIT, holder, Some(cancel)),
        },
        other => other,
    }
}

/// A job that already ended: say so in one line and end the same way again.
fn replay(entry: &Entry) -> Report {
    let ending = entry.ending();
    tracing::info!(
        "job {} already ended ({}, exit code {}, attempt {}, at {}): replaying the recorded result, not running it again",
        entry.job_id,
        entry.status,
        ending.exit_code,
        entry.attempt,
        entry.finished_at.as_deref().unwrap_or("an unknown time"),
    );
    ending.errors.iter().for_each(|line| tracing::error!("{line}"));
    let identity = Identity { attribute: Some(entry.attribute.clone()), namespace: Some(entry.namespace.clone()), build_id: None };
    Report { ending, identity, attempt: Some(entry.attempt), replayed: true, events: Events::default() }
}

fn prune(journal: &Journal, retain_days: u32, running: &str) {
    match journal.prune(Duration::from_secs(u64::from(retain_days) * 86_400), Some(running)) {
        Ok(0) => {}
        Ok(n) => tracing::debug!("pruned {n} journal entries older than {retain_days} days"),
        Err(error) => tracing::warn!("cannot prune the journal: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_progress() {
        assert_eq!(progress(Status::Succeeded, "apply"), Progress::Succeeded);
        assert_eq!(progress(Status::Succeeded, "destroy"), Progress::Destroyed);
        assert_eq!(progress(Status::Failed, "destroy"), Progress::Failed);
        assert_eq!(progress(Status::Rejected, "apply"), Progress::Failed);
        assert_eq!(progress(Status::Canceled, "apply"), Progress::Canceled);
        assert_eq!(progress(Status::TimedOut, "apply"), Progress::TimedOut);
    }
}
