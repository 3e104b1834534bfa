//! OpenBao, real dev servers: KV v2 and v1 mounts, a mount under a prefix, a least-privilege
//! token, a bad token (403) and a sealed server (503), handled as `bao kv put` would.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::openbao::{self, OpenBao};
use fediversity_testkit::windmill_fake::Fault;
use serde_json::json;

use crate::support;

fn writer_token(bao: &OpenBao, api_path: &str) -> String {
    bao.token_with_policy(
        &OpenBao::unique("writer"),
        &format!("path \"{api_path}\" {{ capabilities = [\"create\", \"update\"] }}\n"),
    )
}

#[test]
fn kv_v2_under_a_prefix_like_bao_kv_put() {
    let bao = openbao::shared();
    let prefix = OpenBao::unique("tenant");
    bao.enable_kv(&prefix, 2);
    // The mount is `<prefix>/`, so the CLI writes `<prefix>/data/secret/windmill/apiToken`.
    let token = writer_token(bao, &format!("{prefix}/data/secret/windmill/apiToken"));
    let node = Node::with_openbao(&bao.addr, &format!("{prefix}/secret/windmill/apiToken"), &token);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let place = format!("{prefix}/secret/windmill/apiToken field value (mount {prefix}/, KV v2)");
    support::assert_line(
        run.step_line(7),
        &support::openbao_line(&place, node.windmill.profile(), ": created"),
    );
    let stored = bao.read_kv2(&prefix, "secret/windmill/apiToken").unwrap();
    assert_eq!(stored, json!({"value": support::front_token(&node)}));
    // A second run writes a new version holding only the new token (a full `kv put`).
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(7),
        &support::openbao_line(&place, node.windmill.profile(), ": updated"),
    );
    assert_eq!(
        bao.read_kv2(&prefix, "secret/windmill/apiToken").unwrap(),
        json!({"value": support::front_token(&node)})
    );
    let (_, meta) = bao.get(&format!("{prefix}/metadata/secret/windmill/apiToken"));
    assert_eq!(meta["data"]["current_version"], json!(2));
}

#[test]
fn kv_v1_mount_gets_the_flat_map_at_the_path() {
    let bao = openbao::shared();
    let mount = OpenBao::unique("kv1");
    bao.enable_kv(&mount, 1);
    let path = format!("{mount}/windmill/apiToken");
    let mut node = Node::with_openbao(&bao.addr, &path, &writer_token(bao, &path));
    node.config["openbao"]["field"] = json!("token");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(bao.read_kv1(&path), Some(json!({"token": support::front_token(&node)})));
    // The token may only write: whether the secret was there before is unknown, and said so.
    let place = format!("{path} field token (mount {mount}/, KV v1)");
    support::assert_line(
        run.step_line(7),
        &support::openbao_line(
            &place,
            node.windmill.profile(),
            "; whether it existed before is unknown: the token may not read it: updated",
        ),
    );
}

#[test]
fn kv_v1_with_a_token_that_may_read_tells_created_from_updated() {
    let bao = openbao::shared();
    let mount = OpenBao::unique("kv1");
    bao.enable_kv(&mount, 1);
    let path = format!("{mount}/windmill/apiToken");
    let token = bao.token_with_policy(
        &OpenBao::unique("rw"),
        &format!("path \"{path}\" {{ capabilities = [\"read\", \"create\", \"update\"] }}\n"),
    );
    let node = Node::with_openbao(&bao.addr, &path, &token);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    let place = format!("{path} field value (mount {mount}/, KV v1)");
    support::assert_line(
        run.step_line(7),
        &support::openbao_line(&place, node.windmill.profile(), ": created"),
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(7),
        &support::openbao_line(&place, node.windmill.profile(), ": updated"),
    );
    assert_eq!(bao.read_kv1(&path), Some(json!({"value": support::front_token(&node)})));
}

#[test]
fn a_bad_token_is_a_403_named_without_the_token_and_the_rerun_converges() {
    let bao = openbao::shared();
    let path = format!("secret/{}/apiToken", OpenBao::unique("windmill"));
    let node = Node::with_openbao(&bao.addr, &path, "s.this-token-does-not-exist");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        &format!(
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao GET /v1/sys/internal/ui/mounts/{path} answered 403: permission denied (the token is missing, invalid or lacks a policy for this path)"
        ),
    );
    // Nothing after step 7 ran: no include.
    assert!(node.include_meta().is_none());

    // The tokens it minted were deleted again: none is left.
    assert_discarded(&run);
    assert_eq!(
        (
            support::labeled(&node, support::FRONT_END).len(),
            support::labeled(&node, support::UI).len()
        ),
        (0, 0)
    );

    // With a working token the rerun converges.
    std::fs::write(
        node.path().join("bao-token"),
        writer_token(bao, &format!("secret/data/{}", path.trim_start_matches("secret/"))),
    )
    .unwrap();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        (
            support::labeled(&node, support::FRONT_END).len(),
            support::labeled(&node, support::UI).len()
        ),
        (1, 1)
    );
}

/// The run deleted both tokens it minted, the front-end's first, each with its line.
#[track_caller]
fn assert_discarded(run: &fediversity_testkit::node::Run) {
    let deleted: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("deleted the token labeled"))
        .collect();
    assert_eq!(deleted.len(), 2, "{run:?}");
    for (line, label) in deleted.iter().zip([support::FRONT_END, support::UI]) {
        support::assert_line(
            line,
            &format!(
                "fediversity-windmill-bootstrap: deleted the token labeled {label} that this run minted, as the run failed before storing it"
            ),
        );
    }
}

#[test]
fn runs_failing_at_step_7_leave_no_token_behind_and_a_rerun_converges() {
    let bao = openbao::shared();
    let path = format!("secret/{}/apiToken", OpenBao::unique("windmill"));
    let good = writer_token(bao, &format!("secret/data/{}", path.trim_start_matches("secret/")));
    let node = Node::with_openbao(&bao.addr, &path, &good);
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let (before, ui) = (
        support::labeled(&node, support::FRONT_END),
        node.include_token().unwrap(),
    );
    assert_eq!(before.len(), 1);

    // OpenBao refuses the token now: three runs, as systemd's restarts would make them.
    std::fs::write(node.path().join("bao-token"), "s.revoked-or-wrong").unwrap();
    let minted = node.windmill.ever_minted().len();
    for _ in 0..3 {
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 3, "{run:?}");
        support::assert_line(
            run.stderr.lines().last().unwrap(),
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: [..]",
        );
        assert_discarded(&run);
    }
    // Positive control: each run did mint both (and logged in once: one session each, and
    // impersonated the operator once).
    assert_eq!(node.windmill.ever_minted().len(), minted + 3 * 4);
    // No extra token: those of the last good run, still in the include and working.
    assert_eq!(support::labeled(&node, support::FRONT_END), before);
    assert_eq!(support::labeled(&node, support::UI), vec![ui.clone()]);
    assert_eq!(node.include_token(), Some(ui.clone()));
    assert!(node.token_works(&ui));

    std::fs::write(node.path().join("bao-token"), &good).unwrap();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(9),
        "fediversity-windmill-bootstrap: step 9/9 revoke: older tokens deleted: 1 of the operator frontend, 0 of the superadmin's labeled fediversity, \
         1 labeled fediversity-ui: updated",
    );
    let after = support::labeled(&node, support::FRONT_END);
    assert_eq!(after.len(), 1);
    assert_ne!(after, before);
    assert_eq!(
        bao.read_kv2("secret", path.trim_start_matches("secret/")),
        Some(json!({"value": after[0]}))
    );
}

#[test]
fn a_cleanup_that_fails_is_a_warning_and_the_run_still_names_its_step() {
    let bao = openbao::shared();
    let path = format!("secret/{}/apiToken", OpenBao::unique("windmill"));
    let node = Node::with_openbao(&bao.addr, &path, "s.this-token-does-not-exist");
    // Every try of both deletes fails (the test node allows three each): the front-end's token,
    // the operator's, logs itself out (the login session's logout comes first, and works); the
    // UI's is deleted by prefix (the impersonation token's own deletion comes first, and works).
    node.windmill
        .fail_after("POST", "/api/auth/logout", 1, Fault::Status(500), 3);
    node.windmill
        .fail_after("DELETE", "/api/users/tokens/delete/", 1, Fault::Status(500), 3);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    for (label, call) in [
        (support::FRONT_END, "POST /api/auth/logout"),
        (support::UI, "DELETE /api/users/tokens/delete/{prefix}"),
    ] {
        support::assert_has_line(
            &run.stderr,
            &format!(
                "fediversity-windmill-bootstrap: warning: could not delete the token labeled {label} that this run minted (a later run revokes it in step 9): Windmill {call} answered 500 after 3 tries: Internal: injected fault"
            ),
        );
    }
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: [..]",
    );
    // The tokens stay, for a later run's step 9.
    assert_eq!(
        (
            support::labeled(&node, support::FRONT_END).len(),
            support::labeled(&node, support::UI).len()
        ),
        (1, 1)
    );
}

#[test]
fn a_token_without_a_policy_for_the_path_is_refused_at_the_write() {
    let bao = openbao::shared();
    let path = format!("secret/{}/apiToken", OpenBao::unique("windmill"));
    // Allowed elsewhere on the same mount: the preflight passes, the write is denied.
    let elsewhere = writer_token(bao, "secret/data/somewhere-else");
    let node = Node::with_openbao(&bao.addr, &path, &elsewhere);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        &format!(
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao PUT /v1/secret/data/{} answered 403: [..]permission denied (the token is missing, invalid or lacks a policy for this path)",
            path.trim_start_matches("secret/")
        ),
    );
}

#[test]
fn a_path_that_is_the_mount_itself_is_named() {
    let bao = openbao::shared();
    let node = Node::with_openbao(&bao.addr, "secret", bao.root_token());
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: openbao.path \"secret\" names the KV v2 mount \"secret/\" itself, not a secret in it",
    );
    assert!(node.include_meta().is_none());
}

#[test]
fn a_path_without_a_mount_is_refused_like_the_cli() {
    let bao = openbao::shared();
    let node = Node::with_openbao(
        &bao.addr,
        &format!("{}/windmill/apiToken", OpenBao::unique("nomount")),
        bao.root_token(),
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao GET /v1/sys/internal/ui/mounts/[..] answered 403: [..]",
    );
}

#[test]
fn a_sealed_server_is_a_503_after_retries() {
    // Sealing is global: this test has a server of its own.
    let bao = OpenBao::start();
    let mut node = Node::with_openbao(&bao.addr, "secret/windmill/apiToken", bao.root_token());
    node.extra_secrets
        .push(("the sealed server's root token".into(), bao.root_token().to_owned()));
    bao.seal();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        support::matches(
            "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: OpenBao GET /v1/sys/internal/ui/mounts/secret/windmill/apiToken answered 503 after 3 tries: [..]Vault is sealed[..]",
            run.stderr.lines().last().unwrap()
        ),
        "{run:?}"
    );
    assert!(run.stderr.contains("Vault is sealed"), "{run:?}");
    assert!(node.include_meta().is_none());
    // The tokens it minted are gone again (the third `tokens/create`: the new token's, refused
    // by the proof).
    assert_eq!(
        node.windmill
            .requests()
            .iter()
            .filter(|r| r.is("POST", "/api/users/tokens/create"))
            .count(),
        3
    );
    assert_discarded(&run);
    assert_eq!(
        (
            support::labeled(&node, support::FRONT_END).len(),
            support::labeled(&node, support::UI).len()
        ),
        (0, 0)
    );
}

#[test]
fn the_address_and_token_can_come_from_the_environment() {
    let bao = openbao::shared();
    let path = format!("secret/{}/apiToken", OpenBao::unique("windmill"));
    let token = writer_token(bao, &format!("secret/data/{}", path.trim_start_matches("secret/")));
    let mut node = Node::with_openbao(&bao.addr, &path, &token);
    let openbao = node.config["openbao"].as_object_mut().unwrap();
    openbao.remove("addr");
    openbao.remove("token_file");
    let config = node.write_config();
    // BAO_* unset: the VAULT_* fallback of the CLI.
    let out = Node::command(bootstrap_bin!(), &config, &[])
        .env("VAULT_ADDR", &bao.addr)
        .env("VAULT_TOKEN", &token)
        .output()
        .unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        bao.read_kv2("secret", path.trim_start_matches("secret/")),
        Some(json!({"value": support::front_token(&node)}))
    );
}
