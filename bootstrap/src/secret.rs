//! Secrets in memory: a wrapper whose `Debug` prints nothing of the value and which has no
//! `Display`, so a secret cannot reach a log line, an error or a panic by formatting.

use std::fmt;

/// How many leading characters of a Windmill token `tokens/list` shows and `tokens/delete`
/// takes (windmill-api.md §5.1).
pub const TOKEN_PREFIX_LEN: usize = 10;

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

/// Last line of defence for the places that print an error: every known secret (and, for API
/// tokens made with [`Secret::token`], their 10-character list prefix) is replaced. The
/// messages are built without secrets in the first place; this catches what a server might echo
/// back (a 422 that quotes the request body, a token delete answer that quotes the prefix).
pub fn scrub(text: &str, secrets: &[&Secret]) -> String {
    let mut out = text.to_owned();
    let mut needles: Vec<&str> = Vec::new();
    for secret in secrets {
        let value = secret.expose();
        let prefix = if secret.token { value.get(..secret.prefix().value.len()) } else { None };
        // Too short to be told from ordinary words; such a secret is refused at load anyway.
        needles.extend([Some(value), prefix].into_iter().flatten().filter(|n| n.len() >= 4));
    }
    // Longest first, so a secret that contains another is replaced whole.
    needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for needle in needles {
        if out.contains(needle) {
            out = out.replace(needle, "[REDACTED]");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_value() {
        let s = Secret::new("hunter2-very-secret");
        assert_eq!(format!("{s:?}"), "Secret([REDACTED])");
        assert!(!format!("{:?}", Some(&s)).contains("hunter2"));
    }

    #[test]
    fn scrub_replaces_a_tokens_prefix_and_only_a_tokens() {
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
    fn scrub_replaces_longest_first() {
        let a = Secret::new("abcdefgh");
        let b = Secret::new("abcd");
        assert_eq!(scrub("x abcdefgh y abcd z", &[&b, &a]), "x [REDACTED] y [REDACTED] z");
        assert_eq!(scrub("nothing here", &[&a]), "nothing here");
    }
}
