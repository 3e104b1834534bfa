//! Running the deployment program: spawn it with exactly the planned environment, stream its
//! output, and stop the whole program tree on SIGTERM/SIGINT/SIGHUP or on the timeout.
//!
//! How each way a job can end is covered (observed Windmill behaviour, see
//! reference/windmill-api.md "Worker 6. Cancellation"):
//! 1. Windmill's default cancel SIGKILLs the process group that jobenv leads. The program stays
//!    in jobenv's group in that case, so it dies with it.
//! 2. With `MAX_WAIT_FOR_SIGINT`, only jobenv gets SIGINT, and if jobenv exits first nothing
//!    else is killed. So jobenv stops the tree itself: SIGTERM to every descendant, the grace
//!    period, SIGKILL to whatever is left, and only then exits.
//! 3. The timeout runs the same ladder.
//! 4. When jobenv does not lead its process group (a front-end runs it as a subprocess), the
//!    program gets a group of its own, and jobenv never signals a group at all: it signals its
//!    descendants one by one, so neither its parent nor a sibling in a pipeline is hit.
//!
//! The direct child gets `PR_SET_PDEATHSIG`, so it dies with jobenv even when jobenv alone is
//! SIGKILLed. jobenv is a child subreaper so that orphans stay findable and are reaped.

use std::collections::HashSet;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::wait::WaitStatus;
use nix::unistd::{Pid, getpgrp, getpid};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

use crate::error::{EXIT_TIMEOUT, Error};
use crate::events::{Events, Level};
use crate::plan::Plan;
use crate::redact::Redactor;
use crate::status::JobStatus;
use crate::{proctree, pump, reaper, spawn};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Time between SIGTERM and SIGKILL of the program tree.
    pub grace: Duration,
    /// Wall-clock limit of the program.
    pub timeout: Option<Duration>,
    /// Progress events of the job (off unless the node configures them).
    pub events: Events,
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The program exited with this code.
    Exited(i32),
    /// The program died of this signal.
    Killed(i32),
    /// jobenv received this signal and stopped the program tree.
    Cancelled(i32),
    /// The timeout ended the program.
    TimedOut,
}

impl Outcome {
    pub fn exit_code(self) -> i32 {
        match self {
            Outcome::Exited(code) => code,
            Outcome::Killed(signal) | Outcome::Cancelled(signal) => 128 + signal,
            Outcome::TimedOut => EXIT_TIMEOUT,
        }
    }

    pub fn status(self) -> JobStatus {
        match self {
            Outcome::Exited(0) => JobStatus::Succeeded,
            Outcome::Exited(_) | Outcome::Killed(_) => JobStatus::Failed,
            Outcome::Cancelled(_) => JobStatus::Canceled,
            Outcome::TimedOut => JobStatus::TimedOut,
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

/// Runs the plan to its end and reports how it ended. Output goes to jobenv's stdout/stderr.
pub async fn run(plan: &Plan, options: &RunOptions) -> Result<Outcome, Error> {
    // Handlers go in before the spawn, so no signal is lost in between; after exec the program
    // starts with default dispositions again.
    let install = |kind, name| signal(kind).map_err(|e| Error::io(format!("cannot handle {name}"), e));
    let mut sigterm = install(SignalKind::terminate(), "SIGTERM")?;
    let mut sigint = install(SignalKind::interrupt(), "SIGINT")?;
    let mut sighup = install(SignalKind::hangup(), "SIGHUP")?;
    prctl::set_child_subreaper(true).map_err(|e| Error::sys("cannot become a child subreaper", e))?;
    // A cancel that came while jobenv validated and took its locks: the program never starts.
    if let Some(signal) = crate::signals::pending() {
        crate::signals::log_cancelled_before_start(signal);
        return Ok(Outcome::Cancelled(signal as i32));
    }
    // From here on the handlers above take them (on this thread; the threads started so far
    // keep them held, so none of them is interrupted).
    crate::signals::release();

    let me = getpid();
    let env: Vec<(&str, &str)> = plan.env.iter().map(|(key, var)| (key.as_str(), var.value.as_str())).collect();
    // Leading its process group (a Windmill job), jobenv keeps the program in it, so the
    // worker's group SIGKILL takes everything; otherwise the program gets a group of its own.
    let own_group = getpgrp() != me;
    let spawned = spawn::spawn(&plan.argv, &env, own_group).map_err(|source| Error::Spawn { program: plan.argv[0].clone().into(), source })?;
    let program = spawned.pid;
    options.events.program_spawned(program.as_raw(), plan);
    let events = options.events.clone();
    let mut reaper = reaper::start(program, move || events.program_exited());

    // Built while the program starts: it does not delay the exec.
    let redactor = Redactor::new(&plan.secrets);
    let (done_tx, done_rx) = mpsc::channel();
    let stdout = pump::own_stream(std::io::stdout()).map_err(|e| Error::io("cannot duplicate stdout", e))?;
    let stderr = pump::own_stream(std::io::stderr()).map_err(|e| Error::io("cannot duplicate stderr", e))?;
    let (stdout_tap, stderr_tap) = (options.events.tap(Level::Info), options.events.tap(Level::Warning));
    pump::start("stdout", spawned.stdout, stdout, redactor.clone(), stdout_tap, done_tx.clone());
    pump::start("stderr", spawned.stderr, stderr, redactor, stderr_tap, done_tx);

    let timeout = async {
        match options.timeout {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        status = &mut reaper.program => Outcome::from_wait(status.expect("the reaper reports the program's status")),
        _ = sigterm.recv() => Outcome::Cancelled(Signal::SIGTERM as i32),
        _ = sigint.recv() => Outcome::Cancelled(Signal::SIGINT as i32),
        _ = sighup.recv() => Outcome::Cancelled(Signal::SIGHUP as i32),
        _ = timeout => Outcome::TimedOut,
    };

    match outcome {
        Outcome::Cancelled(signal) => {
            let name = Signal::try_from(signal).map_or("a signal", Signal::as_str);
            tracing::warn!("received {name}: stopping the program tree (grace {:?})", options.grace);
            terminate_tree(me, options.grace, &mut reaper.tree_gone).await;
        }
        Outcome::TimedOut => {
            tracing::warn!("timeout of {:?} reached: stopping the program tree (grace {:?})", options.timeout.unwrap_or_default(), options.grace);
            terminate_tree(me, options.grace, &mut reaper.tree_gone).await;
        }
        Outcome::Exited(_) | Outcome::Killed(_) => {
            // The program is gone; whatever it left running is stopped the same way, so a
            // finished job leaves nothing behind. Normally the reaper reports at once that no
            // child is left; if not, /proc decides (a zombie not yet reaped is not left behind).
            let reaped = tokio::time::timeout(Duration::from_millis(50), reaper.tree_gone.wait_for(|gone| *gone)).await.is_ok();
            if !reaped && !proctree::live_descendants(me).is_empty() {
                tracing::warn!("the program exited but left processes running: stopping them");
                terminate_tree(me, options.grace, &mut reaper.tree_gone).await;
            }
        }
    }

    // Every descendant is gone, so every write end of the pipes is closed: the pumps reach end
    // of file. The bound only guards against a descriptor passed to an unrelated process.
    let _ = tokio::time::timeout(Duration::from_secs(2), reaper.tree_gone.wait_for(|gone| *gone)).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        if done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_err() {
            tracing::warn!("program output is still open after the program tree ended; not waiting for it");
            break;
        }
    }
    Ok(outcome)
}

/// SIGTERM to every live descendant, up to `grace` for them to go, then SIGKILL until none is
/// left. Descendants that appear during the grace period get their SIGTERM too.
async fn terminate_tree(me: Pid, grace: Duration, tree_gone: &mut watch::Receiver<bool>) {
    let deadline = Instant::now() + grace;
    let mut warned = HashSet::new();
    loop {
        let live = proctree::live_descendants(me);
        if live.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        for process in live {
            if warned.insert(process) {
                process.signal(Signal::SIGTERM);
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(20), tree_gone.wait_for(|gone| *gone)).await;
    }
    let mut reported = false;
    // Bounded so a process that cannot be killed (uninterruptible sleep) cannot hang jobenv
    // forever; 10 s is far beyond what SIGKILL takes.
    for _ in 0..1000 {
        let live = proctree::live_descendants(me);
        if live.is_empty() {
            return;
        }
        if !reported {
            tracing::warn!("{} process(es) still running after the grace period: sending SIGKILL", live.len());
            reported = true;
        }
        for process in live {
            process.signal(Signal::SIGKILL);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::error!("processes of the program tree survived SIGKILL for 10 s");
}
