//! A secret inside a JSON string, as common encoders write it, and as Rust's `Debug` and
//! `str::escape_debug` print it: as serde_json and RFC 8259 escape it (`\"`, `\\`, control
//! characters); as Python's `json.dumps` does by default and PHP's `json_encode` (everything
//! outside printable ASCII as `\uXXXX`, astral characters as a surrogate pair, PHP also `\/`);
//! as Go's `encoding/json` does (`\u003c \u003e \u0026 \u2028 \u2029`); with `\/` for `/`;
//! with upper-case hex digits (Jackson); as .NET's `System.Text.Json` does by default (upper-case
//! hex, and `"` `'` `+` and the backtick as `\uXXXX` too: a base64 key's `+` becomes `\u002B`);
//! as Gson does by default (also `=` and `'`: a base64 key's padding becomes `\u003d`); with
//! only U+2028 and U+2029 escaped (Gson without HTML escaping) and U+0085 too (Json.NET's
//! default, which is also the GitHub Actions runner's JSON form).

/// The text itself first, then each spelling (with duplicates).
pub(super) fn forms(text: &str) -> Vec<String> {
    // What `{:?}` prints inside its quotes (it leaves `'` alone, and escapes a combining mark
    // anywhere), and `str::escape_debug`, which differs from it in both.
    let debug = format!("{text:?}");
    let debug = debug[1..debug.len() - 1].to_owned();
    let mut forms = vec![text.to_owned(), debug, text.escape_debug().to_string()];
    let none = Escaping {
        ascii_only: false,
        html_safe: false,
        escape_slash: false,
        upper_hex: false,
        dotnet: false,
        gson: false,
        separators: false,
        nel: false,
    };
    for ascii_only in [false, true] {
        for html_safe in [false, true] {
            for escape_slash in [false, true] {
                for upper_hex in [false, true] {
                    forms.push(json_escaped(
                        text,
                        Escaping {
                            ascii_only,
                            html_safe,
                            escape_slash,
                            upper_hex,
                            ..none
                        },
                    ));
                }
            }
        }
    }
    forms.push(json_escaped(
        text,
        Escaping {
            ascii_only: true,
            html_safe: true,
            upper_hex: true,
            dotnet: true,
            ..none
        },
    ));
    forms.push(json_escaped(
        text,
        Escaping {
            html_safe: true,
            gson: true,
            ..none
        },
    ));
    // Only U+2028 and U+2029 escaped (Gson without HTML escaping), and U+0085 too (Json.NET's
    // default): the same as the minimal form for any secret without them.
    forms.push(json_escaped(
        text,
        Escaping {
            separators: true,
            ..none
        },
    ));
    forms.push(json_escaped(
        text,
        Escaping {
            separators: true,
            nel: true,
            ..none
        },
    ));
    forms
}

/// What an encoder escapes beyond RFC 8259's minimum.
#[derive(Clone, Copy)]
struct Escaping {
    /// Everything outside printable ASCII as `\uXXXX` (Python, PHP, .NET).
    ascii_only: bool,
    /// `<` `>` `&` U+2028 U+2029 as `\uXXXX` (Go, .NET).
    html_safe: bool,
    /// `/` as `\/` (PHP).
    escape_slash: bool,
    /// `\u00E4` rather than `\u00e4`.
    upper_hex: bool,
    /// `"` `'` `+` and the backtick as `\uXXXX` as well (.NET's default `JavaScriptEncoder`).
    dotnet: bool,
    /// `=` and `'` as `\uXXXX` as well (Gson's default, which is also `html_safe`).
    gson: bool,
    /// U+2028 and U+2029 as `\uXXXX` (Gson without HTML escaping, Json.NET).
    separators: bool,
    /// U+0085 as `\u0085` (Json.NET).
    nel: bool,
}

fn json_escaped(text: &str, how: Escaping) -> String {
    let mut out = String::with_capacity(text.len());
    let unit = |out: &mut String, u: u16| {
        use std::fmt::Write;
        let _ = if how.upper_hex {
            write!(out, "\\u{u:04X}")
        } else {
            write!(out, "\\u{u:04x}")
        };
    };
    for c in text.chars() {
        match c {
            '"' | '\'' | '+' | '`' if how.dotnet => unit(&mut out, c as u16),
            '=' | '\'' if how.gson => unit(&mut out, c as u16),
            '\u{2028}' | '\u{2029}' if how.separators => unit(&mut out, c as u16),
            '\u{85}' if how.nel => unit(&mut out, c as u16),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '/' if how.escape_slash => out.push_str("\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if how.html_safe => unit(&mut out, c as u16),
            c if (c as u32) < 0x20 => unit(&mut out, c as u16),
            // Python's `ensure_ascii` escapes everything outside ' '..='~', DEL included.
            c if how.ascii_only && !(' '..='~').contains(&c) => {
                for u in c.encode_utf16(&mut [0; 2]) {
                    unit(&mut out, *u);
                }
            }
            c => out.push(c),
        }
    }
    out
}
