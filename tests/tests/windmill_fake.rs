//! The Windmill fake behaves as a real Windmill CE server does (observed on 1.743.0, and per its
//! server code), for the behaviours the bootstrap's tests lean on: the auth cache that keeps a
//! deleted non-session token working, logout, script hashes that do not tell an absent
//! `parent_hash` from a `null` one, `lock_error_logs`.

use std::time::Duration;

use fediversity_testkit::http::{self, Reply};
use fediversity_testkit::postgres::{self, ADMIN_EMAIL};
use fediversity_testkit::windmill_fake::WindmillFake;
use serde_json::json;

struct Fake {
    _db: postgres::WindmillDb,
    fake: WindmillFake,
}

fn fake() -> Fake {
    let db = postgres::cluster().windmill_database();
    let fake = WindmillFake::start(&db.superuser_dsn());
    Fake { _db: db, fake }
}

impl Fake {
    fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<serde_json::Value>) -> Reply {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
        http::request(method, &format!("{}{path}", self.fake.url), &headers, body.map(|b| b.to_string()).as_deref())
    }

    /// A session of the seed admin (password `changeme`).
    fn session(&self) -> String {
        let reply = self.call("POST", "/api/auth/login", None, Some(json!({"email": ADMIN_EMAIL, "password": "changeme"})));
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.body
    }

    fn mint(&self, session: &str, label: &str) -> String {
        let reply = self.call("POST", "/api/users/tokens/create", Some(session), Some(json!({"label": label})));
        assert_eq!(reply.status, 201, "{}", reply.body);
        reply.body
    }

    fn works(&self, token: &str) -> bool {
        self.call("GET", "/api/users/whoami", Some(token), None).status == 200
    }

    fn delete(&self, session: &str, token: &str) -> Reply {
        self.call("DELETE", &format!("/api/users/tokens/delete/{}", &token[..10]), Some(session), None)
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
    assert_eq!((reply.status, reply.body.as_str()), (200, format!("deleted 1 tokens [\"{}*****\"] with prefix {}", &used[..10], &used[..10]).as_str()));
    assert!(f.delete(&session, &unused).status == 200);
    // Gone from the table and from tokens/list...
    assert!(!f.fake.has_token(&used) && !f.fake.has_token(&unused));
    let listed = f.call("GET", "/api/users/tokens/list", Some(&session), None).json();
    assert!(listed.as_array().unwrap().iter().all(|t| t["label"] == "session"), "{listed}");
    // ...but the token that was used still authenticates (cached), the unused one never was.
    assert!(f.works(&used));
    assert!(!f.works(&unused));
    // A shorter cache lifetime (the test clock) ends it.
    f.fake.set_auth_cache_ttl(Duration::ZERO);
    assert!(!f.works(&used));

    // A session is invalidated at once, even when cached.
    f.fake.set_auth_cache_ttl(fediversity_testkit::windmill_fake::AUTH_CACHE_TTL);
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
    assert_eq!(f.call("POST", "/api/workspaces/create", Some(&session), Some(json!({"id": "fediversity", "name": "fediversity"}))).status, 200);
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
    assert_eq!(f.call("POST", "/api/workspaces/create", Some(&session), Some(json!({"id": "fediversity", "name": "fediversity"}))).status, 200);
    let body = json!({"path": "f/fediversity/x", "summary": "x", "description": "", "content": "import nothing\n", "language": "python3"});
    assert_eq!(f.call("POST", "/api/w/fediversity/scripts/create", Some(&session), Some(body)).status, 201);
    let get = || f.call("GET", "/api/w/fediversity/scripts/get/p/f/fediversity/x", Some(&session), None).json();
    assert_eq!(get()["lock_error_logs"], serde_json::Value::Null);
    f.fake.set_lock_error("fediversity", "f/fediversity/x", Some("ERROR: No matching distribution found for nothing"));
    assert_eq!(get()["lock_error_logs"], "ERROR: No matching distribution found for nothing");
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
