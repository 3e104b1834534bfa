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
//! Two searches find where a secret may start: searchers of their beginnings
//! (`Engine::searches`) for those shorter than 10 bytes, and a sampled search (`sampled.rs`) for
//! the rest. Each place found is then verified.
//!
//! **What verifying costs.** A place is verified by comparing the text with the secrets that may
//! start there, as far as they agree. For most secrets that is a few bytes, and a long
//! comparison covers a long occurrence; but a secret that repeats itself (`aaaa…`, `abab…`, or a
//! long run inside it) agrees with text made of that repetition from nearly every place, and
//! each of those comparisons would run on for as much of the secret as the text repeats: a
//! `TF_HTTP_PASSWORD` of 4,000 `a`s made redaction cost seconds per MiB of output of `a`s. So a
//! secret is verified by comparison only where at most [`DEPTH_LIMIT`] of its prefixes can end
//! at one place of any text (then no byte of the text is compared more than that many times for
//! it); one that repeats itself more is verified by a KMP search that walks each byte of the
//! text once, from where its first candidate is ([`Periodic`]). A text byte costs a bounded
//! number of steps for each secret whatever its shape (measured: BENCHMARKS.md). One cost stays
//! per chunk, not per byte, whatever the shape: the bytes held back are searched again with the
//! next chunk, so while the output's end agrees with a long secret, each write costs up to that
//! secret's length.

mod sampled;

use std::ops::Range;
use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickKind, Input, MatchKind};

use sampled::{STRIDE, Sampled};

pub const MARKER: &[u8] = b"[REDACTED]";

/// Beginnings per searcher (see [`Engine::searches`]).
const GROUP: usize = 64;
/// How many bytes of each secret the searchers look for (see [`Engine::searches`]).
const PREFIX: usize = 6;
/// The most prefixes of a secret that may end at one place of a text for it to be verified by
/// comparison ([`self_similarity`]): a secret of random characters has one or two, `aaaa` or
/// `abababa` four. Three: with four and more, text of the repetition makes several candidates
/// per sampled position, each a comparison, and comparison was the slower of the two there
/// (measured: BENCHMARKS.md).
const DEPTH_LIMIT: u32 = 3;

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
    /// Where the search of each [`Periodic`] secret got to in the chunk at hand.
    walks: Vec<Walk>,
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
    /// than 10 bytes) are searched by their beginnings: of the 1635 needles of the benchmark's
    /// 100 secrets, 5 (a searcher of 5 beginnings, where all of them would have 873 in 14
    /// searchers).
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
    /// For each beginning searched, the secrets of `short` that start with it: a range of
    /// `short`, where they are consecutive.
    starting_with: Vec<Range<usize>>,
    /// The secrets searched by their beginnings, sorted.
    short: Packed,
    sampled: Option<Sampled>,
    /// The sampled secrets that repeat themselves too much to be verified by comparison; the
    /// sampled search's class `true`, numbered by their place here.
    periodic: Vec<Periodic>,
    /// Every secret, sorted, in one allocation: whether a tail is a proper prefix of one is a
    /// binary search (a set of every prefix would cost an allocation per byte of every secret
    /// at each start).
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
        Self::tuned(secrets, group, sampled::takes, DEPTH_LIMIT)
    }

    /// As [`with_group_size`](Self::with_group_size), with `sample` choosing the secrets the
    /// sampled search finds (of [`sampled::MIN_LEN`] bytes or more), and `depth_limit` those of
    /// them it verifies by comparison (see [`DEPTH_LIMIT`]; 0: none, `u32::MAX`: all): lets the
    /// property tests and the fuzzer drive every path with small alphabets.
    #[doc(hidden)]
    pub fn tuned<S: AsRef<[u8]>>(secrets: &[S], group: usize, sample: fn(&[u8]) -> bool, depth_limit: u32) -> Self {
        let secrets: Vec<&[u8]> = secrets.iter().map(AsRef::as_ref).filter(|s| !s.is_empty()).collect();
        let sample = |secret: &[u8]| secret.len() >= sampled::MIN_LEN && sample(secret);
        let engine = (!secrets.is_empty()).then(|| {
            let mut sorted = secrets.clone();
            sorted.sort_unstable();
            sorted.dedup();
            let short: Vec<&[u8]> = sorted.iter().copied().filter(|s| !sample(s)).collect();
            let short = Packed::new(&short);
            let sorted = Packed::new(&sorted);
            let cut = short.iter().map(<[u8]>::len).min().unwrap_or(0).min(PREFIX);
            let mut starting_with: Vec<Range<usize>> = Vec::new();
            let mut start = 0;
            while start < short.len() {
                let beginning = &short.get(start)[..cut];
                let end = start
                    + (start..short.len())
                        .take_while(|&i| short.get(i).starts_with(beginning))
                        .count();
                starting_with.push(start..end);
                start = end;
            }
            let mut periodic = Vec::new();
            let (mut borders, mut depths) = (Vec::new(), Vec::new());
            let chosen = (0..sorted.len()).filter(|&id| sample(sorted.get(id))).map(|id| {
                let needle = sorted.get(id);
                if self_similarity(needle, &mut borders, &mut depths) <= depth_limit {
                    return (false, id, needle);
                }
                periodic.push(Periodic::new(id, needle, &borders));
                (true, periodic.len() - 1, needle)
            });
            let sampled = Sampled::new(chosen);
            let beginnings: Vec<&[u8]> = starting_with
                .iter()
                .map(|range| &short.get(range.start)[..cut])
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
                short,
                sampled,
                periodic,
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
            walks: Vec::new(),
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

    /// How many bytes are held back right now (for tests of the memory bound).
    #[cfg(test)]
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    fn process(&mut self, buf: &[u8], at_end: bool, out: &mut Vec<u8>) {
        let engine = Arc::clone(self.engine.as_ref().expect("process is only called with an engine"));

        // Every occurrence of every group, then merged into covered intervals, in order. The
        // coverage carried from the previous chunk starts at 0. `hold`: the first place found
        // where the rest of `buf` is a proper prefix of a secret.
        let mut found: Vec<(usize, usize)> = Vec::new();
        if self.held_covered > 0 {
            found.push((0, self.held_covered));
        }
        let mut hold = buf.len();
        for (searcher, search) in engine.searches.iter().enumerate() {
            let mut from = 0;
            while let Some(hit) = search.find(Input::new(buf).span(from..buf.len())) {
                let beginning = searcher * engine.group + hit.pattern().as_usize();
                let alike = engine.starting_with[beginning].clone();
                let (longest, to_end) =
                    longest_at(&buf[hit.start()..], alike.len(), |i| engine.short.get(alike.start + i));
                if let Some(len) = longest {
                    found.push((hit.start(), hit.start() + len));
                }
                if to_end {
                    hold = hold.min(hit.start());
                }
                from = hit.start() + 1;
            }
        }
        if let Some(sampled) = &engine.sampled {
            let mut walks = std::mem::take(&mut self.walks);
            walks.clear();
            walks.resize(engine.periodic.len(), Walk::default());
            sampled.find(buf, |at, start, group| {
                if group.class() {
                    // Every candidate of these secrets that starts before where the longest
                    // partial match of its search begins is settled; every one is once the
                    // search read the whole chunk.
                    let mut settled = usize::MAX;
                    for i in 0..group.len() {
                        let (periodic, walk) = (&engine.periodic[group.id(i)], &mut walks[group.id(i)]);
                        periodic.walk(engine.sorted.get(periodic.id), buf, at, start, walk, &mut found);
                        if walk.pos < buf.len() {
                            settled = settled.min(walk.pos - walk.matched);
                        }
                    }
                    return settled;
                }
                let (longest, to_end) = longest_at(&buf[start..], group.len(), |i| engine.sorted.get(group.id(i)));
                if let Some(len) = longest {
                    found.push((start, start + len));
                }
                if to_end {
                    hold = hold.min(start);
                }
                0
            });
            for walk in &mut walks {
                found.extend(walk.run.take());
                if walk.started && walk.pos == buf.len() && walk.matched > 0 {
                    hold = hold.min(buf.len() - walk.matched);
                }
            }
            self.walks = walks;
        }
        let cut = if at_end { buf.len() } else { engine.hold_from(buf, hold) };
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

/// A sampled secret that repeats itself (more than [`DEPTH_LIMIT`] of its prefixes can end at
/// one place), found by a KMP search: its table takes four bytes per byte of the secret, and
/// such secrets are few.
struct Periodic {
    /// Its place in `Engine::sorted`.
    id: usize,
    /// Where the search goes on when the next byte of the text is not the secret's: after `q`
    /// bytes agreed (`q` below the secret's length), the longest proper border of those `q`
    /// bytes (a prefix that is also a suffix) that the secret does not continue with the same
    /// byte as it continues the `q` (KMP's failure function with Knuth's refinement: in `aaaa…`
    /// a byte that is not `a` goes back to nothing in one step, not one border at a time); after
    /// the whole secret, its longest proper border.
    fallback: Box<[u32]>,
}

/// How far the search of one [`Periodic`] secret went through the chunk at hand: its first
/// `pos` bytes were read from where the search started, and `matched` is the longest tail of
/// them that begins the secret. A search may start over further on (where the next candidate
/// is), since it then finds every occurrence that starts there or later.
#[derive(Clone, Default)]
struct Walk {
    started: bool,
    pos: usize,
    matched: usize,
    /// Occurrences found and not yet reported, merged: a repeating secret in text of its
    /// repetition occurs at every byte, and one interval each would cost a sort.
    run: Option<(usize, usize)>,
}

impl Periodic {
    /// From the secret's `borders` ([`self_similarity`]).
    fn new(id: usize, needle: &[u8], borders: &[u32]) -> Self {
        let mut fallback: Vec<u32> = Vec::with_capacity(borders.len());
        for (q, &border) in borders.iter().enumerate() {
            let border = border as usize;
            let same_next = q > 0 && q < needle.len() && needle[border] == needle[q];
            fallback.push(if same_next { fallback[border] } else { border as u32 });
        }
        Periodic {
            id,
            fallback: fallback.into_boxed_slice(),
        }
    }

    /// Searches on until an occurrence of `needle` at `start` (a candidate from the sampled
    /// position `at`) is found or ruled out, and with it every occurrence that starts between
    /// `at - (STRIDE - 1)` and `start`: the search goes on while the longest partial match it
    /// holds began at `start` or before. Every byte of `buf` is read at most once per chunk,
    /// whatever the candidates.
    fn walk(
        &self,
        needle: &[u8],
        buf: &[u8],
        at: usize,
        start: usize,
        walk: &mut Walk,
        found: &mut Vec<(usize, usize)>,
    ) {
        let len = needle.len();
        // Every candidate of `at` or a later sampled position starts at `lowest` or later.
        let lowest = at.saturating_sub(STRIDE - 1);
        if !walk.started || walk.pos < lowest {
            *walk = Walk {
                started: true,
                pos: lowest,
                matched: 0,
                run: walk.run.take(),
            };
        }
        // While an occurrence at `start` may still be there (the longest partial match began at
        // `start` or before, and would end after what was read), and on while any partial match
        // is: text that agrees with the secret from byte to byte (`aaaa…` for `aaaab…`) is read
        // once, and not again for each candidate in it.
        let end = buf.len().min(start + len);
        while walk.pos < buf.len() && ((walk.pos < end && walk.pos - walk.matched <= start) || walk.matched > 0) {
            let byte = buf[walk.pos];
            if needle[walk.matched] == byte {
                walk.pos += 1;
                walk.matched += 1;
                // As far as the text goes on agreeing, at once (what KMP would do byte by byte).
                if walk.matched < len && walk.pos < buf.len() && needle[walk.matched] == buf[walk.pos] {
                    let agreed = common_prefix(&buf[walk.pos..], &needle[walk.matched..]);
                    walk.pos += agreed;
                    walk.matched += agreed;
                }
            } else {
                while walk.matched > 0 && needle[walk.matched] != byte {
                    walk.matched = self.fallback[walk.matched] as usize;
                }
                if needle[walk.matched] == byte {
                    walk.matched += 1;
                }
                walk.pos += 1;
            }
            if walk.matched == len {
                // While the text goes on repeating the secret's period (its length less its
                // longest border), another occurrence ends every period: all of them at once.
                let period = len - self.fallback[len] as usize;
                let repeated = common_prefix(&buf[walk.pos..], &buf[walk.pos - period..]);
                let end = walk.pos + repeated / period * period;
                let occurrence = (walk.pos - len, end);
                match &mut walk.run {
                    Some(run) if occurrence.0 <= run.1 => run.1 = occurrence.1,
                    run => found.extend(run.replace(occurrence)),
                }
                walk.pos = end;
                walk.matched = self.fallback[len] as usize;
            }
        }
    }
}

/// KMP's failure function of `needle` into `borders` (`borders[q]`: the longest proper border
/// of its first `q` bytes), and the most
/// nonempty prefixes of it that can end at one place of a text: the longest one there, and its
/// borders, and theirs (`depths`, per prefix length, is scratch).
fn self_similarity(needle: &[u8], borders: &mut Vec<u32>, depths: &mut Vec<u32>) -> u32 {
    borders.clear();
    depths.clear();
    borders.push(0);
    depths.push(0);
    let mut border = 0;
    let mut most = 0;
    for (q, &byte) in needle.iter().enumerate() {
        if q > 0 {
            while border > 0 && needle[border] != byte {
                border = borders[border] as usize;
            }
            if needle[border] == byte {
                border += 1;
            }
        }
        borders.push(border as u32);
        let depth = depths[border] + 1;
        depths.push(depth);
        most = most.max(depth);
    }
    most
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
/// `rest` starts with, and whether `rest` is a proper prefix of one of them (so the next chunk
/// may complete it). All of them start with what the first and the last have in common: as far
/// as `rest` agrees with the first, that is compared at once, then they are narrowed down by the
/// next byte of `rest` (two binary searches), and so on. Each step compares only bytes of `rest`
/// that agree with a secret, and a byte past that at most: a long secret costs no more than the
/// text that agrees with it (the first and the last secret are never compared further).
fn longest_at<'a>(rest: &[u8], count: usize, secret: impl Fn(usize) -> &'a [u8]) -> (Option<usize>, bool) {
    let (mut from, mut to) = (0, count);
    let mut longest = None;
    // `rest` starts with the first `checked` bytes of every secret in from..to.
    let mut checked = 0;
    while from < to {
        let (first, last) = (secret(from), secret(to - 1));
        let agreed = checked + common_prefix(&rest[checked..], &first[checked..]);
        let shared = checked + common_prefix(&first[checked..agreed], &last[checked..agreed.min(last.len())]);
        // Past `shared`, the first and the last differ, or `rest` and the first do (or one of
        // them ends there). A secret of exactly that length can only be the first.
        if shared == agreed {
            if first.len() == shared {
                longest = Some(shared);
            }
            if rest.len() == shared {
                return (longest, to - from > 1 || first.len() > shared);
            }
        }
        let byte = rest[shared];
        let before = |i: usize, inclusive: bool| {
            let s = secret(i);
            s.len() <= shared || s[shared] < byte || (inclusive && s[shared] == byte)
        };
        (from, to) = (
            partition_point(from, to, |i| before(i, false)),
            partition_point(from, to, |i| before(i, true)),
        );
        checked = shared + 1;
    }
    (longest, false)
}

/// How many leading bytes `a` and `b` have in common, compared eight at a time: a long secret
/// that agrees with the text costs little more than copying it.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"));
    let mut at = 0;
    while at + 8 <= n {
        let differ = word(a, at) ^ word(b, at);
        if differ != 0 {
            return at + (differ.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + a[at..n].iter().zip(&b[at..n]).take_while(|(x, y)| x == y).count()
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
    /// secret may still be completed by the next chunk. `found` is the smallest the searches
    /// found: each suffix of [`sampled::MIN_LEN`] bytes or more that qualifies starts at a
    /// candidate of theirs, so only the last `MIN_LEN - 1` positions are checked here (each a
    /// binary search among the secrets, of a few bytes). Returns `buf.len()` when nothing needs
    /// holding back.
    fn hold_from(&self, buf: &[u8], found: usize) -> usize {
        let start = buf.len().saturating_sub((self.longest - 1).min(sampled::MIN_LEN - 1));
        (start..found.min(buf.len()))
            .find(|&p| self.may_start(&buf[p..]) && self.is_proper_prefix(&buf[p..]))
            .unwrap_or(found)
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
#[cfg(any(test, feature = "fuzzing"))]
pub fn can_be_spelled_by_marker(secret: &[u8]) -> bool {
    let inside = MARKER.windows(secret.len().max(1)).any(|w| w == secret);
    let starts_with_marker_tail = (1..MARKER.len()).any(|n| secret.starts_with(&MARKER[MARKER.len() - n..]));
    let ends_with_marker_head = (1..MARKER.len()).any(|n| secret.ends_with(&MARKER[..n]));
    inside || starts_with_marker_tail || ends_with_marker_head
}

/// The reference semantics, whole-buffer and obviously correct: used by the tests to check
/// the streaming version at every split point.
#[cfg(any(test, feature = "fuzzing"))]
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

    pub(super) fn every_split(secrets: &[&str], input: &[u8]) {
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
            Redactor::tuned(&secrets, GROUP, never, DEPTH_LIMIT)
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
                let mut r = Redactor::tuned(&secrets, GROUP, sample, DEPTH_LIMIT);
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

#[cfg(test)]
mod periodic_tests {
    use super::*;

    fn depth(needle: &str) -> u32 {
        self_similarity(needle.as_bytes(), &mut Vec::new(), &mut Vec::new())
    }

    #[test]
    fn self_similarity_counts_the_prefixes_that_end_at_one_place() {
        assert_eq!(depth("x"), 1);
        assert_eq!(depth("hunter2-token"), 1);
        // `aba` ends where `a` does: two.
        assert_eq!(depth("abacus-word"), 2);
        assert_eq!(depth("aaaa"), 4);
        assert_eq!(depth("abababa-then-other"), 4);
        assert_eq!(depth(&"a".repeat(4096)), 4096);
        // A run inside, and not at the start: its prefixes do not repeat.
        assert_eq!(depth("xaaaaaaaaaaaa"), 1);
        let mut borders = Vec::new();
        self_similarity(b"abab", &mut borders, &mut Vec::new());
        assert_eq!(borders, [0, 0, 0, 1, 2]);
    }

    #[test]
    fn only_secrets_that_repeat_themselves_are_searched_by_kmp() {
        let forms = |text: &str| -> Vec<Vec<u8>> {
            safe_io::secret::forms(text)
                .into_iter()
                .map(String::into_bytes)
                .collect()
        };
        let periodic = |needles: &[Vec<u8>]| Redactor::new(needles).engine.expect("secrets").periodic.len();
        assert_eq!(periodic(&forms("k3J9-qT7x_wZ2m.Lp0")), 0);
        // Its raw form and its base64 forms repeat, each of them.
        let repeating = forms(&"a".repeat(300));
        assert!(periodic(&repeating) >= 5, "{}", periodic(&repeating));
        assert_eq!(periodic(&[b"aaaaaaaaaa-then-random-text".to_vec()]), 1);
        assert_eq!(periodic(&[b"aaa-then-random-text".to_vec()]), 0);
    }

    #[test]
    fn a_repeating_secret_in_its_repetition_at_every_split_point() {
        // `ab` twelve times: text of `ab`s is covered where it holds the secret whole (24
        // bytes or more), and left where it does not.
        let secret = "ab".repeat(12);
        let secrets = [secret.as_str(), "abab-other"];
        assert_eq!(Redactor::new(&secrets).engine.expect("secrets").periodic.len(), 1);
        let input = format!(
            "x{}y {} {}a {}b",
            "ab".repeat(30),
            "ab".repeat(11),
            "ab".repeat(12),
            "b".repeat(30)
        );
        let expected = redact_all(&secrets, input.as_bytes());
        assert_eq!(
            String::from_utf8_lossy(&expected),
            format!("x[REDACTED]y {} [REDACTED]a {}b", "ab".repeat(11), "b".repeat(30))
        );
        super::tests::every_split(&secrets, input.as_bytes());
    }
}
