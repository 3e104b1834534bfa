//! A TCP proxy in front of a server that a test can cut off: standing for a network partition
//! between one client (a node) and the server, while other clients reach the server directly.
//! Cut, it forwards nothing either way, on the connections it has and on new ones (which it
//! accepts and leaves unanswered): what a client sees of a partition, no answer at all.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target` on 127.0.0.1.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let state = Arc::clone(&cut);
        std::thread::Builder::new()
            .name("testkit-proxy".into())
            .spawn(move || {
                for client in listener.incoming().flatten() {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                        continue;
                    };
                    for (from, to) in [
                        (client.try_clone(), server.try_clone()),
                        (server.try_clone(), client.try_clone()),
                    ] {
                        let (Ok(from), Ok(to)) = (from, to) else { continue };
                        let cut = Arc::clone(&state);
                        std::thread::spawn(move || pipe(from, to, &cut));
                    }
                }
            })
            .expect("proxy thread");
        Proxy { port, cut }
    }

    /// From now on nothing passes.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Everything passes again (what was sent while cut is lost).
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`; while cut, what arrives is dropped.
fn pipe(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) if !cut.load(Ordering::SeqCst) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}
