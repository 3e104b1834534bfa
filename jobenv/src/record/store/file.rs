//! The store of one node: the journal in its state directory (see [`Journal`]). The node-local
//! locks the run takes are the whole of one run per job id and one deploy per namespace.

use std::time::Duration;

use super::{Claim, Store};
use crate::cancel::Cancel;
use crate::error::Refusal;
use crate::record::entry::{Entry, Known, Request};
use crate::record::journal::Journal;
use crate::run::LeaseWatch;

pub struct FileStore {
    journal: Journal,
}

impl FileStore {
    pub fn new(journal: Journal) -> Self {
        FileStore { journal }
    }
}

impl Store for FileStore {
    fn local(&self) -> &Journal {
        &self.journal
    }

    /// The entry; an attempt is live while its jobenv runs.
    fn claim_job(&self, job_id: &str, _asked: &Request<'_>, _cancel: &mut Cancel) -> Result<Known, Refusal> {
        let entry = self.journal.read(job_id).map_err(|e| e.refusal(self.journal.path()))?;
        Ok(Known::local(entry))
    }

    /// The namespace's node-local lock, which the run holds already.
    fn claim_namespace(
        &self,
        _namespace: &str,
        _job_id: Option<&str>,
        _wait: Duration,
        _cancel: &mut Cancel,
    ) -> Result<Claim, Refusal> {
        Ok(Claim::local())
    }

    fn write_running(&self, entry: &Entry) -> Result<(), Refusal> {
        self.journal.write(entry).map_err(|e| self.journal.refusal(e))
    }

    fn write_end(&self, entry: &Entry) -> std::io::Result<()> {
        self.journal.write_end(entry)
    }

    fn leases(&self) -> Option<LeaseWatch> {
        None
    }
}
