//! The superadmin password: written to PostgreSQL (one transaction, after SET ROLE) only when
//! the login with the node password fails; clear errors when it cannot be.

use argon2::password_hash::{PasswordHasher, SaltString, rand_core::OsRng};
use argon2::{Argon2, PasswordHash, PasswordVerifier};
use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::postgres::{ADMIN_EMAIL, SEED_HASH, cluster};
use fediversity_testkit::venv;
use serde_json::json;

use crate::support;

fn no_token_minted(node: &Node) -> bool {
    !node
        .windmill
        .requests()
        .iter()
        .any(|r| r.is("POST", "/api/users/tokens/create"))
}

#[test]
fn the_hash_is_written_once_and_verifies_with_both_argon2_implementations() {
    let node = support::node();
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let hash = node.db.password_hash(ADMIN_EMAIL).unwrap();
    assert!(hash.len() <= 100);
    assert!(
        Argon2::default()
            .verify_password(node.password.as_bytes(), &PasswordHash::new(&hash).unwrap())
            .is_ok()
    );
    assert!(venv::argon2_cffi_verifies(&hash, &node.password));
    // Positive control for the cffi check: it does reject a wrong password.
    assert!(!venv::argon2_cffi_verifies(&hash, &format!("{}x", node.password)));
    // Login worked with the node password: no further write on the next run.
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(2),
        "fediversity-windmill-bootstrap: step 2/9 login: admin@windmill.dev logs in with the node password: unchanged",
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).unwrap(), hash);
}

#[test]
fn another_password_is_replaced() {
    let node = support::node();
    let other = Argon2::default()
        .hash_password(b"someone-changed-it", &SaltString::generate(&mut OsRng))
        .unwrap()
        .to_string();
    node.db.set_password_hash(ADMIN_EMAIL, &other);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(2),
        "fediversity-windmill-bootstrap: step 2/9 login: admin@windmill.dev did not log in with the node password; its hash was written to the password table and it logs in now: updated",
    );
    let hash = node.db.password_hash(ADMIN_EMAIL).unwrap();
    assert!(
        Argon2::default()
            .verify_password(node.password.as_bytes(), &PasswordHash::new(&hash).unwrap())
            .is_ok()
    );
}

#[test]
fn zero_rows_updated_is_a_clear_error_and_nothing_else_happens() {
    let node = support::node();
    // The admin exists but does not log in with a password: the UPDATE matches no row.
    node.db.execute(&format!(
        "UPDATE password SET login_type = 'github' WHERE email = '{ADMIN_EMAIL}'"
    ));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr.lines().last()
            == Some(
                "fediversity-windmill-bootstrap: error: step 2/9 login failed: no row in Windmill's password table for admin@windmill.dev with login_type 'password' (zero rows updated)"
            ),
        "{run:?}"
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert!(no_token_minted(&node));
    assert!(node.include_meta().is_none());
}

#[test]
fn postgresql_unreachable_is_a_clear_error_and_nothing_else_changes() {
    let node = support::node();
    let closed = fediversity_testkit::servers::free_port();
    let dsn = node
        .db
        .app_dsn()
        .replace(&format!("port={}", cluster().port), &format!("port={closed}"));
    std::fs::write(node.path().join("database-url"), dsn).unwrap();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: PostgreSQL: cannot connect: error connecting to server[..]",
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert!(no_token_minted(&node));
    assert!(node.windmill.workspaces() == vec!["admins".to_owned()]);
}

#[test]
fn a_wrong_database_password_is_reported_without_the_password() {
    let node = support::node();
    let dsn = node
        .db
        .app_dsn()
        .replace(&node.db.app_password(), "not-the-db-password");
    std::fs::write(node.path().join("database-url"), dsn).unwrap();
    let mut node = node;
    node.extra_secrets
        .push(("the wrong database password".into(), "not-the-db-password".into()));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: PostgreSQL: cannot connect[..]password authentication failed[..]",
    );
}

#[test]
fn the_update_runs_under_the_configured_role() {
    // The login role is NOINHERIT: without SET ROLE it may not touch `password`. A role that
    // does not exist fails at SET ROLE, and is named.
    let mut node = support::node();
    node.config["windmill"]["database_role"] = json!("no_such_role");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: PostgreSQL: SET ROLE no_such_role: ERROR 22023: role \"no_such_role\" does not exist",
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
}

#[test]
fn a_login_that_still_fails_after_the_write_is_reported() {
    // The DSN names another database than the one Windmill reads: the write succeeds there,
    // Windmill keeps rejecting the password.
    let node = support::node();
    let elsewhere = cluster().windmill_database();
    std::fs::write(node.path().join("database-url"), elsewhere.app_dsn()).unwrap();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(
        run.stderr.lines().last()
            == Some(
                "fediversity-windmill-bootstrap: error: step 2/9 login failed: the password hash of admin@windmill.dev was written, but Windmill still rejects the node password after 3 logins"
            ),
        "{run:?}"
    );
    assert_ne!(elsewhere.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert!(no_token_minted(&node));
}

#[test]
fn a_malformed_stored_hash_is_reported_not_overwritten() {
    // Windmill answers 500 (not "Invalid login") for a hash it cannot parse (observed on CE 1.743.0). The
    // spec writes the hash only on "invalid login", so this is reported for a human.
    let node = support::node();
    node.db.set_password_hash(ADMIN_EMAIL, "garbage");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: Windmill POST /api/auth/login answered 500 after 3 tries: Internal: password hash string[..]",
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some("garbage"));
}
