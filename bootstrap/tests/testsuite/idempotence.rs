//! A second run on a converged node creates nothing and rewrites nothing (asserted from the
//! requests the fake recorded); it mints a new token and deletes the older ones of its label.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::http;
use fediversity_testkit::node::Node;
use fediversity_testkit::openbao;
use fediversity_testkit::postgres::ADMIN_EMAIL;
use serde_json::json;

#[test]
fn a_second_run_writes_nothing_but_a_new_token() {
    let node = Node::new();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let first = node.include_token().unwrap();
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
    assert_eq!(node.sessions(), vec![someone.clone()], "the first run left no session of its own");

    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let requests = node.windmill.requests_since(mark);

    // Every write the second run sent: the login, the new token, the logout of its login
    // session, the existence check of the workspace (a POST that only reads) and the deletion
    // of the first token. Nothing else.
    let writes: Vec<String> = requests.iter().filter(|r| r.method != "GET").map(|r| format!("{} {}", r.method, r.path)).collect();
    assert_eq!(
        writes,
        vec![
            "POST /api/auth/login".to_owned(),
            "POST /api/users/tokens/create".to_owned(),
            "POST /api/auth/logout".to_owned(),
            "POST /api/workspaces/exists".to_owned(),
            format!("DELETE /api/users/tokens/delete/{}", &first[..10]),
        ]
    );
    // One GET per script, no more.
    assert_eq!(requests.iter().filter(|r| r.method == "GET" && r.path.contains("/scripts/get/p/")).count(), 4);
    for step in [1, 2, 4, 5, 6] {
        assert!(run.step_line(step).ends_with(": unchanged"), "{run:?}");
    }
    assert!(run.step_line(7).ends_with("holds the new token: updated"), "{run:?}");
    assert!(run.step_line(9).contains("1 older tokens labeled fediversity deleted"), "{run:?}");
    assert_eq!(node.windmill.script_count(), 4, "no script version created");
    // The password was not rewritten.
    assert_eq!(node.db.password_hash(ADMIN_EMAIL), hash);

    // The new token is in both places and works; the first one is revoked (gone from the token
    // list: Windmill's auth cache may let it work up to 120 s more, which the bootstrap does not
    // control); the other label's token and the login sessions are left alone.
    let second = node.include_token().unwrap();
    assert_ne!(second, first);
    assert!(node.token_works(&second));
    assert!(!node.windmill.has_token(&first));
    assert!(node.windmill.has_token(&second));
    let rest = node.bao_path.strip_prefix("secret/").unwrap();
    assert_eq!(openbao::shared().read_kv2("secret", rest), Some(json!({"value": second})));
    let labels: Vec<String> = node.windmill.tokens().into_iter().map(|t| t.label).collect();
    assert_eq!(labels.iter().filter(|l| *l == "fediversity").count(), 1);
    assert_eq!(labels.iter().filter(|l| *l == "someone-else").count(), 1);
    assert_eq!(node.sessions(), vec![someone]);
    // The include was replaced by a rename (a new inode), not rewritten in place.
    assert_ne!(node.include_meta().unwrap().ino(), ino);
}

#[test]
fn revoke_previous_false_keeps_the_older_tokens() {
    let mut node = Node::new();
    node.config["token"] = json!({"revoke_previous": false, "label": "fedi-ops"});
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let first = node.include_token().unwrap();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.step_line(9).ends_with(": unchanged"), "{run:?}");
    assert!(!node.windmill.requests().iter().any(|r| r.method == "DELETE"));
    assert!(node.windmill.has_token(&first));
    assert_eq!(node.windmill.tokens().iter().filter(|t| t.label == "fedi-ops").count(), 2);
}
