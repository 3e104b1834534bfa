//! Reaping every child of jobenv. jobenv is a child subreaper, so orphans of the program tree
//! become its children; one thread waits for all of them, reports the program's own status,
//! and reports when no child is left (no descendant can exist then).
//!
//! Each exit is first peeked at (`WNOWAIT`) and only then reaped: while the program is still a
//! zombie, `/proc` still shows its last process image, which `on_program_exit` may look at.

use nix::errno::Errno;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use tokio::sync::{oneshot, watch};

pub struct Reaper {
    /// The exit status of the program (the direct child).
    pub program: oneshot::Receiver<WaitStatus>,
    /// Becomes true once jobenv has no child left.
    pub tree_gone: watch::Receiver<bool>,
}

/// `on_program_exit` runs once, when the program has exited but is not reaped yet.
pub fn start(program: Pid, on_program_exit: impl FnOnce() + Send + 'static) -> Reaper {
    let (status_tx, status_rx) = oneshot::channel();
    let (gone_tx, gone_rx) = watch::channel(false);
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            let mut status_tx = Some(status_tx);
            let mut on_program_exit = Some(on_program_exit);
            loop {
                let exited = match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
                    Ok(peeked) => peeked.pid(),
                    Err(Errno::EINTR) => continue,
                    // ECHILD: nothing left to wait for.
                    Err(_) => {
                        let _ = gone_tx.send(true);
                        return;
                    }
                };
                if exited == Some(program) {
                    if let Some(hook) = on_program_exit.take() {
                        hook();
                    }
                }
                // EINTR leaves the zombie in place: the next peek finds it again.
                if let Ok(status) = waitpid(exited, None) {
                    if status.pid() == Some(program) {
                        if let Some(tx) = status_tx.take() {
                            let _ = tx.send(status);
                        }
                    }
                }
            }
        })
        .expect("spawning the reaper thread");
    Reaper { program: status_rx, tree_gone: gone_rx }
}
