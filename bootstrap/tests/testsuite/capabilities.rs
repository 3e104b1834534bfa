//! The bootstrap under the capabilities its unit leaves it (nixos-module/lib.nix:
//! `CapabilityBoundingSet = CAP_CHOWN CAP_DAC_READ_SEARCH`): root, but without `CAP_FOWNER` or
//! `CAP_DAC_OVERRIDE`. util-linux's `setpriv --bounding-set` drops the rest for the run, as
//! systemd does. The nginx include, owned by another user, must still be written (mode before
//! owner), and the directories it makes must stay writable for it.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use fediversity_testkit::bootstrap_bin;
use fediversity_testkit::node::{Node, ui_gid};
use serde_json::json;

use crate::support;

const UNIT_CAPABILITIES: &str = "--bounding-set=-all,+chown,+dac_read_search";

fn setpriv() -> Command {
    let mut command = Command::new("setpriv");
    command
        .arg(UNIT_CAPABILITIES)
        .arg("--")
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    command
}

fn run_with_unit_capabilities(node: &Node) -> fediversity_testkit::node::Run {
    let config = node.write_config();
    let out = setpriv()
        .arg(bootstrap_bin!())
        .arg("--config")
        .arg(&config)
        .output()
        .expect("setpriv (util-linux)");
    node.finish(out)
}

#[test]
fn positive_control_the_bounding_set_takes_cap_fowner_away() {
    // What made the old order (owner, then mode) fail: root without CAP_FOWNER may not change
    // the mode of a file another user owns. Checked the same way, with chmod(1).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("owned-by-nobody");
    std::fs::write(&file, "x").unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
    std::os::unix::fs::chown(&file, Some(nobody), None).unwrap();
    let out = setpriv().args(["chmod", "0440"]).arg(&file).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without the bounding set, root may.
    assert!(Command::new("chmod").arg("0440").arg(&file).status().unwrap().success());
}

#[test]
fn the_include_gets_another_owner_under_the_units_capabilities() {
    let mut node = support::node();
    node.config["ui_auth"]["owner"] = json!("nobody");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
    // The directory as the module's tmpfiles rule makes it: root, the include's group, 0750.
    let dir = node.include_path().parent().unwrap().to_owned();
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(0), Some(ui_gid())).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o750)).unwrap();

    let run = run_with_unit_capabilities(&node);
    assert_eq!(run.code, 0, "{run:?}");
    support::assert_line(
        run.step_line(8),
        &format!(
            "fediversity-windmill-bootstrap: step 8/9 ui-auth: {} (nobody:postgres 0440) holds the new token labeled fediversity-ui: created",
            node.include_path().display()
        ),
    );
    assert_eq!(node.include_owner_group_mode(), Some((nobody, ui_gid(), 0o440)));

    // A second run replaces the include (a new token) with the same caps.
    let first = node.include_token().unwrap();
    let run = run_with_unit_capabilities(&node);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.step_line(8).ends_with(": updated"), "{run:?}");
    assert_ne!(node.include_token().unwrap(), first);
    assert_eq!(node.include_owner_group_mode(), Some((nobody, ui_gid(), 0o440)));
}

#[test]
fn a_missing_include_directory_is_made_so_that_the_bootstrap_can_still_write_in_it() {
    // After a reboot before tmpfiles ran (or with another ui_auth.file): the bootstrap makes the
    // directories, owned by itself so that it needs no CAP_DAC_OVERRIDE to write there.
    let mut node = support::node();
    node.config["ui_auth"]["owner"] = json!("nobody");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();

    let run = run_with_unit_capabilities(&node);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.step_line(8).ends_with(": created"), "{run:?}");
    assert_eq!(node.include_owner_group_mode(), Some((nobody, ui_gid(), 0o440)));
    // The directories it made (`run/` and `run/windmill-ui-auth/`): the bootstrap's own
    // (root), the include's group, 0750.
    for dir in [
        node.path().join("run"),
        node.include_path().parent().unwrap().to_owned(),
    ] {
        let meta = std::fs::metadata(&dir).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (0, ui_gid(), 0o750),
            "{}",
            dir.display()
        );
    }
    let run = run_with_unit_capabilities(&node);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.step_line(8).ends_with(": updated"), "{run:?}");
}
