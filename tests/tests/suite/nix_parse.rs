//! Every `.nix` file of the repository parses (`nix-instantiate --parse`, Debian's nix-bin):
//! the flake, default.nix, the NixOS module and its VM test, the package expressions, the
//! module's test harness and the example. Evaluating most of them needs nixpkgs, which CI does
//! not have; nix_module.rs evaluates the module without it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn nix_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name();
        if entry.file_type().unwrap().is_dir() {
            if name != "target" && name != ".git" {
                nix_files(&path, found);
            }
        } else if path.extension().is_some_and(|e| e == "nix") {
            found.push(path);
        }
    }
}

fn parse(path: &Path) -> std::process::Output {
    Command::new("nix-instantiate")
        .arg("--parse")
        .arg(path)
        .output()
        .expect("nix-instantiate is on PATH (Debian: apt-get install nix-bin)")
}

#[test]
fn every_nix_file_parses() {
    let root = repo();
    let mut files = Vec::new();
    nix_files(&root, &mut files);
    files.sort();
    let relative: Vec<String> = files
        .iter()
        .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    // The walk finds what it must (a walk that found nothing would pass vacuously).
    for expected in [
        "default.nix",
        "flake.nix",
        "nix/package.nix",
        "nix/scripts.nix",
        "nixos-module/default.nix",
        "nixos-module/lib.nix",
        "nixos-module/test.nix",
        "tests/nix/module-harness.nix",
        "examples/default.nix",
    ] {
        assert!(
            relative.iter().any(|r| r == expected),
            "{expected} not found in {relative:?}"
        );
    }
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let out = parse(path);
            (!out.status.success()).then(|| format!("{}: {}", path.display(), String::from_utf8_lossy(&out.stderr)))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_file_that_does_not_parse_is_caught() {
    // Positive control for the test above.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.nix");
    std::fs::write(&broken, "{ a = 1; b = ; }\n").unwrap();
    let out = parse(&broken);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("syntax error"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
