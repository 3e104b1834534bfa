//! OpenTelemetry (optional; docs/operators/telemetry.md): a job's trace and its log, exported
//! over OTLP/HTTP to the collector the standard `OTEL_*` variables name ([`config`]). It serves
//! every step of the spine ([`crate::job`]), from the start of `run` to step 11, with one call at
//! each step it watches.
//!
//! - **A trace per job**: the job's span (`deploy <attribute> <verb>`, its identity and ending as
//!   attributes, an error status unless it succeeded), a child span per stage it passes
//!   ([`Stage`]: admission, namespace, lease, program, evaluation, stop), and as events of the stage the
//!   lines jobenv printed in it (a refused key, an orphan stopped, a lease renewed late).
//! - **Joined to the front-end's**: a valid `TRACEPARENT` in the payload ([`context`]) makes the
//!   job's span its child; the program gets the `TRACEPARENT` of its own stage.
//! - **The job's log**: every line of the job log (the program's output as the pumps wrote it,
//!   redacted; jobenv's own lines as printed) is a log record with the trace and span id of the
//!   stage that produced it.
//! - **Never costs a deploy**: the SDK's batch processors export on threads of their own, every
//!   push is bounded and never waits, and the job's end waits at most the flush bound
//!   (`--otlp-flush-timeout`) for what is not delivered; then at most one line says what was
//!   not.
//! - **Nothing secret leaves**: everything exported passes jobenv's redactor, with the collector's
//!   headers among its needles (and the program output's).
//!
//! Without an endpoint nothing of this exists: [`start`] reads a few variables and returns; no
//! thread, no socket, no SDK object. One job per jobenv, so the job's telemetry is the
//! process's ([`start`] sets it once), and the hooks elsewhere are one call each.

pub mod config;
pub mod context;
mod export;
mod trace;

use std::io::Write;
use std::sync::{Arc, OnceLock};

use safe_io::secret::Hidden;
use tracing_subscriber::fmt::MakeWriter;

pub use config::Options;
pub use export::{QUEUE_BYTES, QUEUE_RECORDS};
pub use trace::{JOB_BYTES, JOB_RECORDS, LINE_BYTES, Tap};

use crate::input::json::{self, Members};
use trace::Job;

/// The job's telemetry, once [`start`] found something to export.
struct Active {
    job: Arc<Job>,
    /// The collector's header values: secrets.
    headers: Hidden<Vec<String>>,
}

static ACTIVE: OnceLock<Active> = OnceLock::new();

/// A stage of a job: a span of its own, inside the one open when it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From jobenv's start to the plan: the journal, the payload, the job lock, the decision,
    /// the inputs' checks.
    Admission,
    /// Holding the namespace: its locks, what an earlier deploy left, the program tree.
    Namespace,
    /// Cluster mode: the namespace's lease on the shared journal.
    Lease,
    /// Inside the program's: the shell's evaluation (the cache's decision, a wait for another
    /// job's evaluation, nix-instantiate, the inputs' realisation), up to the program's spawn.
    Evaluation,
    /// The program, from its spawn to its end.
    Program,
    /// Stopping the program tree, and why (`cancel`, `timeout`, `drain`, `worker lost`,
    /// `lease lost`, `left running`).
    Stop(&'static str),
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Admission => "admission",
            Stage::Namespace => "namespace",
            Stage::Lease => "lease",
            Stage::Evaluation => "evaluation",
            Stage::Program => "program",
            Stage::Stop(_) => "stop",
        }
    }
}

/// What is known of the job; each field once known (later calls add to earlier ones).
#[derive(Debug, Default, Clone, Copy)]
pub struct Identity<'a> {
    pub attribute: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub system: Option<&'a str>,
    pub build_id: Option<&'a str>,
    pub attempt: Option<u32>,
}

/// How the job ended (what `result.json` says).
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    pub status: &'a str,
    pub exit_code: i32,
    pub interrupted_by: Option<&'a str>,
    pub replayed: bool,
    /// jobenv's error lines of the ending; the first is the status's description.
    pub errors: &'a [String],
}

/// Starts the job's telemetry if the environment names an endpoint: `verb` and `job_id` name the
/// job from the start. The admission stage is open from here. A configuration that cannot be
/// used says so in one line each and exports nothing; the job runs as without it.
pub fn start(options: &Options, verb: &str, job_id: Option<&str>) {
    let var = |name: &str| std::env::var(name).ok();
    let decision = config::decide(&var, options);
    let warn = || decision.warnings.iter().for_each(|warning| tracing::warn!("{warning}"));
    let Some(config) = &decision.config else { return warn() };
    let pipeline = match export::build(config) {
        Ok(pipeline) => pipeline,
        Err(_) => {
            warn();
            // Never the exporter's own words: they may quote the endpoint, credentials and all.
            tracing::warn!(
                "telemetry: cannot set up export (the exporter refused its configuration; the endpoint is not shown: it may carry credentials); nothing is exported"
            );
            return;
        }
    };
    let job = Job::new(pipeline, config.flush, verb, job_id, &config.secrets.0);
    let _ = ACTIVE.set(Active {
        job: Arc::new(job),
        headers: Hidden(config.secrets.0.clone()),
    });
    // After: what is exported says so in the job's log too.
    warn();
}

/// Whether this job exports.
pub fn is_on() -> bool {
    ACTIVE.get().is_some()
}

fn job() -> Option<&'static Arc<Job>> {
    ACTIVE.get().map(|active| &active.job)
}

/// The payload was read: its `TRACEPARENT` (and `TRACESTATE`), when valid, is the parent of the
/// job's span. A bad one is the plan's to warn about (`input::controls`): it is simply not taken.
pub fn payload(payload: Option<&Members>) {
    let Some(job) = job() else { return };
    let text = |key| payload.and_then(|p| p.get(key)).and_then(|raw| json::text(raw));
    let parent = text("TRACEPARENT").and_then(|tp| context::parse(&tp, text("TRACESTATE").as_deref()).0);
    job.root(parent.as_ref());
}

/// The plan is made: its secrets (with the collector's headers, added here so that the program's
/// output is redacted of them too) are what every exported value passes from now on.
pub fn secrets(secrets: &mut Vec<Vec<u8>>) {
    let Some(active) = ACTIVE.get() else { return };
    let headers = active
        .headers
        .0
        .iter()
        // Each at least `MIN_SECRET_LEN` bytes long: a shorter header is no secret (`config`).
        .map(|h| ("the collector's headers", h.as_str()));
    let needles = crate::run::redact::redaction_needles(headers, &mut Vec::new());
    secrets.extend(needles);
    active.job.secrets(secrets, &active.headers.0);
    // The program's TRACEPARENT is its own stage's (set at the program stage), not the payload's.
}

/// Adds what is known of the job.
pub fn identify(identity: Identity<'_>) {
    if let Some(job) = job() {
        job.identify(identity);
    }
}

/// The admission stage is over: the job has its plan.
pub fn admitted() {
    if let Some(job) = job() {
        job.leave(0, None);
    }
}

/// Opens `stage`; it ends when the guard says so, or fails when it is dropped unsaid (an early
/// return on an error: then it ends with the job, the error line that follows its event and
/// its status).
pub fn enter(stage: Stage) -> Guard {
    Guard(job().map(|job| (Arc::clone(job), job.enter(stage))))
}

/// An open stage.
#[must_use = "a stage dropped unsaid ends as failed"]
pub struct Guard(Option<(Arc<Job>, u64)>);

impl Guard {
    pub fn done(mut self) {
        if let Some((job, id)) = self.0.take() {
            job.leave(id, None);
        }
    }

    pub fn failed(mut self, why: &str) {
        if let Some((job, id)) = self.0.take() {
            job.leave(id, Some(why));
        }
    }

    /// The `TRACEPARENT` and `TRACESTATE` of this stage, for a program started in it; `None`
    /// when traces are not exported.
    pub fn traceparent(&self) -> Option<(String, Option<String>)> {
        self.0.as_ref().and_then(|(job, _)| job.traceparent())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some((job, id)) = self.0.take() {
            job.abandon(id);
        }
    }
}

/// A tap for one output stream of the program (`stdout` or `stderr`), when logs are exported.
pub fn tap(stream: &'static str) -> Option<Tap> {
    job()?.tap(stream)
}

/// The job ended: its span ends, and what is not delivered gets at most the flush bound.
pub fn finish(ended: Ended<'_>) {
    if let Some(job) = job() {
        job.finish(ended);
    }
}

/// Where jobenv's own lines go: stderr, and while a job exports, its log too. The process-wide
/// log formatter ([`safe_io::log`]) writes each line in one piece through it.
pub struct LogTee;

impl<'a> MakeWriter<'a> for LogTee {
    type Writer = TeeWriter;

    fn make_writer(&'a self) -> TeeWriter {
        TeeWriter {
            level: tracing::Level::INFO,
            copy: None,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> TeeWriter {
        TeeWriter {
            level: *meta.level(),
            copy: is_on().then(Vec::new),
        }
    }
}

/// One line on its way to stderr; at its drop, the copy goes to the job's log.
pub struct TeeWriter {
    level: tracing::Level,
    copy: Option<Vec<u8>>,
}

impl Write for TeeWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // With stderr gone the line is still the job's: the collector may be the one place left
        // that has it. (The formatter ignores a failed write anyway.)
        let written = std::io::stderr().write(bytes).unwrap_or(bytes.len());
        if let Some(copy) = &mut self.copy {
            copy.extend_from_slice(&bytes[..written]);
        }
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl Drop for TeeWriter {
    fn drop(&mut self) {
        let (Some(copy), Some(job)) = (self.copy.take(), job()) else {
            return;
        };
        let text = String::from_utf8_lossy(&copy);
        for line in text.lines() {
            job.line(self.level, line);
        }
    }
}
