//! Secrets in memory: a wrapper whose `Debug` prints nothing of the value and which has no
//! `Display`, so a secret cannot reach a log line, an error or a panic by formatting.

use std::fmt;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that must send or write it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

/// Last line of defence for the one place that prints an error: every known secret (and, for
/// API tokens, their 10-character list prefix) is replaced. The messages are built without
/// secrets in the first place; this catches what a dependency might echo back (for instance a
/// server that quotes the request body in a 422).
pub fn scrub(text: &str, secrets: &[&Secret]) -> String {
    let mut out = text.to_owned();
    let mut needles: Vec<&str> = Vec::new();
    for secret in secrets {
        let value = secret.expose();
        // Too short to be told from ordinary words; such a secret is refused at load anyway.
        if value.len() >= 4 {
            needles.push(value);
        }
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
    fn scrub_replaces_longest_first() {
        let a = Secret::new("abcdefgh");
        let b = Secret::new("abcd");
        assert_eq!(scrub("x abcdefgh y abcd z", &[&b, &a]), "x [REDACTED] y [REDACTED] z");
        assert_eq!(scrub("nothing here", &[&a]), "nothing here");
    }
}
