//! Step 9 leaves no token of the bootstrap's behind: the older tokens of both labels, every
//! token of a label it minted under before (a label changed in the configuration), all of
//! `tokens/list`'s pages; and `--check` reports what a run would delete.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::http;
use serde_json::json;

use crate::support::{self, FRONT_END, UI, assert_line};

#[test]
fn a_label_that_changes_leaves_no_token_of_the_old_one() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (front_a, ui_a) = (support::stored_token(&node).unwrap(), node.include_token().unwrap());
    // The state file lists the labels minted under, 0600.
    assert_eq!(node.state().unwrap()["labels"], json!([FRONT_END, UI]));
    assert_eq!(std::fs::metadata(node.state_path()).unwrap().mode() & 0o7777, 0o600);
    // A token of another label, someone else's: never touched.
    let other = http::request(
        "POST",
        &format!("{}/api/users/tokens/create", node.windmill.url),
        &[("Authorization", &format!("Bearer {ui_a}"))],
        Some(r#"{"label":"someone-else"}"#),
    );
    assert_eq!(other.status, 201);

    // Both labels change.
    node.config["token"]["label"] = json!("front-b");
    node.config["ui_auth"]["label"] = json!("ui-b");
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    assert_line(
        check.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: tokens besides the stored ones: 0 labeled front-b, 0 labeled ui-b, \
         1 labeled fediversity (a former label), 1 labeled fediversity-ui (a former label): would update",
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 0 labeled front-b, 0 labeled ui-b, \
         1 labeled fediversity (a former label), 1 labeled fediversity-ui (a former label): updated",
    );
    for gone in [&front_a, &ui_a] {
        assert!(!node.windmill.has_token(gone));
    }
    assert_eq!(
        support::labeled(&node, "front-b"),
        vec![support::stored_token(&node).unwrap()]
    );
    assert_eq!(support::labeled(&node, "ui-b"), vec![node.include_token().unwrap()]);
    assert_eq!(support::labeled(&node, "someone-else").len(), 1);
    // Revoked, the former labels leave the state file; the node checks clean.
    assert_eq!(node.state().unwrap()["labels"], json!(["front-b", "ui-b"]));
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
    // Positive control: a token minted under a former label later is not the bootstrap's.
    let session = node.login(&node.password).unwrap();
    let late = http::request(
        "POST",
        &format!("{}/api/users/tokens/create", node.windmill.url),
        &[("Authorization", &format!("Bearer {session}"))],
        Some(r#"{"label":"fediversity"}"#),
    );
    assert_eq!(late.status, 201);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert!(node.windmill.has_token(&late.body));
}

#[test]
fn a_run_that_dies_after_minting_under_a_new_label_still_has_it_revoked_later() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // A run under a new label fails in step 7 after minting (OpenBao refuses), and its cleanup
    // fails too: its tokens stay behind.
    node.config["token"]["label"] = json!("front-b");
    std::fs::write(node.path().join("bao-token"), "s.wrong").unwrap();
    node.windmill.fail(
        "DELETE",
        "/api/users/tokens/delete/",
        fediversity_testkit::windmill_fake::Fault::Status(500),
        6,
    );
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 3);
    assert_eq!(support::labeled(&node, "front-b").len(), 1);
    // The label was recorded before the mint.
    assert_eq!(
        node.state().unwrap()["labels"],
        json!(["fediversity", "fediversity-ui", "front-b"])
    );
    // The label goes back; a good run revokes the token the failed run left under front-b.
    node.config["token"]["label"] = json!(FRONT_END);
    std::fs::write(node.path().join("bao-token"), &node.bao_token).unwrap();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.step_line(9).contains("1 labeled front-b (a former label)"),
        "{run:?}"
    );
    assert!(support::labeled(&node, "front-b").is_empty());
}

#[test]
fn every_page_of_the_token_list_is_revoked() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // More older tokens of the label than one page holds (1000), and more than the default page.
    node.windmill.insert_tokens(FRONT_END, 1100);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1101 labeled fediversity, 1 labeled fediversity-ui: updated",
    );
    assert_eq!(
        support::labeled(&node, FRONT_END),
        vec![support::stored_token(&node).unwrap()]
    );
    // Read by pages of 1000, without the tokens of jobs: two pages, the second short.
    let lists: Vec<String> = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| r.is("GET", "/api/users/tokens/list"))
        .map(|r| r.query)
        .collect();
    assert_eq!(
        lists,
        [
            "page=1&per_page=1000&exclude_ephemeral=true",
            "page=2&per_page=1000&exclude_ephemeral=true"
        ]
    );
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}
