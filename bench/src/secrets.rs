//! The 100 secrets a benchmark node holds, made like a node's: mostly API tokens, and among
//! them passwords with non-ASCII characters, URLs with credentials (`/`, `&`), passwords with
//! `<`, `&`, quotes and backslashes, and multi-line keys. All but the tokens have JSON-escaped
//! forms that differ from the value, so the redactor's needle set is as large as on a node.
//!
//! Deterministic (a fixed xorshift): the same secrets every run. No secret holds a tab: the
//! redaction benchmark marks each printed secret with tabs to check it was redacted whole.

const TOKEN: &[char] = &[
    'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'N', 'O', 'P', 'Q', 'R', 'S', 'T', 'U', 'V', 'W',
    'X', 'Y', 'Z', 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p', 'q', 'r', 's', 't',
    'u', 'v', 'w', 'x', 'y', 'z', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', '-', '_',
];
const NON_ASCII: &[char] = &['ä', 'ö', 'ü', 'ß', 'é', 'ñ', 'ø', 'å', '€', '🔑'];
const URL: &[char] = &['/', '&', '?', '=', ':', '@', '.'];
const MARKUP: &[char] = &['<', '>', '&', '"', '\'', '\\'];
const BASE64: &[char] = &['+', '/', '='];

/// `count` secrets, `(BENCH_SECRET_<i>, value)`: tokens and passwords of 8 to 64 characters,
/// URLs and keys somewhat longer.
pub fn node_secrets(count: usize) -> Vec<(String, String)> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    (0..count)
        .map(|i| (format!("BENCH_SECRET_{i}"), secret(i, &mut rng)))
        .collect()
}

/// Six in ten are tokens; one in ten of each other kind.
fn secret(i: usize, rng: &mut XorShift) -> String {
    let len = 8 + rng.below(57);
    match i % 10 {
        6 => rng.text(len, &[TOKEN, NON_ASCII], 4),
        7 => format!(
            "https://deploy:{}@state.example.org/{}",
            rng.text(len / 2, &[TOKEN], 0),
            rng.text(len / 2, &[TOKEN, URL], 3)
        ),
        8 => rng.text(len, &[TOKEN, MARKUP], 4),
        // A key of several lines (PEM-like base64), each long enough to be a needle of its own.
        9 => (0..2 + len / 24)
            .map(|_| {
                let line_len = 8 + rng.below(16);
                rng.text(line_len, &[TOKEN, BASE64], 6)
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => rng.text(len, &[TOKEN], 0),
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `len` characters from `sets[0]`, each replaced by one of the other sets' characters
    /// with a chance of one in `one_in` (never, for 0); at least one such character when
    /// there are other sets, so every secret of a kind has the characters of its kind.
    fn text(&mut self, len: usize, sets: &[&[char]], one_in: usize) -> String {
        let special: Vec<char> = sets[1..].iter().flat_map(|s| s.iter().copied()).collect();
        let forced = if special.is_empty() {
            usize::MAX
        } else {
            self.below(len)
        };
        (0..len)
            .map(|k| {
                if k == forced || (one_in > 0 && !special.is_empty() && self.below(one_in) == 0) {
                    special[self.below(special.len())]
                } else {
                    sets[0][self.below(sets[0].len())]
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secrets_have_the_characters_that_need_escaping() {
        let secrets = node_secrets(100);
        let values: Vec<&str> = secrets.iter().map(|(_, v)| v.as_str()).collect();
        assert_eq!(values.len(), 100);
        for (what, test) in [
            ("non-ASCII", &(|v: &str| !v.is_ascii()) as &dyn Fn(&str) -> bool),
            ("a slash", &|v: &str| v.contains('/')),
            ("a <", &|v: &str| v.contains('<')),
            ("a &", &|v: &str| v.contains('&')),
            ("a quote", &|v: &str| v.contains('"')),
            ("a newline", &|v: &str| v.contains('\n')),
        ] {
            assert!(
                values.iter().filter(|v| test(v)).count() >= 5,
                "fewer than 5 secrets with {what}: {values:?}"
            );
        }
        assert!(
            values
                .iter()
                .all(|v| !v.contains('\t') && v.chars().count() >= 8 && !v.ends_with('\n'))
        );
        assert_eq!(node_secrets(100), secrets, "not deterministic");
    }
}
