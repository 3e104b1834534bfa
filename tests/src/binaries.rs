//! The binaries of this workspace (`fediversity-jobenv`, `fediversity-windmill-bootstrap`), for
//! tests of a crate that does not build them (Cargo sets `CARGO_BIN_EXE_*` only for a
//! package's own binaries). The test binaries of the README's `cargo test --workspace` have them
//! built already (jobenv's and the bootstrap's own integration tests need them), so this asks
//! cargo for them with that same build: nothing is rebuilt then. Run alone, the first call builds
//! the workspace's tests first.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The path of the workspace's binary `name`, as `cargo test --workspace --no-run` built it.
pub fn workspace_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Vec<(String, PathBuf)>> = OnceLock::new();
    let built = BUILT.get_or_init(build);
    built
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, path)| path.clone())
        .unwrap_or_else(|| panic!("cargo reports no binary {name}"))
}

fn build() -> Vec<(String, PathBuf)> {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    // Without what cargo set for this test's own run (the package's CARGO_PKG_* and
    // CARGO_MANIFEST_*, its LD_LIBRARY_PATH): build scripts that watch those would otherwise
    // see a changed environment and rebuild.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_CRATE_")
            || name == "LD_LIBRARY_PATH"
        {
            cargo.env_remove(name);
        }
    }
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let out = cargo
        .args(["test", "--workspace", "--locked", "--no-run", "--message-format=json"])
        .current_dir(workspace)
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo");
    assert!(out.status.success(), "cargo test --no-run failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        // The programs themselves, not their unit tests (also "bin" artifacts, with profile.test).
        .filter(|m| {
            m["reason"] == "compiler-artifact" && m["target"]["kind"] == json!(["bin"]) && m["profile"]["test"] == false
        })
        .filter_map(|m| {
            Some((
                m["target"]["name"].as_str()?.to_owned(),
                PathBuf::from(m["executable"].as_str()?),
            ))
        })
        .collect()
}
