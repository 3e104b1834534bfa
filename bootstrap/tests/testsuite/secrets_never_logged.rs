//! No secret in anything the bootstrap prints. Every run of every test goes through
//! `Node::finish`, which scans stdout and stderr for the node password, the DSN and its
//! password, the OpenBao token and every Windmill token ever minted (and their 10-character
//! prefixes). This file adds the positive controls (the scan does catch a secret that is
//! printed) and the noisiest paths: debug logging, retries, dropped connections, failures.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::json_forms::Encoder;
use fediversity_testkit::node::{Node, find_secrets};
use fediversity_testkit::windmill_fake::Fault;
use serde_json::json;

use crate::support;

#[test]
fn the_scan_finds_secrets_as_they_are_and_escaped() {
    let secrets = vec![
        ("pw".to_owned(), "p\"w\\x-1234567890".to_owned()),
        ("token".to_owned(), "abcdefghij1234567890".to_owned()),
    ];
    assert_eq!(find_secrets("nothing here", &secrets), Vec::<String>::new());
    assert_eq!(find_secrets("raw p\"w\\x-1234567890 raw", &secrets), vec!["pw"]);
    assert_eq!(find_secrets(r#"json "p\"w\\x-1234567890""#, &secrets), vec!["pw"]);
    assert_eq!(find_secrets("token=abcdefghij1234567890", &secrets), vec!["token"]);
}

#[test]
fn positive_control_a_secret_the_bootstrap_prints_is_caught() {
    // The node password is also the folder name here, and folder names are logged: the scan
    // must flag this run.
    let mut node = support::node();
    let password = format!("Folder_{}", fediversity_testkit::servers::random_string(16));
    std::fs::write(node.path().join("admin-password"), &password).unwrap();
    node.password = password.clone();
    node.config["workspace"] = json!({"folder": password});
    // The scripts in that folder, for the front-end's token to run.
    std::fs::rename(
        node.scripts_dir().join("f/fediversity"),
        node.scripts_dir().join(format!("f/{password}")),
    )
    .unwrap();
    let out = Node::command(bootstrap_bin!(), &node.write_config(), &[])
        .output()
        .unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{printed}");
    assert_eq!(
        find_secrets(&printed, &node.secrets()),
        vec!["the node password".to_owned()]
    );
    // And the node's own assertion fails on it.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.assert_no_secrets(&printed)));
    assert!(caught.is_err());
}

#[test]
fn positive_control_tokens_and_prefixes_are_scanned() {
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    let token = node.include_token().unwrap();
    let names = find_secrets(&format!("x {token} y"), &node.secrets());
    assert!(names.iter().any(|n| n.starts_with("Windmill token #")), "{names:?}");
    // The front-end's token too, whole and by its prefix.
    let front = support::stored_token(&node).unwrap();
    let names = find_secrets(&format!("x {front} y"), &node.secrets());
    assert!(names.iter().any(|n| n.starts_with("Windmill token #")), "{names:?}");
    let names = find_secrets(&format!("x {} y", &front[..10]), &node.secrets());
    assert!(
        names.iter().any(|n| n.starts_with("the prefix of Windmill token #")),
        "{names:?}"
    );
    let names = find_secrets(&format!("deleted prefix {}", &token[..10]), &node.secrets());
    assert!(
        names.iter().any(|n| n.starts_with("the prefix of Windmill token #")),
        "{names:?}"
    );
    let names = find_secrets(&node.db.app_dsn(), &node.secrets());
    assert!(
        names.contains(&"the DSN".to_owned()) && names.contains(&"the database password".to_owned()),
        "{names:?}"
    );
}

#[test]
fn debug_logging_through_retries_drops_and_failures_prints_no_secret() {
    let node = support::node();
    let config = node.write_config();
    node.windmill.fail("POST", "/api/auth/login", Fault::Status(502), 1);
    node.windmill
        .fail("POST", "/api/users/tokens/create", Fault::DropAfterHandling, 1);
    node.windmill.fail(
        "POST",
        "/api/w/fediversity/scripts/create",
        Fault::DropBeforeHandling,
        2,
    );
    node.windmill
        .fail("DELETE", "/api/users/tokens/delete/", Fault::Status(500), 1);
    let debug = |extra: &[&str]| {
        let out = Node::command(bootstrap_bin!(), &config, extra)
            .env("BOOTSTRAP_LOG", "debug")
            .output()
            .unwrap();
        node.finish(out)
    };
    let first = debug(&[]);
    assert_eq!(first.code, 0, "{first:?}");
    // Debug is really on: the retries are logged.
    assert!(
        first
            .stderr
            .contains("debug: Windmill POST /api/auth/login: answered 502; retrying"),
        "{first:?}"
    );
    assert!(
        first
            .stderr
            .contains("debug: Windmill POST /api/users/tokens/create: the request failed"),
        "{first:?}"
    );
    let second = debug(&[]);
    assert_eq!(second.code, 0, "{second:?}");
    let check = debug(&["--check"]);
    assert_eq!(check.code, 0, "{check:?}");
    // A failure with every secret in play: the DSN's database refuses, after login failed.
    node.db.execute("UPDATE password SET password_hash = '$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHRzb21lc2FsdA$8VRpVmUuZZx8GOmJ2S2KjNBZUxbD9PbqWkGiD3fIxRo'");
    node.db.execute("REVOKE ALL ON password FROM windmill_user");
    let failed = debug(&[]);
    assert_eq!(failed.code, 3, "{failed:?}");
    assert!(
        failed.stderr.contains(
            "step 2/9 login failed: PostgreSQL: UPDATE password: ERROR 42501: permission denied for table password"
        ),
        "{failed:?}"
    );
    // Every line of every run was scanned in `finish`; the lines were there to scan.
    assert!(node.printed.lock().unwrap().len() > 30);
}

#[test]
fn an_error_that_quotes_a_token_prefix_is_scrubbed() {
    // Windmill's delete answers quote the prefix (`deleted 1 tokens ["QedeJtIbdx*****"] with
    // prefix QedeJtIbdx`, observed): here an error answer to a deletion does the same.
    let node = support::node();
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    // Step 7's impersonation token deletes itself first.
    node.windmill
        .fail("DELETE", "/api/users/tokens/delete/", Fault::StatusQuotingPath(400), 1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    // The answer reached the message, with the prefix replaced (and `finish` scanned the output
    // for every token and its prefix).
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 7/9 openbao failed: Windmill DELETE /api/users/tokens/delete/{prefix} answered 400: Bad request: injected fault for [REDACTED]",
    );
    // Positive control: the call was about the impersonation token, whose prefix the answer
    // quoted.
    let impersonation = node.windmill.impersonations().pop().unwrap();
    assert!(
        node.windmill
            .requests()
            .iter()
            .any(|r| r.method == "DELETE" && r.path.ends_with(&impersonation[..10]))
    );

    // Step 9 deletes an older token of the operator's first (after its impersonation token's own
    // deletion in step 7): the first run's, or the impersonation token the failed run left.
    let mut older = node.windmill.impersonations();
    older.push(support::stored_token(&node).unwrap());
    node.windmill.fail_after(
        "DELETE",
        "/api/users/tokens/delete/",
        1,
        Fault::StatusQuotingPath(400),
        1,
    );
    let mark = node.windmill.requests().len();
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 9/9 revoke failed: Windmill DELETE /api/users/tokens/delete/{prefix} answered 400: Bad request: injected fault for [REDACTED]",
    );
    let refused = node
        .windmill
        .requests_since(mark)
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .nth(1)
        .unwrap();
    assert!(older.iter().any(|t| refused.path.ends_with(&t[..10])), "{refused:?}");
}

#[test]
fn the_impersonation_tokens_never_reach_openbao_or_a_log() {
    let node = support::node();
    for args in [&[][..], &[][..], &["--check"][..]] {
        assert!(node.run(bootstrap_bin!(), args).code <= 1);
    }
    // A run that fails in step 7 after minting, as well.
    node.windmill.fail(
        "POST",
        "/api/w/fediversity/jobs/run/p/f/fediversity/deploy",
        Fault::Status(403),
        1,
    );
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 3);
    // Each run impersonated the operator (the check too): seven tokens, all deleted.
    let impersonations = node.windmill.impersonations();
    assert_eq!(impersonations.len(), 2 + 2 + 1 + 1);
    assert!(impersonations.iter().all(|t| !node.windmill.has_token(t)));
    // In no line printed, as they are, escaped, or by their prefix.
    let secrets: Vec<(String, String)> = impersonations
        .iter()
        .enumerate()
        .flat_map(|(i, t)| {
            [
                (format!("impersonation token #{i}"), t.clone()),
                (format!("the prefix of impersonation token #{i}"), t[..10].to_owned()),
            ]
        })
        .collect();
    let printed = node.printed.lock().unwrap().join("\n");
    assert!(!printed.is_empty());
    assert_eq!(find_secrets(&printed, &secrets), Vec::<String>::new());
    // In no version of the OpenBao secret: each holds a token of the front-end's label.
    let rest = node.bao_path.strip_prefix("secret/").unwrap();
    let (_, meta) = fediversity_testkit::openbao::shared().get(&format!("secret/metadata/{rest}"));
    let versions = meta["data"]["current_version"].as_u64().unwrap();
    assert_eq!(versions, 2, "two runs stored a token");
    let front: Vec<String> = support::labeled(&node, support::FRONT_END);
    for version in 1..=versions {
        let (_, held) = fediversity_testkit::openbao::shared().get(&format!("secret/data/{rest}?version={version}"));
        let value = held["data"]["data"]["value"].as_str().unwrap().to_owned();
        assert!(!impersonations.contains(&value), "version {version}");
        assert!(version < versions || front.contains(&value), "version {version}");
    }
    // Positive control: the scan finds one that is printed, and the node's own scan too.
    let leak = format!("oops {}", impersonations[0]);
    assert_eq!(
        find_secrets(&leak, &secrets),
        vec![
            "impersonation token #0".to_owned(),
            "the prefix of impersonation token #0".to_owned()
        ]
    );
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.assert_no_secrets(&leak)));
    assert!(caught.is_err());
}

/// A node whose password holds what JSON encoders escape differently: a quote, a slash, `<>&`,
/// a non-ASCII letter and an astral character.
fn node_with_an_escapable_password() -> Node {
    let mut node = support::node();
    let password = format!(
        "pw-\u{e4}\"</&>-\u{1F600}-{}",
        fediversity_testkit::servers::random_string(12)
    );
    std::fs::write(node.path().join("admin-password"), &password).unwrap();
    node.password = password;
    node
}

#[test]
fn the_scan_finds_secrets_in_every_json_form_a_server_may_echo() {
    let secret = "pw-\u{e4}\"</&>-\u{1F600}-tail";
    let secrets = vec![("pw".to_owned(), secret.to_owned())];
    // Python's own json.dumps (ensure_ascii, the default), run by the venv's python: the scan's
    // Python form is the real one.
    let out = std::process::Command::new(fediversity_testkit::venv::python())
        .args(["-c", "import json, sys; print(json.dumps(sys.argv[1]))", secret])
        .output()
        .unwrap();
    assert!(out.status.success());
    let python = String::from_utf8(out.stdout).unwrap();
    assert!(
        python.contains("\\u00e4") && python.contains("\\ud83d\\ude00"),
        "{python}"
    );
    assert_eq!(find_secrets(&python, &secrets), vec!["pw"]);
    for (name, encoder) in Encoder::ALL {
        let printed = format!("answered 400: {{\"password\": \"{}\"}}", encoder.encode(secret));
        assert_eq!(
            find_secrets(&printed, &secrets),
            vec!["pw"],
            "the {name} form: {printed}"
        );
    }
    // Negative control: the secret with one character changed is not flagged.
    assert!(find_secrets(&Encoder::PYTHON.encode(&secret.replace('t', "T")), &secrets).is_empty());
}

#[test]
fn an_admin_password_echoed_json_escaped_by_a_server_is_scrubbed() {
    // A 422 that quotes the login request back, its JSON written by serde, Python, PHP, Go or
    // .NET: each escapes the password differently, and none may reach the error line.
    let node = node_with_an_escapable_password();
    for (name, encoder) in Encoder::ALL {
        node.windmill
            .fail("POST", "/api/auth/login", Fault::StatusEchoingBody(422, encoder), 1);
        // `finish` (inside `run`) fails the test if any form of the password is printed.
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 3, "{name}: {run:?}");
        // Positive control: the echo reached the error line (the email beside the password is
        // quoted), with the password replaced.
        assert!(run.stderr.contains("error: step 2/9 login failed: Windmill POST /api/auth/login answered 422: Bad request: cannot process {"), "{name}: {run:?}");
        assert!(
            run.stderr
                .contains("\"email\": \"admin@windmill.dev\", \"password\": \"[REDACTED]\"}"),
            "{name}: {run:?}"
        );
    }
}

#[test]
fn the_default_password_is_scrubbed_like_the_node_password() {
    // --check on a fresh node: the node password is refused, then the default password is tried,
    // and the answer to that login quotes it.
    let mut node = support::node();
    let default = format!("default-pw-{}", fediversity_testkit::servers::random_string(16));
    node.config["windmill"]["default_password"] = json!(default);
    node.extra_secrets.push(("the default password".into(), default));
    node.windmill.fail_after(
        "POST",
        "/api/auth/login",
        1,
        Fault::StatusEchoingBody(422, Encoder::SERDE),
        1,
    );
    let run = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stderr.contains("\"password\": \"[REDACTED]\"}"), "{run:?}");
    // Positive control: it was the second login, with the default password, that was echoed.
    let logins: Vec<_> = node
        .windmill
        .requests()
        .into_iter()
        .filter(|r| r.is("POST", "/api/auth/login"))
        .collect();
    assert_eq!(logins.len(), 2);
    assert!(logins[1].body.contains("default-pw-"));
}

#[test]
fn an_echoed_secret_is_scrubbed_before_a_long_answer_is_cut() {
    // A server text is cut to 300 characters in a message. A long password echoed across that
    // cut must not leave its first part behind, which no scrubbing of the whole password finds.
    let mut node = support::node();
    let password = format!("pw-{}", fediversity_testkit::servers::random_string(400));
    std::fs::write(node.path().join("admin-password"), &password).unwrap();
    node.password = password.clone();
    node.windmill.fail(
        "POST",
        "/api/auth/login",
        Fault::StatusEchoingBody(422, Encoder::SERDE),
        1,
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    let piece = password
        .as_bytes()
        .windows(12)
        .map(|w| std::str::from_utf8(w).unwrap())
        .find(|w| run.stderr.contains(w));
    assert!(
        piece.is_none(),
        "a piece of the password was printed:\n(output withheld: it holds a secret)"
    );
    // Positive control: the echo reached the message, the password replaced before the cut.
    assert!(run.stderr.contains("\"password\": \"[REDACTED]\"}"), "{run:?}");
}
