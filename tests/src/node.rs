//! A node for the bootstrap's integration tests: a PostgreSQL database with Windmill's
//! `password` table, the Windmill fake reading it, a real OpenBao, a scripts tree, the config
//! file, and a runner for the real binary that scans everything it prints for secrets.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::openbao::{self, OpenBao};
use crate::postgres::{self, WindmillDb};
use crate::windmill_fake::WindmillFake;

/// The group the nginx include is given in tests: a real group that is not root's.
pub const UI_GROUP: &str = "postgres";

/// The scripts every node starts with; `README.md` must be ignored.
pub const SCRIPTS: &[(&str, &str)] = &[
    (
        "f/fediversity/deploy.py",
        "from f.fediversity._runner import run\n\ndef main(**payload):\n    return run('apply', payload)\n",
    ),
    (
        "f/fediversity/destroy.py",
        "from f.fediversity._runner import run\n\ndef main(**payload):\n    return run('destroy', payload)\n",
    ),
    (
        "f/fediversity/_runner.py",
        "import os\n\ndef run(verb, payload):\n    os.execv('/run/current-system/sw/bin/fediversity-jobenv', ['jobenv', 'run', '--verb', verb])\n",
    ),
    ("f/fediversity/hello.sh", "name=\"$1\"\necho \"hello $name\"\n"),
    ("README.md", "Not a script: ignored.\n"),
];

pub struct Node {
    pub dir: tempfile::TempDir,
    pub db: WindmillDb,
    pub windmill: WindmillFake,
    /// The node password (`windmill.admin_password_file`).
    pub password: String,
    /// Where the token goes: the OpenBao server, the `bao kv put` path, the token the bootstrap
    /// uses for it.
    pub bao_addr: String,
    pub bao_path: String,
    pub bao_token: String,
    /// The configuration written before each run; tests may change it.
    pub config: Value,
    /// Every line every run printed, for the secret scans.
    pub printed: std::sync::Mutex<Vec<String>>,
    /// Secrets to look for beyond those the node knows (an owned OpenBao's root token).
    pub extra_secrets: Vec<(String, String)>,
}

/// One run of the binary.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The `step N/9 <name>: ...` line of a step.
    pub fn step_line(&self, number: usize) -> &str {
        let needle = format!("step {number}/9 ");
        self.stderr
            .lines()
            .find(|l| l.contains(&needle))
            .unwrap_or_else(|| panic!("no line for step {number}:\n{}", self.stderr))
    }

    pub fn step_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.contains(": step ")).collect()
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Node {
    /// A fresh node: Windmill with only the seed admin (password `changeme`), KV v2 at the dev
    /// server's `secret/` with a token that may only create/update the bootstrap's secret.
    pub fn new() -> Node {
        let bao = openbao::shared();
        let name = OpenBao::unique("windmill");
        let bao_path = format!("secret/{name}/apiToken");
        let token = bao.token_with_policy(
            &OpenBao::unique("writer"),
            &format!("path \"secret/data/{name}/apiToken\" {{ capabilities = [\"create\", \"update\"] }}\n"),
        );
        Self::with_openbao(&bao.addr, &bao_path, &token)
    }

    /// A node whose token goes to `bao_path` on the OpenBao at `bao_addr`, written with
    /// `bao_token`.
    pub fn with_openbao(bao_addr: &str, bao_path: &str, bao_token: &str) -> Node {
        Self::with_openbao_on(bao_addr, bao_path, bao_token, crate::windmill_fake::DEFAULT_PROFILE)
    }

    /// [`with_openbao`](Self::with_openbao), with a Windmill that answers as `profile`.
    pub fn with_openbao_on(
        bao_addr: &str,
        bao_path: &str,
        bao_token: &str,
        profile: crate::windmill_fake::Profile,
    ) -> Node {
        let db = postgres::cluster().windmill_database();
        let windmill = WindmillFake::start_profile(&db.superuser_dsn(), profile);
        Self::assemble(db, windmill, bao_addr, bao_path, bao_token)
    }

    /// Like [`with_openbao`](Self::with_openbao), on `db` (a database of another cluster than
    /// the shared one).
    pub fn with_openbao_in(db: WindmillDb, bao_addr: &str, bao_path: &str, bao_token: &str) -> Node {
        let windmill = WindmillFake::start(&db.superuser_dsn());
        Self::assemble(db, windmill, bao_addr, bao_path, bao_token)
    }

    /// Like [`new`](Self::new), with a Windmill that refuses connections at first.
    pub fn with_windmill_refusing(refuse_for: Duration) -> Node {
        let bao = openbao::shared();
        let db = postgres::cluster().windmill_database();
        let windmill = WindmillFake::start_refusing(&db.superuser_dsn(), refuse_for);
        let path = format!("secret/{}/apiToken", OpenBao::unique("windmill"));
        Self::assemble(db, windmill, &bao.addr, &path, bao.root_token())
    }

    fn assemble(db: WindmillDb, windmill: WindmillFake, bao_addr: &str, bao_path: &str, bao_token: &str) -> Node {
        let dir = tempfile::Builder::new()
            .prefix("bootstrap-node-")
            .tempdir()
            .expect("temp dir");
        let password = format!("node-pw-{}", crate::servers::random_string(20));
        std::fs::write(dir.path().join("admin-password"), format!("{password}\n")).unwrap();
        std::fs::write(dir.path().join("database-url"), format!("{}\n", db.app_dsn())).unwrap();
        std::fs::write(dir.path().join("bao-token"), format!("{bao_token}\n")).unwrap();
        for (file, content) in SCRIPTS {
            let path = dir.path().join("scripts").join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        let p = |name: &str| dir.path().join(name).display().to_string();
        let config = json!({
            "windmill": {
                "url": windmill.url,
                "admin_password_file": p("admin-password"),
                "database_url_file": p("database-url"),
            },
            "scripts": {"dir": p("scripts")},
            "openbao": {"addr": bao_addr, "token_file": p("bao-token"), "path": bao_path},
            "ui_auth": {"file": p("run/windmill-ui-auth/token.conf"), "group": UI_GROUP},
            // Short delays: the suite stays fast; the behaviour is the same.
            "retry": {
                "login_attempts": 3, "delay_seconds": 0.05, "ready_timeout_seconds": 15,
                "call_attempts": 3, "call_delay_seconds": 0.02, "request_timeout_seconds": 5,
                "lock_timeout_seconds": 10
            },
            "lock_file": p("bootstrap.lock"),
            "state_file": p("state/bootstrap-state.json"),
        });
        Node {
            dir,
            db,
            windmill,
            password,
            bao_addr: bao_addr.to_owned(),
            bao_path: bao_path.to_owned(),
            bao_token: bao_token.to_owned(),
            config,
            printed: Default::default(),
            extra_secrets: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn scripts_dir(&self) -> PathBuf {
        self.dir.path().join("scripts")
    }

    pub fn write_script(&self, relative: &str, content: &str) {
        let path = self.scripts_dir().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub fn include_path(&self) -> PathBuf {
        PathBuf::from(self.config["ui_auth"]["file"].as_str().unwrap())
    }

    /// The token in the nginx include, parsed from its one line.
    pub fn include_token(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.include_path()).ok()?;
        let token = text
            .strip_prefix("proxy_set_header Authorization \"Bearer ")?
            .strip_suffix("\";\n")?;
        Some(token.to_owned())
    }

    pub fn include_meta(&self) -> Option<std::fs::Metadata> {
        std::fs::metadata(self.include_path()).ok()
    }

    pub fn state_path(&self) -> PathBuf {
        PathBuf::from(self.config["state_file"].as_str().unwrap())
    }

    /// The bootstrap's state file, parsed (`None` before a run wrote it).
    pub fn state(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.state_path()).ok()?;
        Some(serde_json::from_str(&text).expect("the state file is JSON"))
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.json")
    }

    pub fn write_config(&self) -> PathBuf {
        let path = self.config_path();
        std::fs::write(&path, serde_json::to_string_pretty(&self.config).unwrap()).unwrap();
        path
    }

    /// Runs the binary with `--config` and `extra` arguments and a clean environment.
    pub fn run(&self, binary: &Path, extra: &[&str]) -> Run {
        let config = self.write_config();
        let out = Self::command(binary, &config, extra)
            .output()
            .expect("run the bootstrap");
        self.finish(out)
    }

    /// The command [`run`](Self::run) runs, for tests that start it themselves.
    pub fn command(binary: &Path, config: &Path, extra: &[&str]) -> Command {
        let mut command = Command::new(binary);
        command
            .arg("--config")
            .arg(config)
            .args(extra)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .stdin(Stdio::null());
        command
    }

    /// Records and scans the output of a run started with [`command`](Self::command).
    pub fn finish(&self, out: Output) -> Run {
        let run = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        let mut printed = self.printed.lock().unwrap();
        printed.extend(run.stdout.lines().map(str::to_owned));
        printed.extend(run.stderr.lines().map(str::to_owned));
        drop(printed);
        self.assert_no_secrets(&format!("{}\n{}", run.stdout, run.stderr));
        run
    }

    /// Every secret of this node with a name for messages: the node password, the DSN and its
    /// password, the OpenBao token, and every token the fake ever handed out (with their
    /// 10-character list prefixes).
    pub fn secrets(&self) -> Vec<(String, String)> {
        let mut secrets = vec![
            ("the node password".to_owned(), self.password.clone()),
            ("the DSN".to_owned(), self.db.app_dsn()),
            ("the database password".to_owned(), self.db.app_password()),
            ("the OpenBao token".to_owned(), self.bao_token.clone()),
        ];
        for (i, token) in self.windmill.ever_minted().into_iter().enumerate() {
            secrets.push((format!("Windmill token #{i}"), token.clone()));
            secrets.push((format!("the prefix of Windmill token #{i}"), token[..10].to_owned()));
        }
        secrets.extend(self.extra_secrets.iter().cloned());
        secrets
    }

    pub fn assert_no_secrets(&self, output: &str) {
        let found = find_secrets(output, &self.secrets());
        assert!(
            found.is_empty(),
            "the bootstrap printed {}:\n(output withheld: it holds a secret)",
            found.join(", ")
        );
    }

    /// Whether `token` authenticates against the fake, over HTTP (`GET /api/users/whoami`).
    /// A deleted token that is not a session may still authenticate for up to two minutes (the
    /// auth cache, see [`crate::windmill_fake`]): whether a token was revoked is
    /// [`WindmillFake::has_token`], which is what the bootstrap controls.
    pub fn token_works(&self, token: &str) -> bool {
        let reply = crate::http::request(
            "GET",
            &format!("{}/api/users/whoami", self.windmill.url),
            &[("Authorization", &format!("Bearer {token}"))],
            None,
        );
        reply.status == 200
    }

    /// Logs in as the admin with `password`, over HTTP, as someone other than the bootstrap
    /// would: the session token, or `None` on "Invalid login".
    pub fn login(&self, password: &str) -> Option<String> {
        let body = json!({"email": crate::postgres::ADMIN_EMAIL, "password": password}).to_string();
        let reply = crate::http::request(
            "POST",
            &format!("{}/api/auth/login", self.windmill.url),
            &[],
            Some(&body),
        );
        match reply.status {
            200 => Some(reply.body),
            400 => None,
            other => panic!("login answered {other}: {}", reply.body),
        }
    }

    /// The session tokens (label `session`) in the fake's `token` table.
    pub fn sessions(&self) -> Vec<String> {
        self.windmill
            .tokens()
            .into_iter()
            .filter(|t| t.label == "session")
            .map(|t| t.token)
            .collect()
    }

    /// Owner, group and mode of the include.
    pub fn include_owner_group_mode(&self) -> Option<(u32, u32, u32)> {
        self.include_meta().map(|m| (m.uid(), m.gid(), m.mode() & 0o7777))
    }
}

impl Default for Node {
    fn default() -> Self {
        Self::new()
    }
}

/// The names of the secrets that occur in `output`: as they are, as Rust's `Debug` prints them,
/// or JSON-escaped the way any of the encoders of [`crate::json_forms`] writes them (serde,
/// Python's `json.dumps`, PHP, Go, upper-case hex).
pub fn find_secrets(output: &str, secrets: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, value) in secrets {
        if value.is_empty() {
            continue;
        }
        if crate::json_forms::every_form(value)
            .iter()
            .any(|form| output.contains(form.as_str()))
        {
            found.push(name.clone());
        }
    }
    found
}

/// The group id of [`UI_GROUP`].
pub fn ui_gid() -> u32 {
    nix::unistd::Group::from_name(UI_GROUP)
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("group {UI_GROUP} is missing: run .ci/run"))
        .gid
        .as_raw()
}
