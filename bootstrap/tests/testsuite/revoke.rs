//! Step 9 leaves no token of the bootstrap's behind: every token of the operator but the one
//! OpenBao holds (a leaked one included), the older tokens of the UI's label, every token of a
//! label it minted under before (a label changed in the configuration), all of `tokens/list`'s
//! pages, read in time linear in them and bounded; and `--check` reports what a run would
//! delete.

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
        "fediversity-windmill-bootstrap: step 9/9 revoke: tokens besides the stored ones: 0 of the operator frontend, \
         0 of the superadmin's labeled front-b, 0 labeled ui-b, 0 labeled fediversity (a former label), 1 labeled fediversity-ui (a former label): would update",
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 of the operator frontend, \
         0 of the superadmin's labeled front-b, 0 labeled ui-b, 0 labeled fediversity (a former label), 1 labeled fediversity-ui (a former label): updated",
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
fn an_operator_that_changes_leaves_no_token_of_the_old_one() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let front_a = support::stored_token(&node).unwrap();
    // A copy of the front-end's token leaked, and another token of the operator's.
    let leaked = node
        .windmill
        .insert_tokens_of(support::OPERATOR_EMAIL, "someone-minted-it", 1);
    // (The state file lists the operators minted as.)

    // The front-end gets an operator of its own name.
    node.config["token"]["user_email"] = json!("deployer@fediversity.invalid");
    let check = node.run(bootstrap_bin!(), &["--check"]);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    // Neither the old front-end token nor any other of the old operator is live.
    for gone in leaked.iter().chain([&front_a]) {
        assert!(!node.windmill.has_token(gone));
    }
    assert_eq!(support::of(&node, support::OPERATOR_EMAIL), Vec::<String>::new());
    assert_eq!(
        support::of(&node, "deployer@fediversity.invalid"),
        vec![support::stored_token(&node).unwrap()]
    );
    assert!(
        run.step_line(9)
            .contains(", 2 of the former operator frontend@fediversity.invalid: updated"),
        "{run:?}"
    );
    // --check had seen them.
    assert_eq!(check.code, 1, "{check:?}");
    assert!(
        check
            .step_line(9)
            .contains(", 2 of the former operator frontend@fediversity.invalid: would update"),
        "{check:?}"
    );
    // Revoked, it leaves the state file; the node checks clean.
    assert_eq!(
        node.state().unwrap()["operators"],
        json!(["deployer@fediversity.invalid"])
    );
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn a_run_that_dies_after_minting_under_a_new_label_still_has_it_revoked_later() {
    let mut node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // A run under a new label fails in step 7 after minting (its impersonation token cannot delete
    // itself), and its cleanup fails too: its tokens stay behind, the impersonation token too.
    node.config["token"]["label"] = json!("front-b");
    std::fs::write(node.path().join("bao-token"), "s.wrong").unwrap();
    let fault = fediversity_testkit::windmill_fake::Fault::Status(500);
    node.windmill.fail("DELETE", "/api/users/tokens/delete/", fault, 6);
    node.windmill.fail_after("POST", "/api/auth/logout", 1, fault, 3);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 3);
    assert_eq!(support::labeled(&node, "front-b").len(), 1);
    assert_eq!(support::labeled(&node, "fediversity-windmill-bootstrap").len(), 1);
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
    // The operator's: the older one, the failed run's and its impersonation token.
    assert!(run.step_line(9).contains("3 of the operator frontend"), "{run:?}");
    assert!(
        run.step_line(9).contains("0 labeled front-b (a former label)"),
        "{run:?}"
    );
    assert!(support::labeled(&node, "front-b").is_empty());
    assert!(support::labeled(&node, "fediversity-windmill-bootstrap").is_empty());
    assert_eq!(
        support::of(&node, support::OPERATOR_EMAIL),
        vec![support::stored_token(&node).unwrap()]
    );
}

#[test]
fn every_page_of_the_token_list_is_revoked() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // More older tokens of the label (the superadmin's, as before the front-end was an
    // operator) than one page holds (1000).
    node.windmill.insert_tokens(FRONT_END, 1100);
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 of the operator frontend, \
         1100 of the superadmin's labeled fediversity, 1 labeled fediversity-ui: updated",
    );
    assert_eq!(
        support::labeled(&node, FRONT_END),
        vec![support::stored_token(&node).unwrap()]
    );
    // Read by pages of 1000, without the tokens of jobs: two pages, the second short.
    let ui = node.include_token().unwrap();
    let lists: Vec<String> = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| r.is("GET", "/api/users/tokens/list") && r.token.as_deref() == Some(ui.as_str()))
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

crate::on_every_profile!(
    a_token_of_the_operator_that_is_not_the_stored_one_does_not_survive_the_next_run,
    |profile| { super::a_token_of_the_operator_that_is_not_the_stored_one_does_not_survive_the_next_run(profile) }
);

fn a_token_of_the_operator_that_is_not_the_stored_one_does_not_survive_the_next_run(
    profile: fediversity_testkit::windmill_fake::Profile,
) {
    let node = support::node_on(profile);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let stored = support::stored_token(&node).unwrap();
    // Leaked or left: one of another label, an impersonation a dead run left, one of the label.
    let leaked: Vec<String> = ["someone-minted-it", "fediversity-windmill-bootstrap", FRONT_END]
        .iter()
        .flat_map(|label| node.windmill.insert_tokens_of(support::OPERATOR_EMAIL, label, 1))
        .collect();
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 1, "{check:?}");
    assert!(
        check.step_line(9).contains(": 3 of the operator frontend,"),
        "{check:?}"
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.step_line(9).contains(": 4 of the operator frontend,"), "{run:?}");
    for gone in leaked.iter().chain([&stored]) {
        assert!(!node.windmill.has_token(gone));
    }
    assert_eq!(
        support::of(&node, support::OPERATOR_EMAIL),
        vec![support::stored_token(&node).unwrap()]
    );
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 0);
}

#[test]
fn a_server_answering_endless_pages_of_tokens_is_read_in_linear_time_up_to_a_bound() {
    // A broken or hostile server: every page full of tokens never seen. Read in time linear in
    // the rows (a hash set of the prefixes seen), it ends at the bound of pages, naming it, and
    // the run fails there with nothing revoked. Quadratic, the 100,000 rows of 100 pages took
    // minutes; a generous bound here says only "it does not hang".
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let stored = support::stored_token(&node).unwrap();
    node.windmill.answer_endless_token_pages(8);
    let started = std::time::Instant::now();
    let run = node.run(bootstrap_bin!(), &[]);
    let took = started.elapsed();
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 9/9 revoke failed: Windmill GET /api/users/tokens/list: unexpected answer: \
         more than 100 pages of 1000 tokens: not read further",
    );
    assert!(took < std::time::Duration::from_secs(120), "{took:?}");
    let pages = node
        .windmill
        .requests()
        .iter()
        .filter(|r| r.is("GET", "/api/users/tokens/list"))
        .count();
    assert_eq!(pages, 2 + 100, "the first run's two lists of one page, then the bound");
    // The new token was stored (steps 7 and 8 held); the older one was not revoked.
    assert!(node.windmill.has_token(&stored));

    // Pages of nearly 4 MiB each: the bound of bytes over all pages comes first.
    let node = support::node();
    node.windmill.answer_endless_token_pages(3800);
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 3, "{run:?}");
    assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill GET /api/users/tokens/list: unexpected answer: \
         more than 64 MiB over [..] pages: not read further",
    );
}
