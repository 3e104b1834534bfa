//! fediversity-jobenv: the one runner of deployment programs on a node.
//!
//! A job's path through jobenv, in the order of [`job`] (the numbered spine of `run`):
//!
//! 1. [`input`]: everything the job is made of (payload, node files, keys, attributes), read and
//!    checked: which key may come from where, and every control key against its rule.
//! 2. [`plan`]: the merge of the three layers into the exact argv and environment of the
//!    program; a pure function, which `env` prints.
//! 3. [`evaluation`]: the shell's evaluation, apart from the run and in an environment of the
//!    node's alone, and the cache of instantiated shells (a warm node runs a job's shell without
//!    evaluating it).
//! 4. [`run`]: spawning the program in its program tree (a cgroup of its own, or jobenv's
//!    descendants where there is none), streaming its output through the redactor, stopping the
//!    whole tree on a cancel, the timeout or a lost worker.
//! 5. [`record`]: how the job ended, the journal, the locks, what a deploy whose jobenv is gone
//!    left running, and `result.json`.
//! 6. [`events`] (optional): progress events to a front-end; takes plain data and depends on
//!    nothing above.
//! 6. [`telemetry`] (optional): the job's trace and log over OTLP to the node's collector; its
//!    hooks in the steps above are one call each.
//!
//! Around them: [`cli`] (the command line, resolved once into [`settings`]), [`process`] (a
//! process's identity in `/proc`, for the tree and the journal), [`error`] (the one error type and the exit codes),
//! [`show`] (what `env` and `keys` print), [`schema`] (the front-end contract as JSON Schemas).
//! jobenv's own lines go through [`safe_io::log`].

pub mod cli;
pub mod error;
pub mod evaluation;
pub mod events;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod input;
pub mod job;
pub mod plan;
pub mod process;
pub mod record;
pub mod run;
pub mod schema;
pub mod settings;
pub mod show;
pub mod telemetry;
