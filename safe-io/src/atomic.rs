//! Replacing a file so that no reader ever sees it half-written, or with the wrong mode or owner:
//! a temporary file in the same directory (created 0600, so nobody else can open it meanwhile),
//! the contents, then the mode, then the owner and group, `fsync`, `rename` over the target, and
//! `fsync` of the directory so that the rename itself survives a crash. On any error the
//! temporary file is removed and the previous file stays as it was.
//!
//! Why the mode before the owner: under a systemd unit with only `CAP_CHOWN` (no `CAP_FOWNER`),
//! root may not change the mode of a file it no longer owns, so the mode is set while the file is
//! still the writer's own, and the owner last.

use std::fs::{File, Permissions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::{Error, Result};

/// What the new file gets beyond its contents. The default is a plain write: mode 0600 (the
/// temporary file's), owned by the writer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// The file's permission bits (e.g. `0o440`).
    pub mode: Option<u32>,
    /// The owner's user id.
    pub uid: Option<u32>,
    /// The group id.
    pub gid: Option<u32>,
}

/// Replaces `path` (in an existing directory) with `contents`, see the module comment.
pub fn write(path: &Path, contents: &[u8], options: Options) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Dropped on any early return: the temporary file is removed.
    let mut temp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(0o600))
        .tempfile_in(dir)
        .map_err(fail("create a temporary file beside", path))?;
    let file: &mut File = temp.as_file_mut();
    file.write_all(contents)
        .map_err(fail("write a temporary file beside", path))?;
    if let Some(mode) = options.mode {
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(fail("set the mode of the new", path))?;
    }
    if options.uid.is_some() || options.gid.is_some() {
        std::os::unix::fs::fchown(&*file, options.uid, options.gid).map_err(fail("set the owner of the new", path))?;
    }
    file.sync_all().map_err(fail("sync the new", path))?;
    temp.persist(path).map_err(|e| Error::Write {
        doing: "rename the new file to",
        path: path.to_owned(),
        source: e.error,
    })?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(fail("sync the directory", dir))
}

/// The error of one step of [`write`].
fn fail(doing: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_owned();
    move |source| Error::Write { doing, path, source }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_plain_write_creates_then_replaces_by_rename_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.json");
        write(&path, b"one", Options::default()).unwrap();
        let first = std::fs::metadata(&path).unwrap();
        assert_eq!(first.mode() & 0o7777, 0o600);
        write(&path, b"two", Options::default()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // A new inode: readers holding the old file still read "one", never a mix.
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), first.ino());
        assert_eq!(names(dir.path()), ["result.json"]);
    }

    #[test]
    fn mode_and_owner_are_set_before_the_file_appears() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.conf");
        let (uid, gid) = (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw());
        write(
            &path,
            b"x",
            Options {
                mode: Some(0o440),
                uid: Some(uid),
                gid: Some(gid),
            },
        )
        .unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.mode() & 0o7777, meta.uid(), meta.gid()), (0o440, uid, gid));
        // A 0440 file is replaced all the same: the rename does not need to write it.
        write(
            &path,
            b"y",
            Options {
                mode: Some(0o440),
                ..Options::default()
            },
        )
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"y");
    }

    #[test]
    fn a_failure_removes_the_temporary_file_and_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token.conf");
        write(&path, b"old", Options::default()).unwrap();
        // Renaming a file over a directory fails: everything before the rename has happened.
        let blocked = dir.path().join("a-directory");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("inside"), "x").unwrap();
        let error = write(&blocked, b"new", Options::default()).unwrap_err().to_string();
        assert!(
            error.starts_with("cannot rename the new file to ") && error.contains("a-directory"),
            "{error}"
        );
        assert_eq!(names(dir.path()), ["a-directory", "token.conf"]);
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        // A missing directory is named too.
        let error = write(&dir.path().join("missing/x"), b"new", Options::default())
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("cannot create a temporary file beside ") && error.contains("missing/x"),
            "{error}"
        );
    }
}
