//! Process identity from `/proc`: a pid and its start time name one process (a pid alone can be
//! reused), within one boot. Shared by the program tree ([`crate::run::tree`]) and the journal
//! ([`crate::record`]), which records who runs a job and later asks whether that process still
//! runs.

use nix::unistd::Pid;

pub(crate) struct Stat {
    pub ppid: i32,
    pub zombie: bool,
    /// Clock ticks after boot when the process started: with the pid, it names one process
    /// (a pid alone can be reused).
    pub start: u64,
}

/// Reads `/proc/<pid>/stat`: `pid (comm) state ppid ...`; comm may hold spaces and parens.
pub(crate) fn read_stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &text[text.rfind(')')? + 2..];
    let mut fields = after_comm.split(' ');
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    // Field 22 of stat; `fields` now stands at field 5.
    let start = fields.nth(17)?.parse().ok()?;
    Some(Stat {
        ppid,
        zombie: state == "Z" || state == "X",
        start,
    })
}

/// This boot's id: a pid and its start time name one process only within one boot.
pub fn boot_id() -> Option<&'static str> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|id| id.trim().to_owned())
        })
        .as_deref()
}

/// The parent of `pid`; `None` if there is no such process.
pub fn parent_of(pid: i32) -> Option<i32> {
    read_stat(pid).map(|stat| stat.ppid)
}

/// When `pid` started (see [`is_running`]); `None` if there is no such process.
pub fn start_time(pid: i32) -> Option<u64> {
    read_stat(pid).map(|stat| stat.start)
}

/// True when the process `pid` that started at `start` still runs (not a zombie, not a
/// newer process that reused the pid).
pub fn is_running(pid: i32, start: u64) -> bool {
    read_stat(pid).is_some_and(|stat| !stat.zombie && stat.start == start)
}

/// The kernel keeps 15 bytes of a process's name: `fediversity-jobenv` is `fediversity-job`.
const JOBENV_COMM: &str = "fediversity-job";

/// True when `pid`, started at `start`, still runs and is a jobenv: a journal entry names a pid,
/// and a forged or stale one must not make jobenv wait for, or signal, an unrelated process.
pub fn is_jobenv(pid: i32, start: u64) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    is_running(pid, start) && comm.trim_end() == JOBENV_COMM
}

/// Whether process `pid` holds a `flock` on the file `(dev, ino)`, by `flocks`, a reading of
/// `/proc/locks` (a flock's pid is the process that took it). What ties a process to a lock file
/// of a state directory, which a pid, a start time and a name in a planted entry cannot.
pub fn holds_flock(flocks: &str, pid: i32, dev: u64, ino: u64) -> bool {
    let file = format!(
        "{:02x}:{:02x}:{ino}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    flocks.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; a waiter's line starts `1: -> FLOCK`.
        fields.get(1) == Some(&"FLOCK")
            && fields.get(4) == Some(&pid.to_string().as_str())
            && fields.get(5) == Some(&file.as_str())
    })
}

/// A live process, named by its pid and start time (a pid alone can be reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Process {
    pub pid: Pid,
    pub start: u64,
}

impl Process {
    /// Signals the process if it is still the one that was found (not a newer process that
    /// reused its pid since).
    pub fn signal(self, signal: nix::sys::signal::Signal) {
        if is_running(self.pid.as_raw(), self.start) {
            let _ = nix::sys::signal::kill(self.pid, signal);
        }
    }
}
