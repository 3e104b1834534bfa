//! Reaping every child of jobenv. jobenv is a child subreaper, so orphans of the program tree
//! become its children; one thread waits for all of them, reports each status (the steps before
//! the program and the program are waited for by pid: [`Reaper::wait_for`]), and reports when
//! no child is left (no descendant can exist then). Between two steps there may be no child for
//! a moment: the thread then waits for the next spawn ([`Reaper::spawned`]) until it is told
//! that none will come ([`Reaper::close`]).

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use nix::errno::Errno;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::sync::{mpsc, watch};

pub struct Reaper {
    statuses: mpsc::UnboundedReceiver<WaitStatus>,
    /// Becomes true once jobenv has no child left and none will be spawned.
    pub tree_gone: watch::Receiver<bool>,
    spawns: Arc<Spawns>,
}

/// What the reaper thread is told of spawns: how many so far, and whether more may come.
#[derive(Default)]
struct Spawns {
    state: Mutex<(u64, bool)>,
    changed: Condvar,
}

pub fn start() -> Reaper {
    let (status_tx, status_rx) = mpsc::unbounded_channel();
    let (gone_tx, gone_rx) = watch::channel(false);
    let spawns = Arc::new(Spawns::default());
    let thread_spawns = Arc::clone(&spawns);
    std::thread::Builder::new()
        .name("reaper".into())
        .spawn(move || {
            loop {
                let seen = thread_spawns.state.lock().unwrap_or_else(PoisonError::into_inner).0;
                match waitpid(None, None) {
                    Ok(status) => {
                        let _ = status_tx.send(status);
                    }
                    Err(Errno::EINTR) => {}
                    // ECHILD: no child now. Unless one was spawned meanwhile, or more will be,
                    // nothing is left to wait for.
                    Err(_) => {
                        let state = thread_spawns.state.lock().unwrap_or_else(PoisonError::into_inner);
                        let state = thread_spawns
                            .changed
                            .wait_while(state, |(count, closed)| *count == seen && !*closed)
                            .unwrap_or_else(PoisonError::into_inner);
                        if state.0 == seen {
                            gone_tx.send_replace(true);
                            return;
                        }
                    }
                }
            }
        })
        .expect("spawning the reaper thread");
    Reaper {
        statuses: status_rx,
        tree_gone: gone_rx,
        spawns,
    }
}

impl Reaper {
    /// A child was just spawned: the thread waits for it.
    pub fn spawned(&self) {
        let mut state = self.spawns.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += 1;
        self.spawns.changed.notify_all();
    }

    /// No child will be spawned any more: once none is left, the tree is gone.
    pub fn close(&self) {
        let mut state = self.spawns.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.1 = true;
        self.spawns.changed.notify_all();
    }

    /// The exit status of the child `pid` (spawned before this is called); the statuses of other
    /// children that come first (orphans of the tree) are passed over.
    pub async fn wait_for(&mut self, pid: Pid) -> WaitStatus {
        loop {
            match self.statuses.recv().await {
                Some(status) if status.pid() == Some(pid) => return status,
                Some(_) => {}
                // The thread is gone, which it is only once no child is left: ours was reaped
                // by no one else, so this cannot happen while it is alive.
                None => std::future::pending::<()>().await,
            }
        }
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.close();
    }
}
