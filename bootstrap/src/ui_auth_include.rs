//! The nginx include that lets the admin UI act on the superadmin's behalf: one line,
//! `proxy_set_header Authorization "Bearer <token>";`, in `ui_auth.file`, with the configured
//! owner, group and mode (docs/operators/bootstrap.md, step 8 "ui-auth").
//!
//! It is written with [`safe_io::atomic::write`], so nginx never reads it half-written, with the
//! wrong owner or with the wrong mode. What is particular to the include stays here: a file
//! already as wanted is not rewritten (so the module's path unit does not reload nginx for
//! nothing), and the directories of a path under /run (a tmpfs, empty after a reboot) are made
//! as the module's tmpfiles rule makes them.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use safe_io::atomic::{self, Options};
use safe_io::secret::Secret;

use crate::config::UiAuth;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
    Updated,
    /// Same bytes, owner, group and mode: not rewritten.
    Unchanged,
}

/// Writes the include for `token`, unless its directory is writable by others.
pub fn write(ui: &UiAuth, token: &Secret) -> Result<Written> {
    if let Some(why) = unsafe_directory(&ui.file)? {
        return Err(Error::UnsafeDirectory {
            file: ui.file.clone(),
            why,
        });
    }
    write_file(&ui.file, line(token).as_bytes(), ui.uid, ui.gid, ui.mode)
}

/// Why the directory of `file` is no place for the include, or `None` (also when it does not
/// exist yet: [`write()`] makes it 0750). In one that others may write, any local user can
/// replace or remove the include (without the sticky bit), or put a file of theirs under its
/// name while it is missing, as after a reboot (with it): nginx would then send the admins'
/// requests with a header of their choosing. The bootstrap does not change the mode of a
/// directory it did not make (it may be shared, like /tmp): it refuses, and `--check` says so.
pub fn unsafe_directory(file: &Path) -> Result<Option<String>> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() && meta.mode() & 0o002 != 0 => Ok(Some(format!(
            "is in {}, a directory others may write (mode {:04o}): any local user could replace the include",
            dir.display(),
            meta.mode() & 0o7777
        ))),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("cannot look at {}", dir.display()), e)),
    }
}

fn line(token: &Secret) -> String {
    format!("proxy_set_header Authorization \"Bearer {}\";\n", token.expose())
}

/// What the include is now, for `--check`.
pub struct Found {
    /// The token of its one line, when it is exactly the line [`write()`] writes.
    pub token: Option<Secret>,
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

/// The include as it is, or `None` when there is none. Not a regular file, or not the one line
/// this module writes: no token. A file that cannot be read is an error (the check cannot tell).
pub fn read(ui: &UiAuth) -> Result<Option<Found>> {
    let meta = match std::fs::symlink_metadata(&ui.file) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(format!("cannot look at {}", ui.file.display()), e)),
    };
    let token = if meta.is_file() {
        let text = std::fs::read(&ui.file).map_err(|e| Error::io(format!("cannot read {}", ui.file.display()), e))?;
        // The token is never shown: a line that is not ours is reported without its text.
        let text = String::from_utf8(text).unwrap_or_default();
        text.strip_prefix("proxy_set_header Authorization \"Bearer ")
            .and_then(|rest| rest.strip_suffix("\";\n"))
            .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_alphanumeric()))
            .map(Secret::token)
    } else {
        None
    };
    Ok(Some(Found {
        token,
        uid: meta.uid(),
        gid: meta.gid(),
        mode: meta.mode() & 0o7777,
    }))
}

fn write_file(path: &Path, contents: &[u8], uid: u32, gid: u32, mode: u32) -> Result<Written> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        create_dirs(dir, gid)?;
    }
    let existing = std::fs::symlink_metadata(path).ok();
    if let Some(meta) = &existing {
        if meta.is_file()
            && meta.uid() == uid
            && meta.gid() == gid
            && meta.mode() & 0o7777 == mode
            && std::fs::read(path).is_ok_and(|old| old == contents)
        {
            return Ok(Written::Unchanged);
        }
    }
    atomic::write(
        path,
        contents,
        Options {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
        },
    )?;
    Ok(if existing.is_some() {
        Written::Updated
    } else {
        Written::Created
    })
}

/// Creates `dir` and its missing parents. /run is a tmpfs: after a reboot the directory is gone
/// until systemd-tmpfiles (the module's rule) or this makes it again. Each directory made here
/// gets what the module's rule gives the include's: mode 0750, the bootstrap's own user as
/// owner (so that it can write in it without `CAP_DAC_OVERRIDE`) and the include's group (so
/// that nginx can traverse it); nobody else gets in. The mode is set explicitly, as the unit's
/// `UMask=0077` would otherwise leave 0700.
fn create_dirs(dir: &Path, gid: u32) -> Result<()> {
    let mut missing = Vec::new();
    let mut next = Some(dir);
    while let Some(d) = next.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d);
        next = d.parent();
    }
    let uid = nix::unistd::geteuid().as_raw();
    for d in missing.into_iter().rev() {
        let shown = d.display();
        match DirBuilder::new().mode(0o700).create(d) {
            Ok(()) => {}
            // Made meanwhile by someone else (tmpfiles): theirs to set up.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => continue,
            Err(e) => return Err(Error::io(format!("cannot create the directory {shown}"), e)),
        }
        // The group before the mode opens it up, so that no other group ever gets in.
        std::os::unix::fs::chown(d, Some(uid), Some(gid))
            .map_err(|e| Error::io(format!("cannot set the group of {shown}"), e))?;
        std::fs::set_permissions(d, Permissions::from_mode(0o750))
            .map_err(|e| Error::io(format!("cannot set the mode of {shown}"), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_replaces_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/deeper/token.conf");
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        assert_eq!(write_file(&path, b"one", uid, gid, 0o440).unwrap(), Written::Created);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o440);
        // Every directory made is 0750, whatever the umask.
        for made in [dir.path().join("sub"), dir.path().join("sub/deeper")] {
            assert_eq!(
                std::fs::metadata(&made).unwrap().mode() & 0o777,
                0o750,
                "{}",
                made.display()
            );
        }
        assert_eq!(write_file(&path, b"one", uid, gid, 0o440).unwrap(), Written::Unchanged);
        assert_eq!(write_file(&path, b"two", uid, gid, 0o440).unwrap(), Written::Updated);
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // Replaced by rename: a new inode, not the old file rewritten in place.
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), meta.ino());
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("token.conf")]);
    }

    #[test]
    fn the_include_is_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        let ui = UiAuth {
            label: "ui".into(),
            file: dir.path().join("t.conf"),
            owner: String::new(),
            uid,
            group: String::new(),
            gid,
            mode: 0o440,
        };
        assert!(read(&ui).unwrap().is_none());
        write(&ui, &Secret::token("Abc123")).unwrap();
        let found = read(&ui).unwrap().unwrap();
        assert_eq!(
            (
                found.token.as_ref().map(Secret::expose),
                found.uid,
                found.gid,
                found.mode
            ),
            (Some("Abc123"), uid, gid, 0o440)
        );
        // Another line: no token.
        std::fs::write(&ui.file, "proxy_set_header Authorization \"Bearer a;b\";\n").unwrap();
        assert!(read(&ui).unwrap().unwrap().token.is_none());
    }

    #[test]
    fn a_directory_others_may_write_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, Permissions::from_mode(0o1777)).unwrap();
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        let ui = UiAuth {
            label: "ui".into(),
            file: open.join("t.conf"),
            owner: String::new(),
            uid,
            group: String::new(),
            gid,
            mode: 0o440,
        };
        let err = write(&ui, &Secret::token("Abc123")).unwrap_err().to_string();
        assert!(err.contains("a directory others may write (mode 1777)"), "{err}");
        assert!(!ui.file.exists());
        assert_eq!(std::fs::metadata(&open).unwrap().mode() & 0o7777, 0o1777);
        // Control: not writable by others, written.
        std::fs::set_permissions(&open, Permissions::from_mode(0o775)).unwrap();
        assert_eq!(write(&ui, &Secret::token("Abc123")).unwrap(), Written::Created);
    }

    #[test]
    fn a_failure_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("not-a-dir");
        std::fs::write(&blocker, "x").unwrap();
        let err = write_file(&blocker.join("token.conf"), b"new", 0, 0, 0o440).unwrap_err();
        assert!(err.to_string().contains("not-a-dir"), "{err}");
        assert_eq!(std::fs::read(&blocker).unwrap(), b"x");
    }
}
