//! A deploy's own cgroup (v2), under jobenv's. jobenv needs only the core interface files:
//! `cgroup.procs` (to place the program, and to find every process to signal), `cgroup.events`
//! (`populated`: whether any process is left, in it or below it) and `cgroup.kill` (SIGKILL to
//! all of them at once, Linux 5.14 and later; before that, SIGKILL to each pid in
//! `cgroup.procs`). No controller is enabled, so the "no internal processes" rule never applies:
//! jobenv's own cgroup may hold processes (jobenv's, the worker's) beside it.
//!
//! Dropping a [`Cgroup`] removes its directory (and any the program made below it) once it is
//! empty; a populated one stays, for the next run of its namespace or `recover` to find.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::sys::signal::Signal;
use nix::unistd::{AccessFlags, access};

use super::{Placement, Process, ProgramTree};
use crate::process;

pub struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for writing, for the program's placement ([`Placement`]); only a
    /// cgroup this jobenv created has it.
    procs: Option<OwnedFd>,
}

impl Cgroup {
    /// A new cgroup at `dir` (under jobenv's own), for the program to be placed in; otherwise
    /// why none can be made.
    pub fn create(dir: &Path) -> Result<Cgroup, String> {
        let (dir, parent) = (dir.to_owned(), dir.parent().unwrap_or(dir).to_owned());
        std::fs::DirBuilder::new().mode(0o755).create(&dir).map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
        // Removed again (by its drop) if it cannot be used.
        let mut cgroup = Cgroup { dir, procs: None };
        // Moving a process needs write access to the destination's `cgroup.procs` and to that of
        // the common ancestor, jobenv's own cgroup (what systemd's `Delegate=` grants a unit's
        // user): checked here, so that the child's write cannot fail where it is too late to
        // fall back.
        let procs = std::fs::OpenOptions::new().write(true).custom_flags(nix::libc::O_CLOEXEC).open(cgroup.dir.join("cgroup.procs"));
        let procs = procs.map_err(|e| format!("cannot open {}/cgroup.procs: {e}", cgroup.dir.display()))?;
        access(&parent.join("cgroup.procs"), AccessFlags::W_OK)
            .map_err(|e| format!("{}/cgroup.procs is not writable by jobenv ({e}): the program could not be moved into its cgroup", parent.display()))?;
        cgroup.procs = Some(procs.into());
        Ok(cgroup)
    }

    /// The cgroup at `dir`, if it exists (an earlier deploy's, named by its record).
    pub fn open(dir: &Path) -> Option<Cgroup> {
        dir.join("cgroup.events").exists().then(|| Cgroup { dir: dir.to_owned(), procs: None })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `populated 1` in `cgroup.events`: a process is left in the cgroup or below it. A cgroup
    /// that cannot be read for another reason than its absence counts as populated: a stop
    /// then ends by its bound rather than by a guess that nothing runs.
    fn populated(&self) -> bool {
        let mut events = String::new();
        match std::fs::File::open(self.dir.join("cgroup.events")).and_then(|mut f| f.read_to_string(&mut events)) {
            Ok(_) => events.lines().any(|line| line == "populated 1"),
            Err(e) => e.kind() != std::io::ErrorKind::NotFound,
        }
    }
}

impl ProgramTree for Cgroup {
    fn place(&self) -> Placement {
        Placement { procs: self.procs.as_ref().map(AsRawFd::as_raw_fd) }
    }

    fn is_empty(&self) -> bool {
        !self.populated()
    }

    fn members(&self) -> Vec<Process> {
        let mut pids = Vec::new();
        pids_below(&self.dir, &mut pids);
        pids.into_iter().filter_map(|pid| Some(Process { pid: nix::unistd::Pid::from_raw(pid), start: process::start_time(pid)? })).collect()
    }

    fn kill(&self) {
        let all = std::fs::OpenOptions::new().write(true).open(self.dir.join("cgroup.kill")).and_then(|mut f| std::io::Write::write_all(&mut f, b"1"));
        if all.is_err() {
            // Before Linux 5.14: each process, as often as the stop repeats this (one that forks
            // meanwhile has its child killed in the next round).
            for process in self.members() {
                process.signal(Signal::SIGKILL);
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        remove_empty(&self.dir);
    }
}

/// The pids in `dir`'s `cgroup.procs` and in those of the cgroups below it.
fn pids_below(dir: &Path, pids: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter(|&pid| pid > 0));
    }
    for child in subdirectories(dir) {
        pids_below(&child, pids);
    }
}

/// Removes `dir` and the cgroups below it, deepest first; the kernel refuses to remove a
/// populated one, which then stays.
fn remove_empty(dir: &Path) {
    for child in subdirectories(dir) {
        remove_empty(&child);
    }
    let _ = std::fs::remove_dir(dir);
}

fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect()
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
        let own = super::super::hierarchy::own_cgroup().unwrap_or_else(|why| panic!("these tests need a writable cgroup v2 (run them as root): {why}"));
        Cgroup::create(&own.join(name)).unwrap_or_else(|why| panic!("these tests need a writable cgroup v2 (run them as root): {why}"))
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
        assert_eq!(found.len(), 2, "the program and the helper it started in a session of its own: {found:?}");
        assert!(found.iter().any(|p| p.pid.as_raw() == shell));
        assert!(!cgroup.is_empty());
        let reaper = std::thread::spawn(move || child.wait());
        let stopped = cgroup.stop(Duration::from_millis(500));
        assert_eq!((stopped.signalled, stopped.killed, stopped.empty), (2, 0, true), "SIGTERM was enough");
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
        assert!(started.elapsed() >= Duration::from_millis(300), "the grace was not given");
        assert!(stopped.empty && stopped.killed >= 1, "{stopped:?}");
        reaper.join().unwrap().unwrap();
    }

    #[test]
    fn a_cgroup_that_is_gone_is_empty_and_cannot_be_opened() {
        assert!(Cgroup::open(Path::new("/nonexistent/jobenv-ns-1-2")).is_none());
        let gone = Cgroup { dir: PathBuf::from("/nonexistent/jobenv-ns-1-2"), procs: None };
        assert!(gone.is_empty() && gone.members().is_empty());
    }
}
