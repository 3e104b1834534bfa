//! A secret as shells and shell tools quote it, and as the few other quotings that escape one
//! character.
//!
//! Measured against bash 5.2 (`set -x`, `declare -p`, `printf %q`, in the C and a UTF-8
//! locale) and Python's `shlex.quote`:
//! - inside single quotes, `'` as `'\''` (`set -x`, most hand-written quoting) or as `'"'"'`
//!   (`shlex.quote`); the quotes around the word are not part of the form, so a secret without
//!   `'` needs none of these;
//! - inside double quotes, `"` `$` `` ` `` `\` after a backslash (`declare -p` of a value
//!   without control characters);
//! - backslashes before each character the shell would read (`printf %q` of a value without
//!   control characters: `` !"$&'()*,;<>?[\]^`{|}`` and the space, `#` first, `~` first or
//!   after `=` or `:`);
//! - `$'…'` (`printf %q` and `declare -p` of a value with a control character, or in the C
//!   locale any non-ASCII one; `set -x` of one with a control character other than tab,
//!   newline and escape): `\'`, `\\`, `\a \b \f \n \r \t \v`, `\E` for escape, other control
//!   characters as three octal digits; non-ASCII bytes as octal digits in the C locale, and in a
//!   UTF-8 locale only the C1 controls and U+2028, U+2029 (other characters that glibc does not
//!   call printable are not known here);
//! - `'` doubled (SQL string literals, YAML's single-quoted scalars, GitHub expressions, the
//!   runner's `ExpressionStringEscape`), and `"` alone after a backslash (the runner's
//!   `CommandLineArgumentEscape`).

pub(super) fn forms(text: &str) -> Vec<String> {
    let mut forms = vec![
        text.replace('\'', r"'\''"),
        text.replace('\'', r#"'"'"'"#),
        text.replace('\'', "''"),
        text.replace('"', "\\\""),
        ansi_c(text, false),
        ansi_c(text, true),
    ];
    // bash quotes a value with a control character as `$'…'` alone.
    if !text.chars().any(char::is_control) {
        forms.push(backslashed(text, "\"$`\\", |_| false));
        forms.push(backslashed(text, PRINTF_Q, |before| {
            matches!(before, None | Some('=' | ':'))
        }));
        // A secret printed after other text of its word (`printf %q "user:$SECRET"` aside):
        // its first `~` or `#` has no backslash there.
        if text.starts_with(['~', '#']) {
            forms.push(backslashed(text, PRINTF_Q, |before| matches!(before, Some('=' | ':'))));
        }
    }
    forms
}

/// What `printf %q` puts a backslash before anywhere in a word.
const PRINTF_Q: &str = " !\"$&'()*,;<>?[\\]^`{|}";

/// `text` with a backslash before each character of `always`, and before `#` and `~` where
/// `at_start` says so of the character before it (`None` at the start of the text).
fn backslashed(text: &str, always: &str, at_start: impl Fn(Option<char>) -> bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut before = None;
    for c in text.chars() {
        let first = before.is_none();
        if always.contains(c) || (c == '~' && at_start(before)) || (c == '#' && first && at_start(None)) {
            out.push('\\');
        }
        out.push(c);
        before = Some(c);
    }
    out
}

/// What bash writes between `$'` and `'`; `c_locale`: every non-ASCII byte in octal.
fn ansi_c(text: &str, c_locale: bool) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            '\u{1b}' => out.push_str("\\E"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c if !c.is_ascii() && !c_locale && !c.is_control() && !matches!(c, '\u{2028}' | '\u{2029}') => out.push(c),
            c => {
                for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.push_str(&format!("\\{byte:03o}"));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_quoting_as_bash_and_python_write_it() {
        // Outputs of bash 5.2 and Python 3.11 for these values, copied from a terminal.
        let all = forms("pa ss'w\"o$rd\\x`y!z&~#=,:~ä");
        for expected in [
            r#"pa ss'\''w"o$rd\x`y!z&~#=,:~ä"#,
            r#"pa ss'"'"'w"o$rd\x`y!z&~#=,:~ä"#,
            r#"pa ss\'w"o$rd\\x`y!z&~#=,:~ä"#,
            r#"pa ss'w\"o\$rd\\x\`y!z&~#=,:~ä"#,
            r#"pa\ ss\'w\"o\$rd\\x\`y\!z\&~#=\,:\~ä"#,
            r#"pa ss\'w"o$rd\\x`y!z&~#=,:~\303\244"#,
            r#"pa ss''w"o$rd\x`y!z&~#=,:~ä"#,
        ] {
            assert!(all.iter().any(|f| f == expected), "{expected} missing from {all:?}");
        }
        assert_eq!(
            ansi_c("a\u{1}b\nc\u{1b}d\u{7f}e\u{85}\u{2028}", false),
            r"a\001b\nc\Ed\177e\302\205\342\200\250"
        );
        // A control character: no backslash or double-quote form.
        assert_eq!(forms("a\tb").len(), 6);
        assert_eq!(
            backslashed("~#a=~b:~c#", PRINTF_Q, |b| matches!(b, None | Some('=' | ':'))),
            r"\~#a=\~b:\~c#"
        );
        assert!(forms("#abc").contains(&"#abc".to_owned()) && forms("#abc").contains(&r"\#abc".to_owned()));
    }
}
