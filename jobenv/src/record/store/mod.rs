//! Where a job's record lives, and who may act on a job id and on a namespace: the seam between
//! one node and a cluster of them, chosen once per run ([`open`], step 2 of the spine:
//! [`crate::job`]), and acted on at steps 4 and 6 to 10.
//!
//! - [`file::FileStore`]: the node's own journal in the state directory; the node-local locks
//!   (`flock`s, taken by the run itself) are all there is to one deploy per namespace and one
//!   run per job id. Today's behaviour, and the default.
//! - [`postgres::PgStore`] (cluster mode, `--cluster-dsn-file`): the same decisions, made on
//!   tables that every node shares, with the job id and the namespace held as leases that expire
//!   unless their holder renews them. The node's own journal stays its record.
//!
//! Either way the node-local locks are taken first: they serialise the runs of one node, and
//! what a deploy of this node left running is stopped under them (`record::orphans`).

pub mod file;
pub mod postgres;

use std::time::Duration;

use super::entry::{Entry, Known, Request};
use super::journal::Journal;
use crate::cancel::Cancel;
use crate::error::{Error, Refusal};
use crate::run::LeaseWatch;
use crate::run::tree::{self, Tree};
use crate::settings::RunSettings;

/// A run's journal and its claims.
pub trait Store {
    /// This node's own journal: its locks, its record of program trees, its drain mark.
    fn local(&self) -> &Journal;

    /// Step 4, under the job's node-local lock: what the journal knows of `job_id`, for a run
    /// that asks `asked` of it. A store with leases holds the job id's lease from here on,
    /// unless the job already ended (then there is nothing to hold: it is replayed), its entry
    /// is of another request (refused: a lease taken for it would end the run that holds the
    /// job id), or another node holds it (refused as busy).
    fn claim_job(&self, job_id: &str, asked: &Request<'_>, cancel: &mut Cancel) -> Result<Known, Refusal>;

    /// Step 7, under the namespace's node-local locks: the namespace, for `job_id`'s deploy,
    /// waiting up to `wait` for another node's deploy of it. Held until the returned claim is
    /// dropped.
    fn claim_namespace(
        &self,
        namespace: &str,
        job_id: Option<&str>,
        wait: Duration,
        cancel: &mut Cancel,
    ) -> Result<Claim, Refusal>;

    /// Step 8: the `running` entry, before the program starts; if it cannot be written,
    /// nothing runs.
    fn write_running(&self, entry: &Entry) -> Result<(), Refusal>;

    /// Step 10: the end of the attempt. An error means the end is not recorded where the next
    /// run of the job id would look (see [`Journal::write_end`]).
    fn write_end(&self, entry: &Entry) -> std::io::Result<()>;

    /// The leases the program's supervisor must watch, when the store has any.
    fn leases(&self) -> Option<LeaseWatch>;

    /// Step 9, before the program starts: the run's claims lapsed while it waited (leases not
    /// renewed in time): the program is not started.
    fn claims_lost(&self) -> bool {
        self.leases().is_some_and(|lease| lease.is_lost())
    }

    /// Step 7, once the program tree is made: what must kill the tree by itself when this
    /// jobenv cannot (see `run::tree::guard`), when the store's claims can expire.
    fn guard(&self, _tree: &Tree) -> Result<Option<tree::Guard>, Error> {
        Ok(None)
    }

    /// Secrets of the store itself (the shared journal's DSN), as the redactor's needles: they
    /// are redacted from the program's output like the node's, as the program runs as the user
    /// that can read them.
    fn redactions(&self) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// The store of a run: the node's own journal, or with cluster mode the shared one beside it.
pub fn open(journal: Journal, settings: &RunSettings, holder: &str) -> Result<Box<dyn Store>, Error> {
    match &settings.cluster {
        None => Ok(Box::new(file::FileStore::new(journal))),
        Some(cluster) => Ok(Box::new(postgres::PgStore::open(journal, cluster, holder)?)),
    }
}

/// A claim of a namespace; dropping it lets the namespace go.
#[must_use]
pub struct Claim {
    release: Option<Box<dyn FnOnce()>>,
}

impl Claim {
    /// The claim of a store without leases: the node-local lock is all there is.
    pub fn local() -> Claim {
        Claim { release: None }
    }

    pub(super) fn releasing(release: impl FnOnce() + 'static) -> Claim {
        Claim {
            release: Some(Box::new(release)),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}
