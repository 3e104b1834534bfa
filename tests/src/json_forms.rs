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
    pub const SERDE: Encoder = Encoder { ascii_only: false, html_safe: false, escape_slash: false, upper_hex: false, quotes_and_plus: false, equals_and_apostrophe: false, line_separators: false, next_line: false };
    pub const PYTHON: Encoder = Encoder { ascii_only: true, html_safe: false, escape_slash: false, upper_hex: false, quotes_and_plus: false, equals_and_apostrophe: false, line_separators: false, next_line: false };
    pub const PHP: Encoder = Encoder { ascii_only: true, html_safe: false, escape_slash: true, upper_hex: false, quotes_and_plus: false, equals_and_apostrophe: false, line_separators: false, next_line: false };
    pub const GO: Encoder = Encoder { ascii_only: false, html_safe: true, escape_slash: false, upper_hex: false, quotes_and_plus: false, equals_and_apostrophe: false, line_separators: false, next_line: false };
    pub const DOTNET: Encoder = Encoder { ascii_only: true, html_safe: true, escape_slash: false, upper_hex: true, quotes_and_plus: true, equals_and_apostrophe: false, line_separators: false, next_line: false };
    pub const GSON: Encoder = Encoder { ascii_only: false, html_safe: true, escape_slash: false, upper_hex: false, quotes_and_plus: false, equals_and_apostrophe: true, line_separators: false, next_line: false };

    pub const JSON_NET: Encoder = Encoder { line_separators: true, next_line: true, ..Encoder::SERDE };
    pub const GSON_NO_HTML: Encoder = Encoder { line_separators: true, ..Encoder::SERDE };

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
        ("python, upper-case hex", Encoder { upper_hex: true, ..Encoder::PYTHON }),
        ("go, upper-case hex", Encoder { upper_hex: true, ..Encoder::GO }),
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
        Value::Array(items) => format!("[{}]", items.iter().map(|v| encode_value(encoder, v)).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("\"{}\": {}", encoder.encode(k), encode_value(encoder, v))).collect::<Vec<_>>().join(", ")
        ),
        other => other.to_string(),
    }
}

/// `text` in every known form, raw, Rust's `Debug` (inside its quotes) and `str::escape_debug`
/// included, without duplicates.
pub fn every_form(text: &str) -> Vec<String> {
    let debug = format!("{text:?}");
    let mut forms = vec![text.to_owned(), debug[1..debug.len() - 1].to_owned(), text.escape_debug().to_string()];
    for (_, encoder) in Encoder::ALL {
        forms.push(encoder.encode(text));
    }
    forms.sort();
    forms.dedup();
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_form_is_serde_json_s() {
        let text = "a\"b\\c\u{1}d\u{e4}e/f<g\u{1F600}";
        assert_eq!(format!("\"{}\"", Encoder::SERDE.encode(text)), serde_json::to_string(text).unwrap());
    }

    #[test]
    fn each_encoder_escapes_what_it_should() {
        let text = "\u{e4}</\u{1F600}";
        assert_eq!(Encoder::PYTHON.encode(text), "\\u00e4</\\ud83d\\ude00");
        assert_eq!(Encoder::PHP.encode(text), "\\u00e4<\\/\\ud83d\\ude00");
        assert_eq!(Encoder::GO.encode(text), "\u{e4}\\u003c/\u{1F600}");
        assert_eq!(Encoder::DOTNET.encode(text), "\\u00E4\\u003C/\\uD83D\\uDE00");
        assert_eq!(Encoder::DOTNET.encode("a\"b'c+d`e\\f"), "a\\u0022b\\u0027c\\u002Bd\\u0060e\\\\f");
        assert_eq!(Encoder::GSON.encode("a=b'c<\u{e4}"), "a\\u003db\\u0027c\\u003c\u{e4}");
        assert_eq!(Encoder::JSON_NET.encode("<\u{e4}\u{85}\u{2028}"), "<\u{e4}\\u0085\\u2028");
        assert_eq!(Encoder::GSON_NO_HTML.encode("<\u{85}\u{2029}"), "<\u{85}\\u2029");
        assert_eq!(every_form("plain").len(), 1);
    }
}
