//! An HTTP/1.1 proxy in front of the real OpenBao that can lose what passes through it: a
//! request that matches a rule is closed without an answer, either before it is forwarded
//! (OpenBao never sees it) or after OpenBao answered it (the write happened; its answer is lost),
//! as a reset connection or a crashed agent in between would. Everything else is forwarded as
//! is, one request per upstream connection (`Connection: close`, which OpenBao's answer then
//! carries, so the client does not reuse the connection either).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lose {
    /// Close before forwarding: OpenBao never gets the request.
    Request,
    /// Forward, let OpenBao answer, close without passing the answer on.
    Answer,
}

struct Rule {
    method: String,
    path_contains: String,
    lose: Lose,
    remaining: usize,
}

pub struct Proxy {
    pub url: String,
    rules: Arc<Mutex<Vec<Rule>>>,
    /// `METHOD path` of every request, and whether it was forwarded.
    seen: Arc<Mutex<Vec<(String, bool)>>>,
}

impl Proxy {
    /// A proxy for the OpenBao at `upstream` (`http://host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let rules: Arc<Mutex<Vec<Rule>>> = Arc::default();
        let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
        let (r, s) = (rules.clone(), seen.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, rules, seen) = (upstream.clone(), r.clone(), s.clone());
                std::thread::spawn(move || serve(client, &upstream, &rules, &seen));
            }
        });
        Proxy { url, rules, seen }
    }

    /// The next `times` requests with `method` whose path contains `path_contains` are lost as `lose` says.
    pub fn lose(&self, method: &str, path_contains: &str, lose: Lose, times: usize) {
        self.rules.lock().unwrap().push(Rule {
            method: method.into(),
            path_contains: path_contains.into(),
            lose,
            remaining: times,
        });
    }

    pub fn seen(&self) -> Vec<(String, bool)> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves one request of a client connection, then closes it.
fn serve(mut client: TcpStream, upstream: &str, rules: &Mutex<Vec<Rule>>, seen: &Mutex<Vec<(String, bool)>>) {
    let mut reader = BufReader::new(client.try_clone().unwrap());
    {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let end = line == "\r\n";
            head.push(line);
            if end {
                break;
            }
        }
        let request_line: Vec<&str> = head[0].split_whitespace().collect();
        let (method, path) = (request_line[0].to_owned(), request_line[1].to_owned());
        let length: usize = head
            .iter()
            .find_map(|h| {
                h.split_once(':')
                    .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .map(|(_, v)| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let lose = {
            let mut rules = rules.lock().unwrap();
            rules
                .iter_mut()
                .find(|r| r.remaining > 0 && r.method == method && path.contains(&r.path_contains))
                .map(|r| {
                    r.remaining -= 1;
                    r.lose
                })
        };
        seen.lock()
            .unwrap()
            .push((format!("{method} {path}"), lose != Some(Lose::Request)));
        if lose == Some(Lose::Request) {
            return;
        }
        let mut upstream = TcpStream::connect(upstream).unwrap();
        for line in &head {
            if !line.to_ascii_lowercase().starts_with("connection:") && line != "\r\n" {
                upstream.write_all(line.as_bytes()).unwrap();
            }
        }
        upstream.write_all(b"Connection: close\r\n\r\n").unwrap();
        upstream.write_all(&body).unwrap();
        let mut answer = Vec::new();
        upstream.read_to_end(&mut answer).unwrap();
        if lose == Some(Lose::Answer) {
            return;
        }
        // OpenBao closed after its answer (the request said so, and its answer says so): the
        // client does not reuse this connection either.
        let _ = client.write_all(&answer);
    }
}
