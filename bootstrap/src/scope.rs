//! Windmill's API token scopes, as far as the bootstrap needs them: the grammar and the words a
//! configured scope is checked against, the scopes refused because they would let the
//! front-end's token run code of its choosing, the default scopes, and the run scope's scripts.
//!
//! Windmill parses a scope as `domain:action[:resource]`, a run scope as
//! `jobs:run:<kind>[:<paths>]` with comma-separated paths (`backend/windmill-api-auth/src/
//! scopes.rs`, `ScopeDefinition::from_scope_string`), and stores whatever it is given. A scope it
//! cannot parse grants nothing while still making the token a scoped one; one it parses with an
//! unknown domain or action makes its route check answer 400 "Invalid scope domain" wherever it
//! is reached, which breaks the token on every route. So a typo would not widen a token, but it
//! would silently break it or take a right away: the configuration refuses both.
//!
//! Why some scopes are refused outright: what the token may queue runs on the worker, which
//! reads every secret of the node. The token belongs to a workspace operator, whom Windmill
//! refuses previews, batches, imports and script writes by role (so `jobs:write`, which its
//! route check gives every POST of `jobs` that is not a run, cancels a job and reaches nothing
//! that runs code: `add_batch_jobs` is the superadmin's, `queue/import` an admin's); but a scope
//! is refused whenever it alone would grant code of the holder's choosing, so that the limit
//! does not rest on the role alone: a bare `jobs:run` runs previews; `scripts:write`,
//! `flows:write` and `apps:write` write code that runs; a run scope without paths, or with a
//! wildcard, covers whatever anyone deploys later.

/// The longest scope accepted: run scopes list paths, but nothing real comes near this.
pub const MAX_LEN: usize = 256;
/// The most scopes a token is given.
pub const MAX_SCOPES: usize = 64;

/// Windmill's scope domains (`ScopeDomain::from_str` of the version matching CE 1.743.0, its
/// aliases left out: they are refused with the name to use instead).
const DOMAINS: &[&str] = &[
    "jobs",
    "scripts",
    "flows",
    "apps",
    "variables",
    "resources",
    "schedules",
    "folders",
    "users",
    "groups",
    "workspaces",
    "http_triggers",
    "websocket_triggers",
    "kafka_triggers",
    "nats_triggers",
    "mqtt_triggers",
    "sqs_triggers",
    "gcp_triggers",
    "postgres_triggers",
    "email_triggers",
    "native_triggers",
    "audit",
    "settings",
    "workers",
    "service_logs",
    "configs",
    "oauth",
    "ai",
    "indexer",
    "teams",
    "git_sync",
    "capture",
    "drafts",
    "favorites",
    "inputs",
    "job_helpers",
    "concurrency_groups",
    "oidc",
    "openapi",
    "acls",
    "raw_apps",
    "agent_workers",
    "mcp",
];
/// Windmill's aliases of domains, and what they stand for.
const ALIASES: &[(&str, &str)] = &[
    ("jobs_u", "jobs"),
    ("apps_u", "apps"),
    ("srch", "indexer"),
    ("github_app", "git_sync"),
];
/// `ScopeAction::from_str`; `delete` is Windmill's other name for `write`.
const ACTIONS: &[&str] = &["read", "write", "delete", "run"];
/// The kinds of `jobs:run:<kind>` (`determine_kind_from_route`).
const RUN_KINDS: &[&str] = &["scripts", "flows"];
/// Windmill's tag filter (`if_jobs:filter_tags:<tags>`): skipped by the route check, it only
/// narrows the worker tags a job may use.
const TAG_FILTER: &str = "if_jobs:filter_tags:";

/// The front-end's scopes when `token.scopes` is absent or `null`: run the folder's deploy and
/// destroy scripts, and `jobs:write`: read jobs (on every version: a run scope reads them only
/// since 1.511) and cancel them.
pub fn defaults(folder: &str) -> Vec<String> {
    vec![
        format!("jobs:run:scripts:f/{folder}/deploy,f/{folder}/destroy"),
        "jobs:write".to_owned(),
    ]
}

/// The scripts the run scopes of `scopes` name (`jobs:run:scripts:<paths>`), in order, each once.
pub fn run_scripts(scopes: &[String]) -> Vec<String> {
    let mut paths: Vec<String> = Vec::new();
    for scope in scopes {
        if let Some(list) = scope.strip_prefix("jobs:run:scripts:") {
            for path in list.split(',') {
                if !paths.iter().any(|p| p == path) {
                    paths.push(path.to_owned());
                }
            }
        }
    }
    paths
}

/// Whether a scope of `scopes` may write in `domain` (`write` or its other name `delete`, or `*`).
pub fn writes(scopes: &[String], domain: &str) -> bool {
    scopes
        .iter()
        .any(|s| s == "*" || parse(s).ok().is_some_and(|p| p.domain == domain && p.action == "write"))
}

/// A scope taken apart, with `delete` read as `write`.
struct Parsed<'a> {
    domain: &'a str,
    action: &'a str,
    kind: Option<&'a str>,
    resources: Option<Vec<&'a str>>,
}

fn parse(scope: &str) -> Result<Parsed<'_>, String> {
    if scope.chars().count() > MAX_LEN {
        return Err(format!("is {} characters, more than {MAX_LEN}", scope.chars().count()));
    }
    if scope.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("has whitespace or a control character".to_owned());
    }
    let parts: Vec<&str> = scope.split(':').collect();
    let runs = parts.len() >= 3 && parts[0] == "jobs" && parts[1] == "run";
    if !(2..=4).contains(&parts.len()) || (parts.len() == 4 && !runs) {
        return Err("is not domain:action[:resource] (or jobs:run:<kind>[:<paths>])".to_owned());
    }
    let (domain, action) = (parts[0], parts[1]);
    if let Some((_, canonical)) = ALIASES.iter().find(|(alias, _)| *alias == domain) {
        return Err(format!(
            "uses {domain}, Windmill's other name for the domain {canonical}: write {canonical}"
        ));
    }
    if !DOMAINS.contains(&domain) {
        return Err(format!(
            "has the domain {domain:?}, which is none of Windmill's ({})",
            DOMAINS.join(", ")
        ));
    }
    if !ACTIONS.contains(&action) {
        return Err(format!(
            "has the action {action:?}, which is none of Windmill's ({})",
            ACTIONS.join(", ")
        ));
    }
    let kind = runs.then(|| parts[2]);
    if kind.is_some_and(|kind| !RUN_KINDS.contains(&kind)) {
        return Err(format!(
            "has a run kind that is none of Windmill's ({})",
            RUN_KINDS.join(", ")
        ));
    }
    let resources = if runs { parts.get(3) } else { parts.get(2) };
    if resources.is_some_and(|r| {
        r.split(',')
            .any(|item| item.is_empty() || !item.chars().all(|c| c.is_ascii_graphic()))
    }) {
        return Err(
            "has an empty or non-ASCII resource (resources are comma-separated, e.g. f/folder/script)".to_owned(),
        );
    }
    let action = if action == "delete" { "write" } else { action };
    Ok(Parsed {
        domain,
        action,
        kind,
        resources: resources.map(|r| r.split(',').collect()),
    })
}

/// What is wrong with `scope`, or `None` when Windmill would parse it and knows its words.
pub fn problem(scope: &str) -> Option<String> {
    if scope.starts_with(TAG_FILTER) {
        return None;
    }
    parse(scope).err()
}

/// Why `scope` would let whoever holds the front-end's token run code of its choosing (or
/// replace the code a deploy runs), or `None`. Judged by domain and action, not resources: the
/// route check ignores resources (a handler narrows only some routes).
pub fn danger(scope: &str) -> Option<String> {
    if scope == "*" {
        return Some(
            "\"*\" is Windmill's scope for everything: previews, script uploads and every other route".to_owned(),
        );
    }
    let Ok(p) = parse(scope) else { return None };
    let owner = "code of the token holder's choosing, run on the worker";
    match (p.domain, p.action) {
        ("jobs", "run") => match (p.kind, p.resources) {
            (None, _) => Some(format!(
                "a run scope without a kind runs previews (code sent with the request): {owner}"
            )),
            (Some(kind), None) => Some(format!(
                "it runs every one of the workspace's {kind}, whoever deploys them: list their paths"
            )),
            (Some(_), Some(paths)) if paths.iter().any(|p| p.contains('*')) => {
                Some("a wildcard path covers whatever anyone deploys there later: list the paths".to_owned())
            }
            _ => None,
        },
        ("scripts", "write") => Some(format!(
            "it creates and replaces scripts, the deploy script included, whose code the next deploy runs: {owner}"
        )),
        ("flows", "write") => Some(format!("it creates flows, whose inline steps are any code: {owner}")),
        ("apps", "write") => Some(format!(
            "it writes apps and runs their components, whose inline scripts are any code: {owner}"
        )),
        _ => None,
    }
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
            "jobs:delete",
            "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy",
            "jobs:run:flows:f/fediversity/flow",
            "users:read",
            "workspaces:read",
            "variables:delete",
            "if_jobs:filter_tags:a,b",
        ] {
            assert_eq!(problem(good), None, "{good}");
            assert_eq!(danger(good), None, "{good}");
        }
        for d in defaults("fedi_x") {
            assert_eq!((problem(&d), danger(&d)), (None, None), "{d}");
        }
    }

    #[test]
    fn what_windmill_would_not_parse_or_know_is_named() {
        for (bad, why) in [
            ("", "is not domain:action"),
            ("jobs", "is not domain:action"),
            ("jobs:read:a:b", "is not domain:action"),
            ("a:b:c:d:e", "is not domain:action"),
            ("jobs: read", "whitespace"),
            ("jobs:read\n", "whitespace or a control"),
            ("jobs:\u{7f}read", "control"),
            (
                "Jobs:read",
                "the domain \"Jobs\", which is none of Windmill's (jobs, scripts",
            ),
            ("varibles:read", "the domain \"varibles\""),
            (
                "jobs:reed",
                "the action \"reed\", which is none of Windmill's (read, write, delete, run)",
            ),
            (
                "jobs_u:run:x",
                "uses jobs_u, Windmill's other name for the domain jobs: write jobs",
            ),
            ("jobs:run:Scripts:x", "run kind"),
            ("jobs:run:scripts:", "empty or non-ASCII resource"),
            ("jobs:run:scripts:a,,b", "empty or non-ASCII resource"),
            ("scripts:read:f/\u{e4}/x", "empty or non-ASCII resource"),
        ] {
            let found = problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(found.contains(why), "{bad:?}: {found}");
        }
        let long = format!("jobs:run:scripts:{}", "f/x/y,".repeat(50));
        assert_eq!(
            problem(&long),
            Some(format!("is {} characters, more than 256", long.len()))
        );
    }

    #[test]
    fn scopes_that_run_code_of_the_holders_choosing_are_named_with_why() {
        for (bad, why) in [
            ("*", "Windmill's scope for everything"),
            ("jobs:run", "previews"),
            ("jobs:run:scripts", "every one of the workspace's scripts"),
            ("jobs:run:flows", "every one of the workspace's flows"),
            ("jobs:run:scripts:*", "wildcard"),
            ("jobs:run:scripts:f/fediversity/deploy,f/fediversity/*", "wildcard"),
            ("scripts:write", "the deploy script included"),
            ("scripts:write:f/other/*", "run on the worker"),
            ("flows:delete", "inline steps"),
            ("apps:write", "components"),
        ] {
            let found = danger(bad).unwrap_or_else(|| panic!("{bad:?} not refused"));
            assert!(found.contains(why), "{bad:?}: {found}");
        }
    }

    #[test]
    fn run_scripts_lists_the_paths_of_run_scopes_once_and_writes_finds_write_scopes() {
        assert_eq!(run_scripts(&defaults("ops")), ["f/ops/deploy", "f/ops/destroy"]);
        let scopes: Vec<String> = [
            "jobs:run:scripts:f/a/b",
            "jobs:run:flows:f/a/c",
            "jobs:run:scripts:f/a/b,f/a/d",
            "variables:delete",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(run_scripts(&scopes), ["f/a/b", "f/a/d"]);
        assert!(writes(&scopes, "variables") && !writes(&scopes, "scripts") && !writes(&defaults("x"), "folders"));
        assert!(writes(&defaults("x"), "jobs"));
    }

    #[test]
    fn the_probe_is_a_domain_no_scope_names() {
        assert_eq!(probe(&defaults("fediversity")), Some("variables/list"));
        assert_eq!(
            probe(&["variables:read".to_owned(), "jobs:read".to_owned()]),
            Some("users/list")
        );
        let all: Vec<String> = probe_domains().iter().map(|d| format!("{d}:read")).collect();
        assert_eq!(probe(&all), None);
    }
}
