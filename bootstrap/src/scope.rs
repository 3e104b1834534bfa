//! Windmill's API token scopes, as far as the bootstrap needs them: the grammar a configured
//! scope is checked against, the default scopes of the front-end's token, and which harmless
//! read the scopes must refuse (the proof of step 7).
//!
//! Windmill parses a scope as `domain:action[:resource]`, a run scope as
//! `jobs:run:<kind>[:<paths>]` with comma-separated paths (`backend/windmill-api-auth/src/
//! scopes.rs`, `ScopeDefinition::from_scope_string`), and a scope it cannot parse grants
//! nothing while still making the token a scoped one. So a typo would not widen a token, but it
//! would silently take a right away: the configuration refuses what Windmill would not parse.

/// The longest scope accepted: run scopes list paths, but nothing real comes near this.
pub const MAX_LEN: usize = 256;
/// The most scopes a token is given.
pub const MAX_SCOPES: usize = 64;

/// The front-end's scopes when `token.scopes` is absent or `null`: run the folder's deploy and
/// destroy scripts, read jobs, cancel them (`jobs:write`).
pub fn defaults(folder: &str) -> Vec<String> {
    vec![format!("jobs:run:scripts:f/{folder}/deploy,f/{folder}/destroy"), "jobs:read".to_owned(), "jobs:write".to_owned()]
}

/// What is wrong with `scope`, or `None` when Windmill would parse it as a scope.
pub fn problem(scope: &str) -> Option<String> {
    if scope.chars().count() > MAX_LEN {
        return Some(format!("is {} characters, more than {MAX_LEN}", scope.chars().count()));
    }
    if scope.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("has whitespace or a control character".to_owned());
    }
    let parts: Vec<&str> = scope.split(':').collect();
    let runs = parts.len() >= 3 && parts[0] == "jobs" && parts[1] == "run";
    if !(2..=4).contains(&parts.len()) || (parts.len() == 4 && !runs) {
        return Some("is not domain:action[:resource] (or jobs:run:<kind>[:<paths>])".to_owned());
    }
    if !is_word(parts[0]) || !is_word(parts[1]) {
        return Some("has a domain or action that is not a lower-case word (letters, digits, _)".to_owned());
    }
    if runs && !is_word(parts[2]) {
        return Some("has a run kind that is not a lower-case word (scripts, flows)".to_owned());
    }
    let resources = if runs { parts.get(3) } else { parts.get(2) };
    if resources.is_some_and(|r| r.split(',').any(|item| item.is_empty() || !item.chars().all(|c| c.is_ascii_graphic()))) {
        return Some("has an empty or non-ASCII resource (resources are comma-separated, e.g. f/folder/script or f/folder/*)".to_owned());
    }
    None
}

fn is_word(part: &str) -> bool {
    let mut chars = part.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Harmless read-only calls of a workspace (`/api/w/<id>/` + this), each in a domain of its
/// own: the proof uses the first whose domain no configured scope names.
const PROBES: [(&str, &str); 6] = [
    ("variables", "variables/list"),
    ("users", "users/list"),
    ("resources", "resources/list"),
    ("schedules", "schedules/list"),
    ("groups", "groups/list"),
    ("folders", "folders/list"),
];

/// The read the scopes must refuse: the first of [`PROBES`] whose domain no scope names (a
/// scope naming the domain might cover the read, whatever its action), or `None` when the scopes
/// name every one of them.
pub fn probe(scopes: &[String]) -> Option<&'static str> {
    let named = |domain: &str| scopes.iter().any(|s| s.split(':').next() == Some(domain));
    PROBES.iter().find(|(domain, _)| !named(domain)).map(|(_, path)| *path)
}

/// The domains the probes read, for a message.
pub fn probe_domains() -> Vec<&'static str> {
    PROBES.iter().map(|(domain, _)| *domain).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windmills_scopes_are_accepted() {
        for good in [
            "jobs:read",
            "jobs:write",
            "jobs:run",
            "jobs:run:scripts",
            "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy",
            "jobs:run:scripts:f/fediversity/*",
            "users:read",
            "workspaces:read",
            "scripts:write:f/folder/*",
            "if_jobs:filter_tags:a,b",
        ] {
            assert_eq!(problem(good), None, "{good}");
        }
        for d in defaults("fedi_x") {
            assert_eq!(problem(&d), None, "{d}");
        }
    }

    #[test]
    fn what_windmill_would_not_parse_is_named() {
        for (bad, why) in [
            ("", "is not domain:action"),
            ("*", "is not domain:action"),
            ("jobs", "is not domain:action"),
            ("jobs:read:a:b", "is not domain:action"),
            ("a:b:c:d:e", "is not domain:action"),
            ("jobs: read", "whitespace"),
            ("jobs:read\n", "whitespace or a control"),
            ("jobs:\u{7f}read", "control"),
            ("Jobs:read", "lower-case word"),
            ("jobs:run:Scripts:x", "run kind"),
            ("jobs:run:scripts:", "empty or non-ASCII resource"),
            ("jobs:run:scripts:a,,b", "empty or non-ASCII resource"),
            ("scripts:read:f/\u{e4}/x", "empty or non-ASCII resource"),
        ] {
            let found = problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(found.contains(why), "{bad:?}: {found}");
        }
        let long = format!("jobs:run:scripts:{}", "f/x/y,".repeat(50));
        assert_eq!(problem(&long), Some(format!("is {} characters, more than 256", long.len())));
    }

    #[test]
    fn the_probe_is_a_domain_no_scope_names() {
        assert_eq!(probe(&defaults("fediversity")), Some("variables/list"));
        assert_eq!(probe(&["variables:read".to_owned(), "jobs:read".to_owned()]), Some("users/list"));
        let all: Vec<String> = probe_domains().iter().map(|d| format!("{d}:read")).collect();
        assert_eq!(probe(&all), None);
    }
}
