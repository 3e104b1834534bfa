//! The fallback tree, where jobenv cannot make a cgroup: jobenv's descendants by parent pid in
//! `/proc`. jobenv makes itself a child subreaper, so every descendant, even one whose parent
//! died or that moved to another process group or session, stays a descendant of jobenv until
//! it is reaped. What it cannot follow: anything once jobenv itself is gone (its orphans are
//! then PID 1's), which is why a namespace's tree lock (fd 4) is the namespace lock's second
//! half here.

use std::collections::HashMap;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::{Placement, ProgramTree};
pub use crate::process::Process;
use crate::process::read_stat;

/// The descendants of one process (jobenv).
pub struct ProcTree {
    root: Pid,
}

impl ProcTree {
    pub fn of_this_process() -> Self {
        ProcTree {
            root: nix::unistd::getpid(),
        }
    }
}

impl ProgramTree for ProcTree {
    fn place(&self) -> Placement {
        Placement::new(None)
    }

    fn is_empty(&self) -> bool {
        live_descendants(self.root).is_empty()
    }

    fn members(&self) -> Vec<Process> {
        live_descendants(self.root)
    }

    fn kill(&self) {
        for process in live_descendants(self.root) {
            process.signal(Signal::SIGKILL);
        }
    }
}

/// The live (not zombie) descendants of `root`, parents before children.
pub fn live_descendants(root: Pid) -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<i32, Vec<(i32, bool, u64)>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(stat) = read_stat(pid) {
            children
                .entry(stat.ppid)
                .or_default()
                .push((pid, stat.zombie, stat.start));
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root.as_raw()];
    while let Some(parent) = queue.pop() {
        for &(pid, zombie, start) in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
            // A zombie's children were already handed to us; it only waits to be reaped.
            if !zombie {
                out.push(Process {
                    pid: Pid::from_raw(pid),
                    start,
                });
            }
            queue.push(pid);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{is_running, start_time};

    #[test]
    fn finds_a_grandchild() {
        // Other tests of this binary spawn processes too: look below our own child only.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let shell = Pid::from_raw(child.id() as i32);
        let mut found = Vec::new();
        for _ in 0..200 {
            found = live_descendants(shell);
            if !found.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(found.len(), 1, "the backgrounded sleep: {found:?}");
        assert!(live_descendants(nix::unistd::getpid()).iter().any(|p| p.pid == shell));
        let start = start_time(shell.as_raw()).unwrap();
        assert!(is_running(shell.as_raw(), start));
        assert!(
            !is_running(shell.as_raw(), start + 1),
            "another start time is another process"
        );
        for process in found {
            process.signal(nix::sys::signal::Signal::SIGKILL);
        }
        let _ = nix::sys::signal::kill(shell, nix::sys::signal::Signal::SIGKILL);
        child.wait().unwrap();
    }
}
