//! A secret inside a string as Node.js's `util.inspect` prints it: what `console.log` shows of
//! an object or an array that holds it (`{ password: "p4'ss" }`), of an error's properties, and
//! what the REPL echoes.
//!
//! Measured against Node 20 (`strEscape` in `lib/internal/util/inspect.js`): the string goes in
//! single quotes; in double quotes when it holds `'` and no `"`; in backticks when it holds both
//! and neither a backtick nor `${`; else in single quotes with `'` as `\'`. In every case a
//! backslash is doubled, `\b \t \n \f \r` are written so, the other C0 controls, DEL and the C1
//! controls as `\xHH` (upper-case hex), and everything else as it is (`"` and the backtick too).
//! The quotes are chosen for the whole string, which may hold more than the secret (`'token ' +
//! secret`), so a secret with `'` has both spellings: as it is (double quotes, backticks) and as
//! `\'` (single quotes). Python's `repr` spells a text of printable characters the same way.

pub(super) fn forms(text: &str) -> Vec<String> {
    vec![inspected(text, false), inspected(text, true)]
}

/// Between the quotes, with `'` as `\'` when `in_single_quotes`.
fn inspected(text: &str, in_single_quotes: bool) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' if in_single_quotes => out.push_str("\\'"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if c < ' ' || ('\u{7f}'..='\u{9f}').contains(&c) => {
                let _ = write!(out, "\\x{:02X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_quoting_as_node_writes_it() {
        // `util.inspect` and `console.log({ k: s })` of Node 20, copied from a terminal, for
        // `a\b'c"d`, `a\b'c`, `a"b`, `a\b'c"d${e` and a text of control characters.
        let cases = [
            ("a\\b'c\"d", r#"`a\\b'c"d`"#),
            ("a\\b'c", r#""a\\b'c""#),
            ("a\"b", r#"'a"b'"#),
            ("a\\b'c\"d${e", r#"'a\\b\'c"d${e'"#),
            (
                "x\ty\n\u{1}\u{8}\u{b}\u{c}\r\u{1b}\u{7f}\u{85}\u{2028}é😀",
                "'x\\ty\\n\\x01\\b\\x0B\\f\\r\\x1B\\x7F\\x85\u{2028}é😀'",
            ),
        ];
        for (text, printed) in cases {
            let inside = &printed[1..printed.len() - 1];
            assert!(
                forms(text).iter().any(|f| f == inside),
                "{inside} missing from {:?}",
                forms(text)
            );
        }
        // Python's repr of a text without control characters: the same spellings.
        assert_eq!(forms("a\\b'c\"d")[1], r#"a\\b\'c"d"#);
        assert_eq!(forms("a\\b'c")[0], r"a\\b'c");
    }
}
