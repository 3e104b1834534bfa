//! Scoped API tokens, route by route, as Windmill's `backend/windmill-api-auth/src/scopes.rs`
//! (`check_route_access`, `map_http_method_to_action`, `scope_grants_access`, the version matching
//! CE 1.743.0) decides, and as CE 1.743.0 answered ("Scoped API tokens" of the worker findings).
//!
//! - A token bound to a workspace (`workspace_id`) gets 401 on every global route and on every
//!   other workspace, whatever its scopes (`/api/version` needs no token at all).
//! - The route check comes first, before the handler reads the body: the domain is the first
//!   segment after the workspace (or after `/api`), with Windmill's aliases (`jobs_u` is `jobs`);
//!   the action is `run` for the run routes (`map_http_method_to_action`'s list, matched
//!   anywhere in the path), otherwise `read` for GET and `write` for every other method. So
//!   `jobs:write` reaches `jobs/add_batch_jobs`, `jobs/queue/import` and the cancel route.
//! - `write` covers `read`, and so does `run` (`ScopeAction::includes`: a token that may only run
//!   two scripts reads every job of the workspace, `jobs/list` included).
//! - A run needs a kind: `scripts` for `run/p`, `run/h` and their variants, `flows` for flows,
//!   none for a preview (request-supplied code), which only a bare `jobs:run` covers. The route
//!   check ignores resources: the handler of `run/p/<path>` (before it looks the script up) and of
//!   `run/h/<hash>` (after it found the hash's path) requires `jobs:run:scripts:<path>`.
//! - Scope strings are stored unchecked. One that does not parse (`*`, five parts) grants nothing;
//!   one that parses with an unknown domain, or an unknown action in the route's domain, makes the
//!   check answer 400 `Invalid scope domain` / `Invalid scope action` when it is reached (scopes
//!   are tried in order, so a scope that grants first hides it). `if_jobs:filter_tags:` scopes
//!   are skipped; a token with only those is unscoped.
//!
//! Where versions differ ([`Profile`]): before about 1.6xx a refusal is `Error::NotAuthorized`,
//! 401 `Not authorized: Access denied. Required scope: …` at the route, `Not authorized:
//! Required scope: …` in a handler (source of 1.509 and 1.587, observed on 1.587); later 403
//! `Permission denied: Required scope: …` (observed on 1.743 and 1.788). And 1.509 and 1.587
//! count a preview (`jobs/run/preview`, and by prefix `jobs/run_wait_result/preview`) as a run of
//! kind `scripts`, so a run scope passes their route check (the handler then refuses operators
//! by role, and grants anyone else).
//!
//! [`WindmillFake::set_enforce_scopes`](super::WindmillFake::set_enforce_scopes) turns the scope
//! check off, as on a Windmill before 1.509 (which stores `scopes` and does not enforce them on
//! every route); binding to a workspace is still enforced.

use std::fmt;

use super::TokenRow;
use super::profile::Profile;
use super::reply::{Call, Reply, text};

/// `ScopeDomain::from_str`: the domains and their aliases.
const DOMAINS: &[(&str, &str)] = &[
    ("jobs", "jobs"),
    ("jobs_u", "jobs"),
    ("scripts", "scripts"),
    ("flows", "flows"),
    ("apps", "apps"),
    ("apps_u", "apps"),
    ("variables", "variables"),
    ("resources", "resources"),
    ("schedules", "schedules"),
    ("folders", "folders"),
    ("users", "users"),
    ("groups", "groups"),
    ("workspaces", "workspaces"),
    ("http_triggers", "http_triggers"),
    ("websocket_triggers", "websocket_triggers"),
    ("kafka_triggers", "kafka_triggers"),
    ("nats_triggers", "nats_triggers"),
    ("mqtt_triggers", "mqtt_triggers"),
    ("sqs_triggers", "sqs_triggers"),
    ("gcp_triggers", "gcp_triggers"),
    ("postgres_triggers", "postgres_triggers"),
    ("email_triggers", "email_triggers"),
    ("native_triggers", "native_triggers"),
    ("audit", "audit"),
    ("settings", "settings"),
    ("workers", "workers"),
    ("service_logs", "service_logs"),
    ("configs", "configs"),
    ("oauth", "oauth"),
    ("ai", "ai"),
    ("indexer", "indexer"),
    ("srch", "indexer"),
    ("teams", "teams"),
    ("git_sync", "git_sync"),
    ("github_app", "git_sync"),
    ("capture", "capture"),
    ("drafts", "drafts"),
    ("favorites", "favorites"),
    ("inputs", "inputs"),
    ("job_helpers", "job_helpers"),
    ("concurrency_groups", "concurrency_groups"),
    ("oidc", "oidc"),
    ("openapi", "openapi"),
    ("acls", "acls"),
    ("raw_apps", "raw_apps"),
    ("agent_workers", "agent_workers"),
    ("mcp", "mcp"),
];

/// `RUN_PATH_ACTIONS`: a path containing one of these is a run, whatever the method.
const RUN_PATHS: &[&str] = &[
    "jobs/resume/",
    "jobs/run/batch_rerun_jobs",
    "jobs/run/workflow_as_code",
    "jobs/run/dependencies",
    "jobs/run/flow_dependencies",
    "apps_u/execute_component",
    "jobs/run/p",
    "jobs/run/h",
    "jobs/run_wait_result/p",
    "jobs/run_wait_result/h",
    "jobs/run/preview",
    "jobs/run_and_stream/p",
    "jobs/run_and_stream/h",
    "jobs/run/f",
    "jobs/run_wait_result/f",
    "jobs/restart/f",
    "jobs/flow/resume",
    "jobs/run_and_stream/f",
];
const FLOW_RUNS: &[&str] = &[
    "jobs/run/f",
    "jobs/run_wait_result/f",
    "jobs/run/preview_flow",
    "jobs/restart/f",
    "jobs/flow/resume",
    "jobs/run_and_stream/f",
];
const SCRIPT_RUNS: &[&str] = &[
    "jobs/run/p",
    "jobs/run/h",
    "jobs/run_wait_result/p",
    "jobs/run_wait_result/h",
    "jobs/run_and_stream/p",
    "jobs/run_and_stream/h",
];

fn canonical_domain(domain: &str) -> Option<&'static str> {
    DOMAINS
        .iter()
        .find(|(name, _)| *name == domain)
        .map(|(_, canonical)| *canonical)
}

/// `ScopeAction::from_str`: `delete` is `write`.
fn canonical_action(action: &str) -> Option<&'static str> {
    match action {
        "read" => Some("read"),
        "write" | "delete" => Some("write"),
        "run" => Some("run"),
        _ => None,
    }
}

/// What a route (or a handler) needs of a scoped token.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Needed {
    pub domain: &'static str,
    pub action: &'static str,
    /// `scripts` or `flows` for a run of a deployed runnable; none for a preview.
    pub kind: Option<&'static str>,
    /// The script path a handler requires (`run/p/<path>`, `run/h/<hash>`); the route check has none.
    pub resource: Option<String>,
}

impl Needed {
    /// What the run handlers require: `jobs:run:scripts:<path>`.
    pub fn run_script(path: &str) -> Needed {
        Needed {
            domain: "jobs",
            action: "run",
            kind: Some("scripts"),
            resource: Some(path.to_owned()),
        }
    }
}

impl fmt::Display for Needed {
    /// As Windmill names a missing scope: `jobs:run:scripts:f/x/y`, `jobs:run`, `scripts:write`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.domain, self.action)?;
        if let Some(kind) = self.kind {
            write!(f, ":{kind}")?;
        }
        if let Some(resource) = &self.resource {
            write!(f, ":{resource}")?;
        }
        Ok(())
    }
}

/// One scope of a token, parsed as `ScopeDefinition::from_scope_string` does: `jobs:run:<kind>`
/// only when the domain is literally `jobs`, four parts only for it.
struct Scope<'a> {
    domain: &'a str,
    action: &'a str,
    kind: Option<&'a str>,
    resources: Option<Vec<&'a str>>,
}

fn parse(scope: &str) -> Option<Scope<'_>> {
    let parts: Vec<&str> = scope.split(':').collect();
    let runs = parts.len() >= 3 && parts[0] == "jobs" && parts[1] == "run";
    let (domain, action) = (*parts.first()?, *parts.get(1)?);
    match parts.len() {
        2 => Some(Scope {
            domain,
            action,
            kind: None,
            resources: None,
        }),
        3 if runs => Some(Scope {
            domain,
            action,
            kind: Some(parts[2]),
            resources: None,
        }),
        3 => Some(Scope {
            domain,
            action,
            kind: None,
            resources: Some(parts[2].split(',').collect()),
        }),
        4 if runs => Some(Scope {
            domain,
            action,
            kind: Some(parts[2]),
            resources: Some(parts[3].split(',').collect()),
        }),
        _ => None,
    }
}

/// What the route of `method path` needs on `profile`; `None` for the routes outside the scope
/// system (the version, login and logout).
pub(super) fn needed(method: &str, path: &str, profile: Profile) -> Option<Needed> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (domain, suffix) = match segments.as_slice() {
        ["api", "version"] | ["api", "auth", ..] => return None,
        ["api", "w", _, domain, ..] => (*domain, segments[3..].join("/")),
        ["api", domain, ..] => (*domain, String::new()),
        _ => return None,
    };
    // A route outside every domain: Windmill answers 400 ("Could not extract domain"); the fake
    // serves none.
    let domain = canonical_domain(domain)?;
    let action = if RUN_PATHS.iter().any(|run| path.contains(run)) {
        "run"
    } else if matches!(method, "GET" | "HEAD" | "OPTIONS") {
        "read"
    } else {
        "write"
    };
    let preview = suffix.starts_with("jobs/run/preview") || suffix.starts_with("jobs/run_wait_result/preview");
    let flow = suffix.starts_with("jobs/run/preview_flow") || suffix.starts_with("jobs/run_wait_result/preview_flow");
    let kind = if preview && profile.preview_is_a_script_run() {
        // Their route lists: flows first (`preview_flow`), then scripts (`preview`).
        Some(if flow { "flows" } else { "scripts" })
    } else if preview {
        None
    } else if FLOW_RUNS.iter().any(|p| suffix.starts_with(p)) {
        Some("flows")
    } else if SCRIPT_RUNS.iter().any(|p| suffix.starts_with(p)) {
        Some("scripts")
    } else {
        None
    };
    Some(Needed {
        domain,
        action,
        kind,
        resource: None,
    })
}

/// `scope_grants_access` plus, for a handler's `resource`, `ScopeDefinition::includes`: whether
/// `scope` covers `needed`, or the 400 of a scope Windmill cannot interpret.
fn grants(scope: &Scope, needed: &Needed) -> Result<bool, Reply> {
    let Some(domain) = canonical_domain(scope.domain) else {
        return Err(text(
            400,
            format!("Bad request: Invalid scope domain: {}", scope.domain),
        ));
    };
    if domain != needed.domain {
        return Ok(false);
    }
    let Some(action) = canonical_action(scope.action) else {
        return Err(text(
            400,
            format!("Bad request: Invalid scope action: {}", scope.action),
        ));
    };
    let includes = action == needed.action || (needed.action == "read" && matches!(action, "write" | "run"));
    if !includes {
        return Ok(false);
    }
    if domain == "jobs" && needed.action == "run" {
        match (scope.kind, needed.kind) {
            (None, _) => {}
            (Some(have), Some(want)) if have == want => {}
            _ => return Ok(false),
        }
    }
    Ok(match (&scope.resources, &needed.resource) {
        (_, None) | (None, _) => true,
        (Some(patterns), Some(resource)) => patterns.iter().any(|p| covers(p, resource)),
    })
}

/// A resource pattern: `*`, the path itself, or `<prefix>/*` for what is under the prefix
/// (`resource_matches_pattern`).
fn covers(pattern: &str, resource: &str) -> bool {
    pattern == "*"
        || pattern == resource
        || pattern.strip_suffix("/*").is_some_and(|prefix| {
            resource == prefix || resource.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'))
        })
}

/// Whether the scopes of `token` allow `needed` (no scopes, or only tag filters: everything).
/// `Err` is the 400 of a scope Windmill cannot interpret, reached before one that grants.
pub(super) fn allows(token: &TokenRow, needed: &Needed, enforce: bool) -> Result<bool, Reply> {
    let scopes: Vec<&String> = token
        .scopes
        .iter()
        .flatten()
        .filter(|s| !s.starts_with("if_jobs:filter_tags:"))
        .collect();
    if !enforce || scopes.is_empty() {
        return Ok(true);
    }
    for scope in scopes.into_iter().filter_map(|s| parse(s)) {
        if grants(&scope, needed)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A handler's own check (`check_scopes`): a refusal naming what it requires.
pub(super) fn require(token: &TokenRow, needed: &Needed, enforce: bool, profile: Profile) -> Result<(), Reply> {
    if allows(token, needed, enforce)? {
        Ok(())
    } else if profile.scope_refusals_are_401() {
        Err(text(401, format!("Not authorized: Required scope: {needed}")))
    } else {
        Err(text(403, format!("Permission denied: Required scope: {needed}")))
    }
}

/// The binding and the route check of `token` for `call` (see the module comment).
pub(super) fn check(token: &TokenRow, call: &Call, enforce: bool, profile: Profile) -> Result<(), Reply> {
    if let Some(bound) = &token.workspace_id {
        let segments: Vec<&str> = call.path.trim_start_matches('/').split('/').collect();
        if !matches!(segments.as_slice(), ["api", "w", w, ..] if w == bound) {
            return Err(text(401, "Not authorized: Unauthorized"));
        }
    }
    let Some(needed) = needed(call.method, call.path, profile) else {
        return Ok(());
    };
    if allows(token, &needed, enforce)? {
        Ok(())
    } else if profile.scope_refusals_are_401() {
        Err(text(
            401,
            format!("Not authorized: Access denied. Required scope: {needed}"),
        ))
    } else {
        Err(text(403, format!("Permission denied: Required scope: {needed}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped(scopes: &[&str]) -> TokenRow {
        TokenRow {
            token: "t".repeat(32),
            label: "fediversity".into(),
            email: "admin@windmill.dev".into(),
            super_admin: true,
            scopes: Some(scopes.iter().map(|s| s.to_string()).collect()),
            workspace_id: None,
            expiration: None,
        }
    }

    fn allowed(scopes: &[&str], method: &str, path: &str) -> bool {
        allows(&scoped(scopes), &needed(method, path, Profile::V1_743).unwrap(), true).unwrap()
    }

    #[test]
    fn what_routes_need() {
        let n = |m, p| needed(m, p, Profile::V1_743).unwrap().to_string();
        assert_eq!(n("POST", "/api/w/ws/jobs/run/p/f/a/b"), "jobs:run:scripts");
        assert_eq!(n("POST", "/api/w/ws/jobs/run/h/0123456789abcdef"), "jobs:run:scripts");
        assert_eq!(n("POST", "/api/w/ws/jobs/run/f/f/a/b"), "jobs:run:flows");
        assert_eq!(n("POST", "/api/w/ws/jobs/run/preview"), "jobs:run");
        assert_eq!(n("POST", "/api/w/ws/jobs/run/preview_flow"), "jobs:run");
        assert_eq!(n("POST", "/api/w/ws/jobs/run_wait_result/preview"), "jobs:run");
        assert_eq!(n("POST", "/api/w/ws/jobs/run/dependencies"), "jobs:run");
        assert_eq!(n("POST", "/api/w/ws/jobs/add_batch_jobs/0"), "jobs:write");
        // Not in the run list: the route check of an inline preview is `jobs:write`'s.
        assert_eq!(n("POST", "/api/w/ws/jobs/run_inline/preview"), "jobs:write");
        assert_eq!(n("POST", "/api/w/ws/jobs/queue/import"), "jobs:write");
        assert_eq!(n("POST", "/api/w/ws/jobs_u/queue/cancel/x"), "jobs:write");
        assert_eq!(n("POST", "/api/w/ws/scripts/create"), "scripts:write");
        assert_eq!(n("GET", "/api/w/ws/variables/list"), "variables:read");
        assert_eq!(n("GET", "/api/w/ws/jobs_u/get/x"), "jobs:read");
        assert_eq!(n("POST", "/api/users/tokens/create"), "users:write");
        assert_eq!(n("GET", "/api/settings/global/x"), "settings:read");
        assert_eq!(needed("POST", "/api/auth/logout", Profile::V1_743), None);
        // Before 1.6xx a preview is a run of scripts at the route (the handler refuses operators).
        let old = |m, p| needed(m, p, Profile::V1_587).unwrap().to_string();
        assert_eq!(old("POST", "/api/w/ws/jobs/run/preview"), "jobs:run:scripts");
        assert_eq!(
            old("POST", "/api/w/ws/jobs/run_wait_result/preview"),
            "jobs:run:scripts"
        );
        assert_eq!(old("POST", "/api/w/ws/jobs/run/preview_flow"), "jobs:run:flows");
        assert_eq!(old("POST", "/api/w/ws/jobs/run/dependencies"), "jobs:run");
        assert_eq!(old("POST", "/api/w/ws/jobs/run/dynamic_select"), "jobs:write");
    }

    #[test]
    fn how_scopes_cover_routes() {
        let runs = ["jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy"];
        // The route check ignores resources: the handler checks the path.
        assert!(allowed(&runs, "POST", "/api/w/ws/jobs/run/p/f/fediversity/other"));
        assert!(!allows(&scoped(&runs), &Needed::run_script("f/fediversity/other"), true).unwrap());
        assert!(allows(&scoped(&runs), &Needed::run_script("f/fediversity/destroy"), true).unwrap());
        assert!(!allowed(&runs, "POST", "/api/w/ws/jobs/run/preview"));
        assert!(!allowed(&runs, "POST", "/api/w/ws/jobs/add_batch_jobs/0"));
        assert!(!allowed(&runs, "POST", "/api/w/ws/scripts/create"));
        // Run includes read: every job read of the workspace.
        assert!(allowed(&runs, "GET", "/api/w/ws/jobs/list"));
        assert!(allowed(&runs, "GET", "/api/w/ws/jobs_u/get/x"));
        assert!(
            allows(
                &scoped(&["jobs:run:scripts:f/fediversity/*"]),
                &Needed::run_script("f/fediversity/x"),
                true
            )
            .unwrap()
        );
        assert!(
            !allows(
                &scoped(&["jobs:run:scripts:f/fedi/*"]),
                &Needed::run_script("f/fediversity/x"),
                true
            )
            .unwrap()
        );
        assert!(allowed(&["jobs:run"], "POST", "/api/w/ws/jobs/run/preview"));
        assert!(!allowed(&["jobs:run:flows"], "POST", "/api/w/ws/jobs/run/p/f/a/b"));
        assert!(allowed(&["jobs:write"], "GET", "/api/w/ws/jobs_u/get/x"));
        assert!(allowed(&["jobs:write"], "POST", "/api/w/ws/jobs/add_batch_jobs/3"));
        assert!(
            allowed(&["jobs:delete"], "POST", "/api/w/ws/jobs/queue/import"),
            "delete is write"
        );
        assert!(
            !allowed(&["jobs:write"], "POST", "/api/w/ws/jobs/run/p/f/a/b"),
            "write does not cover run"
        );
        assert!(!allowed(&["jobs:read"], "GET", "/api/w/ws/variables/list"));
        assert!(allowed(&["variables:read"], "GET", "/api/w/ws/variables/list"));
        // A scope that does not parse grants nothing; tag filters alone leave the token unscoped.
        assert!(!allowed(&["jobs", "*"], "GET", "/api/w/ws/jobs_u/get/x"));
        assert!(allowed(&["if_jobs:filter_tags:a"], "POST", "/api/w/ws/scripts/create"));
        // No scopes: the owner's full rights.
        assert!(
            allows(
                &scoped(&[]),
                &needed("POST", "/api/w/ws/scripts/create", Profile::V1_743).unwrap(),
                true
            )
            .unwrap()
        );
        // Not enforced: everything.
        assert!(
            allows(
                &scoped(&runs),
                &needed("POST", "/api/w/ws/scripts/create", Profile::V1_743).unwrap(),
                false
            )
            .unwrap()
        );
    }

    #[test]
    fn an_unknown_domain_or_action_is_a_400_where_it_is_reached() {
        let run = needed("POST", "/api/w/ws/jobs/run/p/f/a/b", Profile::V1_743).unwrap();
        let status =
            |scopes: &[&str], needed: &Needed| allows(&scoped(scopes), needed, true).map_err(|r| r.status().as_u16());
        assert_eq!(status(&["varibles:read", "jobs:run:scripts:f/a/b"], &run), Err(400));
        // A scope that grants first hides it.
        assert_eq!(status(&["jobs:run:scripts:f/a/b", "varibles:read"], &run), Ok(true));
        // An unknown action only in its own domain.
        assert_eq!(status(&["jobs:reed"], &run), Err(400));
        assert_eq!(status(&["variables:reed"], &run), Ok(false));
    }
}
