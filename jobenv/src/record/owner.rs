//! Root and the state directory: a jobenv started as root on a state directory that another
//! user owns (an operator's `recover`, `drain`, `status`, `prune`, `env` or `run` by hand on a
//! node whose worker runs as its own user) becomes that user before it touches anything there,
//! as `sudo -u` would. Whatever that user (and so every deploy program) plants in the directory
//! then meets a process with that user's rights and no more: no file of root's can be written,
//! read or shown through it, and whatever jobenv creates there is already that user's. The
//! guarantee holds by construction, not by a rule every file access must remember; the rules
//! that defend against the same user (bounded reads, no FIFOs, no links: see [`crate::state_dir`])
//! stay.
//!
//! Root takes a state directory only at a path no other user can change
//! ([`path_of_roots_alone`]): what the path leads to is then what the node's configuration
//! says, not what another user swapped in. The owner is read by `fstat` of the directory as opened (not by a path looked at again
//! later), and the switch is complete: groups first (while jobenv may still change them), then
//! the real, effective and saved user ids, all three, and no capability left (whatever
//! securebits would keep: [`drop_capabilities`]), so that nothing can take root back. The
//! groups are the user's own (its primary group and the supplementary groups the group database
//! gives it, as `sudo -u`, `runuser` and systemd's `User=` set them): the process is then what
//! the worker's own processes are, able to read what a job of the worker can (a key file of
//! `root:<worker's group> 0440`) and nothing of root's groups. A uid without a name has no
//! group list: it gets the directory's group and no supplementary group (refused when that group
//! is root's).

use std::ffi::CString;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::{Gid, Uid, User};

use crate::error::Problem;

/// Who this jobenv runs as, after [`become_owner`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// As it was started: not root, or root on a directory of root's (or none yet: root makes
    /// it, its own).
    Unchanged,
    /// The directory's owner, `name` (or `uid <n>` when the uid has no name).
    Became { uid: u32, gid: u32, name: String },
}

/// Makes this process the owner of `state_dir` when it runs as root and the directory is
/// another user's; refused when the switch cannot be made (a root without `CAP_SETUID`, in a
/// user namespace that maps no such uid): then nothing in the directory was touched.
pub fn become_owner(state_dir: &Path) -> Result<Identity, Problem> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(Identity::Unchanged);
    }
    if let Err((through, why)) = path_of_roots_alone(state_dir) {
        return Err(Problem::UnsafeStateDirPath {
            path: state_dir.to_owned(),
            through,
            why,
        });
    }
    // As the journal opens it (`Dir::open`): the configured path lies in directories of root's,
    // and its last part may be a link of root's (systemd's `StateDirectory=` with
    // `DynamicUser=`). What is looked at is the directory the descriptor holds, and once this
    // process is its owner, that descriptor is what `Dir::open` gives for the path (so the
    // directory used is the one looked at); `Dir::open` refuses root a directory of another
    // user's, should the path of root's own lead elsewhere later.
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let dir = match nix::fcntl::open(state_dir, flags, Mode::empty()) {
        Ok(dir) => dir,
        // None yet (root makes it, its own), or nothing that can be the state directory: the
        // command's own opening of it says so.
        Err(_) => return Ok(Identity::Unchanged),
    };
    let stat = match nix::sys::stat::fstat(&dir) {
        Ok(stat) if stat.st_uid != 0 => stat,
        // Root's own (or, could it not be looked at, no directory to use: `Dir::open` refuses
        // root one of another user's).
        _ => return Ok(Identity::Unchanged),
    };
    let uid = Uid::from_raw(stat.st_uid);
    let user = User::from_uid(uid).ok().flatten();
    let name = user.as_ref().map_or_else(|| format!("uid {uid}"), |u| u.name.clone());
    let refused_for = |why: String| Problem::CannotBecomeOwner {
        path: state_dir.to_owned(),
        user: match &user {
            Some(user) => format!("{} (uid {uid})", user.name),
            None => format!("uid {uid}"),
        },
        why,
    };
    let refused = |errno: Errno| refused_for(errno.desc().to_owned());
    let (gid, groups) = match &user {
        Some(user) => {
            let groups = CString::new(user.name.as_str())
                .ok()
                .and_then(|name| nix::unistd::getgrouplist(&name, user.gid).ok())
                .unwrap_or_else(|| vec![user.gid]);
            (user.gid, groups)
        }
        // Never root's group: a directory of root's made and then given to a uid alone
        // (`chown <uid>`) keeps it, and the process would be that user with root's group.
        None if stat.st_gid == 0 => {
            return Err(refused_for(
                "it has no name, so no group of its own, and the directory's group is root's: give the directory that user's group".to_owned(),
            ));
        }
        None => (Gid::from_raw(stat.st_gid), Vec::new()),
    };
    // With `fs.suid_dumpable` 1 the kernel makes the process dumpable at the change of user,
    // before it can seal itself again: for that moment a process of the owner's could trace it
    // and read the node's secrets from its environment. Such a node (a debugging setting) is
    // refused the switch, before anything changed.
    if std::fs::read_to_string("/proc/sys/fs/suid_dumpable").is_ok_and(|v| v.trim() == "1") {
        return Err(refused_for(
            "fs.suid_dumpable is 1, which would let that user trace jobenv while it changes to them: set it to 0 or 2"
                .to_owned(),
        ));
    }
    let switched = nix::unistd::setresgid(gid, gid, gid)
        .and_then(|()| nix::unistd::setgroups(&groups))
        .and_then(|()| nix::unistd::setresuid(uid, uid, uid));
    if let Err(errno) = switched {
        return Err(refused(errno));
    }
    let (ruid, rgid) = (nix::unistd::getresuid(), nix::unistd::getresgid());
    let whole = ruid.is_ok_and(|r| [r.real, r.effective, r.saved] == [uid; 3])
        && rgid.is_ok_and(|r| [r.real, r.effective, r.saved] == [gid; 3]);
    if !whole || !drop_capabilities() {
        return Err(refused(Errno::EPERM));
    }
    // A change of credentials makes the process dumpable again where `fs.suid_dumpable` says
    // so: sealed again, as `main` requires (its environment holds the node's secrets).
    let _ = nix::sys::prctl::set_dumpable(false);
    if !matches!(nix::sys::prctl::get_dumpable(), Ok(false)) {
        return Err(refused(Errno::EPERM));
    }
    // The directory whose owner this process became is the one it uses, by this descriptor:
    // the path may lead elsewhere by now, or through a directory the owner may not pass.
    crate::state_dir::pin(state_dir, dir);
    Ok(Identity::Became {
        uid: uid.as_raw(),
        gid: gid.as_raw(),
        name,
    })
}

/// Leaves this process no capability: permitted, effective, inheritable and ambient all empty,
/// as checked afterwards. The kernel clears them itself when the user ids leave root, unless
/// the securebits `no-setuid-fixup` or `keep-caps` (a unit's `SecureBits=`, a container's
/// runtime) keep them: then jobenv would be the worker with root's rights (`CAP_DAC_OVERRIDE`,
/// `CAP_KILL`, ...), and what the worker plants would steer them again. Dropping is always
/// allowed; with nothing permitted, nothing can be raised again.
fn drop_capabilities() -> bool {
    use caps::CapSet;
    // What a clear cannot do shows in what is left: the check after is the answer. Clearing the
    // permitted set clears the effective one with it.
    for set in [CapSet::Ambient, CapSet::Permitted, CapSet::Inheritable] {
        let _ = caps::clear(None, set);
    }
    // The ambient set is empty when nothing is permitted (the kernel keeps it a subset of the
    // permitted and inheritable sets).
    [CapSet::Effective, CapSet::Permitted, CapSet::Inheritable]
        .into_iter()
        .all(|set| caps::read(None, set).is_ok_and(|left| left.is_empty()))
}

/// Whether root may take `state_dir` at this path: every directory on the way (as given, and as
/// its links resolve) root's and written by no one else, and every link on the way root's; else
/// the first part of the path that is not, and why. Another user who can change a part of the
/// path could swap what follows for a link, between two commands or within one: root would then
/// work in a directory of root's it was never given, or become whoever owns the one linked. A
/// sticky directory (`/tmp`) is passed through, but is never the state directory's own parent:
/// there, another user could make the name first. A part that does not exist yet ends the walk:
/// what root makes from there is its own.
fn path_of_roots_alone(state_dir: &Path) -> Result<(), (PathBuf, String)> {
    let Ok(path) = std::path::absolute(state_dir) else {
        return Ok(());
    };
    let Some(parent) = path.parent() else {
        return Ok(());
    };
    walk(parent)?;
    if let Ok(resolved) = std::fs::canonicalize(parent) {
        walk(&resolved)?;
    }
    // The state directory itself may be a link of root's (systemd's `StateDirectory=` with
    // `DynamicUser=`): then the directory it leads to must lie on such a path too.
    let stat = match nix::sys::stat::lstat(&path) {
        Ok(stat) => stat,
        Err(_) => return Ok(()),
    };
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK {
        if stat.st_uid != 0 {
            return Err((path, format!("is a symbolic link of uid {}'s", stat.st_uid)));
        }
        if let Some(parent) = std::fs::canonicalize(&path).ok().as_deref().and_then(Path::parent) {
            walk(parent)?;
        }
    }
    Ok(())
}

/// [`path_of_roots_alone`] for each part of `dir` from `/`, `dir` itself the state directory's
/// parent (never a sticky directory another user may write).
fn walk(dir: &Path) -> Result<(), (PathBuf, String)> {
    let mut part = PathBuf::new();
    let parts: Vec<_> = dir.components().collect();
    for (i, component) in parts.iter().enumerate() {
        part.push(component);
        let Ok(stat) = nix::sys::stat::lstat(&part) else {
            return Ok(());
        };
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK {
            if stat.st_uid != 0 {
                return Err((part, format!("is a symbolic link of uid {}'s", stat.st_uid)));
            }
            continue;
        }
        if kind != SFlag::S_IFDIR {
            // Nothing can be a state directory there: opening it says so.
            return Ok(());
        }
        if stat.st_uid != 0 {
            return Err((part, format!("belongs to uid {}", stat.st_uid)));
        }
        let sticky = stat.st_mode & 0o1000 != 0 && i + 1 < parts.len();
        let writers = match stat.st_mode {
            _ if sticky => None,
            mode if mode & 0o002 != 0 => Some("everyone".to_owned()),
            mode if mode & 0o020 != 0 && stat.st_gid != 0 => Some(format!("group {}", stat.st_gid)),
            _ => None,
        };
        if let Some(writers) = writers {
            return Err((part, format!("{writers} may write")));
        }
    }
    Ok(())
}
