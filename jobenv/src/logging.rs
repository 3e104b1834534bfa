//! jobenv's own messages: stderr, one line each, prefixed `jobenv:` so a job log tells them
//! apart from the program's output. `JOBENV_LOG=debug|info|warn|error` sets the level.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

struct Prefixed;

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        writer.write_str("jobenv: ")?;
        match *event.metadata().level() {
            Level::ERROR => writer.write_str("error: ")?,
            Level::WARN => writer.write_str("warning: ")?,
            _ => {}
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

pub fn init() {
    let level = match std::env::var("JOBENV_LOG").as_deref() {
        Ok("debug") => Level::DEBUG,
        Ok("warn") => Level::WARN,
        Ok("error") => Level::ERROR,
        _ => Level::INFO,
    };
    tracing_subscriber::fmt()
        // When nobody reads stderr any more, a line is lost, nothing else: tracing-subscriber
        // would report the failed write with `eprintln!`, which panics on a broken stderr, and
        // a panicking jobenv leaves the program's children running. (Set before the event
        // format: the builder offers it only on its default format, and keeps it.)
        .log_internal_errors(false)
        .event_format(Prefixed)
        .with_writer(std::io::stderr)
        .with_max_level(level)
        .init();
}
