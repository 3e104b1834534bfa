//! Secrets in memory, and scrubbing them from text that is about to be printed.
//!
//! [`Secret`] has a `Debug` that prints a marker and no `Display`, so that a secret cannot reach
//! a log line, an error or a panic by being formatted; [`Secret::expose`] is the one way to the
//! value, for the places that send or write it.
//!
//! [`scrub`] is the last line of defence for text made partly of what a server answered: a 4xx
//! that quotes the request it refused quotes the secret in it, JSON-escaped the way that
//! server's encoder writes JSON. So each secret is looked for in every such form ([`forms`]):
//! as it is; as serde_json and RFC 8259 escape it (`\"`, `\\`, control characters); as Python's
//! `json.dumps` does by default and PHP's `json_encode` (everything outside printable ASCII as
//! `\uXXXX`, astral characters as a surrogate pair, PHP also `\/`); as Go's `encoding/json` does
//! (`\u003c \u003e \u0026 \u2028 \u2029`); with `\/` for `/`; with upper-case hex digits
//! (Jackson); as .NET's `System.Text.Json` does by default (upper-case hex, and `"` `'` `+` and
//! the backtick as `\uXXXX` too: a base64 key's `+` becomes `\u002B`); as Gson does by default
//! (also `=` and `'`: a base64 key's padding becomes `\u003d`); with only U+2028 and U+2029
//! escaped (Gson without HTML escaping) and U+0085 too (Json.NET's default); and as Rust's
//! `Debug` and `str::escape_debug` print it.

use std::fmt;

use aho_corasick::AhoCorasick;

/// What replaces a secret.
pub const MARKER: &str = "[REDACTED]";

/// How many leading characters of a Windmill API token its `tokens/list` shows and
/// `tokens/delete` takes (Windmill's `backend/windmill-api-users/src/users.rs`).
pub const TOKEN_PREFIX_LEN: usize = 10;

/// Needles shorter than this are not scrubbed: they cannot be told from ordinary words, and the
/// callers refuse such short secrets where they are configured.
pub const MIN_LEN: usize = 4;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    /// A Windmill API token, whose list prefix is a secret as well.
    token: bool,
}

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret { value: value.into(), token: false }
    }

    /// A Windmill API token (or login session): [`scrub`] also replaces its list prefix, which
    /// Windmill's answers quote (`deleted 1 tokens ["QedeJtIbdx*****"] with prefix QedeJtIbdx`).
    pub fn token(value: impl Into<String>) -> Self {
        Secret { value: value.into(), token: true }
    }

    /// The value, for the one place that must send or write it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// The first [`TOKEN_PREFIX_LEN`] characters: a token's list prefix, a secret of its own.
    pub fn prefix(&self) -> Secret {
        let end = self.value.char_indices().nth(TOKEN_PREFIX_LEN).map_or(self.value.len(), |(i, _)| i);
        Secret::new(&self.value[..end])
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

/// A value shown as it is, or a secret: its `Debug` never shows a secret's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Text {
    Plain(String),
    Secret(Secret),
}

impl Text {
    /// The value, for the places that pass it on (a program's environment) or compare it.
    pub fn expose(&self) -> &str {
        match self {
            Text::Plain(text) => text,
            Text::Secret(secret) => secret.expose(),
        }
    }

    pub fn is_secret(&self) -> bool {
        matches!(self, Text::Secret(_))
    }
}

/// Any value whose `Debug` shows nothing of it: a URL that may carry credentials, a payload, a
/// set of redaction needles. It hides from `{:?}` only; the value is there to use (`.0`, or
/// through `Deref`).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hidden<T>(pub T);

impl<T> fmt::Debug for Hidden<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(not shown)")
    }
}

impl<T> std::ops::Deref for Hidden<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// `text` in each form an encoder may write it inside a JSON string (see the module comment),
/// the raw text first, without duplicates.
pub fn forms(text: &str) -> Vec<String> {
    // Most secrets (tokens, keys) hold nothing any encoder escapes: one form.
    if text.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '/' | '<' | '>' | '&' | '\'' | '+' | '`' | '=') || c == ' ') {
        return vec![text.to_owned()];
    }
    every_form(text)
}

fn every_form(text: &str) -> Vec<String> {
    // What `{:?}` prints inside its quotes (it leaves `'` alone, and escapes a combining mark
    // anywhere), and `str::escape_debug`, which differs from it in both.
    let debug = format!("{text:?}");
    let debug = debug[1..debug.len() - 1].to_owned();
    let mut forms = vec![text.to_owned(), debug, text.escape_debug().to_string()];
    let none = Escaping { ascii_only: false, html_safe: false, escape_slash: false, upper_hex: false, dotnet: false, gson: false, separators: false, nel: false };
    for ascii_only in [false, true] {
        for html_safe in [false, true] {
            for escape_slash in [false, true] {
                for upper_hex in [false, true] {
                    forms.push(json_escaped(text, Escaping { ascii_only, html_safe, escape_slash, upper_hex, ..none }));
                }
            }
        }
    }
    forms.push(json_escaped(text, Escaping { ascii_only: true, html_safe: true, upper_hex: true, dotnet: true, ..none }));
    forms.push(json_escaped(text, Escaping { html_safe: true, gson: true, ..none }));
    // Only U+2028 and U+2029 escaped (Gson without HTML escaping), and U+0085 too (Json.NET's
    // default): the same as the minimal form for any secret without them.
    forms.push(json_escaped(text, Escaping { separators: true, ..none }));
    forms.push(json_escaped(text, Escaping { separators: true, nel: true, ..none }));
    let mut seen = std::collections::HashSet::new();
    forms.retain(|form| seen.insert(form.clone()));
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
        let _ = if how.upper_hex { write!(out, "\\u{u:04X}") } else { write!(out, "\\u{u:04x}") };
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

/// `text` with every occurrence of every secret, in each of its [`forms`], replaced by
/// [`MARKER`] (for tokens made with [`Secret::token`], their list prefix too). Occurrences that
/// overlap or touch become one marker, so a secret that contains another goes whole.
pub fn scrub(text: &str, secrets: &[&Secret]) -> String {
    let mut needles: Vec<String> = Vec::new();
    for secret in secrets {
        let prefix = secret.token.then(|| secret.prefix());
        for value in std::iter::once(secret.expose()).chain(prefix.as_ref().map(Secret::expose)) {
            needles.extend(forms(value).into_iter().filter(|n| n.len() >= MIN_LEN));
        }
    }
    if needles.is_empty() {
        return text.to_owned();
    }
    let searcher = AhoCorasick::new(&needles).expect("a few dozen short literals always build");
    // Every byte that any occurrence covers, overlapping ones included.
    let mut covered: Vec<(usize, usize)> = Vec::new();
    for found in searcher.find_overlapping_iter(text) {
        match covered.last_mut() {
            Some(last) if found.start() <= last.1 => last.1 = last.1.max(found.end()),
            _ => covered.push((found.start(), found.end())),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in covered {
        out.push_str(&text[at..start]);
        out.push_str(MARKER);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubbed(text: &str, secret: &str) -> String {
        scrub(text, &[&Secret::new(secret)])
    }

    #[test]
    fn the_one_form_shortcut_is_taken_only_where_every_form_is_the_text() {
        for c in (0u8..=0x7f).map(char::from).chain(['\u{e4}', '\u{2028}', '\u{1F600}', '\u{301}', '\u{200b}']) {
            let text = format!("ab{c}cd");
            assert_eq!(forms(&text), every_form(&text), "{c:?}");
        }
        // The shortcut is taken (a token has one form).
        assert_eq!(forms("AbC-12_x.y"), ["AbC-12_x.y"]);
    }

    #[test]
    fn debug_hides_the_value() {
        let s = Secret::new("hunter2-very-secret");
        assert_eq!(format!("{s:?}"), "Secret([REDACTED])");
        assert!(!format!("{:?}", Some(&s)).contains("hunter2"));
        // A text that may be secret, and anything hidden: the plain one shows (the positive
        // control), the others do not.
        let (plain, secret) = (Text::Plain("plain-text".into()), Text::Secret(s.clone()));
        assert_eq!(format!("{plain:?} {secret:?}"), r#"Plain("plain-text") Secret(Secret([REDACTED]))"#);
        assert_eq!(secret.expose(), "hunter2-very-secret");
        assert_eq!(format!("{:?}", Hidden(vec!["hunter2-very-secret"])), "(not shown)");
    }

    #[test]
    fn a_raw_secret_is_replaced_and_other_text_kept() {
        assert_eq!(scrubbed("x hunter22 y hunter22", "hunter22"), "x [REDACTED] y [REDACTED]");
        // Negative control: nothing to replace, nothing changed.
        assert_eq!(scrubbed("nothing here", "hunter22"), "nothing here");
    }

    #[test]
    fn the_serde_form_as_serde_json_writes_it() {
        let secret = "pa\"ss\\wo\u{1}rd\n\u{e4}";
        let json = serde_json::to_string(&serde_json::json!({ "password": secret })).unwrap();
        assert!(!json.contains(secret));
        assert_eq!(scrubbed(&json, secret), "{\"password\":\"[REDACTED]\"}");
    }

    #[test]
    fn pythons_ascii_form_with_surrogate_pairs() {
        // What `json.dumps("pä\"ss😀-word")` prints with Python's defaults.
        let python = r#""p\u00e4\"ss\ud83d\ude00-word""#;
        assert_eq!(scrubbed(python, "p\u{e4}\"ss\u{1F600}-word"), "\"[REDACTED]\"");
        // Upper-case hex digits (.NET, Jackson) too.
        assert_eq!(scrubbed(r#""p\u00E4\"ss\uD83D\uDE00-word""#, "p\u{e4}\"ss\u{1F600}-word"), "\"[REDACTED]\"");
        // Python escapes DEL; an encoder that does not leaves it raw.
        assert_eq!(scrubbed(r"pass\u007fword", "pass\u{7f}word"), "[REDACTED]");
        assert_eq!(scrubbed("pass\u{7f}word", "pass\u{7f}word"), "[REDACTED]");
    }

    #[test]
    fn gos_html_safe_form() {
        // What Go's encoding/json writes for `a<b>c&d` + U+2028 + U+2029 + "ä".
        let go = r"a\u003cb\u003ec\u0026d\u2028\u2029ä";
        assert_eq!(scrubbed(go, "a<b>c&d\u{2028}\u{2029}\u{e4}"), "[REDACTED]");
        assert_eq!(scrubbed(r"a\u003Cb\u003Ec\u0026d\u2028\u2029\u00E4", "a<b>c&d\u{2028}\u{2029}\u{e4}"), "[REDACTED]");
    }

    #[test]
    fn the_escaped_slash_form() {
        // PHP's json_encode default: `\/`, and non-ASCII as \u.
        assert_eq!(scrubbed(r"https:\/\/u:p\u00e4ss@h\/x", "https://u:p\u{e4}ss@h/x"), "[REDACTED]");
        assert_eq!(scrubbed(r"a\/b\/secret", "a/b/secret"), "[REDACTED]");
    }

    #[test]
    fn rusts_debug_form() {
        let secret = "tab\there\u{7}";
        assert_eq!(scrubbed(&format!("{secret:?}"), secret), "\"[REDACTED]\"");
        // `Debug` leaves `'` alone where `escape_debug` escapes it, and escapes a combining mark
        // anywhere where `escape_debug` does so only at the start: both spellings are found.
        for secret in ["it's-a\u{1}secret", "cafe\u{301}-password", "love\u{2764}\u{fe0f}-pass"] {
            assert_eq!(scrubbed(&format!("{secret:?}"), secret), "\"[REDACTED]\"", "{secret:?}");
            assert_eq!(scrubbed(&secret.escape_debug().to_string(), secret), "[REDACTED]", "{secret:?}");
        }
    }

    #[test]
    fn dotnet_and_gson_default_forms() {
        // System.Text.Json's default encoder: `"` `'` `+` as \u, upper-case hex, non-ASCII escaped.
        assert_eq!(scrubbed(r"k\u0022ey\u0027\u002B\u00E4==", "k\"ey'+\u{e4}=="), "[REDACTED]");
        // Gson's default: `=` and `'` (and `<` `>` `&`) as \u, lower-case hex, non-ASCII raw.
        assert_eq!(scrubbed(r"QUJD+\u003d\u003d\u0027\u003cä", "QUJD+=='<\u{e4}"), "[REDACTED]");
        // Json.NET's default escapes only U+0085, U+2028 and U+2029; Gson without HTML escaping
        // only the last two.
        assert_eq!(scrubbed(r"p\u00e4\u0085ssword", "p\u{e4}\u{85}ssword"), "[REDACTED]");
        assert_eq!(scrubbed("p\u{e4}\\u0085ssword", "p\u{e4}\u{85}ssword"), "[REDACTED]");
        assert_eq!(scrubbed("pass<\\u2028w\u{e4}rd", "pass<\u{2028}w\u{e4}rd"), "[REDACTED]");
        // Control: a base64 key's padding makes it take the slow path.
        assert_eq!(forms("QUJDRA==").len(), 2);
    }

    #[test]
    fn every_form_is_distinct_and_plain_text_has_one() {
        assert_eq!(forms("plain-alnum_123"), ["plain-alnum_123"]);
        let all = forms("\u{e4}</");
        assert_eq!(all[0], "\u{e4}</");
        for expected in ["\\u00e4</", "\\u00E4</", "\u{e4}\\u003c/", "\u{e4}\\u003C/", "\u{e4}<\\/", "\\u00e4\\u003c\\/"] {
            assert!(all.iter().any(|f| f == expected), "{expected} missing from {all:?}");
        }
    }

    #[test]
    fn longest_first_and_overlaps_become_one_marker() {
        let a = Secret::new("abcdefgh");
        let b = Secret::new("abcd");
        assert_eq!(scrub("x abcdefgh y abcd z", &[&b, &a]), "x [REDACTED] y [REDACTED] z");
        // Two secrets that overlap in the text: no tail of either survives.
        let c = Secret::new("efghijkl");
        assert_eq!(scrub("x abcdefghijkl y", &[&a, &c]), "x [REDACTED] y");
    }

    #[test]
    fn a_tokens_prefix_and_only_a_tokens() {
        let token = Secret::token("QedeJtIbdxABCDEFGHIJKLMNOPQRSTUV");
        let answer = "deleted 1 tokens [\"QedeJtIbdx*****\"] with prefix QedeJtIbdx";
        assert_eq!(scrub(answer, &[&token]), "deleted 1 tokens [\"[REDACTED]*****\"] with prefix [REDACTED]");
        assert_eq!(scrub("QedeJtIbdxABCDEFGHIJKLMNOPQRSTUV", &[&token]), "[REDACTED]");
        // A password's first ten characters are not a secret of their own.
        let password = Secret::new("QedeJtIbdx-a-password");
        assert_eq!(scrub(answer, &[&password]), answer);
        // A prefix on its own (from tokens/list) is a plain secret.
        assert_eq!(scrub(answer, &[&token.prefix()]), scrub(answer, &[&token]));
        assert_eq!(token.prefix().expose(), "QedeJtIbdx");
        assert_eq!(Secret::token("short").prefix().expose(), "short");
    }

    #[test]
    fn too_short_secrets_are_left_alone() {
        assert_eq!(scrubbed("abc abc", "abc"), "abc abc");
        assert_eq!(scrub("abc", &[]), "abc");
    }
}
