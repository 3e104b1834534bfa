//! fediversity-jobenv: the one runner of deployment programs on a node.
//!
//! A job's path through jobenv is the spine of `job`: the numbered steps of `run`, from its
//! start to its exit. They are the one numbering of that path (each folder's header says which of
//! them it serves):
//!
//! 1. cancel: the cancel signals caught (`cancel`);
//! 2. journal, 3. job lock, 4. decision: the job's record (`record`: the journal, its locks,
//!    the store, local or shared);
//! 5. inputs: everything the job is made of, read and checked (`input`);
//! 6. plan: the merge of the checked inputs into the program's exact argv and environment, a
//!    pure function, which `env` prints (`plan`); progress events to a front-end
//!    (`events`, optional) from here to the last step;
//! 7. namespace lock: one deploy per namespace (`job::namespace`, with `record`'s locks and
//!    orphans and `run`'s program tree);
//! 8. running entry (`record`);
//! 9. program: the shell's evaluation and its cache (`evaluation`), then the program run in
//!    its program tree, its output through the redactor, the whole tree stopped on a cancel, the
//!    timeout or a lost worker (`run`);
//! 10. terminal entry (`record`);
//! 11. report: `result.json` (`record`) and the final progress event (`events`).
//!
//! Beside them, from the start of `run` to step 11: `telemetry` (optional), the job's trace and
//! log over OTLP to the node's collector; its hooks in the steps are one call each.
//!
//! Around them: `cli` (the command line, resolved once into `settings`), `process` (a
//! process's identity in `/proc`, for the tree and the journal), `error` (the one error type and
//! the exit codes), `show` (what `env` and `keys` print), [`schema`] (the front-end contract as
//! JSON Schemas). The other commands (`recover`, `drain`, `prune`, `status`) are the journal's
//! upkeep (`record`). jobenv's own lines go through [`safe_io::log`].
//!
//! The modules are private: the dead-code lint sees every item. What is public is what others
//! need: [`main`] (all the binary calls, the commands in `commands/`), [`schema`] and
//! [`module_names`] (the generated files the suite keeps current), [`JournalEntry`] (what
//! `status` prints, for the suite), [`telemetry_bounds`] (what the telemetry page states), and
//! with the `fuzzing` feature the invariant checks of the fuzz targets.

mod cancel;
mod cli;
mod commands;
mod error;
mod evaluation;
mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod input;
mod job;
mod plan;
mod process;
mod record;
mod run;
pub mod schema;
mod settings;
mod show;
mod state_dir;
mod telemetry;

pub use commands::main;
pub use record::Entry as JournalEntry;
pub use show::module_names;

/// The bounds of OTLP export, which the operators' telemetry page states (the suite checks it).
pub mod telemetry_bounds {
    pub use crate::telemetry::config::DEFAULT_FLUSH;
    pub use crate::telemetry::{JOB_BYTES, JOB_RECORDS, LINE_BYTES, QUEUE_BYTES, QUEUE_RECORDS};
}
