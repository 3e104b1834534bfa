//! The Windmill job result. On a real worker, a Python job that execs into a program which
//! exits 0 without writing `result.json` is marked failed ("Result of job is invalid json
//! (empty)"), so jobenv writes it, atomically, into its working directory (the job directory).

use std::path::Path;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;

use super::ending::{Ending, InterruptedBy, Reason, Status};
use crate::error::EXIT_REJECTED;
use crate::settings::Runner;

/// What `result.json` holds, borrowed from the job's records. Never a secret: statuses, codes,
/// names and validation messages only.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(
    title = "fediversity-jobenv result.json",
    description = "What jobenv writes as a Windmill job's result"
)]
pub struct JobResult<'a> {
    #[schemars(schema_with = "ended")]
    pub status: Status,
    pub exit_code: i32,
    pub verb: &'a str,
    pub attribute: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<&'a str>,
    /// Which attempt of the job this was (journaled jobs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// True when the result was replayed from the journal instead of running again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// `interrupted` when the attempt was stopped without a result of its own; then
    /// `interrupted_by` says why (`worker_lost`, `node_stopped`, `lease_lost`) and a retry is
    /// safe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<InterruptedBy>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub errors: &'a [String],
}

impl<'a> JobResult<'a> {
    pub fn of(ending: &'a Ending) -> Self {
        JobResult {
            status: ending.status,
            exit_code: ending.exit_code,
            verb: "",
            attribute: None,
            namespace: None,
            duration_ms: 0,
            job_id: None,
            attempt: None,
            replayed: false,
            reason: ending.reason(),
            interrupted_by: ending.interrupted_by,
            errors: &ending.errors,
        }
    }
}

/// Writes `result.json` in `dir`: a temporary file beside it, synced, then renamed over.
pub fn write(dir: &Path, result: &JobResult) -> std::io::Result<()> {
    let mut text = serde_json::to_vec(result)?;
    text.push(b'\n');
    super::write_atomically(dir, "result.json", &text)
}

/// Writes `result.json` into the working directory (the job directory); says so when it cannot.
pub fn write_here(result: &JobResult) -> bool {
    let dir = std::env::current_dir().unwrap_or_default();
    match write(&dir, result) {
        Ok(()) => true,
        Err(error) => {
            tracing::error!("cannot write {}/result.json: {error}", dir.display());
            false
        }
    }
}

/// Under a job runner, a job refused before its options could be read still gets its
/// `result.json`: Windmill would otherwise record a failure without a word of why.
pub fn record_rejected_before_start(runner: &Runner, verb: &str, errors: &[String]) {
    let Some(job_id) = runner.job_id() else { return };
    let ending = Ending {
        status: Status::Rejected,
        exit_code: EXIT_REJECTED,
        errors: errors.to_vec(),
        interrupted_by: None,
    };
    write_here(&JobResult {
        verb,
        job_id: Some(job_id),
        ..JobResult::of(&ending)
    });
}

/// A result is written once the job ended: its status is never `running` (that one is the
/// journal's, while the program runs).
fn ended(_: &mut SchemaGenerator) -> Schema {
    let ended: Vec<&str> = Status::ENDED.iter().map(|status| status.as_str()).collect();
    schemars::json_schema!({ "description": "How the job ended", "type": "string", "enum": ended })
}
