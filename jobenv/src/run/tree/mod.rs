//! The program tree, made at step 7 of a job (the spine: [`crate::job`]), run in and stopped at
//! step 9, and stopped for a deploy whose jobenv is gone (`record::orphans`, at step 7 and by
//! `recover` and `drain`): every process a deploy starts, how the program enters it, how jobenv knows
//! whether any of it still runs, and how it is stopped. Two kinds, chosen once per run
//! ([`site`]):
//!
//! - a [`Cgroup`] of the deploy's own, created under jobenv's cgroup (cgroup v2): the program
//!   is placed in it before it execs, so everything it starts is in it, whatever it does with
//!   its descriptors, sessions or parents; "still runs" is `cgroup.events`' `populated`, and a
//!   later run or `recover` can find it after jobenv is gone;
//! - a [`ProcTree`], where there is no writable cgroup v2 (the fallback): jobenv's descendants
//!   by parent pid in `/proc` (jobenv is a child subreaper, so they stay its descendants while
//!   it lives), which end with jobenv.
//!
//! Either is stopped by the same ladder ([`ProgramTree::stop`]): SIGTERM to every process of
//! the tree, the grace, then SIGKILL until none is left. jobenv never signals a process group:
//! its parent's, or a sibling's in a pipeline, must never be hit.

mod cgroup;
mod guard;
mod hierarchy;
mod proc_walk;

use std::collections::HashSet;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

pub use crate::process::Process;
use crate::settings::Containment;
// The program tree's face: what the spine, the run and the record use of its parts.
pub use cgroup::Cgroup;
pub(crate) use guard::{Deadline, Guard, start as start_guard};
pub(crate) use hierarchy::{deploy_name, is_deploy_cgroup};
pub use proc_walk::ProcTree;

/// How often a stop looks again whether the tree is gone.
const POLL: Duration = Duration::from_millis(10);
/// How long SIGKILL is repeated before a stop gives up: a process in uninterruptible sleep must
/// not hang jobenv forever, and 10 s is far beyond what SIGKILL takes.
const KILL_BOUND: Duration = Duration::from_secs(10);

pub trait ProgramTree: Send + Sync + 'static {
    /// What the program's process does between fork and exec to enter the tree.
    fn place(&self) -> Placement;

    /// No process of the tree runs (a zombie waiting to be reaped does not count).
    fn is_empty(&self) -> bool;

    /// The processes of the tree now.
    fn members(&self) -> Vec<Process>;

    /// SIGKILL to every process of the tree.
    fn kill(&self);

    /// SIGTERM to every process of the tree (those that appear meanwhile get theirs too), up to
    /// `grace` for them to go, then SIGKILL until none is left. Blocks until the tree is empty,
    /// or SIGKILL failed for `KILL_BOUND`.
    fn stop(&self, grace: Duration) -> Stopped
    where
        Self: Sized,
    {
        self.stop_by(grace, &|| None)
    }

    /// [`ProgramTree::stop`], with SIGKILL no later than what `kill_by` says whenever it is
    /// asked (cluster mode: before the run's leases can expire, see `run::lease`).
    fn stop_by(&self, grace: Duration, kill_by: &dyn Fn() -> Option<Instant>) -> Stopped
    where
        Self: Sized,
    {
        stop_within(&[(self as &dyn ProgramTree, grace)], kill_by)[0]
    }
}

/// Stops several trees at once, each with its own grace, as [`ProgramTree::stop`] stops one:
/// under one deadline (the longest grace, then SIGKILL for up to `KILL_BOUND`), not one after
/// the other. Returns what was done to each, in order.
pub fn stop_together(trees: &[(&dyn ProgramTree, Duration)]) -> Vec<Stopped> {
    stop_within(trees, &|| None)
}

/// [`stop_together`], with SIGKILL to every tree no later than `kill_by` (asked at every look,
/// so that it can move).
fn stop_within(trees: &[(&dyn ProgramTree, Duration)], kill_by: &dyn Fn() -> Option<Instant>) -> Vec<Stopped> {
    let start = Instant::now();
    let mut stopped = vec![
        Stopped {
            signalled: 0,
            killed: 0,
            empty: false
        };
        trees.len()
    ];
    let mut signalled: Vec<HashSet<Process>> = vec![HashSet::new(); trees.len()];
    // Since when each tree gets SIGKILL.
    let mut killing: Vec<Option<Instant>> = vec![None; trees.len()];
    // Still being stopped: neither empty nor given up on.
    let mut stopping = vec![true; trees.len()];
    while stopping.iter().any(|&s| s) {
        let now = Instant::now();
        let bound_passed = kill_by().is_some_and(|at| now >= at);
        for (i, &(tree, grace)) in trees.iter().enumerate() {
            if !stopping[i] {
                continue;
            }
            if tree.is_empty() {
                stopped[i].empty = true;
                stopping[i] = false;
            } else if killing[i].is_none() && start.elapsed() < grace && !bound_passed {
                for process in tree.members() {
                    if signalled[i].insert(process) {
                        process.signal(Signal::SIGTERM);
                    }
                }
            } else if killing[i].is_some_and(|since| since.elapsed() >= KILL_BOUND) {
                tracing::error!("processes of the program tree survived SIGKILL for {KILL_BOUND:?}");
                stopping[i] = false;
            } else {
                if killing[i].is_none() {
                    killing[i] = Some(now);
                    let left = tree.members().len();
                    if left > 0 && start.elapsed() < grace {
                        tracing::warn!(
                            "{left} process(es) still running {:?} into the grace period: sending SIGKILL, before this run's leases can expire",
                            Duration::from_millis(start.elapsed().as_millis() as u64)
                        );
                    } else if left > 0 {
                        tracing::warn!("{left} process(es) still running after the grace period: sending SIGKILL");
                    }
                    stopped[i].killed = left.max(1);
                }
                tree.kill();
            }
        }
        if stopping.iter().any(|&s| s) {
            std::thread::sleep(POLL);
        }
    }
    for (stopped, signalled) in stopped.iter_mut().zip(&signalled) {
        stopped.signalled = signalled.len();
    }
    stopped
}

/// What a stop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Processes that got SIGTERM.
    pub signalled: usize,
    /// Processes still running after the grace, which got SIGKILL.
    pub killed: usize,
    /// No process is left.
    pub empty: bool,
}

/// What the child does just before it execs to enter the program tree: nothing (the /proc walk
/// follows jobenv's descendants), or write `0` (itself) into a cgroup's `cgroup.procs`, opened
/// before the fork. Async-signal-safe: one `write` on a descriptor prepared before the fork.
///
/// In cluster mode the child then looks at the tree's guard's deadline ([`guard::Gate`]) and,
/// once it passed, kills itself instead of running the program: a jobenv frozen between its
/// last look at its leases and its program's start would otherwise start it after they ran out
/// (the guard killed what was in the cgroup at the deadline: nothing yet).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub(super) procs: Option<RawFd>,
    gate: Option<guard::Gate>,
}

impl Placement {
    pub const fn new(procs: Option<RawFd>) -> Placement {
        Placement { procs, gate: None }
    }

    /// The guard's deadline, looked at once the child is in the tree (see above).
    pub fn guarded(self, gate: Option<guard::Gate>) -> Placement {
        Placement { gate, ..self }
    }

    pub fn enter(self) -> io::Result<()> {
        let Some(procs) = self.procs else { return Ok(()) };
        // SAFETY: a write of a static buffer to a descriptor the parent opened and keeps open
        // until the child has exec'd.
        let written = unsafe { nix::libc::write(procs, b"0".as_ptr().cast(), 1) };
        if written != 1 {
            return Err(io::Error::last_os_error());
        }
        // In the cgroup first, then the look: a deadline that passes after it finds the child
        // in the cgroup, which the guard kills then.
        if self.gate.is_some_and(guard::Gate::passed) {
            // SAFETY: raise(3) is async-signal-safe; SIGKILL ends the child here, before it
            // execs, and jobenv's reaper sees a program killed once its leases ran out.
            unsafe { nix::libc::raise(nix::libc::SIGKILL) };
        }
        Ok(())
    }
}

/// The tree of one deploy, of the kind chosen for it.
pub enum Tree {
    Cgroup(Cgroup),
    Proc(ProcTree),
}

/// Where a deploy's tree is to be, chosen once ([`site`]) before it is made ([`Site::make`]):
/// a cgroup's directory is recorded first, so that no cgroup exists that a later run could not
/// find, whenever this jobenv dies.
pub struct Site {
    containment: Containment,
    cgroup: Option<PathBuf>,
}

/// The site of a deploy's tree: a new cgroup `name` under jobenv's own, or the /proc walk where
/// there is no writable cgroup v2 (said once, at debug level) or the node asks for it. `Err`
/// when the node asks for a cgroup and there is none.
pub fn site(containment: Containment, name: &str) -> Result<Site, String> {
    if containment == Containment::Proc {
        tracing::debug!("the program tree is jobenv's descendants in /proc, as JOBENV_CONTAINMENT=proc asks");
        return Ok(Site {
            containment,
            cgroup: None,
        });
    }
    match hierarchy::own_cgroup() {
        Ok(own) => Ok(Site {
            containment,
            cgroup: Some(own.join(name)),
        }),
        Err(why) => Site {
            containment,
            cgroup: None,
        }
        .fall_back(why),
    }
}

impl Site {
    /// The directory of the cgroup to be made, if it is one.
    pub fn location(&self) -> Option<&Path> {
        self.cgroup.as_deref()
    }

    /// Makes the tree; a cgroup, for `owner` (the state directory's uid: see
    /// [`Cgroup::create`]).
    pub fn make(self, owner: u32) -> Result<Tree, String> {
        let Some(dir) = &self.cgroup else {
            return Ok(Tree::Proc(ProcTree::of_this_process()));
        };
        match Cgroup::create(dir, owner) {
            Ok(cgroup) => {
                tracing::debug!("the program runs in the cgroup {}", dir.display());
                Ok(Tree::Cgroup(cgroup))
            }
            Err(why) => self.fall_back(why)?.make(owner),
        }
    }

    fn fall_back(self, why: String) -> Result<Site, String> {
        if self.containment == Containment::Cgroup {
            return Err(why);
        }
        tracing::debug!("no cgroup for the program ({why}): the program tree is jobenv's descendants in /proc");
        Ok(Site { cgroup: None, ..self })
    }
}
