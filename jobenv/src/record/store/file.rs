//! The store of one node: the journal in its state directory (see [`Journal`]). The node-local
//! locks the run takes are the whole of one run per job id and one deploy per namespace.

use std::time::Duration;

use super::{Claim, Refused, Store};
use crate::cancel::Cancel;
use crate::record::entry::{Entry, Known, Request};
use crate::record::journal::Journal;
use crate::run::lease::LeaseWatch;

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
    fn claim_job(&self, job_id: &str, _asked: &Request<'_>, _cancel: &mut Cancel) -> Result<Known, Refused> {
        Ok(Known::local(self.journal.read(job_id).map_err(Refused::of_read)?))
    }

    /// The namespace's node-local lock, which the run holds already.
    fn claim_namespace(
        &self,
        _namespace: &str,
        _job_id: Option<&str>,
        _wait: Duration,
        _cancel: &mut Cancel,
    ) -> Result<Claim, Refused> {
        Ok(Claim::local())
    }

    fn write_running(&self, entry: &Entry) -> Result<(), Refused> {
        self.journal.write(entry).map_err(Refused::Journal)
    }

    fn write_end(&self, entry: &Entry) -> std::io::Result<()> {
        self.journal.write_end(entry)
    }

    fn leases(&self) -> Option<LeaseWatch> {
        None
    }
}
