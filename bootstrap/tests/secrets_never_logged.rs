//! No secret in anything the bootstrap prints. Every run of every test goes through
//! `Node::finish`, which scans stdout and stderr for the node password, the DSN and its
//! password, the OpenBao token and every Windmill token ever minted (and their 10-character
//! prefixes). This file adds the positive controls (the scan does catch a secret that is
//! printed) and the noisiest paths: debug logging, retries, dropped connections, failures.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::{Node, find_secrets};
use fediversity_testkit::windmill_fake::Fault;
use serde_json::json;

#[test]
fn the_scan_finds_secrets_as_they_are_and_escaped() {
    let secrets = vec![("pw".to_owned(), "p\"w\\x-1234567890".to_owned()), ("token".to_owned(), "abcdefghij1234567890".to_owned())];
    assert_eq!(find_secrets("nothing here", &secrets), Vec::<String>::new());
    assert_eq!(find_secrets("raw p\"w\\x-1234567890 raw", &secrets), vec!["pw"]);
    assert_eq!(find_secrets(r#"json "p\"w\\x-1234567890""#, &secrets), vec!["pw"]);
    assert_eq!(find_secrets("token=abcdefghij1234567890", &secrets), vec!["token"]);
}

#[test]
fn positive_control_a_secret_the_bootstrap_prints_is_caught() {
    // The node password is also the folder name here, and folder names are logged: the scan
    // must flag this run.
    let mut node = Node::new();
    let password = format!("Folder_{}", fediversity_testkit::servers::random_string(16));
    std::fs::write(node.path().join("admin-password"), &password).unwrap();
    node.password = password.clone();
    node.config["workspace"] = json!({"folder": password});
    let out = Node::command(bootstrap_bin!(), &node.write_config(), &[]).output().unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    assert_eq!(find_secrets(&printed, &node.secrets()), vec!["the node password".to_owned()]);
    // And the node's own assertion fails on it.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.assert_no_secrets(&printed)));
    assert!(caught.is_err());
}

#[test]
fn positive_control_tokens_and_prefixes_are_scanned() {
    let node = Node::new();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let token = node.include_token().unwrap();
    let names = find_secrets(&format!("x {token} y"), &node.secrets());
    assert!(names.iter().any(|n| n.starts_with("Windmill token #")), "{names:?}");
    let names = find_secrets(&format!("deleted prefix {}", &token[..10]), &node.secrets());
    assert!(names.iter().any(|n| n.starts_with("the prefix of Windmill token #")), "{names:?}");
    let names = find_secrets(&node.db.app_dsn(), &node.secrets());
    assert!(names.contains(&"the DSN".to_owned()) && names.contains(&"the database password".to_owned()), "{names:?}");
}

#[test]
fn debug_logging_through_retries_drops_and_failures_prints_no_secret() {
    let node = Node::new();
    let config = node.write_config();
    node.windmill.fail("POST", "/api/auth/login", Fault::Status(502), 1);
    node.windmill.fail("POST", "/api/users/tokens/create", Fault::DropAfterHandling, 1);
    node.windmill.fail("POST", "/api/w/fediversity/scripts/create", Fault::DropBeforeHandling, 2);
    node.windmill.fail("DELETE", "/api/users/tokens/delete/", Fault::Status(500), 1);
    let debug = |extra: &[&str]| {
        let out = Node::command(bootstrap_bin!(), &config, extra).env("BOOTSTRAP_LOG", "debug").output().unwrap();
        node.finish(out)
    };
    let first = debug(&[]);
    assert_eq!(first.code, 0, "{first:?}");
    // Debug is really on: the retries are logged.
    assert!(first.stderr.contains("debug: Windmill POST /api/auth/login: answered 502; retrying"), "{first:?}");
    assert!(first.stderr.contains("debug: Windmill POST /api/users/tokens/create: the request failed"), "{first:?}");
    let second = debug(&[]);
    assert_eq!(second.code, 0, "{second:?}");
    let check = debug(&["--check"]);
    assert_eq!(check.code, 0, "{check:?}");
    // A failure with every secret in play: the DSN's database refuses, after login failed.
    node.db.execute("UPDATE password SET password_hash = '$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$8VRpVmUuZZx8GOmJ2S2KjNBZUxbD9PbqWkGiD3fIxRo'");
    node.db.execute("REVOKE ALL ON password FROM windmill_user");
    let failed = debug(&[]);
    assert_eq!(failed.code, 3, "{failed:?}");
    assert!(failed.stderr.contains("step 2/9 login failed: PostgreSQL: UPDATE password: ERROR 42501: permission denied for table password"), "{failed:?}");
    // Every line of every run was scanned in `finish`; the lines were there to scan.
    assert!(node.printed.lock().unwrap().len() > 30);
}

#[test]
fn an_error_that_quotes_a_token_prefix_is_scrubbed() {
    // Windmill's delete answers quote the prefix (`deleted 1 tokens ["QedeJtIbdx*****"] with
    // prefix QedeJtIbdx`, §5.1): here an error answer to the revocation does the same.
    let node = Node::new();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let first = node.include_token().unwrap();
    node.windmill.fail("DELETE", "/api/users/tokens/delete/", Fault::StatusQuotingPath(400), 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    // The answer reached the message, with the prefix replaced (and `finish` scanned the output
    // for every token and its prefix).
    assert!(
        run.stderr.contains("error: step 9/9 revoke failed: Windmill DELETE /api/users/tokens/delete/{prefix} answered 400: Bad request: injected fault for [REDACTED]"),
        "{run:?}"
    );
    // Positive control: the call was about the first token, whose prefix the answer quoted.
    assert!(node.windmill.requests().iter().any(|r| r.method == "DELETE" && r.path.ends_with(&first[..10])));
}

