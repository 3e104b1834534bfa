//! A lost answer to OpenBao's write loses no token: the secret is read back, and the new token is
//! kept whenever OpenBao holds it (or may: when it cannot be read back); only a token OpenBao does
//! not hold is deleted. A proxy in front of the real OpenBao loses the request or its answer.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::openbao::{self, OpenBao};

use crate::proxy::{Lose, Proxy};
use crate::support::{self, FRONT_END, UI, assert_has_line, assert_line};

/// A node whose OpenBao is behind a proxy, with a token that may `read` too or only write.
fn node_behind_proxy(may_read: bool) -> (Node, Proxy) {
    let bao = openbao::shared();
    let name = OpenBao::unique("windmill");
    let capabilities = if may_read {
        r#""read", "create", "update""#
    } else {
        r#""create", "update""#
    };
    let token = bao.token_with_policy(
        &OpenBao::unique("policy"),
        &format!("path \"secret/data/{name}/apiToken\" {{ capabilities = [{capabilities}] }}\n"),
    );
    let proxy = Proxy::start(&bao.addr);
    (
        Node::with_openbao(&proxy.url, &format!("secret/{name}/apiToken"), &token),
        proxy,
    )
}

/// The PUT of the secret's data, as the proxy saw it: how many, how many forwarded.
fn puts(proxy: &Proxy) -> (usize, usize) {
    let puts: Vec<bool> = proxy
        .seen()
        .into_iter()
        .filter(|(call, _)| call.starts_with("PUT /v1/secret/data/"))
        .map(|(_, f)| f)
        .collect();
    (puts.len(), puts.iter().filter(|f| **f).count())
}

#[test]
fn a_write_whose_answer_is_lost_but_that_happened_stores_the_token_and_the_run_goes_on() {
    let (node, proxy) = node_behind_proxy(true);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let old = support::stored_token(&node).unwrap();
    // Every try of the write reaches OpenBao, and every answer is lost.
    proxy.lose("PUT", "/v1/secret/data/", Lose::Answer, 3);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        puts(&proxy),
        (4, 4),
        "the first run's write and three tries, all forwarded"
    );
    assert_line(
        run.step_line(7),
        &format!(
            "fediversity-windmill-bootstrap: step 7/9 openbao: {} field value (the write failed: OpenBao PUT /v1/secret/data/[..]: [..] (after 3 tries); \
             read back, the secret holds the new token) holds the new token labeled fediversity ([..]) of the operator frontend, {}: updated",
            node.bao_path,
            support::proof(node.windmill.profile())
        ),
    );
    // OpenBao holds the new token, which lives; the old one was revoked, nothing was deleted as unstored.
    let new = support::stored_token(&node).unwrap();
    assert_ne!(new, old);
    assert_eq!(support::labeled(&node, FRONT_END), vec![new]);
    assert!(!run.stderr.contains("that this run minted"), "{run:?}");
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn a_write_that_never_reached_openbao_deletes_the_new_token_and_keeps_the_old() {
    let (node, proxy) = node_behind_proxy(true);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (old, ui) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    // Control for the test above: the requests are lost, OpenBao never sees the write.
    proxy.lose("PUT", "/v1/secret/data/", Lose::Request, 3);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_eq!(puts(&proxy), (4, 1));
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao PUT /v1/secret/data/[..] (after 3 tries)",
    );
    for label in [FRONT_END, UI] {
        assert_has_line(
            &run.stderr,
            &format!(
                "fediversity-windmill-bootstrap: deleted the token labeled {label} that this run minted, as the run failed before storing it"
            ),
        );
    }
    assert_eq!(support::stored_token(&node), Some(old.clone()));
    assert_eq!(support::labeled(&node, FRONT_END), vec![old]);
    assert_eq!(node.include_token(), Some(ui));
}

#[test]
fn a_lost_answer_that_cannot_be_read_back_keeps_the_new_token_and_fails_the_step() {
    // The token may only write: whether OpenBao holds the new token cannot be told.
    let (node, proxy) = node_behind_proxy(false);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let old = support::labeled(&node, FRONT_END);
    proxy.lose("PUT", "/v1/secret/data/", Lose::Answer, 3);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao PUT /v1/secret/data/[..] (after 3 tries); \
         reading the secret back to see whether the write happened failed too (OpenBao GET /v1/secret/data/[..] answered 403: [..]): \
         OpenBao may hold the new token, so it was kept, not deleted (a later run's step 9 revokes it if it is not the one stored)",
    );
    // The front-end's new token was kept (OpenBao does hold it); the UI's, stored nowhere, deleted.
    assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: deleted the token labeled fediversity-ui that this run minted, as the run failed before storing it",
    );
    assert!(
        !run.stderr.contains("deleted the token labeled fediversity that"),
        "{run:?}"
    );
    let tokens = support::labeled(&node, FRONT_END);
    assert_eq!(tokens.len(), 2);
    let held = openbao::shared()
        .read_kv2("secret", node.bao_path.strip_prefix("secret/").unwrap())
        .unwrap();
    let new = tokens.iter().find(|t| !old.contains(t)).unwrap();
    assert_eq!(held["value"], new.as_str());
    // The next run converges and revokes both older ones.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 2 of the operator frontend, 0 of the superadmin's labeled fediversity, \
         1 labeled fediversity-ui: updated",
    );
}
