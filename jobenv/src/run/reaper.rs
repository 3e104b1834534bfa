//! Reaping every child of jobenv. jobenv is a child subreaper, so orphans of the program tree
//! become its children; one thread waits for all of them, reports the program's own status,
//! and reports when no child is left (no descendant can exist then).

use nix::errno::Errno;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::sync::{oneshot, watch};

pub struct Reaper {
    /// The exit status of the program (the direct child).
    pub program: oneshot::Receiver<WaitStatus>,
    /// Becomes true once jobenv has no child left.
    pub tree_gone: watch::Receiver<bool>,
}

pub fn start(program: Pid) -> Reaper {
    let (status_tx, status_rx) = oneshot::channel();
    let (gone_tx, gone_rx) = watch::channel(false);
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            let mut status_tx = Some(status_tx);
            loop {
                match waitpid(None, None) {
                    Ok(status) if status.pid() == Some(program) => {
                        if let Some(tx) = status_tx.take() {
                            let _ = tx.send(status);
                        }
                    }
                    Ok(_) | Err(Errno::EINTR) => {}
                    // ECHILD: nothing left to wait for.
                    Err(_) => {
                        let _ = gone_tx.send(true);
                        return;
                    }
                }
            }
        })
        .expect("spawning the reaper thread");
    Reaper {
        program: status_rx,
        tree_gone: gone_rx,
    }
}
