//! The Windmill fake behaves as real Windmill CE servers do (observed on 1.587.0, 1.743.0 and
//! 1.788.0, and per their server code), for the behaviours the bootstrap's tests lean on: the
//! auth cache that keeps a deleted non-session token working, logout, script hashes that do not
//! tell an absent `parent_hash` from a `null` one, `lock_error_logs` and other script fields,
//! archived workspaces, `tokens/list` by pages, scoped tokens request by request (the table CE
//! 1.743.0 answered a token bound to a workspace with scopes to run two scripts, and what its
//! server code grants `jobs:write` and a run scope); and, by version profile, what differs
//! between versions (a run's lookup before its scope check, locked versions only, 401 or 403
//! refusals, `tokens/list`'s fields, the startup migration of 1.587, who reads and cancels a job
//! by id) and the workspace operator ("Worker 10": added without a password, impersonated, its
//! own scoped token, its role's refusals).

use std::time::Duration;

use fediversity_testkit::http::{self, Reply};
use fediversity_testkit::postgres::{self, ADMIN_EMAIL};
use fediversity_testkit::windmill_fake::{Profile, WindmillFake};
use serde_json::json;

struct Fake {
    _db: postgres::WindmillDb,
    fake: WindmillFake,
}

/// A fake answering as 1.743.0, the version most of the reference's observations are of.
fn fake() -> Fake {
    fake_on(Profile::V1_743)
}

fn fake_on(profile: Profile) -> Fake {
    let db = postgres::cluster().windmill_database();
    let fake = WindmillFake::start_profile(&db.superuser_dsn(), profile);
    Fake { _db: db, fake }
}

impl Fake {
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<serde_json::Value>) -> Reply {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        http::request(
            method,
            &format!("{}{path}", self.fake.url),
            &headers,
            body.map(|b| b.to_string()).as_deref(),
        )
    }

    /// A session of the seed admin (password `changeme`).
    fn session(&self) -> String {
        let reply = self.call(
            "POST",
            "/api/auth/login",
            None,
            Some(json!({"email": ADMIN_EMAIL, "password": "changeme"})),
        );
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body
    }

    fn mint(&self, session: &str, label: &str) -> String {
        let reply = self.call(
            "POST",
            "/api/users/tokens/create",
            Some(session),
            Some(json!({"label": label})),
        );
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.body
    }

    fn works(&self, token: &str) -> bool {
        self.call("GET", "/api/users/whoami", Some(token), None).status == 200
    }

    fn delete(&self, session: &str, token: &str) -> Reply {
        self.call(
            "DELETE",
            &format!("/api/users/tokens/delete/{}", &token[..10]),
            Some(session),
            None,
        )
    }
}

#[test]
fn a_deleted_token_that_was_used_keeps_working_from_the_auth_cache_a_session_does_not() {
    let f = fake();
    let session = f.session();
    let used = f.mint(&session, "fediversity");
    let unused = f.mint(&session, "fediversity");
    assert!(f.works(&used));

    let reply = f.delete(&session, &used);
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (
            200,
            format!(
                "deleted 1 tokens [\"{}*****\"] with prefix {}",
                &used[..10],
                &used[..10]
            )
            .as_str()
        )
    );
    assert!(f.delete(&session, &unused).status == 200);
    // Gone from the table and from tokens/list...
    assert!(!f.fake.has_token(&used) && !f.fake.has_token(&unused));
    let listed = f.call("GET", "/api/users/tokens/list", Some(&session), None).json();
    assert!(
        listed.as_array().unwrap().iter().all(|t| t["label"] == "session"),
        "{listed}"
    );
    // ...but the token that was used still authenticates (cached), the unused one never was.
    assert!(f.works(&used));
    assert!(!f.works(&unused));
    // A shorter cache lifetime (the test clock) ends it.
    f.fake.set_auth_cache_ttl(Duration::ZERO);
    assert!(!f.works(&used));

    // A session is invalidated at once, even when cached.
    f.fake
        .set_auth_cache_ttl(fediversity_testkit::windmill_fake::AUTH_CACHE_TTL);
    let other = f.session();
    assert!(f.works(&other));
    assert_eq!(f.delete(&session, &other).status, 200);
    assert!(!f.works(&other));
}

#[test]
fn logout_deletes_the_callers_token_whatever_its_label() {
    let f = fake();
    let session = f.session();
    let token = f.mint(&session, "fediversity");
    assert!(f.works(&token));

    let reply = f.call("POST", "/api/auth/logout", Some(&session), None);
    assert_eq!((reply.status, reply.body.as_str()), (200, "logged out successfully"));
    assert!(!f.fake.has_token(&session));
    assert!(!f.works(&session), "a session stops at once");

    let reply = f.call("POST", "/api/auth/logout", Some(&token), None);
    assert_eq!(reply.status, 200);
    assert!(!f.fake.has_token(&token));
    // Positive control of the cache: the non-session token it deleted still works for now.
    assert!(f.works(&token));
    assert_eq!(f.call("POST", "/api/auth/logout", None, None).status, 401);
}

#[test]
fn an_absent_and_a_null_parent_hash_are_the_same_request() {
    let f = fake();
    let session = f.session();
    assert_eq!(
        f.call(
            "POST",
            "/api/workspaces/create",
            Some(&session),
            Some(json!({"id": "fediversity", "name": "fediversity"}))
        )
        .status,
        200
    );
    let script = |parent: Option<serde_json::Value>, content: &str| {
        let mut body = json!({"path": "f/fediversity/x", "summary": "x", "description": "", "content": content, "language": "python3"});
        if let Some(parent) = parent {
            body["parent_hash"] = parent;
        }
        f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(body))
    };
    let first = script(None, "print(1)\n");
    assert_eq!(first.status, 201, "{}", first.body);
    let again = script(Some(serde_json::Value::Null), "print(1)\n");
    assert_eq!(again.status, 400);
    assert!(again.body.contains("A script with same hash"), "{}", again.body);
    // Control: the same request with a parent is another request, a new version.
    let child = script(Some(json!(first.body)), "print(1)\n");
    assert_eq!(child.status, 201, "{}", child.body);
    assert_ne!(child.body, first.body);
}

#[test]
fn lock_error_logs_of_the_head_are_answered_by_get_p() {
    let f = fake();
    let session = f.session();
    assert_eq!(
        f.call(
            "POST",
            "/api/workspaces/create",
            Some(&session),
            Some(json!({"id": "fediversity", "name": "fediversity"}))
        )
        .status,
        200
    );
    let body = json!({"path": "f/fediversity/x", "summary": "x", "description": "", "content": "import nothing\n", "language": "python3"});
    assert_eq!(
        f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(body))
            .status,
        201
    );
    let get = || {
        f.call(
            "GET",
            "/api/w/fediversity/scripts/get/p/f/fediversity/x",
            Some(&session),
            None,
        )
        .json()
    };
    assert_eq!(get()["lock_error_logs"], serde_json::Value::Null);
    f.fake.set_lock_error(
        "fediversity",
        "f/fediversity/x",
        Some("ERROR: No matching distribution found for nothing"),
    );
    assert_eq!(
        get()["lock_error_logs"],
        "ERROR: No matching distribution found for nothing"
    );
    f.fake.set_lock_error("fediversity", "f/fediversity/x", None);
    assert_eq!(get()["lock_error_logs"], serde_json::Value::Null);
}

#[test]
fn the_next_token_can_be_chosen() {
    let f = fake();
    let session = f.session();
    f.fake.next_token("not\"a;windmill-token");
    assert_eq!(f.mint(&session, "fediversity"), "not\"a;windmill-token");
    assert!(f.fake.ever_minted().contains(&"not\"a;windmill-token".to_owned()));
    // Then random 32-character tokens again.
    let next = f.mint(&session, "fediversity");
    assert_eq!(next.len(), 32);
    assert!(next.chars().all(|c| c.is_ascii_alphanumeric()));
}

// ---- scoped tokens, request by request (CE 1.743.0, observed with curl) ----------------------

/// The scopes the front-end's token gets, for the folder `fediversity`.
const FRONT_END_SCOPES: [&str; 3] = [
    "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy",
    "jobs:read",
    "jobs:write",
];

/// A fake with the workspace `fediversity` and three scripts, and an admin session.
fn workspace_with_scripts() -> (Fake, String) {
    workspace_with_scripts_on(fake())
}

/// `f` with the workspace `fediversity` and the scripts `f/fediversity/deploy`, `destroy` and
/// `other` (python3, locked by the fake's worker unless it has none).
fn workspace_with_scripts_on(f: Fake) -> (Fake, String) {
    let session = f.session();
    assert_eq!(
        f.call(
            "POST",
            "/api/workspaces/create",
            Some(&session),
            Some(json!({"id": "fediversity", "name": "fediversity"}))
        )
        .status,
        200
    );
    for name in ["deploy", "destroy", "other"] {
        let body = json!({"path": format!("f/fediversity/{name}"), "summary": name, "description": "", "content": "def main():\n    pass\n", "language": "python3"});
        assert_eq!(
            f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(body))
                .status,
            201
        );
    }
    (f, session)
}

impl Fake {
    fn mint_with(&self, session: &str, body: serde_json::Value) -> String {
        let reply = self.call("POST", "/api/users/tokens/create", Some(session), Some(body));
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.body
    }

    /// Status and body of a request, a JSON body `{}` for every POST.
    fn answer(&self, method: &str, path: &str, token: &str) -> (u16, String) {
        let body = match (method, path) {
            ("POST", p) if p.ends_with("/preview") => {
                Some(json!({"content": "def main():\n    return 1\n", "language": "python3", "args": {}}))
            }
            ("POST", "/api/w/fediversity/scripts/create") => Some(
                json!({"path": "f/fediversity/deploy", "summary": "x", "description": "", "content": "print('replaced')\n", "language": "python3"}),
            ),
            ("POST", "/api/users/tokens/create") => Some(json!({"label": "x"})),
            ("POST", p) if p.starts_with("/api/settings/") => Some(json!({"value": "3.12"})),
            ("POST", _) => Some(json!({})),
            _ => None,
        };
        let reply = self.call(method, path, Some(token), body);
        (reply.status, reply.body)
    }
}

/// Each request a scoped token is refused, with what Windmill answers it.
const REFUSED: [(&str, &str, u16, &str); 10] = [
    (
        "POST",
        "/api/w/fediversity/jobs/run/p/f/fediversity/other",
        403,
        "Permission denied: Required scope: jobs:run:scripts:f/fediversity/other",
    ),
    (
        "POST",
        "/api/w/fediversity/jobs/run/preview",
        403,
        "Permission denied: Required scope: jobs:run",
    ),
    (
        "POST",
        "/api/w/fediversity/jobs/run_wait_result/preview",
        403,
        "Permission denied: Required scope: jobs:run",
    ),
    (
        "POST",
        "/api/w/fediversity/scripts/create",
        403,
        "Permission denied: Required scope: scripts:write",
    ),
    (
        "GET",
        "/api/w/fediversity/users/list",
        403,
        "Permission denied: Required scope: users:read",
    ),
    (
        "GET",
        "/api/w/fediversity/variables/list",
        403,
        "Permission denied: Required scope: variables:read",
    ),
    ("POST", "/api/users/tokens/create", 401, "Not authorized: Unauthorized"),
    (
        "GET",
        "/api/settings/global/instance_python_version",
        401,
        "Not authorized: Unauthorized",
    ),
    ("GET", "/api/users/whoami", 401, "Not authorized: Unauthorized"),
    (
        "GET",
        "/api/w/second/variables/list",
        401,
        "Not authorized: Unauthorized",
    ),
];

#[test]
fn a_scoped_token_bound_to_the_workspace_runs_the_two_scripts_and_is_refused_the_rest() {
    let (f, session) = workspace_with_scripts();
    assert_eq!(
        f.call(
            "POST",
            "/api/workspaces/create",
            Some(&session),
            Some(json!({"id": "second", "name": "second"}))
        )
        .status,
        200
    );
    let token = f.mint_with(
        &session,
        json!({"label": "fediversity", "scopes": FRONT_END_SCOPES, "workspace_id": "fediversity"}),
    );

    // The two scripts run: 201 with the job id, the job created by the token's label.
    for script in ["deploy", "destroy"] {
        let (status, id) = f.answer(
            "POST",
            &format!("/api/w/fediversity/jobs/run/p/f/fediversity/{script}"),
            &token,
        );
        assert_eq!(status, 201, "{id}");
        let job = f
            .fake
            .jobs()
            .into_iter()
            .find(|j| j.id == id)
            .expect("the job was queued");
        assert_eq!(
            (job.created_by.as_str(), job.script_path.as_deref()),
            ("label-fediversity", Some(format!("f/fediversity/{script}").as_str()))
        );
        // Read and cancelled with `jobs:read` and `jobs:write`.
        let (status, body) = f.answer("GET", &format!("/api/w/fediversity/jobs_u/get/{id}"), &token);
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap()["created_by"],
            "label-fediversity"
        );
        assert_eq!(
            f.answer("POST", &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}"), &token),
            (200, id.clone())
        );
        assert!(f.fake.jobs().iter().any(|j| j.id == id && j.canceled));
    }
    // Everything else: refused, as the table records; nothing was run or written.
    let jobs = f.fake.jobs().len();
    for (method, path, status, body) in REFUSED {
        assert_eq!(
            f.answer(method, path, &token),
            (status, body.to_owned()),
            "{method} {path}"
        );
    }
    assert_eq!(f.fake.jobs().len(), jobs);
    assert_eq!(f.fake.versions("fediversity", "f/fediversity/deploy").len(), 1);
    // `/api/version` needs no token.
    assert_eq!(f.call("GET", "/api/version", Some(&token), None).status, 200);

    // Positive control: the admin's unscoped session is refused none of them.
    for (method, path, _, _) in REFUSED {
        let (status, body) = f.answer(method, path, &session);
        assert!(![401, 403].contains(&status), "{method} {path}: {status} {body}");
    }
    assert_eq!(
        f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/other", &session)
            .0,
        201
    );
    let preview = f
        .fake
        .jobs()
        .into_iter()
        .find(|j| j.kind == "preview")
        .expect("the session's preview was queued");
    assert_eq!(preview.created_by, "admin");
}

#[test]
fn cancelling_with_jobs_read_alone_is_a_400() {
    let (f, session) = workspace_with_scripts();
    let runner = f.mint_with(&session, json!({"label": "runner", "scopes": ["jobs:run:scripts:f/fediversity/deploy", "jobs:read"], "workspace_id": "fediversity"}));
    let (status, id) = f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &runner);
    assert_eq!(status, 201);
    assert_eq!(
        f.answer("GET", &format!("/api/w/fediversity/jobs_u/get/{id}"), &runner)
            .0,
        200
    );
    let (status, body) = f.answer("POST", &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}"), &runner);
    assert_eq!(status, 400);
    assert_eq!(
        body,
        "Bad request: You are not logged in and this job was not created by an anonymous user like you so you cannot cancel it"
    );
    assert!(f.fake.jobs().iter().all(|j| !j.canceled));
    // The route needs `jobs:write`: any token that lacks it is an anonymous caller there.
    let other = f.mint_with(&session, json!({"label": "other", "scopes": ["variables:read"]}));
    assert_eq!(
        f.answer("POST", &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}"), &other)
            .0,
        400
    );
    // Positive control: with `jobs:write` it cancels, any job of the workspace.
    let writer = f.mint_with(&session, json!({"label": "writer", "scopes": ["jobs:write"]}));
    assert_eq!(
        f.answer("POST", &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}"), &writer),
        (200, id.clone())
    );
    assert!(f.fake.jobs().iter().any(|j| j.id == id && j.canceled));
}

#[test]
fn an_unbound_scoped_token_reaches_global_routes_only_through_a_scope() {
    let (f, session) = workspace_with_scripts();
    let jobs_only = f.mint_with(&session, json!({"label": "cli", "scopes": FRONT_END_SCOPES}));
    let with_users = f.mint_with(
        &session,
        json!({"label": "cli", "scopes": [FRONT_END_SCOPES[0], "users:read"]}),
    );
    assert_eq!(
        f.answer("GET", "/api/users/whoami", &jobs_only),
        (403, "Permission denied: Required scope: users:read".to_owned())
    );
    assert_eq!(f.answer("GET", "/api/users/whoami", &with_users).0, 200);
    // Unbound, it works in any workspace its scopes cover.
    assert_eq!(
        f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &jobs_only)
            .0,
        201
    );
    // `users:read` does not cover writing users.
    assert_eq!(
        f.answer("POST", "/api/users/tokens/create", &with_users),
        (403, "Permission denied: Required scope: users:write".to_owned())
    );
}

#[test]
fn a_folder_wildcard_covers_every_script_of_the_folder_and_no_other_folder() {
    let (f, session) = workspace_with_scripts();
    let folder = f.mint_with(
        &session,
        json!({"label": "folder", "scopes": ["jobs:run:scripts:f/fediversity/*"], "workspace_id": "fediversity"}),
    );
    let prefix = f.mint_with(
        &session,
        json!({"label": "prefix", "scopes": ["jobs:run:scripts:f/fedi/*"], "workspace_id": "fediversity"}),
    );
    assert_eq!(
        f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/other", &folder)
            .0,
        201
    );
    assert_eq!(
        f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/other", &prefix)
            .0,
        403
    );
    // A kind covers runs of deployed scripts only, never a preview.
    assert_eq!(f.answer("POST", "/api/w/fediversity/jobs/run/preview", &folder).0, 403);
}

#[test]
fn token_list_shows_scopes_and_workspace_and_a_token_without_scopes_has_full_rights() {
    let (f, session) = workspace_with_scripts();
    let empty = f.mint_with(&session, json!({"label": "empty", "scopes": []}));
    f.mint_with(
        &session,
        json!({"label": "scoped", "scopes": FRONT_END_SCOPES, "workspace_id": "fediversity"}),
    );
    let listed = f.call("GET", "/api/users/tokens/list", Some(&session), None).json();
    let row = |label: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["label"] == label)
            .unwrap()
            .clone()
    };
    assert_eq!(
        (row("scoped")["scopes"].clone(), row("scoped")["workspace_id"].clone()),
        (json!(FRONT_END_SCOPES), json!("fediversity"))
    );
    assert_eq!(
        (row("empty")["scopes"].clone(), row("empty")["workspace_id"].clone()),
        (json!([]), json!(null))
    );
    assert_eq!(row("session")["scopes"], json!(null));
    assert_eq!(f.answer("GET", "/api/w/fediversity/variables/list", &empty).0, 200);
    assert_eq!(f.answer("POST", "/api/w/fediversity/jobs/run/preview", &empty).0, 201);
}

#[test]
fn a_server_that_does_not_enforce_scopes_grants_every_route_but_keeps_the_binding() {
    let (f, session) = workspace_with_scripts();
    let token = f.mint_with(
        &session,
        json!({"label": "fediversity", "scopes": FRONT_END_SCOPES, "workspace_id": "fediversity"}),
    );
    f.fake.set_version("CE v1.500.2");
    f.fake.set_enforce_scopes(false);
    assert_eq!(f.call("GET", "/api/version", None, None).body, "CE v1.500.2");
    assert_eq!(
        f.answer("GET", "/api/w/fediversity/variables/list", &token),
        (200, "[]".to_owned())
    );
    assert_eq!(f.answer("POST", "/api/w/fediversity/jobs/run/preview", &token).0, 201);
    assert_eq!(f.answer("GET", "/api/users/whoami", &token).0, 401);
    // Control: enforced again, refused again.
    f.fake.set_enforce_scopes(true);
    assert_eq!(f.answer("GET", "/api/w/fediversity/variables/list", &token).0, 403);
}

// ---- what `jobs:write` grants, and what a run scope alone reads (server code) ---------------

/// The routes the bootstrap's step 7 proves a front-end token is refused, each with the body it
/// sends (one that would do nothing even where it were granted).
const PROOF: [(&str, &str, &str); 4] = [
    ("POST", "/api/w/fediversity/jobs/run/preview", "{}"),
    ("POST", "/api/w/fediversity/scripts/create", "{}"),
    ("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/probe_a1b2c3", "{}"),
    ("POST", "/api/w/fediversity/jobs/add_batch_jobs/0", r#"{"kind":"noop"}"#),
];

impl Fake {
    fn post(&self, path: &str, token: &str, body: serde_json::Value) -> (u16, String) {
        let reply = self.call("POST", path, Some(token), Some(body));
        (reply.status, reply.body)
    }
}

#[test]
fn jobs_write_queues_code_of_the_requests_choosing_for_a_superadmin_owned_token() {
    let (f, session) = workspace_with_scripts();
    let writer = f.mint_with(
        &session,
        json!({"label": "writer", "scopes": ["jobs:write"], "workspace_id": "fediversity"}),
    );
    // `add_batch_jobs` with an inline flow: code the request chose, run as the token's owner.
    let flow = json!({"modules": [{"id": "a", "value": {"type": "rawscript", "language": "python3", "content": "import os\ndef main():\n    return os.environ\n"}}]});
    let (status, body) = f.post(
        "/api/w/fediversity/jobs/add_batch_jobs/2",
        &writer,
        json!({"kind": "flow", "flow_value": flow}),
    );
    assert_eq!(status, 200, "{body}");
    let ids: Vec<String> = serde_json::from_str(&body).unwrap();
    assert_eq!(ids.len(), 2);
    let queued: Vec<_> = f.fake.jobs().into_iter().filter(|j| ids.contains(&j.id)).collect();
    assert!(
        queued
            .iter()
            .all(|j| j.raw_code.as_deref().is_some_and(|c| c.contains("os.environ")) && j.permissioned_as == "u/admin")
    );
    // `queue/import`: a job with any code and any rights.
    let job = json!([{"id": "0190aaaa-0000-4000-a000-000000000001", "kind": "preview", "raw_code": "print('mine')", "created_by": "nobody", "permissioned_as": "u/admin"}]);
    assert_eq!(
        f.post("/api/w/fediversity/jobs/queue/import", &writer, job),
        (200, "Successfully imported jobs".to_owned())
    );
    assert!(
        f.fake
            .jobs()
            .iter()
            .any(|j| j.raw_code.as_deref() == Some("print('mine')") && j.permissioned_as == "u/admin")
    );
    // n = 0 queues nothing, even where granted.
    let before = f.fake.jobs().len();
    assert_eq!(
        f.post(
            "/api/w/fediversity/jobs/add_batch_jobs/0",
            &writer,
            json!({"kind": "noop"})
        ),
        (200, "[]".to_owned())
    );
    assert_eq!(f.fake.jobs().len(), before);
    // But `jobs:write` runs nothing by path: that is `run`.
    assert_eq!(
        f.post("/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &writer, json!({}))
            .0,
        403
    );
}

#[test]
fn a_run_scope_alone_runs_its_scripts_reads_every_job_and_is_refused_the_proof_with_403() {
    let (f, session) = workspace_with_scripts();
    let runner = f.mint_with(&session, json!({"label": "fediversity", "scopes": ["jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy"], "workspace_id": "fediversity"}));
    let (status, id) = f.post("/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &runner, json!({}));
    assert_eq!(status, 201, "{id}");
    // By hash: the handler finds the path, then requires the run scope of that path.
    let hash = |name: &str| {
        f.fake.versions("fediversity", &format!("f/fediversity/{name}"))[0]
            .hash
            .clone()
    };
    assert_eq!(
        f.post(
            &format!("/api/w/fediversity/jobs/run/h/{}", hash("destroy")),
            &runner,
            json!({})
        )
        .0,
        201
    );
    assert_eq!(
        f.post(
            &format!("/api/w/fediversity/jobs/run/h/{}", hash("other")),
            &runner,
            json!({})
        ),
        (
            403,
            "Permission denied: Required scope: jobs:run:scripts:f/fediversity/other".to_owned()
        )
    );
    // `run` includes `read`: its jobs, and every other job of the workspace.
    let others = f
        .post(
            "/api/w/fediversity/jobs/run/p/f/fediversity/other",
            &session,
            json!({"password": "theirs"}),
        )
        .1;
    assert_eq!(
        f.answer("GET", &format!("/api/w/fediversity/jobs_u/get/{id}"), &runner)
            .0,
        200
    );
    let (status, listed) = f.answer("GET", "/api/w/fediversity/jobs/list", &runner);
    assert_eq!(status, 200);
    assert!(listed.contains(&others) && listed.contains("theirs"), "{listed}");
    // It cannot cancel (that is `jobs:write`).
    assert_eq!(
        f.answer("POST", &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}"), &runner)
            .0,
        400
    );
    // The proof's routes: 403 each, checked before the body is read; nothing queued or written.
    let jobs = f.fake.jobs().len();
    for (method, path, body) in PROOF {
        let reply = f.call(method, path, Some(&runner), Some(serde_json::from_str(body).unwrap()));
        assert_eq!(reply.status, 403, "{method} {path}: {}", reply.body);
        assert!(
            reply.body.starts_with("Permission denied: Required scope: "),
            "{}",
            reply.body
        );
    }
    assert_eq!(f.fake.jobs().len(), jobs);
    // Positive control: the admin's session gets through each route to its body: a 422 for an
    // empty preview or script, a 404 for a script that is not there, no job for n = 0.
    let through: Vec<u16> = PROOF
        .iter()
        .map(|(m, p, b)| {
            f.call(m, p, Some(&session), Some(serde_json::from_str(b).unwrap()))
                .status
        })
        .collect();
    assert_eq!(through, vec![422, 422, 404, 200]);
    assert_eq!(f.fake.jobs().len(), jobs);
}

#[test]
fn an_unknown_scope_domain_or_action_is_stored_and_makes_the_route_check_a_400() {
    let (f, session) = workspace_with_scripts();
    let run = "jobs:run:scripts:f/fediversity/deploy";
    let typo = f.mint_with(
        &session,
        json!({"label": "typo", "scopes": ["varibles:read", run], "workspace_id": "fediversity"}),
    );
    let listed = f.call("GET", "/api/users/tokens/list", Some(&session), None).json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["scopes"] == json!(["varibles:read", run])),
        "stored as given: {listed}"
    );
    assert_eq!(
        f.post("/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &typo, json!({})),
        (400, "Bad request: Invalid scope domain: varibles".to_owned())
    );
    let action = f.mint_with(&session, json!({"label": "typo", "scopes": ["jobs:reed", run]}));
    assert_eq!(
        f.answer("GET", "/api/w/fediversity/jobs/list", &action),
        (400, "Bad request: Invalid scope action: reed".to_owned())
    );
    // Control: the scope that grants, first, is reached before the typo.
    let first = f.mint_with(&session, json!({"label": "typo", "scopes": [run, "varibles:read"]}));
    assert_eq!(
        f.post("/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &first, json!({}))
            .0,
        201
    );
}

#[test]
fn tokens_list_answers_the_callers_tokens_newest_first_by_pages() {
    let f = fake();
    let session = f.session();
    let inserted = f.fake.insert_tokens("many", 1100);
    let page = |query: &str| -> Vec<String> {
        let listed = f
            .call("GET", &format!("/api/users/tokens/list{query}"), Some(&session), None)
            .json();
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["token_prefix"].as_str().unwrap().to_owned())
            .collect()
    };
    // The default page is 1000; a page is at most 10000; newest first (the session is the oldest).
    assert_eq!(page("").len(), 1000);
    let first = page("?page=1&per_page=1000&exclude_ephemeral=true");
    assert_eq!(first.len(), 1000);
    assert_eq!(first[0], inserted[1099][..10]);
    assert_eq!(page("?page=1&per_page=5000").len(), 1101);
    assert_eq!(page("?page=1&per_page=50").len(), 50);
    let second = page("?page=2&per_page=1000");
    assert_eq!(second.len(), 101);
    assert_eq!(
        (&second[99], &second[100]),
        (&inserted[0][..10].to_owned(), &session[..10].to_owned())
    );
    assert!(page("?page=3&per_page=1000").is_empty());
    // `exclude_ephemeral=true` leaves out the tokens of jobs.
    f.fake.insert_tokens("ephemeral-script", 3);
    assert_eq!(page("?page=2&per_page=1000&exclude_ephemeral=true").len(), 101);
    assert_eq!(page("?page=2&per_page=1000").len(), 104);
}

#[test]
fn an_archived_workspace_exists_is_read_as_deleted_and_unarchived() {
    let (f, session) = workspace_with_scripts();
    let get = || {
        f.call(
            "GET",
            "/api/w/fediversity/workspaces/get_as_superadmin",
            Some(&session),
            None,
        )
        .json()
    };
    assert_eq!(get()["deleted"], json!(false));
    f.fake.archive_workspace("fediversity");
    assert_eq!(
        f.call(
            "POST",
            "/api/workspaces/exists",
            Some(&session),
            Some(json!({"id": "fediversity"}))
        )
        .json(),
        json!(true)
    );
    assert_eq!(get()["deleted"], json!(true));
    let reply = f.call(
        "POST",
        "/api/workspaces/unarchive/fediversity",
        Some(&session),
        Some(json!({})),
    );
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, "Unarchived workspace fediversity")
    );
    assert_eq!(get()["deleted"], json!(false));
    assert_eq!(
        f.call(
            "GET",
            "/api/w/nowhere/workspaces/get_as_superadmin",
            Some(&session),
            None
        )
        .status,
        404
    );
}

#[test]
fn get_p_answers_the_runtime_settings_and_lock_a_writer_gave() {
    let f = fake();
    // No worker: the versions keep the lock they were created with.
    f.fake.set_worker(None);
    let (f, session) = workspace_with_scripts_on(f);
    let head = f.fake.versions("fediversity", "f/fediversity/deploy")[0].hash.clone();
    let get = || {
        f.call(
            "GET",
            "/api/w/fediversity/scripts/get/p/f/fediversity/deploy",
            Some(&session),
            None,
        )
        .json()
    };
    // Control: the bootstrap's kind of version has none of them (no `lock` key while it is NULL).
    let plain = get();
    assert_eq!(
        (plain["tag"].clone(), plain.get("lock"), plain.get("envs")),
        (json!(null), None, None)
    );
    let body = json!({"path": "f/fediversity/deploy", "parent_hash": head, "summary": "deploy", "description": "", "content": "def main():\n    pass\n",
        "language": "python3", "tag": "other-worker", "envs": ["SECRET=x"], "timeout": 5, "on_behalf_of_email": "someone@example.org",
        "lock": "# py: 3.12\nevil==1.0\n"});
    assert_eq!(
        f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(body))
            .status,
        201
    );
    let changed = get();
    assert_eq!(changed["tag"], "other-worker");
    assert_eq!(changed["envs"], json!(["SECRET=x"]));
    assert_eq!(changed["timeout"], 5);
    assert_eq!(changed["on_behalf_of_email"], "someone@example.org");
    assert_eq!(changed["lock"], "# py: 3.12\nevil==1.0\n");
    // A dependency job's lock (as the worker writes it).
    f.fake.set_lock("fediversity", "f/fediversity/destroy", "# py: 3.12\n");
    let destroy = f
        .call(
            "GET",
            "/api/w/fediversity/scripts/get/p/f/fediversity/destroy",
            Some(&session),
            None,
        )
        .json();
    assert_eq!(destroy["lock"], "# py: 3.12\n");
}

// ---- version profiles and the workspace operator ("Worker 10"; see the fake's `profile`) --------

/// A fake of `profile` with the workspace, the scripts of [`workspace_with_scripts_on`], a bash
/// script outside the folder (`u/admin/outside`), and the operator `frontend@fediversity.invalid`
/// with read on the folder: the superadmin's session, the operator's impersonation token (its full
/// rights) and its token scoped as the bootstrap mints it.
fn with_operator(profile: Profile) -> (Fake, String, String, String) {
    let (f, session) = workspace_with_scripts_on(fake_on(profile));
    let post = |path: &str, token: &str, body: serde_json::Value| f.call("POST", path, Some(token), Some(body));
    let folder = post(
        "/api/w/fediversity/folders/create",
        &session,
        json!({"name": "fediversity"}),
    );
    assert_eq!(folder.status, 200, "{}", folder.body);
    let outside =
        json!({"path": "u/admin/outside", "summary": "", "description": "", "content": "exit 0\n", "language": "bash"});
    assert_eq!(post("/api/w/fediversity/scripts/create", &session, outside).status, 201);
    let added = post(
        "/api/w/fediversity/workspaces/add_user",
        &session,
        json!({"email": "frontend@fediversity.invalid", "is_admin": false, "operator": true}),
    );
    assert_eq!(
        (added.status, added.body.as_str()),
        (201, "user with email frontend@fediversity.invalid added")
    );
    let acl = post(
        "/api/w/fediversity/acls/add/folder/fediversity",
        &session,
        json!({"owner": "u/frontend", "write": false}),
    );
    assert_eq!(
        (acl.status, acl.body.as_str()),
        (200, "Successfully modified granular acl")
    );
    let impersonation = post(
        "/api/users/tokens/impersonate",
        &session,
        json!({"impersonate_email": "frontend@fediversity.invalid", "label": "x"}),
    );
    assert_eq!(impersonation.status, 201);
    let scoped = post(
        "/api/users/tokens/create",
        &impersonation.body,
        json!({"label": "fediversity", "scopes": ["jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy", "jobs:write"], "workspace_id": "fediversity"}),
    );
    assert_eq!(scoped.status, 201, "{}", scoped.body);
    (f, session, impersonation.body, scoped.body)
}

#[test]
fn every_profile_answers_get_version_as_its_version() {
    for profile in Profile::ALL {
        let f = fake_on(profile);
        assert_eq!(f.call("GET", "/api/version", None, None).body, profile.version());
    }
}

#[test]
fn a_run_looks_the_script_up_before_its_scope_check_but_on_1_743() {
    for profile in Profile::ALL {
        let (f, _, _, scoped) = with_operator(profile);
        let (status, body) = f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/missing", &scoped);
        let refusal = if profile.scope_refusals_are_401() { 401 } else { 403 };
        if profile == Profile::V1_743 {
            // observed: the scope first.
            assert_eq!(status, 403, "{profile}: {body}");
        } else {
            assert_eq!(
                (status, body.as_str()),
                (404, "Not found: script not found at name f/fediversity/missing"),
                "{profile}"
            );
        }
        // An existing script outside the scopes: refused by them on every version.
        let (status, body) = f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/other", &scoped);
        assert_eq!(status, refusal, "{profile}: {body}");
        assert!(
            body.ends_with("Required scope: jobs:run:scripts:f/fediversity/other"),
            "{body}"
        );
    }
}

#[test]
fn a_new_version_runs_only_once_a_worker_locked_it_on_every_profile() {
    for profile in Profile::ALL {
        let f = fake_on(profile);
        f.fake.set_worker(None);
        let (f, session) = workspace_with_scripts_on(f);
        assert_eq!(
            f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &session),
            (
                404,
                "Not found: script not found at name f/fediversity/deploy".to_owned()
            ),
            "{profile}"
        );
        let head = || {
            f.call(
                "GET",
                "/api/w/fediversity/scripts/get/p/f/fediversity/deploy",
                Some(&session),
                None,
            )
            .json()
        };
        assert_eq!(head().get("lock"), None);
        // The worker locks it: then it runs.
        f.fake.set_worker(Some(Duration::ZERO));
        assert_eq!(head()["lock"], "# py: 3.12\n");
        assert_eq!(
            f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &session)
                .0,
            201,
            "{profile}"
        );
        // A new version that is not locked yet: the previous one still runs.
        f.fake.set_worker(None);
        let parent = head()["hash"].as_str().unwrap().to_owned();
        let v2 = json!({"path": "f/fediversity/deploy", "parent_hash": parent, "summary": "deploy", "description": "", "content": "def main():\n    return 2\n", "language": "python3"});
        assert_eq!(
            f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(v2))
                .status,
            201
        );
        assert_eq!(head().get("lock"), None);
        assert_eq!(
            f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &session)
                .0,
            201
        );
        // A failed dependency job: that version never runs.
        f.fake.fail_next_lock("f/fediversity/destroy");
        let parent = f.fake.versions("fediversity", "f/fediversity/destroy")[0].hash.clone();
        let v2 = json!({"path": "f/fediversity/destroy", "parent_hash": parent, "summary": "destroy", "description": "", "content": "def main():\n    return 2\n", "language": "python3"});
        assert_eq!(
            f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(v2))
                .status,
            201
        );
        f.fake.set_worker(Some(Duration::ZERO));
        let destroy = f
            .call(
                "GET",
                "/api/w/fediversity/scripts/get/p/f/fediversity/destroy",
                Some(&session),
                None,
            )
            .json();
        assert!(
            destroy["lock_error_logs"].as_str().is_some_and(|l| !l.is_empty()),
            "{destroy}"
        );
    }
}

#[test]
fn a_fresh_1_509_or_1_587_refuses_job_submissions_until_it_migrated_its_job_tables() {
    for profile in [Profile::V1_509, Profile::V1_587] {
        let (f, session) = workspace_with_scripts_on(fake_on(profile));
        f.fake.start_migrating(Duration::from_secs(600));
        let python = json!({"path": "f/fediversity/new", "summary": "", "description": "", "content": "def main():\n    pass\n", "language": "python3"});
        let reply = f.call(
            "POST",
            "/api/w/fediversity/scripts/create",
            Some(&session),
            Some(python.clone()),
        );
        assert_eq!(reply.status, 400, "{profile}");
        assert!(
            reply.body.starts_with(
                "SqlErr: error returned from database: null value in column \"__job_kind\" of relation \"v2_job_queue\""
            ),
            "{}",
            reply.body
        );
        assert!(
            f.fake.versions("fediversity", "f/fediversity/new").is_empty(),
            "nothing created"
        );
        assert_eq!(
            f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/deploy", &session)
                .0,
            400
        );
        // A bash script queues no dependency job: created meanwhile.
        let bash = json!({"path": "f/fediversity/b", "summary": "", "description": "", "content": "exit 0\n", "language": "bash"});
        assert_eq!(
            f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(bash))
                .status,
            201
        );
        f.fake.finish_migrating();
        assert_eq!(
            f.call(
                "POST",
                "/api/w/fediversity/scripts/create",
                Some(&session),
                Some(python)
            )
            .status,
            201
        );
    }
}

#[test]
fn token_list_rows_carry_the_binding_from_1_743_only() {
    for profile in Profile::ALL {
        let (f, session, _, _) = with_operator(profile);
        let listed = f.call("GET", "/api/users/tokens/list", Some(&session), None).json();
        let row = &listed[0];
        assert_eq!(
            row.get("workspace_id").is_some(),
            profile.lists_token_workspace(),
            "{profile}"
        );
        assert_eq!(
            row.get("read_only").is_some(),
            profile.lists_token_workspace(),
            "{profile}"
        );
    }
}

#[test]
fn the_operator_is_added_without_a_password_and_a_username_only_where_none_is_derived() {
    let (f, session) = workspace_with_scripts();
    let add = |body: serde_json::Value| {
        f.call(
            "POST",
            "/api/w/fediversity/workspaces/add_user",
            Some(&session),
            Some(body),
        )
    };
    assert_eq!(
        add(json!({"email": "a@x.invalid", "operator": true, "is_admin": false, "username": "a"})).body,
        "Bad request: username is not allowed when username creation is automated"
    );
    assert_eq!(
        add(json!({"email": "A@x.invalid", "operator": true, "is_admin": false})).status,
        201
    );
    assert_eq!(
        add(json!({"email": "a@x.invalid", "operator": true, "is_admin": false})).body,
        "Bad request: user with email a@x.invalid already exists in workspace fediversity"
    );
    // Derived from the email, made unique.
    assert_eq!(
        add(json!({"email": "a@y.invalid", "operator": true, "is_admin": false})).status,
        201
    );
    let users: Vec<String> = f.fake.users("fediversity").into_iter().map(|u| u.username).collect();
    assert_eq!(users, ["a", "a1"]);
    f.fake.set_automate_usernames(false);
    assert_eq!(
        add(json!({"email": "b@x.invalid", "operator": true, "is_admin": false})).body,
        "Bad request: username is required"
    );
    assert_eq!(
        add(json!({"email": "b@x.invalid", "operator": true, "is_admin": false, "username": "bee"})).status,
        201
    );
}

#[test]
fn impersonation_is_the_superadmins_and_gives_a_token_of_the_users_full_rights() {
    for profile in Profile::ALL {
        let (f, _, unscoped, scoped) = with_operator(profile);
        // Only a superadmin impersonates.
        let again = f.call(
            "POST",
            "/api/users/tokens/impersonate",
            Some(&unscoped),
            Some(json!({"impersonate_email": "admin@windmill.dev", "label": "x"})),
        );
        assert_eq!(again.status, 401, "{profile}");
        // The operator's own token: no scopes, no workspace.
        let row = f.fake.tokens().into_iter().find(|t| t.token == unscoped).unwrap();
        assert_eq!((row.scopes, row.workspace_id, row.super_admin), (None, None, false));
        let whoami = f
            .call("GET", "/api/w/fediversity/users/whoami", Some(&unscoped), None)
            .json();
        assert_eq!(
            (whoami["operator"].clone(), whoami["is_admin"].clone()),
            (json!(true), json!(false))
        );
        // It lists and deletes its own tokens only.
        let listed = f.call("GET", "/api/users/tokens/list", Some(&unscoped), None).json();
        assert_eq!(listed.as_array().unwrap().len(), 2);
        assert_eq!(f.delete(&unscoped, &scoped).status, 200);
        assert!(!f.fake.has_token(&scoped));
    }
}

/// What the operator's unscoped token (its full rights) is refused, and how ("Worker 10", U).
const OPERATOR_REFUSED: [(&str, &str, u16, &str); 9] = [
    (
        "POST",
        "/api/w/fediversity/jobs/run/preview",
        401,
        "Not authorized: Operators cannot run preview jobs for security reasons",
    ),
    (
        "POST",
        "/api/w/fediversity/jobs/run/preview_flow",
        401,
        "Not authorized: Operators cannot run preview jobs for security reasons",
    ),
    (
        "POST",
        "/api/w/fediversity/jobs/run/dynamic_select",
        401,
        "Not authorized: Operators cannot run preview jobs for security reasons",
    ),
    (
        "POST",
        "/api/w/fediversity/jobs/add_batch_jobs/0",
        401,
        "Not authorized: This endpoint requires the caller to be a super admin",
    ),
    (
        "POST",
        "/api/w/fediversity/scripts/create",
        401,
        "Not authorized: Operators cannot create scripts for security reasons",
    ),
    (
        "POST",
        "/api/w/fediversity/flows/create",
        401,
        "Not authorized: Operators cannot create flows for security reasons",
    ),
    (
        "POST",
        "/api/w/fediversity/variables/create",
        401,
        "Not authorized: You do not have write permission on this path",
    ),
    (
        "POST",
        "/api/w/fediversity/acls/add/folder/fediversity",
        401,
        "Not authorized: You are not owner of the folder fediversity",
    ),
    (
        "GET",
        "/api/settings/global/instance_python_version",
        401,
        "Not authorized: This endpoint requires the caller to be a super admin",
    ),
];

fn operator_body(path: &str) -> Option<serde_json::Value> {
    Some(match path {
        p if p.ends_with("/preview") => json!({"content": "exit 0\n", "language": "bash"}),
        p if p.ends_with("/preview_flow") => json!({"value": {"modules": []}}),
        p if p.ends_with("/dynamic_select") => {
            json!({"runnable_ref": {"source": "inline", "code": "x"}, "entrypoint_function": "main"})
        }
        p if p.contains("/add_batch_jobs/") => json!({"kind": "noop"}),
        p if p.ends_with("/flows/create") => json!({"path": "f/fediversity/fl", "value": {"modules": []}}),
        p if p.ends_with("/variables/create") => json!({"path": "f/fediversity/v"}),
        p if p.contains("/acls/") => json!({"owner": "u/frontend", "write": true}),
        p if p.ends_with("/scripts/create") => {
            json!({"path": "f/fediversity/mine", "summary": "", "description": "", "content": "x", "language": "python3"})
        }
        _ => return None,
    })
}

#[test]
fn the_operator_is_refused_what_runs_code_of_its_choosing_by_its_role() {
    for profile in Profile::ALL {
        let (f, session, unscoped, _) = with_operator(profile);
        for (method, path, status, text) in OPERATOR_REFUSED {
            if path.ends_with("/dynamic_select") && !profile.has_dynamic_select() {
                continue;
            }
            let reply = f.call(method, path, Some(&unscoped), operator_body(path));
            assert_eq!(
                (reply.status, reply.body.as_str()),
                (status, text),
                "{profile} {method} {path}"
            );
        }
        if profile.has_job_import_and_delete() {
            let reply = f.call(
                "POST",
                "/api/w/fediversity/jobs/queue/import",
                Some(&unscoped),
                Some(json!([])),
            );
            assert_eq!(
                (reply.status, reply.body.as_str()),
                (403, "Require Admin privileges for frontend")
            );
        } else {
            let reply = f.call(
                "POST",
                "/api/w/fediversity/jobs/queue/import",
                Some(&unscoped),
                Some(json!([])),
            );
            assert_eq!((reply.status, reply.body.as_str()), (404, ""), "{profile}: not a route");
        }
        // What it may: run a script of its folder (any, unscoped), read users, mint for itself.
        assert_eq!(
            f.answer("POST", "/api/w/fediversity/jobs/run/p/f/fediversity/other", &unscoped)
                .0,
            201
        );
        let (status, body) = f.answer("POST", "/api/w/fediversity/jobs/run/p/u/admin/outside", &unscoped);
        assert_eq!(status, 401, "{body}");
        assert!(
            body.starts_with("Not authorized: You are not authorized to access this script"),
            "{body}"
        );
        assert_eq!(
            f.call("GET", "/api/w/fediversity/users/list", Some(&unscoped), None)
                .status,
            200
        );
        // Positive control: the superadmin is refused none of it.
        for (method, path, _, _) in OPERATOR_REFUSED {
            let reply = f.call(method, path, Some(&session), operator_body(path));
            assert!(
                ![401, 403].contains(&reply.status),
                "{profile} {method} {path}: {}",
                reply.body
            );
        }
    }
}

#[test]
fn the_operators_scoped_token_reads_and_cancels_its_jobs_and_others_as_its_version_lets_it() {
    for profile in Profile::ALL {
        let (f, session, _, scoped) = with_operator(profile);
        let later = "?scheduled_in_secs=3155760000";
        let (status, id) = f.answer(
            "POST",
            &format!("/api/w/fediversity/jobs/run/p/f/fediversity/deploy{later}"),
            &scoped,
        );
        assert_eq!(status, 201, "{profile}: {id}");
        let job = f.fake.jobs().into_iter().find(|j| j.id == id).unwrap();
        assert_eq!(job.permissioned_as, "u/frontend");
        assert_eq!(job.scheduled_in_secs, Some(3_155_760_000));
        let created_by = if profile.created_by_is_the_user() {
            "frontend"
        } else {
            "label-fediversity"
        };
        assert_eq!(job.created_by, created_by, "{profile}");
        let read = f
            .call(
                "GET",
                &format!("/api/w/fediversity/jobs_u/get/{id}"),
                Some(&scoped),
                None,
            )
            .json();
        assert_eq!(
            (read["type"].clone(), read["canceled"].clone()),
            (json!("QueuedJob"), json!(false))
        );
        assert_eq!(
            f.answer("POST", &format!("/api/w/fediversity/jobs_u/queue/cancel/{id}"), &scoped),
            (200, id.clone())
        );
        let read = f
            .call(
                "GET",
                &format!("/api/w/fediversity/jobs_u/get/{id}"),
                Some(&scoped),
                None,
            )
            .json();
        assert_eq!(
            (
                read["type"].clone(),
                read["canceled"].clone(),
                read["canceled_by"].clone()
            ),
            (json!("CompletedJob"), json!(true), json!("frontend"))
        );
        // A job of the superadmin's outside the folder: read and cancelled by id before 1.715 and
        // 1.772; refused after.
        let theirs = f
            .answer(
                "POST",
                &format!("/api/w/fediversity/jobs/run/p/u/admin/outside{later}"),
                &session,
            )
            .1;
        let read = f
            .answer("GET", &format!("/api/w/fediversity/jobs_u/get/{theirs}"), &scoped)
            .0;
        assert_eq!(read, if profile.checks_job_reads() { 403 } else { 200 }, "{profile}");
        let cancel = f
            .answer(
                "POST",
                &format!("/api/w/fediversity/jobs_u/queue/cancel/{theirs}"),
                &scoped,
            )
            .0;
        assert_eq!(
            cancel,
            if profile.checks_job_cancels() { 403 } else { 200 },
            "{profile}"
        );
        // jobs/list: the jobs it may see, on every version.
        let listed = f.call("GET", "/api/w/fediversity/jobs/list", Some(&scoped), None).body;
        assert!(listed.contains(&id) && !listed.contains(&theirs), "{profile}: {listed}");
        // Deleting jobs: an admin's.
        assert_eq!(
            f.answer(
                "POST",
                &format!("/api/w/fediversity/jobs/completed/delete/{id}"),
                &scoped
            )
            .0,
            403
        );
    }
}

#[test]
fn a_1_509_or_1_587_lets_a_run_scope_through_the_route_check_of_a_preview() {
    for profile in Profile::ALL {
        let (f, session) = workspace_with_scripts_on(fake_on(profile));
        // A superadmin-owned token scoped to run one script: what the front-end had before.
        let runner = f.mint_with(
            &session,
            json!({"label": "old", "scopes": ["jobs:run:scripts:f/fediversity/deploy"], "workspace_id": "fediversity"}),
        );
        let (status, body) = f.answer("POST", "/api/w/fediversity/jobs/run/preview", &runner);
        if profile.preview_is_a_script_run() {
            // Granted: a preview, code of the request's choosing, as the superadmin.
            assert_eq!(status, 201, "{profile}: {body}");
        } else {
            assert_eq!(status, 403, "{profile}: {body}");
        }
    }
}

#[test]
fn an_inline_preview_is_reached_with_jobs_write_and_refused_to_operators_where_it_exists() {
    let preview = json!({"content": "SELECT 1", "language": "duckdb", "args": {}});
    for profile in Profile::ALL {
        let (f, session, unscoped, scoped) = with_operator(profile);
        let call = |token: &str| {
            let reply = f.call(
                "POST",
                "/api/w/fediversity/jobs/run_inline/preview",
                Some(token),
                Some(preview.clone()),
            );
            (reply.status, reply.body)
        };
        if !profile.has_inline_preview() {
            // Before 1.590 there is no such route.
            assert_eq!(call(&scoped), (404, String::new()), "{profile}");
            continue;
        }
        // Its route check is `jobs:write`'s (not a run's): the scoped token passes it, and the
        // handler refuses the operator, as it refuses its unscoped token.
        let refused = (
            401,
            "Not authorized: Operators cannot run preview jobs for security reasons".to_owned(),
        );
        assert_eq!(call(&scoped), refused, "{profile}");
        assert_eq!(call(&unscoped), refused, "{profile}");
        // A superadmin's token scoped to jobs:write passes the route and the role, and is refused
        // by the handler's own scope check.
        let writer = f.mint_with(&session, json!({"label": "w", "scopes": ["jobs:write"]}));
        assert_eq!(
            call(&writer),
            (403, "Permission denied: Required scope: jobs:run".to_owned()),
            "{profile}"
        );
        // Positive control: the superadmin's own token is refused none of it.
        assert!(![401, 403].contains(&call(&session).0), "{profile}");
    }
}

#[test]
fn a_run_scope_runs_every_version_of_its_paths_by_hash_the_replaced_ones_included() {
    // `run_job_by_hash` reads the hash's row whatever the version (archived too), then requires
    // the run scope of its path: a scope names a path, not a version.
    for profile in Profile::ALL {
        let (f, _, _, scoped) = with_operator(profile);
        let first = f.fake.versions("fediversity", "f/fediversity/deploy")[0].hash.clone();
        f.fake.push_version(
            "fediversity",
            "f/fediversity/deploy",
            "def main():\n    return 'replaced'\n",
            "deploy",
        );
        let versions = f.fake.versions("fediversity", "f/fediversity/deploy");
        assert_eq!(versions.len(), 2);
        assert_ne!(versions.last().unwrap().hash, first);
        let (status, id) = f.post(&format!("/api/w/fediversity/jobs/run/h/{first}"), &scoped, json!({}));
        assert_eq!(status, 201, "{profile}: {id}");
        // Positive control: the scope still refuses a version of another path.
        let other = f.fake.versions("fediversity", "f/fediversity/other")[0].hash.clone();
        let status = f
            .post(&format!("/api/w/fediversity/jobs/run/h/{other}"), &scoped, json!({}))
            .0;
        assert!([401, 403].contains(&status), "{profile}: {status}");
    }
}
