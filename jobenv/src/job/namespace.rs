//! Step 7 of a run: the namespace. One deploy per namespace: jobenv's own lock of it, what an
//! earlier deploy of it left running without its jobenv stopped first, the program tree's lock,
//! and the program tree itself (a cgroup of its own, recorded, or jobenv's descendants).

use std::os::fd::OwnedFd;

use super::{Run, Stop};
use crate::cancel::Cancel;
use crate::error::{Error, Refusal};
use crate::plan::Plan;
use crate::process;
use crate::record::store::{Claim, Store};
use crate::record::{self, Attempt, Journal, Lock, Recorded, TreeRecord};
use crate::run::tree::{self, Tree};

/// What a deploy holds of its namespace (step 7): the program tree it runs in and the record of
/// where that is; the two namespace locks, jobenv's own and the program tree's, with the
/// descriptor of the latter the program tree gets. The locks are held until jobenv exits
/// (dropping a [`record::Held`] unlocks the file for every descriptor of it); the record goes
/// before them, once the tree's cgroup is gone (fields drop in this order).
pub(super) struct NamespaceLocks {
    pub(super) tree: Tree,
    /// Cluster mode: kills the tree's cgroup if jobenv dies before it is done (see
    /// `run::tree::guard`) or cannot kill it by the time its leases run out; told it is done
    /// once the tree is gone.
    guard: Option<tree::Guard>,
    _recorded: Option<Recorded>,
    /// The store's claim (a lease, in cluster mode), let go after the tree is gone and before
    /// the node-local locks.
    _shared: Claim,
    _own: record::Held,
    _tree: record::Held,
    pub(super) for_tree: OwnedFd,
}

impl NamespaceLocks {
    /// The guard's deadline, which the supervisor moves on with the leases' renewals.
    pub(super) fn guard_deadline(&self) -> Option<tree::Deadline> {
        self.guard.as_ref().map(tree::Guard::deadline)
    }
}

impl Run<'_> {
    /// Step 7. Holding jobenv's own lock of the namespace, this run stops what an earlier deploy
    /// of it left running in its cgroup; an earlier attempt of this very job is recorded in
    /// `earlier` (step 8 writes it). The program tree keeps a lock of its own (see
    /// `run::spawn::Passed::lock`): held, it means the tree of an earlier deploy whose jobenv
    /// was killed still runs, where no cgroup shows it.
    pub(super) fn namespace_locks(
        &self,
        store: &dyn Store,
        plan: &Plan,
        attempt: Option<u32>,
        earlier: &mut [Attempt],
        cancel: &mut Cancel,
    ) -> Result<NamespaceLocks, Stop> {
        // A stage of the job's trace; an early return (a busy lock) ends it as failed.
        let stage = crate::telemetry::enter(crate::telemetry::Stage::Namespace);
        let (wait, namespace) = (self.settings.lock_timeout, &plan.namespace);
        let deadline = std::time::Instant::now() + wait;
        let journal = store.local();
        let own = journal.acquire(Lock::Namespace(namespace), wait, &self.holder, Some(cancel))?;
        let left = record::stop_left(journal, namespace, &self.holder, self.job_id.as_deref())
            .map_err(|e| journal.refusal(e))?;
        if let Some(left) = left {
            if left.survived {
                return Err(Refusal::NamespaceLocked {
                    namespace: namespace.clone(),
                    holder: format!(
                        "{} process(es) of an earlier deploy, whose jobenv is gone, survived SIGKILL",
                        left.orphans.killed
                    ),
                }
                .into());
            }
            // An earlier attempt of this very job: its entry is this run's to write (step 8).
            if let (Some(id), Some(number)) = (&left.job_id, left.attempt) {
                if self.job_id.as_ref() == Some(id) {
                    record::note_orphans(earlier, number, left.orphans);
                }
            }
        }
        let tree = journal.acquire(Lock::Tree(namespace), wait, &self.holder, Some(cancel))?;
        let for_tree = tree
            .file()
            .try_clone()
            .map_err(|e| Error::io("cannot pass the namespace lock on", e))?;
        // Other nodes' deploys of the namespace: this node's are behind the locks above.
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let shared = store.claim_namespace(namespace, self.job_id.as_deref(), left, cancel)?;
        let (program_tree, recorded) = self.program_tree(journal, namespace, attempt)?;
        let guard = store.guard(&program_tree)?;
        stage.done();
        Ok(NamespaceLocks {
            tree: program_tree,
            guard,
            _recorded: recorded,
            _shared: shared,
            _own: own,
            _tree: tree,
            for_tree: for_tree.into(),
        })
    }

    /// Step 7, the program tree, chosen once: a cgroup of its own, recorded before it is made
    /// (so that a later run finds it whenever this jobenv dies); or the /proc walk.
    fn program_tree(
        &self,
        journal: &Journal,
        namespace: &str,
        attempt: Option<u32>,
    ) -> Result<(Tree, Option<Recorded>), Stop> {
        let me = std::process::id() as i32;
        let name = tree::deploy_name(namespace, me, process::start_time(me).unwrap_or_default());
        let because = if self.settings.cluster.is_some() {
            "cluster mode"
        } else {
            "JOBENV_CONTAINMENT=cgroup"
        };
        let no_cgroup = |why| Refusal::NoCgroup { because, why };
        let site = tree::site(self.settings.containment, &name).map_err(no_cgroup)?;
        let recorded = match site.location() {
            Some(dir) => {
                let record = TreeRecord {
                    cgroup: dir.to_owned(),
                    job_id: self.job_id.clone(),
                    attempt,
                    jobenv_pid: me,
                    grace_ms: self.settings.grace.as_millis() as u64,
                    state_dir: Some(journal.state_dir_id().map_err(|source| journal.refusal(source))?),
                };
                Some(Recorded::write(journal, namespace, &record).map_err(|source| journal.refusal(source))?)
            }
            None => None,
        };
        let owner = journal.owner_uid().map_err(|source| journal.refusal(source))?;
        Ok((site.make(owner).map_err(no_cgroup)?, recorded))
    }
}
