//! The signals that cancel a job (SIGTERM, SIGINT, SIGHUP) are held from the start of `run`
//! until the supervisor's handlers are installed, so a cancel that arrives while jobenv
//! validates, waits for a namespace lock or writes its journal is not the default action (a
//! silent death: no result.json, no journal end, no final event) but an ordinary `canceled`
//! ending. Threads started meanwhile inherit the mask, so only the main thread ever takes them.

use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};

pub const CANCEL: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

fn cancel_set() -> SigSet {
    let mut set = SigSet::empty();
    for signal in CANCEL {
        set.add(signal);
    }
    set
}

/// Holds the cancel signals on the calling thread (and the threads it starts from now on).
pub fn hold() {
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&cancel_set()), None);
}

/// Lets the held signals through again: pending ones are delivered at once.
pub fn release() {
    let _ = pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&cancel_set()), None);
}

/// A cancel signal that arrived while held, if any.
pub fn pending() -> Option<Signal> {
    let mut set: nix::libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigpending fills the set we own.
    if unsafe { nix::libc::sigpending(&mut set) } != 0 {
        return None;
    }
    CANCEL.into_iter().find(|signal| unsafe { nix::libc::sigismember(&set, *signal as i32) } == 1)
}

/// Says that a cancel came before the program started (nothing ran).
pub fn log_cancelled_before_start(signal: Signal) {
    tracing::warn!("received {}: the job is canceled before its program started", signal.as_str());
}
