//! The configuration file (`--config FILE`, JSON, rendered by the NixOS module) and everything
//! that can be checked before the node is touched: files exist and are readable, names have the
//! shapes Windmill accepts and are safe in an API path, URLs carry no credential, the owner and
//! group of the nginx include exist. All problems are reported together, each naming the field
//! or the file; values of secrets never appear.
//!
//! - `file`: the file as written, its defaults, and serde's messages without values;
//! - `checks`: the checks of single values;
//! - `resolve`: from the file to [`Config`], section by section.

mod checks;
mod file;
mod resolve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use safe_io::secret::Secret;
use serde_json::Value;

use crate::error::{Error, Result};

pub use checks::{IMPERSONATION_LABEL, is_reserved_label, is_username};
pub use file::{DEFAULT_LOCK_FILE, DEFAULT_STATE_FILE, DEFAULT_USER_EMAIL};

#[derive(Debug)]
pub struct Config {
    pub windmill: Windmill,
    pub database: Database,
    pub workspace: Workspace,
    pub scripts: Scripts,
    pub token: Token,
    pub settings: BTreeMap<String, Value>,
    pub openbao: OpenBao,
    pub ui_auth: UiAuth,
    pub retry: Retry,
    pub lock_file: PathBuf,
    /// The labels minted under and the script versions created, between runs (`state.rs`).
    pub state_file: PathBuf,
}

#[derive(Debug)]
pub struct Windmill {
    /// Without a trailing slash.
    pub url: String,
    /// Lower-cased, as Windmill's login does.
    pub admin_email: String,
    pub admin_password: Secret,
    pub default_password: Secret,
}

#[derive(Debug)]
pub struct Database {
    /// The whole DSN, kept only to scrub it from messages.
    pub dsn: Secret,
    /// The DSN's own password, when it has one, also only to scrub it (a server may quote it).
    pub password: Option<Secret>,
    /// Parsed; its `Debug` redacts the password.
    pub config: tokio_postgres::Config,
    pub role: String,
}

impl Database {
    /// The secrets of the database connection, for [`safe_io::secret::scrub`].
    pub fn secrets(&self) -> Vec<&Secret> {
        let mut all = vec![&self.dsn];
        all.extend(self.password.as_ref());
        all
    }
}

#[derive(Debug)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    pub folder: String,
}

#[derive(Debug)]
pub struct Scripts {
    pub dir: PathBuf,
    pub concurrency: usize,
}

/// The front-end's token (stored in OpenBao) and its owner, a workspace operator.
#[derive(Debug)]
pub struct Token {
    pub label: String,
    /// The operator's email, lower-cased as Windmill stores it.
    pub user_email: String,
    /// The operator's username where Windmill does not derive it from the email.
    pub username: String,
    /// Resolved: the defaults filled in; empty means an unscoped token.
    pub scopes: Vec<String>,
    pub bind_to_workspace: bool,
    /// For both labels: the front-end's and the include's.
    pub revoke_previous: bool,
}

#[derive(Debug)]
pub struct OpenBao {
    /// Without a trailing slash.
    pub addr: String,
    pub token: Option<Secret>,
    /// The `bao kv put` path, without leading or trailing slashes.
    pub path: String,
    pub field: String,
}

#[derive(Debug)]
pub struct UiAuth {
    /// The label of the include's token.
    pub label: String,
    pub file: PathBuf,
    pub owner: String,
    pub uid: u32,
    pub group: String,
    pub gid: u32,
    pub mode: u32,
}

#[derive(Debug, Clone)]
pub struct Retry {
    pub login_attempts: u32,
    pub delay: Duration,
    pub ready_timeout: Duration,
    pub call_attempts: usize,
    pub call_delay: Duration,
    pub request_timeout: Duration,
    /// How long step 5 waits for a worker to lock the versions that need it.
    pub lock_timeout: Duration,
}

impl Config {
    /// Every secret of the configuration, for [`safe_io::secret::scrub`]: the default password
    /// too, as a server may echo the login that tried it.
    pub fn secrets(&self) -> Vec<&Secret> {
        let mut all = vec![&self.windmill.admin_password, &self.windmill.default_password];
        all.extend(self.database.secrets());
        all.extend(self.openbao.token.as_ref());
        all
    }
}

/// Environment lookups, injectable so tests of this module do not touch the process env.
pub trait Env {
    fn var(&self, key: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }
}

pub fn load(path: &Path) -> Result<Config> {
    load_with(path, &ProcessEnv)
}

pub fn load_with(path: &Path, env: &dyn Env) -> Result<Config> {
    let raw = file::read(path)?;
    let mut problems = Problems::default();
    match resolve::config(raw, env, &mut problems) {
        Some(config) if problems.0.is_empty() => Ok(config),
        _ => Err(Error::Config(problems.0.join("\n"))),
    }
}

/// What is wrong with the configuration, one line each.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoEnv;
    impl Env for NoEnv {
        fn var(&self, _: &str) -> Option<String> {
            None
        }
    }
    struct MapEnv(Vec<(&'static str, &'static str)>);
    impl Env for MapEnv {
        fn var(&self, key: &str) -> Option<String> {
            self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string())
        }
    }

    fn setup(config: serde_json::Value) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pw"), "a-long-password\n").unwrap();
        std::fs::write(
            dir.path().join("dsn"),
            "host=127.0.0.1 user=windmill password=dbsecret dbname=windmill\n",
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("scripts")).unwrap();
        let mut base = serde_json::json!({
            "windmill": {
                "admin_password_file": dir.path().join("pw"),
                "database_url_file": dir.path().join("dsn"),
            },
            "scripts": {"dir": dir.path().join("scripts")},
            "openbao": {"path": "/secret/windmill/apiToken/"},
            "ui_auth": {"group": "root"},
        });
        merge(&mut base, config);
        let path = dir.path().join("config.json");
        std::fs::write(&path, base.to_string()).unwrap();
        (dir, path)
    }

    fn merge(base: &mut Value, patch: Value) {
        match (base, patch) {
            (Value::Object(b), Value::Object(p)) => {
                for (k, v) in p {
                    merge(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (b, p) => *b = p,
        }
    }

    #[test]
    fn defaults_apply() {
        let (_dir, path) = setup(serde_json::json!({"openbao": {"addr": "http://127.0.0.1:8200/"}}));
        let c = load_with(&path, &NoEnv).unwrap();
        assert_eq!(c.windmill.url, "http://127.0.0.1:8001");
        assert_eq!(c.windmill.admin_email, "admin@windmill.dev");
        assert_eq!(c.windmill.admin_password.expose(), "a-long-password");
        assert_eq!(c.windmill.default_password.expose(), "changeme");
        assert_eq!(c.database.role, "windmill_admin");
        assert_eq!(
            (
                c.workspace.id.as_str(),
                c.workspace.name.as_str(),
                c.workspace.folder.as_str()
            ),
            ("fediversity", "fediversity", "fediversity")
        );
        assert_eq!(c.token.label, "fediversity");
        assert_eq!(
            c.token.scopes,
            [
                "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy",
                "jobs:write"
            ]
        );
        assert_eq!(
            (c.token.user_email.as_str(), c.token.username.as_str()),
            ("frontend@fediversity.invalid", "frontend")
        );
        assert!(c.token.bind_to_workspace);
        assert!(c.token.revoke_previous);
        assert_eq!(c.ui_auth.label, "fediversity-ui");
        assert_eq!(c.settings.get("instance_python_version"), Some(&Value::from("3.12")));
        assert_eq!(c.openbao.addr, "http://127.0.0.1:8200");
        assert_eq!(c.openbao.path, "secret/windmill/apiToken");
        assert_eq!(c.openbao.field, "value");
        assert!(c.openbao.token.is_none());
        assert_eq!(c.ui_auth.file, PathBuf::from("/run/windmill-ui-auth/token.conf"));
        assert_eq!((c.ui_auth.uid, c.ui_auth.gid, c.ui_auth.mode), (0, 0, 0o440));
        assert_eq!(c.retry.login_attempts, 12);
        assert_eq!(c.retry.delay, Duration::from_secs(5));
        assert_eq!(c.retry.ready_timeout, Duration::from_secs(300));
        assert_eq!(c.lock_file, PathBuf::from(DEFAULT_LOCK_FILE));
        assert_eq!(c.state_file, PathBuf::from(DEFAULT_STATE_FILE));
        // The DSN's password is known, to be scrubbed.
        assert_eq!(c.database.password.as_ref().map(Secret::expose), Some("dbsecret"));
        // The node password, the default one, the DSN and its password.
        assert_eq!(c.secrets().len(), 4);
        // The Debug of the whole configuration shows no secret.
        let debug = format!("{c:?}");
        assert!(
            !debug.contains("a-long-password") && !debug.contains("dbsecret"),
            "{debug}"
        );
    }

    #[test]
    fn the_default_scopes_follow_the_folder_and_null_is_the_default() {
        let (_dir, path) = setup(
            serde_json::json!({"openbao": {"addr": "http://x:1"}, "workspace": {"folder": "ops"}, "token": {"scopes": null}}),
        );
        let c = load_with(&path, &NoEnv).unwrap();
        assert_eq!(
            c.token.scopes,
            ["jobs:run:scripts:f/ops/deploy,f/ops/destroy", "jobs:write"]
        );
        let (_dir, path) = setup(
            serde_json::json!({"openbao": {"addr": "http://x:1"}, "token": {"scopes": [], "bind_to_workspace": false}}),
        );
        let c = load_with(&path, &NoEnv).unwrap();
        assert!(c.token.scopes.is_empty() && !c.token.bind_to_workspace);
    }

    #[test]
    fn openbao_env_fallback_like_the_cli() {
        let (_dir, path) = setup(serde_json::json!({}));
        let c = load_with(
            &path,
            &MapEnv(vec![("VAULT_ADDR", "http://v:1"), ("VAULT_TOKEN", "vt")]),
        )
        .unwrap();
        assert_eq!(c.openbao.addr, "http://v:1");
        assert_eq!(c.openbao.token.unwrap().expose(), "vt");
        let c = load_with(
            &path,
            &MapEnv(vec![("BAO_ADDR", "http://b:1"), ("VAULT_ADDR", "http://v:1")]),
        )
        .unwrap();
        assert_eq!(c.openbao.addr, "http://b:1");
        let err = load_with(&path, &NoEnv).unwrap_err().to_string();
        assert!(err.contains("openbao.addr is required"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_by_name() {
        let (_dir, path) = setup(serde_json::json!({
            "openbao": {"addr": "ftp://x"},
            "workspace": {"id": "bad id", "folder": "bad-folder"},
            "token": {"label": "session", "user_email": "Admin@Windmill.dev", "username": "1front"},
            "ui_auth": {"mode": "0444", "group": "no-such-group-here"},
            "retry": {"call_attempts": 0, "delay_seconds": -1.0},
        }));
        let err = load_with(&path, &NoEnv).unwrap_err();
        assert_eq!(err.exit_code(), crate::error::EXIT_CONFIG);
        let text = err.to_string();
        for needle in [
            "openbao.addr",
            "workspace.id",
            "workspace.folder",
            "token.label",
            "token.user_email is the superadmin's",
            "token.username \"1front\" is invalid",
            "ui_auth.mode 0444 gives access to others",
            "no group named",
            "retry.call_attempts",
            "retry.delay_seconds",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }

    #[test]
    fn unknown_fields_and_missing_required_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, r#"{"windmil": {}}"#).unwrap();
        let err = load_with(&path, &NoEnv).unwrap_err().to_string();
        assert!(err.contains("unknown field `windmil`"), "{err}");
        std::fs::write(&path, "{}").unwrap();
        let err = load_with(&path, &NoEnv).unwrap_err().to_string();
        for needle in [
            "windmill.admin_password_file is required",
            "windmill.database_url_file (or, for a DSN without a password, windmill.database_url) is required",
            "scripts.dir is required",
            "openbao.path is required",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
    }

    #[test]
    fn a_dsn_without_a_password_may_be_given_in_the_file_itself() {
        // The local socket as the NixOS module renders it (peer authentication, no password).
        let (_dir, path) = setup(serde_json::json!({
            "openbao": {"addr": "http://x:1"},
            "windmill": {"database_url_file": null, "database_url": "host=/run/postgresql port=5432 dbname=windmill user=windmill"},
        }));
        let config = load_with(&path, &NoEnv).unwrap();
        assert_eq!(config.database.config.get_user(), Some("windmill"));
        assert_eq!(config.database.config.get_dbname(), Some("windmill"));
        assert_eq!(
            config.database.config.get_hosts(),
            [tokio_postgres::config::Host::Unix("/run/postgresql".into())]
        );
        assert!(config.database.password.is_none());
    }

    #[test]
    fn a_dsn_in_the_file_itself_must_hold_no_password_and_is_never_quoted() {
        for (dsn, problem) in [
            (
                "host=127.0.0.1 user=windmill password=inline-secret-1 dbname=windmill",
                "windmill.database_url holds a password, and the configuration file is no place for a secret: put that DSN in windmill.database_url_file",
            ),
            (
                "postgresql://windmill:inline-secret-1@127.0.0.1/windmill",
                "windmill.database_url holds a password, and the configuration file is no place for a secret: put that DSN in windmill.database_url_file",
            ),
            (
                "host=x password='inline-secret-1",
                "windmill.database_url: the DSN cannot be parsed (its text is not shown: it may hold a password)",
            ),
        ] {
            let (_dir, path) = setup(serde_json::json!({
                "openbao": {"addr": "http://x:1"},
                "windmill": {"database_url_file": null, "database_url": dsn},
            }));
            let err = load_with(&path, &NoEnv).unwrap_err().to_string();
            assert!(err.contains(problem), "{dsn}: {err}");
            assert!(!err.contains("inline-secret-1"), "{err}");
        }
        // Both ways at once: one is refused rather than one chosen silently.
        let (_dir, path) = setup(serde_json::json!({
            "openbao": {"addr": "http://x:1"},
            "windmill": {"database_url": "host=/run/postgresql user=windmill dbname=windmill"},
        }));
        let err = load_with(&path, &NoEnv).unwrap_err().to_string();
        assert!(
            err.contains("windmill.database_url and windmill.database_url_file are both set: give one"),
            "{err}"
        );
    }

    #[test]
    fn an_unparseable_dsn_is_not_quoted() {
        let (dir, path) = setup(serde_json::json!({"openbao": {"addr": "http://x:1"}}));
        std::fs::write(dir.path().join("dsn"), "host=x password='unterminated-secret").unwrap();
        let err = load_with(&path, &NoEnv).unwrap_err().to_string();
        assert!(err.contains("the DSN cannot be parsed"), "{err}");
        assert!(!err.contains("unterminated-secret"), "{err}");
    }
}
