//! `schema`: a JSON Schema of the front-end contract.

use crate::cli::{SchemaArgs, SchemaName};
use crate::error::Error;
use crate::schema;

use super::Exit;
use super::output::print;

pub(crate) fn schema(args: SchemaArgs) -> Result<Exit, Error> {
    let generated = match args.what {
        SchemaName::Payload => schema::of_node(&args.node.settings()).map_err(Error::from)?,
        SchemaName::Result => schema::result(),
        SchemaName::EventJobenv => schema::event_jobenv(),
        SchemaName::EventDd0012 => schema::event_dd0012(),
        SchemaName::JournalEntry => schema::journal_entry(),
    };
    Ok(print(schema::text(&generated).as_bytes()))
}
