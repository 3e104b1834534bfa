//! The node's event settings: where progress events go (`EVENTS_URL`, in deploy-env.json or a
//! secrets source) and the shared secret the receiver checks (`EVENTS_SECRET`, from a secrets
//! source only). Neither reaches the program; the secret is redacted like any other.

use std::collections::BTreeMap;
use std::fmt;

use reqwest::Url;

use crate::error::Problem;
use crate::node::NodeValue;

/// A shorter shared secret is too easy to guess (and one under 4 bytes would not be redacted).
pub const MIN_SECRET_LEN: usize = 16;
pub const MAX_SECRET_LEN: usize = 1024;

/// A value that is never shown: its Debug output is a marker.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Where events go. The URL is not shown either: it may carry credentials.
#[derive(Clone)]
pub struct Target {
    pub url: Url,
    pub secret: Secret,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target").field("url", &"(not shown)").field("secret", &self.secret).finish()
    }
}

/// The event target the node configures, if any. Both keys or neither: one alone is a
/// configuration error, like every other problem here (exit 2, nothing runs).
pub fn from_node(node: &BTreeMap<String, NodeValue>) -> Result<Option<Target>, Vec<Problem>> {
    let (url, secret) = match (node.get("EVENTS_URL"), node.get("EVENTS_SECRET")) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(vec![Problem::EventsHalfConfigured { set: "EVENTS_URL", missing: "EVENTS_SECRET" }]),
        (None, Some(_)) => return Err(vec![Problem::EventsHalfConfigured { set: "EVENTS_SECRET", missing: "EVENTS_URL" }]),
        (Some(url), Some(secret)) => (url, secret),
    };
    let mut problems = Vec::new();
    // Never shown: a URL may carry credentials, and it may come from a secrets source.
    let hidden = || "(value not shown)".to_owned();
    let url = match Url::parse(&url.value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => Some(url),
        _ => {
            problems.push(Problem::BadControl { key: "EVENTS_URL", shown: hidden(), rule: "must be an http:// or https:// URL" });
            None
        }
    };
    if !secret.secret {
        // A secret in deploy-env.json would be neither protected on disk nor redacted.
        problems.push(Problem::SecretOutsideSecrets { key: "EVENTS_SECRET", origin: secret.origin.clone() });
    } else if !is_valid_secret(&secret.value) {
        problems.push(Problem::BadControl {
            key: "EVENTS_SECRET",
            shown: hidden(),
            rule: "must be 16 to 1024 printable ASCII characters without spaces",
        });
    }
    match (url, problems.is_empty()) {
        (Some(url), true) => Ok(Some(Target { url, secret: Secret(secret.value.clone()) })),
        _ => Err(problems),
    }
}

/// Fits an HTTP header value as is (no control characters, nothing to trim).
fn is_valid_secret(value: &str) -> bool {
    (MIN_SECRET_LEN..=MAX_SECRET_LEN).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
pub(crate) mod tests_support {
    pub fn secret(value: &str) -> super::Secret {
        super::Secret(value.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "events-secret-0123456789";

    fn node(pairs: &[(&str, &str, bool)]) -> BTreeMap<String, NodeValue> {
        pairs
            .iter()
            .map(|(k, v, secret)| ((*k).into(), NodeValue { value: (*v).into(), origin: format!("test:{k}"), secret: *secret }))
            .collect()
    }

    fn problems(pairs: &[(&str, &str, bool)]) -> Vec<String> {
        from_node(&node(pairs)).unwrap_err().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn neither_key_means_no_events() {
        assert!(from_node(&node(&[("A", "x", false)])).unwrap().is_none());
    }

    #[test]
    fn both_keys_make_a_target_whose_debug_shows_nothing() {
        let target = from_node(&node(&[("EVENTS_URL", "http://127.0.0.1:9/e?k=v", false), ("EVENTS_SECRET", SECRET, true)])).unwrap().unwrap();
        assert_eq!(target.url.as_str(), "http://127.0.0.1:9/e?k=v");
        assert_eq!(target.secret.expose(), SECRET);
        let shown = format!("{target:?}");
        assert!(!shown.contains(SECRET) && !shown.contains("127.0.0.1"), "{shown}");
    }

    #[test]
    fn one_key_alone_names_the_missing_one() {
        assert_eq!(problems(&[("EVENTS_URL", "http://x/", false)]), ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]);
        assert_eq!(problems(&[("EVENTS_SECRET", SECRET, true)]), ["EVENTS_SECRET is set but EVENTS_URL is not: progress events need both"]);
    }

    #[test]
    fn bad_values_are_named_but_never_shown() {
        let p = problems(&[("EVENTS_URL", "ftp://user:pw@x/", false), ("EVENTS_SECRET", "short-pw", true)]);
        assert_eq!(
            p,
            [
                "EVENTS_URL (value not shown) is invalid: must be an http:// or https:// URL",
                "EVENTS_SECRET (value not shown) is invalid: must be 16 to 1024 printable ASCII characters without spaces",
            ]
        );
        assert!(!p.concat().contains("pw@") && !p.concat().contains("short-pw"));
        let p = problems(&[("EVENTS_URL", "http://x/", false), ("EVENTS_SECRET", "with a space in it, long", true)]);
        assert_eq!(p.len(), 1, "{p:?}");
    }

    #[test]
    fn the_secret_must_come_from_a_secrets_source() {
        assert_eq!(
            problems(&[("EVENTS_URL", "http://x/", false), ("EVENTS_SECRET", SECRET, false)]),
            ["test:EVENTS_SECRET sets EVENTS_SECRET, which must come from a secrets directory or a secrets env file"]
        );
    }
}
