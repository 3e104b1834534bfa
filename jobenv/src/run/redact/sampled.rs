//! The search for the secrets of [`MIN_LEN`] bytes or more: most needles, since each secret of
//! 8 bytes or more has a dozen base64 forms ([`safe_io::secret::base64`]).
//!
//! Searched by their beginnings like the short ones, they would add hundreds of beginnings,
//! random and distinct (a 100-secret node: 873 beginnings, 14 searchers, and the redactor
//! several times slower: see BENCHMARKS.md). Instead, every [`STRIDE`]-th position of
//! the text is sampled: the [`GRAM`] bytes there are looked up in a hash table of the needles'
//! grams at each of their first [`STRIDE`] offsets. An occurrence of a needle of [`MIN_LEN`]
//! bytes or more always has a sampled position within its first [`STRIDE`] bytes whose gram
//! lies inside it, so it cannot be missed. Each gram found tells where a needle would start,
//! and the needles with that gram there are narrowed down in sorted order as for a beginning
//! (`longest_at`), so a gram that many needles share (a public start such as `https://` or
//! `eyJhbGciOi`, an escape such as `\u00`) costs a binary search, not one comparison per needle.

use std::ops::Range;

/// Bytes read at each sampled position.
const GRAM: usize = 4;
/// Needles shorter than this are searched by their beginnings.
pub const MIN_LEN: usize = 10;
/// Bytes between sampled positions: any `MIN_LEN` bytes hold a sampled gram.
const STRIDE: usize = MIN_LEN - GRAM + 1;

/// Whether a needle is searched here (and not by its beginning): the tests and the fuzzer choose
/// others through [`super::Redactor::tuned`].
pub fn takes(needle: &[u8]) -> bool {
    needle.len() >= MIN_LEN
}

pub struct Sampled {
    /// The entries of bucket `b` are `entries[starts[b]..starts[b + 1]]`.
    starts: Vec<u32>,
    entries: Vec<Entry>,
    /// For each entry, the needles it stands for, as indices into the sorted needles (so in
    /// sorted order themselves).
    ids: Vec<u32>,
    /// `32 - log2(bucket count)`.
    shift: u32,
}

struct Entry {
    gram: u32,
    /// Where the gram sits in its needles.
    offset: u32,
    ids: Range<u32>,
}

impl Sampled {
    /// From the indices (into `sorted`) of the needles to search here, each at least `MIN_LEN`
    /// bytes.
    pub fn new(sorted: &[Vec<u8>], chosen: impl Iterator<Item = usize>) -> Self {
        let mut keys: Vec<(u32, u32, u32)> = Vec::new();
        for id in chosen {
            let needle = &sorted[id];
            debug_assert!(needle.len() >= MIN_LEN);
            for offset in 0..STRIDE {
                keys.push((gram(&needle[offset..]), offset as u32, id as u32));
            }
        }
        keys.sort_unstable();
        let mut entries: Vec<Entry> = Vec::new();
        let mut ids = Vec::with_capacity(keys.len());
        for same in keys.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let start = ids.len() as u32;
            ids.extend(same.iter().map(|key| key.2));
            entries.push(Entry { gram: same[0].0, offset: same[0].1, ids: start..ids.len() as u32 });
        }
        // About two buckets per entry: most buckets hold none or one.
        let bits = (entries.len() * 2).next_power_of_two().max(2).trailing_zeros();
        let shift = 32 - bits;
        entries.sort_by_key(|entry| bucket(entry.gram, shift));
        let mut starts = vec![0u32; (1 << bits) + 1];
        for entry in &entries {
            starts[bucket(entry.gram, shift) + 1] += 1;
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        Sampled { starts, entries, ids, shift }
    }

    /// Every occurrence in `buf` of the needles searched here, as `(start, end)`; `longest`
    /// tells, of a set of needles (their ids) and a position, the length of the longest there.
    pub fn find(&self, buf: &[u8], longest: impl Fn(&[u32], usize) -> Option<usize>, found: &mut Vec<(usize, usize)>) {
        let mut at = 0;
        while at + GRAM <= buf.len() {
            let gram = gram(&buf[at..]);
            let b = bucket(gram, self.shift);
            for entry in &self.entries[self.starts[b] as usize..self.starts[b + 1] as usize] {
                let offset = entry.offset as usize;
                if entry.gram == gram && offset <= at {
                    let start = at - offset;
                    let ids = &self.ids[entry.ids.start as usize..entry.ids.end as usize];
                    if let Some(len) = longest(ids, start) {
                        found.push((start, start + len));
                    }
                }
            }
            at += STRIDE;
        }
    }
}

fn gram(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..GRAM].try_into().expect("GRAM bytes"))
}

fn bucket(gram: u32, shift: u32) -> usize {
    // Fibonacci hashing: the high bits of the product mix all of the gram's.
    (gram.wrapping_mul(0x9E37_79B1) >> shift) as usize
}
