//! nix/package.nix builds from a source set that cargo can load: every member of the workspace
//! (`[workspace] members` of Cargo.toml) must be in it, or cargo fails before it compiles
//! anything ("failed to load manifest for workspace member"). And it builds only the node's two
//! programs, so that no bench or test binary lands on the worker's PATH.
//!
//! The package cannot be built here (no nixpkgs in CI), but the file can be evaluated: it is a
//! function of `lib` and `rustPlatform`, so `nix-instantiate --eval` calls it with stand-ins
//! that return their arguments (`lib.fileset.unions` gives the listed paths, as strings;
//! `buildRustPackage` gives its attribute set). The members come from Cargo.toml through Nix's
//! own TOML parser (`builtins.fromTOML`). A second test copies the source set into a temporary
//! directory and has real cargo load the workspace from it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// What nix/package.nix hands to `buildRustPackage`, and the workspace members of Cargo.toml.
fn evaluate() -> Value {
    let root = repo();
    let nix_string = |p: PathBuf| Value::from(p.display().to_string());
    let expr = format!(
        r#"let
             # Stand-ins for the parts of nixpkgs the file uses; only `fileset` matters here.
             lib = {{
               fileset = {{
                 toSource = {{ root, fileset }}: {{ root = toString root; files = fileset; }};
                 unions = map toString;
               }};
               hasInfix = infix: text: builtins.length (builtins.split infix text) > 1;
               optional = cond: x: if cond then [ x ] else [ ];
               licenses.eupl12 = "eupl12";
               platforms.linux = [ ];
             }};
             package = import {package} {{
               inherit lib;
               rustPlatform.buildRustPackage = attrs: attrs;
               cmake = "cmake";
               pkg-config = "pkg-config";
               openssl = "openssl";
             }};
           in {{
             inherit (package) src;
             cargoBuildFlags = package.cargoBuildFlags or null;
             doCheck = package.doCheck or null;
             members = (builtins.fromTOML (builtins.readFile {manifest})).workspace.members;
           }}"#,
        package = nix_string(root.join("nix/package.nix")),
        manifest = nix_string(root.join("Cargo.toml")),
    );
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "--expr", &expr])
        .output()
        .expect("nix-instantiate is on PATH (Debian: apt-get install nix-bin)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// The members (relative to `root`) that no entry of `files` covers: an entry covers a member
/// when it is the member's directory or one of its ancestors (a directory brings in everything
/// below it). The workspace manifest and the lock file must be there too.
fn uncovered(root: &Path, members: &[String], files: &[String]) -> Vec<String> {
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    let mut needed: Vec<String> = vec!["Cargo.toml".into(), "Cargo.lock".into()];
    needed.extend(members.iter().cloned());
    needed
        .into_iter()
        .filter(|member| !files.iter().any(|file| root.join(member).starts_with(file)))
        .collect()
}

#[test]
fn the_source_set_holds_every_workspace_member_and_only_the_two_programs_are_built() {
    let package = evaluate();
    let members = strings(&package["members"]);
    // The walk is not vacuous: the workspace has the five crates it is known to have.
    assert_eq!(members, vec!["jobenv", "bootstrap", "safe-io", "tests", "bench"]);
    let root = PathBuf::from(package["src"]["root"].as_str().unwrap());
    assert_eq!(root, repo());
    let files = strings(&package["src"]["files"]);
    assert_eq!(
        uncovered(&root, &members, &files),
        Vec::<String>::new(),
        "nix/package.nix's file set: {files:?}"
    );

    assert_eq!(
        package["cargoBuildFlags"],
        json!(["-p", "fediversity-jobenv", "-p", "fediversity-windmill-bootstrap"])
    );
    assert_eq!(package["doCheck"], json!(false));
    // The two packages named are the crates of the two programs.
    for (dir, name) in [
        ("jobenv", "fediversity-jobenv"),
        ("bootstrap", "fediversity-windmill-bootstrap"),
    ] {
        let manifest = std::fs::read_to_string(repo().join(dir).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{name}\"")),
            "{dir}/Cargo.toml names {name}"
        );
    }
}

#[test]
fn positive_control_a_member_missing_from_the_source_set_is_caught() {
    let package = evaluate();
    let root = PathBuf::from(package["src"]["root"].as_str().unwrap());
    let files = strings(&package["src"]["files"]);
    let mut members = strings(&package["members"]);
    // A member added to Cargo.toml but not to the file set.
    members.push("new-crate".into());
    assert_eq!(uncovered(&root, &members, &files), vec!["new-crate".to_owned()]);
    // The file set as it was before bench was added to it.
    let without_bench: Vec<String> = files.iter().filter(|f| !f.ends_with("/bench")).cloned().collect();
    assert_eq!(
        uncovered(&root, &strings(&package["members"]), &without_bench),
        vec!["bench".to_owned()]
    );
    // A parent directory covers what is below it.
    assert_eq!(
        uncovered(&root, &members, &[root.display().to_string()]),
        Vec::<String>::new()
    );
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// `cargo metadata --no-deps` in a directory holding only `files` (copied from the repository):
/// cargo loads the workspace manifest and every member's, as a build does first.
fn cargo_loads(files: &[String]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    for file in files {
        let relative = Path::new(file).strip_prefix(repo()).unwrap();
        copy_tree(Path::new(file), &dir.path().join(relative));
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    Command::new(cargo)
        .args(["metadata", "--no-deps", "--offline", "--format-version", "1"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .output()
        .expect("run cargo")
}

#[test]
fn cargo_loads_the_workspace_from_the_source_set_and_fails_without_a_member() {
    let package = evaluate();
    let files = strings(&package["src"]["files"]);
    let out = cargo_loads(&files);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let metadata: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<&str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "fediversity-bench",
            "fediversity-jobenv",
            "fediversity-safe-io",
            "fediversity-testkit",
            "fediversity-windmill-bootstrap"
        ]
    );

    // Positive control: the source set as it was before bench was added fails the same way the
    // Nix build failed.
    let without_bench: Vec<String> = files.iter().filter(|f| !f.ends_with("/bench")).cloned().collect();
    let out = cargo_loads(&without_bench);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("failed to load manifest for workspace member"),
        "{stderr}"
    );
}
