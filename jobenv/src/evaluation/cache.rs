//! The cache of instantiated shells: `shells/` in the state directory.
//!
//! - `<key>.json`: an [`Entry`], written last and atomically, once the shell's roots are made;
//! - `<key>/`: its garbage-collector roots, which Nix makes at these final paths (a root made
//!   elsewhere and moved would count for nothing: Nix records the link's path): `shell.drv`
//!   (the derivation, which keeps its input derivations and sources), and `in`, `in-2`, ...
//!   (the outputs of its input derivations that nix-shell needs, the tree and the nixpkgs pin);
//! - `<key>.lock`: held shared by each job that runs the entry, for its whole run, and
//!   exclusively by `prune` (without waiting) before it drops the entry: an entry in use is
//!   never dropped;
//! - `<key>.eval.lock`: held by the one job that evaluates the key; the others wait for it and
//!   then find its entry;
//! - `job-<pid>-<start>/shell.drv`: the root of an evaluation that is not cached, for as long as
//!   its job runs (`prune` removes those of jobenvs that are gone).
//!
//! The directory is the worker's user's, like the journal: it is reached only through [`Dir`]
//! (never through a link, regular files only, bounded reads). An entry is used only if it and
//! each of its roots belong to the state directory's owner, each root still leads where the
//! entry says, and what it leads to exists. The roots' directory must be visible at the same
//! path to the process that collects garbage (the Nix daemon): a state directory in a private
//! `/tmp` would not be.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::stat::SFlag;
use nix::unistd::UnlinkatFlags;
use serde::{Deserialize, Serialize};

use super::key::is_key;
use super::store::{is_drv_path, store_path_of};
use crate::cancel::{Cancel, Cancelled};
use crate::state_dir::Dir;

/// The cache's directory in the state directory.
pub const SHELLS: &str = "shells";

/// The root of the derivation, in an entry's roots and in a temporary root's directory.
pub const SHELL_ROOT: &str = "shell.drv";
/// The base name of the other roots of an entry (Nix adds `-2`, `-3`, ..., and `-<output>`).
pub const INPUT_ROOTS: &str = "in";

/// Changes when an entry's meaning changes: an older jobenv then drops a newer entry (and
/// evaluates) rather than misread it.
const FORMAT: u32 = 1;

/// A cached shell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub format: u32,
    pub key: String,
    /// The tree and the pin as evaluated (store paths, links resolved).
    pub root: String,
    pub nixpkgs: String,
    pub attr_path: String,
    pub drv: String,
    /// Each root's name in `<key>/`, and the store path it leads to.
    pub roots: BTreeMap<String, String>,
    pub created: String,
}

/// What a job expects of its entry.
pub struct Expected<'a> {
    pub key: &'a str,
    pub store_dir: &'a str,
    pub root: &'a str,
    pub nixpkgs: &'a str,
    pub attr_path: &'a str,
}

impl Entry {
    pub fn new(expected: &Expected<'_>, drv: String, roots: BTreeMap<String, String>) -> Entry {
        Entry {
            format: FORMAT,
            key: expected.key.to_owned(),
            root: expected.root.to_owned(),
            nixpkgs: expected.nixpkgs.to_owned(),
            attr_path: expected.attr_path.to_owned(),
            drv,
            roots,
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }

    /// Why this entry does not fit `expected`, if it does not: every field is checked, so that an
    /// entry can only make a job run the derivation of its own key.
    fn mismatch(&self, expected: &Expected<'_>) -> Option<String> {
        if self.format != FORMAT {
            return Some(format!("its format is {}, this jobenv's {FORMAT}", self.format));
        }
        if self.key != expected.key
            || self.root != expected.root
            || self.nixpkgs != expected.nixpkgs
            || self.attr_path != expected.attr_path
        {
            return Some("it names another evaluation than its key's".into());
        }
        let store = expected.store_dir;
        if !is_drv_path(&self.drv, Some(store)) {
            return Some("its derivation is not a derivation of the store".into());
        }
        if self.roots.get(SHELL_ROOT) != Some(&self.drv) {
            return Some("it does not root its derivation".into());
        }
        for path in [&self.root, &self.nixpkgs] {
            let rooted = store_path_of(path, store).is_some_and(|p| self.roots.values().any(|r| *r == p));
            if !rooted {
                return Some("it does not root its tree and its nixpkgs".into());
            }
        }
        for (name, target) in &self.roots {
            if !is_root_name(name) {
                return Some(format!(
                    "it names a root {} that jobenv never makes",
                    name.escape_debug()
                ));
            }
            if store_path_of(target, store).as_ref() != Some(target) {
                return Some("a root leads outside the store".into());
            }
        }
        None
    }
}

/// A root's name: what `nix-instantiate --add-root` and `nix-store --realise --add-root` make
/// here, one plain file name.
fn is_root_name(name: &str) -> bool {
    (name == SHELL_ROOT || name == INPUT_ROOTS || name.starts_with("in-"))
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-._".contains(&b))
}

/// The cache's directory, held by its descriptor.
pub struct Cache {
    shells: Dir,
    /// Its absolute path, as Nix is given it for the roots (and records it).
    path: PathBuf,
    /// The state directory's owner: every entry and root must be its.
    owner: u32,
}

/// How a lock is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Shared,
    Exclusive,
}

/// A held lock of the cache; dropped, released.
pub struct Lock {
    _held: safe_io::lock::Held,
}

/// Why a lock of the cache was not taken. Never a refusal of the job: without its lock, the job
/// evaluates without the cache (or, its whole timeout gone waiting, ends as timed out).
pub enum NotTaken {
    Cancelled(Cancelled),
    /// Its wait ended, or (waiting zero) someone holds it.
    Busy,
    Io(io::Error),
}

impl From<io::Error> for NotTaken {
    fn from(error: io::Error) -> Self {
        NotTaken::Io(error)
    }
}

impl Cache {
    /// The cache of `state_dir`, made when missing with `create`; `None` when missing without.
    /// It must belong to the state directory's owner, as the state directory must belong to the
    /// user jobenv runs as (root becomes that owner first: see `record::owner`).
    pub fn open(state_dir: &Path, create: bool) -> io::Result<Option<Cache>> {
        let state = match Dir::open(state_dir) {
            Err(e) if !create && e.kind() == io::ErrorKind::NotFound => return Ok(None),
            other => other?,
        };
        let owner = state.owner()?;
        let Some(shells) = state.subdir(SHELLS, create.then_some(0o750))? else {
            return Ok(None);
        };
        let shells = state.owned_alike(shells)?;
        let path = std::path::absolute(state_dir)?.join(SHELLS);
        Ok(Some(Cache { shells, path, owner }))
    }

    /// The absolute path of `name` in the cache, as Nix is given it.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn entry_name(key: &str) -> String {
        format!("{key}.json")
    }

    pub fn use_lock_name(key: &str) -> String {
        format!("{key}.lock")
    }

    pub fn eval_lock_name(key: &str) -> String {
        format!("{key}.eval.lock")
    }

    /// Takes `name`'s lock, waiting up to `wait` (none: as long as it takes) while `cancel` says
    /// nothing; `waiting` is called once, when the lock is busy. A lock file that `prune`
    /// removed while this waited is not the key's lock any more: the one of that name now is
    /// taken instead.
    pub fn lock(
        &self,
        name: &str,
        kind: Kind,
        wait: Option<Duration>,
        mut cancel: Option<&mut Cancel>,
        waiting: impl FnOnce(),
    ) -> Result<Lock, NotTaken> {
        let deadline = wait.map(|wait| Instant::now() + wait);
        let mut waiting = Some(waiting);
        let mut file = self.lock_file(name)?;
        loop {
            let taken = match kind {
                Kind::Shared => file.try_shared(),
                Kind::Exclusive => file.try_exclusive(),
            }
            .map_err(|e| NotTaken::Io(io::Error::other(e)))?;
            if let Some(held) = taken {
                if self.is_the_file(held.file(), name) {
                    return Ok(Lock { _held: held });
                }
                file = self.lock_file(name)?;
                continue;
            }
            if let Some(cancelled) = cancel.as_mut().and_then(|c| c.check()) {
                return Err(NotTaken::Cancelled(cancelled));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(NotTaken::Busy);
            }
            if let Some(waiting) = waiting.take() {
                waiting();
            }
            let nap = Duration::from_millis(50);
            std::thread::sleep(deadline.map_or(nap, |d| nap.min(d.saturating_duration_since(Instant::now()))));
        }
    }

    fn lock_file(&self, name: &str) -> io::Result<safe_io::lock::LockFile> {
        let file = self.shells.open_rw(name, true)?.expect("created if missing");
        Ok(safe_io::lock::LockFile::from_file(file, self.shells.path().join(name)))
    }

    /// Whether `file` is still the file `name` (not one removed meanwhile).
    fn is_the_file(&self, file: &std::fs::File, name: &str) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), self.shells.stat(name)) {
            (Ok(a), Ok(Some(b))) => a.dev() == b.st_dev && a.ino() == b.st_ino,
            _ => false,
        }
    }

    /// The entry of `expected.key`, if it can be used: `Ok(None)` when there is none, `Err` why
    /// the one there cannot be.
    pub fn usable(&self, expected: &Expected<'_>) -> Result<Option<Entry>, String> {
        let name = Self::entry_name(expected.key);
        let (bytes, stat) = match self.shells.read_with_status(&name) {
            Ok(Some(read)) => read,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error.to_string()),
        };
        if stat.st_uid != self.owner {
            return Err(format!(
                "it belongs to uid {}, not to the state directory's owner (uid {})",
                stat.st_uid, self.owner
            ));
        }
        let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| format!("it is not an entry: {e}"))?;
        if let Some(why) = entry.mismatch(expected) {
            return Err(why);
        }
        let roots = self
            .shells
            .subdir(expected.key, None)
            .map_err(|e| e.to_string())?
            .ok_or("its roots are gone")?;
        for (name, target) in &entry.roots {
            self.check_root(&roots, name, target)?;
        }
        Ok(Some(entry))
    }

    /// A root: a link of the owner's, leading to `target`, which exists.
    fn check_root(&self, roots: &Dir, name: &str, target: &str) -> Result<(), String> {
        let stat = roots
            .stat(name)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("its root {name} is gone"))?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFLNK {
            return Err(format!("its root {name} is not a link"));
        }
        if stat.st_uid != self.owner {
            return Err(format!("its root {name} belongs to uid {}", stat.st_uid));
        }
        let leads = nix::fcntl::readlinkat(roots, name).map_err(|e| format!("its root {name}: {e}"))?;
        if leads.as_os_str() != OsStr::new(target) {
            return Err(format!("its root {name} leads elsewhere"));
        }
        match std::fs::symlink_metadata(target) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!("{target} is gone")),
            Err(e) => Err(format!("{target}: {e}")),
        }
    }

    /// The roots' directory of `key`, made if missing.
    pub fn roots_dir(&self, key: &str) -> io::Result<Dir> {
        Ok(self.shells.subdir(key, Some(0o750))?.expect("created if missing"))
    }

    /// Every root in `<key>/` and where it leads.
    pub fn roots_of(&self, key: &str) -> io::Result<BTreeMap<String, String>> {
        let dir = self.roots_dir(key)?;
        let mut roots = BTreeMap::new();
        for name in dir.names()? {
            let name = name
                .into_string()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a root's name is not UTF-8"))?;
            let leads = nix::fcntl::readlinkat(&dir, name.as_str()).map_err(io::Error::from)?;
            let leads = leads
                .into_string()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a root leads to a path that is not UTF-8"))?;
            roots.insert(name, leads);
        }
        Ok(roots)
    }

    /// Writes the entry, last: from now on jobs use it.
    pub fn write(&self, entry: &Entry) -> io::Result<()> {
        let mut text = serde_json::to_vec_pretty(entry).map_err(io::Error::other)?;
        text.push(b'\n');
        self.shells.write_atomically(&Self::entry_name(&entry.key), &text, true)
    }

    /// Removes `key`'s entry and the roots in `<key>/` (keeping the directory, for a new
    /// evaluation's roots); under the key's evaluation lock.
    pub fn clear(&self, key: &str) -> io::Result<()> {
        self.shells.remove(&Self::entry_name(key))?;
        if let Some(dir) = self.shells.subdir(key, None)? {
            for name in dir.names()? {
                remove_any(&dir, &name)?;
            }
        }
        Ok(())
    }

    /// Removes `key`'s entry, its roots and their directory (the garbage collector then drops its
    /// own record of each root), and the key's lock files: under both of its locks, which the
    /// caller holds (a job that waits for a lock file removed here takes the new one).
    fn remove(&self, key: &str) -> io::Result<()> {
        self.clear(key)?;
        remove_dir(&self.shells, key)?;
        self.shells.remove(&Self::eval_lock_name(key))?;
        self.shells.remove(&Self::use_lock_name(key))?;
        Ok(())
    }

    /// A directory for the root of an evaluation that is not cached, removed when the returned
    /// [`TempRoot`] is dropped.
    pub fn temp_root(&self) -> io::Result<TempRoot> {
        let me = std::process::id() as i32;
        let start = crate::process::start_time(me).unwrap_or_default();
        let name = format!("job-{me}-{start}");
        let dir = self.shells.subdir(&name, Some(0o750))?.expect("created if missing");
        for stale in dir.names()? {
            remove_any(&dir, &stale)?;
        }
        Ok(TempRoot {
            shells: self.shells.try_clone()?,
            link: self.path.join(&name).join(SHELL_ROOT),
            name,
        })
    }

    /// `prune`: drops each entry whose tree or pin is not `deployed` (the node's, links resolved;
    /// `None`: unknown, every tree is kept), whose derivation is gone or which cannot be used;
    /// roots without an entry (an evaluation that failed or was killed), the roots of jobenvs
    /// that are gone, and temporary files. An entry in use, or being evaluated, is left. Returns
    /// how many entries were dropped.
    pub fn prune(&self, deployed: Option<(&str, &str)>) -> io::Result<usize> {
        let mut dropped = 0;
        let mut keys = std::collections::BTreeSet::new();
        for name in self.shells.names()? {
            let Some(name) = name.to_str() else { continue };
            if let Some((pid, start)) = temp_root_of(name) {
                if !crate::process::is_running(pid, start) {
                    if let Err(error) = remove_temp(&self.shells, name) {
                        tracing::warn!("{error}: left as it is");
                    }
                }
                continue;
            }
            if name.starts_with('.') && name.ends_with(".tmp") {
                self.remove_old_temporary(name);
                continue;
            }
            let key = name
                .strip_suffix(".json")
                .or_else(|| name.strip_suffix(".eval.lock"))
                .or_else(|| name.strip_suffix(".lock"))
                .unwrap_or(name);
            if is_key(key) {
                keys.insert(key.to_owned());
            }
        }
        for key in keys {
            let entry = self.shells.read(&Self::entry_name(&key)).ok().flatten();
            let keep = entry
                .as_deref()
                .and_then(|bytes| serde_json::from_slice::<Entry>(bytes).ok())
                .is_some_and(|entry| {
                    let deployed = deployed.is_none_or(|(root, pin)| entry.root == root && entry.nixpkgs == pin);
                    deployed && std::fs::symlink_metadata(&entry.drv).is_ok()
                });
            if keep {
                continue;
            }
            // Only if nobody holds either lock: a job that evaluates the key, or runs its entry.
            let unheld = |name: &str| self.lock(name, Kind::Exclusive, Some(Duration::ZERO), None, || {});
            let Ok(_evaluating) = unheld(&Self::eval_lock_name(&key)) else {
                continue;
            };
            let Ok(_used) = unheld(&Self::use_lock_name(&key)) else {
                continue;
            };
            match self.remove(&key) {
                Ok(()) => dropped += usize::from(entry.is_some()),
                Err(error) => tracing::warn!("cannot drop the cached shell {key}: {error}"),
            }
        }
        Ok(dropped)
    }

    /// A temporary file of an atomic write that its writer left (it was killed): removed after
    /// an hour.
    fn remove_old_temporary(&self, name: &str) {
        let old = self.shells.stat(name).ok().flatten().is_some_and(|stat| {
            crate::state_dir::modified(&stat)
                .elapsed()
                .is_ok_and(|age| age > Duration::from_secs(3600))
        });
        if old {
            let _ = self.shells.remove(name);
        }
    }
}

/// The pid and start time a temporary root's directory is named after.
fn temp_root_of(name: &str) -> Option<(i32, u64)> {
    let (pid, start) = name.strip_prefix("job-")?.split_once('-')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// The root of one evaluation that is not cached; removed (and its directory) when dropped.
pub struct TempRoot {
    shells: Dir,
    name: String,
    /// The root's absolute path, for `--add-root`.
    pub link: PathBuf,
}

impl TempRoot {
    /// Where the root leads (the derivation the evaluation made).
    pub fn target(&self) -> io::Result<String> {
        let dir = self
            .shells
            .subdir(&self.name, None)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the evaluation's root directory is gone"))?;
        let leads = nix::fcntl::readlinkat(&dir, SHELL_ROOT).map_err(io::Error::from)?;
        leads
            .into_string()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the root leads to a path that is not UTF-8"))
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        if let Err(error) = remove_temp(&self.shells, &self.name) {
            tracing::warn!("cannot remove the evaluation's root: {error}");
        }
    }
}

fn remove_temp(shells: &Dir, name: &str) -> io::Result<()> {
    if let Some(dir) = shells.subdir(name, None)? {
        for inside in dir.names()? {
            remove_any(&dir, &inside)?;
        }
    }
    remove_dir(shells, name)
}

/// Removes a file or link of `dir` (a directory planted there is left, with an error).
fn remove_any(dir: &Dir, name: &OsStr) -> io::Result<()> {
    let Some(name) = name.to_str() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a name jobenv makes", dir.shown(name)),
        ));
    };
    dir.remove(name).map(drop)
}

fn remove_dir(parent: &Dir, name: &str) -> io::Result<()> {
    match nix::unistd::unlinkat(parent.as_fd(), name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        Err(errno) => Err(io::Error::new(
            io::Error::from(errno).kind(),
            format!("cannot remove {}: {errno}", parent.shown(OsStr::new(name))),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0c0h1g3qz1rk4dxd2v8gccibd6khq0rb";

    fn expected(key: &str) -> Expected<'_> {
        Expected {
            key,
            store_dir: "/nix/store",
            root: "/nix/store/0c0h1g3qz1rk4dxd2v8gccibd6khq0rb-tree",
            nixpkgs: "/nix/store/1c0h1g3qz1rk4dxd2v8gccibd6khq0rb-nixpkgs",
            attr_path: "devShells.x86_64-linux.web",
        }
    }

    fn entry(key: &str) -> Entry {
        let e = expected(key);
        let drv = format!("/nix/store/{HASH}-web-shell.drv");
        let roots = [
            (SHELL_ROOT, drv.as_str()),
            ("in", e.root),
            ("in-2", e.nixpkgs),
            ("in-3-dev", "/nix/store/2c0h1g3qz1rk4dxd2v8gccibd6khq0rb-dep-dev"),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_owned(), t.to_owned()))
        .collect();
        Entry::new(&e, drv, roots)
    }

    #[test]
    fn an_entry_fits_only_its_own_key_and_roots_what_it_runs() {
        let key = "a".repeat(64);
        let good = entry(&key);
        assert_eq!(good.mismatch(&expected(&key)), None);
        let other = "b".repeat(64);
        assert!(good.mismatch(&expected(&other)).unwrap().contains("another evaluation"));
        let mut bad = good.clone();
        bad.drv = "/etc/passwd".into();
        assert!(bad.mismatch(&expected(&key)).unwrap().contains("not a derivation"));
        bad = good.clone();
        bad.drv = format!("/nix/store/{HASH}-other.drv");
        assert!(
            bad.mismatch(&expected(&key))
                .unwrap()
                .contains("does not root its derivation")
        );
        bad = good.clone();
        bad.roots.remove("in-2");
        assert!(bad.mismatch(&expected(&key)).unwrap().contains("tree and its nixpkgs"));
        bad = good.clone();
        bad.roots.insert("../x".into(), expected(&key).root.into());
        assert!(bad.mismatch(&expected(&key)).unwrap().contains("never makes"));
        bad = good.clone();
        bad.roots.insert("in-4".into(), "/etc".into());
        assert!(bad.mismatch(&expected(&key)).unwrap().contains("outside the store"));
        bad = good.clone();
        bad.format = 2;
        assert!(bad.mismatch(&expected(&key)).unwrap().contains("format"));
        let text = serde_json::to_string(&good)
            .unwrap()
            .replace("\"format\"", "\"extra\":1,\"format\"");
        assert!(
            serde_json::from_str::<Entry>(&text).is_err(),
            "unknown fields are refused"
        );
    }

    #[test]
    fn a_temporary_roots_name_holds_a_pid_and_a_start_time() {
        assert_eq!(temp_root_of("job-12-345"), Some((12, 345)));
        assert_eq!(temp_root_of("job-12"), None);
        assert_eq!(temp_root_of(&"a".repeat(64)), None);
    }
}
