//! The program tree: finding it in /proc, and stopping it. jobenv makes itself a child
//! subreaper, so every descendant, even one whose parent died or that moved to another process
//! group or session, stays a descendant of jobenv by parent pid until it is reaped; jobenv
//! therefore signals its descendants one by one and never a process group (its parent's, or a
//! sibling's in a pipeline, must never be hit).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::sync::watch;

pub use crate::process::{Process, is_running, start_time};
use crate::process::read_stat;

/// The live (not zombie) descendants of `root`, parents before children.
pub fn live_descendants(root: Pid) -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut children: HashMap<i32, Vec<(i32, bool, u64)>> = HashMap::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if let Some(stat) = read_stat(pid) {
            children.entry(stat.ppid).or_default().push((pid, stat.zombie, stat.start));
        }
    }
    let mut out = Vec::new();
    let mut queue = vec![root.as_raw()];
    while let Some(parent) = queue.pop() {
        for &(pid, zombie, start) in children.get(&parent).map(Vec::as_slice).unwrap_or_default() {
            // A zombie's children were already handed to us; it only waits to be reaped.
            if !zombie {
                out.push(Process { pid: Pid::from_raw(pid), start });
            }
            queue.push(pid);
        }
    }
    out
}

/// SIGTERM to every live descendant, up to `grace` for them to go, then SIGKILL until none is
/// left. Descendants that appear during the grace period get their SIGTERM too. `tree_gone`
/// turns true when jobenv has no child left (the reaper's report).
pub async fn stop(me: Pid, grace: Duration, tree_gone: &mut watch::Receiver<bool>) {
    let deadline = Instant::now() + grace;
    let mut warned = HashSet::new();
    loop {
        let live = live_descendants(me);
        if live.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            break;
        }
        for process in live {
            if warned.insert(process) {
                process.signal(Signal::SIGTERM);
            }
        }
        let _ = tokio::time::timeout(Duration::from_millis(20), tree_gone.wait_for(|gone| *gone)).await;
    }
    let mut reported = false;
    // Bounded so a process that cannot be killed (uninterruptible sleep) cannot hang jobenv
    // forever; 10 s is far beyond what SIGKILL takes.
    for _ in 0..1000 {
        let live = live_descendants(me);
        if live.is_empty() {
            return;
        }
        if !reported {
            tracing::warn!("{} process(es) still running after the grace period: sending SIGKILL", live.len());
            reported = true;
        }
        for process in live {
            process.signal(Signal::SIGKILL);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tracing::error!("processes of the program tree survived SIGKILL for 10 s");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_grandchild() {
        // Other tests of this binary spawn processes too: look below our own child only.
        let mut child = std::process::Command::new("/bin/sh").args(["-c", "sleep 5 & wait"]).spawn().unwrap();
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
        assert!(!is_running(shell.as_raw(), start + 1), "another start time is another process");
        for process in found {
            process.signal(nix::sys::signal::Signal::SIGKILL);
        }
        let _ = nix::sys::signal::kill(shell, nix::sys::signal::Signal::SIGKILL);
        child.wait().unwrap();
    }
}
