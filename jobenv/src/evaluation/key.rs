//! The key of a cached shell: a SHA-256 of everything its evaluation depends on, as canonical
//! JSON. Two jobs share an entry only if each of these is the same for both:
//!
//! - the tree and the nixpkgs pin, as store paths (links resolved: what evaluation reads), and
//!   the store they are in;
//! - the attribute path (`devShells.<SYSTEM>.<ATTRIBUTE>`) and the arguments nix-shell gives a
//!   function (`inNixShell = true`);
//! - the Nix that evaluates: nix-instantiate's resolved path (on NixOS a store path naming its
//!   version) with its file's identity (device, inode, size, modification time: a package
//!   upgrade in place changes them);
//! - the node's `nix.conf` (`/etc/nix/nix.conf`, its content: `system`, `pure-eval` and the
//!   like change what evaluation gives);
//! - the whole evaluation environment (names and values), but for where Nix keeps temporary and
//!   cached files (`TMPDIR`, `XDG_CACHE_HOME`), which do not change what it yields.
//!
//! The values are hashed, never stored: a node's `NIX_CONFIG` may hold an access token.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The system-wide Nix configuration every Nix reads (its `sysconfdir`, `/etc`, on NixOS and in
/// distributions' packages alike).
pub const NIX_CONF: &str = "/etc/nix/nix.conf";

/// Changes when what a key covers changes: old entries then simply miss.
const FORMAT: u32 = 1;

/// What evaluation depends on, with the tree and the pin resolved.
pub struct Inputs<'a> {
    pub store_dir: &'a str,
    pub root: &'a str,
    pub nixpkgs: &'a str,
    pub attr_path: &'a str,
    pub nix_instantiate: &'a Path,
    pub env: BTreeMap<&'a str, &'a str>,
}

/// Variables of the evaluation environment that do not change what it yields.
pub const NOT_KEYED: [&str; 2] = ["TMPDIR", "XDG_CACHE_HOME"];

#[derive(Serialize)]
struct Canonical<'a> {
    format: u32,
    store_dir: &'a str,
    root: &'a str,
    nixpkgs: &'a str,
    attr_path: &'a str,
    auto_args: [(&'a str, &'a str); 1],
    nix: NixIdentity,
    nix_conf: Option<String>,
    env: BTreeMap<&'a str, &'a str>,
}

#[derive(Serialize)]
struct NixIdentity {
    path: String,
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

/// The key (64 hexadecimal digits); `Err` says what could not be read.
pub fn key(inputs: &Inputs<'_>) -> Result<String, String> {
    let nix = nix_identity(inputs.nix_instantiate)?;
    let nix_conf = match std::fs::read(NIX_CONF) {
        Ok(bytes) => Some(hex(&Sha256::digest(bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{NIX_CONF} cannot be read: {e}")),
    };
    let env = inputs
        .env
        .iter()
        .filter(|(name, _)| !NOT_KEYED.contains(name))
        .map(|(name, value)| (*name, *value))
        .collect();
    let canonical = Canonical {
        format: FORMAT,
        store_dir: inputs.store_dir,
        root: inputs.root,
        nixpkgs: inputs.nixpkgs,
        attr_path: inputs.attr_path,
        auto_args: [("inNixShell", "true")],
        nix,
        nix_conf,
        env,
    };
    let text = serde_json::to_vec(&canonical).expect("the key's inputs serialize");
    Ok(hex(&Sha256::digest(text)))
}

fn nix_identity(program: &Path) -> Result<NixIdentity, String> {
    let shown = program.display();
    let resolved = program
        .canonicalize()
        .map_err(|e| format!("nix-instantiate {shown} cannot be resolved: {e}"))?;
    let meta = resolved
        .metadata()
        .map_err(|e| format!("nix-instantiate {shown} cannot be inspected: {e}"))?;
    Ok(NixIdentity {
        path: resolved.to_string_lossy().into_owned(),
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime: meta.mtime(),
        mtime_nsec: meta.mtime_nsec(),
    })
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `text` is a key, as a file name of the cache must be.
pub fn is_key(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(env: &'a [(&'a str, &'a str)], root: &'a str) -> Inputs<'a> {
        Inputs {
            store_dir: "/nix/store",
            root,
            nixpkgs: "/nix/store/p",
            attr_path: "devShells.x86_64-linux.web",
            nix_instantiate: Path::new("/bin/sh"),
            env: env.iter().copied().collect(),
        }
    }

    #[test]
    fn every_input_but_temporary_and_cache_places_changes_the_key() {
        let base = key(&inputs(&[("A", "1")], "/nix/store/r")).unwrap();
        assert!(is_key(&base), "{base}");
        assert_eq!(base, key(&inputs(&[("A", "1")], "/nix/store/r")).unwrap(), "stable");
        assert_ne!(base, key(&inputs(&[("A", "2")], "/nix/store/r")).unwrap());
        assert_ne!(base, key(&inputs(&[("A", "1"), ("B", "")], "/nix/store/r")).unwrap());
        assert_ne!(base, key(&inputs(&[("A", "1")], "/nix/store/r2")).unwrap());
        let mut other = inputs(&[("A", "1")], "/nix/store/r");
        other.attr_path = "devShells.x86_64-linux.db";
        assert_ne!(base, key(&other).unwrap());
        other = inputs(&[("A", "1")], "/nix/store/r");
        other.nix_instantiate = Path::new("/bin/true");
        assert_ne!(base, key(&other).unwrap());
        assert_eq!(
            base,
            key(&inputs(
                &[("A", "1"), ("TMPDIR", "/t"), ("XDG_CACHE_HOME", "/c")],
                "/nix/store/r"
            ))
            .unwrap()
        );
        other = inputs(&[("A", "1")], "/nix/store/r");
        other.nix_instantiate = Path::new("/nonexistent/nix-instantiate");
        assert!(key(&other).unwrap_err().contains("cannot be resolved"));
    }
}
