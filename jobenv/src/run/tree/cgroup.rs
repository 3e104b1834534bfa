//! A deploy's own cgroup (v2), under jobenv's. jobenv needs only the core interface files:
//! `cgroup.procs` (to place the program, and to find every process to signal), `cgroup.events`
//! (`populated`: whether any process is left, in it or below it) and `cgroup.kill` (SIGKILL to
//! all of them at once, Linux 5.14 and later; before that, SIGKILL to each pid in
//! `cgroup.procs`). No controller is enabled, so the "no internal processes" rule never applies:
//! jobenv's own cgroup may hold processes (jobenv's, the worker's) beside it.
//!
//! A cgroup is held by a descriptor of its directory, and its interface files are opened
//! relative to it: a cgroup renamed or replaced after it was checked redirects nothing. It
//! belongs to the state directory's owner, who made it (jobenv runs as that owner: root becomes
//! it first, see `record::owner`): a record in the state directory names a cgroup by path, and
//! only one of that owner's is a deploy of this state directory (see `record::orphans`).
//!
//! Dropping a [`Cgroup`] removes its directory (and any the program made below it) once it is
//! empty; a populated one stays, for the next run of its namespace or `recover` to find.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::fcntl::{AtFlags, OFlag};
use nix::sys::signal::Signal;
use nix::sys::stat::Mode;
use nix::unistd::{AccessFlags, UnlinkatFlags, access};

use super::{Placement, Process, ProgramTree};
use crate::process;

pub struct Cgroup {
    dir: PathBuf,
    /// The cgroup's directory.
    fd: OwnedFd,
    /// `cgroup.procs`, open for writing, for the program's placement ([`Placement`]); only a
    /// cgroup this jobenv created has it.
    procs: Option<OwnedFd>,
    /// Left as it is when dropped (see [`Cgroup::leave`]).
    keep: bool,
    /// The cgroup it was made in, jobenv's own (only a cgroup this jobenv created has it): where
    /// jobenv moves itself back to when a program moved it into the tree ([`Cgroup::holds_me`]).
    home: Option<OwnedFd>,
    /// Whether jobenv said so already.
    said_moved: std::sync::atomic::AtomicBool,
}

/// Whether this jobenv is in a cgroup it stops ([`Cgroup::holds_me`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Me {
    Out,
    /// It was, and moved itself back out just now.
    MovedOut,
    /// It is, and could not move out: its own pid is skipped, and the cgroup is never killed
    /// whole.
    In,
}

/// A directory of the cgroup hierarchy, never through a link (cgroupfs has none; a path that
/// leads through one elsewhere is no cgroup).
fn open_dir(at: Option<&OwnedFd>, path: &Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match at {
        Some(dir) => nix::fcntl::openat(dir, path, flags, Mode::empty()),
        None => nix::fcntl::open(path, flags, Mode::empty()),
    }
}

impl Cgroup {
    /// A new cgroup at `dir` (under jobenv's own), for the program to be placed in, which must
    /// be `owner`'s (the state directory's uid: jobenv makes it as that user); otherwise why none
    /// can be made.
    pub fn create(dir: &Path, owner: u32) -> Result<Cgroup, String> {
        let (dir, parent) = (dir.to_owned(), dir.parent().unwrap_or(dir).to_owned());
        nix::unistd::mkdir(&dir, Mode::from_bits_truncate(0o755))
            .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
        let fd = match open_dir(None, &dir) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(format!("cannot open the cgroup {}: {e}", dir.display()));
            }
        };
        // Removed again (by its drop) if it cannot be used.
        let mut cgroup = Cgroup {
            dir,
            fd,
            procs: None,
            keep: false,
            home: open_dir(None, &parent).ok(),
            said_moved: false.into(),
        };
        cgroup.limit_nesting();
        cgroup.owned_by(owner)?;
        // Moving a process needs write access to the destination's `cgroup.procs` and to that of
        // the common ancestor, jobenv's own cgroup (what systemd's `Delegate=` grants a unit's
        // user): checked here, so that the child's write cannot fail where it is too late to
        // fall back.
        let procs = cgroup
            .open_file("cgroup.procs", OFlag::O_WRONLY)
            .map_err(|e| format!("cannot open {}/cgroup.procs: {e}", cgroup.dir.display()))?;
        access(&parent.join("cgroup.procs"), AccessFlags::W_OK).map_err(|e| {
            format!(
                "{}/cgroup.procs is not writable by jobenv ({e}): the program could not be moved into its cgroup",
                parent.display()
            )
        })?;
        cgroup.procs = Some(procs);
        Ok(cgroup)
    }

    /// Bounds the cgroups a program may make below its own (`cgroup.max.depth`,
    /// `cgroup.max.descendants`): every one costs the kernel memory, and jobenv walks them when
    /// it stops the tree. Best effort (a kernel without these files has no such limits).
    fn limit_nesting(&self) {
        for (name, limit) in [
            ("cgroup.max.depth", MAX_DEPTH),
            ("cgroup.max.descendants", MAX_CGROUPS - 1),
        ] {
            if let Err(error) = write_at(&self.fd, name, limit.to_string().as_bytes()) {
                tracing::debug!("cannot set {name} of the program tree's cgroup: {error}");
            }
        }
    }

    /// Whether the cgroup (and so the file that stops it, `cgroup.kill`, made with it) is
    /// `uid`'s, as a later jobenv of the state directory needs: a jobenv that is not the state
    /// directory's owner (another user's, with write access to it) makes none.
    fn owned_by(&self, uid: u32) -> Result<(), String> {
        let mine = self
            .owner()
            .map_err(|e| format!("cannot inspect the cgroup {}: {e}", self.dir.display()))?;
        if mine == uid {
            return Ok(());
        }
        Err(format!(
            "the cgroup {} would belong to uid {mine}, not to the state directory's owner (uid {uid}): a later jobenv of the state directory would not take it for one of its deploys",
            self.dir.display()
        ))
    }

    /// The cgroup at `dir`, if it exists (an earlier deploy's, named by its record).
    pub fn open(dir: &Path) -> Option<Cgroup> {
        let fd = open_dir(None, dir).ok()?;
        // A directory of another file system (mounted over a part of the hierarchy), or one
        // without the core interface files, is no cgroup.
        let statfs = nix::sys::statfs::fstatfs(&fd).ok()?;
        if statfs.filesystem_type() != nix::sys::statfs::CGROUP2_SUPER_MAGIC {
            return None;
        }
        nix::sys::stat::fstatat(&fd, "cgroup.events", AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        Some(Cgroup {
            dir: dir.to_owned(),
            fd,
            procs: None,
            keep: false,
            home: None,
            said_moved: false.into(),
        })
    }

    /// Lets go of a cgroup that is not this jobenv's to remove (one a record named, that turned
    /// out to be no deploy of its state directory).
    pub fn leave(mut self) {
        self.keep = true;
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The uid that owns the cgroup's directory.
    pub fn owner(&self) -> std::io::Result<u32> {
        Ok(nix::sys::stat::fstat(&self.fd)?.st_uid)
    }

    fn open_file(&self, name: &str, flags: OFlag) -> nix::Result<OwnedFd> {
        open_at(&self.fd, name, flags)
    }

    /// Whether this jobenv itself is in the cgroup or below it. A program of the worker's user
    /// can put it there (moving a process needs write access to the `cgroup.procs` of the two
    /// cgroups' common ancestor, jobenv's own cgroup, which that user has as jobenv does): a
    /// jobenv that then killed the cgroup would kill itself, leaving its job's entry `running`.
    /// So it moves itself back where it came from first; where it cannot, it stays
    /// ([`Me::In`]): its own pid is then skipped, and the cgroup is never killed whole.
    fn holds_me(&self) -> Me {
        let me = std::process::id() as i32;
        let mut pids = Vec::new();
        pids_below(&self.fd, &mut pids);
        if !pids.contains(&me) {
            return Me::Out;
        }
        let moved = self
            .home
            .as_ref()
            .is_some_and(|home| write_at(home, "cgroup.procs", me.to_string().as_bytes()).is_ok());
        if !self.said_moved.swap(true, std::sync::atomic::Ordering::Relaxed) {
            if moved {
                tracing::warn!(
                    "jobenv was moved into the program tree's cgroup {} (by a process of the worker's user): it moved itself back out",
                    self.dir.display()
                );
            } else {
                tracing::warn!(
                    "jobenv was moved into the program tree's cgroup {} (by a process of the worker's user), and cannot move out: it stops every other process there one by one",
                    self.dir.display()
                );
            }
        }
        if moved { Me::MovedOut } else { Me::In }
    }

    /// `populated 1` in `cgroup.events`: a process is left in the cgroup or below it. A cgroup
    /// that cannot be read for another reason than its removal counts as populated: a stop
    /// then ends by its bound rather than by a guess that nothing runs.
    fn populated(&self) -> bool {
        match read_at(&self.fd, "cgroup.events") {
            Ok(events) => events.lines().any(|line| line == "populated 1"),
            // A removed cgroup's directory stays open but empty; its files are gone.
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }
}

impl ProgramTree for Cgroup {
    fn place(&self) -> Placement {
        Placement::new(self.procs.as_ref().map(AsRawFd::as_raw_fd))
    }

    fn is_empty(&self) -> bool {
        if !self.populated() {
            return true;
        }
        // Populated, maybe by this jobenv alone.
        match self.holds_me() {
            Me::Out => false,
            Me::MovedOut => !self.populated(),
            Me::In => self.members().is_empty(),
        }
    }

    /// Every process of the tree but this jobenv.
    fn members(&self) -> Vec<Process> {
        let me = std::process::id() as i32;
        let mut pids = Vec::new();
        pids_below(&self.fd, &mut pids);
        pids.into_iter()
            .filter(|&pid| pid != me)
            .filter_map(|pid| {
                Some(Process {
                    pid: nix::unistd::Pid::from_raw(pid),
                    start: process::start_time(pid)?,
                })
            })
            .collect()
    }

    fn kill(&self) {
        if self.holds_me() == Me::In || write_at(&self.fd, "cgroup.kill", b"1").is_err() {
            // Before Linux 5.14, or with this jobenv inside: each process, as often as the stop
            // repeats this (one that forks meanwhile has its child killed in the next round).
            for process in self.members() {
                process.signal(Signal::SIGKILL);
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        remove_below(&self.fd);
        // The directory itself by its path, only while that path is still this cgroup (the
        // kernel refuses to remove a populated one, which then stays).
        let same =
            |a: &nix::sys::stat::FileStat, b: &nix::sys::stat::FileStat| a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        if let (Ok(held), Ok(named)) = (nix::sys::stat::fstat(&self.fd), nix::sys::stat::lstat(&self.dir)) {
            if same(&held, &named) {
                let _ = std::fs::remove_dir(&self.dir);
            }
        }
    }
}

/// The interface file `name` of the cgroup `dir`, never through a link.
fn open_at(dir: &OwnedFd, name: &str, flags: OFlag) -> nix::Result<OwnedFd> {
    nix::fcntl::openat(dir, name, flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
}

/// What the interface file `name` of the cgroup `dir` says.
fn read_at(dir: &OwnedFd, name: &str) -> std::io::Result<String> {
    let mut text = String::new();
    std::fs::File::from(open_at(dir, name, OFlag::O_RDONLY)?).read_to_string(&mut text)?;
    Ok(text)
}

/// Writes `bytes` to the interface file `name` of the cgroup `dir`.
fn write_at(dir: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::io::Write::write_all(&mut std::fs::File::from(open_at(dir, name, OFlag::O_WRONLY)?), bytes)
}

/// How far below a deploy's cgroup jobenv looks for processes and cgroups to remove: a
/// program has little reason to nest cgroups, and one of the worker's user (who may own the
/// deploy's cgroup, and so make cgroups in it) must not make jobenv walk without end or run
/// out of descriptors or stack. What lies beyond is still stopped: `cgroup.kill` and
/// `cgroup.events` cover the whole subtree; only SIGTERM's grace and the count miss it.
const MAX_DEPTH: usize = 32;
/// The most cgroups a walk visits (the deploy's own included).
const MAX_CGROUPS: usize = 4096;

/// The names of the cgroups right below the cgroup `dir` (at most [`MAX_CGROUPS`]).
fn children(dir: &OwnedFd) -> Vec<std::ffi::OsString> {
    // A descriptor of its own: a listing moves its offset.
    let Ok(listing) = open_dir(Some(dir), Path::new(".")).and_then(nix::dir::Dir::from_fd) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for entry in listing.into_iter().flatten() {
        let name = entry.file_name().to_bytes().to_vec();
        if entry.file_type() == Some(nix::dir::Type::Directory) && name != b"." && name != b".." {
            names.push(std::os::unix::ffi::OsStringExt::from_vec(name));
            if names.len() >= MAX_CGROUPS {
                break;
            }
        }
    }
    names
}

/// Walks the cgroup `top` and those below it, depth first, within [`MAX_DEPTH`] and
/// [`MAX_CGROUPS`], holding one descriptor per level: `enter` sees each cgroup on the way down,
/// `leave` each one below `top` on the way up (its parent's descriptor and its name). False when
/// there was more than the bounds let it see.
fn walk(top: &OwnedFd, mut enter: impl FnMut(&OwnedFd), mut leave: impl FnMut(&OwnedFd, &std::ffi::OsStr)) -> bool {
    struct Level {
        fd: OwnedFd,
        children: std::vec::IntoIter<std::ffi::OsString>,
        name: Option<std::ffi::OsString>,
    }
    let Ok(fd) = top.try_clone() else { return false };
    enter(&fd);
    let mut levels = vec![Level {
        children: children(&fd).into_iter(),
        fd,
        name: None,
    }];
    let (mut seen, mut whole) = (1, true);
    while let Some(level) = levels.last_mut() {
        match level.children.next() {
            Some(name) => {
                let depth = levels.len();
                let Some(level) = levels.last() else { break };
                if depth > MAX_DEPTH || seen >= MAX_CGROUPS {
                    whole = false;
                    continue;
                }
                if let Ok(fd) = open_dir(Some(&level.fd), Path::new(&name)) {
                    seen += 1;
                    enter(&fd);
                    levels.push(Level {
                        children: children(&fd).into_iter(),
                        fd,
                        name: Some(name),
                    });
                }
            }
            None => {
                let done = levels.pop().expect("a level");
                if let (Some(name), Some(parent)) = (done.name, levels.last()) {
                    drop(done.fd);
                    leave(&parent.fd, &name);
                }
            }
        }
    }
    whole
}

/// The pids in the `cgroup.procs` of the cgroup `dir` and of those below it (within the walk's
/// bounds).
fn pids_below(dir: &OwnedFd, pids: &mut Vec<i32>) {
    let whole = walk(
        dir,
        |cgroup| {
            if let Ok(text) = read_at(cgroup, "cgroup.procs") {
                pids.extend(
                    text.lines()
                        .filter_map(|l| l.trim().parse::<i32>().ok())
                        .filter(|&pid| pid > 0),
                );
            }
        },
        |_, _| {},
    );
    if !whole {
        tracing::warn!(
            "the program tree's cgroup nests more than {MAX_CGROUPS} cgroups or {MAX_DEPTH} levels: processes beyond them get no SIGTERM, only the final SIGKILL"
        );
    }
}

/// Removes the cgroups below the cgroup `dir`, deepest first (within the walk's bounds); the
/// kernel refuses to remove a populated one, which then stays.
fn remove_below(dir: &OwnedFd) {
    walk(
        dir,
        |_| {},
        |parent, name| {
            let _ = nix::unistd::unlinkat(parent.as_fd(), name, UnlinkatFlags::RemoveDir);
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    /// A cgroup of this test's own. The tests run as root on a machine with cgroup v2 (CI's
    /// does); without one they fail, saying so, rather than skip.
    fn test_cgroup(tag: &str) -> Cgroup {
        let name = format!("jobenv-unit-{tag}-{}", std::process::id());
        let own = super::super::hierarchy::own_cgroup()
            .unwrap_or_else(|why| panic!("these tests need a writable cgroup v2 (run them as root): {why}"));
        Cgroup::create(&own.join(name), 0)
            .unwrap_or_else(|why| panic!("these tests need a writable cgroup v2 (run them as root): {why}"))
    }

    fn spawn_placed(cgroup: &Cgroup, script: &str) -> std::process::Child {
        let placement = cgroup.place();
        let mut command = std::process::Command::new("/bin/sh");
        command.args(["-c", script]).stdout(std::process::Stdio::piped());
        // SAFETY: `enter` is one write(2) on a descriptor opened before the fork.
        unsafe { command.pre_exec(move || placement.enter()) };
        command.spawn().unwrap()
    }

    #[test]
    fn a_placed_program_and_a_setsid_child_are_in_the_cgroup_and_are_stopped_together() {
        let cgroup = test_cgroup("stop");
        assert!(cgroup.is_empty(), "a new cgroup is empty");
        let mut child = spawn_placed(&cgroup, "setsid sleep 30 & exec sleep 30");
        let shell = child.id() as i32;
        assert!(crate::process::start_time(shell).is_some());
        let mut found = Vec::new();
        for _ in 0..500 {
            found = cgroup.members();
            if found.len() == 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            found.len(),
            2,
            "the program and the helper it started in a session of its own: {found:?}"
        );
        assert!(found.iter().any(|p| p.pid.as_raw() == shell));
        assert!(!cgroup.is_empty());
        let reaper = std::thread::spawn(move || child.wait());
        let stopped = cgroup.stop(Duration::from_millis(500));
        assert_eq!(
            (stopped.signalled, stopped.killed, stopped.empty),
            (2, 0, true),
            "SIGTERM was enough"
        );
        reaper.join().unwrap().unwrap();
        let dir = cgroup.dir().to_owned();
        drop(cgroup);
        assert!(!dir.exists(), "an empty cgroup is removed when dropped");
    }

    #[test]
    fn what_ignores_sigterm_is_killed_after_the_grace() {
        let cgroup = test_cgroup("kill");
        // Populated from before the exec; stopped only once the trap is set.
        let mut child = spawn_placed(&cgroup, "trap '' TERM; echo ready; while :; do sleep 0.05; done");
        let mut ready = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut ready).unwrap();
        assert_eq!(ready, "ready\n");
        let reaper = std::thread::spawn(move || child.wait());
        let started = std::time::Instant::now();
        let stopped = cgroup.stop(Duration::from_millis(300));
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "the grace was not given"
        );
        assert!(stopped.empty && stopped.killed >= 1, "{stopped:?}");
        reaper.join().unwrap().unwrap();
    }

    /// A program that nests cgroups below its own: jobenv limits it, and where the limit was
    /// lifted (the worker's user owns a cgroup it made), its walk stays bounded and the tree is
    /// still stopped whole (by `cgroup.kill`).
    #[test]
    fn nesting_below_a_deploys_cgroup_is_limited_and_walked_within_bounds() {
        let cgroup = test_cgroup("nested");
        let mut deep = cgroup.dir().to_owned();
        let mut made = 0;
        while std::fs::create_dir(deep.join("n")).is_ok() && made < 100 {
            deep.push("n");
            made += 1;
        }
        assert_eq!(made, MAX_DEPTH, "cgroup.max.depth bounds the nesting");
        std::fs::write(cgroup.dir().join("cgroup.max.depth"), "max").unwrap();
        while made < 40 {
            deep.push("n");
            std::fs::create_dir(&deep).unwrap();
            made += 1;
        }
        // A process at the bottom, 40 levels down: beyond the walk.
        let mut child = fediversity_testkit::cgroup::spawn_in(&deep, &["/bin/sleep", "30"]);
        assert!(!cgroup.is_empty(), "populated from below");
        assert!(cgroup.members().is_empty(), "the walk went deeper than its bound");
        let stopped = cgroup.stop(Duration::from_millis(100));
        assert!(
            stopped.empty,
            "cgroup.kill stops what the walk does not reach: {stopped:?}"
        );
        child.wait().unwrap();
        // Positive control: within the bound, a process is found.
        let mut shallow = cgroup.dir().join("n");
        shallow.push("n");
        let mut child = fediversity_testkit::cgroup::spawn_in(&shallow, &["/bin/sleep", "30"]);
        assert_eq!(
            cgroup
                .members()
                .iter()
                .map(|p| p.pid.as_raw() as u32)
                .collect::<Vec<_>>(),
            [child.id()]
        );
        cgroup.kill();
        child.wait().unwrap();
        // What lies within the bound is removed with the cgroup; deeper levels keep it.
        let (top, deep_rest) = (
            cgroup.dir().to_owned(),
            cgroup
                .dir()
                .join(std::iter::repeat_n("n", MAX_DEPTH).collect::<Vec<_>>().join("/")),
        );
        drop(cgroup);
        assert!(top.exists() && deep_rest.exists());
        // Cleanup, deepest first.
        let mut path = deep;
        while path != top {
            let _ = std::fs::remove_dir(&path);
            path.pop();
        }
        let _ = std::fs::remove_dir(&top);
    }

    #[test]
    fn a_cgroup_that_is_gone_is_empty_and_cannot_be_opened() {
        assert!(Cgroup::open(Path::new("/nonexistent/jobenv-ns-1-2")).is_none());
        let gone = test_cgroup("gone");
        std::fs::remove_dir(gone.dir()).unwrap();
        assert!(Cgroup::open(gone.dir()).is_none());
        assert!(
            gone.is_empty() && gone.members().is_empty(),
            "a removed cgroup held by its descriptor"
        );
        // A directory that is no cgroup (no interface files) is not opened as one.
        let plain = tempfile::tempdir().unwrap();
        assert!(Cgroup::open(plain.path()).is_none());
    }

    /// jobenv gives a cgroup to no one: one it would make for a state directory of another
    /// user's is refused (and removed), as no later jobenv of that directory would take it.
    #[test]
    fn a_cgroup_is_made_only_for_a_state_directory_of_jobenvs_own_user() {
        let own = super::super::hierarchy::own_cgroup().expect("a writable cgroup v2");
        let dir = own.join(format!("jobenv-unit-foreign-{}", std::process::id()));
        let error = Cgroup::create(&dir, 65534).err().expect("refused");
        assert!(
            error.contains("would belong to uid 0, not to the state directory's owner (uid 65534)"),
            "{error}"
        );
        assert!(!dir.exists(), "the refused cgroup was left");
        // Positive control: for root's own state directory, it is made, and root's.
        let cgroup = Cgroup::create(&dir, 0).unwrap();
        assert_eq!(cgroup.owner().unwrap(), 0);
        assert_eq!(Cgroup::open(cgroup.dir()).unwrap().owner().unwrap(), 0);
    }
}
