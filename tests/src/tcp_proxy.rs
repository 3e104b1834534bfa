//! A TCP proxy in front of a server that a test can cut off: standing for a network partition
//! between one client (a node) and the server, while other clients reach the server directly.
//! Cut, it forwards nothing either way, on the connections it has and on new ones (which it
//! accepts and leaves unanswered): what a client sees of a partition, no answer at all. It can
//! also lose or delay only the server's answers: the server has done what it was asked, and the
//! client does not know yet (or never will); or close every connection and refuse new ones for
//! a while, as a server that restarts does.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Proxy {
    pub port: u16,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// Nothing passes.
    cut: AtomicBool,
    /// The server's answers are dropped.
    replies_cut: AtomicBool,
    /// The server's answers wait this long (milliseconds) before they are passed on.
    reply_delay: AtomicU64,
    /// Raised by [`Proxy::reset`]: the connections made before end.
    generation: AtomicU64,
    /// Until then, a new connection is closed at once.
    refusing_until: Mutex<Option<Instant>>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target` on 127.0.0.1.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(State::default());
        let shared = Arc::clone(&state);
        std::thread::Builder::new()
            .name("testkit-proxy".into())
            .spawn(move || {
                for client in listener.incoming().flatten() {
                    let refusing = *shared.refusing_until.lock().unwrap_or_else(|p| p.into_inner());
                    if refusing.is_some_and(|until| Instant::now() < until) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                        continue;
                    };
                    for (from, to, replies) in [
                        (client.try_clone(), server.try_clone(), false),
                        (server.try_clone(), client.try_clone(), true),
                    ] {
                        let (Ok(from), Ok(to)) = (from, to) else { continue };
                        let state = Arc::clone(&shared);
                        let generation = state.generation.load(Ordering::SeqCst);
                        std::thread::spawn(move || pipe(from, to, &state, replies, generation));
                    }
                }
            })
            .expect("proxy thread");
        Proxy { port, state }
    }

    /// From now on nothing passes.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
    }

    /// From now on what the client sends reaches the server, but no answer reaches the client.
    pub fn cut_replies(&self) {
        self.state.replies_cut.store(true, Ordering::SeqCst);
    }

    /// From now on every answer of the server reaches the client `delay` late.
    pub fn delay_replies(&self, delay: Duration) {
        self.state
            .reply_delay
            .store(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Every connection ends now, and new ones are closed at once for `refusing`.
    pub fn reset(&self, refusing: Duration) {
        *self.state.refusing_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + refusing);
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Everything passes again, at once (what was sent while cut is lost).
    pub fn heal(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
        self.state.replies_cut.store(false, Ordering::SeqCst);
        self.state.reply_delay.store(0, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` (`replies`: the server's way); while cut, what arrives is dropped.
/// Ends both once the proxy is reset after `generation`.
fn pipe(mut from: TcpStream, mut to: TcpStream, state: &State, replies: bool, generation: u64) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(20)));
    let mut buffer = [0u8; 16 * 1024];
    loop {
        if state.generation.load(Ordering::SeqCst) != generation {
            let _ = from.shutdown(std::net::Shutdown::Both);
            let _ = to.shutdown(std::net::Shutdown::Both);
            return;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if replies {
                    let delay = state.reply_delay.load(Ordering::SeqCst);
                    if delay > 0 {
                        std::thread::sleep(Duration::from_millis(delay));
                    }
                }
                let dropped = state.cut.load(Ordering::SeqCst) || (replies && state.replies_cut.load(Ordering::SeqCst));
                if !dropped && to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}
