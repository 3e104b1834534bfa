//! Progress events: while a job runs, jobenv POSTs its status changes and its (redacted) output
//! lines as JSON to the node's `EVENTS_URL`, authenticated by `EVENTS_SECRET` in the
//! `x-action-secret` header, so front-ends can show a deployment's progress live.
//!
//! The contract, in order of importance:
//! - only redacted bytes become events: the pumps hand over what the redactor released;
//! - delivery never slows the program: pushing an event only takes a mutex for a moment, the
//!   queue is bounded and drops the oldest log lines (counted) when the receiver lags; status
//!   changes are never dropped;
//! - at exit jobenv waits at most [`FINAL_WAIT`] for the final status, then exits with the
//!   program's code whatever happened, and says in one line what was not delivered;
//! - without `EVENTS_URL` nothing of this exists: no thread, no client, no cost.
//!
//! Reading order: [`model`] (the schema), [`queue`] (ordering, batching, dropping),
//! [`lines`] (output to lines), [`exec_watch`] (when `running` starts), `sender` (HTTP).

pub mod config;
pub mod exec_watch;
pub mod lines;
pub mod model;
pub mod queue;
mod sender;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

pub use config::{Secret, Target};
pub use model::{Level, Status};

use lines::{Block, LineSplitter};
use model::Ids;
use queue::Queue;

/// How long jobenv waits, after the job ended, for the final status to be delivered.
pub const FINAL_WAIT: Duration = Duration::from_secs(2);

/// The events of one job; cheap to clone, and every method is a no-op when events are off.
#[derive(Clone, Default)]
pub struct Events(Option<Arc<Shared>>);

impl fmt::Debug for Events {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Events(on)" } else { "Events(off)" })
    }
}

struct Shared {
    ids: Ids,
    queue: Mutex<Queue>,
    /// Signalled whenever the sender settles an item or stops (for [`Events::wait`]).
    settled: Condvar,
    /// Wakes the sender when something is pushed.
    wake: tokio::sync::Notify,
    program: OnceLock<Program>,
    /// Nothing more to watch for `running` (seen, or the child gone, or the job over). Set
    /// (release) only after `running` was recorded, so a pump that finds it set (acquire) and
    /// then takes the queue's lock labels its lines with the status as it is now.
    watch_done: AtomicBool,
}

/// The direct child and what it looks like before it becomes the program.
struct Program {
    pid: i32,
    known: exec_watch::Known,
}

impl Events {
    /// Events for a job, if the node configures them and the job names its deployment: a
    /// rejected job whose payload has no valid NAMESPACE cannot be shown on any channel.
    /// Records `preparing` and starts the sender; returns at once.
    pub fn start(prepared: &crate::Prepared, verb: &str, job_id: Option<&str>) -> Self {
        let Some(target) = &prepared.events else { return Events(None) };
        let identity = &prepared.identity;
        let Some(deployment) = identity.namespace.clone().filter(|ns| crate::policy::is_valid_namespace(ns)) else {
            tracing::debug!("progress events are not sent: the job names no valid NAMESPACE");
            return Events(None);
        };
        // BUILD_ID from the payload, else the job id; the job id comes from the caller, which
        // is the one place that knows it.
        let build = identity.build_id.clone().or_else(|| job_id.map(str::to_owned));
        let ids = Ids { deployment, build, verb: verb.to_owned() };
        let shared = Arc::new(Shared {
            ids,
            queue: Mutex::new(Queue::new(SystemTime::now())),
            settled: Condvar::new(),
            wake: tokio::sync::Notify::new(),
            program: OnceLock::new(),
            watch_done: AtomicBool::new(false),
        });
        sender::spawn(Arc::clone(&shared), target.clone());
        Events(Some(shared))
    }

    /// A tap for one output stream of the program: give it the redacted bytes as they come.
    pub fn tap(&self, level: Level) -> Option<Tap> {
        let shared = Arc::clone(self.0.as_ref()?);
        Some(Tap { shared, level, splitter: LineSplitter::default(), block: Block::default() })
    }

    /// The plan's argv was spawned as `pid`: from now on jobenv watches for the exec of the
    /// deployment program to report `running`.
    pub fn program_spawned(&self, pid: i32, plan: &crate::plan::Plan) {
        let Some(shared) = &self.0 else { return };
        let known = exec_watch::Known::new(plan.argv.clone(), plan.env.get("NIX_BUILD_SHELL").map(|var| var.value.as_str()));
        let _ = shared.program.set(Program { pid, known });
    }

    /// The direct child exited and is not reaped yet (called by the reaper). A program that ran
    /// and ended between two polls is still seen here: a zombie keeps the name of its last
    /// image. Without this, a quick program would go from `preparing` straight to its end.
    pub fn program_exited(&self) {
        let Some(shared) = &self.0 else { return };
        // The same look as the watcher's: a zombie has an empty command line, so its name decides.
        shared.check_running();
        // Only now: a pump that finds the watch done labels its lines with the status as is.
        shared.watch_done.store(true, Ordering::Release);
    }

    /// The job ended: how, jobenv's exit code, and jobenv's own error lines (sent at level
    /// `error`; they never hold a value).
    pub fn finish(&self, ended: crate::status::JobStatus, exit_code: i32, errors: &[String]) {
        let Some(shared) = &self.0 else { return };
        shared.watch_done.store(true, Ordering::Release);
        let status = Status::terminal(ended, &shared.ids.verb);
        let (at, now) = (SystemTime::now(), Instant::now());
        {
            let mut queue = shared.lock();
            queue.push_lines(Level::Error, errors.iter().cloned(), at, now);
            queue.push_status(status, Some(exit_code), at, now);
        }
        shared.wake.notify_one();
    }

    /// Waits at most [`FINAL_WAIT`] for the final status to be delivered; if it was not, one
    /// line says what was not (unless a line about the receiver was already written).
    pub fn wait(&self) {
        let Some(shared) = &self.0 else { return };
        let deadline = Instant::now() + FINAL_WAIT;
        let mut queue = shared.lock();
        while !queue.final_delivered && !queue.sender_done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            queue = shared.settled.wait_timeout(queue, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        if !queue.final_delivered && !queue.reported {
            let (statuses, lines) = queue.undelivered();
            let why = queue.last_error.clone().unwrap_or_else(|| format!("no answer from the receiver within {}s", FINAL_WAIT.as_secs()));
            tracing::warn!(
                "progress events: the final status was not delivered ({why}); undelivered: {statuses} status event(s), {lines} log line(s)"
            );
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // A panic elsewhere must not take delivery (or the exit) down with it.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push_block(&self, level: Level, block: Block) {
        self.lock().push_block(level, block, SystemTime::now(), Instant::now());
        self.wake.notify_one();
    }

    /// Checks whether the program now runs (recording `running` if so); true once there is
    /// nothing more to watch.
    fn check_running(&self) -> bool {
        if self.watch_done.load(Ordering::Acquire) {
            return true;
        }
        let Some(program) = self.program.get() else { return false };
        let cmdline = exec_watch::read_cmdline(program.pid);
        let comm = || exec_watch::read_comm(program.pid);
        let done = match exec_watch::phase(cmdline.as_deref(), comm, &program.known) {
            exec_watch::Phase::Starting => false,
            exec_watch::Phase::Running => {
                self.lock().push_status(Status::Running, None, SystemTime::now(), Instant::now());
                self.wake.notify_one();
                true
            }
            exec_watch::Phase::Gone => true,
        };
        if done {
            self.watch_done.store(true, Ordering::Release);
        }
        done
    }

    /// Events cannot be sent at all for this job: one line says why.
    fn give_up(&self, why: &str) {
        let mut queue = self.lock();
        queue.stop(Instant::now());
        queue.reported = true;
        tracing::warn!("progress events are off for this job: {why}");
        drop(queue);
        self.settled.notify_all();
    }
}

/// Turns one stream's redacted output into event lines. Used by that stream's pump thread.
pub struct Tap {
    shared: Arc<Shared>,
    level: Level,
    splitter: LineSplitter,
    block: Block,
}

impl Tap {
    pub fn push(&mut self, redacted: &[u8]) {
        // First, so lines read after the program's exec are labelled `running`.
        self.shared.check_running();
        self.splitter.push(redacted, &mut self.block);
        self.flush();
    }

    /// End of the stream: the unfinished last line goes too.
    pub fn finish(&mut self) {
        self.splitter.finish(&mut self.block);
        self.flush();
    }

    /// One push per read: the queue takes the block as it is (one lock, no copy per line).
    fn flush(&mut self) {
        if !self.block.is_empty() {
            self.shared.push_block(self.level, std::mem::take(&mut self.block));
        }
    }
}
