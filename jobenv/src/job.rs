//! One `run`, in order: the job's own lock and journal entry (replay, refuse, or run as the
//! next attempt), validation, the namespace lock, the `running` entry, the program, the
//! terminal entry. Nothing runs unless every step before the program held. A cancel signal
//! is held from the first step on (see [`crate::signals`]): one that comes before the program
//! starts ends the job as `canceled` without starting it.

use std::time::{Duration, Instant};

use crate::cli::RunArgs;
use crate::error::{EXIT_INTERNAL, Error, Problem};
use crate::events::Events;
use crate::journal::{self, Decision, Entry, Journal, Status};
use crate::plan::Plan;
use crate::status::JobStatus;
use crate::supervise::{self, Outcome, RunOptions};
use crate::{Identity, lock, proctree, signals};

/// How a run ended, for the exit code and the Windmill job result.
#[derive(Debug, Clone)]
pub struct Ending {
    pub status: JobStatus,
    pub exit_code: i32,
    pub identity: Identity,
    /// One line per problem when rejected; never a value.
    pub errors: Vec<String>,
    pub attempt: Option<u32>,
    pub replayed: bool,
    /// The job's progress events, already told how it ended: the caller waits for their
    /// delivery last, after result.json.
    pub events: Events,
}

impl Ending {
    fn rejected(error: &Error, identity: Identity) -> Self {
        error.log();
        Ending {
            status: JobStatus::Rejected,
            exit_code: error.exit_code(),
            identity,
            errors: error.to_string().lines().map(str::to_owned).collect(),
            attempt: None,
            replayed: false,
            events: Events::default(),
        }
    }

    /// A cancel signal came before the program started: nothing ran.
    fn cancelled_before_start(signal: nix::sys::signal::Signal, identity: Identity) -> Self {
        crate::signals::log_cancelled_before_start(signal);
        let outcome = Outcome::Cancelled(signal as i32);
        Ending {
            status: outcome.status(),
            exit_code: outcome.exit_code(),
            identity,
            errors: Vec::new(),
            attempt: None,
            replayed: false,
            events: Events::default(),
        }
    }

    /// Tells the job's progress events how it ended, and hands them on for the final wait.
    fn reported(self, events: Events) -> Self {
        events.finish(self.status, self.exit_code, &self.errors);
        Ending { events, ..self }
    }
}

/// How long a run waits for its job id's lock: `recover` takes it for a moment when it checks
/// whether a job is still running.
const JOB_LOCK_WAIT: Duration = Duration::from_secs(2);

pub fn run(args: &RunArgs) -> Ending {
    signals::hold();
    let started = Instant::now();
    let state_dir = args.state.dir();
    let journal_problem = |source| Error::from(Problem::Journal { path: state_dir.clone(), source });

    // The journal first: a replay must not depend on today's node files being valid.
    let journal = match Journal::open(&state_dir) {
        Ok(journal) => journal,
        Err(source) => return Ending::rejected(&journal_problem(source), Identity::default()),
    };
    let job_id = match &args.job_id {
        Some(id) if !journal::is_valid_job_id(id) => {
            return Ending::rejected(&Problem::InvalidJobId(id.clone()).into(), Identity::default());
        }
        other => other.clone(),
    };
    let holder = match &job_id {
        Some(id) => format!("job {id}, jobenv pid {}", std::process::id()),
        None => format!("jobenv pid {}", std::process::id()),
    };
    // Held until jobenv exits: a second jobenv with the same job id is refused meanwhile.
    let _job_lock = match &job_id {
        None => None,
        Some(id) => match lock::acquire(&lock::job_path(journal.locks(), id), JOB_LOCK_WAIT, &holder) {
            Ok(held) => Some(held),
            Err(lock::Refused::Busy { holder }) => {
                return Ending::rejected(&Problem::JobRunning { job_id: id.clone(), holder }.into(), Identity::default());
            }
            Err(lock::Refused::Cancelled(signal)) => return Ending::cancelled_before_start(signal, Identity::default()),
            Err(lock::Refused::Io(source)) => return Ending::rejected(&journal_problem(source), Identity::default()),
        },
    };
    let (attempt, earlier) = match &job_id {
        None => (None, Vec::new()),
        Some(id) => match journal.read(id).map(journal::decide) {
            Err(source) => return Ending::rejected(&journal_problem(source), Identity::default()),
            Ok(Decision::Replay(entry)) => return replay(entry),
            Ok(Decision::Refuse(entry)) => {
                let holder = format!("journal entry of attempt {} under live jobenv pid {}", entry.attempt, entry.pid);
                return Ending::rejected(&Problem::JobRunning { job_id: id.clone(), holder }.into(), Identity::default());
            }
            Ok(Decision::Run { attempt, earlier }) => {
                if attempt > 1 {
                    tracing::warn!("job {id}: attempt {} was interrupted; running it again as attempt {attempt}", attempt - 1);
                }
                (Some(attempt), earlier)
            }
        },
    };

    let prepared = crate::prepare(&args.job);
    // From here on, front-ends see the job: `preparing` now, and every way it ends below.
    // A replay above is not shown again, and neither is a job refused before its node files
    // were read.
    let events = Events::start(&prepared, &args.job.verb, job_id.as_deref());
    let identity = prepared.identity;
    let plan = match prepared.plan {
        Ok(plan) => plan,
        Err(error) => return Ending::rejected(&error, identity).reported(events),
    };
    for warning in &plan.warnings {
        tracing::warn!("{warning}");
    }

    let _namespace_lock =
        match lock::acquire(&lock::namespace_path(journal.locks(), &plan.namespace), args.lock_timeout, &holder) {
            Ok(held) => held,
            Err(lock::Refused::Busy { holder }) => {
                let error = Problem::NamespaceLocked { namespace: plan.namespace.clone(), holder }.into();
                return Ending::rejected(&error, identity).reported(events);
            }
            Err(lock::Refused::Cancelled(signal)) => return Ending::cancelled_before_start(signal, identity).reported(events),
            Err(lock::Refused::Io(source)) => return Ending::rejected(&journal_problem(source), identity).reported(events),
        };

    let mut entry = job_id.as_ref().zip(attempt).map(|(id, attempt)| running_entry(id, attempt, earlier, &plan));
    if let Some(entry) = &entry {
        if let Err(source) = journal.write(entry) {
            return Ending::rejected(&journal_problem(source), identity).reported(events);
        }
    }

    tracing::info!("running {} in namespace {} (system {}, verb {})", plan.executable, plan.namespace, plan.system, plan.verb);
    let options = RunOptions { grace: args.grace, timeout: args.timeout, events: events.clone() };
    let (status, exit_code, errors) = match execute(&plan, &options) {
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
            error.log();
            (JobStatus::Failed, EXIT_INTERNAL, error.to_string().lines().map(str::to_owned).collect())
        }
    };

    if let Some(entry) = &mut entry {
        entry.status = status;
        entry.exit_code = Some(exit_code);
        entry.finished_at = Some(journal::now());
        // The program has run: a journal that fails now cannot undo that, so report and keep
        // the program's exit code. A later run of this job id will see `running` under a dead
        // pid and run it again as the next attempt.
        if let Err(error) = journal.write(entry) {
            tracing::error!("cannot record the end of job {} in the journal: {error}", entry.job_id);
        }
        prune(&journal, args.retain_days);
    }
    Ending { status, exit_code, identity, errors, attempt, replayed: false, events: Events::default() }.reported(events)
}

fn running_entry(job_id: &str, attempt: u32, earlier: Vec<journal::Attempt>, plan: &Plan) -> Entry {
    let pid = std::process::id() as i32;
    Entry {
        job_id: job_id.to_owned(),
        attempt,
        verb: plan.verb.clone(),
        attribute: plan.attribute.clone(),
        namespace: plan.namespace.clone(),
        pid,
        pid_start: proctree::start_time(pid).unwrap_or_default(),
        started_at: journal::now(),
        status: Status::Running,
        exit_code: None,
        finished_at: None,
        reason: None,
        earlier,
    }
}

/// A job that already ended: say so in one line and end the same way again.
fn replay(entry: Entry) -> Ending {
    let code = entry.exit_code.unwrap_or(EXIT_INTERNAL);
    tracing::info!(
        "job {} already ended ({}, exit code {code}, attempt {}, at {}): replaying the recorded result, not running it again",
        entry.job_id,
        entry.status.as_str(),
        entry.attempt,
        entry.finished_at.as_deref().unwrap_or("an unknown time"),
    );
    Ending {
        status: entry.status,
        exit_code: code,
        identity: Identity { attribute: Some(entry.attribute), namespace: Some(entry.namespace), build_id: None },
        errors: Vec::new(),
        attempt: Some(entry.attempt),
        replayed: true,
        events: Events::default(),
    }
}

fn prune(journal: &Journal, retain_days: u32) {
    match journal.prune(Duration::from_secs(u64::from(retain_days) * 86_400)) {
        Ok(0) => {}
        Ok(n) => tracing::debug!("pruned {n} journal entries older than {retain_days} days"),
        Err(error) => tracing::warn!("cannot prune the journal: {error}"),
    }
}

fn execute(plan: &Plan, options: &RunOptions) -> Result<Outcome, Error> {
    // One thread drives everything async: the program is forked from this thread, and its
    // parent-death signal is tied to the forking thread, not to the process.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the runtime", e))?;
    runtime.block_on(supervise::run(plan, options))
}
