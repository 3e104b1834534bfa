//! Cutting the redacted output of one stream into event lines.
//!
//! The input is what the redactor released, in whatever chunks it came: a line may span many
//! chunks and is reassembled here; an unfinished last line is flushed at end of file. Lines are
//! split on `\n` (a trailing `\r` goes too), decoded as lossy UTF-8 and capped at [`LINE_MAX`]
//! bytes *including* the [`TRUNCATED`] marker of a cut line. At most `LINE_MAX + 1` raw bytes
//! of a line are kept while it is incomplete, so memory stays bounded whatever the program
//! writes.

/// The longest line an event carries, in bytes of UTF-8.
pub const LINE_MAX: usize = 4096;
/// Ends a line that was cut.
pub const TRUNCATED: &str = " [truncated]";

#[derive(Debug, Default)]
pub struct LineSplitter {
    /// The start of a line whose newline has not come yet (at most `LINE_MAX + 1` bytes).
    partial: Vec<u8>,
    /// More bytes of the current line came than were kept.
    cut: bool,
    /// The current line did not fit and is being skipped up to its newline.
    dropping: bool,
}

impl LineSplitter {
    /// Appends to `out` the lines completed by `bytes`, at most `room` of them; the lines that
    /// do not fit are only counted (no text is kept of them): returns how many.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut Vec<String>, mut room: usize) -> u64 {
        let mut dropped = 0;
        while !bytes.is_empty() {
            let end = memchr::memchr(b'\n', bytes);
            let segment = &bytes[..end.unwrap_or(bytes.len())];
            bytes = end.map_or(&[][..], |i| &bytes[i + 1..]);
            if self.dropping || room == 0 {
                // Counted once, at its newline.
                (self.dropping, self.cut) = (end.is_none(), false);
                self.partial.clear();
                dropped += u64::from(end.is_some());
                continue;
            }
            // One byte past the cap tells a line that is too long from one that fits; one more
            // keeps a `\r` that ends a line of exactly the cap.
            let keep = (LINE_MAX + 2).saturating_sub(self.partial.len());
            self.partial.extend_from_slice(&segment[..segment.len().min(keep)]);
            self.cut |= segment.len() > keep;
            if end.is_some() {
                out.push(self.take());
                room -= 1;
            }
        }
        dropped
    }

    /// End of stream: an unfinished last line is a line too; returns 1 if it was being dropped.
    pub fn finish(&mut self, out: &mut Vec<String>) -> u64 {
        if std::mem::take(&mut self.dropping) {
            return 1;
        }
        if !self.partial.is_empty() || self.cut {
            out.push(self.take());
        }
        0
    }

    fn take(&mut self) -> String {
        let mut raw = std::mem::take(&mut self.partial);
        if !self.cut && raw.last() == Some(&b'\r') {
            raw.pop();
        }
        let cut = std::mem::take(&mut self.cut);
        // Valid UTF-8 (the usual case) becomes the String without a copy.
        let text = String::from_utf8(raw).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        capped(text, cut)
    }
}

/// `text`, cut to fit [`LINE_MAX`] with its marker when it is too long or was cut before.
pub fn capped(mut text: String, cut: bool) -> String {
    if !cut && text.len() <= LINE_MAX {
        return text;
    }
    let mut keep = LINE_MAX - TRUNCATED.len();
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    text.truncate(keep.min(text.len()));
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
            assert_eq!(s.push(chunk, &mut out, usize::MAX), 0);
        }
        assert_eq!(s.finish(&mut out), 0);
        out
    }

    #[test]
    fn lines_beyond_the_room_are_counted_never_kept() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        assert_eq!(
            s.push(b"a\nb\nc\nd", &mut out, 2),
            1,
            "c is dropped; d is not complete yet"
        );
        assert_eq!(out, ["a", "b"]);
        // d did not fit either: it is skipped to its newline and counted there.
        assert_eq!(s.push(b"dd\ne\n", &mut out, 10), 1);
        assert_eq!(out, ["a", "b", "e"]);
        assert_eq!(s.push(b"unfinished", &mut out, 0), 0);
        assert_eq!(s.finish(&mut out), 1, "an unfinished dropped line counts at the end");
        assert_eq!(out.len(), 3);
        assert!(s.partial.is_empty());
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
        assert_eq!(
            whole,
            ["one", "two \u{fffd}\u{fffd}", "", "three [REDACTED] four", "five"]
        );
        for i in 0..=input.len() {
            for j in i..=input.len() {
                assert_eq!(
                    split(&[&input[..i], &input[i..j], &input[j..]]),
                    whole,
                    "split at {i},{j}"
                );
            }
        }
    }

    #[test]
    fn a_utf8_character_split_over_chunks_survives() {
        assert_eq!(
            split(&["é\n".as_bytes()[..1].as_ref(), "é\n".as_bytes()[1..].as_ref()]),
            ["é"]
        );
    }

    #[test]
    fn long_lines_are_cut_to_the_cap_marker_included() {
        let cut = format!("{}{TRUNCATED}", "a".repeat(LINE_MAX - TRUNCATED.len()));
        assert_eq!(cut.len(), LINE_MAX);
        // In one chunk, and in small chunks with no newline for a long time.
        let input = [vec![b'a'; LINE_MAX * 3], b"\nnext\n".to_vec()].concat();
        assert_eq!(split(&[&input]), [cut.clone(), "next".into()]);
        let chunks: Vec<&[u8]> = input.chunks(1000).collect();
        assert_eq!(split(&chunks), [cut.clone(), "next".into()]);
        // Exactly at the cap is not cut, however it arrives, and neither is cap + "\r".
        let exact = [vec![b'b'; LINE_MAX], b"\n".to_vec()].concat();
        let full = "b".repeat(LINE_MAX);
        for chunks in [
            &[&exact[..]][..],
            &[&exact[..LINE_MAX], b"\n"],
            &[&exact[..LINE_MAX], b"\r\n"],
        ] {
            assert_eq!(split(chunks), [full.as_str()]);
        }
        assert_eq!(split(&[&exact[..LINE_MAX], b"b\n"])[0].len(), LINE_MAX);
        assert!(split(&[&exact[..LINE_MAX], b"bb\r\n"])[0].ends_with(TRUNCATED));
    }

    #[test]
    fn invalid_utf8_cannot_grow_a_line_past_the_cap() {
        // Each invalid byte becomes a 3-byte U+FFFD.
        for line in split(&[&[vec![0xff; LINE_MAX], b"\n".to_vec(), vec![0xff; 100], b"\n".to_vec()].concat()]) {
            assert!(line.len() <= LINE_MAX, "{}", line.len());
        }
        let wide = "é".repeat(LINE_MAX);
        let capped = capped(wide, false);
        assert!(capped.len() <= LINE_MAX && capped.ends_with(TRUNCATED));
    }

    #[test]
    fn the_partial_line_never_grows_past_the_cap() {
        let mut s = LineSplitter::default();
        let mut out = Vec::new();
        for _ in 0..10_000 {
            s.push(b"0123456789", &mut out, usize::MAX);
            assert!(s.partial.len() <= LINE_MAX + 2);
        }
        s.finish(&mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].len(), LINE_MAX);
    }

    #[test]
    fn jobenv_lines_are_capped_too() {
        assert_eq!(
            capped("payload rejected: undeclared keys: NOPE".into(), false),
            "payload rejected: undeclared keys: NOPE"
        );
        assert_eq!(capped("x".repeat(LINE_MAX + 1), false).len(), LINE_MAX);
    }
}
