//! What the modules share: whole-line assertions with wildcards, for the log lines the README
//! specifies.

/// Whether `line` is `pattern`, where each `[..]` in the pattern stands for any text (none
/// included), as in cargo-test-support's `str![..]` patterns.
pub fn matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Asserts that `line` is `pattern` as a whole (see [`matches`]).
#[track_caller]
pub fn assert_line(line: &str, pattern: &str) {
    assert!(matches(pattern, line), "the line\n  {line}\nis not\n  {pattern}");
}

/// Asserts that one line of `output` is `pattern` as a whole.
#[track_caller]
pub fn assert_has_line(output: &str, pattern: &str) {
    assert!(output.lines().any(|l| matches(pattern, l)), "no line is\n  {pattern}\nin:\n{output}");
}

#[test]
fn wildcards_stand_for_any_text_and_the_rest_must_match_whole() {
    assert!(matches("a: [..]: created", "a: anything at all: created"));
    assert!(matches("a[..]", "a"));
    assert!(matches("[..]b[..]d", "xbyd"));
    assert!(matches("exact", "exact"));
    // Positive controls: a line that only contains the text does not match.
    assert!(!matches("a: [..]: created", "x a: y: created"));
    assert!(!matches("a: [..]: created", "a: y: created!"));
    assert!(!matches("exact", "exact and more"));
    assert!(!matches("[..]b[..]d", "xdyb"));
}
