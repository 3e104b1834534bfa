//! The Windmill job result. On a real worker, a Python job that execs into a program which
//! exits 0 without writing `result.json` is marked failed ("Result of job is invalid json
//! (empty)"), so jobenv writes it, atomically, into its working directory (the job directory).

use std::path::Path;

use serde::Serialize;

/// Never holds a secret: statuses, codes, names and validation messages only.
#[derive(Debug, Clone, Serialize)]
pub struct JobResult {
    pub status: crate::status::JobStatus,
    pub exit_code: i32,
    pub verb: String,
    pub attribute: Option<String>,
    pub namespace: Option<String>,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Which attempt of the job this was (journaled jobs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// True when the result was replayed from the journal instead of running again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// Writes `result.json` in `dir`: a temporary file beside it, synced, then renamed over.
pub fn write(dir: &Path, result: &JobResult) -> std::io::Result<()> {
    let mut text = serde_json::to_vec(result)?;
    text.push(b'\n');
    crate::files::write_atomically(dir, "result.json", &text)
}
