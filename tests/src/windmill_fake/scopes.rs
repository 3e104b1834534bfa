//! Scoped API tokens, request by request, as CE 1.743.0 answered them ("Scoped API tokens" of the
//! worker findings; Windmill's `backend/windmill-api-auth/src/scopes.rs`, `check_route_access`,
//! for the grammar and how a scope covers a route).
//!
//! - A token bound to a workspace (`workspace_id`) gets 401 on every global route and on every
//!   other workspace, whatever its scopes (`/api/version` needs no token at all).
//! - A token with scopes gets 403 `Permission denied: Required scope: <scope>` on a route no
//!   scope covers; an empty list or none means the owner's full rights.
//! - Scopes are `domain:action[:resource]`, and for runs `jobs:run:<kind>:<paths>` with
//!   comma-separated paths, a `/*` suffix matching a folder. `write` covers `read`; `jobs:run`
//!   without a kind covers every run, previews (arbitrary code) included, and a kind covers only
//!   runs of a deployed script, never a preview.
//! - The route decides what is needed: the domain is the first segment after the workspace
//!   (`jobs_u` is `jobs`) or after `/api`; runs are `run`, other reads `read`, other methods
//!   `write`. Cancelling a job passes the route with `jobs:read` (CE 1.743.0 let such a token
//!   through to the handler, which refused it with a 400: see `jobs.rs`).
//!
//! [`WindmillFake::set_enforce_scopes`](super::WindmillFake::set_enforce_scopes) turns the scope
//! check off, as on a Windmill before 1.509 (which stores `scopes` and does not enforce them on
//! every route); binding to a workspace is still enforced.

use std::fmt;

use super::TokenRow;
use super::reply::{Call, Reply, text};

/// What a route needs of a scoped token.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Needed {
    pub domain: String,
    pub action: &'static str,
    /// `scripts` for the run of a deployed script; none for a preview.
    pub kind: Option<&'static str>,
    /// The script path of a run.
    pub resource: Option<String>,
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

/// One scope of a token, parsed as Windmill parses it (`ScopeDefinition::from_scope_string`).
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
        2 => Some(Scope { domain, action, kind: None, resources: None }),
        3 if runs => Some(Scope { domain, action, kind: Some(parts[2]), resources: None }),
        3 => Some(Scope { domain, action, kind: None, resources: Some(parts[2].split(',').collect()) }),
        4 if runs => Some(Scope { domain, action, kind: Some(parts[2]), resources: Some(parts[3].split(',').collect()) }),
        _ => None,
    }
}

/// What the route of `method path` needs; `None` for the routes outside the scope system (the
/// version, login and logout).
pub(super) fn needed(method: &str, path: &str) -> Option<Needed> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (domain, suffix) = match segments.as_slice() {
        ["api", "version"] | ["api", "auth", ..] => return None,
        ["api", "w", _, domain, ..] => (*domain, segments[3..].join("/")),
        ["api", domain, ..] => (*domain, segments[1..].join("/")),
        _ => return None,
    };
    let domain = if domain == "jobs_u" { "jobs" } else { domain }.to_owned();
    let run_of_script = ["jobs/run/p/", "jobs/run/h/", "jobs/run_wait_result/p/", "jobs/run_wait_result/h/"]
        .iter()
        .find_map(|prefix| suffix.strip_prefix(prefix));
    if let Some(path) = run_of_script {
        return Some(Needed { domain, action: "run", kind: Some("scripts"), resource: Some(path.to_owned()) });
    }
    if suffix.starts_with("jobs/run/preview") || suffix.starts_with("jobs/run_wait_result/preview") {
        return Some(Needed { domain, action: "run", kind: None, resource: None });
    }
    let action = match method {
        _ if suffix.starts_with("jobs_u/queue/cancel/") => "read",
        "GET" | "HEAD" | "OPTIONS" => "read",
        _ => "write",
    };
    Some(Needed { domain, action, kind: None, resource: None })
}

/// Whether `scope` covers `needed`.
fn grants(scope: &Scope, needed: &Needed) -> bool {
    if scope.domain != needed.domain || !(scope.action == needed.action || (scope.action == "write" && needed.action == "read")) {
        return false;
    }
    if needed.domain == "jobs" && needed.action == "run" {
        match (scope.kind, needed.kind) {
            (None, _) => return true,
            (Some(have), Some(want)) if have == want => {}
            _ => return false,
        }
    }
    match (&scope.resources, &needed.resource) {
        (None, _) => true,
        (Some(patterns), Some(resource)) => patterns.iter().any(|p| covers(p, resource)),
        (Some(_), None) => false,
    }
}

/// A resource pattern: the path itself, or `<folder>/*` for what is under it.
fn covers(pattern: &str, resource: &str) -> bool {
    pattern == "*"
        || pattern == resource
        || pattern.strip_suffix("/*").is_some_and(|folder| resource == folder || resource.strip_prefix(folder).is_some_and(|r| r.starts_with('/')))
}

/// Whether the scopes of `token` allow `needed` (a token without scopes allows everything).
pub(super) fn allows(token: &TokenRow, needed: &Needed, enforce: bool) -> bool {
    let scopes = token.scopes.as_deref().unwrap_or_default();
    !enforce || scopes.is_empty() || scopes.iter().filter_map(|s| parse(s)).any(|scope| grants(&scope, needed))
}

/// The binding and the scopes of `token` against the route of `call`.
pub(super) fn check(token: &TokenRow, call: &Call, enforce: bool) -> Result<(), Reply> {
    if let Some(bound) = &token.workspace_id {
        let segments: Vec<&str> = call.path.trim_start_matches('/').split('/').collect();
        if !matches!(segments.as_slice(), ["api", "w", w, ..] if w == bound) {
            return Err(text(401, "Not authorized: Unauthorized"));
        }
    }
    match needed(call.method, call.path) {
        Some(needed) if !allows(token, &needed, enforce) => Err(text(403, format!("Permission denied: Required scope: {needed}"))),
        _ => Ok(()),
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
        }
    }

    fn allowed(scopes: &[&str], method: &str, path: &str) -> bool {
        allows(&scoped(scopes), &needed(method, path).unwrap(), true)
    }

    #[test]
    fn what_routes_need() {
        let n = |m, p| needed(m, p).unwrap().to_string();
        assert_eq!(n("POST", "/api/w/ws/jobs/run/p/f/a/b"), "jobs:run:scripts:f/a/b");
        assert_eq!(n("POST", "/api/w/ws/jobs/run/preview"), "jobs:run");
        assert_eq!(n("POST", "/api/w/ws/jobs/run_wait_result/preview"), "jobs:run");
        assert_eq!(n("POST", "/api/w/ws/scripts/create"), "scripts:write");
        assert_eq!(n("GET", "/api/w/ws/variables/list"), "variables:read");
        assert_eq!(n("GET", "/api/w/ws/jobs_u/get/x"), "jobs:read");
        assert_eq!(n("POST", "/api/users/tokens/create"), "users:write");
        assert_eq!(n("GET", "/api/settings/global/x"), "settings:read");
        assert_eq!(needed("POST", "/api/auth/logout"), None);
    }

    #[test]
    fn how_scopes_cover_routes() {
        let runs = ["jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy"];
        assert!(allowed(&runs, "POST", "/api/w/ws/jobs/run/p/f/fediversity/deploy"));
        assert!(allowed(&runs, "POST", "/api/w/ws/jobs/run/p/f/fediversity/destroy"));
        assert!(!allowed(&runs, "POST", "/api/w/ws/jobs/run/p/f/fediversity/other"));
        assert!(!allowed(&runs, "POST", "/api/w/ws/jobs/run/preview"));
        assert!(allowed(&["jobs:run:scripts:f/fediversity/*"], "POST", "/api/w/ws/jobs/run/p/f/fediversity/x"));
        assert!(!allowed(&["jobs:run:scripts:f/fedi/*"], "POST", "/api/w/ws/jobs/run/p/f/fediversity/x"));
        assert!(allowed(&["jobs:run"], "POST", "/api/w/ws/jobs/run/preview"));
        assert!(!allowed(&["jobs:run:flows"], "POST", "/api/w/ws/jobs/run/p/f/a/b"));
        assert!(allowed(&["jobs:write"], "GET", "/api/w/ws/jobs_u/get/x"));
        assert!(!allowed(&["jobs:write"], "POST", "/api/w/ws/jobs/run/p/f/a/b"), "write does not cover run");
        assert!(!allowed(&["jobs:read"], "GET", "/api/w/ws/variables/list"));
        assert!(allowed(&["variables:read"], "GET", "/api/w/ws/variables/list"));
        // A scope that does not parse grants nothing.
        assert!(!allowed(&["jobs"], "GET", "/api/w/ws/jobs_u/get/x"));
        // No scopes: the owner's full rights.
        assert!(allows(&scoped(&[]), &needed("POST", "/api/w/ws/scripts/create").unwrap(), true));
        // Not enforced: everything.
        assert!(allows(&scoped(&runs), &needed("POST", "/api/w/ws/scripts/create").unwrap(), false));
    }
}
