//! Secrets in memory, and every form in which a secret may be printed.
//!
//! [`Secret`] has a `Debug` that prints a marker and no `Display`, so that a secret cannot reach
//! a log line, an error or a panic by being formatted; [`Secret::expose`] is the one way to the
//! value, for the places that send or write it.
//!
//! [`forms`] is each spelling of a secret that a program, a tool or a server may print, so that
//! redaction finds more than the value as it is. The set contains the GitHub Actions runner's
//! secret masker (`ValueEncoders` in `actions/runner`: base64 at each byte alignment, RFC 3986
//! percent-encoding, XML escaping, the command line's `\"`, JSON, SQL's `''`, a value of more
//! than 8 bytes without the double quotes around it; not its PowerShell forms, as a node runs no
//! PowerShell) and adds what deploy tooling prints every day:
//! - JSON strings as the common encoders write them, and Rust's `Debug` ([`json`]);
//! - percent-encoding as URL libraries write it, and XML and HTML escaping ([`web`]);
//! - shell quoting as bash's `set -x`, `declare -p` and `printf %q` and Python's `shlex.quote`
//!   write it ([`shell`]);
//! - a string as Node.js's `util.inspect` (`console.log` of an object) prints it, in each of its
//!   quotings ([`javascript`]);
//! - base64 in both alphabets, with and without padding, at any byte offset (an
//!   `Authorization: Basic` header holds `user:password`), and wrapped into lines ([`base64`]).
//!
//! [`scrub`] is the last line of defence for text made partly of what a server answered: a 4xx
//! that quotes the request it refused quotes the secret in it, in one of these forms.

use std::fmt;

use aho_corasick::AhoCorasick;

pub mod base64;
mod javascript;
mod json;
mod shell;
mod web;

pub use base64::BASE64_MIN_LEN;

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
        Secret {
            value: value.into(),
            token: false,
        }
    }

    /// A Windmill API token (or login session): [`scrub`] also replaces its list prefix, which
    /// Windmill's answers quote (`deleted 1 tokens ["QedeJtIbdx*****"] with prefix QedeJtIbdx`).
    pub fn token(value: impl Into<String>) -> Self {
        Secret {
            value: value.into(),
            token: true,
        }
    }

    /// The value, for the one place that must send or write it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// The first [`TOKEN_PREFIX_LEN`] characters: a token's list prefix, a secret of its own.
    pub fn prefix(&self) -> Secret {
        let end = self
            .value
            .char_indices()
            .nth(TOKEN_PREFIX_LEN)
            .map_or(self.value.len(), |(i, _)| i);
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

/// `text` in every form of the module comment, the raw text first, without duplicates. A form
/// is there only where it differs from the text; the base64 forms only from
/// [`BASE64_MIN_LEN`] bytes on.
pub fn forms(text: &str) -> Vec<String> {
    let mut forms = escaped_forms(text);
    // A value configured in double quotes may be used without them (the runner's
    // `TrimDoubleQuotes`, from 9 bytes): the text between them, and each of its forms.
    if let Some(inner) = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .filter(|_| text.len() > 8)
    {
        forms.extend(self::forms(inner));
    }
    if text.len() >= BASE64_MIN_LEN {
        forms.extend(base64::forms(text.as_bytes()));
    }
    let mut seen = std::collections::HashSet::new();
    forms.retain(|form| seen.insert(form.clone()));
    forms
}

/// The forms made by escaping characters: just the text when it holds nothing that any of them
/// escapes, which is most tokens and keys.
fn escaped_forms(text: &str) -> Vec<String> {
    if text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return vec![text.to_owned()];
    }
    every_escaped_form(text)
}

fn every_escaped_form(text: &str) -> Vec<String> {
    let mut forms = json::forms(text);
    forms.extend(web::forms(text));
    forms.extend(shell::forms(text));
    forms.extend(javascript::forms(text));
    let mut seen = std::collections::HashSet::new();
    forms.retain(|form| seen.insert(form.clone()));
    forms
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
        for c in (0u8..=0x7f)
            .map(char::from)
            .chain(['\u{e4}', '\u{2028}', '\u{1F600}', '\u{301}', '\u{200b}'])
        {
            let text = format!("ab{c}cd");
            assert_eq!(escaped_forms(&text), every_escaped_form(&text), "{c:?}");
        }
        // The shortcut is taken (a token has one form, then its base64 forms).
        assert_eq!(escaped_forms("AbC-12_x.y"), ["AbC-12_x.y"]);
        assert_eq!(forms("AbC-12_"), ["AbC-12_"], "no base64 forms below 8 bytes");
        // At offsets 0 and 2 (of 3) the 8 bytes end inside a base64 group: a core and two ends
        // (with and without padding); the URL-safe alphabet spells them alike.
        assert_eq!(forms("AbC-12_x").len(), 1 + 3 + 1 + 3);
    }

    #[test]
    fn debug_hides_the_value() {
        let s = Secret::new("hunter2-very-secret");
        assert_eq!(format!("{s:?}"), "Secret([REDACTED])");
        assert!(!format!("{:?}", Some(&s)).contains("hunter2"));
        // A text that may be secret, and anything hidden: the plain one shows (the positive
        // control), the others do not.
        let (plain, secret) = (Text::Plain("plain-text".into()), Text::Secret(s.clone()));
        assert_eq!(
            format!("{plain:?} {secret:?}"),
            r#"Plain("plain-text") Secret(Secret([REDACTED]))"#
        );
        assert_eq!(secret.expose(), "hunter2-very-secret");
        assert_eq!(format!("{:?}", Hidden(vec!["hunter2-very-secret"])), "(not shown)");
    }

    #[test]
    fn a_raw_secret_is_replaced_and_other_text_kept() {
        assert_eq!(
            scrubbed("x hunter22 y hunter22", "hunter22"),
            "x [REDACTED] y [REDACTED]"
        );
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
        assert_eq!(
            scrubbed(r#""p\u00E4\"ss\uD83D\uDE00-word""#, "p\u{e4}\"ss\u{1F600}-word"),
            "\"[REDACTED]\""
        );
        // Python escapes DEL; an encoder that does not leaves it raw.
        assert_eq!(scrubbed(r"pass\u007fword", "pass\u{7f}word"), "[REDACTED]");
        assert_eq!(scrubbed("pass\u{7f}word", "pass\u{7f}word"), "[REDACTED]");
    }

    #[test]
    fn gos_html_safe_form() {
        // What Go's encoding/json writes for `a<b>c&d` + U+2028 + U+2029 + "ä".
        let go = r"a\u003cb\u003ec\u0026d\u2028\u2029ä";
        assert_eq!(scrubbed(go, "a<b>c&d\u{2028}\u{2029}\u{e4}"), "[REDACTED]");
        assert_eq!(
            scrubbed(
                r"a\u003Cb\u003Ec\u0026d\u2028\u2029\u00E4",
                "a<b>c&d\u{2028}\u{2029}\u{e4}"
            ),
            "[REDACTED]"
        );
    }

    #[test]
    fn the_escaped_slash_form() {
        // PHP's json_encode default: `\/`, and non-ASCII as \u.
        assert_eq!(
            scrubbed(r"https:\/\/u:p\u00e4ss@h\/x", "https://u:p\u{e4}ss@h/x"),
            "[REDACTED]"
        );
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
            assert_eq!(
                scrubbed(&secret.escape_debug().to_string(), secret),
                "[REDACTED]",
                "{secret:?}"
            );
        }
    }

    #[test]
    fn dotnet_and_gson_default_forms() {
        // System.Text.Json's default encoder: `"` `'` `+` as \u, upper-case hex, non-ASCII escaped.
        assert_eq!(
            scrubbed(r"k\u0022ey\u0027\u002B\u00E4==", "k\"ey'+\u{e4}=="),
            "[REDACTED]"
        );
        // Gson's default: `=` and `'` (and `<` `>` `&`) as \u, lower-case hex, non-ASCII raw.
        assert_eq!(
            scrubbed(r"QUJD+\u003d\u003d\u0027\u003cä", "QUJD+=='<\u{e4}"),
            "[REDACTED]"
        );
        // Json.NET's default escapes only U+0085, U+2028 and U+2029; Gson without HTML escaping
        // only the last two.
        assert_eq!(scrubbed(r"p\u00e4\u0085ssword", "p\u{e4}\u{85}ssword"), "[REDACTED]");
        assert_eq!(scrubbed("p\u{e4}\\u0085ssword", "p\u{e4}\u{85}ssword"), "[REDACTED]");
        assert_eq!(
            scrubbed("pass<\\u2028w\u{e4}rd", "pass<\u{2028}w\u{e4}rd"),
            "[REDACTED]"
        );
        // Control: a base64 key's padding makes it take the slow path.
        assert!(escaped_forms("QUJDRA==").len() > 1);
    }

    #[test]
    fn a_value_in_double_quotes_is_also_redacted_without_them() {
        assert!(forms("\"quoted-secret\"").contains(&"quoted-secret".to_owned()));
        assert_eq!(scrubbed("pw=quoted-secret;", "\"quoted-secret\""), "pw=[REDACTED];");
        // Control: a short one, or one quoted on one side only, is not cut.
        assert!(!forms("\"short7\"").contains(&"short7".to_owned()));
        assert!(!forms("\"quoted-secret").contains(&"quoted-secret".to_owned()));
    }

    #[test]
    fn every_form_is_distinct_and_plain_text_has_one() {
        assert_eq!(forms("plain-a"), ["plain-a"]);
        let all = forms("\u{e4}</");
        assert_eq!(all[0], "\u{e4}</");
        for expected in [
            "\\u00e4</",
            "\\u00E4</",
            "\u{e4}\\u003c/",
            "\u{e4}\\u003C/",
            "\u{e4}<\\/",
            "\\u00e4\\u003c\\/",
        ] {
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
        assert_eq!(
            scrub(answer, &[&token]),
            "deleted 1 tokens [\"[REDACTED]*****\"] with prefix [REDACTED]"
        );
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
