//! Fuzz-style property test of the streaming redactor: for random secrets, random surrounding
//! bytes and every way of cutting the stream, no secret survives and every other byte comes
//! out unchanged (the output equals the whole-buffer reference redaction). Each case runs with
//! the secrets of 10 bytes and more found by the sampled search (as jobenv does), with every
//! secret found by its beginning, in groups of every size, and with every sampled secret
//! verified by the search for repeating secrets (which jobenv uses for those only).

use jobenv::fuzzing::redact::{MARKER, Redactor, can_be_spelled_by_marker, redact_all};
use proptest::prelude::*;

/// Small alphabets make overlaps, repeats and near-misses common.
fn secret() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c'), any::<u8>()], 4..24)
}

fn stream(secrets: &[Vec<u8>], input: &[u8], cuts: &[usize]) -> Vec<u8> {
    stream_grouped(secrets, input, cuts, usize::MAX)
}

/// With `group` beginnings per searcher (the production size is 64; small groups exercise the
/// merge of matches found by different searchers).
fn stream_grouped(secrets: &[Vec<u8>], input: &[u8], cuts: &[usize], group: usize) -> Vec<u8> {
    streamed_with(Redactor::with_group_size(secrets, group), input, cuts)
}

/// With no secret found by the sampled search: every one by its beginning.
fn stream_unsampled(secrets: &[Vec<u8>], input: &[u8], cuts: &[usize], group: usize) -> Vec<u8> {
    streamed_with(Redactor::tuned(secrets, group, |_| false, u32::MAX), input, cuts)
}

/// With every secret of 10 bytes or more verified by the search for repeating secrets (KMP),
/// as jobenv verifies those that repeat themselves.
fn stream_periodic(secrets: &[Vec<u8>], input: &[u8], cuts: &[usize]) -> Vec<u8> {
    streamed_with(Redactor::tuned(secrets, 64, |_| true, 0), input, cuts)
}

fn streamed_with(mut redactor: Redactor, input: &[u8], cuts: &[usize]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        redactor.push(&input[start..cut], &mut out);
        start = cut;
    }
    redactor.push(&input[start..], &mut out);
    redactor.finish(&mut out);
    out
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_cuts_match_the_reference(
        secrets in prop::collection::vec(secret(), 1..6),
        pieces in prop::collection::vec(prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c'), any::<u8>()], 0..30), 0..8),
        cut_seed in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        // The input interleaves random bytes with the secrets themselves.
        let mut input = Vec::new();
        for (i, piece) in pieces.iter().enumerate() {
            input.extend_from_slice(piece);
            input.extend_from_slice(&secrets[i % secrets.len()]);
        }
        let mut cuts: Vec<usize> = cut_seed.iter().map(|ix| ix.index(input.len() + 1)).collect();
        cuts.sort_unstable();
        let expected = redact_all(&secrets, &input);
        let got = stream(&secrets, &input, &cuts);
        prop_assert_eq!(&got, &expected);
        for group in 1..secrets.len() {
            prop_assert_eq!(&stream_grouped(&secrets, &input, &cuts, group), &expected, "group size {}", group);
        }
        for group in 1..=secrets.len() {
            prop_assert_eq!(&stream_unsampled(&secrets, &input, &cuts, group), &expected, "unsampled, group size {}", group);
        }
        prop_assert_eq!(&stream_periodic(&secrets, &input, &cuts), &expected, "as repeating secrets");
        for secret in secrets.iter().filter(|s| !can_be_spelled_by_marker(s)) {
            prop_assert!(!contains(&got, secret), "secret {:?} survived", secret);
        }
    }

    #[test]
    fn every_single_split_point(secret in secret(), before in prop::collection::vec(any::<u8>(), 0..40), after in prop::collection::vec(any::<u8>(), 0..40)) {
        let input = [before.as_slice(), &secret, &after].concat();
        let expected = redact_all(&[&secret], &input);
        for cut in 0..=input.len() {
            prop_assert_eq!(&stream(std::slice::from_ref(&secret), &input, &[cut]), &expected);
            prop_assert_eq!(&stream_unsampled(std::slice::from_ref(&secret), &input, &[cut], 1), &expected);
            prop_assert_eq!(&stream_periodic(std::slice::from_ref(&secret), &input, &[cut]), &expected);
        }
        // Positive control: the input did hold the secret, and the reference removed it.
        prop_assert!(contains(&input, &secret));
        prop_assert!(contains(&expected, MARKER));
    }

    /// The needles jobenv really builds: each secret in every encoder's spelling, so needles
    /// share long runs and overlap. Every form, overlapping ones and near misses among random
    /// bytes (backslashes and `u` among them), is redacted as the whole-buffer reference does,
    /// at every cut and across searchers.
    #[test]
    fn the_forms_of_secrets_match_the_reference(
        texts in prop::collection::vec(prop::collection::vec(prop::sample::select(vec!['a', 'b', 'c', '<', '"', '\\', '\'', '+', '=', '/', 'ä', '\n', '\u{301}', '😀']), 4..14), 1..4),
        picks in prop::collection::vec((any::<prop::sample::Index>(), prop::collection::vec(prop_oneof![Just(b'a'), Just(b'\\'), Just(b'u'), any::<u8>()], 0..12)), 1..10),
        cut_seed in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let needles: Vec<Vec<u8>> = texts
            .iter()
            .flat_map(|chars| safe_io::secret::forms(&chars.iter().collect::<String>()))
            .map(String::into_bytes)
            .collect();
        let mut input = Vec::new();
        for (pick, around) in &picks {
            input.extend_from_slice(around);
            let needle = &needles[pick.index(needles.len())];
            // Sometimes a form cut short: a near miss that must pass unchanged.
            let keep = if around.len() % 3 == 0 { needle.len() - 1 } else { needle.len() };
            input.extend_from_slice(&needle[..keep]);
        }
        let mut cuts: Vec<usize> = cut_seed.iter().map(|ix| ix.index(input.len() + 1)).collect();
        cuts.sort_unstable();
        let expected = redact_all(&needles, &input);
        prop_assert_eq!(&stream(&needles, &input, &cuts), &expected);
        prop_assert_eq!(&stream_grouped(&needles, &input, &cuts, 2), &expected);
        prop_assert_eq!(&stream_periodic(&needles, &input, &cuts), &expected);
    }

    /// Secrets that repeat themselves (a unit over and over, perhaps with another last byte or a
    /// few other bytes at the start), among text made of the same units, whole and cut short:
    /// the shapes where verification by comparison would be slow. Redacted as the reference
    /// does, as jobenv tunes it and with each verification alone, at random cuts.
    #[test]
    fn repeating_secrets_match_the_reference(
        shapes in prop::collection::vec((prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 1..4), 3..40usize, prop::collection::vec(prop_oneof![Just(b'a'), Just(b'c')], 0..3), any::<bool>()), 1..4),
        pieces in prop::collection::vec((any::<prop::sample::Index>(), 0..120usize, prop::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'c'), any::<u8>()], 0..4)), 1..10),
        cut_seed in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let secrets: Vec<Vec<u8>> = shapes
            .iter()
            .map(|(unit, times, lead, odd_end)| {
                let mut secret = lead.clone();
                secret.extend(unit.iter().cycle().take(unit.len() * times));
                if *odd_end {
                    secret.push(b'z');
                }
                secret
            })
            .filter(|secret| secret.len() >= 4)
            .collect();
        prop_assume!(!secrets.is_empty());
        let mut input = Vec::new();
        for (pick, len, other) in &pieces {
            let (unit, _, lead, _) = &shapes[pick.index(shapes.len())];
            input.extend_from_slice(other);
            if len % 2 == 0 {
                input.extend_from_slice(lead);
            }
            input.extend(unit.iter().cycle().take(*len));
        }
        let mut cuts: Vec<usize> = cut_seed.iter().map(|ix| ix.index(input.len() + 1)).collect();
        cuts.sort_unstable();
        let expected = redact_all(&secrets, &input);
        prop_assert_eq!(&stream(&secrets, &input, &cuts), &expected);
        prop_assert_eq!(&stream_periodic(&secrets, &input, &cuts), &expected, "as repeating secrets");
        prop_assert_eq!(&streamed_with(Redactor::tuned(&secrets, 64, |_| true, u32::MAX), &input, &cuts), &expected, "by comparison");
        prop_assert_eq!(&stream_unsampled(&secrets, &input, &cuts, 2), &expected, "unsampled");
    }

    /// Each form of a secret that a tool prints (written apart from the needles, in the test
    /// kit: shell quoting, percent-encoding, markup, base64 at each offset, wrapped, and JSON)
    /// comes out as one marker, and between other bytes, cut at every point, exactly as the
    /// whole-buffer reference redacts it.
    #[test]
    fn each_printed_form_is_one_marker_at_every_split_point(
        chars in prop::collection::vec(prop::sample::select(vec!['a', 'Z', '0', ' ', '\'', '"', '\\', '$', '&', '<', '/', '+', '=', '~', '#', '%', 'ä', '\t', '😀']), 8..60),
        pick in any::<prop::sample::Index>(),
        before in prop::collection::vec(prop_oneof![Just(b'a'), Just(b'='), Just(b'\\'), Just(b'\''), any::<u8>()], 0..6),
        after in prop::collection::vec(prop_oneof![Just(b'a'), Just(b'='), Just(b'\n'), any::<u8>()], 0..6),
    ) {
        let text: String = chars.into_iter().collect();
        let needles: Vec<Vec<u8>> = safe_io::secret::forms(&text).into_iter().map(String::into_bytes).collect();
        let mut printed = fediversity_testkit::json_forms::printed_forms(&text);
        printed.extend(fediversity_testkit::json_forms::every_form(&text));
        let form = &printed[pick.index(printed.len())];
        prop_assert_eq!(redact_all(&needles, form.as_bytes()), MARKER, "{:?} of {:?}", form, text);
        let input = [before.as_slice(), form.as_bytes(), &after].concat();
        let expected = redact_all(&needles, &input);
        let redactor = Redactor::new(&needles);
        for cut in 0..=input.len() {
            prop_assert_eq!(&streamed_with(redactor.clone(), &input, &[cut]), &expected, "cut at {}", cut);
        }
        prop_assert_eq!(&streamed_with(Redactor::tuned(&needles, 2, |_| false, u32::MAX), &input, &[input.len() / 2]), &expected);
        prop_assert_eq!(&stream_periodic(&needles, &input, &[input.len() / 2]), &expected);
    }

    #[test]
    fn without_secrets_bytes_pass_unchanged(input in prop::collection::vec(any::<u8>(), 0..200), cut in any::<prop::sample::Index>()) {
        let no_secrets: [&[u8]; 0] = [];
        let c = cut.index(input.len() + 1);
        let mut r = Redactor::new(&no_secrets);
        let mut out = Vec::new();
        r.push(&input[..c], &mut out);
        r.push(&input[c..], &mut out);
        r.finish(&mut out);
        prop_assert_eq!(out, input);
    }
}

#[test]
fn secrets_the_marker_can_spell_are_recognised() {
    assert!(can_be_spelled_by_marker(b"ED]="));
    assert!(can_be_spelled_by_marker(b"x[RE"));
    assert!(can_be_spelled_by_marker(b"DACT"));
    assert!(!can_be_spelled_by_marker(b"hunter22"));
    assert!(can_be_spelled_by_marker(b"EDAC"), "inside the marker");
    assert!(!can_be_spelled_by_marker(b"DACX"));
}

#[test]
fn the_reference_itself_redacts() {
    // Positive control for the property: the reference is not a no-op.
    assert_eq!(redact_all(&["secret"], b"a secret b"), b"a [REDACTED] b");
}
