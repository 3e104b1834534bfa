//! Root and the state directory: a jobenv started as root on a state directory that another
//! user owns (an operator's `recover`, `drain`, `status`, `prune`, `env` or `run` by hand on a
//! node whose worker runs as its own user) becomes that user before it touches anything there,
//! as `sudo -u` would. Whatever that user (and so every deploy program) plants in the directory
//! then meets a process with that user's rights and no more: no file of root's can be written,
//! read or shown through it, and whatever jobenv creates there is already that user's. The
//! guarantee holds by construction, not by a rule every file access must remember; the rules
//! that defend against the same user (bounded reads, no FIFOs, no links: see [`super::dir`])
//! stay.
//!
//! The owner is read by `fstat` of the directory as opened (not by a path looked at again
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
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
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
    super::dir::pin(state_dir, dir);
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
    use nix::libc;
    // linux/capability.h: version 3 takes two of these (64 capabilities).
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default, PartialEq)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let none = [Data::default(); 2];
    let mut now = [Data {
        effective: u32::MAX,
        permitted: u32::MAX,
        inheritable: u32::MAX,
    }; 2];
    // SAFETY: capset and capget with a version 3 header and two data structs, as the kernel
    // reads and writes them; prctl with plain integers.
    unsafe {
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        libc::syscall(libc::SYS_capset, &raw mut header, none.as_ptr());
        header.pid = 0;
        if libc::syscall(libc::SYS_capget, &raw mut header, now.as_mut_ptr()) != 0 {
            return false;
        }
    }
    // The ambient set is no part of capget's answer: it is empty when nothing is permitted
    // (the kernel keeps it a subset of the permitted and inheritable sets).
    now == none
}
