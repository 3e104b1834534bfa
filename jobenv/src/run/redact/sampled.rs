//! The search for the secrets of [`MIN_LEN`] bytes or more: most needles, since each secret of
//! 8 bytes or more has a dozen base64 forms ([`safe_io::secret::base64`]).
//!
//! Searched by their beginnings like the short ones, they would add hundreds of beginnings,
//! random and distinct (a 100-secret node: 873 beginnings, 14 searchers, and the redactor
//! several times slower: see BENCHMARKS.md). Instead, every [`STRIDE`]-th position of
//! the text is sampled: the [`GRAM`] bytes there are looked up in a hash table of the needles'
//! grams at each of their first [`STRIDE`] offsets. An occurrence of a needle of [`MIN_LEN`]
//! bytes or more always has a sampled position within its first [`STRIDE`] bytes whose gram
//! lies inside it, so it cannot be missed. Each gram found tells where a needle would start:
//! a candidate, which the caller verifies (`super::Redactor::process`).
//!
//! The same argument finds every place where the end of the text is a proper prefix of a needle
//! at least [`MIN_LEN`] bytes long: such a tail has a sampled gram inside its first
//! [`STRIDE`] bytes too. So the caller learns what to hold back from the candidates, and checks
//! only the last `MIN_LEN - 1` positions of a chunk on its own.

/// Bytes read at each sampled position.
const GRAM: usize = 4;
/// Needles shorter than this are searched by their beginnings.
pub const MIN_LEN: usize = 10;
/// Bytes between sampled positions: any `MIN_LEN` bytes hold a sampled gram.
pub const STRIDE: usize = MIN_LEN - GRAM + 1;

/// Whether a needle is searched here (and not by its beginning): the tests and the fuzzer choose
/// others through [`super::Redactor::tuned`].
pub fn takes(needle: &[u8]) -> bool {
    needle.len() >= MIN_LEN
}

pub struct Sampled {
    /// The entries of bucket `b` are `entries[starts[b]..starts[b + 1]]`.
    starts: Vec<u32>,
    /// A gram and where it sits in which needle, as `(gram, offset << 29 | class << 28 | id)`.
    /// Sorted, so the needles of one class with a gram at an offset are consecutive and in the
    /// order of their ids. Eight bytes each: a node's 1 MiB of secrets may have millions of
    /// needles, and each has up to [`STRIDE`] entries.
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

/// Bits of an entry's needle id: the class takes one more and the offset (below 8) the last
/// three.
const ID_BITS: u32 = 28;
/// The most needles of one class.
pub const MAX_IDS: usize = 1 << ID_BITS;

/// The needles of one class with one gram at one offset, in the order of their ids.
pub struct Group<'a> {
    entries: &'a [(u32, u32)],
}

impl Group<'_> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The class the needles were given ([`Sampled::new`]).
    pub fn class(&self) -> bool {
        self.entries[0].1 >> ID_BITS & 1 != 0
    }

    /// The `i`th needle's id.
    pub fn id(&self, i: usize) -> usize {
        (self.entries[i].1 & ((1 << ID_BITS) - 1)) as usize
    }
}

impl Sampled {
    /// From the needles to search here, each at least `MIN_LEN` bytes, as `(class, id, bytes)`:
    /// ids below [`MAX_IDS`], unique within a class; the caller tells the classes apart when it
    /// verifies a candidate. `None` when there are none.
    pub fn new<'a>(needles: impl Iterator<Item = (bool, usize, &'a [u8])>) -> Option<Self> {
        let mut entries: Vec<(u32, u32)> = Vec::new();
        for (class, id, needle) in needles {
            debug_assert!(needle.len() >= MIN_LEN);
            let id = u32::try_from(id)
                .ok()
                .filter(|&id| (id as usize) < MAX_IDS)
                .expect("fewer than 2^28 needles");
            for offset in 0..STRIDE {
                let gram = gram(&needle[offset..]);
                // A needle of class `true` is searched from its candidate on, and that search
                // also settles every candidate that starts before it (`super::Periodic::walk`):
                // of the offsets where it has a gram, the first will do. A repeating needle
                // (`aaaa…`) then makes one candidate per sampled position, not seven.
                if class && (0..offset).any(|before| self::gram(&needle[before..]) == gram) {
                    continue;
                }
                let tag = (offset as u32) << (ID_BITS + 1) | u32::from(class) << ID_BITS | id;
                entries.push((gram, tag));
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

    /// Every candidate in `buf`, in the order of the sampled positions, and at one position in
    /// the order of the offsets (so the latest start first): `candidate(at, start, group)` for
    /// the needles of `group`, whose gram is the one at `at` if they start at `start` (at most
    /// [`STRIDE`] - 1 bytes before `at`).
    ///
    /// `candidate` returns a place before which every candidate of these needles is settled
    /// (0: none is): when every needle with the gram at `at` says so past the next sampled
    /// positions with the same gram, those are not looked up. Text made of a repeating secret's
    /// repetition has the same gram at every sampled position, and one search settles them all.
    pub fn find(&self, buf: &[u8], mut candidate: impl FnMut(usize, usize, Group<'_>) -> usize) {
        let seen = |at: usize| {
            let bit = seen_bit(gram(&buf[at..]), self.seen_shift);
            self.seen[bit / 64] >> (bit % 64) & 1 != 0
        };
        // The last gram looked up, and before which sampled position its candidates are settled.
        let mut settled = (0u32, 0usize);
        let mut look = |at: usize| {
            let gram = gram(&buf[at..]);
            if gram != settled.0 || at >= settled.1 {
                settled = (gram, self.look(gram, at, &mut candidate));
            }
        };
        // Four sampled positions at a time: most have no gram of a needle, and four independent
        // lookups keep the processor busy where one waits for each load.
        let mut at = 0;
        while at + 3 * STRIDE + GRAM <= buf.len() {
            if seen(at) | seen(at + STRIDE) | seen(at + 2 * STRIDE) | seen(at + 3 * STRIDE) {
                for k in 0..4 {
                    look(at + k * STRIDE);
                }
            }
            at += 4 * STRIDE;
        }
        while at + GRAM <= buf.len() {
            if seen(at) {
                look(at);
            }
            at += STRIDE;
        }
    }

    /// The candidates that `gram`, at `at`, tells; and the first sampled position where the
    /// same gram may tell one that is not settled yet.
    fn look(&self, gram: u32, at: usize, candidate: &mut impl FnMut(usize, usize, Group<'_>) -> usize) -> usize {
        let b = bucket(gram, self.shift);
        let bucket = &self.entries[self.starts[b] as usize..self.starts[b + 1] as usize];
        let mut settled = usize::MAX;
        for same in bucket.chunk_by(|x, y| (x.0, x.1 >> ID_BITS) == (y.0, y.1 >> ID_BITS)) {
            let (entry_gram, tag) = same[0];
            let offset = (tag >> (ID_BITS + 1)) as usize;
            if entry_gram != gram {
                continue;
            }
            // A later candidate of these needles starts at (a later `at`) - `offset`.
            let before = if offset <= at {
                candidate(at, at - offset, Group { entries: same })
            } else {
                0
            };
            settled = settled.min(before.saturating_add(offset));
        }
        settled
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
