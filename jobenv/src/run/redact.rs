//! Streaming redaction of secret values in a byte stream.
//!
//! Written by hand because no crate does this right (see the notes on chunk-boundary leaks in
//! buildkite, goreleaser, concourse, varlock): aho-corasick's own stream replacer only supports
//! `MatchKind::Standard`, which can leave the tail of an overlapping secret unredacted, and it
//! pulls from a reader instead of being pushed chunks as they come.
//!
//! The contract:
//! - every byte covered by an occurrence of any secret is replaced; overlapping or adjacent
//!   occurrences (`hello`, `hello123`) become one `[REDACTED]`;
//! - every other byte comes out unchanged, invalid UTF-8 included;
//! - a secret split over any number of chunks is still redacted;
//! - only bytes that could still be the start of a secret are held back (at most the longest
//!   secret minus one byte), and never released on a timer: the rest goes out at once.
//!
//! Two searches find the secrets: searchers of their beginnings (`Engine::searches`) for those
//! shorter than 10 bytes, and a sampled search (`sampled.rs`) for the rest.

mod sampled;

use std::ops::Range;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickKind, Input, MatchKind};

use sampled::Sampled;

pub const MARKER: &[u8] = b"[REDACTED]";

/// Beginnings per searcher (see [`Engine::searches`]).
const GROUP: usize = 64;
/// How many bytes of each secret the searchers look for (see [`Engine::searches`]).
const PREFIX: usize = 6;

/// Cloning is cheap (the search automaton is shared) and gives a redactor with fresh state,
/// one per output stream.
#[derive(Clone)]
pub struct Redactor {
    engine: Option<Arc<Engine>>,
    /// Bytes received but not yet emitted: a possible start of a secret.
    held: Vec<u8>,
    /// How many leading bytes of `held` an already-found occurrence covers.
    held_covered: usize,
    /// The last emitted byte was redacted: a following covered byte continues that marker.
    in_run: bool,
    scratch: Vec<u8>,
}

struct Engine {
    /// The searchers look for where a secret may begin, not for the secrets themselves: for
    /// the distinct first [`PREFIX`] bytes of the secrets (all of a secret when it is shorter
    /// than that, in which case every secret is cut to the shortest one's length). Six bytes,
    /// not fewer: a public start shared by secrets (`-----BEGIN`, `hvs.`) is then less often a
    /// beginning, and output full of it less often stops the search. At each position found,
    /// [`longest_at`] tells the longest secret that starts there, among the secrets with that
    /// beginning.
    ///
    /// Only secrets that the sampled search does not find ([`sampled::takes`]: those shorter
    /// than 10 bytes) are searched by their beginnings, with any others that begin alike: of
    /// the 1635 needles of the benchmark's 100 secrets, 5 (a searcher of 5 beginnings, where
    /// all of them would have 873 in 14 searchers).
    ///
    /// Each searcher holds at most [`GROUP`] beginnings: a searcher that small gets
    /// aho-corasick's SIMD prefilter, which skips the bytes that cannot start a match, where
    /// one searcher for a hundred patterns has to walk its automaton over every byte
    /// (measured: see BENCHMARKS.md). A search restarted one byte after each position found
    /// reports every position where some secret begins (aho-corasick's overlapping search
    /// would, but without the SIMD prefilter).
    searches: Vec<AhoCorasick>,
    /// Beginnings per searcher: the beginning a searcher's pattern stands for is numbered
    /// `searcher * group + pattern`.
    group: usize,
    /// For each beginning searched, the secrets that start with it: a range of `sorted`, where
    /// they are consecutive.
    starting_with: Vec<Range<usize>>,
    sampled: Option<Sampled>,
    /// Every secret, sorted, in one allocation: whether a tail is a proper prefix of one is a
    /// binary search (a set
    /// of every prefix would cost an allocation per byte of every secret at each start).
    sorted: Packed,
    /// The first two bytes of every secret (one bit per pair), and the first byte of those of
    /// one byte: most positions at the end of a chunk start no secret, and this tells so
    /// without a binary search.
    first_pairs: Vec<u64>,
    first_bytes: [bool; 256],
    longest: usize,
}

impl Redactor {
    /// `secrets` must be non-empty byte strings; an empty list makes a pass-through.
    pub fn new<S: AsRef<[u8]>>(secrets: &[S]) -> Self {
        Self::with_group_size(secrets, GROUP)
    }

    /// As [`new`](Self::new), with `group` beginnings per searcher: lets the property tests and
    /// the fuzzer exercise the merge across searchers with a handful of secrets.
    #[doc(hidden)]
    pub fn with_group_size<S: AsRef<[u8]>>(secrets: &[S], group: usize) -> Self {
        Self::tuned(secrets, group, sampled::takes)
    }

    /// As [`with_group_size`](Self::with_group_size), with `sample` choosing the secrets the
    /// sampled search finds (of [`sampled::MIN_LEN`] bytes or more): lets the property tests and
    /// the fuzzer drive it with small alphabets.
    #[doc(hidden)]
    pub fn tuned<S: AsRef<[u8]>>(secrets: &[S], group: usize, sample: fn(&[u8]) -> bool) -> Self {
        let secrets: Vec<&[u8]> = secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()).collect();
        let sample = |secret: &[u8]| secret.len() >= sampled::MIN_LEN && sample(secret);
        let engine = (!secrets.is_empty()).then(|| {
            let mut sorted = secrets.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let sorted = Packed::new(&sorted);
            let cut = sorted.iter().map(<[u8]>::len).min().unwrap_or(0).min(PREFIX);
            let mut starting_with: Vec<Range<usize>> = Vec::new();
            let mut start = 0;
            while start < sorted.len() {
                let beginning = &sorted.get(start)[..cut];
                let end = start
                    + (start..sorted.len())
                        .take_while(|&i| sorted.get(i).starts_with(beginning))
                        .count();
                if !(start..end).all(|i| sample(sorted.get(i))) {
                    starting_with.push(start..end);
                }
                start = end;
            }
            let chosen = (0..sorted.len()).filter(|&id| sample(sorted.get(id)));
            let sampled = Sampled::new(chosen, |id| sorted.get(id));
            let beginnings: Vec<&[u8]> = starting_with
                .iter()
                .map(|range| &sorted.get(range.start)[..cut])
                .collect();
            let searches = beginnings
                .chunks(group.max(1))
                .map(|group| {
                    // A contiguous NFA: a fraction of a DFA's build time and memory, and the
                    // search speed is the prefilter's either way.
                    AhoCorasick::builder()
                        .match_kind(MatchKind::LeftmostFirst)
                        .kind(Some(AhoCorasickKind::ContiguousNFA))
                        .build(group)
                        .expect("a few dozen short literals always build")
                })
                .collect();
            let mut first_bytes = [false; 256];
            let mut first_pairs = vec![0u64; (1 << 16) / 64];
            for secret in sorted.iter() {
                first_bytes[secret[0] as usize] = true;
                if let [a, b, ..] = secret[..] {
                    let pair = usize::from(u16::from_be_bytes([a, b]));
                    first_pairs[pair / 64] |= 1 << (pair % 64);
                }
            }
            let longest = sorted.iter().map(<[u8]>::len).max().unwrap_or(0);
            Arc::new(Engine {
                searches,
                group: group.max(1),
                starting_with,
                sampled,
                sorted,
                first_pairs,
                first_bytes,
                longest,
            })
        });
        Redactor {
            engine,
            held: Vec::new(),
            held_covered: 0,
            in_run: false,
            scratch: Vec::new(),
        }
    }

    /// True when there is nothing to redact: callers may then copy bytes straight through.
    pub fn is_passthrough(&self) -> bool {
        self.engine.is_none()
    }

    /// Redacts `input` (the next chunk of the stream) and appends what can be released to `out`.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.engine.is_none() {
            out.extend_from_slice(input);
            return;
        }
        if self.held.is_empty() {
            self.process(input, false, out);
        } else {
            let mut buf = std::mem::take(&mut self.scratch);
            buf.clear();
            buf.extend_from_slice(&self.held);
            buf.extend_from_slice(input);
            self.process(&buf, false, out);
            self.scratch = buf;
        }
    }

    /// End of stream: releases what was held back, redacted.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.engine.is_some() && !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            self.process(&held, true, out);
        }
    }

    /// How many bytes are held back right now (for tests and the memory bound).
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    fn process(&mut self, buf: &[u8], at_end: bool, out: &mut Vec<u8>) {
        let engine = Arc::clone(self.engine.as_ref().expect("process is only called with an engine"));
        let cut = if at_end { buf.len() } else { engine.hold_from(buf) };

        // Every occurrence of every group, then merged into covered intervals, in order. The
        // coverage carried from the previous chunk starts at 0.
        let mut found: Vec<(usize, usize)> = Vec::new();
        if self.held_covered > 0 {
            found.push((0, self.held_covered));
        }
        for (searcher, search) in engine.searches.iter().enumerate() {
            let mut from = 0;
            while let Some(hit) = search.find(Input::new(buf).span(from..buf.len())) {
                let beginning = searcher * engine.group + hit.pattern().as_usize();
                let alike = engine.starting_with[beginning].clone();
                if let Some(len) = longest_at(&buf[hit.start()..], alike.len(), |i| engine.sorted.get(alike.start + i))
                {
                    found.push((hit.start(), hit.start() + len));
                }
                from = hit.start() + 1;
            }
        }
        if let Some(sampled) = &engine.sampled {
            sampled.find(buf, |id| engine.sorted.get(id), &mut found);
        }
        // One searcher reports its occurrences in order; the sampled search reports those that
        // one sampled gram tells in no order.
        if engine.searches.len() > 1 || engine.sampled.is_some() {
            found.sort_unstable();
        }
        let mut covered: Vec<(usize, usize)> = Vec::with_capacity(found.len());
        for (start, end) in found {
            match covered.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => covered.push((start, end)),
            }
        }

        let mut pos = 0;
        for &(start, end) in &covered {
            if start >= cut {
                break;
            }
            if start > pos {
                out.extend_from_slice(&buf[pos..start]);
                self.in_run = false;
            }
            if !self.in_run {
                out.extend_from_slice(MARKER);
                self.in_run = true;
            }
            pos = end.min(cut).max(pos);
        }
        if pos < cut {
            out.extend_from_slice(&buf[pos..cut]);
            self.in_run = false;
        }

        // Coverage that runs on past the cut must be carried: the occurrence that made it starts
        // before the held bytes and will not be found again. (Intervals starting at or after
        // the cut will be; carrying one that starts exactly there is harmless.)
        self.held_covered = covered
            .iter()
            .find(|&&(start, end)| start <= cut && cut < end)
            .map_or(0, |&(_, end)| end - cut);
        self.held.clear();
        self.held.extend_from_slice(&buf[cut..]);
    }
}

/// Byte strings in one allocation, an offset each: a node's 1 MiB of secrets may make millions
/// of needles, and a `Vec` each would cost more than their bytes.
struct Packed {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Packed {
    fn new(all: &[&[u8]]) -> Self {
        let mut packed = Packed {
            bytes: Vec::with_capacity(all.iter().map(|s| s.len()).sum()),
            ends: Vec::with_capacity(all.len()),
        };
        for s in all {
            packed.bytes.extend_from_slice(s);
            packed.ends.push(packed.bytes.len());
        }
        packed
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }
}

/// The length of the longest of `count` secrets in sorted order (the `i`th is `secret(i)`) that
/// `rest` starts with. All of them start with what the first and the last have in common: that
/// is compared at once, then they are narrowed down by the next byte of `rest` (two binary
/// searches), and so on. A secret of exactly the common length can only be the first.
fn longest_at<'a>(rest: &[u8], count: usize, secret: impl Fn(usize) -> &'a [u8]) -> Option<usize> {
    let (mut from, mut to) = (0, count);
    let mut longest = None;
    while from < to {
        let (first, last) = (secret(from), secret(to - 1));
        let shared = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        if !rest.starts_with(&first[..shared]) {
            return longest;
        }
        if first.len() == shared {
            longest = Some(shared);
        }
        let Some(&byte) = rest.get(shared) else { return longest };
        let before = |i: usize, inclusive: bool| {
            let s = secret(i);
            s.len() <= shared || s[shared] < byte || (inclusive && s[shared] == byte)
        };
        (from, to) = (
            partition_point(from, to, |i| before(i, false)),
            partition_point(from, to, |i| before(i, true)),
        );
    }
    longest
}

/// The first of `from..to` for which `before` is false (it is true up to some point, then false).
fn partition_point(mut from: usize, mut to: usize, before: impl Fn(usize) -> bool) -> usize {
    while from < to {
        let mid = from + (to - from) / 2;
        if before(mid) { from = mid + 1 } else { to = mid }
    }
    from
}

impl Engine {
    /// The smallest position whose suffix is a proper prefix of some secret: from there on, a
    /// secret may still be completed by the next chunk. Only the last `longest - 1` positions
    /// can qualify. Returns `buf.len()` when nothing needs holding back.
    fn hold_from(&self, buf: &[u8]) -> usize {
        let start = buf.len().saturating_sub(self.longest - 1);
        (start..buf.len())
            .find(|&p| self.may_start(&buf[p..]) && self.is_proper_prefix(&buf[p..]))
            .unwrap_or(buf.len())
    }

    /// False when no secret can start with `tail` (not empty), by its first two bytes.
    fn may_start(&self, tail: &[u8]) -> bool {
        match tail {
            [a, b, ..] => {
                let pair = usize::from(u16::from_be_bytes([*a, *b]));
                self.first_pairs[pair / 64] & (1 << (pair % 64)) != 0
            }
            [a] => self.first_bytes[usize::from(*a)],
            [] => false,
        }
    }

    /// Whether `tail` begins some secret that is longer than it. The secrets that begin with
    /// `tail` are consecutive in sorted order, starting at the first one not less than it.
    fn is_proper_prefix(&self, tail: &[u8]) -> bool {
        let from = partition_point(0, self.sorted.len(), |i| self.sorted.get(i) < tail);
        (from..self.sorted.len())
            .map(|i| self.sorted.get(i))
            .take_while(|secret| secret.starts_with(tail))
            .any(|secret| secret.len() > tail.len())
    }
}

/// True when the marker's own bytes can spell part of `secret` at a marker's edge (`ED]=`
/// after `[REDACTED]` followed by `=`), or hold all of it. Output may then show such a secret
/// although no input byte of it survived; checks of "no secret in the output" exclude these,
/// and rely on the exact comparison with [`redact_all`] instead. Found by the fuzzer.
pub fn can_be_spelled_by_marker(secret: &[u8]) -> bool {
    let inside = MARKER.windows(secret.len().max(1)).any(|w| w == secret);
    let starts_with_marker_tail = (1..MARKER.len()).any(|n| secret.starts_with(&MARKER[MARKER.len() - n..]));
    let ends_with_marker_head = (1..MARKER.len()).any(|n| secret.ends_with(&MARKER[..n]));
    inside || starts_with_marker_tail || ends_with_marker_head
}

/// The reference semantics, whole-buffer and obviously correct: used by the tests to check
/// the streaming version at every split point.
pub fn redact_all<S: AsRef<[u8]>>(secrets: &[S], input: &[u8]) -> Vec<u8> {
    let mut covered = vec![false; input.len()];
    for secret in secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()) {
        for start in 0..input.len() {
            if input[start..].starts_with(secret) {
                covered[start..start + secret.len()].iter_mut().for_each(|c| *c = true);
            }
        }
    }
    let mut out = Vec::new();
    for (i, &byte) in input.iter().enumerate() {
        if !covered[i] {
            out.push(byte);
        } else if i == 0 || !covered[i - 1] {
            out.extend_from_slice(MARKER);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streamed(secrets: &[&str], chunks: &[&[u8]]) -> Vec<u8> {
        let mut r = Redactor::new(secrets);
        let mut out = Vec::new();
        for chunk in chunks {
            r.push(chunk, &mut out);
        }
        r.finish(&mut out);
        out
    }

    fn every_split(secrets: &[&str], input: &[u8]) {
        let expected = redact_all(secrets, input);
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let got = streamed(secrets, &[&input[..i], &input[i..j], &input[j..]]);
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&expected),
                    "split at {i},{j} of {:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn replaces_a_secret() {
        assert_eq!(streamed(&["hunter22"], &[b"pw=hunter22!"]), b"pw=[REDACTED]!");
    }

    #[test]
    fn overlapping_secrets_become_one_marker() {
        assert_eq!(redact_all(&["hello", "hello123"], b"x hello123 y"), b"x [REDACTED] y");
        assert_eq!(redact_all(&["abcd", "cdef"], b"abcdef"), b"[REDACTED]");
        every_split(&["hello", "hello123"], b"x hello123 hello12 y");
        every_split(&["abcd", "cdef"], b"zabcdefz abcd cdef");
        every_split(&["aaaa"], b"aaaaaaaaa b aaa");
    }

    #[test]
    fn every_split_point_of_mixed_input() {
        every_split(
            &["s3cr3t-token", "tok3n"],
            b"a s3cr3t-tok3n s3cr3t-token\n\xff\xfe tok3",
        );
    }

    #[test]
    fn bytes_that_cannot_start_a_secret_are_not_held() {
        let mut r = Redactor::new(&["secret"]);
        let mut out = Vec::new();
        r.push(b"hello world", &mut out);
        assert_eq!(out, b"hello world");
        assert_eq!(r.held_len(), 0);
        r.push(b" sec", &mut out);
        assert_eq!(out, b"hello world ");
        assert_eq!(r.held_len(), 3);
        r.push(b"ond", &mut out);
        assert_eq!(out, b"hello world second");
    }

    #[test]
    fn hold_back_is_bounded_by_the_longest_secret() {
        let mut r = Redactor::new(&["abcdefgh"]);
        let mut out = Vec::new();
        for _ in 0..1000 {
            r.push(b"abcdefg", &mut out);
            assert!(r.held_len() <= 7);
        }
    }

    #[test]
    fn covered_bytes_that_are_held_stay_covered() {
        // "abcd" is complete, but "abcdxyz1" could still follow: "abcd" is held covered.
        every_split(&["abcd", "abcdxyz1", "bcdq"], b"abcdxyz abcdxyz1 abcdq");
    }

    #[test]
    fn secrets_sharing_a_beginning_are_told_apart_in_full() {
        // One searcher pattern, "hvs.", for all four; the longest that starts at each place wins.
        let secrets = ["hvs.", "hvs.abcd", "hvs.abcdef", "hvs.abzz"];
        assert_eq!(redact_all(&secrets, b"hvs.abcde hvs.ab"), b"[REDACTED]e [REDACTED]ab");
        every_split(&secrets, b"hvs.abcde hvs.abcdef hvs.abz hvs.hvs.abzz");
        // A one-byte secret makes every beginning one byte long.
        every_split(&["hvs.abcd", "q", "hvs.xyz"], b"qhvs.abcq hvs.xyzq");
    }

    #[test]
    fn passthrough_without_secrets() {
        let r = Redactor::new::<&str>(&[]);
        assert!(r.is_passthrough());
        assert_eq!(streamed(&[], &[b"abc"]), b"abc");
    }
}

#[cfg(test)]
mod carry_tests {
    use super::*;

    #[test]
    fn a_gap_after_carried_coverage_is_not_redacted() {
        // "xxxxyy" ends at the cut region while "yy zz" is held: the gap must stay visible.
        let secrets = ["xxxxyy", "zzzzzzzz", "q qq"];
        let input = b"xxxxyy q zzzz";
        let expected = redact_all(&secrets, input);
        for i in 0..=input.len() {
            let mut r = Redactor::new(&secrets);
            let mut out = Vec::new();
            r.push(&input[..i], &mut out);
            r.push(&input[i..], &mut out);
            r.finish(&mut out);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&expected),
                "split at {i}"
            );
        }
    }
}

#[cfg(test)]
mod group_tests {
    use super::*;

    #[test]
    fn more_secrets_than_one_group_holds_are_all_redacted_and_merged_across_groups() {
        // 150 secrets of distinct beginnings: three searchers (none of them sampled). Overlapping
        // secrets land in different groups.
        let mut secrets: Vec<String> = (0..150).map(|i| format!("{i:03}-secret-value")).collect();
        secrets.push("value-tail-x".into()); // overlaps the end of every "...-value"
        let never = |_: &[u8]| false;
        assert_eq!(
            Redactor::tuned(&secrets, GROUP, never)
                .engine
                .expect("secrets")
                .searches
                .len(),
            3
        );
        let input = b"a 007-secret-value-tail-x b 149-secret-value c 000-secret-valu d";
        let expected = redact_all(&secrets, input);
        assert_eq!(
            String::from_utf8_lossy(&expected),
            "a [REDACTED] b [REDACTED] c 000-secret-valu d"
        );
        // The same secrets found by their beginnings, and by the sampled search.
        for sample in [never, sampled::takes] {
            for cut in 0..=input.len() {
                let mut r = Redactor::tuned(&secrets, GROUP, sample);
                let mut out = Vec::new();
                r.push(&input[..cut], &mut out);
                r.push(&input[cut..], &mut out);
                r.finish(&mut out);
                assert_eq!(out, expected, "cut at {cut}");
            }
        }
        // Positive control: these secrets are all sampled, so no searcher is left.
        assert!(Redactor::new(&secrets).engine.expect("secrets").searches.is_empty());
    }
}

#[cfg(test)]
mod sampled_tests {
    use super::*;

    fn streamed(redactor: &Redactor, input: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut r = redactor.clone();
        let mut out = Vec::new();
        let mut from = 0;
        for &cut in cuts {
            r.push(&input[from..cut], &mut out);
            from = cut;
        }
        r.push(&input[from..], &mut out);
        r.finish(&mut out);
        out
    }

    #[test]
    fn a_sampled_secret_is_found_at_every_offset_and_split() {
        // Ten bytes, the shortest sampled: whatever its offset from a sampled position, one
        // gram of it is sampled.
        let secrets = ["dXNlcjpwYX", "ZXIyLXBhc3M=", "c2VjcmV0LXNlY3JldC1zZWNyZXQ="];
        assert!(secrets.iter().all(|s| sampled::takes(s.as_bytes())));
        let redactor = Redactor::new(&secrets);
        for lead in 0..20 {
            let input = format!(
                "{}dXNlcjpwYX{}ZXIyLXBhc3M= c2VjcmV0LXNlY3JldC1zZWNyZXQ dXNlcjpwY",
                "x".repeat(lead),
                "y".repeat(lead % 3)
            );
            let expected = redact_all(&secrets, input.as_bytes());
            // Touching occurrences become one marker.
            let between = if lead % 3 == 0 {
                String::new()
            } else {
                format!("{}[REDACTED]", "y".repeat(lead % 3))
            };
            assert_eq!(
                String::from_utf8_lossy(&expected),
                format!(
                    "{}[REDACTED]{between} c2VjcmV0LXNlY3JldC1zZWNyZXQ dXNlcjpwY",
                    "x".repeat(lead)
                )
            );
            for cut in 0..=input.len() {
                assert_eq!(
                    streamed(&redactor, input.as_bytes(), &[cut]),
                    expected,
                    "lead {lead}, cut {cut}"
                );
            }
        }
    }

    #[test]
    fn occurrences_told_by_one_gram_are_merged_in_order() {
        // One sampled gram stands for both: for the shorter one starting a byte later too. Found
        // out of order, the longer one's first byte was left out (the property test found it).
        let secrets = ["/aa-'a<a\\\"", "\\/aa-'a<a\\\""];
        let redactor = Redactor::new(&secrets);
        for lead in 0..16 {
            let input = format!("{}{}", "a".repeat(lead), secrets[1]);
            assert_eq!(
                streamed(&redactor, input.as_bytes(), &[]),
                format!("{}[REDACTED]", "a".repeat(lead)).as_bytes(),
                "lead {lead}"
            );
        }
    }

    #[test]
    fn sampled_secrets_sharing_a_start_are_told_apart() {
        // A hundred tokens with one public start: each gram of it stands for all of them.
        let secrets: Vec<String> = (0..100).map(|i| format!("hvs.CAESIpublic-start-{i:03}")).collect();
        let input = b"hvs.CAESIpublic-start-042 hvs.CAESIpublic-start-1 hvs.CAESIpublic-start-0999";
        let expected = redact_all(&secrets, input);
        assert_eq!(
            String::from_utf8_lossy(&expected),
            "[REDACTED] hvs.CAESIpublic-start-1 [REDACTED]9"
        );
        let redactor = Redactor::new(&secrets);
        assert!(
            redactor.engine.as_ref().expect("secrets").searches.is_empty(),
            "all sampled"
        );
        for cut in 0..=input.len() {
            assert_eq!(streamed(&redactor, input, &[cut]), expected, "cut at {cut}");
        }
    }
}
