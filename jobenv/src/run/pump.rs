//! Copying the program's stdout and stderr to jobenv's own, redacted, as the bytes come.
//!
//! One plain thread per stream: a blocking read/write loop is the fastest copy there is, keeps
//! line order within each stream, and leaves the async side free to handle signals.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsFd;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::redact::Redactor;
use crate::events::Tap;

const CHUNK: usize = 64 * 1024;

/// The writable end for a pump: a duplicate of one of jobenv's own descriptors, written with
/// one `write` per chunk (std's stdout would split on lines).
pub fn own_stream(stream: impl AsFd) -> std::io::Result<File> {
    Ok(File::from(stream.as_fd().try_clone_to_owned()?))
}

/// Copies `source` to `sink` through `redactor` until end of file, then sends on `done`. The
/// `tap` (progress events) and the `exported` one (the job's log over OTLP) get the same
/// redacted bytes, after the sink: never the raw ones.
pub fn start(
    name: &str,
    mut source: impl Read + Send + 'static,
    sink: File,
    mut redactor: Redactor,
    (mut tap, mut exported): (Option<Tap>, Option<crate::telemetry::Tap>),
    done: mpsc::Sender<()>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("pump-{name}"))
        .spawn(move || {
            let mut sink = Sink(Some(sink));
            let mut buf = vec![0u8; CHUNK];
            let mut out = Vec::with_capacity(CHUNK + 256);
            loop {
                let n = match source.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let redacted = if redactor.is_passthrough() {
                    &buf[..n]
                } else {
                    out.clear();
                    redactor.push(&buf[..n], &mut out);
                    &out[..]
                };
                sink.write(redacted);
                if let Some(tap) = &mut tap {
                    tap.push(redacted);
                }
                if let Some(exported) = &mut exported {
                    exported.push(redacted);
                }
            }
            out.clear();
            redactor.finish(&mut out);
            sink.write(&out);
            if let Some(tap) = &mut tap {
                tap.push(&out);
                tap.finish();
            }
            if let Some(exported) = &mut exported {
                exported.push(&out);
                exported.finish();
            }
            let _ = done.send(());
        })
        .expect("spawning an output pump")
}

struct Sink(Option<File>);

impl Sink {
    /// When our own output is gone (the log reader died), keep draining the program's pipe so
    /// the program is never blocked or killed by SIGPIPE on our account.
    fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if let Some(file) = &mut self.0 {
            if file.write_all(bytes).is_err() {
                self.0 = None;
            }
        }
    }
}
