//! cgroup v2 from a test's side: which cgroup a process is in, whether a deploy's cgroup still
//! holds processes, and the cleanup of what a SIGKILLed jobenv leaves (its deploy's cgroup, under
//! the test binary's own). The v2 hierarchy is found in `/proc/self/mountinfo`, never assumed
//! at `/sys/fs/cgroup` (CI's Debian may mount it at `/sys/fs/cgroup/unified`).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The cgroup (v2) `pid` is in, as `/proc/<pid>/cgroup` names it (`/a/b`).
pub fn cgroup_of(pid: i32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
}

/// Where the cgroup v2 hierarchy is mounted (its root mount).
pub fn v2_mount() -> Option<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (mine, theirs) = line.split_once(" - ")?;
        let fields: Vec<&str> = mine.split(' ').collect();
        (theirs.starts_with("cgroup2 ") && fields.get(3) == Some(&"/"))
            .then(|| PathBuf::from(fields[4].replace("\\040", " ")))
    })
}

/// The directory of the cgroup `pid` is in.
pub fn dir_of(pid: i32) -> Option<PathBuf> {
    Some(v2_mount()?.join(cgroup_of(pid)?.trim_start_matches('/')))
}

/// `populated 1` in the cgroup's `cgroup.events`.
pub fn populated(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|events| events.lines().any(|l| l == "populated 1"))
}

/// The cgroup each of the state directory's tree records names (`locks/*.tree.json`).
pub fn recorded(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(state_dir.join("locks")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".tree.json")))
        // A FIFO or a link planted there (jobenv's tests of the state directory) is no record:
        // reading a FIFO would hang the sweep.
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let record: serde_json::Value = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            record["cgroup"].as_str().map(PathBuf::from)
        })
        .collect()
}

/// Starts `argv` in the cgroup at `dir` (placed before it execs, as jobenv places a program).
pub fn spawn_in(dir: &Path, argv: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .expect("open cgroup.procs");
    let fd = std::os::fd::AsRawFd::as_raw_fd(&procs);
    let mut command = std::process::Command::new(argv[0]);
    command.args(&argv[1..]);
    // SAFETY: one write(2) between fork and exec, on a descriptor opened before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let child = command.spawn().expect("spawn in the cgroup");
    drop(procs);
    child
}

/// Kills what is left in every cgroup the state directory records and removes the cgroup.
pub fn sweep(state_dir: &Path) {
    for dir in recorded(state_dir) {
        // Only a deploy's cgroup: a test must never kill anything else.
        if !dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("jobenv-"))
            || !dir.join("cgroup.events").exists()
        {
            continue;
        }
        let _ = std::fs::write(dir.join("cgroup.kill"), "1");
        crate::process::wait_until(Duration::from_secs(2), || !populated(&dir));
        remove(&dir);
    }
}

fn remove(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            remove(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}
