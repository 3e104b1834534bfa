//! Servers that live as long as the test binary: started once, stopped when it exits.
//!
//! A `static` is never dropped, so a `Drop` guard would leave a postmaster or a `bao` server
//! running after `cargo test`. Two mechanisms instead:
//! - [`at_exit`] runs cleanups from a libc `atexit` handler, which runs when the test harness
//!   returns from `main` or calls `process::exit` (all tests passed, or some failed);
//! - [`spawn_tied`] starts the server with `PR_SET_PDEATHSIG`, from a thread that never ends,
//!   so the kernel signals it even when the test binary is killed (the death signal fires when
//!   the *thread* that forked exits, which is why it is not forked from a test's thread).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::sync::{Mutex, Once, mpsc};

type Cleanup = Box<dyn FnOnce() + Send>;

static CLEANUPS: Mutex<Vec<Cleanup>> = Mutex::new(Vec::new());
static REGISTER: Once = Once::new();

extern "C" fn run_cleanups() {
    let cleanups = std::mem::take(&mut *CLEANUPS.lock().unwrap_or_else(|p| p.into_inner()));
    for cleanup in cleanups.into_iter().rev() {
        cleanup();
    }
}

/// Runs `cleanup` when the process exits normally (last registered, first run).
pub fn at_exit(cleanup: impl FnOnce() + Send + 'static) {
    REGISTER.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function; nothing else.
        unsafe {
            libc::atexit(run_cleanups);
        }
    });
    CLEANUPS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Box::new(cleanup));
}

/// Who the child runs as, set in the child before the death signal (a change of credentials
/// clears `PR_SET_PDEATHSIG`, so the order matters and is not left to std).
#[derive(Debug, Clone, Copy)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// Spawns `command` so that it gets `signal` when this process dies, however it dies.
pub fn spawn_tied(mut command: Command, run_as: Option<RunAs>, signal: libc::c_int) -> io::Result<Child> {
    // SAFETY: only async-signal-safe system calls run between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if let Some(RunAs { uid, gid }) = run_as {
                if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("testkit-server-parent".into())
        .spawn(move || {
            let _ = sender.send(command.spawn());
            // The death signal is tied to this thread: it must outlive every test.
            loop {
                std::thread::park();
            }
        })?;
    receiver
        .recv()
        .map_err(|_| io::Error::other("the spawning thread died"))?
}

/// Ends a child: `signal`, then SIGKILL if it has not exited after `grace`.
pub fn stop(child: &mut Child, signal: libc::c_int, grace: std::time::Duration) {
    // SAFETY: signals our own child by pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A free TCP port on 127.0.0.1 (bound, then released; servers started right after take it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A random string of `len` alphanumerics, for passwords and tokens in tests.
pub fn random_string(len: usize) -> String {
    use std::io::Read;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = vec![0u8; len];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom");
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}
