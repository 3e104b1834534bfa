//! What the commands print on standard output, and what becomes of a stdout that is gone.

use std::io::Write;

use super::Exit;

/// A JSON array printed one element at a time, exactly as `serde_json::to_string_pretty` prints
/// the whole array (each element's lines indented by two spaces), then a newline: what `status`,
/// `recover` and `drain` print, holding one entry at a time.
pub struct JsonArray {
    out: std::io::StdoutLock<'static>,
    count: usize,
    failed: bool,
}

impl JsonArray {
    pub fn new() -> Self {
        JsonArray {
            out: std::io::stdout().lock(),
            count: 0,
            failed: false,
        }
    }

    /// Prints `value`. Stdout gone (a closed pipe, a full disk) never stops the journal's work:
    /// that is said by the exit code ([`JsonArray::finish`]).
    pub fn push(&mut self, value: &impl serde::Serialize) -> std::io::Result<()> {
        if self.failed {
            return Ok(());
        }
        let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
        let mut element = String::with_capacity(text.len() + 64);
        element.push_str(if self.count == 0 { "[\n" } else { ",\n" });
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                element.push('\n');
            }
            element.push_str("  ");
            element.push_str(line);
        }
        self.count += 1;
        if self.out.write_all(element.as_bytes()).is_err() {
            self.failed = true;
        }
        Ok(())
    }

    /// The end of the array: whether all of it was printed.
    pub fn finish(mut self) -> Exit {
        let end: &[u8] = if self.count == 0 { b"[]\n" } else { b"\n]\n" };
        match self.failed || self.out.write_all(end).and_then(|()| self.out.flush()).is_err() {
            false => Exit::Success,
            true => Exit::OutputLost,
        }
    }
}

pub(crate) fn json_line(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("journal entries serialize");
    text.push('\n');
    text
}

pub(crate) fn print(bytes: &[u8]) -> Exit {
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => Exit::Success,
        Err(_) => Exit::OutputLost,
    }
}
