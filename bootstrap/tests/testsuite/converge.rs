//! A fresh node: every step creates what is missing, and the token ends up working, in OpenBao
//! and in the nginx include.

use std::os::unix::fs::MetadataExt;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::{Node, ui_gid};
use fediversity_testkit::postgres::ADMIN_EMAIL;
use fediversity_testkit::{openbao, venv};

use crate::support::assert_line;
use serde_json::json;

#[test]
fn a_fresh_node_converges() {
    let node = Node::new();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");

    // One line per step, in order, each whole as the README specifies it.
    let dir = node.scripts_dir().display().to_string();
    let lines = run.step_lines();
    let expected = [
        "step 1/9 ready: http://127.0.0.1:[..] answered GET /api/version (CE v1.587.0) after [..] s: unchanged".to_owned(),
        "step 2/9 login: admin@windmill.dev did not log in with the node password; its hash was written to the password table and it logs in now: updated".to_owned(),
        "step 3/9 token: minted a new token labeled fediversity: created".to_owned(),
        "step 4/9 workspace: workspace fediversity and folder fediversity: created".to_owned(),
        format!("step 5/9 scripts: 4 scripts in {dir}, created f/fediversity/_runner f/fediversity/deploy f/fediversity/destroy f/fediversity/hello, 0 unchanged: created"),
        "step 6/9 settings: global settings instance_python_version (differed: instance_python_version): updated".to_owned(),
        "step 7/9 openbao: [..] field value (mount secret/, KV v2) holds the new token: created".to_owned(),
        "step 8/9 ui-auth: [..]/run/windmill-ui-auth/token.conf (root:postgres 0440) holds the new token: created".to_owned(),
        "step 9/9 revoke: 0 older tokens labeled fediversity deleted: unchanged".to_owned(),
    ];
    assert_eq!(lines.len(), expected.len(), "{run:?}");
    for (line, pattern) in lines.iter().zip(&expected) {
        assert_line(line, &format!("fediversity-windmill-bootstrap: {pattern}"));
    }
    assert_line(run.stderr.lines().last().unwrap(), "fediversity-windmill-bootstrap: converged");

    // Windmill: workspace, folder, scripts (README.md ignored), setting.
    let w = &node.windmill;
    assert_eq!(w.workspaces(), vec!["admins".to_owned(), "fediversity".to_owned()]);
    assert_eq!(w.folders(), vec![("fediversity".to_owned(), "fediversity".to_owned())]);
    assert_eq!(w.script_count(), 4);
    let deploy = w.versions("fediversity", "f/fediversity/deploy");
    assert_eq!(deploy.len(), 1);
    assert_eq!(deploy[0].content, std::fs::read_to_string(node.scripts_dir().join("f/fediversity/deploy.py")).unwrap());
    assert_eq!((deploy[0].language.as_str(), deploy[0].summary.as_str(), deploy[0].description.as_str()), ("python3", "deploy", ""));
    assert_eq!(w.versions("fediversity", "f/fediversity/hello")[0].language, "bash");
    assert!(w.versions("fediversity", "README").is_empty());
    assert_eq!(w.setting("instance_python_version"), Some(json!("3.12")));

    // The token: one `fediversity` token, the same in OpenBao and the include, and it works.
    let labeled: Vec<_> = w.tokens().into_iter().filter(|t| t.label == "fediversity").collect();
    assert_eq!(labeled.len(), 1);
    let token = &labeled[0].token;
    assert!(node.token_works(token));
    let rest = node.bao_path.strip_prefix("secret/").unwrap();
    assert_eq!(openbao::shared().read_kv2("secret", rest), Some(json!({"value": token})));
    assert_eq!(node.include_token().as_deref(), Some(token.as_str()));
    // Every call after minting, but the logout of the login session right after it, used the
    // new token: it works for everything the bootstrap does.
    let requests = w.requests();
    let minted_at = requests.iter().position(|r| r.is("POST", "/api/users/tokens/create")).unwrap();
    assert!(requests[minted_at + 1].is("POST", "/api/auth/logout"));
    assert_ne!(requests[minted_at + 1].token.as_deref(), Some(token.as_str()));
    assert!(requests[minted_at + 2..].iter().all(|r| r.token.as_deref() == Some(token.as_str())));

    // Two logins, both with the node password (before and after the hash was written): the
    // default password is only for --check. No login session is left behind.
    let logins: Vec<_> = requests.iter().filter(|r| r.is("POST", "/api/auth/login")).collect();
    assert_eq!(logins.len(), 2);
    assert!(logins.iter().all(|r| r.body.contains(&format!("\"{}\"", node.password))));
    assert_eq!(requests.iter().filter(|r| r.is("POST", "/api/auth/logout")).count(), 1);
    assert_eq!(node.sessions(), Vec::<String>::new());

    // The include: root, the configured group, 0440, and no temp file left beside it.
    assert_eq!(node.include_owner_group_mode(), Some((0, ui_gid(), 0o440)));
    let dir = node.include_path().parent().unwrap().to_owned();
    let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, vec!["token.conf".to_owned()]);
    let dir_meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((dir_meta.gid(), dir_meta.mode() & 0o777), (ui_gid(), 0o750));

    // The password: an argon2id PHC string that fits VARCHAR(100), verified by both argon2s,
    // and the fake (which reads the table) lets the admin in with it.
    let hash = node.db.password_hash(ADMIN_EMAIL).unwrap();
    assert!(hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$") && hash.len() <= 100, "{hash}");
    use argon2::{Argon2, PasswordHash, PasswordVerifier};
    let parsed = PasswordHash::new(&hash).unwrap();
    assert!(Argon2::default().verify_password(node.password.as_bytes(), &parsed).is_ok());
    assert!(Argon2::default().verify_password(b"changeme", &parsed).is_err());
    assert!(venv::argon2_cffi_verifies(&hash, &node.password));
    assert!(!venv::argon2_cffi_verifies(&hash, "changeme"));
}

#[test]
fn help_documents_the_exit_codes() {
    let out = std::process::Command::new(bootstrap_bin!()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for needle in ["--config", "--check", "0  every step held", "1  --check found", "2  configuration error", "3  a step failed"] {
        assert!(help.contains(needle), "missing {needle:?} in:\n{help}");
    }
}
