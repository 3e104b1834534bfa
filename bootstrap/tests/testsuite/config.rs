//! Configuration errors: exit 2, every problem named, no secret shown, nothing touched.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use serde_json::json;

use crate::support;

fn assert_untouched(node: &Node) {
    assert!(node.windmill.requests().is_empty(), "Windmill was contacted");
    assert!(node.include_meta().is_none());
}

#[test]
fn a_missing_config_file_is_exit_2() {
    let node = support::node();
    let out = Node::command(bootstrap_bin!(), &node.path().join("nope.json"), &[])
        .output()
        .unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("error: configuration file") && run.stderr.contains("nope.json cannot be read"),
        "{run:?}"
    );
}

#[test]
fn bad_fields_and_files_are_all_named_with_exit_2() {
    let mut node = support::node();
    node.config["windmill"]["admin_password_file"] = json!(node.path().join("missing-password"));
    node.config["ui_auth"]["group"] = json!("no-such-group-anywhere");
    node.config["ui_auth"]["mode"] = json!("0644");
    node.config["workspace"]["id"] = json!("not a valid id");
    node.config["extra_field"] = json!(1);
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("unknown field `extra_field`"), "{run:?}");
    node.config.as_object_mut().unwrap().remove("extra_field");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    for needle in [
        "error: windmill.admin_password_file",
        "missing-password cannot be read",
        "error: ui_auth.group: no group named \"no-such-group-anywhere\"",
        "error: ui_auth.mode 0644 gives access to others",
        "error: workspace.id \"not a valid id\" is invalid",
    ] {
        assert!(run.stderr.contains(needle), "missing {needle:?}: {run:?}");
    }
    assert_untouched(&node);
}

#[test]
fn an_unparseable_dsn_is_exit_2_without_its_text() {
    let mut node = support::node();
    let bad = format!("{} sslmode=nonsense", node.db.app_dsn());
    std::fs::write(node.path().join("database-url"), &bad).unwrap();
    node.extra_secrets.push(("the bad DSN".into(), bad));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("the DSN cannot be parsed (its text is not shown"),
        "{run:?}"
    );
    assert_untouched(&node);
}

#[test]
fn a_script_tree_with_a_bad_path_is_exit_2() {
    let node = support::node();
    node.write_script("deploy.py", "print('at the top: no Windmill path')\n");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("deploy.py: \"deploy\" is not a Windmill path"),
        "{run:?}"
    );
    assert_untouched(&node);
}

#[test]
fn a_setting_name_is_checked_before_anything_is_sent() {
    // A setting name goes into the API path (`/api/settings/global/<name>`), sent with the
    // superadmin's token: a name like this one would mint a token instead.
    let mut node = support::node();
    for bad in [
        "../../users/tokens/create?x=",
        "Instance_python_version",
        "a/b",
        "a b",
        "_x",
        "1x",
        "\u{e4}",
        "",
    ] {
        node.config["settings"] = json!({"instance_python_version": "3.12", bad: 1});
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 2, "{bad:?}: {run:?}");
        assert!(
            run.stderr.contains(&format!("error: settings: the name {bad:?} is invalid: a lower-case letter, then lower-case letters, digits and _")),
            "{bad:?}: {run:?}"
        );
        assert_untouched(&node);
    }
    // Positive control: a well-formed name other than the default one is read and written.
    node.config["settings"] = json!({"instance_python_version": "3.12", "retention_period_secs": 86400});
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(node.windmill.setting("retention_period_secs"), Some(json!(86400)));
}

#[test]
fn a_url_that_could_carry_a_credential_is_refused_by_field_name_without_its_text() {
    let mut node = support::node();
    // Each URL with the part of it that plays the credential.
    let cases = [
        (
            "windmill",
            "url",
            "http://127.0.0.1:1/?token=query-secret-1",
            "query-secret-1",
            "must not have userinfo, a query or a fragment",
        ),
        (
            "windmill",
            "url",
            "http://127.0.0.1:1/#fragment-secret-2",
            "fragment-secret-2",
            "must not have userinfo, a query or a fragment",
        ),
        (
            "windmill",
            "url",
            "http://user:userinfo-secret-3@127.0.0.1:1",
            "userinfo-secret-3",
            "must not have userinfo, a query or a fragment",
        ),
        (
            "openbao",
            "addr",
            "http://[::1:8200/unparseable-secret-4",
            "unparseable-secret-4",
            "is not an http:// or https:// URL",
        ),
        (
            "openbao",
            "addr",
            "ftp://user:scheme-secret-5@127.0.0.1",
            "scheme-secret-5",
            "is not an http:// or https:// URL",
        ),
    ];
    for (section, field, url, secret, problem) in cases {
        let good = node.config[section][field].clone();
        node.config[section][field] = json!(url);
        node.extra_secrets = vec![
            ("the URL".into(), url.into()),
            ("its secret part".into(), secret.into()),
        ];
        // `finish` (inside `run`) fails the test if the URL or its secret part is printed.
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 2, "{url}: {run:?}");
        assert!(
            run.stderr
                .contains(&format!("error: {section}.{field} {problem} (its text is not shown")),
            "{url}: {run:?}"
        );
        assert_untouched(&node);
        node.config[section][field] = good;
    }
    // The same for an address from the environment, named by its variable.
    node.config["openbao"].as_object_mut().unwrap().remove("addr");
    let url = "http://127.0.0.1:8200/?env-secret-6";
    node.extra_secrets = vec![("the URL".into(), url.into())];
    let out = Node::command(bootstrap_bin!(), &node.write_config(), &[])
        .env("BAO_ADDR", url)
        .output()
        .unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains(
            "error: openbao.addr (from BAO_ADDR) must not have userinfo, a query or a fragment (its text is not shown"
        ),
        "{run:?}"
    );
    assert_untouched(&node);
}

#[test]
fn a_value_of_the_wrong_type_is_named_by_its_field_never_shown() {
    // serde's own message quotes the value (`invalid type: integer `…`, expected a string`):
    // for `windmill.default_password` that is a password, and elsewhere it may be one put in
    // the wrong field.
    let mut node = support::node();
    let cases = [
        (
            "windmill",
            "default_password",
            json!(918273645546372819_u64),
            "windmill.default_password: invalid type, expected a string",
        ),
        (
            "retry",
            "login_attempts",
            json!("misplaced-secret-1"),
            "retry.login_attempts: invalid type, expected u32",
        ),
        (
            "retry",
            "login_attempts",
            json!(-5),
            "retry.login_attempts: invalid value, expected u32",
        ),
        (
            "token",
            "label",
            json!(["misplaced-secret-2"]),
            "token.label: invalid type, expected a string",
        ),
    ];
    for (section, field, value, problem) in cases {
        node.config[section][field] = value.clone();
        // Scanned for as a secret (a short number would also match unrelated text).
        let shown = value.to_string().trim_matches(['"', '[', ']']).to_owned();
        node.extra_secrets = if shown.len() >= 8 {
            vec![("the value".into(), shown)]
        } else {
            Vec::new()
        };
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 2, "{value}: {run:?}");
        assert!(
            run.stderr.contains(&format!(
                "configuration file {} is invalid: {problem}",
                node.config_path().display()
            )),
            "{value}: {run:?}"
        );
        assert_untouched(&node);
        node.config[section].as_object_mut().unwrap().remove(field);
    }
    // A whole section of the wrong type: named, not shown.
    node.config["windmill"] = json!("a-secret-section");
    node.extra_secrets = vec![("the value".into(), "a-secret-section".into())];
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr
            .contains("is invalid: windmill: invalid type, expected struct"),
        "{run:?}"
    );
    // Syntax errors keep serde's position, which quotes nothing.
    std::fs::write(node.config_path(), "{\"windmill\": {\"url\": \"http://x\",}}").unwrap();
    let out = Node::command(bootstrap_bin!(), &node.config_path(), &[])
        .output()
        .unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("is invalid: trailing comma at line 1 column"),
        "{run:?}"
    );
}

#[test]
fn an_invalid_bootstrap_log_level_is_a_configuration_error() {
    let node = support::node();
    let config = node.write_config();
    let out = Node::command(bootstrap_bin!(), &config, &[])
        .env("BOOTSTRAP_LOG", "verbose")
        .output()
        .unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains(
            "error: BOOTSTRAP_LOG is \"verbose\", not a log level: use debug, info, warn or error (empty means info)"
        ),
        "{run:?}"
    );
    assert_untouched(&node);
    // Positive control: an empty value is the default level, and the run goes ahead.
    let out = Node::command(bootstrap_bin!(), &config, &[])
        .env("BOOTSTRAP_LOG", "")
        .output()
        .unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("step 1/9 ready"), "{run:?}");
}

#[test]
fn the_two_token_labels_and_the_scopes_are_checked_before_anything_is_sent() {
    let mut node = support::node();
    let cases = [
        (
            json!({"token": {"label": "same"}, "ui_auth": {"label": "same"}}),
            "error: token.label and ui_auth.label are both \"same\": the two tokens need labels of their own",
        ),
        (
            json!({"ui_auth": {"label": "fediversity"}}),
            "error: token.label and ui_auth.label are both \"fediversity\": the two tokens need labels of their own",
        ),
        (
            json!({"ui_auth": {"label": "session"}}),
            "error: ui_auth.label must not be \"session\": Windmill labels its login sessions \"session\" and the tokens of jobs \"ephemeral-script\"",
        ),
        (
            json!({"token": {"label": "session"}}),
            "error: token.label must not be \"session\": Windmill labels its login sessions \"session\" and the tokens of jobs \"ephemeral-script\"",
        ),
        (
            json!({"token": {"label": " Session "}}),
            "error: token.label must not be \" Session \": Windmill labels its login sessions \"session\" and the tokens of jobs \"ephemeral-script\"",
        ),
        (
            json!({"ui_auth": {"label": "Ephemeral-Script"}}),
            "error: ui_auth.label must not be \"Ephemeral-Script\": Windmill labels its login sessions \"session\" and the tokens of jobs \"ephemeral-script\"",
        ),
        (json!({"ui_auth": {"label": ""}}), "error: ui_auth.label is empty"),
        (
            // With token.revoke_previous off, the operator's older tokens of token.label are
            // kept: a left-over impersonation token (unscoped) would be kept with them.
            json!({"token": {"label": "fediversity-windmill-bootstrap", "revoke_previous": false}}),
            "error: token.label must not be \"fediversity-windmill-bootstrap\": the bootstrap labels the operator's short-lived impersonation tokens so, and revokes every one a run left behind",
        ),
        (
            json!({"token": {"label": "two\nlines"}}),
            "error: token.label must be at most 255 characters without control characters",
        ),
        (
            json!({"token": {"scopes": ["jobs:read", "jobs: write"]}}),
            "error: token.scopes[1] \"jobs: write\" is not a Windmill scope: it has whitespace or a control character",
        ),
        (
            json!({"token": {"scopes": ["*"]}}),
            "error: token.scopes[0] \"*\" is refused: \"*\" is Windmill's scope for everything: previews, script uploads and every other route",
        ),
        (
            json!({"token": {"user_email": "not an email"}}),
            "error: token.user_email \"not an email\" is not an email address",
        ),
        (
            json!({"token": {"user_email": "Admin@windmill.dev"}}),
            "error: token.user_email is the superadmin's (windmill.admin_email): the front-end needs a user of its own, an operator",
        ),
        (
            json!({"token": {"username": "front end"}}),
            "error: token.username \"front end\" is invalid: a letter, then letters, digits and underscores (Windmill's usernames)",
        ),
        (
            json!({"token": {"scopes": ["jobs:run"]}}),
            "error: token.scopes[0] \"jobs:run\" is refused: a run scope without a kind runs previews (code sent with the request): code of the token holder's choosing, run on the worker",
        ),
        (
            json!({"token": {"scopes": ["jobs:run:scripts"]}}),
            "error: token.scopes[0] \"jobs:run:scripts\" is refused: it runs every one of the workspace's scripts, whoever deploys them: list their paths",
        ),
        (
            json!({"token": {"scopes": ["jobs:run:scripts:f/fediversity/*"]}}),
            "error: token.scopes[0] \"jobs:run:scripts:f/fediversity/*\" is refused: a wildcard path covers whatever anyone deploys there later: list the paths",
        ),
        (
            json!({"token": {"scopes": ["scripts:write"]}}),
            "error: token.scopes[0] \"scripts:write\" is refused: it creates and replaces scripts, the deploy script included, whose code the next deploy runs: code of the token holder's choosing, run on the worker",
        ),
        (
            json!({"token": {"scopes": ["flows:write"]}}),
            "error: token.scopes[0] \"flows:write\" is refused: it creates flows, whose inline steps are any code: code of the token holder's choosing, run on the worker",
        ),
        (
            json!({"token": {"scopes": ["varibles:read"]}}),
            "error: token.scopes[0] \"varibles:read\" is not a Windmill scope: it has the domain \"varibles\", which is none of Windmill's ([..])",
        ),
        (
            json!({"token": {"scopes": ["jobs:reed"]}}),
            "error: token.scopes[0] \"jobs:reed\" is not a Windmill scope: it has the action \"reed\", which is none of Windmill's (read, write, delete, run)",
        ),
        (
            json!({"token": {"scopes": [format!("jobs:run:scripts:{}", "f/x/y,".repeat(60))]}}),
            "error: token.scopes[0] is not a Windmill scope: it is 377 characters, more than 256",
        ),
        (
            json!({"token": {"scopes": ["variables:read", "users:read", "resources:read", "schedules:read", "groups:read", "folders:read"]}}),
            "error: token.scopes name every domain the run proves the token's limit with (variables, users, resources, schedules, groups, folders): list fewer, or [] for an unscoped token",
        ),
    ];
    for (patch, problem) in cases {
        let good = node.config.clone();
        for (section, fields) in patch.as_object().unwrap() {
            for (field, value) in fields.as_object().unwrap() {
                node.config[section][field] = value.clone();
            }
        }
        let run = node.run(bootstrap_bin!(), &[]);
        assert_eq!(run.code, 2, "{patch}: {run:?}");
        support::assert_has_line(&run.stderr, &format!("fediversity-windmill-bootstrap: {problem}"));
        assert_untouched(&node);
        node.config = good;
    }
    // Positive control: labels of their own and well-formed scopes run.
    node.config["token"] =
        json!({"label": "front", "scopes": ["jobs:run:scripts:f/fediversity/deploy,f/fediversity/hello", "jobs:read"]});
    node.config["ui_auth"]["label"] = json!("admins");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
}

#[test]
fn the_state_file_must_be_an_absolute_path_and_one_the_bootstrap_wrote() {
    let mut node = support::node();
    node.config["state_file"] = json!("relative/state.json");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    support::assert_has_line(
        &run.stderr,
        "fediversity-windmill-bootstrap: error: state_file relative/state.json must be an absolute file path",
    );
    assert_untouched(&node);

    // A file that is not the state: refused before anything is touched, by --check as by a run.
    let mut node = support::node();
    std::fs::create_dir_all(node.state_path().parent().unwrap()).unwrap();
    std::fs::write(node.state_path(), r#"{"labels": ["session"]}"#).unwrap();
    for args in [&[][..], &["--check"][..]] {
        let run = node.run(bootstrap_bin!(), args);
        assert_eq!(run.code, 3, "{run:?}");
        support::assert_line(
            run.stderr.lines().last().unwrap(),
            &format!(
                "fediversity-windmill-bootstrap: error: state file {}: lists the label \"session\", which the bootstrap never mints under; remove it from the file",
                node.state_path().display()
            ),
        );
        assert_untouched(&node);
    }
    // Positive control: removed, a run writes it afresh; --check never writes it.
    std::fs::remove_file(node.state_path()).unwrap();
    node.config["state_file"] = json!(node.path().join("fresh/state.json"));
    assert_eq!(node.run(bootstrap_bin!(), &["--check"]).code, 1);
    assert!(node.state().is_none());
    assert_eq!(node.run(bootstrap_bin!(), &[]).code, 0);
    assert!(node.state().is_some());
}
