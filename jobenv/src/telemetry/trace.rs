//! One job's trace and log: the job's span, a child span per stage it passes, the stage's
//! events, and the log records, each with the trace and span id of the stage that produced it.
//!
//! The job's span cannot start before the payload is read: a front-end's `TRACEPARENT` makes it a
//! child, and a span's parent is fixed when it starts. So what happens before (the admission
//! stage is open from the start, jobenv may print a line) waits, with its times, until the
//! payload roots the trace ([`Job::root`]); a job that ends before (a cancel while the payload
//! is read) is rooted at its end, without a parent.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, StringValue};
use opentelemetry_sdk::logs::SdkLogger;
use opentelemetry_sdk::trace::{SdkTracer, Span};

use super::context::{self, Parent};
use super::export::Pipeline;
use super::{Ended, Identity, Stage};
use crate::run::redact::Redactor;

/// The longest body of a log record: a longer line is cut there (`jobenv.log.truncated`).
pub const LINE_BYTES: usize = 16 << 10;
/// What one job exports of its program's output, at most; beyond, the rest is not exported, and
/// one line says so.
pub const JOB_RECORDS: u64 = 100_000;
pub const JOB_BYTES: u64 = 64 << 20;
/// jobenv's own lines kept while the trace waits for its root.
const PENDING_LINES: usize = 256;

/// The scope every span and record names.
const SCOPE: &str = "fediversity-jobenv";

pub struct Job {
    pipeline: Pipeline,
    tracer: SdkTracer,
    logger: Option<SdkLogger>,
    flush: Duration,
    verb: String,
    job_id: Option<StringValue>,
    started: SystemTime,
    state: Mutex<State>,
    /// What jobenv's own lines and every exported value pass: the node's and the job's secrets
    /// once the plan knows them, the collector's headers from the start.
    redactor: Mutex<Redactor>,
    /// Program lines exported and over the job's bound.
    program_records: std::sync::atomic::AtomicU64,
    program_bytes: std::sync::atomic::AtomicU64,
    over_bound: std::sync::atomic::AtomicU64,
    bound_said: std::sync::atomic::AtomicBool,
    /// The evaluation's span while it is open: what the pumps carry then is its steps' output,
    /// not the program's. The flag spares the pumps a lock per line otherwise.
    evaluating: std::sync::atomic::AtomicBool,
    evaluation: Mutex<Option<SpanContext>>,
}

#[derive(Default)]
struct State {
    rooted: bool,
    job: Option<Span>,
    /// The stages open now, innermost last.
    open: Vec<Open>,
    next: u64,
    /// jobenv's lines before the root: when, how severe, the line.
    pending: Vec<(SystemTime, tracing::Level, String)>,
    pending_lost: u64,
    identity: Described,
    finished: bool,
}

#[derive(Default)]
struct Described {
    attribute: Option<String>,
    namespace: Option<String>,
    system: Option<String>,
    build_id: Option<String>,
    attempt: Option<u32>,
}

struct Open {
    id: u64,
    stage: Stage,
    start: SystemTime,
    span: Option<Span>,
    /// The last error line printed in it: its status when it fails.
    last_error: Option<String>,
    /// Left on an early return ([`Job::abandon`]): it failed, and ends when what comes next does.
    abandoned: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere must not take export (or the job's end) down with it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Job {
    pub fn new(pipeline: Pipeline, flush: Duration, verb: &str, job_id: Option<&str>, secrets: &[String]) -> Self {
        let tracer = pipeline.tracer_provider.tracer(SCOPE);
        let logger = pipeline.logger_provider.as_ref().map(|p| p.logger(SCOPE));
        let job = Job {
            pipeline,
            tracer,
            logger,
            flush,
            verb: verb.to_owned(),
            job_id: job_id.map(|id| StringValue::from(id.to_owned())),
            started: SystemTime::now(),
            state: Mutex::default(),
            redactor: Mutex::new(Redactor::new(secrets)),
            program_records: Default::default(),
            program_bytes: Default::default(),
            over_bound: Default::default(),
            bound_said: Default::default(),
            evaluating: Default::default(),
            evaluation: Mutex::default(),
        };
        // Open from the start: everything up to the plan is admission.
        lock(&job.state).open.push(Open {
            id: 0,
            stage: Stage::Admission,
            start: job.started,
            span: None,
            last_error: None,
            abandoned: false,
        });
        lock(&job.state).next = 1;
        job
    }

    /// From now on the job's secrets are known: every exported value passes them too.
    pub fn secrets(&self, needles: &[Vec<u8>], headers: &[String]) {
        let mut all: Vec<&[u8]> = needles.iter().map(Vec::as_slice).collect();
        all.extend(headers.iter().map(String::as_bytes));
        *lock(&self.redactor) = Redactor::new(&all);
    }

    pub fn redact(&self, text: &str) -> String {
        let mut redactor = lock(&self.redactor).clone();
        if redactor.is_passthrough() {
            return text.to_owned();
        }
        let mut out = Vec::with_capacity(text.len());
        redactor.push(text.as_bytes(), &mut out);
        redactor.finish(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The job's span starts (at jobenv's start), as a child of `parent` when the payload sent
    /// one; the stages opened so far get their spans, with their own start times, and the lines
    /// printed so far their records.
    pub fn root(&self, parent: Option<&Parent>) {
        let mut state = lock(&self.state);
        if state.rooted {
            return;
        }
        state.rooted = true;
        let parent_cx = match parent {
            Some(parent) => Context::new().with_remote_span_context(parent.span_context()),
            None => Context::new(),
        };
        let span = self
            .tracer
            .span_builder(format!("deploy {}", self.verb))
            .with_kind(SpanKind::Consumer)
            .with_start_time(self.started)
            .start_with_context(&self.tracer, &parent_cx);
        let mut context = span.span_context().clone();
        state.job = Some(span);
        for open in &mut state.open {
            let span = self.stage_span(open.stage, open.start, &context);
            context = span.span_context().clone();
            open.span = Some(span);
        }
        let pending = std::mem::take(&mut state.pending);
        let lost = std::mem::take(&mut state.pending_lost);
        drop(state);
        for (at, level, line) in pending {
            self.log_line(at, level, line);
        }
        if lost > 0 {
            self.pipeline.counts.lagged.fetch_add(lost, Ordering::Relaxed);
        }
    }

    fn stage_span(&self, stage: Stage, start: SystemTime, parent: &SpanContext) -> Span {
        let mut attributes = Vec::new();
        if let Stage::Stop(reason) = stage {
            attributes.push(KeyValue::new("jobenv.stop.reason", reason));
        }
        self.tracer
            .span_builder(stage.name())
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &Context::new().with_remote_span_context(parent.clone()))
    }

    /// Opens `stage` inside the innermost open one; its id, to leave it by.
    pub fn enter(&self, stage: Stage) -> u64 {
        let mut state = lock(&self.state);
        // A stage left on an early return whose error the job went past: it ends now, not
        // around this one.
        let now = SystemTime::now();
        while state.open.last().is_some_and(|o| o.abandoned) {
            let stale = state.open.pop().expect("a last one");
            self.end_stage(stale, None, now);
        }
        let id = state.next;
        state.next += 1;
        let start = SystemTime::now();
        let span = match (
            state.rooted,
            state.open.last().and_then(|o| o.span.as_ref()),
            &state.job,
        ) {
            (true, Some(inner), _) => Some(self.stage_span(stage, start, &inner.span_context().clone())),
            (true, None, Some(job)) => Some(self.stage_span(stage, start, &job.span_context().clone())),
            _ => None,
        };
        if let (Stage::Evaluation, Some(span)) = (stage, &span) {
            *lock(&self.evaluation) = Some(span.span_context().clone());
            self.evaluating.store(true, Ordering::Relaxed);
        }
        state.open.push(Open {
            id,
            stage,
            start,
            span,
            last_error: None,
            abandoned: false,
        });
        id
    }

    /// The stage `id` was left unsaid, on an early return: it failed. It stays open until the
    /// job ends (or the stage around it, or the next one starts), so that the error jobenv
    /// prints next, which says why, is its event and its status.
    pub fn abandon(&self, id: u64) {
        if let Some(open) = lock(&self.state).open.iter_mut().find(|o| o.id == id) {
            open.abandoned = true;
        }
    }

    /// Leaves the stage `id` (and any still open inside it): done, or failed with `why` (else its
    /// last error line).
    pub fn leave(&self, id: u64, failed: Option<&str>) {
        if !lock(&self.state).rooted {
            self.root(None);
        }
        let mut state = lock(&self.state);
        let Some(at) = state.open.iter().position(|o| o.id == id) else {
            return;
        };
        let now = SystemTime::now();
        let closing: Vec<Open> = state.open.drain(at..).collect();
        drop(state);
        // Those inside the stage left (none, with guards) end with it, first.
        let mut closing = closing.into_iter();
        let left = closing.next().expect("the stage found");
        for inner in closing.rev() {
            self.end_stage(inner, None, now);
        }
        self.end_stage(left, failed.map(str::to_owned), now);
    }

    fn end_stage(&self, open: Open, failed: Option<String>, at: SystemTime) {
        if open.stage == Stage::Evaluation {
            self.evaluating.store(false, Ordering::Relaxed);
        }
        let Some(mut span) = open.span else { return };
        let failed = failed.or_else(|| open.abandoned.then(|| "did not complete".to_owned()));
        if let Some(why) = failed {
            let why = open.last_error.unwrap_or(why);
            span.set_status(Status::error(self.redact(&why)));
        }
        self.end(&mut span, at);
    }

    fn end(&self, span: &mut Span, at: SystemTime) {
        span.end_with_timestamp(at);
        if self.pipeline.traces && span.span_context().is_sampled() {
            self.pipeline.counts.spans.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The `TRACEPARENT` (and `TRACESTATE`) of the innermost open stage, for the program: only
    /// when traces are exported (otherwise the program's spans would name a parent no collector
    /// has, and the payload's own context, passed on unchanged, is the better one).
    pub fn traceparent(&self) -> Option<(String, Option<String>)> {
        if !self.pipeline.traces {
            return None;
        }
        let state = lock(&self.state);
        let span = state.open.last().and_then(|o| o.span.as_ref()).or(state.job.as_ref())?;
        let context = span.span_context();
        let state = context.trace_state().header();
        Some((context::traceparent(context), (!state.is_empty()).then_some(state)))
    }

    /// The span a line printed now belongs to: the innermost open stage's, else the job's.
    fn current(state: &State) -> Option<SpanContext> {
        state
            .open
            .last()
            .and_then(|o| o.span.as_ref())
            .or(state.job.as_ref())
            .map(|span| span.span_context().clone())
    }

    /// One of jobenv's own lines, as printed (prefix and level included, without the newline):
    /// a log record, and an event of the innermost stage.
    pub fn line(&self, level: tracing::Level, line: &str) {
        let at = SystemTime::now();
        let mut state = lock(&self.state);
        if state.finished {
            return;
        }
        if !state.rooted {
            if state.pending.len() < PENDING_LINES {
                state.pending.push((at, level, line.to_owned()));
            } else {
                state.pending_lost += 1;
            }
            return;
        }
        drop(state);
        self.log_line(at, level, line.to_owned());
    }

    fn log_line(&self, at: SystemTime, level: tracing::Level, line: String) {
        let line = self.redact(&line);
        let (severity, name) = match level {
            tracing::Level::ERROR => (Severity::Error, "error"),
            tracing::Level::WARN => (Severity::Warn, "warning"),
            tracing::Level::INFO => (Severity::Info, "info"),
            _ => (Severity::Debug, "debug"),
        };
        let context = {
            let mut state = lock(&self.state);
            if level == tracing::Level::ERROR {
                if let Some(open) = state.open.last_mut() {
                    open.last_error = Some(line.clone());
                }
            }
            let context = Self::current(&state);
            let span = match state.open.last_mut().and_then(|o| o.span.as_mut()) {
                Some(span) => Some(span),
                None => state.job.as_mut(),
            };
            if let Some(span) = span {
                span.add_event_with_timestamp(name, at, vec![KeyValue::new("message", line.clone())]);
            }
            context
        };
        self.emit(line, severity, "stderr", "jobenv", context.as_ref(), false, at);
    }

    /// Hands one record to the processor, within the in-flight bound.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        body: String,
        severity: Severity,
        stream: &'static str,
        source: &'static str,
        context: Option<&SpanContext>,
        truncated: bool,
        at: SystemTime,
    ) {
        let Some(logger) = &self.logger else { return };
        if !self.pipeline.counts.admit(body.len() as u64, source == "program") {
            return;
        }
        let mut record = logger.create_log_record();
        record.set_timestamp(at);
        record.set_observed_timestamp(at);
        record.set_severity_number(severity);
        record.set_severity_text(severity.name());
        record.set_body(AnyValue::String(body.into()));
        record.add_attribute("log.iostream", stream);
        record.add_attribute("jobenv.log.source", source);
        if let Some(id) = &self.job_id {
            record.add_attribute("jobenv.job.id", AnyValue::String(id.clone()));
        }
        if truncated {
            record.add_attribute("jobenv.log.truncated", true);
        }
        if let Some(context) = context {
            record.set_trace_context(context.trace_id(), context.span_id(), Some(context.trace_flags()));
        }
        logger.emit(record);
    }

    /// A tap for one output stream of the program (`stdout` or `stderr`): give it the redacted
    /// bytes as they come.
    pub fn tap(self: &Arc<Self>, stream: &'static str) -> Option<Tap> {
        self.logger.as_ref()?;
        // The program's stage (the taps are made while its shell's evaluation, inside it, is
        // open: that one's lines are told apart as they come).
        let context = {
            let state = lock(&self.state);
            let program = state.open.iter().rev().find(|o| o.stage != Stage::Evaluation);
            program
                .and_then(|o| o.span.as_ref())
                .or(state.job.as_ref())
                .map(|span| span.span_context().clone())
        };
        Some(Tap {
            job: Arc::clone(self),
            stream,
            severity: if stream == "stdout" {
                Severity::Info
            } else {
                Severity::Warn
            },
            context,
            line: Vec::new(),
            cut: false,
        })
    }

    /// Room in the job's bound for one more program line of `bytes`.
    fn within_bound(&self, bytes: usize) -> bool {
        let records = self.program_records.fetch_add(1, Ordering::Relaxed);
        let total = self.program_bytes.fetch_add(bytes as u64, Ordering::Relaxed) + bytes as u64;
        if records < JOB_RECORDS && total <= JOB_BYTES {
            return true;
        }
        self.over_bound(1);
        false
    }

    /// No program line can be exported now: past the job's bound, or as much in flight as the
    /// bound allows (a collector that lags). Asked once per chunk of output, so that output
    /// nothing will come of costs a count of its newlines, not a record each.
    fn saturated(&self) -> bool {
        self.bound_said.load(Ordering::Relaxed) || self.pipeline.counts.full()
    }

    /// `lines` of the program's output went by while [`Job::saturated`].
    fn skipped(&self, lines: u64) {
        if lines == 0 {
            return;
        }
        let records = self.program_records.fetch_add(lines, Ordering::Relaxed);
        if self.bound_said.load(Ordering::Relaxed) || records + lines > JOB_RECORDS {
            self.over_bound(lines);
        } else {
            self.pipeline.counts.lagged.fetch_add(lines, Ordering::Relaxed);
        }
    }

    fn over_bound(&self, lines: u64) {
        self.over_bound.fetch_add(lines, Ordering::Relaxed);
        if !self.bound_said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "telemetry: the program's output passed the export bound of {JOB_RECORDS} lines or {} MiB: the rest is not exported (the job log has all of it)",
                JOB_BYTES >> 20
            );
        }
    }

    /// What is known of the job, for its span.
    pub fn identify(&self, identity: Identity<'_>) {
        let mut state = lock(&self.state);
        let described = &mut state.identity;
        let set = |field: &mut Option<String>, value: Option<&str>| {
            if let Some(value) = value {
                *field = Some(value.to_owned());
            }
        };
        set(&mut described.attribute, identity.attribute);
        set(&mut described.namespace, identity.namespace);
        set(&mut described.system, identity.system);
        set(&mut described.build_id, identity.build_id);
        if identity.attempt.is_some() {
            described.attempt = identity.attempt;
        }
    }

    /// The job ended: its span gets its identity and ending, every stage still open ends (failed
    /// unless the job succeeded or was replayed), and what is not delivered yet gets at most the
    /// flush bound. Then one line, if not everything reached the collector.
    pub fn finish(&self, ended: Ended<'_>) {
        if !lock(&self.state).rooted {
            self.root(None);
        }
        let now = SystemTime::now();
        let fine = ended.status == "succeeded" || ended.replayed;
        let why = ended
            .errors
            .first()
            .cloned()
            .unwrap_or_else(|| format!("{}, exit code {}", ended.status, ended.exit_code));
        let (open, job, identity) = {
            let mut state = lock(&self.state);
            state.finished = true;
            (
                std::mem::take(&mut state.open),
                state.job.take(),
                std::mem::take(&mut state.identity),
            )
        };
        for open in open.into_iter().rev() {
            self.end_stage(open, (!fine).then(|| why.clone()), now);
        }
        if let Some(mut span) = job {
            let attribute = identity.attribute.as_deref().map(|a| self.redact(a));
            match &attribute {
                Some(attribute) => span.update_name(format!("deploy {attribute} {}", self.verb)),
                None => span.update_name(format!("deploy {}", self.verb)),
            }
            let mut attributes = vec![
                KeyValue::new("jobenv.job.verb", self.redact(&self.verb)),
                KeyValue::new("jobenv.job.status", ended.status.to_owned()),
                KeyValue::new("process.exit.code", i64::from(ended.exit_code)),
                KeyValue::new("jobenv.job.replayed", ended.replayed),
            ];
            let texts = [
                ("jobenv.job.id", self.job_id.as_ref().map(|id| id.as_str().to_owned())),
                ("jobenv.job.attribute", attribute),
                (
                    "jobenv.job.namespace",
                    identity.namespace.as_deref().map(|n| self.redact(n)),
                ),
                ("jobenv.job.system", identity.system.as_deref().map(|s| self.redact(s))),
                (
                    "jobenv.job.build_id",
                    identity.build_id.as_deref().map(|b| self.redact(b)),
                ),
                ("jobenv.job.interrupted_by", ended.interrupted_by.map(str::to_owned)),
            ];
            attributes.extend(
                texts
                    .into_iter()
                    .filter_map(|(key, value)| Some(KeyValue::new(key, value?))),
            );
            if let Some(attempt) = identity.attempt {
                attributes.push(KeyValue::new("jobenv.job.attempt", i64::from(attempt)));
            }
            span.set_attributes(attributes);
            if !fine {
                span.set_status(Status::error(self.redact(&why)));
            }
            self.end(&mut span, now);
        }
        let in_time = self.pipeline.shutdown(self.flush);
        self.report(in_time);
    }

    /// At most one line: what did not reach the collector, and why.
    fn report(&self, in_time: bool) {
        let counts = &self.pipeline.counts;
        let load = |n: &std::sync::atomic::AtomicU64| n.load(Ordering::Relaxed);
        let spans_lost = load(&counts.spans).saturating_sub(load(&counts.spans_delivered));
        let lagged = load(&counts.lagged);
        let records_lost = load(&counts.records).saturating_sub(load(&counts.records_delivered)) + lagged;
        if spans_lost == 0 && records_lost == 0 {
            return;
        }
        let failure = lock(&counts.failure).clone();
        let why = match (failure, in_time) {
            (Some(failure), true) => failure,
            (Some(failure), false) => format!(
                "{failure}; the rest was not delivered within the flush bound of {:?}",
                self.flush
            ),
            (None, false) => format!("no answer within the flush bound of {:?}", self.flush),
            (None, true) => "the collector did not keep up with the output".to_owned(),
        };
        let records = load(&counts.records) + lagged;
        let spans = load(&counts.spans);
        tracing::warn!(
            "telemetry: not everything reached the collector ({why}): {spans_lost} of {spans} span(s) and {records_lost} of {records} log record(s) undelivered"
        );
    }
}

/// One output stream of the program, as log records: a record per line.
pub struct Tap {
    job: Arc<Job>,
    stream: &'static str,
    severity: Severity,
    context: Option<SpanContext>,
    line: Vec<u8>,
    /// The line being read is longer than [`LINE_BYTES`]: the rest of it is skipped.
    cut: bool,
}

impl Tap {
    pub fn push(&mut self, mut redacted: &[u8]) {
        if self.job.saturated() {
            // The line under way and every line completed here go unexported; what follows
            // the last newline starts the next one.
            let lines = memchr::memchr_iter(b'\n', redacted).count() as u64;
            if let Some(last) = memchr::memrchr(b'\n', redacted) {
                self.line.clear();
                self.cut = false;
                redacted = &redacted[last + 1..];
            }
            self.job.skipped(lines);
            self.take(redacted);
            return;
        }
        while !redacted.is_empty() {
            match memchr::memchr(b'\n', redacted) {
                Some(end) => {
                    self.take(&redacted[..end]);
                    self.line_done();
                    redacted = &redacted[end + 1..];
                }
                None => {
                    self.take(redacted);
                    break;
                }
            }
        }
    }

    /// End of the stream: an unfinished last line is a record too.
    pub fn finish(&mut self) {
        if !self.line.is_empty() || self.cut {
            self.line_done();
        }
    }

    fn take(&mut self, bytes: &[u8]) {
        let room = LINE_BYTES - self.line.len();
        if bytes.len() > room {
            self.line.extend_from_slice(&bytes[..room]);
            self.cut = true;
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn line_done(&mut self) {
        let line = std::mem::take(&mut self.line);
        let cut = std::mem::replace(&mut self.cut, false);
        if !self.job.within_bound(line.len()) {
            return;
        }
        let body = match String::from_utf8(line) {
            Ok(text) => text,
            // A cut may split a character; other invalid UTF-8 is shown as the job log shows it.
            Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
        };
        // While the shell is evaluated, what comes is the evaluation's (nix-instantiate's stderr).
        let evaluation = match self.job.evaluating.load(Ordering::Relaxed) {
            true => lock(&self.job.evaluation).clone(),
            false => None,
        };
        self.job.emit(
            body,
            self.severity,
            self.stream,
            "program",
            evaluation.as_ref().or(self.context.as_ref()),
            cut,
            SystemTime::now(),
        );
    }
}
