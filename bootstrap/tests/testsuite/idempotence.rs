//! A second run on a converged node creates nothing and rewrites nothing (asserted from the
//! requests the fake recorded); it mints both tokens again and deletes the older ones of each
//! label.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::http;
use fediversity_testkit::postgres::ADMIN_EMAIL;
use serde_json::json;

use crate::support;

#[test]
fn a_second_run_writes_nothing_but_a_new_token() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let first = node.include_token().unwrap();
    let first_front = support::stored_token(&node).unwrap();
    let hash = node.db.password_hash(ADMIN_EMAIL);
    let ino = node.include_meta().unwrap().ino();
    // A token of another label, made with the first token: it must survive the revocation.
    let other = http::request(
        "POST",
        &format!("{}/api/users/tokens/create", node.windmill.url),
        &[("Authorization", &format!("Bearer {first}"))],
        Some(r#"{"label":"someone-else"}"#),
    );
    assert_eq!(other.status, 201);

    // Someone's login session: the bootstrap logs out only its own.
    let someone = node.login(&node.password).unwrap();
    assert_eq!(
        node.sessions(),
        vec![someone.clone()],
        "the first run left no session of its own"
    );

    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let requests = node.windmill.requests_since(mark);

    // Every write the second run sent: the login, the UI's new token, the logout of its login
    // session, the existence check of the workspace (a POST that only reads), the front-end's
    // new token and the deletion of the first run's two tokens. Nothing else, besides the proof
    // of step 7 (made with the front-end's new token, each call refused).
    let second_front = support::stored_token(&node).unwrap();
    assert_eq!(support::proof_calls(&requests, &second_front), support::PROOF);
    let writes: Vec<String> = requests
        .iter()
        .filter(|r| r.method != "GET" && r.token.as_deref() != Some(second_front.as_str()))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        writes,
        vec![
            "POST /api/auth/login".to_owned(),
            "POST /api/users/tokens/create".to_owned(),
            "POST /api/auth/logout".to_owned(),
            "POST /api/workspaces/exists".to_owned(),
            "POST /api/users/tokens/create".to_owned(),
            format!("DELETE /api/users/tokens/delete/{}", &first_front[..10]),
            format!("DELETE /api/users/tokens/delete/{}", &first[..10]),
        ]
    );
    // One GET per script, no more.
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.method == "GET" && r.path.contains("/scripts/get/p/"))
            .count(),
        4
    );
    for step in [1, 2, 4, 5, 6] {
        assert!(run.step_line(step).ends_with(": unchanged"), "{run:?}");
    }
    support::assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: [..] holds the new token labeled fediversity ([..]), {}: updated",
            support::refused("variables/list")
        ),
    );
    support::assert_line(
        run.step_line(8),
        "fediversity-windmill-bootstrap: step 8/9 ui-auth: [..] holds the new token labeled fediversity-ui: updated",
    );
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 labeled fediversity, 1 labeled fediversity-ui: updated",
    );
    assert_eq!(node.windmill.script_count(), 4, "no script version created");
    // The password was not rewritten.
    assert_eq!(node.db.password_hash(ADMIN_EMAIL), hash);

    // The new tokens are in their places; the first run's are revoked (gone from the token list:
    // Windmill's auth cache may let them work up to 120 s more, which the bootstrap does not
    // control); the other label's token and the login sessions are left alone.
    let second = node.include_token().unwrap();
    assert!(second != first && second_front != first_front);
    assert!(node.token_works(&second));
    for gone in [&first, &first_front] {
        assert!(!node.windmill.has_token(gone));
    }
    assert_eq!(support::labeled(&node, support::UI), vec![second]);
    assert_eq!(support::labeled(&node, support::FRONT_END), vec![second_front]);
    assert_eq!(support::labeled(&node, "someone-else").len(), 1);
    assert_eq!(node.sessions(), vec![someone]);
    // The include was replaced by a rename (a new inode), not rewritten in place.
    assert_ne!(node.include_meta().unwrap().ino(), ino);
}

#[test]
fn revoke_previous_false_keeps_the_older_tokens() {
    let mut node = support::node();
    node.config["token"] = json!({"revoke_previous": false, "label": "fedi-ops"});
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (first, first_front) = (node.include_token().unwrap(), support::stored_token(&node).unwrap());
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: token.revoke_previous is false; older tokens labeled fedi-ops and fediversity-ui kept: unchanged",
    );
    assert!(!node.windmill.requests().iter().any(|r| r.method == "DELETE"));
    assert!(node.windmill.has_token(&first) && node.windmill.has_token(&first_front));
    assert_eq!(
        (
            support::labeled(&node, "fedi-ops").len(),
            support::labeled(&node, support::UI).len()
        ),
        (2, 2)
    );
}
