//! Stage 3 of a job: running the program. Spawn it with exactly the planned environment
//! ([`spawn`]), in its program tree ([`tree`]: a cgroup of its own, or jobenv's descendants
//! where there is none), copy its output through the redactor ([`pump`], [`redact`]), reap
//! every child ([`reaper`]), and stop the whole tree on a cancel signal ([`cancel`]), on the
//! timeout, or when the worker is gone.
//!
//! How each way a job can end is covered (the guarantee of docs/operators/lifecycle.md,
//! "Cancellation"; Windmill's cancel is a SIGKILL of the job's process group, or with
//! `MAX_WAIT_FOR_SIGINT` a SIGINT to the job process alone):
//! 1. Windmill's default cancel SIGKILLs the process group that jobenv leads. The program stays
//!    in jobenv's group in that case, so it dies with it; what left the group (a `setsid`'d
//!    helper, a daemon) is still in the deploy's cgroup, which the next run of the namespace or
//!    `recover` stops (`record::orphans`).
//! 2. With `MAX_WAIT_FOR_SIGINT`, only jobenv gets SIGINT, and if jobenv exits first nothing
//!    else is killed. So jobenv stops the tree itself: SIGTERM to every process of it, the grace
//!    period, SIGKILL to whatever is left, and only then exits.
//! 3. The timeout, a lost worker, `drain` and a lease on the cluster journal that could not be
//!    renewed in time ([`lease`]) run the same ladder.
//! 4. When jobenv does not lead its process group (a front-end runs it as a subprocess), the
//!    program gets a group of its own, and jobenv never signals a group at all.

pub mod cancel;
pub mod lease;
pub mod pump;
pub mod reaper;
pub mod redact;
pub mod spawn;
pub mod tree;

use std::os::fd::OwnedFd;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::{Pid, getpgrp, getpid, getppid};

use crate::error::{EXIT_TIMEOUT, Error};
use crate::events::{Events, Level};
use crate::plan::Plan;
use crate::record::upkeep::StopRequest;
use cancel::{Cancel, Cancelled};
use redact::Redactor;
use tree::{ProgramTree, Tree};

pub struct RunOptions<'a> {
    /// Time between SIGTERM and SIGKILL of the program tree.
    pub grace: Duration,
    /// Wall-clock limit of the program.
    pub timeout: Option<Duration>,
    /// Progress events of the job (off unless the node configures them).
    pub events: Events,
    /// The file `drain` creates before it signals this job: a cancel signal then means that
    /// the node is stopping.
    pub stop_request: Option<&'a StopRequest>,
    /// A descriptor of the namespace's tree lock, for the program tree to keep.
    pub tree_lock: Option<OwnedFd>,
    /// Cluster mode: the run's leases, whose loss stops the program tree.
    pub lease: Option<lease::LeaseWatch>,
}

/// How often jobenv looks whether its worker is still its parent.
const WORKER_CHECK: Duration = Duration::from_millis(500);

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The program exited with this code.
    Exited(i32),
    /// The program died of this signal.
    Killed(i32),
    /// jobenv received this signal and stopped the program tree (or never started it).
    Cancelled(i32),
    /// The timeout ended the program.
    TimedOut,
    /// The worker that started jobenv died: jobenv stopped the program tree (or never started
    /// it), as no one would read its output or its end.
    WorkerLost,
    /// `drain` signalled jobenv: the node is stopping.
    NodeStopped(i32),
    /// Cluster mode: the run's leases were not renewed within the renew deadline (or were
    /// taken over): jobenv stopped the program tree before they could expire.
    LeaseLost,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Exited(code) => code,
            Outcome::Killed(signal) | Outcome::Cancelled(signal) | Outcome::NodeStopped(signal) => 128 + signal,
            Outcome::TimedOut => EXIT_TIMEOUT,
            // As if hung up: the one that would read the result is gone.
            Outcome::WorkerLost => 128 + Signal::SIGHUP as i32,
            // This node cannot vouch for the job now: try again later (sysexits' EX_TEMPFAIL),
            // as for a node that is not ready.
            Outcome::LeaseLost => crate::error::EXIT_NOT_READY,
        }
    }

    fn from_wait(status: WaitStatus) -> Self {
        match status {
            WaitStatus::Exited(_, code) => Outcome::Exited(code),
            WaitStatus::Signaled(_, signal, _) => Outcome::Killed(signal as i32),
            // waitpid without WUNTRACED/WCONTINUED reports only terminations.
            other => unreachable!("unexpected wait status {other:?}"),
        }
    }
}

/// Runs the plan to its end in `tree` and reports how it ended. Output goes to jobenv's
/// stdout/stderr.
pub fn run(plan: &Plan, options: RunOptions<'_>, cancel: Cancel, tree: Tree) -> Result<Outcome, Error> {
    // One thread drives everything async: the program is spawned from this thread, and its
    // parent-death signal is tied to the spawning thread, not to the process.
    // The redactor (about a millisecond to build with a hundred secrets in all their forms) is
    // built on a thread of its own while the runtime starts and the program is spawned.
    let secrets = plan.secrets.clone();
    let redactor = std::thread::Builder::new()
        .name("redactor".into())
        .spawn(move || Redactor::new(&secrets));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the runtime", e))?;
    // The one place that knows which kind of tree this is.
    match tree {
        Tree::Cgroup(cgroup) => runtime.block_on(supervise(plan, options, cancel, redactor, Arc::new(cgroup))),
        Tree::Proc(walk) => runtime.block_on(supervise(plan, options, cancel, redactor, Arc::new(walk))),
    }
}

async fn supervise<T: ProgramTree>(
    plan: &Plan,
    mut options: RunOptions<'_>,
    mut cancel: Cancel,
    redactor: std::io::Result<std::thread::JoinHandle<Redactor>>,
    tree: Arc<T>,
) -> Result<Outcome, Error> {
    prctl::set_child_subreaper(true).map_err(|e| Error::sys("cannot become a child subreaper", e))?;
    // Under a job runner: when jobenv's parent is no longer the worker that started it, the
    // worker is gone and the program tree is stopped.
    let worker = cancel.worker();
    let worker_lost = |worker: Option<Pid>| worker.is_some_and(|worker| getppid() != worker);
    // A cancel that came while jobenv validated and took its locks, or a worker that died
    // meanwhile: the program never starts.
    if let Some(cancelled) = cancel.check() {
        return Ok(not_started(cancelled, options.stop_request));
    }
    let mut cancels = cancel.into_stream();

    let env: Vec<(&str, &str)> = plan
        .env
        .iter()
        .map(|(key, var)| (key.as_str(), var.value.expose()))
        .collect();
    // Leading its process group (a Windmill job), jobenv keeps the program in it, so the
    // worker's group SIGKILL takes everything; otherwise the program gets a group of its own.
    let own_group = getpgrp() != getpid();
    let mut passed = spawn::Passed {
        ready: None,
        lock: options.tree_lock.take(),
    };
    if options.events.is_on() {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Error::sys("cannot make the ready pipe", e))?;
        options.events.watch_ready(read.into());
        passed.ready = Some(write);
    }
    let spawned = spawn::spawn(&plan.argv, &env, own_group, passed, tree.place()).map_err(|source| Error::Spawn {
        program: plan.argv[0].clone().into(),
        source,
    })?;
    let mut reaper = reaper::start(spawned.pid);

    let redactor = match redactor {
        Ok(building) => building.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(_) => Redactor::new(&plan.secrets),
    };
    let (done_tx, done_rx) = mpsc::channel();
    let stdout = pump::own_stream(std::io::stdout()).map_err(|e| Error::io("cannot duplicate stdout", e))?;
    let stderr = pump::own_stream(std::io::stderr()).map_err(|e| Error::io("cannot duplicate stderr", e))?;
    let (stdout_tap, stderr_tap) = (options.events.tap(Level::Info), options.events.tap(Level::Warning));
    let exported = |stream| crate::telemetry::tap(stream);
    pump::start(
        "stdout",
        spawned.stdout,
        stdout,
        redactor.clone(),
        (stdout_tap, exported("stdout")),
        done_tx.clone(),
    );
    pump::start(
        "stderr",
        spawned.stderr,
        stderr,
        redactor,
        (stderr_tap, exported("stderr")),
        done_tx,
    );

    let timeout = async {
        match options.timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let worker_gone = async {
        let mut check = tokio::time::interval(WORKER_CHECK);
        loop {
            check.tick().await;
            if worker_lost(worker) {
                return;
            }
        }
    };
    let mut lease = options.lease.clone();
    let lease_lost = async {
        match &mut lease {
            Some(lease) => lease.lost().await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        status = &mut reaper.program => Outcome::from_wait(status.expect("the reaper reports the program's status")),
        Some(signal) = cancels.recv() => stopped_by(signal, &options),
        _ = timeout => Outcome::TimedOut,
        () = worker_gone => Outcome::WorkerLost,
        () = lease_lost => Outcome::LeaseLost,
    };

    // The stop is a stage of its own in the job's trace (a program that ended by itself has
    // none, unless it left processes running).
    let stage = |reason| crate::telemetry::enter(crate::telemetry::Stage::Stop(reason));
    match outcome {
        Outcome::Cancelled(signal) | Outcome::NodeStopped(signal) => {
            let stopping = stage(if matches!(outcome, Outcome::NodeStopped(_)) {
                "drain"
            } else {
                "cancel"
            });
            let name = Signal::try_from(signal).map_or("a signal", Signal::as_str);
            let why = if matches!(outcome, Outcome::NodeStopped(_)) {
                " (the node is stopping)"
            } else {
                ""
            };
            tracing::warn!(
                "received {name}{why}: stopping the program tree (grace {:?})",
                options.grace
            );
            stop(&tree, options.grace).await;
            stopping.done();
        }
        Outcome::WorkerLost => {
            let stopping = stage("worker lost");
            tracing::warn!(
                "the worker that started this job is gone: stopping the program tree (grace {:?})",
                options.grace
            );
            stop(&tree, options.grace).await;
            stopping.done();
        }
        Outcome::LeaseLost => {
            let stopping = stage("lease lost");
            let lease = options.lease.as_ref().expect("a lease was watched");
            tracing::error!(
                "this job's leases on the cluster journal were not renewed within {:?}: stopping the program tree before they can expire (grace {:?})",
                lease.renew_deadline,
                lease.stop_grace
            );
            stop(&tree, lease.stop_grace).await;
            stopping.done();
        }
        Outcome::TimedOut => {
            let stopping = stage("timeout");
            tracing::warn!(
                "timeout of {:?} reached: stopping the program tree (grace {:?})",
                options.timeout.unwrap_or_default(),
                options.grace
            );
            stop(&tree, options.grace).await;
            stopping.done();
        }
        Outcome::Exited(_) | Outcome::Killed(_) => {
            // The program is gone; whatever it left running is stopped the same way, so a
            // finished job leaves nothing behind. Normally the reaper reports at once that no
            // child is left (every process of the tree is jobenv's descendant: it is a child
            // subreaper); if not, the tree decides (a zombie not yet reaped is not left behind).
            let reaped = tokio::time::timeout(Duration::from_millis(50), reaper.tree_gone.wait_for(|gone| *gone))
                .await
                .is_ok();
            if !reaped && !tree.is_empty() {
                let stopping = stage("left running");
                tracing::warn!("the program exited but left processes running: stopping them");
                stop(&tree, options.grace).await;
                stopping.done();
            }
        }
    }

    // Every descendant is gone, so every write end of the pipes is closed: the pumps reach end
    // of file. The bound only guards against a descriptor passed to an unrelated process.
    let _ = tokio::time::timeout(Duration::from_secs(2), reaper.tree_gone.wait_for(|gone| *gone)).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        if done_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            tracing::warn!("program output is still open after the program tree ended; not waiting for it");
            break;
        }
    }
    Ok(outcome)
}

/// Stops the tree ([`ProgramTree::stop`], which polls and sleeps) on the blocking pool: the
/// runtime's own thread stays free.
async fn stop<T: ProgramTree>(tree: &Arc<T>, grace: Duration) {
    let tree = Arc::clone(tree);
    if tokio::task::spawn_blocking(move || tree.stop(grace)).await.is_err() {
        tracing::error!("stopping the program tree failed");
    }
}

/// A cancel signal, or `drain` stopping the node (it creates the job's stop request first).
fn stopped_by(signal: Signal, options: &RunOptions<'_>) -> Outcome {
    signalled(signal, options.stop_request)
}

fn signalled(signal: Signal, stop_request: Option<&StopRequest>) -> Outcome {
    match stop_request {
        Some(request) if request.exists() => Outcome::NodeStopped(signal as i32),
        _ => Outcome::Cancelled(signal as i32),
    }
}

/// The job ends before its program started (nothing ran), wherever jobenv finds out: while it
/// validates, waits for a lock, or is about to spawn. One line says why.
pub fn not_started(cancelled: Cancelled, stop_request: Option<&StopRequest>) -> Outcome {
    match cancelled {
        Cancelled::Signal(signal) => {
            tracing::warn!(
                "received {}: the job is canceled before its program started",
                signal.as_str()
            );
            signalled(signal, stop_request)
        }
        Cancelled::WorkerLost => {
            tracing::warn!("the worker that started this job is gone: the program is not started");
            Outcome::WorkerLost
        }
    }
}
