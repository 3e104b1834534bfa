//! A directory of the state directory, held by its descriptor (the journal's, `record`, and the
//! shell cache's, `evaluation`): every file jobenv opens, writes,
//! renames or deletes there is named relative to that descriptor, and never reached through a
//! link.
//!
//! Why: the state directory belongs to the worker's user, and so to every deploy program, while
//! jobenv keeps its journal there. jobenv itself runs there as that user (root becomes it first:
//! see `record`'s `owner`), so a program can never steer it to a file of root's; but it can to
//! the worker's own files (`locks/job-x.lock -> ~/.ssh/id_ed25519`), or hang or flood the
//! jobenv that reads what it planted. A path is resolved anew at each call, through whatever
//! that user put there meanwhile; a descriptor names the one directory that was checked.
//!
//! - A subdirectory is opened `O_DIRECTORY | O_NOFOLLOW`: a link or a file in its place is
//!   refused, and swapping it afterwards redirects nothing.
//! - A file is opened `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC` and must then be a regular file with
//!   one link: a FIFO would hang a reader, a device feed one forever, a hard link make a write
//!   land in a file elsewhere (where `fs.protected_hardlinks` is off). What is read is bounded
//!   ([`MAX_READ`]).
//! - A file is replaced by a new one written beside it (`O_EXCL`) and renamed over it, both
//!   relative to the descriptor: atomic, and inside the directory that was checked.
//! - A name is one path component.
//!
//! Errors name the file by its path, escaped ([`shown_path`]): a file name there can hold a
//! newline and a forged log line.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;

use crate::error::shown_path;

/// The most jobenv reads of one file in the state directory. The largest file it writes there is
/// a journal entry: a few KiB (one attempt is a few hundred bytes, and a job id has few: Windmill
/// runs a job at most three times, a front-end resubmits an interrupted one now and then). 1 MiB
/// leaves room for thousands of attempts, and is little for jobenv to hold in memory however many
/// planted files there are.
pub const MAX_READ: u64 = 1 << 20;

/// A directory of the state directory, by descriptor; `path` only names it in messages.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// The state directory itself, at its configured path. That path is the node's, not the
    /// worker's user's (it lies in a directory of root's), and it may be a link: systemd's
    /// `StateDirectory=` with `DynamicUser=` makes it one.
    pub fn open(path: &Path) -> io::Result<Dir> {
        if let Some(fd) = pinned(path) {
            return Ok(Dir {
                fd: fd.map_err(|e| failed_io("open", path, e))?,
                path: path.to_owned(),
            });
        }
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| failed("open", path, errno))?;
        // Root is never in a state directory of another user's: it became that user first
        // (`record::owner`). A path that leads to one only now (swapped since) is refused, so
        // that what that user plants there never meets root.
        let stat = nix::sys::stat::fstat(&fd).map_err(|errno| failed("inspect", path, errno))?;
        let root = nix::unistd::geteuid().is_root();
        // Nor is root in one of its own that another user can change (rename, plant, link in):
        // that user would meet root again there.
        let writers = match stat.st_mode {
            mode if mode & 0o002 != 0 => Some("everyone may".to_owned()),
            mode if mode & 0o020 != 0 && stat.st_gid != 0 => Some(format!("group {} may", stat.st_gid)),
            _ => None,
        };
        if let Some(writers) = writers.filter(|_| root && stat.st_uid == 0) {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to root, and {writers} write it: jobenv as root uses a state directory of root's only if no one else can change it (give it to the worker's user, whom jobenv then becomes, or take that write permission away)",
                    shown_path(path)
                ),
            ));
        }
        if stat.st_uid != 0 && root {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to uid {}, and jobenv runs as root: it becomes the owner of a state directory before it opens it, and the directory changed since",
                    shown_path(path),
                    stat.st_uid
                ),
            ));
        }
        Ok(Dir {
            fd,
            path: path.to_owned(),
        })
    }

    /// The subdirectory `name`, never through a link. With `create`, made with that mode when
    /// missing; without, `None` when missing.
    pub fn subdir(&self, name: &str, create: Option<u32>) -> io::Result<Option<Dir>> {
        let path = self.path_of(name)?;
        if let Some(mode) = create {
            match nix::sys::stat::mkdirat(&self.fd, name, Mode::from_bits_truncate(mode)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(errno) => return Err(failed("create", &path, errno)),
            }
        }
        match nix::fcntl::openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(Dir { fd, path })),
            Err(Errno::ENOENT) if create.is_none() => Ok(None),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                let link = self
                    .stat(name)
                    .ok()
                    .flatten()
                    .is_some_and(|stat| not_plain(&stat) == Some(LINK));
                Err(refused(&path, if link { LINK } else { "it is not a directory" }))
            }
            Err(errno) => Err(failed("open", &path, errno)),
        }
    }

    /// A second descriptor of the same directory, for what outlives its borrower.
    pub fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
            path: self.path.clone(),
        })
    }

    /// Its owner (uid).
    pub fn owner(&self) -> io::Result<u32> {
        Ok(nix::sys::stat::fstat(self).map_err(io::Error::from)?.st_uid)
    }

    /// `sub`, a directory of this one's, if it belongs to this one's owner: another user could
    /// change what is in it under the owner's jobenv.
    pub fn owned_alike(&self, sub: Dir) -> io::Result<Dir> {
        let (owner, sub_owner) = (self.owner()?, sub.owner()?);
        if sub_owner != owner {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to uid {sub_owner}, not to the state directory's owner (uid {owner})",
                    shown_path(sub.path())
                ),
            ));
        }
        Ok(sub)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in this directory, for messages; an error if `name` is not one plain
    /// path component.
    pub fn path_of(&self, name: &str) -> io::Result<PathBuf> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a file name", crate::error::name(name)),
            ));
        }
        Ok(self.path.join(name))
    }

    /// `name`'s whole content, or `None` if it is missing. Refused: a link, anything but a
    /// regular file of one link, and more than [`MAX_READ`] bytes.
    pub fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.read_with_status(name)?.map(|(bytes, _)| bytes))
    }

    /// [`Dir::read`], with the status of the file that was read (its owner, say), taken from the
    /// open file: no other file can have taken its place in between.
    pub fn read_with_status(&self, name: &str) -> io::Result<Option<(Vec<u8>, FileStat)>> {
        let Some((file, stat)) = self.open_file(name, OFlag::O_RDONLY)? else {
            return Ok(None);
        };
        let too_large = || {
            refused(
                &self.path.join(name),
                &format!("it is larger than {} KiB", MAX_READ / 1024),
            )
        };
        if stat.st_size as u64 > MAX_READ {
            return Err(too_large());
        }
        let mut bytes = Vec::with_capacity(stat.st_size as usize);
        // Bounded again: the file may grow while it is read.
        (&file)
            .take(MAX_READ + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| failed_io("read", &self.path.join(name), e))?;
        if bytes.len() as u64 > MAX_READ {
            return Err(too_large());
        }
        Ok(Some((bytes, stat)))
    }

    /// `name` open for reading and writing, as [`Dir::read`] checks it; created (mode 0600) if
    /// missing and `create`, else `None`.
    pub fn open_rw(&self, name: &str, create: bool) -> io::Result<Option<File>> {
        let flags = if create {
            OFlag::O_RDWR | OFlag::O_CREAT
        } else {
            OFlag::O_RDWR
        };
        Ok(self.open_file(name, flags)?.map(|(file, _)| file))
    }

    fn open_file(&self, name: &str, flags: OFlag) -> io::Result<Option<(File, FileStat)>> {
        let path = self.path_of(name)?;
        let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = match nix::fcntl::openat(&self.fd, name, flags, Mode::from_bits_truncate(0o600)) {
            Ok(fd) => File::from(fd),
            Err(Errno::ENOENT) => return Ok(None),
            // A link; or a FIFO without a reader (opened for writing), a directory (for writing).
            Err(Errno::ELOOP | Errno::ENXIO | Errno::EISDIR) => {
                return Err(refused(&path, self.what_is(name).unwrap_or("not a regular file")));
            }
            Err(errno) => return Err(failed("open", &path, errno)),
        };
        let stat = nix::sys::stat::fstat(&file).map_err(|errno| failed("inspect", &path, errno))?;
        if let Some(what) = not_plain(&stat) {
            return Err(refused(&path, what));
        }
        Ok(Some((file, stat)))
    }

    /// What `name` is, when that is why it is refused.
    fn what_is(&self, name: &str) -> Option<&'static str> {
        let stat = self.stat(name).ok()??;
        not_plain(&stat)
    }

    /// `name`'s own status (a link's, not its target's), or `None` if it is missing.
    pub fn stat(&self, name: &str) -> io::Result<Option<FileStat>> {
        let path = self.path_of(name)?;
        match nix::sys::stat::fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(failed("inspect", &path, errno)),
        }
    }

    /// Deletes `name` (a link itself, never its target); false if it was missing.
    pub fn remove(&self, name: &str) -> io::Result<bool> {
        let path = self.path_of(name)?;
        match nix::unistd::unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(errno) => Err(failed("delete", &path, errno)),
        }
    }

    /// Replaces `name` with `bytes`: a new file beside it (mode 0600), renamed
    /// over it, so a reader sees the old file or the new one, never a torn one. With `sync`, the
    /// file and the rename are synced to disk too: a crash keeps one of them whole.
    pub fn write_atomically(&self, name: &str, bytes: &[u8], sync: bool) -> io::Result<()> {
        let path = self.path_of(name)?;
        let (temp, file) = self.create_temp(name)?;
        let written = (|| {
            (&file).write_all(bytes)?;
            if sync {
                file.sync_all()?;
            }
            nix::fcntl::renameat(&self.fd, temp.as_str(), &self.fd, name).map_err(io::Error::from)
        })();
        if let Err(error) = written {
            let _ = nix::unistd::unlinkat(&self.fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(failed_io("write", &path, error));
        }
        if sync {
            nix::unistd::fsync(&self.fd).map_err(|errno| failed("sync the directory of", &path, errno))?;
        }
        Ok(())
    }

    /// Creates `name` with `bytes` (mode 0600) unless it exists: written and
    /// synced beside it, then renamed into place only where nothing has the name (so of two
    /// processes that make it at once, one wins and the other reads its file). False when it
    /// existed.
    pub fn create_new(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        let path = self.path_of(name)?;
        let (temp, file) = self.create_temp(name)?;
        let written = (|| {
            (&file).write_all(bytes)?;
            file.sync_all()?;
            let flags = nix::fcntl::RenameFlags::RENAME_NOREPLACE;
            match nix::fcntl::renameat2(&self.fd, temp.as_str(), &self.fd, name, flags) {
                Ok(()) => Ok(true),
                Err(Errno::EEXIST) => Ok(false),
                // A file system without RENAME_NOREPLACE: a hard link fails alike where the
                // name exists (the file has two links for a moment, until the temporary goes).
                Err(Errno::EINVAL) => {
                    match nix::unistd::linkat(&self.fd, temp.as_str(), &self.fd, name, AtFlags::empty()) {
                        Ok(()) => Ok(true),
                        Err(Errno::EEXIST) => Ok(false),
                        Err(errno) => Err(io::Error::from(errno)),
                    }
                }
                Err(errno) => Err(io::Error::from(errno)),
            }
        })();
        // Gone already when it was renamed; otherwise (a link made, or nothing) removed now.
        let _ = nix::unistd::unlinkat(&self.fd, temp.as_str(), UnlinkatFlags::NoRemoveDir);
        let created = written.map_err(|error| failed_io("write", &path, error))?;
        if created {
            nix::unistd::fsync(&self.fd).map_err(|errno| failed("sync the directory of", &path, errno))?;
        }
        Ok(created)
    }

    /// A new file `.<name>.<pid>.<n>.tmp`, made here and nowhere else (`O_EXCL`).
    fn create_temp(&self, name: &str) -> io::Result<(String, File)> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        loop {
            let temp = format!(
                ".{name}.{}.{}.tmp",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            match nix::fcntl::openat(&self.fd, temp.as_str(), flags, Mode::from_bits_truncate(0o600)) {
                Ok(fd) => return Ok((temp, File::from(fd))),
                // One left by an earlier process of the same pid.
                Err(Errno::EEXIST) => continue,
                Err(errno) => return Err(failed("create a temporary file in", &self.path, errno)),
            }
        }
    }

    /// The names in this directory (`.` and `..` aside), read through a descriptor of its own.
    pub fn names(&self) -> io::Result<Vec<OsString>> {
        let mut dir = nix::dir::Dir::openat(
            &self.fd,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| failed("list", &self.path, errno))?;
        let mut names = Vec::new();
        for entry in dir.iter() {
            let entry = entry.map_err(|errno| failed("list", &self.path, errno))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(name).to_owned());
            }
        }
        Ok(names)
    }

    /// `name` as messages show it: its whole path, escaped.
    pub fn shown(&self, name: &OsStr) -> String {
        shown_path(&self.path.join(name))
    }
}

/// The state directory as root opened it before it became the directory's owner
/// ([`super::owner`]), by the path it was given.
static PINNED: std::sync::OnceLock<(PathBuf, OwnedFd)> = std::sync::OnceLock::new();

/// From now on, [`Dir::open`] of `path` is `fd`'s directory: the one whose owner this process
/// became, whatever `path` leads to later, and also where the owner cannot follow `path` (a
/// directory of root's alone on the way: systemd's `/var/lib/private/` for `DynamicUser=`). A
/// descriptor of a directory lets its holder do nothing its own rights do not: each name looked
/// up through it is checked against them. Once per process.
pub fn pin(path: &Path, fd: OwnedFd) {
    let _ = PINNED.set((path.to_owned(), fd));
}

fn pinned(path: &Path) -> Option<io::Result<OwnedFd>> {
    let (pinned, fd) = PINNED.get()?;
    (pinned == path).then(|| fd.try_clone())
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

const LINK: &str = "it is a symbolic link";

/// Why a file of this status is not one jobenv reads or writes, if it is not.
fn not_plain(stat: &FileStat) -> Option<&'static str> {
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    match kind {
        SFlag::S_IFLNK => Some(LINK),
        SFlag::S_IFDIR => Some("it is a directory"),
        SFlag::S_IFREG if stat.st_nlink > 1 => {
            Some("it has more than one link (a hard link can lead to a file outside the state directory)")
        }
        SFlag::S_IFREG => None,
        _ => Some("it is not a regular file"),
    }
}

/// The status time `mtime` of a file, as a time.
pub fn modified(stat: &FileStat) -> std::time::SystemTime {
    let since = std::time::Duration::new(
        stat.st_mtime.max(0) as u64,
        stat.st_mtime_nsec.clamp(0, 999_999_999) as u32,
    );
    std::time::UNIX_EPOCH + since
}

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is refused: {why}", shown_path(path)),
    )
}

fn failed(doing: &str, path: &Path, errno: Errno) -> io::Error {
    failed_io(doing, path, errno.into())
}

/// The error of one step on `path`, of the kind the step's was (a missing file stays
/// `NotFound`).
fn failed_io(doing: &str, path: &Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("cannot {doing} {}: {error}", shown_path(path)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A temporary directory, held open (the directory's life is the `TempDir`'s).
    pub(crate) fn dir() -> (tempfile::TempDir, Dir) {
        let temp = tempfile::tempdir().unwrap();
        let dir = Dir::open(temp.path()).unwrap();
        (temp, dir)
    }

    #[test]
    fn a_file_is_read_and_replaced_atomically_inside_the_directory() {
        let (temp, dir) = dir();
        assert_eq!(dir.read("x").unwrap(), None);
        dir.write_atomically("x", b"one", true).unwrap();
        dir.write_atomically("x", b"two", false).unwrap();
        assert_eq!(dir.read("x").unwrap().as_deref(), Some(&b"two"[..]));
        let names: Vec<_> = std::fs::read_dir(temp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["x"], "no temporary file is left");
        assert!(dir.remove("x").unwrap() && !dir.remove("x").unwrap());
    }

    #[test]
    fn links_fifos_directories_hard_links_and_large_files_are_refused() {
        let (temp, dir) = dir();
        let outside = temp.path().join("outside");
        std::fs::write(&outside, "outside").unwrap();
        std::os::unix::fs::symlink(&outside, temp.path().join("link")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", temp.path().join("zero")).unwrap();
        nix::unistd::mkfifo(&temp.path().join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::create_dir(temp.path().join("sub")).unwrap();
        std::fs::hard_link(&outside, temp.path().join("hard")).unwrap();
        std::fs::File::create(temp.path().join("huge"))
            .unwrap()
            .set_len(MAX_READ + 1)
            .unwrap();
        for (name, why) in [
            ("link", "symbolic link"),
            ("zero", "symbolic link"),
            ("fifo", "not a regular file"),
            ("sub", "directory"),
            ("hard", "more than one link"),
            ("huge", "larger than 1024 KiB"),
        ] {
            let error = dir.read(name).unwrap_err().to_string();
            assert!(
                error.contains(&format!("/{name} is refused: it ")) && error.contains(why),
                "{name}: {error}"
            );
            if name != "huge" {
                assert!(dir.open_rw(name, true).is_err(), "{name} opened for writing");
            }
        }
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside");
        // A link is replaced, not written through; deleted, not its target.
        dir.write_atomically("link", b"new", false).unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside");
        std::os::unix::fs::symlink(&outside, temp.path().join("link2")).unwrap();
        assert!(dir.remove("link2").unwrap() && outside.exists());
        // Positive control: a plain file of the same size as `huge` less one byte is read.
        std::fs::File::create(temp.path().join("huge"))
            .unwrap()
            .set_len(MAX_READ)
            .unwrap();
        assert_eq!(dir.read("huge").unwrap().map(|b| b.len() as u64), Some(MAX_READ));
    }

    /// Root never holds a state directory of another user's (it becomes that user first: a
    /// directory that is another user's only when opened has changed since).
    #[test]
    fn root_is_refused_a_directory_of_another_users() {
        assert!(nix::unistd::geteuid().is_root(), "this test runs as root");
        let temp = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(temp.path(), Some(65534), Some(65534)).unwrap();
        let error = Dir::open(temp.path()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
        assert!(
            error
                .to_string()
                .contains("belongs to uid 65534, and jobenv runs as root"),
            "{error}"
        );
        // Positive control: the same directory, root's again, is opened.
        std::os::unix::fs::chown(temp.path(), Some(0), Some(0)).unwrap();
        assert!(Dir::open(temp.path()).is_ok());
    }

    #[test]
    fn a_subdirectory_that_is_a_link_or_a_file_is_refused_and_names_are_one_component() {
        let (temp, dir) = dir();
        assert!(dir.subdir("jobs", None).unwrap().is_none());
        assert!(dir.subdir("jobs", Some(0o750)).unwrap().is_some());
        std::os::unix::fs::symlink(temp.path().join("jobs"), temp.path().join("linked")).unwrap();
        std::fs::write(temp.path().join("file"), "").unwrap();
        let error = dir.subdir("linked", Some(0o750)).unwrap_err().to_string();
        assert!(error.ends_with("/linked is refused: it is a symbolic link"), "{error}");
        let error = dir.subdir("file", None).unwrap_err().to_string();
        assert!(error.ends_with("/file is refused: it is not a directory"), "{error}");
        for name in ["../x", "a/b", "..", ".", ""] {
            assert!(dir.read(name).is_err(), "{name}");
        }
    }

    #[test]
    fn a_name_with_a_newline_is_escaped_in_messages() {
        let (temp, dir) = dir();
        std::os::unix::fs::symlink("/dev/null", temp.path().join("x\njobenv: forged")).unwrap();
        let error = dir.read("x\njobenv: forged").unwrap_err().to_string();
        assert_eq!(error.lines().count(), 1, "{error}");
        assert!(error.contains("x\\njobenv: forged is refused"), "{error}");
    }
}
