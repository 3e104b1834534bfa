//! Cutting the redacted output of one stream into lines for events.
//!
//! The input is what the redactor released, in whatever chunks it came: a line may span many
//! chunks and is reassembled here; an unfinished last line is flushed at end of file. Lines are
//! split on `\n` (a trailing `\r` goes too), decoded as lossy UTF-8 and capped at
//! [`LINE_MAX`] bytes: a longer line is sent at once, cut, with [`TRUNCATED`], and the rest of
//! it up to its newline is skipped, so memory stays bounded whatever the program writes.

/// The longest line text an event carries.
pub const LINE_MAX: usize = 4096;
/// Appended to a line that was cut at [`LINE_MAX`].
pub const TRUNCATED: &str = " [truncated]";

#[derive(Debug, Default)]
pub struct LineSplitter {
    /// The start of a line whose newline has not come yet (at most `LINE_MAX` bytes).
    partial: Vec<u8>,
    /// The current line was already sent cut: skip up to its newline.
    skipping: bool,
}

impl LineSplitter {
    /// Appends every line completed by `bytes` to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<String>) {
        while !bytes.is_empty() {
            let end = memchr::memchr(b'\n', bytes);
            let segment = &bytes[..end.unwrap_or(bytes.len())];
            bytes = end.map_or(&[][..], |i| &bytes[i + 1..]);
            if self.skipping {
                self.skipping = end.is_none();
                continue;
            }
            if end.is_some() {
                if self.partial.is_empty() {
                    out.push(text(segment));
                } else {
                    self.partial.extend_from_slice(segment);
                    out.push(text(&self.partial));
                    self.partial.clear();
                }
            } else if self.partial.len() + segment.len() > LINE_MAX {
                // No newline yet and already too long: send what the cap allows now.
                let room = LINE_MAX - self.partial.len();
                self.partial.extend_from_slice(&segment[..room]);
                let mut cut = String::from_utf8_lossy(&self.partial).into_owned();
                cut.push_str(TRUNCATED);
                out.push(cut);
                self.partial.clear();
                self.skipping = true;
            } else {
                self.partial.extend_from_slice(segment);
            }
        }
    }

    /// End of stream: an unfinished last line is a line too.
    pub fn finish(&mut self, out: &mut Vec<String>) {
        if !self.partial.is_empty() {
            out.push(text(&self.partial));
            self.partial.clear();
        }
        self.skipping = false;
    }
}

fn text(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() <= LINE_MAX {
        return String::from_utf8_lossy(line).into_owned();
    }
    let mut text = String::from_utf8_lossy(&line[..LINE_MAX]).into_owned();
    text.push_str(TRUNCATED);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for chunk in chunks {
            s.push(chunk, &mut out);
        }
        s.finish(&mut out);
        out
    }

    #[test]
    fn lines_are_reassembled_across_chunks_and_the_last_one_is_flushed() {
        assert_eq!(split(&[b"a\nb", b"c", b"d\r\n\ne"]), ["a", "bcd", "", "e"]);
        assert_eq!(split(&[b"x\n"]), ["x"]);
        assert_eq!(split(&[b"", b"\n"]), [""]);
    }

    #[test]
    fn every_split_point_gives_the_same_lines() {
        let input: &[u8] = b"one\ntwo \xff\xfe\r\n\nthree [REDACTED] four\nfive";
        let whole = split(&[input]);
        assert_eq!(whole, ["one", "two \u{fffd}\u{fffd}", "", "three [REDACTED] four", "five"]);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                assert_eq!(split(&[&input[..i], &input[i..j], &input[j..]]), whole, "split at {i},{j}");
            }
        }
    }

    #[test]
    fn a_utf8_character_split_over_chunks_survives() {
        assert_eq!(split(&["é\n".as_bytes()[..1].as_ref(), "é\n".as_bytes()[1..].as_ref()]), ["é"]);
    }

    #[test]
    fn long_lines_are_cut_and_their_rest_skipped() {
        let long = vec![b'a'; LINE_MAX * 3];
        let cut = format!("{}{TRUNCATED}", "a".repeat(LINE_MAX));
        // In one chunk, and in small chunks with no newline for a long time.
        let mut input = long.clone();
        input.extend_from_slice(b"\nnext\n");
        assert_eq!(split(&[&input]), [cut.clone(), "next".into()]);
        let chunks: Vec<&[u8]> = input.chunks(1000).collect();
        assert_eq!(split(&chunks), [cut.clone(), "next".into()]);
        // Exactly at the cap is not cut, however it arrives.
        let exact = [vec![b'b'; LINE_MAX], b"\n".to_vec()].concat();
        assert_eq!(split(&[&exact]), ["b".repeat(LINE_MAX)]);
        assert_eq!(split(&[&exact[..LINE_MAX], b"\n"]), ["b".repeat(LINE_MAX)]);
        assert_eq!(split(&[&exact[..LINE_MAX], b"b\n"]), [format!("{}{TRUNCATED}", "b".repeat(LINE_MAX))]);
    }

    #[test]
    fn the_partial_line_never_grows_past_the_cap() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for _ in 0..10_000 {
            s.push(b"0123456789", &mut out);
            assert!(s.partial.len() <= LINE_MAX);
        }
        assert_eq!(out.len(), 1);
    }
}
