//! Log lines on stderr, one per event: `<prefix>error: …`, `<prefix>warning: …`, `<prefix>…`
//! (info) and `<prefix>debug: …`, so that a journal or a job log tells the binary's own lines
//! apart from whatever else writes there.
//!
//! Why only the binary's own targets: reqwest, hyper and tokio-postgres log at debug level, and
//! what they format includes request URLs (a token-delete URL holds a token prefix) and
//! connection strings. With the filter here they never reach the formatter at all, whatever the
//! level.
//!
//! Why `log_internal_errors(false)`: when nobody reads stderr any more (a closed pipe), a line is
//! lost and nothing else. tracing-subscriber would otherwise report the failed write with
//! `eprintln!`, which panics on a broken stderr, and a panicking jobenv leaves its program's
//! children running.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::{FmtContext, MakeWriter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

use crate::{Error, Result};

/// Installs the process-wide formatter: lines start with `prefix` (e.g. `"jobenv: "`), the level
/// comes from the variable `level_var` (`debug`, `info`, `warn`, `error`; unset or empty: `info`),
/// and only events whose target is one of `targets` (a crate name, `"jobenv"`, or a module
/// path prefix) are shown.
///
/// Any other value of the variable is [`Error::BadLevel`]: a typo must not silently give a
/// different level. The formatter is installed at `info` even then, so that the caller can log
/// that error before it stops.
pub fn init(prefix: &'static str, level_var: &str, targets: &[&'static str]) -> Result<()> {
    init_writing_to(prefix, level_var, targets, std::io::stderr)
}

/// [`init`], writing each line through `writer` (which may copy it elsewhere too, as jobenv does
/// for a job's exported log) instead of straight to stderr.
pub fn init_writing_to<W>(prefix: &'static str, level_var: &str, targets: &[&'static str], writer: W) -> Result<()>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let value = std::env::var(level_var).unwrap_or_default();
    let (level, result) = match parse_level(&value) {
        Some(level) => (level, Ok(())),
        None => (
            Level::INFO,
            Err(Error::BadLevel {
                var: level_var.to_owned(),
                value,
            }),
        ),
    };
    // Already set (a second call, or a test harness): the first one stays.
    let _ = tracing::subscriber::set_global_default(subscriber(prefix, level, targets, writer));
    result
}

/// `debug`, `info`, `warn` or `error`; empty is `info`.
pub fn parse_level(value: &str) -> Option<Level> {
    match value {
        "" | "info" => Some(Level::INFO),
        "debug" => Some(Level::DEBUG),
        "warn" => Some(Level::WARN),
        "error" => Some(Level::ERROR),
        _ => None,
    }
}

/// The subscriber [`init`] installs, writing to `writer`.
pub fn subscriber<W>(
    prefix: &'static str,
    level: Level,
    targets: &[&'static str],
    writer: W,
) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = targets
        .iter()
        .fold(Targets::new(), |filter, target| filter.with_target(*target, level));
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .event_format(Prefixed(prefix))
                .with_writer(writer)
                .log_internal_errors(false),
        )
        .with(filter)
}

struct Prefixed(&'static str);

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        writer.write_str(self.0)?;
        match *event.metadata().level() {
            Level::ERROR => writer.write_str("error: ")?,
            Level::WARN => writer.write_str("warning: ")?,
            Level::DEBUG | Level::TRACE => writer.write_str("debug: ")?,
            Level::INFO => {}
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(level: Level, emit: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = subscriber("tool: ", level, &["safe_io"], move || sink.clone());
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn one_prefixed_line_per_event_with_its_level() {
        let text = logged(Level::DEBUG, || {
            tracing::error!("e {}", 1);
            tracing::warn!("w");
            tracing::info!("i");
            tracing::debug!("d");
        });
        assert_eq!(text, "tool: error: e 1\ntool: warning: w\ntool: i\ntool: debug: d\n");
    }

    #[test]
    fn the_level_and_the_targets_filter() {
        let text = logged(Level::WARN, || {
            tracing::info!("not at warn");
            tracing::warn!("shown");
            // What a library would log: a URL with a token in it.
            tracing::error!(target: "reqwest::connect", "GET http://x/tokens/delete/Qede");
            tracing::error!(target: "hyper", "closed");
        });
        assert_eq!(text, "tool: warning: shown\n");
        // Positive control: the same library event with its target listed is shown.
        let buffer = Buffer::default();
        let sink = buffer.clone();
        tracing::subscriber::with_default(
            subscriber("tool: ", Level::INFO, &["safe_io", "hyper"], move || sink.clone()),
            || {
                tracing::error!(target: "hyper", "closed");
            },
        );
        assert_eq!(
            String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap(),
            "tool: error: closed\n"
        );
    }

    #[test]
    fn levels_are_the_four_names_and_empty_is_info() {
        assert_eq!(parse_level(""), Some(Level::INFO));
        assert_eq!(parse_level("debug"), Some(Level::DEBUG));
        assert_eq!(parse_level("warn"), Some(Level::WARN));
        assert_eq!(parse_level("error"), Some(Level::ERROR));
        for bad in ["verbose", "DEBUG", "trace", " info", "warning"] {
            assert_eq!(parse_level(bad), None, "{bad:?}");
        }
        let error = Error::BadLevel {
            var: "JOBENV_LOG".into(),
            value: "verbose".into(),
        };
        assert_eq!(
            error.to_string(),
            "JOBENV_LOG is \"verbose\", not a log level: use debug, info, warn or error (empty means info)"
        );
    }
}
