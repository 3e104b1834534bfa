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
    /// A gram and where it sits in which needle, as `(gram, offset << ID_BITS | id)`, the id an
    /// index into the sorted needles. Sorted, so the needles with a gram at an offset are
    /// consecutive and in sorted order themselves. Eight bytes each: a node's 1 MiB of secrets
    /// may have millions of needles, and each has [`STRIDE`] entries.
    entries: Vec<(u32, u32)>,
    /// `32 - log2(bucket count)`.
    shift: u32,
    /// One bit per hash of a gram (another hash than the buckets'), set for every gram of an
    /// entry: most grams of the text are none of the needles', and this tells so from a table
    /// small enough to stay in the CPU's first cache.
    seen: Vec<u64>,
    /// `32 - log2(bits of seen)`.
    seen_shift: u32,
}

/// Bits of an entry's needle id: the offset (below 8) takes the other three.
const ID_BITS: u32 = 29;

impl Sampled {
    /// From the ids (indices into the sorted needles) of the needles to search here, each at
    /// least `MIN_LEN` bytes, and fewer than 2^29 of them (a node's secrets make far fewer);
    /// `None` when there are none.
    pub fn new<'a>(chosen: impl Iterator<Item = usize>, needle: impl Fn(usize) -> &'a [u8]) -> Option<Self> {
        let mut entries: Vec<(u32, u32)> = Vec::new();
        for id in chosen {
            let needle = needle(id);
            debug_assert!(needle.len() >= MIN_LEN);
            let id = u32::try_from(id)
                .ok()
                .filter(|&id| id < 1 << ID_BITS)
                .expect("fewer than 2^29 needles");
            for offset in 0..STRIDE {
                entries.push((gram(&needle[offset..]), (offset as u32) << ID_BITS | id));
            }
        }
        // One bucket per one or two entries: most buckets hold a few at most, and the buckets
        // cost half the entries' memory.
        let bits = (entries.len() / 2).next_power_of_two().max(2).trailing_zeros();
        let shift = 32 - bits;
        entries.sort_unstable_by_key(|&(gram, tag)| (bucket(gram, shift), gram, tag));
        let mut starts = vec![0u32; (1 << bits) + 1];
        for &(gram, _) in &entries {
            starts[bucket(gram, shift) + 1] += 1;
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        // Eight bits per distinct gram keep false hits near one in eight; 16 KiB to 128 KiB.
        let grams = entries.chunk_by(|a, b| a.0 == b.0).count();
        let seen_bits = (grams * 8).next_power_of_two().clamp(1 << 17, 1 << 20).trailing_zeros();
        let seen_shift = 32 - seen_bits;
        let mut seen = vec![0u64; (1 << seen_bits) / 64];
        for &(gram, _) in &entries {
            let bit = seen_bit(gram, seen_shift);
            seen[bit / 64] |= 1 << (bit % 64);
        }
        (!entries.is_empty()).then_some(Sampled {
            starts,
            entries,
            shift,
            seen,
            seen_shift,
        })
    }

    /// Every occurrence in `buf` of the needles searched here, as `(start, end)`; `needle`
    /// gives a needle's bytes from its id.
    pub fn find<'a>(&self, buf: &[u8], needle: impl Fn(usize) -> &'a [u8], found: &mut Vec<(usize, usize)>) {
        let seen = |at: usize| {
            let bit = seen_bit(gram(&buf[at..]), self.seen_shift);
            self.seen[bit / 64] >> (bit % 64) & 1 != 0
        };
        // Four sampled positions at a time: most have no gram of a needle, and four independent
        // lookups keep the processor busy where one waits for each load.
        let mut at = 0;
        while at + 3 * STRIDE + GRAM <= buf.len() {
            if seen(at) | seen(at + STRIDE) | seen(at + 2 * STRIDE) | seen(at + 3 * STRIDE) {
                for k in 0..4 {
                    self.look(buf, at + k * STRIDE, &needle, found);
                }
            }
            at += 4 * STRIDE;
        }
        while at + GRAM <= buf.len() {
            if seen(at) {
                self.look(buf, at, &needle, found);
            }
            at += STRIDE;
        }
    }

    /// The occurrences that the gram at `at` tells.
    fn look<'a>(&self, buf: &[u8], at: usize, needle: &impl Fn(usize) -> &'a [u8], found: &mut Vec<(usize, usize)>) {
        let gram = gram(&buf[at..]);
        let b = bucket(gram, self.shift);
        let bucket = &self.entries[self.starts[b] as usize..self.starts[b + 1] as usize];
        for same in bucket.chunk_by(|x, y| (x.0, x.1 >> ID_BITS) == (y.0, y.1 >> ID_BITS)) {
            let (entry_gram, tag) = same[0];
            let offset = (tag >> ID_BITS) as usize;
            if entry_gram == gram && offset <= at {
                let start = at - offset;
                let id = |i: usize| (same[i].1 & ((1 << ID_BITS) - 1)) as usize;
                if let Some(len) = super::longest_at(&buf[start..], same.len(), |i| needle(id(i))) {
                    found.push((start, start + len));
                }
            }
        }
    }
}

fn gram(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes[..GRAM].try_into().expect("GRAM bytes"))
}

fn seen_bit(gram: u32, shift: u32) -> usize {
    (gram.wrapping_mul(0x85EB_CA6B) >> shift) as usize
}

fn bucket(gram: u32, shift: u32) -> usize {
    // Fibonacci hashing: the high bits of the product mix all of the gram's.
    (gram.wrapping_mul(0x9E37_79B1) >> shift) as usize
}
