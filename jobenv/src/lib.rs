//! fediversity-jobenv: the one runner of deployment programs on a node.
//!
//! A job's path through jobenv, in the order of `job` (the numbered spine of `run`):
//!
//! 1. `input`: everything the job is made of (payload, node files, keys, attributes), read and
//!    checked: which key may come from where, and every control key against its rule.
//! 2. `plan`: the merge of the three layers into the exact argv and environment of the
//!    program; a pure function, which `env` prints.
//! 3. `evaluation`: the shell's evaluation, apart from the run and in an environment of the
//!    node's alone, and the cache of instantiated shells (a warm node runs a job's shell without
//!    evaluating it).
//! 4. `run`: spawning the program in its program tree (a cgroup of its own, or jobenv's
//!    descendants where there is none), streaming its output through the redactor, stopping the
//!    whole tree on a cancel, the timeout or a lost worker.
//! 5. `record`: how the job ended, the journal, the locks, what a deploy whose jobenv is gone
//!    left running, and `result.json`.
//! 6. `events` (optional): progress events to a front-end; takes plain data and depends on
//!    nothing above.
//! 7. `telemetry` (optional): the job's trace and log over OTLP to the node's collector; its
//!    hooks in the steps above are one call each.
//!
//! Around them: `cli` (the command line, resolved once into `settings`), `process` (a
//! process's identity in `/proc`, for the tree and the journal), `error` (the one error type and the exit codes),
//! `show` (what `env` and `keys` print), [`schema`] (the front-end contract as JSON Schemas).
//! jobenv's own lines go through [`safe_io::log`].
//!
//! The modules are private: the dead-code lint sees every item. What is public is what others
//! need: [`main`] (all the binary calls, in `commands/`), [`schema`] and [`module_names`] (the
//! generated files the suite keeps current), [`JournalEntry`] (what `status` prints, for the
//! suite), [`telemetry_bounds`] (what the telemetry page states), and with the `fuzzing` feature the invariant checks of the fuzz targets.

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
mod telemetry;

pub use commands::main;
pub use record::journal::Entry as JournalEntry;
pub use show::module_names;

/// The bounds of OTLP export, which the operators' telemetry page states (the suite checks it).
pub mod telemetry_bounds {
    pub use crate::telemetry::config::DEFAULT_FLUSH;
    pub use crate::telemetry::{JOB_BYTES, JOB_RECORDS, LINE_BYTES, QUEUE_BYTES, QUEUE_RECORDS};
}
