//! The namespace and the state address of a job: two deployments must never address each
//! other's state, and a job from the seeds' front-end (which sends `TF_HTTP_ADDRESS =
//! <base>/<namespace>`, already scoped, and no `NAMESPACE`) must run.
//!
//! - The namespace is the payload's `NAMESPACE`, or else the last path segment of its
//!   `TF_HTTP_ADDRESS`; both given and different is refused.
//! - With the node's `STATE_BASE_ADDRESS`, the state address is `<base>/<namespace>`, and a
//!   payload's `TF_HTTP_ADDRESS` must be exactly that. Without one, the payload's address passes
//!   as the front-end scoped it.
//! - Lock and unlock addresses of a payload must lie under the state address; else both are
//!   `<address>/lock`.
//! - Every state address is a strict URL ([`url_problem`]); errors never show one that carries
//!   credentials.

use std::collections::BTreeMap;

use super::names;
use crate::error::Problem;

/// The state-backend addresses the program gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateAddress {
    pub address: String,
    pub lock: String,
    pub unlock: String,
    /// Which of the three came from the payload as they are (the rest jobenv derived).
    pub from_payload: [bool; 3],
}

/// The last path segment of a state address (one trailing `/` aside), if it has one.
pub fn last_segment(address: &str) -> Option<&str> {
    let rest = address.split_once("://")?.1;
    let path = &rest[rest.find('/')?..];
    path.strip_suffix('/')
        .unwrap_or(path)
        .rsplit('/')
        .next()
        .filter(|segment| !segment.is_empty())
}

/// The namespace a payload names, for the job's identity before it is checked: `NAMESPACE`, or
/// else the last path segment of `TF_HTTP_ADDRESS`; only one that fits the namespace grammar
/// (an unchecked one could be anything: a query's token, a megabyte of text).
pub fn namespace_of(namespace: Option<&str>, address: Option<&str>) -> Option<String> {
    namespace
        .or_else(|| address.and_then(last_segment))
        .filter(|ns| names::is_valid_namespace(ns))
        .map(str::to_owned)
}

/// At most this many characters of an address appear in an error.
const SHOWN_ADDRESS_CHARS: usize = 128;

/// How an address appears in an error: quoted and cut short, without its query or fragment
/// (which may carry a token), and not at all when it carries credentials.
fn shown(address: &str) -> String {
    if has_userinfo(address) {
        return "(value not shown: it carries credentials)".to_owned();
    }
    match address.find(['?', '#']) {
        Some(at) => format!(
            "{} (its query or fragment not shown)",
            super::shown(&address[..at], SHOWN_ADDRESS_CHARS)
        ),
        None => super::shown(address, SHOWN_ADDRESS_CHARS),
    }
}

fn authority(address: &str) -> &str {
    let rest = address.split_once("://").map_or(address, |(_, rest)| rest);
    &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())]
}

pub fn has_userinfo(address: &str) -> bool {
    authority(address).contains('@')
}

/// Why `address` is not a strict state address, if it is not: an `http://` or `https://` URL
/// with a host, without a query, a fragment, empty or dot segments (which URL parsers resolve,
/// so that `<address>/../other` would name another deployment's state), a percent-encoded `.`,
/// `/` or `\` (which servers such as nginx decode before they resolve dot segments, so that
/// `<address>/..%2Fother` would too), whitespace, control characters or backslashes (which the
/// URL standard reads as `/`); userinfo only if allowed.
pub fn url_problem(address: &str, node: bool) -> Option<&'static str> {
    let allow_userinfo = node;
    let Some(rest) = address
        .strip_prefix("https://")
        .or_else(|| address.strip_prefix("http://"))
    else {
        return Some("must be an http:// or https:// URL");
    };
    if address.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("must not contain whitespace or control characters");
    }
    if address.contains(['?', '#', '\\']) {
        return Some("must not have a query, a fragment or a backslash");
    }
    let host = authority(address);
    if host.is_empty() || host.ends_with('@') {
        return Some("must name a host");
    }
    if !allow_userinfo && host.contains('@') {
        return Some("must not carry credentials (user:password@); they go in TF_HTTP_USERNAME and TF_HTTP_PASSWORD");
    }
    let path = &rest[host.len()..];
    let segments: Vec<&str> = path.strip_suffix('/').unwrap_or(path).split('/').skip(1).collect();
    if segments.iter().any(|segment| segment.is_empty()) {
        return Some("must not have empty path segments");
    }
    let dot = |s: &str| {
        matches!(
            s.to_ascii_lowercase().as_str(),
            "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e."
        )
    };
    if segments.iter().any(|segment| dot(segment)) {
        return Some("must not have . or .. path segments");
    }
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c"].iter().any(|encoded| lower.contains(encoded)) {
        return Some("must not percent-encode '.', '/' or '\\'");
    }
    // A job's address: path segments of unreserved characters only. No percent-encoding and no
    // `;` (servers that decode a segment, or read `..;` as `..`, would resolve it elsewhere).
    let unreserved = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b));
    if !node && !segments.iter().all(|segment| unreserved(segment)) {
        return Some("must have path segments of letters, digits and . _ ~ - only");
    }
    // The whole URL, not only its path: a parser also rewrites hosts (`State.example`, `0x7f.1`,
    // a default port, an IPv6 spelling), and jobenv, the program and the state backend must all
    // read the one address that was checked. An empty path is the parser's `/`.
    match reqwest::Url::parse(address) {
        // An IP address is the parser's own (`Host::Ipv4`, `Host::Ipv6`): only a domain is checked.
        Ok(url) if url.domain().is_some_and(|domain| host_problem(domain).is_some()) => {
            url.domain().and_then(host_problem)
        }
        Ok(url) if url.as_str() == address || (path.is_empty() && url.as_str().strip_suffix('/') == Some(address)) => {
            None
        }
        _ => Some("must be a URL that no parser rewrites"),
    }
}

/// Checks the payload's state addresses ([`url_problem`]); false when one is not strict.
pub fn check_addresses(payload: &BTreeMap<&'static str, String>, problems: &mut Vec<Problem>) -> bool {
    let before = problems.len();
    for key in ["TF_HTTP_ADDRESS", "TF_HTTP_LOCK_ADDRESS", "TF_HTTP_UNLOCK_ADDRESS"] {
        if let Some((address, rule)) = payload
            .get(key)
            .and_then(|address| Some((address, url_problem(address, false)?)))
        {
            problems.push(Problem::BadControl {
                key,
                shown: shown(address),
                rule,
            });
        }
    }
    problems.len() == before
}

/// Resolves the namespace; `payload` holds the payload's control and state keys. An address
/// that is not strict names no namespace ([`check_addresses`] reports it).
pub fn namespace(payload: &BTreeMap<&'static str, String>, problems: &mut Vec<Problem>) -> Option<String> {
    let given = payload.get("NAMESPACE");
    let address = payload
        .get("TF_HTTP_ADDRESS")
        .filter(|address| url_problem(address, false).is_none());
    if given.is_none() && address.is_none() && payload.contains_key("TF_HTTP_ADDRESS") {
        return None;
    }
    let namespace = match (given, address.map(|a| (a, last_segment(a)))) {
        // Without a segment to compare, every namespace sent with this address would share it.
        (Some(given), Some((_, None))) => {
            problems.push(Problem::AddressWithoutNamespace {
                namespace: super::shown(given, SHOWN_NAMESPACE_CHARS),
            });
            return None;
        }
        (Some(given), Some((address, Some(from_address)))) if given != from_address => {
            let namespace = super::cut(given, SHOWN_NAMESPACE_CHARS);
            problems.push(Problem::NamespaceMismatch {
                namespace,
                address: shown(address),
            });
            return None;
        }
        (Some(namespace), _) => namespace.clone(),
        (None, Some((_, Some(from_address)))) => from_address.to_owned(),
        (None, _) => {
            problems.push(Problem::MissingControl {
                key: "NAMESPACE",
                hint: " (the job payload must name the deployment's namespace: NAMESPACE, or TF_HTTP_ADDRESS ending in it)",
            });
            return None;
        }
    };
    if !names::is_valid_namespace(&namespace) {
        let shown = super::shown(&namespace, SHOWN_NAMESPACE_CHARS);
        problems.push(Problem::BadControl {
            key: "NAMESPACE",
            shown,
            rule: "must match ^[a-z0-9][a-z0-9-]{0,62}$",
        });
        return None;
    }
    Some(namespace)
}

/// A namespace is at most 63 characters: one cut at 64 is one that was too long anyway.
const SHOWN_NAMESPACE_CHARS: usize = 64;

/// The state addresses of a job in `namespace`, from the node's base and the payload (whose
/// addresses passed [`check_addresses`]).
pub fn address(
    namespace: &str,
    base: Option<&str>,
    payload: &BTreeMap<&'static str, String>,
    problems: &mut Vec<Problem>,
) -> Option<StateAddress> {
    let given = |key: &'static str| payload.get(key).map(String::as_str);
    let trimmed = |address: &str| address.strip_suffix('/').unwrap_or(address).to_owned();
    let (address, from_payload) = match (base, given("TF_HTTP_ADDRESS")) {
        (Some(base), given) => {
            let scoped = format!("{}/{namespace}", base.trim_end_matches('/'));
            // A payload's address never carries credentials (`url_problem`), the node's base may:
            // compared without them, so that a seed's `<base>/<namespace>` matches.
            if given.is_some_and(|given| trimmed(given) != without_userinfo(&scoped)) {
                problems.push(Problem::ForeignStateAddress {
                    shown: shown(given.expect("given")),
                    namespace: namespace.to_owned(),
                });
                return None;
            }
            (scoped, false)
        }
        (None, Some(given)) => (trimmed(given), true),
        (None, None) => {
            if let Some(key) = ["TF_HTTP_LOCK_ADDRESS", "TF_HTTP_UNLOCK_ADDRESS"]
                .into_iter()
                .find(|key| payload.contains_key(key))
            {
                problems.push(Problem::LockWithoutState { key });
            }
            return None;
        }
    };
    // Lock addresses are compared with the state address the same way; under a base with
    // credentials, one given is put under the address with them (the same backend, the same
    // credentials for its locks), so it is derived.
    let bare = without_userinfo(&address);
    let mut under = |key: &'static str| match given(key) {
        None => Some((format!("{address}/lock"), false)),
        Some(lock) if trimmed(lock) == bare || lock.starts_with(&format!("{bare}/")) => {
            let credentialed = bare != address;
            Some(if credentialed {
                (format!("{address}{}", &lock[bare.len()..]), false)
            } else {
                (lock.to_owned(), true)
            })
        }
        Some(lock) => {
            problems.push(Problem::LockOutsideState {
                key,
                shown: shown(lock),
            });
            None
        }
    };
    let (lock, unlock) = (under("TF_HTTP_LOCK_ADDRESS"), under("TF_HTTP_UNLOCK_ADDRESS"));
    let ((lock, lock_given), (unlock, unlock_given)) = (lock?, unlock?);
    Some(StateAddress {
        address,
        lock,
        unlock,
        from_payload: [from_payload, lock_given, unlock_given],
    })
}

/// `address` without its userinfo (`https://user:pw@host/x` is `https://host/x`).
fn without_userinfo(address: &str) -> String {
    let (Some((scheme, rest)), Some((_, host))) = (address.split_once("://"), authority(address).rsplit_once('@'))
    else {
        return address.to_owned();
    };
    format!("{scheme}://{host}{}", &rest[authority(address).len()..])
}

/// Why `host` (a domain the URL parser accepted) is not a host name: labels of letters, digits
/// and `-` (not first or last), 1 to 63 of them each, 253 in all. The URL standard takes much
/// more as a domain (`s{x}`, `a_b`, `*`): a state backend's address names a real host.
fn host_problem(host: &str) -> Option<&'static str> {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    (host.len() > 253 || !host.split('.').all(label))
        .then_some("must name a valid host: a host name (letters, digits, - and .) or an IP address")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_urls() {
        for good in [
            "https://state.example/tf/ns",
            "http://10.0.0.1:8080/tf/ns/",
            "https://state.example",
            "http://[::1]:8080/tf",
            "https://xn--bcher-kva.example/tf",
            "http://state-1/tf",
        ] {
            assert_eq!(url_problem(good, false), None, "{good}");
        }
        for (bad, why) in [
            ("ftp://state.example/tf", "http"),
            ("https://state.example/tf/ns?x=1", "query"),
            ("https://state.example/tf/ns#x", "fragment"),
            ("https://state.example/tf\\..\\other", "backslash"),
            ("https://state.example/tf//ns", "empty"),
            ("https://state.example/tf/../other", ". or .."),
            ("https://state.example/tf/%2E%2e/other", ". or .."),
            ("https://state.example/tf/./ns", ". or .."),
            ("https://state.example/tf/..%2Fother", "percent-encode"),
            ("https://state.example/tf/ns%5C..%5Cother", "percent-encode"),
            ("https://state.example/tf/%2E%2E%2fother", "percent-encode"),
            ("https://state.example/tf/n s", "whitespace"),
            ("https://state.example/tf/ns\n", "whitespace"),
            ("https://user:pw@state.example/tf/ns", "credentials"),
            ("https:///tf/ns", "host"),
            // Hosts and ports a parser rewrites: the checked text would not be the address used.
            ("https://State.Example/tf/ns", "rewrites"),
            ("http://0x7f.1/tf/ns", "rewrites"),
            ("https://state.example:443/tf/ns", "rewrites"),
            ("http://[0:0::1]/tf/ns", "rewrites"),
            ("HTTPS://state.example/tf/ns", "http"),
            // Domains the URL standard takes, but no host is named so.
            ("https://s{x}/tf/ns", "valid host"),
            ("https://state_1.example/tf/ns", "valid host"),
            ("https://-state.example/tf/ns", "valid host"),
            ("https://state..example/tf/ns", "valid host"),
            ("https://*.example/tf/ns", "valid host"),
        ] {
            assert!(
                url_problem(bad, false).is_some_and(|rule| rule.contains(why)),
                "{bad}: {:?}",
                url_problem(bad, false)
            );
        }
        assert_eq!(
            url_problem("https://user:pw@state.example/tf", true),
            None,
            "the node's base may carry credentials"
        );
        assert!(url_problem("https://user:pw@s{x}/tf", true).is_some_and(|rule| rule.contains("valid host")));
    }

    #[test]
    fn a_base_with_credentials_scopes_a_seeds_address_without_them() {
        let base = Some("https://tfuser:pw-123@state.example/tf/");
        let mut problems = Vec::new();
        let p = payload(&[
            ("TF_HTTP_ADDRESS", "https://state.example/tf/team-a"),
            ("TF_HTTP_LOCK_ADDRESS", "https://state.example/tf/team-a/locks/x"),
        ]);
        let state = address("team-a", base, &p, &mut problems).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        // The program uses the node's own address, credentials and all, for its locks too.
        assert_eq!(state.address, "https://tfuser:pw-123@state.example/tf/team-a");
        assert_eq!(state.lock, "https://tfuser:pw-123@state.example/tf/team-a/locks/x");
        assert_eq!(state.unlock, "https://tfuser:pw-123@state.example/tf/team-a/lock");
        assert_eq!(state.from_payload, [false, false, false]);
        // Another namespace's address is still refused, and the credentials are never shown.
        let p = payload(&[("TF_HTTP_ADDRESS", "https://state.example/tf/team-b")]);
        assert!(address("team-a", base, &p, &mut problems).is_none());
        let shown = problems.iter().map(ToString::to_string).collect::<String>();
        assert!(
            shown.contains("is not this node's state address of namespace team-a")
                && !shown.contains("pw-123")
                && !shown.contains("tfuser"),
            "{shown}"
        );
        assert_eq!(without_userinfo("https://a:b@c@h:1/x"), "https://h:1/x");
        assert_eq!(without_userinfo("https://h/x@y"), "https://h/x@y");
    }

    #[test]
    fn the_namespace_is_the_last_segment() {
        assert_eq!(last_segment("https://s/tf/team-a"), Some("team-a"));
        assert_eq!(last_segment("https://s/tf/team-a/"), Some("team-a"));
        assert_eq!(last_segment("https://s"), None);
        assert_eq!(last_segment("https://s/"), None);
        assert_eq!(namespace_of(None, Some("https://s/tf/b")), Some("b".into()));
        assert_eq!(namespace_of(Some("a"), Some("https://s/tf/b")), Some("a".into()));
        // Only a namespace of the grammar names the job before it is checked.
        assert_eq!(namespace_of(None, Some("https://s/tf/b?token=t")), None);
        assert_eq!(namespace_of(Some(&"n".repeat(64)), None), None);
    }

    fn payload(pairs: &[(&'static str, &str)]) -> BTreeMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
    }

    #[test]
    fn a_scoped_address_from_the_payload() {
        let mut problems = Vec::new();
        let p = payload(&[("TF_HTTP_ADDRESS", "https://s/tf/team-a/")]);
        assert!(check_addresses(&p, &mut problems));
        assert_eq!(namespace(&p, &mut problems).as_deref(), Some("team-a"));
        let state = address("team-a", None, &p, &mut problems).unwrap();
        assert_eq!(
            (state.address.as_str(), state.lock.as_str()),
            ("https://s/tf/team-a", "https://s/tf/team-a/lock")
        );
        assert_eq!(state.from_payload, [true, false, false]);
        let state = address("team-a", Some("https://s/tf/"), &p, &mut problems).unwrap();
        assert_eq!(
            (state.address.as_str(), state.from_payload),
            ("https://s/tf/team-a", [false, false, false])
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn refusals_name_the_rule_and_never_credentials() {
        let check = |pairs: &[(&'static str, &str)], base: Option<&str>| {
            let mut problems = Vec::new();
            let p = payload(pairs);
            let ok = check_addresses(&p, &mut problems);
            if let (Some(ns), true) = (namespace(&p, &mut problems), ok) {
                address(&ns, base, &p, &mut problems);
            }
            problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        };
        let e = check(&[("NAMESPACE", "a"), ("TF_HTTP_ADDRESS", "https://s/tf/b")], None);
        assert!(
            e.contains("NAMESPACE \"a\" differs from the last segment of TF_HTTP_ADDRESS"),
            "{e}"
        );
        let e = check(&[("TF_HTTP_ADDRESS", "https://s/other/a")], Some("https://s/tf"));
        assert!(e.contains("is not this node's state address of namespace a"), "{e}");
        let e = check(
            &[
                ("TF_HTTP_ADDRESS", "https://s/tf/a"),
                ("TF_HTTP_LOCK_ADDRESS", "https://s/tf/b/lock"),
            ],
            None,
        );
        assert!(
            e.contains("TF_HTTP_LOCK_ADDRESS \"https://s/tf/b/lock\" is not under the job's state address"),
            "{e}"
        );
        let e = check(
            &[
                ("TF_HTTP_ADDRESS", "https://s/tf/a"),
                ("TF_HTTP_LOCK_ADDRESS", "https://s/tf/ab"),
            ],
            None,
        );
        assert!(
            e.contains("is not under the job's state address"),
            "a prefix of the name is not under it: {e}"
        );
        let e = check(&[("TF_HTTP_ADDRESS", "https://u:hunter2@s/tf/a")], None);
        assert!(
            e.contains("must not carry credentials") && !e.contains("hunter2"),
            "{e}"
        );
        let e = check(&[("NAMESPACE", "a"), ("TF_HTTP_LOCK_ADDRESS", "https://s/x")], None);
        assert!(
            e.contains("TF_HTTP_LOCK_ADDRESS is given but the job has no state address"),
            "{e}"
        );
        let e = check(
            &[
                ("NAMESPACE", "a"),
                ("TF_HTTP_ADDRESS", "https://s/tf/b"),
                ("TF_HTTP_LOCK_ADDRESS", "https://s/tf/b/../a"),
            ],
            None,
        );
        assert!(
            e.contains("TF_HTTP_LOCK_ADDRESS") && e.contains("NAMESPACE \"a\" differs"),
            "every problem at once: {e}"
        );
        let e = check(&[("NAMESPACE", "a"), ("TF_HTTP_ADDRESS", "https://s/")], None);
        assert!(
            e.contains("TF_HTTP_ADDRESS has no path segment to name the namespace \"a\""),
            "{e}"
        );
        let e = check(&[("TF_HTTP_ADDRESS", "https://s/tf/a?token=qtoken")], None);
        assert!(
            e.contains("TF_HTTP_ADDRESS \"https://s/tf/a\" (its query or fragment not shown) is invalid")
                && !e.contains("qtoken"),
            "{e}"
        );
        let e = check(
            &[
                ("NAMESPACE", "a"),
                ("TF_HTTP_ADDRESS", &format!("https://s/tf/{}", "b".repeat(300))),
            ],
            None,
        );
        assert!(
            e.contains(&format!("\"https://s/tf/{}\"...", "b".repeat(115))) && e.len() < 300,
            "a long address is cut: {e}"
        );
        let e = check(&[], None);
        assert!(e.contains("NAMESPACE is required but not set"), "{e}");
        // Positive control: a lock address under the state address passes.
        assert_eq!(
            check(
                &[
                    ("TF_HTTP_ADDRESS", "https://s/tf/a"),
                    ("TF_HTTP_LOCK_ADDRESS", "https://s/tf/a/locks/x")
                ],
                None
            ),
            ""
        );
    }
}
