//! A second run on a converged node creates nothing and rewrites nothing (asserted from the
//! requests the fake recorded), on every version profile: it mints both tokens again (the
//! front-end's by its operator, through a short-lived impersonation token), proves the new
//! front-end token with jobs that it cancels, and deletes the older tokens.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::http;
use fediversity_testkit::postgres::ADMIN_EMAIL;
use fediversity_testkit::windmill_fake::{Profile, Recorded};
use serde_json::json;

use crate::support;

crate::on_every_profile!(a_second_run_writes_nothing_but_tokens_and_the_proofs_jobs, |profile| {
    super::a_second_run_writes_nothing_but_tokens_and_the_proofs_jobs(profile)
});

/// Whether `request` is one of the proof's jobs (each scheduled a century ahead, which the test
/// checks to be cancelled) or a cancel.
fn of_the_proof(request: &Recorded) -> bool {
    request.query.contains("scheduled_in_secs=")
        || support::without_ids(&request.path).ends_with("/jobs_u/queue/cancel/{id}")
}

/// A write as `<method> <path>`, a token deleted by itself as `{itself}`.
fn write(request: &Recorded) -> String {
    match &request.token {
        Some(token) if request.method == "DELETE" && request.path.ends_with(&token[..10]) => {
            "DELETE /api/users/tokens/delete/{itself}".to_owned()
        }
        _ => format!("{} {}", request.method, request.path),
    }
}

fn a_second_run_writes_nothing_but_tokens_and_the_proofs_jobs(profile: Profile) {
    let node = support::node_on(profile);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let first = node.include_token().unwrap();
    let first_front = support::stored_token(&node).unwrap();
    let hash = node.db.password_hash(ADMIN_EMAIL);
    let ino = node.include_meta().unwrap().ino();
    let scripts = node.windmill.script_count();
    let folder = node.windmill.folder("fediversity", "fediversity");
    let users = node.windmill.users("fediversity");
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
    let jobs_before = node.windmill.jobs().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let requests = node.windmill.requests_since(mark);

    // Every write the second run sent, besides the proof's (made with the front-end's new
    // token, and the superadmin's job it is refused and the cancels at its end): the login, the
    // UI's new token, the logout of its login session, the existence check of the workspace (a
    // POST that only reads), the impersonation of the operator, its new token, the deletion of
    // the impersonation token (by itself), the second impersonation of step 9 and its deletion
    // of the operator's older token and then of itself, the deletion of the UI's older token.
    let second_front = support::stored_token(&node).unwrap();
    let writes: Vec<String> = requests
        .iter()
        .filter(|r| r.method != "GET" && r.token.as_deref() != Some(second_front.as_str()) && !of_the_proof(r))
        .map(write)
        .collect();
    assert_eq!(
        writes,
        vec![
            "POST /api/auth/login".to_owned(),
            "POST /api/users/tokens/create".to_owned(),
            "POST /api/auth/logout".to_owned(),
            "POST /api/workspaces/exists".to_owned(),
            "POST /api/users/tokens/impersonate".to_owned(),
            "POST /api/users/tokens/create".to_owned(),
            "DELETE /api/users/tokens/delete/{itself}".to_owned(),
            "POST /api/users/tokens/impersonate".to_owned(),
            format!("DELETE /api/users/tokens/delete/{}", &first_front[..10]),
            "DELETE /api/users/tokens/delete/{itself}".to_owned(),
            format!("DELETE /api/users/tokens/delete/{}", &first[..10]),
        ],
        "{run:?}"
    );
    // One GET per script, no more (the probes included): nothing waited for a lock.
    assert_eq!(
        requests
            .iter()
            .filter(|r| r.method == "GET" && r.path.contains("/scripts/get/p/"))
            .count(),
        6
    );
    for step in [1, 2, 4, 5, 6] {
        assert!(run.step_line(step).ends_with(": unchanged"), "{run:?}");
    }
    support::assert_line(
        run.step_line(7),
        &support::openbao_line(
            &format!("{} field value (mount secret/, KV v2)", node.bao_path),
            profile,
            ": updated",
        ),
    );
    support::assert_line(
        run.step_line(8),
        "fediversity-windmill-bootstrap: step 8/9 ui-auth: [..] holds the new token labeled fediversity-ui: updated",
    );
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 of the operator frontend, \
         0 of the superadmin's labeled fediversity, 1 labeled fediversity-ui: updated",
    );
    // Nothing else changed: no script version, no member, no ACL, no password.
    assert_eq!(node.windmill.script_count(), scripts, "no script version created");
    assert_eq!(node.windmill.folder("fediversity", "fediversity"), folder);
    assert_eq!(node.windmill.users("fediversity"), users);
    assert_eq!(node.db.password_hash(ADMIN_EMAIL), hash);
    // (The proof's refused ACL change is the new token's.)
    assert!(
        !requests
            .iter()
            .any(|r| r.token.as_deref() != Some(second_front.as_str())
                && (r.path.contains("add_user") || r.path.contains("/acls/")))
    );
    // The proof's jobs: scheduled a century ahead, every one cancelled.
    let jobs = node.windmill.jobs();
    assert!(jobs.len() > jobs_before);
    assert!(
        jobs[jobs_before..]
            .iter()
            .all(|j| j.completed && j.canceled && j.scheduled_in_secs.is_some())
    );

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
    assert_eq!(support::of(&node, support::OPERATOR_EMAIL), vec![second_front]);
    assert_eq!(support::labeled(&node, "someone-else").len(), 1);
    assert_eq!(node.sessions(), vec![someone]);
    // The include was replaced by a rename (a new inode), not rewritten in place.
    assert_ne!(node.include_meta().unwrap().ino(), ino);
}

#[test]
fn revoke_previous_false_keeps_the_older_tokens_of_the_labels_and_no_other_of_the_operator() {
    let mut node = support::node();
    node.config["token"] = json!({"revoke_previous": false, "label": "fedi-ops"});
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (first, first_front) = (node.include_token().unwrap(), support::stored_token(&node).unwrap());
    // A token of the operator's that is not the bootstrap's (another label): revoked all the same.
    let stray = node
        .windmill
        .insert_tokens_of(support::OPERATOR_EMAIL, "someone-minted-it", 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: token.revoke_previous is false; older tokens labeled fedi-ops and fediversity-ui kept, \
         other tokens deleted: 1 of the operator frontend: updated",
    );
    assert!(node.windmill.has_token(&first) && node.windmill.has_token(&first_front));
    assert!(!node.windmill.has_token(&stray[0]));
    assert_eq!(
        (
            support::labeled(&node, "fedi-ops").len(),
            support::labeled(&node, support::UI).len()
        ),
        (2, 2)
    );
    // Positive control: with revoke_previous, the older ones go too.
    node.config["token"]["revoke_previous"] = json!(true);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert_eq!(support::labeled(&node, "fedi-ops").len(), 1);
}
