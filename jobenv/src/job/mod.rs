//! One `run`, step by step: the spine of a job's path through jobenv, and the one numbering of
//! it (each folder's header says which of these steps it serves). Nothing runs unless every step
//! before the program held; a step that cannot go on returns a [`Stop`], and [`Run::stopped`]
//! turns each into the job's [`Ending`] the last step reports (exit code, `result.json`, the
//! final progress event).
//!
//! 1. **cancel**: SIGTERM, SIGINT and SIGHUP are caught from here on ([`crate::cancel`]); one
//!    that comes before the program starts ends the job as `canceled` without starting it.
//! 2. **journal**: the state directory, the job id (a file name), and the store of the job's
//!    record: the node's own journal, or in cluster mode the shared one ([`crate::record::store`]).
//!    The payload is read here too, once: the decision compares what it asks for with the journal.
//! 3. **job lock**: one run per job id at a time. An attempt that is stopping because its worker
//!    died (Windmill re-runs such a job with the same id) is waited for, up to its grace.
//! 4. **decision**: a job id names one request (another verb, attribute or namespace is
//!    refused); a job that already ended is replayed; one running under a live jobenv (in
//!    cluster mode: under a live lease) is refused; anything else runs as the next attempt.
//! 5. **inputs**: the node's files, keys and attributes read, and every input checked, all
//!    problems at once ([`crate::input`], [`crate::input::check`]).
//! 6. **plan**: the checked inputs merged into the program's exact argv and environment, which
//!    the kernel must be able to pass ([`crate::plan`]); from here front-ends see the job
//!    (`preparing`), also when step 5 or 6 rejected it.
//! 7. **namespace lock**: one deploy per namespace: what an earlier deploy of it left running
//!    without its jobenv is stopped first ([`crate::record::stop_left`]); the program tree (a
//!    cgroup of its own, recorded, or jobenv's descendants) is made, and holds a lock too; in
//!    cluster mode the namespace's lease is taken too.
//! 8. **running entry** in the journal; if it cannot be written, nothing runs.
//! 9. **program**: the shell's evaluation decided ([`crate::evaluation`]), then the program run
//!    and supervised in its tree ([`crate::run`]); in cluster mode, stopped when its leases
//!    cannot be renewed in time.
//! 10. **terminal entry** in the journal (or `result_unknown` in place); never a pass over the
//!     journal (pruning is `recover`'s and `prune`'s, [`crate::record::recover`]).
//! 11. **report**: `result.json` for Windmill, then the final progress event.
//!
//! Where a run meets the world it is given [`Parts`]: the store of step 2 ([`Store`]) and the
//! runner of step 9 ([`program::Program`]) are seams, so that the unit tests (`tests`) drive the
//! spine in-process with a memory store and a fake program.

use std::os::fd::OwnedFd;
use std::time::Instant;

use crate::cancel::{Cancel, Cancelled};
use crate::error::{EXIT_INTERNAL, Error, Problem, Refusal};
use crate::events::{Events, Ids};
use crate::input::{self, Identity, Members};
use crate::plan::Plan;
use crate::process;
use crate::record::store::{self, Store};
use crate::record::{self, Attempt, Decision, Ending, Entry, JobResult, Journal, Status, StopRequest};
use crate::run::tree::Tree;
use crate::run::{self, RunOptions};
use crate::settings::{RunSettings, Runner};
use program::{Program, Ran};

mod namespace;
mod program;
#[cfg(test)]
mod tests;

/// Runs the job and returns jobenv's exit code.
pub fn run(settings: &RunSettings) -> i32 {
    // Export of the job's trace and log, when the node names a collector (nothing otherwise).
    crate::telemetry::start(&settings.telemetry, &settings.job.verb, settings.job_id.as_deref());
    let program = program::Supervised {
        state_dir: &settings.state_dir,
    };
    let parts = Parts {
        cancel: None,
        store: Box::new(store::open),
        program: &program,
    };
    let mut run = Run::with(settings, parts);
    let ending = run.end();
    run.conclude(ending)
}

/// Where a run meets the world beyond its settings: the cancel signals (step 1), the store of
/// its record (step 2) and the runner of its program (step 9). [`run`] gives the real ones; the
/// spine's unit tests give their own, in-process.
struct Parts<'a> {
    /// The cancel signals, already caught; `None`: step 1 catches them.
    cancel: Option<Cancel>,
    store: OpenStore<'a>,
    program: &'a dyn Program,
}

/// Step 2's store, made of the node's journal: [`store::open`], or a test's.
type OpenStore<'a> = Box<dyn FnOnce(Journal, &RunSettings, &str) -> Result<Box<dyn Store>, Error> + 'a>;

/// What step 5 hands to step 6: the inputs and the check's product, or every problem found;
/// and where progress events go even for a job that is rejected.
struct CheckedInputs {
    checked: Result<(input::Inputs, input::Checked), Vec<Problem>>,
    events: Option<crate::events::Target>,
}

/// Why a step ends the job instead of going on.
enum Stop {
    /// Refused before the program ran: configuration, input, a busy lock, the journal.
    Rejected(Error),
    /// A cancel signal, or the worker's death, before the program started.
    Cancelled(Cancelled),
    /// The job already ended: its recorded result, again.
    Replayed(Box<Entry>),
}

impl From<Error> for Stop {
    fn from(error: Error) -> Self {
        Stop::Rejected(error)
    }
}

impl From<Problem> for Stop {
    fn from(problem: Problem) -> Self {
        Stop::Rejected(problem.into())
    }
}

/// A refusal wherever it was raised: a cancel while waiting is the job canceled before its start,
/// anything else refuses it.
impl From<Refusal> for Stop {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Cancelled(cancelled) => Stop::Cancelled(cancelled),
            refusal => Stop::Rejected(refusal.into()),
        }
    }
}

/// One run of a job: what every step may need, and what the last step reports.
struct Run<'a> {
    settings: &'a RunSettings,
    /// Taken by the steps that use them.
    cancel: Option<Cancel>,
    open_store: Option<OpenStore<'a>>,
    program: &'a dyn Program,
    started: Instant,
    /// The journal's job id, once step 2 found it valid.
    job_id: Option<String>,
    /// This jobenv, as a lock file names its holder.
    holder: String,
    /// The file `drain` creates before it signals this job (journaled jobs only).
    stop_request: Option<StopRequest>,
    /// What the job is about, for its result: what the payload said, once it was read.
    identity: Identity,
    attempt: Option<u32>,
    replayed: bool,
    /// The job's progress events (off until step 6).
    events: Events,
}

impl<'a> Run<'a> {
    fn with(settings: &'a RunSettings, parts: Parts<'a>) -> Self {
        Run {
            settings,
            cancel: parts.cancel,
            open_store: Some(parts.store),
            program: parts.program,
            started: Instant::now(),
            job_id: None,
            holder: format!("jobenv pid {}", std::process::id()),
            stop_request: None,
            identity: Identity::default(),
            attempt: None,
            replayed: false,
            events: Events::default(),
        }
    }

    /// Steps 1 to 10, and the job's ending however they end.
    fn end(&mut self) -> Ending {
        match self.steps() {
            Ok(ending) => ending,
            Err(stop) => self.stopped(stop),
        }
    }

    /// Steps 1 to 10: the ending of a job whose program ran.
    fn steps(&mut self) -> Result<Ending, Stop> {
        let mut cancel = match self.cancel.take() {
            Some(cancel) => cancel,
            None => catch_cancels(&self.settings.runner)?,
        };
        let store = self.store()?;
        // The payload is read once, now: the decision compares what it asks for with the journal.
        // A cancel while a front-end's pipe stalls ends the job like any cancel before its start.
        let payload =
            input::read_payload_until(&self.settings.job.payload, || cancel.check()).map_err(Stop::Cancelled)?;
        crate::telemetry::payload(payload.as_ref().ok());
        let _job_lock = self.job_lock(store.local(), &mut cancel)?;
        let (attempt, mut earlier) = self.decide(&*store, &payload, &mut cancel)?;
        let checked = self.inputs(payload);
        let mut plan = self.plan(checked)?;
        // The store's own secrets join the node's in the redactor.
        plan.secrets.0.extend(store.redactions());
        crate::telemetry::secrets(&mut plan.secrets.0);
        crate::telemetry::identify(crate::telemetry::Identity {
            system: Some(&plan.system),
            attempt,
            ..crate::telemetry::Identity::default()
        });
        crate::telemetry::admitted();
        let namespace = self.namespace_locks(&*store, &plan, attempt, &mut earlier, &mut cancel)?;
        let entry = self.running_entry(&*store, &plan, attempt, earlier, &cancel)?;
        // The tree goes to the program (and is gone when it returns), the locks stay held.
        let ending = match record::draining(store.local()) {
            Some(since) => not_started_on_a_draining_node(&since),
            None if store.claims_lost() => not_started_without_its_lease(),
            None => {
                let guard = namespace.guard_deadline();
                self.program(
                    &mut plan,
                    namespace.for_tree,
                    namespace.tree,
                    cancel,
                    store.leases(),
                    guard,
                )
            }
        };
        Ok(self.terminal_entry(&*store, entry, ending))
    }

    /// The one way from a step's [`Stop`] to the job's end.
    fn stopped(&mut self, stop: Stop) -> Ending {
        match stop {
            Stop::Rejected(error) => {
                error.log();
                Ending::rejected(&error)
            }
            Stop::Cancelled(cancelled) => Ending::not_started(run::not_started(cancelled, self.stop_requested())),
            Stop::Replayed(entry) => self.replay(&entry),
        }
    }

    /// The job's stop request, as the run asks it.
    fn stop_requested(&self) -> Option<&dyn run::StopRequested> {
        self.stop_request
            .as_ref()
            .map(|request| request as &dyn run::StopRequested)
    }

    /// Step 2: first, so that a replay does not depend on today's node files being valid.
    fn store(&mut self) -> Result<Box<dyn Store>, Stop> {
        let journal = self.journal()?;
        let open = self.open_store.take().expect("step 2 runs once");
        Ok(open(journal, self.settings, &self.holder)?)
    }

    fn journal(&mut self) -> Result<Journal, Stop> {
        let journal = Journal::open(&self.settings.state_dir).map_err(|source| Refusal::Journal {
            path: self.settings.state_dir.clone(),
            source,
        })?;
        if let Some(id) = &self.settings.job_id {
            if !record::is_valid_job_id(id) {
                return Err(Problem::InvalidJobId(id.clone()).into());
            }
            self.holder = format!("job {id}, {}", self.holder);
            self.stop_request = Some(StopRequest::of(&journal, id).map_err(|source| journal.refusal(source))?);
            self.job_id = Some(id.clone());
        }
        Ok(journal)
    }

    /// Step 3: held until jobenv exits, so a second jobenv with the same job id waits. A stop
    /// request `drain` left for an earlier attempt must not make this one's cancel look like a
    /// node that stops.
    fn job_lock(&self, journal: &Journal, cancel: &mut Cancel) -> Result<Option<record::Held>, Stop> {
        let Some(id) = &self.job_id else { return Ok(None) };
        let held = journal.lock_job(id, &self.holder, cancel)?;
        if let Some(request) = &self.stop_request {
            request.remove();
        }
        Ok(Some(held))
    }

    /// Step 4: which attempt this is, and the earlier ones.
    fn decide(
        &mut self,
        store: &dyn Store,
        payload: &Result<Members, Problem>,
        cancel: &mut Cancel,
    ) -> Result<(Option<u32>, Vec<Attempt>), Stop> {
        let Some(id) = self.job_id.clone() else {
            return Ok((None, Vec::new()));
        };
        let identity = payload.as_ref().map(input::identity_of).unwrap_or_default();
        let asked = record::Request {
            verb: &self.settings.job.verb,
            attribute: identity.attribute.as_deref(),
            namespace: identity.namespace.as_deref(),
        };
        // The request goes with the claim: a store with leases takes none for a run that is
        // refused as another request.
        let known = store.claim_job(&id, &asked, cancel)?;
        // Whatever became of it: a job id names one request.
        if let Some(error) = known.entry.as_ref().and_then(|e| e.another_request(&asked)) {
            self.identity = identity;
            return Err(error.into());
        }
        let holder = known.live.clone();
        match record::decide_known(known) {
            Decision::Replay(entry) => Err(Stop::Replayed(entry)),
            Decision::Refuse => Err(Refusal::JobRunning {
                job_id: id.clone(),
                holder: holder.unwrap_or_default(),
            }
            .into()),
            Decision::Run { attempt, earlier } => {
                if attempt > 1 {
                    tracing::warn!(
                        "job {id}: attempt {} was interrupted; running it again as attempt {attempt}",
                        attempt - 1
                    );
                }
                Ok((Some(attempt), earlier))
            }
        }
    }

    /// Step 5: the inputs, read and checked. A rejection is not a [`Stop`] yet: step 6 shows it
    /// to front-ends first (`gathered.events`, where the node's event settings are good).
    fn inputs(&mut self, payload: Result<Members, Problem>) -> CheckedInputs {
        let gathered = input::gather_with(&self.settings.job, payload);
        self.identity = gathered.identity;
        let checked = gathered
            .inputs
            .and_then(|inputs| input::check(&inputs).map(|checked| (inputs, checked)));
        CheckedInputs {
            checked,
            events: gathered.events,
        }
    }

    /// Step 6. From here on, front-ends see the job: `preparing` now, and every way it ends
    /// below. A replay above is not shown again, nor a job refused before its node files were
    /// read.
    fn plan(&mut self, inputs: CheckedInputs) -> Result<Plan, Stop> {
        let plan = inputs
            .checked
            .and_then(|(inputs, checked)| crate::plan::plan(&inputs, checked))
            .map_err(Error::from);
        let target = match &plan {
            Ok(plan) => plan.events.as_ref(),
            Err(_) => inputs.events.as_ref(),
        };
        self.events = start_events(target, &self.identity, &self.settings.job.verb, self.job_id.as_deref());
        let plan = plan?;
        for warning in &plan.warnings {
            tracing::warn!("{warning}");
        }
        Ok(plan)
    }

    /// Step 8: if it cannot be written, nothing runs.
    fn running_entry(
        &mut self,
        store: &dyn Store,
        plan: &Plan,
        attempt: Option<u32>,
        earlier: Vec<Attempt>,
        cancel: &Cancel,
    ) -> Result<Option<Entry>, Stop> {
        let (Some(id), Some(number)) = (&self.job_id, attempt) else {
            return Ok(None);
        };
        let worker = cancel
            .worker()
            .and_then(|worker| Some((worker.as_raw(), process::start_time(worker.as_raw())?)));
        let entry = Entry::running(
            id,
            number,
            earlier,
            [&plan.verb, &plan.attribute, &plan.namespace],
            worker,
            self.settings.grace,
        );
        store.write_running(&entry)?;
        // From here on the job's records name this attempt.
        self.attempt = attempt;
        Ok(Some(entry))
    }

    /// Step 9: the shell's evaluation, then the program ([`Program`]).
    fn program(
        &self,
        plan: &mut Plan,
        tree_lock: OwnedFd,
        tree: Tree,
        cancel: Cancel,
        lease: Option<run::LeaseWatch>,
        guard: Option<run::tree::Deadline>,
    ) -> Ending {
        // The program runs in a span of its own, and continues the trace from it.
        let stage = crate::telemetry::enter(crate::telemetry::Stage::Program);
        if let Some((traceparent, tracestate)) = stage.traceparent() {
            plan.set_trace_context(traceparent, tracestate);
        }
        let ending = self.run_program(plan, tree_lock, tree, cancel, lease, guard);
        match ending.status {
            Status::Succeeded => stage.done(),
            status => stage.failed(&format!("{status}, exit code {}", ending.exit_code)),
        }
        ending
    }

    fn run_program(
        &self,
        plan: &Plan,
        tree_lock: OwnedFd,
        tree: Tree,
        cancel: Cancel,
        lease: Option<run::LeaseWatch>,
        guard: Option<run::tree::Deadline>,
    ) -> Ending {
        tracing::info!(
            "running {} in namespace {} (system {}, verb {})",
            plan.executable,
            plan.namespace,
            plan.system,
            plan.verb
        );
        let options = RunOptions {
            grace: self.settings.grace,
            timeout: self.settings.timeout,
            events: self.events.clone(),
            stop_request: self.stop_requested(),
            tree_lock: Some(tree_lock),
            lease,
            guard,
            before: None,
        };
        match self.program.run(plan, options, cancel, tree) {
            Ok(Ran::NotStarted(cancelled)) => Ending::not_started(run::not_started(cancelled, self.stop_requested())),
            Ok(Ran::Ended(outcome)) => {
                let ending = Ending::from(outcome);
                let took = self.started.elapsed().as_secs_f64();
                tracing::info!(
                    "{} {} with exit code {} after {took:.1}s",
                    plan.executable,
                    ending.status,
                    ending.exit_code
                );
                if ending.interrupted_by.is_some() {
                    ending.errors.iter().for_each(|line| tracing::warn!("{line}"));
                }
                ending
            }
            Err(error) => {
                error.log();
                Ending::failed(&error)
            }
        }
    }

    /// Step 10. The program has run: an end that cannot be recorded is jobenv's failure (125),
    /// and the entry says `result_unknown` if it can, so that a rerun neither runs the job again
    /// nor reports a result that was never recorded.
    fn terminal_entry(&self, store: &dyn Store, entry: Option<Entry>, ending: Ending) -> Ending {
        let Some(mut entry) = entry else { return ending };
        entry.end(&ending);
        let recorded = match store.write_end(&entry) {
            Ok(()) => ending,
            Err(error) => {
                let line = format!(
                    "the end of job {} could not be recorded in the journal ({error}): the program ended {} with exit code {}; the result is unknown",
                    entry.job_id, ending.status, ending.exit_code
                );
                tracing::error!("{line}");
                Ending {
                    status: Status::Failed,
                    exit_code: EXIT_INTERNAL,
                    errors: vec![line],
                    interrupted_by: None,
                }
            }
        };
        if let Some(request) = &self.stop_request {
            request.remove();
        }
        recorded
    }

    /// A job that already ended: say so in one line and end the same way again.
    fn replay(&mut self, entry: &Entry) -> Ending {
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
        self.identity = Identity {
            attribute: Some(entry.attribute.clone()),
            namespace: Some(entry.namespace.clone()),
            build_id: None,
        };
        self.attempt = Some(entry.attempt);
        self.replayed = true;
        ending
    }

    /// Step 11, report: `result.json` (under Windmill), then at most
    /// [`crate::events::FINAL_WAIT`] for the final progress event. Returns the exit code.
    fn conclude(self, ending: Ending) -> i32 {
        let verb = &self.settings.job.verb;
        self.events.finish(ending.progress(verb), &ending.errors);
        let mut code = ending.exit_code;
        if let Runner::Windmill { job_id, .. } = &self.settings.runner {
            let result = JobResult {
                verb,
                attribute: self.identity.attribute.as_deref(),
                namespace: self.identity.namespace.as_deref(),
                duration_ms: self.started.elapsed().as_millis() as u64,
                job_id: Some(job_id),
                attempt: self.attempt,
                replayed: self.replayed,
                ..JobResult::of(&ending)
            };
            // Without the file Windmill would fail the job anyway, with a worse message.
            if !record::write_result_here(&result) && code == 0 {
                code = EXIT_INTERNAL;
            }
        }
        // Last, after result.json: a worker that kills jobenv during this wait loses nothing.
        self.events.wait();
        // Then the job's trace and log: at most the flush bound for what is not delivered.
        crate::telemetry::identify(crate::telemetry::Identity {
            attribute: self.identity.attribute.as_deref(),
            namespace: self.identity.namespace.as_deref(),
            build_id: self.identity.build_id.as_deref(),
            attempt: self.attempt,
            system: None,
        });
        let interrupted_by = ending.interrupted_by.map(|by| {
            serde_json::to_value(by)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        });
        crate::telemetry::finish(crate::telemetry::Ended {
            status: ending.status.as_str(),
            exit_code: code,
            interrupted_by: interrupted_by.as_deref(),
            replayed: self.replayed,
            errors: &ending.errors,
        });
        code
    }
}

/// Step 9, on a node that drains (from `drain`'s start until the worker starts again): the program
/// is not started, and the job ends as a drained one (interrupted by the node, a retry is safe).
/// Its running entry was written before this look, so a drain that began later sees the job.
fn not_started_on_a_draining_node(since: &str) -> Ending {
    tracing::warn!("the node is draining (since {since}): the program is not started");
    let ending = Ending::not_started(run::Outcome::NodeStopped(nix::sys::signal::Signal::SIGTERM as i32));
    ending.errors.iter().for_each(|line| tracing::warn!("{line}"));
    ending
}

/// Step 9, in cluster mode, when the run's leases were lost before the program started (not
/// renewed in time while it waited): the program is not started, and the job ends as an
/// interrupted one (a retry is safe), exit 75 like a node that is not ready.
fn not_started_without_its_lease() -> Ending {
    tracing::warn!("the cluster journal did not renew this job's lease in time: the program is not started");
    let ending = Ending::not_started(run::Outcome::LeaseLost);
    ending.errors.iter().for_each(|line| tracing::warn!("{line}"));
    ending
}

/// Step 1. Under a job runner the worker that started jobenv is watched too: its death from now
/// on ends the job like a cancel.
fn catch_cancels(runner: &Runner) -> Result<Cancel, Stop> {
    Cancel::install(runner.worker()).map_err(|e| Error::io("cannot handle the cancel signals", e).into())
}

/// The events of a job, if the node configures them and the job names where they go: its row in
/// DD-0012's format, in jobenv's its deployment (a job without a valid NAMESPACE has no channel).
fn start_events(
    target: Option<&crate::events::Target>,
    identity: &Identity,
    verb: &str,
    job_id: Option<&str>,
) -> Events {
    let Some(target) = target else { return Events::default() };
    let dd0012 = target.wire != crate::events::Wire::Jobenv;
    let Some(deployment) = identity
        .namespace
        .clone()
        .filter(|ns| input::is_valid_namespace(ns))
        .or(dd0012.then(String::new))
    else {
        tracing::debug!("progress events are not sent: the job names no valid NAMESPACE");
        return Events::default();
    };
    // BUILD_ID from the payload, else the job id.
    let build = identity.build_id.clone().or_else(|| job_id.map(str::to_owned));
    Events::start(
        target,
        Ids {
            deployment,
            build,
            verb: verb.to_owned(),
        },
    )
}
