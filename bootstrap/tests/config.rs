//! Configuration errors: exit 2, every problem named, no secret shown, nothing touched.

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use serde_json::json;

fn assert_untouched(node: &Node) {
    assert!(node.windmill.requests().is_empty(), "Windmill was contacted");
    assert!(node.include_meta().is_none());
}

#[test]
fn a_missing_config_file_is_exit_2() {
    let node = Node::new();
    let out = Node::command(bootstrap_bin!(), &node.path().join("nope.json"), &[]).output().unwrap();
    let run = node.finish(out);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("error: configuration file") && run.stderr.contains("nope.json cannot be read"), "{run:?}");
}

#[test]
fn bad_fields_and_files_are_all_named_with_exit_2() {
    let mut node = Node::new();
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
    let mut node = Node::new();
    let bad = format!("{} sslmode=nonsense", node.db.app_dsn());
    std::fs::write(node.path().join("database-url"), &bad).unwrap();
    node.extra_secrets.push(("the bad DSN".into(), bad));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("the DSN cannot be parsed (its text is not shown"), "{run:?}");
    assert_untouched(&node);
}

#[test]
fn a_script_tree_with_a_bad_path_is_exit_2() {
    let node = Node::new();
    node.write_script("deploy.py", "print('at the top: no Windmill path')\n");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("deploy.py: \"deploy\" is not a Windmill path"), "{run:?}");
    assert_untouched(&node);
}
