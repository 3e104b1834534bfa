//! `status`: journal entries as JSON, one job's or all of them. Reads only: a node where no job
//! ran yet has no journal, and `status` makes none.

use crate::cli::StatusArgs;
use crate::error::{Error, Problem};
use crate::record::{self, Journal};

use super::output::{JsonArray, json_line, print};
use super::{Exit, as_owner, journal_refusal};

pub(crate) fn status(args: StatusArgs) -> Result<Exit, Error> {
    // A job id names a file in the journal: never a path that leaves it.
    if let Some(id) = args.job_id.as_ref().filter(|id| !record::is_valid_job_id(id)) {
        return Err(Problem::InvalidJobId(id.clone()).into());
    }
    let dir = args.state.dir();
    if let Err(exit) = as_owner(&dir) {
        return Ok(exit);
    }
    let journal = Journal::at(&dir).map_err(|source| journal_refusal(&dir, source))?;
    let Some(id) = &args.job_id else {
        let Some(journal) = journal else {
            return Ok(print(json_line(&Vec::<record::Entry>::new()).as_bytes()));
        };
        // Every entry, printed as it is read: the journal may hold more than fits in memory.
        let mut printed = JsonArray::new();
        let listed = journal.for_each_entry_by_start(|entry| printed.push(&entry));
        let printed = printed.finish();
        listed.map_err(|source| journal_refusal(&dir, source))?;
        return Ok(printed);
    };
    let entry = match journal {
        None => None,
        Some(journal) => journal
            .read(id)
            .map_err(|source| journal_refusal(&dir, source.into()))?,
    };
    match entry {
        Some(entry) => Ok(print(json_line(&entry).as_bytes())),
        None => {
            tracing::error!("no journal entry for job {id}");
            Ok(Exit::NoEntry)
        }
    }
}
