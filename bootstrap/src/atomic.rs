//! Writing a file that holds a secret so that no reader ever sees it half-written, with the
//! wrong owner or with the wrong mode (../shared/reference/openbao-and-services.md §5.2): a temp
//! file in the same directory (created 0600), the contents, `fchmod` then `fchown`, `fsync`,
//! then `rename` over the target and `fsync` of the directory. On any error the temp file is
//! removed and the previous file stays as it was.
//!
//! The order of `fchmod` and `fchown` matters under the unit's capabilities (only `CAP_CHOWN`
//! and `CAP_DAC_READ_SEARCH`): changing the mode of a file someone else owns needs
//! `CAP_FOWNER`, so the mode is set while the file is still the bootstrap's own, and the owner
//! last.

use std::fs::{DirBuilder, File, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Created,
    Updated,
    /// Same bytes, owner, group and mode: not rewritten.
    Unchanged,
}

pub fn write(path: &Path, contents: &[u8], uid: u32, gid: u32, mode: u32) -> Result<Written> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let shown = path.display();
    if !dir.exists() {
        create_dirs(dir, gid)?;
    }
    let existing = std::fs::symlink_metadata(path).ok();
    if let Some(meta) = &existing {
        if meta.is_file()
            && meta.uid() == uid
            && meta.gid() == gid
            && meta.mode() & 0o7777 == mode
            && std::fs::read(path).map(|old| old == contents).unwrap_or(false)
        {
            return Ok(Written::Unchanged);
        }
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(|e| Error::io(format!("cannot create a temporary file beside {shown}"), e))?;
    let file: &mut File = temp.as_file_mut();
    file.write_all(contents).map_err(|e| Error::io(format!("cannot write a temporary file beside {shown}"), e))?;
    // Mode and owner before the rename: the file appears under its name already right. The
    // mode first, while the file is still ours (see the module comment).
    file.set_permissions(Permissions::from_mode(mode)).map_err(|e| Error::io(format!("cannot set the mode of the new {shown}"), e))?;
    std::os::unix::fs::fchown(&*file, Some(uid), Some(gid))
        .map_err(|e| Error::io(format!("cannot set the owner of the new {shown}"), e))?;
    file.sync_all().map_err(|e| Error::io(format!("cannot sync the new {shown}"), e))?;
    temp.persist(path).map_err(|e| Error::io(format!("cannot rename the new file to {shown}"), e.error))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("cannot sync the directory {}", dir.display()), e))?;
    Ok(if existing.is_some() { Written::Updated } else { Written::Created })
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
        std::os::unix::fs::chown(d, Some(uid), Some(gid)).map_err(|e| Error::io(format!("cannot set the group of {shown}"), e))?;
        std::fs::set_permissions(d, Permissions::from_mode(0o750)).map_err(|e| Error::io(format!("cannot set the mode of {shown}"), e))?;
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
        assert_eq!(write(&path, b"one", uid, gid, 0o440).unwrap(), Written::Created);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o440);
        // Every directory made is 0750, whatever the umask.
        for made in [dir.path().join("sub"), dir.path().join("sub/deeper")] {
            assert_eq!(std::fs::metadata(&made).unwrap().mode() & 0o777, 0o750, "{}", made.display());
        }
        assert_eq!(write(&path, b"one", uid, gid, 0o440).unwrap(), Written::Unchanged);
        assert_eq!(write(&path, b"two", uid, gid, 0o440).unwrap(), Written::Updated);
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // Replaced by rename: a new inode, not the old file rewritten in place.
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), meta.ino());
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("token.conf")]);
    }

    #[test]
    fn a_failure_leaves_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("not-a-dir");
        std::fs::write(&blocker, "x").unwrap();
        let err = write(&blocker.join("token.conf"), b"new", 0, 0, 0o440).unwrap_err();
        assert!(err.to_string().contains("not-a-dir"), "{err}");
        assert_eq!(std::fs::read(&blocker).unwrap(), b"x");
    }
}
