//! Step 9 of a job (the spine: [`crate::job`]), and the program tree step 7 makes ([`tree`]):
//! running the program. Spawn it with exactly the planned environment
//! ([`spawn`]), in its program tree ([`tree`]: a cgroup of its own, or jobenv's descendants
//! where there is none), copy its output through the redactor ([`pump`], [`redact`]), reap
//! every child ([`reaper`]), and stop the whole tree on a cancel signal ([`crate::cancel`]), on the
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

mod lease;
mod pump;
mod reaper;
pub mod redact;
mod spawn;
pub mod tree;

// What the record's stores make of a lease, for the run to watch.
pub(crate) use lease::{LeaseWatch, Renewal};

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::{Pid, getpgrp, getpid, getppid};

use crate::cancel::{Cancel, Cancelled};
use crate::error::{EXIT_TIMEOUT, Error};
use crate::events::{Events, Level};
use crate::input::Var;
use redact::Redactor;
use safe_io::secret::Hidden;
use tree::{ProgramTree, Tree};

/// What tells a cancel signal from a node that stops: `drain` leaves a request for the job
/// before it signals the job's jobenv (`record::StopRequest`). A trait, so that the run
/// knows nothing of the journal that keeps the request.
pub trait StopRequested {
    /// Whether `drain` asked for this job's stop.
    fn exists(&self) -> bool;
}

pub struct RunOptions<'a> {
    /// Time between SIGTERM and SIGKILL of the program tree.
    pub grace: Duration,
    /// Wall-clock limit of the program.
    pub timeout: Option<Duration>,
    /// Progress events of the job (off unless the node configures them).
    pub events: Events,
    /// The file `drain` creates before it signals this job: a cancel signal then means that
    /// the node is stopping.
    pub stop_request: Option<&'a dyn StopRequested>,
    /// A descriptor of the namespace's tree lock, for the program tree to keep.
    pub tree_lock: Option<OwnedFd>,
    /// Cluster mode: the run's leases, whose loss stops the program tree, and by whose expiry
    /// every stop of it ends.
    pub lease: Option<lease::LeaseWatch>,
    /// Cluster mode: the deadline of the program tree's guard, moved on with the leases.
    pub guard: Option<tree::Deadline>,
    /// What runs before the program, in its tree and under the same supervision (the
    /// evaluation of its shell: [`crate::evaluation`]); it also gives the program's argv.
    /// `None`: the plan's argv runs at once.
    pub before: Option<&'a mut dyn Before>,
}

/// The steps of a job before its program (see [`RunOptions::before`]), asked one at a time: each
/// runs in the program tree with the environment it names, its stderr copied through the
/// redactor like the program's, its stdout given back when it asks for it (else discarded); a
/// cancel, the timeout, a lost worker or lease stop it as they would stop the program.
pub trait Before {
    /// What comes next, given how the last step ended (`None` before the first).
    fn next(&mut self, last: Option<StepEnd>) -> Result<Next, Error>;

    /// How long the job already waited for what comes before (another job's evaluation of the
    /// same shell): it counts against the timeout.
    fn waited(&self) -> Duration {
        Duration::ZERO
    }
}

/// A process run before the program.
pub struct Step {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Give back what it prints on stdout (at most [`MAX_CAPTURED`] bytes).
    pub capture: bool,
}

/// How a step ended.
pub struct StepEnd {
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
}

/// The most of a step's stdout that is given back.
pub const MAX_CAPTURED: u64 = 64 << 10;

pub enum Next {
    Step(Step),
    /// The program, with this argv.
    Program(Vec<String>),
    /// The job ends here, as a step's end says (an evaluation that failed is the job's failure,
    /// with its exit code).
    End(Outcome),
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

/// What a run spawns, from the plan: the program's argv and exact environment, and the secrets
/// its output is redacted of. The run is told these, not the plan, so that the evaluation's
/// steps (which the plan describes) can run in the program tree without a circle back.
pub struct Launch<'a> {
    pub argv: &'a [String],
    pub env: &'a BTreeMap<String, Var>,
    pub secrets: &'a Hidden<Vec<Vec<u8>>>,
}

/// Runs the program to its end in `tree` and reports how it ended. Output goes to jobenv's
/// stdout/stderr.
pub fn run(plan: Launch<'_>, options: RunOptions<'_>, cancel: Cancel, tree: Tree) -> Result<Outcome, Error> {
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
        Tree::Cgroup(cgroup) => runtime.block_on(supervise(&plan, options, cancel, redactor, Arc::new(cgroup))),
        Tree::Proc(walk) => runtime.block_on(supervise(&plan, options, cancel, redactor, Arc::new(walk))),
    }
}

async fn supervise<T: ProgramTree>(
    plan: &Launch<'_>,
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

    // The guard kills the tree by the leases' expiry, whatever becomes of this jobenv (frozen,
    // it renews nothing and stops nothing): from before the program starts, each renewal moves
    // that on.
    let guard_feed = match (&options.guard, &options.lease) {
        (Some(guard), Some(lease)) => {
            let (guard, mut lease) = (guard.clone(), lease.clone());
            guard.set(lease.kill_by());
            Some(tokio::spawn(async move {
                while lease.renewals.changed().await.is_ok() {
                    guard.set(lease.kill_by());
                }
            }))
        }
        _ => None,
    };

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
    // The output pipes of every process of the job (the steps before the program write into the
    // same ones); jobenv's own write ends close once the program is spawned.
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| Error::sys("cannot make a pipe", e));
    let ((stdout_read, stdout_write), (stderr_read, stderr_write)) = (pipe()?, pipe()?);
    let mut reaper = reaper::start();

    let redactor = match redactor {
        Ok(building) => building.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(_) => Redactor::new(plan.secrets),
    };
    let (done_tx, done_rx) = mpsc::channel();
    let stdout = pump::own_stream(std::io::stdout()).map_err(|e| Error::io("cannot duplicate stdout", e))?;
    let stderr = pump::own_stream(std::io::stderr()).map_err(|e| Error::io("cannot duplicate stderr", e))?;
    let (stdout_tap, stderr_tap) = (options.events.tap(Level::Info), options.events.tap(Level::Warning));
    let exported = |stream| crate::telemetry::tap(stream);
    pump::start(
        "stdout",
        std::fs::File::from(stdout_read),
        stdout,
        redactor.clone(),
        (stdout_tap, exported("stdout")),
        done_tx.clone(),
    );
    pump::start(
        "stderr",
        std::fs::File::from(stderr_read),
        stderr,
        redactor,
        (stderr_tap, exported("stderr")),
        done_tx,
    );

    let mut before = options.before.take();
    let waited = before.as_ref().map_or(Duration::ZERO, |before| before.waited());
    // Each process of the job (the steps before the program, the program) looks at the guard's
    // deadline once in the tree: a jobenv frozen since its last look at the leases starts
    // nothing after they ran out.
    let placement = tree.place().guarded(options.guard.as_ref().map(tree::Deadline::gate));
    let program = Box::pin(async {
        let output = |fd: &OwnedFd| fd.try_clone().map(std::process::Stdio::from);
        let mut last = None;
        let argv = loop {
            let next = match before.as_mut() {
                Some(before) => before.next(last.take())?,
                None => Next::Program(plan.argv.to_vec()),
            };
            let step = match next {
                Next::Step(step) => step,
                Next::Program(argv) => break argv,
                Next::End(outcome) => return Ok(outcome),
            };
            let captured = match step.capture {
                true => Some(capture_file()?),
                false => None,
            };
            let step_stdout = match &captured {
                Some(file) => file.try_clone().map(std::process::Stdio::from),
                None => Ok(std::process::Stdio::null()),
            };
            let lock = passed.lock.as_ref().map(OwnedFd::try_clone).transpose();
            let step_env: Vec<(&str, &str)> = step.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let spawned = step_stdout.and_then(|out| {
                let passed = spawn::Passed {
                    ready: None,
                    lock: lock?,
                };
                spawn::spawn_into(
                    &step.argv,
                    &step_env,
                    own_group,
                    passed,
                    placement,
                    out,
                    output(&stderr_write)?,
                )
            });
            let pid = spawned.map_err(|source| Error::Spawn {
                program: step.argv[0].clone().into(),
                source,
            })?;
            reaper.spawned();
            let outcome = Outcome::from_wait(reaper.wait_for(pid).await);
            let stdout = match captured {
                Some(file) => read_captured(&file).map_err(|e| Error::io("cannot read what a step printed", e))?,
                None => Vec::new(),
            };
            last = Some(StepEnd { outcome, stdout });
        };
        let passed = std::mem::take(&mut passed);
        let spawned = output(&stdout_write)
            .and_then(|out| spawn::spawn_into(&argv, &env, own_group, passed, placement, out, output(&stderr_write)?));
        let pid = spawned.map_err(|source| Error::Spawn {
            program: argv[0].clone().into(),
            source,
        })?;
        reaper.spawned();
        reaper.close();
        // Only the job's processes hold the pipes now: the pumps end when the last one is gone.
        drop((stdout_write, stderr_write));
        Ok::<_, Error>(Outcome::from_wait(reaper.wait_for(pid).await))
    });

    let timeout = async {
        match options.timeout {
            Some(limit) => tokio::time::sleep(limit.saturating_sub(waited)).await,
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
    let mut program = program;
    let ended = tokio::select! {
        ended = &mut program => ended,
        Some(signal) = cancels.recv() => Ok(stopped_by(signal, &options)),
        _ = timeout => Ok(Outcome::TimedOut),
        () = worker_gone => Ok(Outcome::WorkerLost),
        () = lease_lost => Ok(Outcome::LeaseLost),
    };
    // Whatever step it was at, nothing more is spawned (its pipes close with it).
    drop(program);
    reaper.close();
    let outcome = match ended {
        Ok(outcome) => outcome,
        Err(error) => {
            // jobenv could not go on between two steps (every step it spawned has ended): what
            // they left is stopped like a program's leftovers.
            if !tree.is_empty() {
                stop(&tree, options.grace, &options.lease).await;
            }
            wait_for_output(&reaper, &done_rx).await;
            return Err(error);
        }
    };
    // A program SIGKILLed once its leases ran out was killed for that: by the guard, while this
    // jobenv was frozen.
    let outcome = match (outcome, &options.lease) {
        (Outcome::Killed(signal), Some(lease))
            if signal == Signal::SIGKILL as i32 && lease.kill_by().is_some_and(|at| Instant::now() >= at) =>
        {
            tracing::error!(
                "the program was killed when this job's leases on the cluster journal ran out (this jobenv could not renew them or stop it in time)"
            );
            Outcome::LeaseLost
        }
        (outcome, _) => outcome,
    };
    // Every stop below ends before the leases can expire.
    let kill_by = options.lease.clone();

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
            stop(&tree, options.grace, &kill_by).await;
            stopping.done();
        }
        Outcome::WorkerLost => {
            let stopping = stage("worker lost");
            tracing::warn!(
                "the worker that started this job is gone: stopping the program tree (grace {:?})",
                options.grace
            );
            stop(&tree, options.grace, &kill_by).await;
            stopping.done();
        }
        Outcome::LeaseLost => {
            let stopping = stage("lease lost");
            let lease = options.lease.as_ref().expect("a lease was watched");
            tracing::error!(
                "this job's leases on the cluster journal were not renewed within {:?}: stopping the program tree before they can expire (grace {:?})",
                lease.renew_deadline,
                options.grace
            );
            stop(&tree, options.grace, &kill_by).await;
            stopping.done();
        }
        Outcome::TimedOut => {
            let stopping = stage("timeout");
            tracing::warn!(
                "timeout of {:?} reached: stopping the program tree (grace {:?})",
                options.timeout.unwrap_or_default(),
                options.grace
            );
            stop(&tree, options.grace, &kill_by).await;
            stopping.done();
        }
        Outcome::Exited(_) | Outcome::Killed(_) => {
            // The program is gone; whatever it left running is stopped the same way, so a
            // finished job leaves nothing behind. Normally the reaper reports at once that no
            // child is left (every process of the tree is jobenv's descendant: it is a child
            // subreaper); if not, the tree decides (a zombie not yet reaped is not left behind).
            let mut gone = reaper.tree_gone.clone();
            let reaped = tokio::time::timeout(Duration::from_millis(50), gone.wait_for(|gone| *gone))
                .await
                .is_ok();
            if !reaped && !tree.is_empty() {
                let stopping = stage("left running");
                tracing::warn!("the program exited but left processes running: stopping them");
                stop(&tree, options.grace, &kill_by).await;
                stopping.done();
            }
        }
    }

    wait_for_output(&reaper, &done_rx).await;
    // The tree is gone: the guard has nothing left to kill by the leases' expiry (a final write
    // may take until then).
    if let Some(feed) = guard_feed {
        feed.abort();
        if let Some(guard) = &options.guard {
            guard.set(None);
        }
    }
    Ok(outcome)
}

/// Every descendant is gone, so every write end of the pipes is closed: the pumps reach end of
/// file. The bound only guards against a descriptor passed to an unrelated process.
async fn wait_for_output(reaper: &reaper::Reaper, done: &mpsc::Receiver<()>) {
    let mut gone = reaper.tree_gone.clone();
    let _ = tokio::time::timeout(Duration::from_secs(2), gone.wait_for(|gone| *gone)).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        if done
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            tracing::warn!("program output is still open after the program tree ended; not waiting for it");
            break;
        }
    }
}

/// A file in memory for a step's stdout.
fn capture_file() -> Result<std::fs::File, Error> {
    nix::sys::memfd::memfd_create(c"jobenv-step-stdout", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
        .map(std::fs::File::from)
        .map_err(|e| Error::sys("cannot make a file for a step's output", e))
}

/// What a step printed, at most [`MAX_CAPTURED`] bytes of it.
fn read_captured(file: &std::fs::File) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek};
    let mut file = file;
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    file.take(MAX_CAPTURED).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Stops the tree ([`ProgramTree::stop_by`], which polls and sleeps) on the blocking pool: the
/// runtime's own thread stays free. With leases, SIGKILL comes by their expiry at the latest
/// (less the margin), as renewals move it on, and at once when one is lost.
async fn stop<T: ProgramTree>(tree: &Arc<T>, grace: Duration, lease: &Option<lease::LeaseWatch>) {
    let (tree, lease) = (Arc::clone(tree), lease.clone());
    let kill_by = move || lease.as_ref().and_then(lease::LeaseWatch::kill_by);
    if tokio::task::spawn_blocking(move || tree.stop_by(grace, &kill_by))
        .await
        .is_err()
    {
        tracing::error!("stopping the program tree failed");
    }
}

/// A cancel signal, or `drain` stopping the node (it creates the job's stop request first).
fn stopped_by(signal: Signal, options: &RunOptions<'_>) -> Outcome {
    signalled(signal, options.stop_request)
}

fn signalled(signal: Signal, stop_request: Option<&dyn StopRequested>) -> Outcome {
    match stop_request {
        Some(request) if request.exists() => Outcome::NodeStopped(signal as i32),
        _ => Outcome::Cancelled(signal as i32),
    }
}

/// The job ends before its program started (nothing ran), wherever jobenv finds out: while it
/// validates, waits for a lock, or is about to spawn. One line says why.
pub fn not_started(cancelled: Cancelled, stop_request: Option<&dyn StopRequested>) -> Outcome {
    tracing::warn!("{}", crate::error::Refusal::Cancelled(cancelled));
    match cancelled {
        Cancelled::Signal(signal) => signalled(signal, stop_request),
        Cancelled::WorkerLost => Outcome::WorkerLost,
    }
}
