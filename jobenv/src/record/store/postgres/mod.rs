//! Cluster mode (steps 2, 4, 7, 8 and 10 of the spine, [`crate::job`], on a shared journal): the
//! journal's decision and the namespace lock on PostgreSQL, shared by every
//! node whose jobenv is given the same database (`--cluster-dsn-file`). The tables
//! (`schema.sql`, schema `fediversity_jobenv`) hold, per job id, its journal entry and the
//! lease of the run that holds it, and per namespace the lease of the deploy that holds it.
//! The node's own journal and its `flock`s stay: they serialise the runs of one node, keep its
//! record, and cover its program trees (`record::orphans`).
//!
//! # Leases
//!
//! A lease is a row with a holder, an epoch (a fencing token from one sequence) and an expiry
//! that only the database's clock sets: `now() + lease`. A run takes a lease only where
//! `expires_at <= now()` (or where the holder was this node's own jobenv that is gone: the
//! node-local locks the run holds prove that), drawing a new epoch; it renews it every
//! `renew_every` by `UPDATE … SET expires_at = now() + lease WHERE epoch = <mine> AND
//! expires_at > now()`; every write it makes to a held row is fenced the same way, so a stale
//! holder's late write changes nothing. The lease of the job id is taken at step 4 and ends
//! with the terminal entry; the namespace's at step 7, let go after the program tree is gone.
//! A run of a job id whose entry is of another request takes no lease (it is refused).
//!
//! "This node" is [`crate::record::identity`]: the boot id and a random id made once in the
//! state directory, whose locks are the proof. The boot id alone is shared by containers on one
//! host, and a state directory's path may be too: two of them would each take the other's live
//! leases for their own.
//!
//! # Why two nodes never run one namespace at once
//!
//! Let holder H take or last renew its namespace lease by a statement it *sent* at `s` by its
//! own monotonic clock. The database evaluated `now()` after receiving it, so the row's expiry
//! is at least `s + lease` in real time: no newcomer N can take the lease before `s + lease`,
//! because N takes it only when the database's `now()` has passed the expiry, and one row's
//! updates are serialised by its row lock (`INSERT … ON CONFLICT DO UPDATE … WHERE` re-checks the
//! expiry under it), so two newcomers cannot both take it either: each draws its own epoch,
//! and the second one's check sees the first one's expiry.
//!
//! H, for its part, never runs its program past `s + lease`:
//! - its program starts only after the namespace lease was taken (step 7) and the running
//!   entry was written under a live job lease (step 8), with renewals still going on (a run
//!   whose renewals gave up while it waited for a node-local lock starts nothing): a newcomer
//!   cannot hold either then; and its first process, once in the tree's cgroup and before it
//!   execs, kills itself if the time below (`s + lease − 1 s`, the guard's deadline) has
//!   passed: a jobenv frozen between its last look at the leases and the start does not start
//!   the program late;
//! - while the program runs, the supervisor (`run::lease`) watches the oldest renewal `s` of
//!   H's leases by H's clock alone (a renewal stuck in a partition cannot delay it); at
//!   `s + renew_deadline` it stops the program tree: SIGTERM, the grace, SIGKILL;
//! - every stop of the tree, whatever began it (that one, a cancel, the timeout, a lost worker,
//!   `drain`), sends SIGKILL by `s + lease − 1 s` at the latest, `s` moving on with the renewals
//!   that go on during it (`run::lease::LeaseWatch::kill_by`), and at once when a renewal finds
//!   a row taken over or expired; and the grace is at most `lease − renew_deadline − 1 s`
//!   (`settings::Cluster::max_grace`, a longer `--grace` is refused at start), so a stop begun
//!   before the deadline gives its whole grace within that. The 1 s margin holds SIGKILL and
//!   the emptying of the tree, the watchdog's wake-up, and the difference of two clocks' rates
//!   over one lease (ppm);
//! - the tree's guard (`run::tree::guard`), a process of its own that a signal to jobenv does
//!   not reach, kills the tree by the same time by itself: a jobenv frozen (SIGSTOP) renews
//!   nothing and cannot stop its tree, which would run on;
//! - no lease is renewed after the deadline passed.
//!
//! So every moment at which H's program runs lies before the expiry of a lease H holds, and N's
//! program starts only after N took that lease, after that expiry: the two never overlap,
//! whatever the network does (a partitioned H stops on its own; a database that answers late
//! answers a renewal that was sent early). A job id is the same argument with the job lease:
//! no two runs act on one job id's entry at once, and a run that lost the lease finds its
//! fenced writes refused.
//!
//! What it assumes: the database's clock does not jump forward by more than the margin within a
//! lease (a slewing NTP, not a stepping one), and the node as a whole (jobenv and the guard
//! together: a paused VM, a frozen cgroup of the worker) is not stalled across `s + lease − 1 s`
//! while it cannot renew. A SIGKILLed jobenv renews nothing, but its tree does not outlive it
//! (the renewal is tied to the tree's life): its program dies with it (the parent-death
//! signal), and what of the tree left its process group is killed at once by the guard. Without
//! a cgroup (the `/proc` walk) there is no guard: cluster mode refuses it. The deployment's own
//! state lock (OpenTofu's `TF_HTTP_LOCK_ADDRESS`) is the fence that holds at the resource.
//!
//! # The decision
//!
//! As on one node (`record::entry::decide_known`): a result is replayed (from this node's own
//! journal when it has it, which needs no database); a job id whose lease another node holds
//! is waited for up to its grace plus a margin (a re-run that comes while that attempt still
//! stops), then refused; anything else runs as the next attempt, a `running` entry whose
//! lease expired recorded as interrupted (`lease_lost`). A database that cannot be reached
//! before the program starts (each statement tried again for up to the renew deadline) is a
//! node that is not ready (exit 75): nothing runs without the guarantees.
//!
//! # Ends
//!
//! An end is made durable as an intent to hand it on ([`unshared`]) before it is written
//! anywhere, then written to the node's journal and to the shared one: whenever jobenv dies,
//! `recover`, `prune` or the node's next job hands on an end the shared journal did not take;
//! `recover` also hands on an end whose shared row still shows that attempt running.

mod dsn;
mod keeper;
mod tables;
mod unshared;

use std::cell::{Cell, OnceCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Claim, Store};
use crate::cancel::Cancel;
use crate::error::{Error, Refusal};
use crate::record::ending::InterruptedBy;
use crate::record::entry::{Entry, Known, Request};
use crate::record::journal::{JOB_LOCK_WAIT, Journal};
use crate::run::LeaseWatch;
use crate::run::tree::{self, Tree};
use crate::settings::Cluster;
use keeper::{Keeper, Timing};
use tables::{Holder, JobRow, Table};

/// How often a run that waits for a job id or a namespace looks again.
const POLL: Duration = Duration::from_millis(200);
/// How many kept ends a run hands on after its own ([`unshared`]), and in how long all told: a
/// few, so that a run's cost does not grow with what an outage left; `recover` and `prune` hand
/// on the rest.
const HAND_ON_PER_RUN: usize = 8;
const HAND_ON_BUDGET: Duration = Duration::from_secs(1);

pub struct PgStore {
    local: Journal,
    dsn: Arc<dsn::Dsn>,
    timing: Timing,
    me: Holder,
    /// Started by the first statement the run needs: a replay from the node's own journal
    /// needs none.
    keeper: OnceCell<Keeper>,
    /// The job id whose lease the run holds, once claimed.
    job: std::cell::RefCell<Option<String>>,
    /// Whether jobenv said once that it waits for a namespace.
    said_waiting: Cell<bool>,
    /// The database took this run's end: kept ends of earlier runs go along at its end.
    hand_on: Cell<bool>,
}

impl PgStore {
    /// Reads the DSN (a missing file: the node is not ready); connects at the first statement.
    pub fn open(local: Journal, cluster: &Cluster, holder: &str) -> Result<PgStore, Error> {
        let dsn = Arc::new(dsn::read(&cluster.dsn_file, cluster.ca_file.as_deref())?);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        // Read (or made) in the state directory whose locks the run takes: a lease of this
        // identity whose jobenv is gone is this node's, as those locks prove (`record::identity`).
        let node = crate::record::identity::node_identity(&local).map_err(|source| local.refusal(source))?;
        let me = Holder {
            text: format!(
                "{holder} on {}",
                if host.is_empty() { "an unnamed host" } else { &host }
            ),
            node,
        };
        Ok(PgStore {
            local,
            dsn,
            timing: Timing {
                lease: cluster.lease,
                renew_every: cluster.renew_every,
                renew_deadline: cluster.renew_deadline,
            },
            me,
            keeper: OnceCell::new(),
            job: std::cell::RefCell::new(None),
            said_waiting: Cell::new(false),
            hand_on: Cell::new(false),
        })
    }

    fn keeper(&self) -> Result<&Keeper, Refusal> {
        if let Some(keeper) = self.keeper.get() {
            return Ok(keeper);
        }
        let keeper = Keeper::start(Arc::clone(&self.dsn), self.timing)
            .map_err(|e| Refusal::Unreachable(format!("cannot start its thread: {e}")))?;
        Ok(self.keeper.get_or_init(|| keeper))
    }

    /// Runs statements from the main thread, bounded by the renew deadline: before the program
    /// starts no statement may take longer than a renewal could. A database that cannot be
    /// reached (a connection dropped, a restart) is tried again, on a new connection, until
    /// then, as the renewals are: each of these statements may be made twice (a claim whose
    /// answer was lost is this node's own, and taken again under the same locks).
    fn run<T>(&self, op: impl AsyncFn(&mut tokio_postgres::Client) -> Result<T, tables::Failed>) -> Result<T, Refusal> {
        let keeper = self.keeper()?;
        let until = Instant::now() + self.timing.renew_deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match keeper.block_on(keeper.shared.run(left, &op)) {
                Err(Refusal::Unreachable(why)) if Instant::now() + POLL < until => {
                    tracing::debug!("the cluster journal cannot be reached ({why}): trying again");
                    std::thread::sleep(POLL);
                }
                done => return done,
            }
        }
    }

    /// A pause while waiting for a lease: ends early on a cancel, or when the job's own lease
    /// was lost meanwhile.
    fn pause(&self, cancel: &mut Cancel, until: Instant) -> Result<(), Refusal> {
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
        if let Some(cancelled) = cancel.check() {
            return Err(Refusal::Cancelled(cancelled));
        }
        if self.keeper.get().is_some_and(|k| k.shared.is_lost()) {
            return Err(Refusal::Unreachable("this job's lease was lost while it waited".into()));
        }
        Ok(())
    }
}

/// Another node's holder text, as messages show it: it is a row anyone with the role can write.
fn shown(holder: &str) -> String {
    format!("{}, on the cluster journal", holder.escape_debug())
}

impl Store for PgStore {
    fn local(&self) -> &Journal {
        &self.local
    }

    fn claim_job(&self, job_id: &str, asked: &Request<'_>, cancel: &mut Cancel) -> Result<Known, Refusal> {
        // A result is final: this node's own record of it needs no database.
        let local = self.local.read(job_id).map_err(|e| e.refusal(self.local.path()))?;
        if local.as_ref().is_some_and(Entry::is_result) {
            return Ok(Known::local(local));
        }
        let mut until = None;
        loop {
            let sent = Instant::now();
            let lease = self.timing.lease;
            match self.run(async |client| tables::claim_job(client, job_id, asked, &self.me, lease).await)? {
                JobRow::Claimed {
                    epoch,
                    previous,
                    same_node,
                } => {
                    self.keeper()?.shared.hold(Table::Jobs, job_id, epoch, sent);
                    *self.job.borrow_mut() = Some(job_id.to_owned());
                    // A live lease of this node's own is a jobenv of it that is gone; one that
                    // expired is a holder that could not renew, wherever it ran.
                    let gone = if same_node {
                        InterruptedBy::JobenvGone
                    } else {
                        InterruptedBy::LeaseLost
                    };
                    return Ok(Known {
                        entry: previous,
                        live: None,
                        gone,
                    });
                }
                // Refused by the caller, nothing held.
                JobRow::Ended(entry) | JobRow::Another(entry) => {
                    return Ok(Known {
                        entry: Some(entry),
                        live: None,
                        gone: InterruptedBy::LeaseLost,
                    });
                }
                JobRow::Held { holder, entry } => {
                    let until = *until.get_or_insert_with(|| {
                        let wait = entry.as_ref().map_or(JOB_LOCK_WAIT, Entry::stop_wait);
                        tracing::info!(
                            "job {job_id} is held on the cluster journal by {}: waiting up to {wait:?}",
                            holder.escape_debug()
                        );
                        Instant::now() + wait
                    });
                    if Instant::now() >= until {
                        return Err(Refusal::JobRunning {
                            job_id: job_id.to_owned(),
                            holder: shown(&holder),
                        });
                    }
                    self.pause(cancel, until)?;
                }
            }
        }
    }

    fn claim_namespace(
        &self,
        namespace: &str,
        job_id: Option<&str>,
        wait: Duration,
        cancel: &mut Cancel,
    ) -> Result<Claim, Refusal> {
        // A stage of the job's trace; a refusal ends it as failed.
        let stage = crate::telemetry::enter(crate::telemetry::Stage::Lease);
        let until = Instant::now() + wait;
        loop {
            let sent = Instant::now();
            let lease = self.timing.lease;
            match self.run(async |client| tables::claim_namespace(client, namespace, job_id, &self.me, lease).await)? {
                Ok(epoch) => {
                    let keeper = self.keeper()?;
                    keeper.shared.hold(Table::Namespaces, namespace, epoch, sent);
                    let (shared, handle, namespace) =
                        (Arc::clone(&keeper.shared), keeper.handle(), namespace.to_owned());
                    stage.done();
                    return Ok(Claim::releasing(move || {
                        handle.block_on(shared.release(Table::Namespaces, &namespace))
                    }));
                }
                Err(holder) => {
                    if Instant::now() >= until {
                        return Err(Refusal::NamespaceLocked {
                            namespace: namespace.to_owned(),
                            holder: shown(&holder),
                        });
                    }
                    if !self.said_waiting.replace(true) {
                        let wait = Duration::from_secs(wait.as_secs_f64().round() as u64);
                        tracing::info!(
                            "namespace {namespace} is held on the cluster journal by {}: waiting up to {wait:?}",
                            holder.escape_debug()
                        );
                    }
                    self.pause(cancel, until)?;
                }
            }
        }
    }

    fn write_running(&self, entry: &Entry) -> Result<(), Refusal> {
        let keeper = self.keeper()?;
        let Some((epoch, _)) = keeper.shared.held(Table::Jobs, &entry.job_id) else {
            return Err(Refusal::Unreachable(
                "this job's lease was lost before its program started".into(),
            ));
        };
        let sent = Instant::now();
        let lease = self.timing.lease;
        if !self.run(async |client| tables::write_running(client, entry, epoch, lease).await)? {
            return Err(Refusal::Unreachable(
                "this job's lease expired or was taken over before its program started".into(),
            ));
        }
        keeper.shared.renewed(Table::Jobs, &entry.job_id, sent);
        // The shared entry first: a node's own entry of an attempt that never started would be
        // taken for an interrupted one.
        self.local.write(entry).map_err(|e| self.local.refusal(e))
    }

    /// The end of an attempt with a result: first the intent to hand it on (the attempt and
    /// its lease's epoch, [`unshared`], synced), then the node's own entry (with its fallback,
    /// see [`Journal::write_end`]), then the shared one, retried while the lease is still this
    /// run's; the intent goes once the database took it. Whenever this jobenv dies from the
    /// first write on (Windmill's group SIGKILL, the OOM killer, power), an end in this node's
    /// journal has its intent beside it, and `recover`, `prune` or the node's next job hands it
    /// on: a result that only this node knew would be lost to the others, who would run the job
    /// again once its lease expired. One the database does not take while the lease lasts stays
    /// kept the same way; after an end that it took, this run hands on a few kept ones. An
    /// attempt without a result of its own (interrupted) loses nothing when its shared entry
    /// stays `running`: its lease expires and the next run records it interrupted.
    fn write_end(&self, entry: &Entry) -> std::io::Result<()> {
        let job_id = self.job.borrow_mut().take();
        let held = job_id
            .as_deref()
            .and_then(|id| Some((self.keeper.get()?, id)))
            .and_then(|(keeper, id)| Some((keeper, id, keeper.shared.held(Table::Jobs, id)?)));
        let Some((keeper, job_id, (epoch, expires))) = held else {
            return self.local.write_end(entry);
        };
        let intent = if entry.is_result() {
            unshared::keep(&self.local, entry, epoch)
                .inspect_err(|error| tracing::error!("the end of job {job_id} cannot be kept to hand it on: {error}"))
        } else {
            Ok(())
        };
        let local = self.local.write_end(entry);
        let until = if entry.is_result() {
            expires
                .checked_sub(crate::settings::LEASE_STOP_MARGIN)
                .unwrap_or(expires)
        } else {
            Instant::now()
        };
        // Each try within a renewal's bound; an attempt without a result tries once, briefly.
        let limit = if entry.is_result() {
            self.timing.renew_deadline.min(Duration::from_secs(2))
        } else {
            Duration::from_secs(1)
        };
        let shared = loop {
            match keeper.block_on(
                keeper
                    .shared
                    .run(limit, async |client| tables::write_end(client, entry, epoch).await),
            ) {
                Ok(true) => break Ok(()),
                Ok(false) => break Err(format!("another run took job {job_id} over on the cluster journal")),
                Err(refusal) if Instant::now() >= until => break Err(keeper::why(refusal)),
                Err(_) => std::thread::sleep(POLL),
            }
        };
        keeper.shared.forget(Table::Jobs, job_id);
        match shared {
            Ok(()) => {
                if entry.is_result() && intent.is_ok() {
                    unshared::taken(&self.local, job_id);
                }
                // The database answers: ends kept by earlier runs go along, once this run has
                // let its leases go (see `Drop`).
                self.hand_on.set(true);
                local
            }
            Err(why) if !entry.is_result() => {
                tracing::warn!(
                    "the end of job {job_id} is not on the cluster journal ({why}): once its lease expires, the next run records it interrupted"
                );
                local
            }
            Err(why) => {
                local?;
                intent?;
                Err(std::io::Error::other(format!(
                    "the cluster journal did not take it ({why}); this node keeps it and hands it on when it can (its next job, recover, prune), but until then another node may run the job again once its lease expired"
                )))
            }
        }
    }

    /// A lease that a dead jobenv no longer renews must not be outlived by its tree: a cgroup
    /// gets a guard (the /proc walk has none, and cluster mode refuses it).
    fn guard(&self, tree: &Tree) -> Result<Option<tree::Guard>, Error> {
        let (Tree::Cgroup(cgroup), Some(_)) = (tree, self.leases()) else {
            return Ok(None);
        };
        match tree::start_guard(cgroup.dir()).map_err(|e| Error::io("cannot start the guard of the program tree", e))? {
            Some(guard) => Ok(Some(guard)),
            None => {
                let why =
                    "the kernel has no cgroup.kill (Linux 5.14 and later), which the program tree's guard needs".into();
                Err(Refusal::NoCgroup {
                    because: "cluster mode",
                    why,
                }
                .into())
            }
        }
    }

    fn redactions(&self) -> Vec<Vec<u8>> {
        let mut warnings = Vec::new();
        crate::run::redact::redaction_needles(self.dsn.secrets().map(|s| ("the cluster DSN", s)), &mut warnings)
    }

    fn leases(&self) -> Option<LeaseWatch> {
        let keeper = self.keeper.get()?;
        Some(LeaseWatch {
            renewals: keeper.shared.subscribe(),
            renew_deadline: self.timing.renew_deadline,
            lease: self.timing.lease,
        })
    }
}

/// `prune` in cluster mode: the shared journal's rows of attempts that ended more than `retain`
/// ago (the node's own entries are pruned beside it). Any node's `prune` may do it: each deletes
/// what has ended, by the database's clock. Returns how many rows went.
pub fn prune(dsn_file: &std::path::Path, ca_file: Option<&std::path::Path>, retain: Duration) -> Result<u64, Error> {
    let keeper = upkeep_keeper(dsn_file, ca_file)?;
    let pruned = keeper.block_on(keeper.shared.run(UPKEEP_TIMING.renew_deadline, async |client| {
        tables::prune(client, retain).await
    }))?;
    Ok(pruned)
}

/// `recover` and `prune` in cluster mode: hands on every end this node keeps that the cluster
/// journal did not take ([`unshared`]), and with `reconcile` (`recover`) every end of this
/// node's journal whose shared row still shows that attempt running. Returns how many it took;
/// a database that does not answer is an error (the ends stay kept).
pub fn hand_on_kept(
    journal: &Journal,
    dsn_file: &std::path::Path,
    ca_file: Option<&std::path::Path>,
    reconcile: bool,
) -> Result<usize, Error> {
    let keeper = upkeep_keeper(dsn_file, ca_file)?;
    // As long as it takes, each statement within a renewal's bound.
    let each = UPKEEP_TIMING.renew_deadline;
    let mut handed = unshared::hand_on(journal, &keeper, usize::MAX, Duration::MAX, each);
    if reconcile && handed.unreachable.is_none() {
        let reconciled = unshared::reconcile(journal, &keeper, each);
        handed.taken += reconciled.taken;
        handed.left += reconciled.left;
        handed.unreachable = reconciled.unreachable;
    }
    match handed.unreachable {
        Some(why) => Err(Refusal::Unreachable(format!("{why}; {} kept end(s) wait for it", handed.left)).into()),
        None => Ok(handed.taken),
    }
}

/// No lease is held by `prune` or `recover`: the renewal times only bound the statements.
const UPKEEP_TIMING: Timing = Timing {
    lease: Duration::from_secs(15),
    renew_every: Duration::from_secs(5),
    renew_deadline: Duration::from_secs(10),
};

fn upkeep_keeper(dsn_file: &std::path::Path, ca_file: Option<&std::path::Path>) -> Result<Keeper, Error> {
    let dsn = Arc::new(dsn::read(dsn_file, ca_file)?);
    Keeper::start(dsn, UPKEEP_TIMING).map_err(|e| Refusal::Unreachable(format!("cannot start its thread: {e}")).into())
}

impl Drop for PgStore {
    /// The job id's lease of a run that ended before its terminal entry (refused, replayed,
    /// cancelled) is let go; so is anything else still held.
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.get() {
            keeper.block_on(keeper.shared.release_all());
            // After the leases went: handing kept ends on holds up no other run, and no renewal.
            if self.hand_on.get() {
                unshared::hand_on(&self.local, keeper, HAND_ON_PER_RUN, HAND_ON_BUDGET, HAND_ON_BUDGET);
            }
        }
    }
}
