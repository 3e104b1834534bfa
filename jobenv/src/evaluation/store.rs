//! The Nix store's paths, as jobenv checks them without asking Nix: where the store is, whether
//! a path lies in it (at a store path's boundary, after every link is resolved), and whether a
//! text is the path of a derivation. A path that is not a store `.drv` must never reach the run
//! step: nix-shell would parse it as a Nix file.

use std::path::{Path, PathBuf};

/// The store of a Nix built with the default settings.
pub const DEFAULT_STORE_DIR: &str = "/nix/store";

/// The length of a store path's hash part, in Nix's base32.
const HASH_LEN: usize = 32;
/// The longest name part Nix accepts.
const MAX_NAME_LEN: usize = 211;

/// Where the store evaluation writes to is: `/nix/store`, or the `store=` of a `NIX_REMOTE` that
/// names a local store elsewhere (`local?store=/x/store&state=...`). `Err` says why a job cannot
/// tell (a parameter it would have to decode).
pub fn store_dir(nix_remote: Option<&str>) -> Result<String, String> {
    let Some((_, query)) = nix_remote.and_then(|remote| remote.split_once('?')) else {
        return Ok(DEFAULT_STORE_DIR.to_owned());
    };
    match query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("store="))
        .next_back()
    {
        None => Ok(DEFAULT_STORE_DIR.to_owned()),
        Some(dir) if dir.contains('%') => Err("NIX_REMOTE's store= is percent-encoded".to_owned()),
        Some(dir) if !dir.starts_with('/') || dir.len() < 2 || dir.ends_with('/') => {
            Err("NIX_REMOTE's store= is not an absolute directory".to_owned())
        }
        Some(dir) => Ok(dir.to_owned()),
    }
}

/// Whether `name` is a store path's last component: `<32 base32 characters>-<name>`, the name of
/// Nix's characters, not starting with a dot.
pub fn is_store_name(name: &str) -> bool {
    let Some((hash, rest)) = name.split_at_checked(HASH_LEN) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix('-') else {
        return false;
    };
    hash.bytes().all(is_base32)
        && !rest.is_empty()
        && rest.len() <= MAX_NAME_LEN
        && !rest.starts_with('.')
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-._?=".contains(&b))
}

/// Nix's base32 alphabet: digits and lower-case letters but e, o, t and u.
fn is_base32(b: u8) -> bool {
    b.is_ascii_digit() || (b.is_ascii_lowercase() && !b"eotu".contains(&b))
}

/// The store path `path` lies in (`<store>/<hash>-<name>`, without what follows it), if it lies
/// in `store`. Only the text is looked at: resolve links first ([`resolve`]).
pub fn store_path_of(path: &str, store: &str) -> Option<String> {
    let rest = path.strip_prefix(store)?.strip_prefix('/')?;
    let component = rest.split('/').next()?;
    is_store_name(component).then(|| format!("{store}/{component}"))
}

/// Whether `path` is the path of a derivation in `store` (`<store>/<hash>-<name>.drv`, nothing
/// after it); with `store` `None`, in whichever directory it names (the evaluation of a tree
/// outside the store, where jobenv does not place the store itself).
pub fn is_drv_path(path: &str, store: Option<&str>) -> bool {
    let Some((dir, name)) = path.rsplit_once('/') else {
        return false;
    };
    let in_store = match store {
        Some(store) => dir == store,
        None => dir.starts_with('/') && !dir.split('/').any(|c| c == "." || c == ".."),
    };
    in_store && name.ends_with(".drv") && is_store_name(name)
}

/// A control path of the node, with every link resolved (a `DEPLOYMENT_ROOT` may be a link into
/// the store), as the text jobenv evaluates and keys; `Err` names why it cannot be.
pub fn resolve(key: &str, path: &str) -> Result<String, String> {
    let resolved: PathBuf = Path::new(path)
        .canonicalize()
        .map_err(|e| format!("{key} {path} cannot be resolved: {e}"))?;
    resolved
        .into_os_string()
        .into_string()
        .map_err(|_| format!("{key} {path} resolves to a path that is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0c0h1g3qz1rk4dxd2v8gccibd6khq0rb";

    #[test]
    fn a_store_name_is_a_base32_hash_a_dash_and_a_name() {
        assert!(is_store_name(&format!("{HASH}-source")));
        assert!(is_store_name(&format!("{HASH}-web-shell.drv")));
        assert!(is_store_name(&format!("{HASH}-a+b_c?d=e")));
        for bad in [
            format!("{HASH}-"),
            format!("{HASH}source"),
            format!("{HASH}-.hidden"),
            format!("{HASH}-a b"),
            format!("{HASH}-a/b"),
            "0000000000000000000000000000000e-x".to_owned(),
            "0000000000000000000000000000000-x".to_owned(),
            format!("{}-x", HASH.to_uppercase()),
            format!("{HASH}-{}", "n".repeat(212)),
        ] {
            assert!(!is_store_name(&bad), "{bad}");
        }
    }

    #[test]
    fn a_path_lies_in_the_store_at_a_store_path_boundary() {
        let store = "/nix/store";
        assert_eq!(
            store_path_of(&format!("/nix/store/{HASH}-tree"), store),
            Some(format!("/nix/store/{HASH}-tree"))
        );
        assert_eq!(
            store_path_of(&format!("/nix/store/{HASH}-tree/sub/dir"), store),
            Some(format!("/nix/store/{HASH}-tree"))
        );
        for outside in [
            "/nix/store".to_owned(),
            "/nix/store/".to_owned(),
            "/nix/store/x".to_owned(),
            format!("/nix/storeX/{HASH}-tree"),
            format!("/tmp/nix/store/{HASH}-tree"),
            "/srv/deployments".to_owned(),
        ] {
            assert_eq!(store_path_of(&outside, store), None, "{outside}");
        }
    }

    #[test]
    fn only_a_store_derivation_is_a_drv_path() {
        let drv = format!("/nix/store/{HASH}-web-shell.drv");
        assert!(is_drv_path(&drv, Some("/nix/store")));
        assert!(is_drv_path(&drv, None));
        assert!(is_drv_path(&format!("/tmp/x/store/{HASH}-s.drv"), None));
        for bad in [
            format!("/nix/store/{HASH}-web-shell"),
            format!("/nix/store/{HASH}-web-shell.drv/x"),
            format!("/nix/store/sub/{HASH}-web-shell.drv"),
            format!("relative/{HASH}-web-shell.drv"),
            format!("/nix/store/../{HASH}-web-shell.drv"),
            "/etc/passwd.drv".to_owned(),
        ] {
            assert!(!is_drv_path(&bad, Some("/nix/store")), "{bad}");
        }
        assert!(!is_drv_path(&format!("/tmp/x/store/{HASH}-s.drv"), Some("/nix/store")));
        assert!(!is_drv_path(&format!("/a/../b/{HASH}-s.drv"), None));
    }

    #[test]
    fn the_store_dir_is_the_default_or_nix_remotes_store_parameter() {
        assert_eq!(store_dir(None).unwrap(), "/nix/store");
        assert_eq!(store_dir(Some("daemon")).unwrap(), "/nix/store");
        assert_eq!(
            store_dir(Some("local?store=/tmp/s/store&state=/tmp/s/var")).unwrap(),
            "/tmp/s/store"
        );
        assert_eq!(store_dir(Some("local?state=/x")).unwrap(), "/nix/store");
        assert!(store_dir(Some("local?store=%2Ftmp")).is_err());
        assert!(store_dir(Some("local?store=relative")).is_err());
        assert!(store_dir(Some("local?store=/x/")).is_err());
    }
}
