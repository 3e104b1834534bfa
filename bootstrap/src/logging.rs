//! The bootstrap's messages: stderr, one line each, prefixed `fediversity-windmill-bootstrap:`
//! so the journal and a terminal tell them apart. `BOOTSTRAP_LOG=debug|info|warn|error` sets
//! the level (debug adds one line per retried call and per script).

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::registry::LookupSpan;

pub const PREFIX: &str = "fediversity-windmill-bootstrap: ";

struct Prefixed;

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        writer.write_str(PREFIX)?;
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

pub fn init() {
    let level = match std::env::var("BOOTSTRAP_LOG").as_deref() {
        Ok("debug") => Level::DEBUG,
        Ok("warn") => Level::WARN,
        Ok("error") => Level::ERROR,
        _ => Level::INFO,
    };
    // Only our own crate's events: reqwest, hyper and tokio-postgres stay silent, so nothing
    // they might format (a URL, a connection string) reaches the log.
    // (The library's events have target `bootstrap`, the binary's `fediversity_windmill_bootstrap`.)
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target("bootstrap", level)
        .with_target("fediversity_windmill_bootstrap", level);
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(tracing_subscriber::fmt::layer().event_format(Prefixed).with_writer(std::io::stderr))
        .with(filter)
        .init();
}
