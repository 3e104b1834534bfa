//! Cutting the redacted output of one stream into lines for events.
//!
//! The input is what the redactor released, in whatever chunks it came: a line may span many
//! chunks and is reassembled here; an unfinished last line is flushed at end of file. Lines are
//! split on `\n` (a trailing `\r` goes too) and capped at [`LINE_MAX`] bytes: a longer line is
//! kept cut, marked [`TRUNCATED`], and the rest of it up to its newline is skipped, so memory
//! stays bounded whatever the program writes.
//!
//! The lines of one read go into one [`Block`]: one buffer and the line boundaries in it, not
//! a string per line. Most lines of a program that writes fast are dropped by the bounded
//! queue before they could be sent; they are never decoded or allocated on their own. Text
//! becomes (lossy UTF-8) strings only when the sender takes a line into a batch.

/// The longest line text an event carries.
pub const LINE_MAX: usize = 4096;
/// Appended to a line that was cut at [`LINE_MAX`].
pub const TRUNCATED: &str = " [truncated]";

/// Complete lines, in one buffer.
#[derive(Debug, Default)]
pub struct Block {
    text: Vec<u8>,
    spans: Vec<Span>,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    start: u32,
    end: u32,
    truncated: bool,
}

impl Block {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The bytes line `i` holds (its text without the marker).
    pub fn line_len(&self, i: usize) -> usize {
        let span = self.spans[i];
        (span.end - span.start) as usize
    }

    /// The bytes of lines `from..to`: the text holds nothing but the lines, back to back.
    pub fn bytes_of(&self, from: usize, to: usize) -> usize {
        let offset = |i: usize| self.spans.get(i).map_or(self.text.len(), |span| span.start as usize);
        offset(to) - offset(from)
    }

    /// Line `i` as text: lossy UTF-8, with the marker if it was cut.
    pub fn line(&self, i: usize) -> String {
        let span = self.spans[i];
        let mut text = String::from_utf8_lossy(&self.text[span.start as usize..span.end as usize]).into_owned();
        if span.truncated {
            text.push_str(TRUNCATED);
        }
        text
    }

    /// Adds one whole line (jobenv's own lines), capped like any other.
    pub fn push_line(&mut self, line: &str) {
        let start = self.text.len();
        self.text.extend_from_slice(line.as_bytes());
        self.close_line(start, line.len() > LINE_MAX);
    }

    /// Ends the line that starts at `start` of the text: strips one `\r`, applies the cap.
    fn close_line(&mut self, start: usize, mut truncated: bool) {
        if !truncated && self.text.len() > start && self.text.last() == Some(&b'\r') {
            self.text.pop();
        }
        if self.text.len() - start > LINE_MAX {
            self.text.truncate(start + LINE_MAX);
            truncated = true;
        }
        // Lines of one read: far below 4 GiB.
        self.spans.push(Span { start: start as u32, end: self.text.len() as u32, truncated });
    }
}

#[derive(Debug, Default)]
pub struct LineSplitter {
    /// The start of a line whose newline has not come yet (at most `LINE_MAX` bytes).
    partial: Vec<u8>,
    /// The current line was already sent cut: skip up to its newline.
    skipping: bool,
}

impl LineSplitter {
    /// Appends every line completed by `bytes` to `out`.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Block) {
        while !bytes.is_empty() {
            let end = memchr::memchr(b'\n', bytes);
            let segment = &bytes[..end.unwrap_or(bytes.len())];
            bytes = end.map_or(&[][..], |i| &bytes[i + 1..]);
            if self.skipping {
                self.skipping = end.is_none();
                continue;
            }
            if end.is_some() {
                let start = out.text.len();
                out.text.extend_from_slice(&self.partial);
                self.partial.clear();
                // One byte past the cap is enough to know the line is too long (or ends in \r).
                let room = (LINE_MAX + 2).saturating_sub(out.text.len() - start);
                out.text.extend_from_slice(&segment[..segment.len().min(room)]);
                let cut = segment.len() > room;
                out.close_line(start, cut);
            } else if self.partial.len() + segment.len() > LINE_MAX {
                // No newline yet and already too long: send what the cap allows now.
                let start = out.text.len();
                out.text.extend_from_slice(&self.partial);
                out.text.extend_from_slice(&segment[..LINE_MAX - self.partial.len()]);
                self.partial.clear();
                out.close_line(start, true);
                self.skipping = true;
            } else {
                self.partial.extend_from_slice(segment);
            }
        }
    }

    /// End of stream: an unfinished last line is a line too.
    pub fn finish(&mut self, out: &mut Block) {
        if !self.partial.is_empty() {
            let start = out.text.len();
            out.text.extend_from_slice(&self.partial);
            self.partial.clear();
            out.close_line(start, false);
        }
        self.skipping = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out = Block::default();
        for chunk in chunks {
            s.push(chunk, &mut out);
        }
        s.finish(&mut out);
        (0..out.len()).map(|i| out.line(i)).collect()
    }

    #[test]
    fn lines_are_reassembled_across_chunks_and_the_last_one_is_flushed() {
        assert_eq!(split(&[b"a\nb", b"c", b"d\r\n\ne"]), ["a", "bcd", "", "e"]);
        assert_eq!(split(&[b"x\n"]), ["x"]);
        assert_eq!(split(&[b"", b"\n"]), [""]);
        assert_eq!(split(&[b"cr at the end\r", b"\n"]), ["cr at the end"]);
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
        let cut = format!("{}{TRUNCATED}", "a".repeat(LINE_MAX));
        // In one chunk, and in small chunks with no newline for a long time.
        let input = [vec![b'a'; LINE_MAX * 3], b"\nnext\n".to_vec()].concat();
        assert_eq!(split(&[&input]), [cut.clone(), "next".into()]);
        let chunks: Vec<&[u8]> = input.chunks(1000).collect();
        assert_eq!(split(&chunks), [cut.clone(), "next".into()]);
        // Exactly at the cap is not cut, however it arrives, and neither is cap + "\r".
        let exact = [vec![b'b'; LINE_MAX], b"\n".to_vec()].concat();
        let full = "b".repeat(LINE_MAX);
        for chunks in [&[&exact[..]][..], &[&exact[..LINE_MAX], b"\n"], &[&exact[..LINE_MAX], b"\r\n"]] {
            assert_eq!(split(chunks), [full.as_str()]);
        }
        assert_eq!(split(&[&exact[..LINE_MAX], b"b\n"]), [format!("{full}{TRUNCATED}")]);
        assert_eq!(split(&[&exact[..LINE_MAX], b"bb\r\n"]), [format!("{full}{TRUNCATED}")]);
        // A long line that arrives with its newline in one chunk keeps at most the cap.
        let mut block = Block::default();
        LineSplitter::default().push(&[vec![b'c'; 60_000], b"\n".to_vec()].concat(), &mut block);
        assert_eq!(block.line_len(0), LINE_MAX);
        assert!(block.text.len() <= LINE_MAX + 2);
    }

    #[test]
    fn the_partial_line_never_grows_past_the_cap() {
        let mut s = LineSplitter::default();
        let mut out = Block::default();
        for _ in 0..10_000 {
            s.push(b"0123456789", &mut out);
            assert!(s.partial.len() <= LINE_MAX);
        }
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn jobenv_lines_are_capped_too() {
        let mut block = Block::default();
        block.push_line("payload rejected: undeclared keys: NOPE");
        block.push_line(&"x".repeat(LINE_MAX + 1));
        assert_eq!(block.line(0), "payload rejected: undeclared keys: NOPE");
        assert_eq!(block.line(1), format!("{}{TRUNCATED}", "x".repeat(LINE_MAX)));
    }
}
