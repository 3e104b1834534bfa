//! Everything about the signals that cancel a job: SIGTERM, SIGINT and SIGHUP. Step 1 of a job
//! (the spine: [`crate::job`]); every later step that waits (for a lock, the evaluation, the
//! program) watches them.
//!
//! They are caught from the very start of `run` ([`Cancel::install`]), so a cancel that
//! arrives while jobenv validates, waits for a lock or writes its journal is not the default
//! action (a silent death: no result.json, no journal end, no final event) but an ordinary
//! `canceled` ending: the job checks [`Cancel::pending`] before it starts the program. Once the
//! program runs, the supervisor gets each signal from [`Cancel::into_stream`] and stops the
//! program tree (grace, then SIGKILL: [`crate::run::tree::ProgramTree::stop`]). The child resets the three to
//! their defaults before it execs (see `run/spawn.rs`).

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use signal_hook::iterator::Signals;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

pub const CANCEL: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

/// The cancel signals of this process, caught; and under a job runner the worker that started
/// jobenv, whose death ends the job the way a cancel does.
pub struct Cancel {
    signals: Signals,
    worker: Option<Pid>,
}

impl Cancel {
    /// `worker`: jobenv's parent at its start, under a job runner.
    pub fn install(worker: Option<Pid>) -> std::io::Result<Self> {
        Ok(Cancel {
            signals: Signals::new(CANCEL.map(|s| s as i32))?,
            worker,
        })
    }

    /// One that no signal reaches, for tests in one process: [`Cancel::install`] catches the
    /// three for the whole process, and from then on they never end it (signal-hook keeps its
    /// handler when the last `Signals` goes), nor a hung test run.
    #[cfg(test)]
    pub fn unsignalled() -> Self {
        Cancel {
            signals: Signals::new(std::iter::empty::<i32>()).expect("a Signals without signals"),
            worker: None,
        }
    }

    pub fn worker(&self) -> Option<Pid> {
        self.worker
    }

    /// The worker that started jobenv is gone: jobenv's parent is another process now (PID 1 or
    /// a subreaper). `PR_SET_PDEATHSIG` is not enough: it fires when the worker's spawning
    /// *thread* ends, which a live worker's thread pool does.
    pub fn worker_lost(&self) -> bool {
        self.worker.is_some_and(|worker| nix::unistd::getppid() != worker)
    }

    /// The first cancel signal that arrived since the last look, if any; never waits.
    pub fn pending(&mut self) -> Option<Signal> {
        self.signals.pending().find_map(|raw| Signal::try_from(raw).ok())
    }

    /// Whether the job is to end now instead of going on: a cancel signal came, or the worker is
    /// gone. Never waits.
    pub fn check(&mut self) -> Option<Cancelled> {
        match self.pending() {
            Some(signal) => Some(Cancelled::Signal(signal)),
            None => self.worker_lost().then_some(Cancelled::WorkerLost),
        }
    }

    /// Every cancel signal from now on (and one that came before and was not looked at), for
    /// the supervisor's async loop. A thread of its own waits for them.
    pub fn into_stream(mut self) -> UnboundedReceiver<Signal> {
        let (tx, rx) = unbounded_channel();
        let spawned = std::thread::Builder::new()
            .name("cancel-signals".into())
            .spawn(move || {
                for raw in self.signals.forever() {
                    if let Ok(signal) = Signal::try_from(raw) {
                        if tx.send(signal).is_err() {
                            break;
                        }
                    }
                }
            });
        if spawned.is_err() {
            tracing::error!("cannot start the thread that waits for cancel signals");
        }
        rx
    }
}

/// Why a job ends before its program started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// A cancel signal came.
    Signal(Signal),
    /// The worker that started jobenv is gone.
    WorkerLost,
}
