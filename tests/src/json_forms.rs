//! How common JSON encoders write a string, written out here independently of the code under
//! test, so that the secret scans look for a secret in every form a server may echo it in, and
//! the Windmill fake can echo a request the way such a server would. Each function returns the
//! string's JSON text without the surrounding quotes.
//!
//! The forms (checked against the real encoders in `bootstrap/tests/testsuite/secrets_never_logged.rs`,
//! Python's against the venv's python itself):
//! - serde_json and RFC 8259's minimum: `"` `\` and control characters escaped, the rest as is;
//! - Python's `json.dumps` default (`ensure_ascii=True`), and PHP's `json_encode` default
//!   (the same plus `\/`): everything outside printable ASCII as `\uXXXX`, astral characters
//!   as a surrogate pair;
//! - Go's `encoding/json` default: also `<` `>` `&` U+2028 U+2029 as `\u003c` … `\u2029`;
//! - upper-case hex digits (Jackson) for both of those;
//! - .NET's `System.Text.Json` default (`JavaScriptEncoder.Default`): upper-case hex, everything
//!   outside printable ASCII, `<` `>` `&`, and also `"` `'` `+` and the backtick as `\uXXXX`;
//! - Gson's default: Go's escapes and also `=` and `'` as `\u003d` `\u0027`; Gson without HTML
//!   escaping: only U+2028 and U+2029; Json.NET's default: those and U+0085.

/// What a given encoder escapes beyond the RFC's minimum.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Encoder {
    /// Everything outside printable ASCII as `\uXXXX` (Python, PHP).
    pub ascii_only: bool,
    /// `<` `>` `&` U+2028 U+2029 as `\uXXXX` (Go).
    pub html_safe: bool,
    /// `/` as `\/` (PHP).
    pub escape_slash: bool,
    /// `\u00E4` rather than `\u00e4`.
    pub upper_hex: bool,
    /// `"` `'` `+` and the backtick as `\uXXXX` too (.NET).
    pub quotes_and_plus: bool,
    /// `=` and `'` as `\uXXXX` too (Gson).
    pub equals_and_apostrophe: bool,
    /// U+2028 and U+2029 as `\uXXXX` (Gson without HTML escaping, Json.NET).
    pub line_separators: bool,
    /// U+0085 as `\u0085` (Json.NET).
    pub next_line: bool,
}

impl Encoder {
    pub const SERDE: Encoder = Encoder {
        ascii_only: false,
        html_safe: false,
        escape_slash: false,
        upper_hex: false,
        quotes_and_plus: false,
        equals_and_apostrophe: false,
        line_separators: false,
        next_line: false,
    };
    pub const PYTHON: Encoder = Encoder {
        ascii_only: true,
        html_safe: false,
        escape_slash: false,
        upper_hex: false,
        quotes_and_plus: false,
        equals_and_apostrophe: false,
        line_separators: false,
        next_line: false,
    };
    pub const PHP: Encoder = Encoder {
        ascii_only: true,
        html_safe: false,
        escape_slash: true,
        upper_hex: false,
        quotes_and_plus: false,
        equals_and_apostrophe: false,
        line_separators: false,
        next_line: false,
    };
    pub const GO: Encoder = Encoder {
        ascii_only: false,
        html_safe: true,
        escape_slash: false,
        upper_hex: false,
        quotes_and_plus: false,
        equals_and_apostrophe: false,
        line_separators: false,
        next_line: false,
    };
    pub const DOTNET: Encoder = Encoder {
        ascii_only: true,
        html_safe: true,
        escape_slash: false,
        upper_hex: true,
        quotes_and_plus: true,
        equals_and_apostrophe: false,
        line_separators: false,
        next_line: false,
    };
    pub const GSON: Encoder = Encoder {
        ascii_only: false,
        html_safe: true,
        escape_slash: false,
        upper_hex: false,
        quotes_and_plus: false,
        equals_and_apostrophe: true,
        line_separators: false,
        next_line: false,
    };

    pub const JSON_NET: Encoder = Encoder {
        line_separators: true,
        next_line: true,
        ..Encoder::SERDE
    };
    pub const GSON_NO_HTML: Encoder = Encoder {
        line_separators: true,
        ..Encoder::SERDE
    };

    /// Every encoder the scans know, with a name for messages.
    pub const ALL: [(&'static str, Encoder); 10] = [
        ("serde", Encoder::SERDE),
        ("python", Encoder::PYTHON),
        ("php", Encoder::PHP),
        ("go", Encoder::GO),
        ("dotnet", Encoder::DOTNET),
        ("gson", Encoder::GSON),
        ("json.net", Encoder::JSON_NET),
        ("gson without html escaping", Encoder::GSON_NO_HTML),
        (
            "python, upper-case hex",
            Encoder {
                upper_hex: true,
                ..Encoder::PYTHON
            },
        ),
        (
            "go, upper-case hex",
            Encoder {
                upper_hex: true,
                ..Encoder::GO
            },
        ),
    ];

    /// `text` as this encoder writes it inside a JSON string.
    pub fn encode(self, text: &str) -> String {
        let mut out = String::new();
        let unit = |out: &mut String, u: u16| {
            if self.upper_hex {
                out.push_str(&format!("\\u{u:04X}"));
            } else {
                out.push_str(&format!("\\u{u:04x}"));
            }
        };
        for c in text.chars() {
            match c {
                '"' | '\'' | '+' | '`' if self.quotes_and_plus => unit(&mut out, c as u16),
                '=' | '\'' if self.equals_and_apostrophe => unit(&mut out, c as u16),
                '\u{2028}' | '\u{2029}' if self.line_separators => unit(&mut out, c as u16),
                '\u{85}' if self.next_line => unit(&mut out, c as u16),
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '/' if self.escape_slash => out.push_str("\\/"),
                '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if self.html_safe => unit(&mut out, c as u16),
                c if (c as u32) < 0x20 => unit(&mut out, c as u16),
                c if self.ascii_only && !(' '..='~').contains(&c) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        unit(&mut out, *u);
                    }
                }
                c => out.push(c),
            }
        }
        out
    }
}

/// A whole JSON value as this encoder writes it (objects as `{"key": value, …}`, as Python
/// does), for a server that quotes a request back.
pub fn encode_value(encoder: Encoder, value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::String(s) => format!("\"{}\"", encoder.encode(s)),
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|v| encode_value(encoder, v))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("\"{}\": {}", encoder.encode(k), encode_value(encoder, v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// `text` in every known form, raw, Rust's `Debug` (inside its quotes) and `str::escape_debug`
/// included, without duplicates.
pub fn every_form(text: &str) -> Vec<String> {
    let debug = format!("{text:?}");
    let mut forms = vec![
        text.to_owned(),
        debug[1..debug.len() - 1].to_owned(),
        text.escape_debug().to_string(),
    ];
    for (_, encoder) in Encoder::ALL {
        forms.push(encoder.encode(text));
    }
    forms.sort();
    forms.dedup();
    forms
}

/// `text` as programs print it outside JSON, each form written here independently of
/// `safe_io::secret`: as bash quotes it (`set -x`'s `'\''`, `declare -p`'s double quotes,
/// `printf %q`'s backslashes, which bash writes only for a value without control characters,
/// and `$'…'` in the C and a UTF-8 locale), as `shlex.quote` does
/// (`'"'"'`), with `'` doubled (SQL) and `"` as `\"` (a command line); percent-encoded as RFC
/// 3986, form encoding, Python's `quote`, JavaScript's `encodeURIComponent` and Go's userinfo
/// leave it; XML- and HTML-escaped four ways; as Node.js's `util.inspect` prints a string
/// (`console.log` of an object), with `'` as it is and as `\'`; and base64 in both alphabets with and without
/// padding, of the text alone and of the text after one and two other bytes, from the first
/// character made of the text's bits alone (the characters before it are the other bytes'),
/// and of the text alone wrapped in lines of 76 and of 64. Only forms that differ from the text.
pub fn printed_forms(text: &str) -> Vec<String> {
    let quoted = |from: char, to: &str| text.replace(from, to);
    let mut forms = vec![
        quoted('\'', r"'\''"),
        quoted('\'', r#"'"'"'"#),
        quoted('\'', "''"),
        quoted('"', "\\\""),
        ansi_c(text, true),
        ansi_c(text, false),
    ];
    // bash writes a value with a control character as `$'…'` only.
    if !text.chars().any(char::is_control) {
        forms.push(backslashed(text, "\"$`\\", false));
        forms.push(backslashed(text, " !\"$&'()*,;<>?[\\]^`{|}", true));
    }
    // Node's `util.inspect`: the backslash doubled, the controls named or in upper-case hex,
    // `'` escaped only inside single quotes (which it uses when the text holds both quotes
    // and a backtick or `${`).
    for apostrophe in ["'", "\\'"] {
        let inspected: String = text
            .chars()
            .map(|c| match c {
                '\\' => "\\\\".to_owned(),
                '\'' => apostrophe.to_owned(),
                '\u{8}' => "\\b".to_owned(),
                '\t' => "\\t".to_owned(),
                '\n' => "\\n".to_owned(),
                '\u{c}' => "\\f".to_owned(),
                '\r' => "\\r".to_owned(),
                c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => format!("\\x{:02X}", c as u32),
                c => c.to_string(),
            })
            .collect();
        forms.push(inspected);
    }
    const UNRESERVED: &str = "-._~";
    for (keep, plus) in [
        (UNRESERVED, false),
        (UNRESERVED, true),
        ("-._~/", false),
        ("-._~!'()*", false),
        ("-._~$&+,;=", false),
    ] {
        forms.push(percent(text, keep, plus));
    }
    for (quote, apostrophe) in [
        (Some("&quot;"), Some("&apos;")),
        (None, None),
        (Some("&quot;"), Some("&#x27;")),
        (Some("&#34;"), Some("&#39;")),
    ] {
        forms.push(markup(text, quote, apostrophe));
    }
    if text.len() >= 8 {
        for url_safe in [false, true] {
            for padded in [false, true] {
                for before in ["", "a", "ab"] {
                    let encoded = base64(&[before.as_bytes(), text.as_bytes()].concat(), url_safe, padded);
                    // 8 bits per byte before, 6 per character: the characters up to the last
                    // one with a bit of `before` are not the text's.
                    forms.push(encoded[(8 * before.len()).div_ceil(6)..].to_owned());
                }
            }
        }
        let encoded = base64(text.as_bytes(), false, true);
        for width in [76, 64].into_iter().filter(|&width| encoded.len() > width) {
            let lines: Vec<&str> = encoded
                .as_bytes()
                .chunks(width)
                .map(|line| std::str::from_utf8(line).unwrap())
                .collect();
            forms.push(lines.join("\n"));
        }
    }
    forms.retain(|form| form != text);
    forms.sort();
    forms.dedup();
    forms
}

/// A backslash before each of `special`, and before a first `#` or `~` (and a `~` after `=` or
/// `:`) when `word_start`, as bash's `printf %q` does.
fn backslashed(text: &str, special: &str, word_start: bool) -> String {
    let mut out = String::new();
    let mut before: Option<char> = None;
    for c in text.chars() {
        let tilde = c == '~' && matches!(before, None | Some('=') | Some(':'));
        if special.contains(c) || (word_start && (tilde || (c == '#' && before.is_none()))) {
            out.push('\\');
        }
        out.push(c);
        before = Some(c);
    }
    out
}

/// Inside bash's `$'…'`: non-ASCII bytes in octal in the C locale (`c_locale`), only C1
/// controls and U+2028, U+2029 in a UTF-8 one.
fn ansi_c(text: &str, c_locale: bool) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let named = match c {
            '\'' => Some("\\'"),
            '\\' => Some("\\\\"),
            '\u{7}' => Some("\\a"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{b}' => Some("\\v"),
            '\u{1b}' => Some("\\E"),
            _ => None,
        };
        let printable = (' '..='~').contains(&c)
            || (!c.is_ascii()
                && !c_locale
                && !('\u{80}'..='\u{9f}').contains(&c)
                && c != '\u{2028}'
                && c != '\u{2029}');
        match named {
            Some(escape) => out.push_str(escape),
            None if printable => out.push(c),
            None => {
                for byte in c.to_string().bytes() {
                    out.push_str(&format!("\\{byte:03o}"));
                }
            }
        }
    }
    out
}

/// Percent-encoding with upper-case hex, leaving ASCII letters, digits and `keep`; a space as
/// `+` with `plus`.
fn percent(text: &str, keep: &str, plus: bool) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b' ' if plus => out.push('+'),
            b if b.is_ascii_alphanumeric() || keep.as_bytes().contains(&b) => out.push(char::from(b)),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `&` `<` `>` as entities, and `"` and `'` as the ones given (left as they are without).
fn markup(text: &str, quote: Option<&str>, apostrophe: Option<&str>) -> String {
    let mut out = String::new();
    for c in text.chars() {
        match (c, quote, apostrophe) {
            ('&', ..) => out.push_str("&amp;"),
            ('<', ..) => out.push_str("&lt;"),
            ('>', ..) => out.push_str("&gt;"),
            ('"', Some(entity), _) | ('\'', _, Some(entity)) => out.push_str(entity),
            (c, ..) => out.push(c),
        }
    }
    out
}

/// RFC 4648 base64, standard or URL-safe alphabet, with or without `=` padding.
pub fn base64(data: &[u8], url_safe: bool, padded: bool) -> String {
    let alphabet: &[u8; 64] = if url_safe {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    } else {
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    };
    let mut out = String::new();
    for group in data.chunks(3) {
        let bits = group
            .iter()
            .enumerate()
            .fold(0u32, |bits, (i, &b)| bits | u32::from(b) << (16 - 8 * i));
        let chars = group.len() + 1;
        for k in 0..4 {
            if k < chars {
                out.push(char::from(alphabet[(bits >> (18 - 6 * k) & 63) as usize]));
            } else if padded {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_form_is_serde_json_s() {
        let text = "a\"b\\c\u{1}d\u{e4}e/f<g\u{1F600}";
        assert_eq!(
            format!("\"{}\"", Encoder::SERDE.encode(text)),
            serde_json::to_string(text).unwrap()
        );
    }

    #[test]
    fn each_encoder_escapes_what_it_should() {
        let text = "\u{e4}</\u{1F600}";
        assert_eq!(Encoder::PYTHON.encode(text), "\\u00e4</\\ud83d\\ude00");
        assert_eq!(Encoder::PHP.encode(text), "\\u00e4<\\/\\ud83d\\ude00");
        assert_eq!(Encoder::GO.encode(text), "\u{e4}\\u003c/\u{1F600}");
        assert_eq!(Encoder::DOTNET.encode(text), "\\u00E4\\u003C/\\uD83D\\uDE00");
        assert_eq!(
            Encoder::DOTNET.encode("a\"b'c+d`e\\f"),
            "a\\u0022b\\u0027c\\u002Bd\\u0060e\\\\f"
        );
        assert_eq!(Encoder::GSON.encode("a=b'c<\u{e4}"), "a\\u003db\\u0027c\\u003c\u{e4}");
        assert_eq!(
            Encoder::JSON_NET.encode("<\u{e4}\u{85}\u{2028}"),
            "<\u{e4}\\u0085\\u2028"
        );
        assert_eq!(Encoder::GSON_NO_HTML.encode("<\u{85}\u{2029}"), "<\u{85}\\u2029");
        assert_eq!(every_form("plain").len(), 1);
    }

    #[test]
    fn printed_forms_as_the_tools_print_them() {
        // What coreutils `base64` prints for these.
        assert_eq!(base64(b"user:hunter2-pass", false, true), "dXNlcjpodW50ZXIyLXBhc3M=");
        assert_eq!(base64(b"?>?>", true, false), "Pz4_Pg");
        let all = printed_forms("pa'ss wörd\"$x\\y&z<q>/@:+=!~1");
        // bash 5.2's set -x, printf %q (C.UTF-8, then C), Python's shlex.quote, quote, html.escape.
        for expected in [
            r#"pa'\''ss wörd"$x\y&z<q>/@:+=!~1"#,
            r#"pa\'ss\ wörd\"\$x\\y\&z\<q\>/@:+=\!~1"#,
            r#"pa\'ss w\303\266rd"$x\\y&z<q>/@:+=!~1"#,
            r#"pa'"'"'ss wörd"$x\y&z<q>/@:+=!~1"#,
            "pa%27ss%20w%C3%B6rd%22%24x%5Cy%26z%3Cq%3E%2F%40%3A%2B%3D%21~1",
            "pa&#x27;ss wörd&quot;$x\\y&amp;z&lt;q&gt;/@:+=!~1",
            "cGEnc3Mgd8O2cmQiJHhceSZ6PHE+L0A6Kz0hfjE=",
        ] {
            assert!(all.iter().any(|f| f == expected), "{expected} missing from {all:?}");
        }
        assert!(
            printed_forms("plain-token").iter().all(|f| f.len() > 11),
            "only base64 forms of a plain token"
        );
    }
}
