//! nixpkgs' local database (`services.windmill.database.createLocally`): the bootstrap writes the
//! superadmin's hash over the Unix socket as the role nixpkgs creates, let in by peer
//! authentication through the pg_ident map the NixOS module adds, with no password anywhere.
//! The DSN, the pg_hba.conf line and the pg_ident.conf lines are the module's own
//! (nixos-module/lib.nix, `localDatabase`, evaluated by real nix-instantiate); the cluster is a
//! real PostgreSQL whose socket authenticates as NixOS' does (`local all all peer`).

use std::path::Path;
use std::process::Command;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::Node;
use fediversity_testkit::openbao::{self, OpenBao};
use fediversity_testkit::postgres::{ADMIN_EMAIL, APP_ROLE, Cluster, SEED_HASH};
use serde_json::{Value, json};

use crate::support;

/// nixpkgs' names: its module's database and user (they must be equal there).
const DATABASE: &str = "windmill";

/// `lib.localDatabase` for nixpkgs' database and role, the bootstrap running as this process's
/// user (root on a node; whoever runs the tests here), on `cluster`'s socket when given.
fn local_database(cluster: Option<&Cluster>) -> Value {
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .unwrap()
        .expect("this process's user has a name")
        .name;
    let socket = cluster.map_or(String::new(), |c| {
        format!(
            "socketDir = {}; port = {};",
            json!(c.socket_dir().display().to_string()),
            c.port
        )
    });
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nixos-module/lib.nix");
    let expr = format!(
        r#"(import {lib}).localDatabase {{ database = "{DATABASE}"; user = "{APP_ROLE}"; bootstrapUser = {user}; {socket} }}"#,
        lib = json!(lib.display().to_string()),
        user = json!(user),
    );
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "--expr", &expr])
        .output()
        .expect("nix-instantiate (apt-get install nix-bin)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A node on a cluster with `first` before nixpkgs' rules and `ident` as pg_ident.conf, whose
/// bootstrap connects with the module's DSN for that cluster (no DSN file).
fn node_on(first: &str, ident: &str) -> Node {
    let cluster = Cluster::start_with_peer_authentication(first, ident);
    let dsn = local_database(Some(cluster))["dsn"].as_str().unwrap().to_owned();
    assert!(!dsn.contains("password"), "{dsn}");
    // An OpenBao token that may read the secret too, as `--check` needs (like support::node).
    let bao = openbao::shared();
    let name = OpenBao::unique("windmill");
    let token = bao.token_with_policy(
        &OpenBao::unique("reader-writer"),
        &format!("path \"secret/data/{name}/apiToken\" {{ capabilities = [\"read\", \"create\", \"update\"] }}\n"),
    );
    let mut node = Node::with_openbao_in(
        cluster.windmill_database_named(DATABASE),
        &bao.addr,
        &format!("secret/{name}/apiToken"),
        &token,
    );
    let windmill = node.config["windmill"].as_object_mut().unwrap();
    windmill.remove("database_url_file");
    windmill.insert("database_url".into(), json!(dsn));
    node
}

#[test]
fn the_bootstrap_writes_the_hash_over_the_socket_as_nixpkgs_role_with_the_modules_peer_map() {
    let lines = local_database(None);
    let node = node_on(
        lines["authentication"].as_str().unwrap(),
        lines["identMap"].as_str().unwrap(),
    );
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(2),
        "fediversity-windmill-bootstrap: step 2/9 login: admin@windmill.dev did not log in with the node password; its hash was written to the password table and it logs in now: updated",
    );
    assert_eq!(run.step_lines().len(), 9, "{run:?}");
    assert_ne!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert!(node.login(&node.password).is_some());
    // The role is NOINHERIT, as in the shared cluster: the update went through its SET ROLE
    // windmill_admin, over the socket.
    let check = node.run(bootstrap_bin!(), &["--check"]);
    assert_eq!(check.code, 0, "{check:?}");
}

#[test]
fn without_the_modules_lines_nixpkgs_peer_authentication_refuses_the_bootstrap() {
    // The control: nixpkgs' rules alone. The bootstrap's user is not the role, so the socket
    // refuses it, and nothing changes.
    let node = node_on("", "");
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 3, "{run:?}");
    support::assert_line(
        run.stderr.lines().last().unwrap(),
        "fediversity-windmill-bootstrap: error: step 2/9 login failed: PostgreSQL: cannot connect: FATAL 28000: Peer authentication failed for user \"windmill\"",
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    assert!(node.include_meta().is_none());
}

#[test]
fn a_dsn_with_a_password_in_the_configuration_itself_is_refused_by_the_module_and_the_bootstrap() {
    let mut node = support::node();
    // The shared cluster's DSN, password included, given in the file instead of a file of its own.
    let dsn = node.db.app_dsn();
    let windmill = node.config["windmill"].as_object_mut().unwrap();
    windmill.remove("database_url_file");
    windmill.insert("database_url".into(), json!(dsn));
    let run = node.run(bootstrap_bin!(), &[]);
    assert_eq!(run.code, 2, "{run:?}");
    support::assert_has_line(
        &run.stderr,
        "[..]windmill.database_url holds a password, and the configuration file is no place for a secret: put that DSN in windmill.database_url_file",
    );
    assert_eq!(node.db.password_hash(ADMIN_EMAIL).as_deref(), Some(SEED_HASH));
    // The module's evaluation refuses the same option before any node runs it.
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nixos-module/lib.nix");
    let expr = format!(
        r#"let lib = import {lib}; d = lib.bootstrapDefaults; in lib.bootstrapProblems {{ bootstrap = d // {{ windmill = d.windmill // {{ databaseUrl = {dsn}; }}; openbao = d.openbao // {{ addr = "http://127.0.0.1:8200"; }}; }}; }}"#,
        lib = json!(lib.display().to_string()),
        dsn = json!(dsn),
    );
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "--expr", &expr])
        .output()
        .expect("nix-instantiate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let problems: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        problems,
        json!([
            "bootstrap.windmill.databaseUrl holds a password, and would be in the world-readable Nix store: put that DSN in a file (bootstrap.windmill.databaseUrlFile); the bootstrap refuses it"
        ])
    );
}
