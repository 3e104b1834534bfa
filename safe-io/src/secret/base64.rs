//! A secret inside base64, wherever it sits in what was encoded.
//!
//! base64 writes 6 bits per character, so a secret's encoding depends on its byte offset in the
//! encoded data modulo 3 (`curl -u user:$PASSWORD` sends `base64("user:" + password)`: offset
//! 2), and its first and last characters mix in bits of the bytes around it. For each offset
//! and for both alphabets (standard `+/` and URL-safe `-_`) the forms are:
//! - the characters made of the secret's bits alone (the "core"): found wherever the secret
//!   sits, whatever comes before and after it;
//! - when the secret ends the data, the last [`END_OVERLAP`] characters of the core and the
//!   final characters after it, with and without `=` padding. Such an end overlaps the core, so
//!   the redactor makes the two one marker, and no bit of the secret is left. (This is the
//!   runner's `Base64StringEscapeShift`, which only matches a secret at the end of the data.)
//!
//! A secret that starts the data, in the standard alphabet, is also looked for wrapped into
//! lines of 76 characters (coreutils `base64`, MIME, Python's `encodebytes`) and of 64 (openssl,
//! PEM), in the same two parts.
//!
//! Only secrets of [`BASE64_MIN_LEN`] bytes or more get these forms.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};

/// Secrets shorter than this have no base64 forms. From 8 bytes on, a core is at least 10
/// characters, 60 bits: base64 text that is not the secret's (certificates, hashes, other
/// tokens in the same log) matches it by chance once in 2^60 positions, never in practice; the
/// 4 to 6 characters of a 4-byte secret's core would turn up once in every few MiB of such
/// text. It is also the length from which a multi-line secret's lines are secrets of their own.
pub const BASE64_MIN_LEN: usize = 8;

/// How many characters of the core an end form repeats: as many as a shortest core has.
pub const END_OVERLAP: usize = 10;

/// Line widths of wrapped base64.
const WRAPS: [usize; 2] = [76, 64];

pub(super) fn forms(secret: &[u8]) -> Vec<String> {
    let mut forms = Vec::new();
    for engine in [&STANDARD, &URL_SAFE] {
        for offset in 0..3 {
            let mut data = vec![0u8; offset];
            data.extend_from_slice(secret);
            let padded = engine.encode(&data);
            let bits = 8 * data.len();
            // Characters whose 6 bits are all the secret's: from the first one after the
            // `offset` bytes before it, to the last one before the bits of what follows.
            let (first, core_end, unpadded_end) = ((8 * offset).div_ceil(6), bits / 6, bits.div_ceil(6));
            forms.push(padded[first..core_end].to_owned());
            let end_from = core_end.saturating_sub(END_OVERLAP).max(first);
            if unpadded_end > core_end {
                forms.push(padded[end_from..unpadded_end].to_owned());
                forms.push(padded[end_from..].to_owned());
            }
        }
    }
    let padded = STANDARD.encode(secret);
    let core_end = 8 * secret.len() / 6;
    for width in WRAPS.into_iter().filter(|&width| padded.len() > width) {
        let wrapped: Vec<&str> = padded
            .as_bytes()
            .chunks(width)
            .map(|line| std::str::from_utf8(line).expect("base64 is ASCII"))
            .collect();
        let wrapped = wrapped.join("\n");
        // Where the character at `at` of the unwrapped text is, after a newline per line.
        let place = |at: usize| at + at / width;
        forms.push(wrapped[..place(core_end - 1) + 1].to_owned());
        if padded.len() > core_end {
            forms.push(wrapped[place(core_end.saturating_sub(END_OVERLAP))..].to_owned());
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_offset_and_both_alphabets() {
        // base64 of "user:hunter2-pass" is dXNlcjpodW50ZXIyLXBhc3M= (coreutils); the password
        // sits at offset 5, so 2 modulo 3: its core starts at the 4th character of a group.
        let all = forms(b"hunter2-pass");
        assert!(
            all.iter()
                .any(|f| "dXNlcjpodW50ZXIyLXBhc3M=".contains(f.as_str()) && f.len() >= 14),
            "{all:?}"
        );
        assert!(all.contains(&"odW50ZXIyLXBhc3".to_owned()), "{all:?}");
        // The end with padding overlaps the core by ten characters.
        assert!(
            all.contains(&"ZXIyLXBhc3M=".to_owned()) && all.contains(&"ZXIyLXBhc3M".to_owned()),
            "{all:?}"
        );
        // URL-safe: `?>?>?>` encodes to Pz4/Pj8+ in the standard alphabet, Pz4_Pj8- in the
        // URL-safe one.
        let all = forms(b"?>?>?>?>?>?>");
        assert!(
            all.contains(&"Pz4/Pj8+Pz4/Pj8+".to_owned()) && all.contains(&"Pz4_Pj8-Pz4_Pj8-".to_owned()),
            "{all:?}"
        );
    }

    #[test]
    fn a_core_is_made_of_the_secrets_bits_alone() {
        let secret = b"correct-horse";
        for offset in 0..3 {
            for (before, after) in [
                (&b"\x00\x00"[..], &b"\x00\x00\x00"[..]),
                (b"\xff\xff", b"\xff\xff\xff"),
                (b"ab", b"cd"),
            ] {
                let data = [&before[..offset], secret, after].concat();
                let text = STANDARD.encode(&data);
                assert!(
                    forms(secret)
                        .iter()
                        .any(|f| f.len() >= END_OVERLAP && text.contains(f.as_str())),
                    "offset {offset}, {text}"
                );
            }
        }
    }

    #[test]
    fn wrapped_lines() {
        let secret = [b'k'; 100];
        let all = forms(&secret);
        let encoded = STANDARD.encode(secret);
        let coreutils = format!("{}\n{}", &encoded[..76], &encoded[76..]);
        assert!(
            all.iter()
                .any(|f| f.contains('\n') && coreutils.starts_with(f.as_str())),
            "{all:?}"
        );
        assert!(
            all.iter()
                .any(|f| f.len() > END_OVERLAP && coreutils.ends_with(f.as_str())),
            "{all:?}"
        );
        // Lines of 64: the end overlaps a line break.
        let openssl = format!("{}\n{}\n{}", &encoded[..64], &encoded[64..128], &encoded[128..]);
        assert!(
            all.iter().any(|f| f.contains('\n') && openssl.starts_with(f.as_str())),
            "{all:?}"
        );
        assert!(
            all.iter().any(|f| f.contains('\n') && openssl.ends_with(f.as_str())),
            "{all:?}"
        );
    }
}
