//! The SDK's pipeline, as jobenv builds it: one blocking HTTP client (reqwest's, with rustls and
//! ring, the project's one TLS stack), the OTLP exporters over it (http/protobuf), each behind
//! the SDK's batch processor, which exports on a thread of its own; and around each exporter a
//! [`Watched`] one that counts what was delivered, so that the job's end can say in one line
//! what was not.
//!
//! Threads, when something is exported: the HTTP client's (reqwest runs its blocking client on a
//! runtime thread of its own), and one batch processor per signal. None of them exists when
//! nothing is exported: this module is not entered then.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::logs::AnyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{BatchLogProcessor, LogBatch, LogExporter, SdkLogRecord, SdkLoggerProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};

use super::config::Config;

/// The log records the batch processor's queue holds: jobenv never lets more than this be in
/// flight (pushed and not yet exported or given up), so the processor never drops one unseen.
pub const QUEUE_RECORDS: usize = 16384;
/// Records of the queue only jobenv's own lines may take.
pub const RESERVED: usize = 256;
/// The bytes of log record bodies in flight, at most.
pub const QUEUE_BYTES: u64 = 16 << 20;
/// How long a connection to the collector may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// What went out, and what came of it.
#[derive(Debug, Default)]
pub struct Counts {
    /// Spans ended (sampled ones: the others are never exported) while traces are exported.
    pub spans: AtomicU64,
    pub spans_delivered: AtomicU64,
    /// Log records handed to the processor, their bodies' bytes, and those exported or given up.
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub records_done: AtomicU64,
    pub bytes_done: AtomicU64,
    pub records_delivered: AtomicU64,
    /// Lines not exported because too much was in flight (the collector lags).
    pub lagged: AtomicU64,
    /// Why an export failed first (the SDK's words: a status code, "network error"; never the
    /// endpoint or a header).
    pub failure: Mutex<Option<String>>,
}

impl Counts {
    fn failed(&self, why: impl std::fmt::Display) {
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        failure.get_or_insert_with(|| why.to_string());
    }

    /// As much of the program's output in flight as [`Counts::admit`] lets it have.
    pub fn full(&self) -> bool {
        let (in_flight, in_flight_bytes) = self.in_flight();
        in_flight as usize >= QUEUE_RECORDS - RESERVED || in_flight_bytes >= QUEUE_BYTES
    }

    /// Records and bytes handed over and not yet exported or given up. Read without a lock:
    /// the exporter's thread may count one done between the two loads, hence saturating.
    fn in_flight(&self) -> (u64, u64) {
        let records = self.records.load(Ordering::Relaxed);
        let bytes = self.bytes.load(Ordering::Relaxed);
        (
            records.saturating_sub(self.records_done.load(Ordering::Relaxed)),
            bytes.saturating_sub(self.bytes_done.load(Ordering::Relaxed)),
        )
    }

    /// Room for one more record of `bytes`: counted as in flight if there is. The program's
    /// lines leave [`RESERVED`] records of the queue to jobenv's own, which are few and say what
    /// matters (the job's end, the bound).
    pub fn admit(&self, bytes: u64, program: bool) -> bool {
        let (in_flight, in_flight_bytes) = self.in_flight();
        // A few records of margin: the pumps and jobenv's own lines may push at the same time.
        let room = if program {
            QUEUE_RECORDS - RESERVED
        } else {
            QUEUE_RECORDS - 8
        };
        if in_flight as usize >= room || in_flight_bytes + bytes > QUEUE_BYTES {
            self.lagged.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.records.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        true
    }
}

/// The bytes a record costs in the bounds: its body's.
pub fn body_len(record: &SdkLogRecord) -> u64 {
    match record.body() {
        Some(AnyValue::String(text)) => text.as_str().len() as u64,
        _ => 0,
    }
}

/// The providers of one jobenv: every span and record of the job goes through them.
pub struct Pipeline {
    pub tracer_provider: SdkTracerProvider,
    pub logger_provider: Option<SdkLoggerProvider>,
    pub counts: Arc<Counts>,
    pub traces: bool,
}

/// Builds the pipeline `config` describes. Nothing connects yet: the first export does.
pub fn build(config: &Config) -> Result<Pipeline, String> {
    // reqwest comes without a crypto provider (aws-lc-rs would need cmake): ring serves https.
    // Installing it twice is harmless (the first one stays).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::blocking::Client::builder()
        // A redirect would carry the headers (an API key) somewhere the node did not name.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT_TIMEOUT.min(config.timeout))
        .timeout(config.timeout)
        .user_agent(concat!("fediversity-jobenv/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
    let headers: std::collections::HashMap<String, String> = config.file_headers.0.iter().cloned().collect();
    let resource = resource(config);
    let counts = Arc::new(Counts::default());

    let mut tracer = SdkTracerProvider::builder().with_resource(resource.clone());
    if config.traces {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_headers(headers.clone())
            .build()
            .map_err(|e| e.to_string())?;
        let watched = Watched {
            inner: exporter,
            counts: Arc::clone(&counts),
        };
        tracer = tracer.with_span_processor(BatchSpanProcessor::builder(watched).build());
    }
    let logger_provider = if config.logs {
        let exporter = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_headers(headers)
            .build()
            .map_err(|e| e.to_string())?;
        let watched = Watched {
            inner: exporter,
            counts: Arc::clone(&counts),
        };
        // The other OTEL_BLRP_* variables are the SDK's to read; the queue is jobenv's bound.
        let batch = opentelemetry_sdk::logs::BatchConfigBuilder::default()
            .with_max_queue_size(QUEUE_RECORDS)
            .build();
        let processor = BatchLogProcessor::builder(watched).with_batch_config(batch).build();
        Some(
            SdkLoggerProvider::builder()
                .with_resource(resource)
                .with_log_processor(processor)
                .build(),
        )
    } else {
        None
    };
    Ok(Pipeline {
        tracer_provider: tracer.build(),
        logger_provider,
        counts,
        traces: config.traces,
    })
}

/// Who sends: the service (`OTEL_SERVICE_NAME`, else jobenv's), the attributes of
/// `OTEL_RESOURCE_ATTRIBUTES` (they win over jobenv's own), the node's host name and jobenv's
/// version, and the SDK's own (`telemetry.sdk.*`).
fn resource(config: &Config) -> Resource {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_default();
    Resource::builder_empty()
        .with_detector(Box::new(opentelemetry_sdk::resource::TelemetryResourceDetector))
        .with_attributes([
            KeyValue::new("host.name", host),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("process.pid", i64::from(std::process::id())),
        ])
        .with_attributes(
            config
                .resource
                .iter()
                .map(|(key, value)| KeyValue::new(key.clone(), value.clone())),
        )
        .with_service_name(config.service_name.clone())
        .build()
}

impl Pipeline {
    /// Waits at most `bound` for both processors to export what they hold, side by side.
    /// `true` when both did in time. (A provider reports its processor's timeout as a failure
    /// of its own: any failure here is one.)
    pub fn shutdown(&self, bound: Duration) -> bool {
        std::thread::scope(|scope| {
            let logs = self
                .logger_provider
                .as_ref()
                .map(|provider| scope.spawn(move || provider.shutdown_with_timeout(bound)));
            let traces = self.tracer_provider.shutdown_with_timeout(bound);
            let logs = logs.map(|handle| handle.join().is_ok_and(|result| result.is_ok()));
            traces.is_ok() && logs.unwrap_or(true)
        })
    }
}

/// An exporter that counts what it delivered.
#[derive(Debug)]
struct Watched<E> {
    inner: E,
    counts: Arc<Counts>,
}

impl<E: SpanExporter> SpanExporter for Watched<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                self.counts.spans_delivered.fetch_add(spans, Ordering::Relaxed);
            }
            Err(error) => self.counts.failed(error),
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: LogExporter> LogExporter for Watched<E> {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let (records, bytes) = batch
            .iter()
            .fold((0u64, 0u64), |(n, b), (record, _)| (n + 1, b + body_len(record)));
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                self.counts.records_delivered.fetch_add(records, Ordering::Relaxed);
            }
            Err(error) => self.counts.failed(error),
        }
        self.counts.records_done.fetch_add(records, Ordering::Relaxed);
        self.counts.bytes_done.fetch_add(bytes, Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
