//! The configuration file (`--config FILE`, JSON, rendered by the NixOS module), its defaults,
//! and everything that can be checked before the node is touched: files exist and are
//! readable, names have the shapes Windmill accepts, the owner and group of the nginx include
//! exist. All problems are reported together, each naming the field or the file; values of
//! secrets never appear.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::secret::Secret;

pub const DEFAULT_LOCK_FILE: &str = "/run/fediversity-windmill-bootstrap.lock";

// ---------------------------------------------------------------------------------------------
// The file as written. Every field has the default of ../shared/spec/bootstrap.md; the required
// ones are `Option`s so that a missing one is reported by name, with the others.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    windmill: RawWindmill,
    workspace: RawWorkspace,
    scripts: RawScripts,
    token: RawToken,
    settings: Option<BTreeMap<String, Value>>,
    openbao: RawOpenBao,
    ui_auth: RawUiAuth,
    retry: RawRetry,
    lock_file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawWindmill {
    url: String,
    admin_email: String,
    admin_password_file: Option<PathBuf>,
    default_password: String,
    database_url_file: Option<PathBuf>,
    database_role: String,
}

impl Default for RawWindmill {
    fn default() -> Self {
        RawWindmill {
            url: "http://127.0.0.1:8001".into(),
            admin_email: "admin@windmill.dev".into(),
            admin_password_file: None,
            default_password: "changeme".into(),
            database_url_file: None,
            database_role: "windmill_admin".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawWorkspace {
    id: String,
    name: String,
    folder: String,
}

impl Default for RawWorkspace {
    fn default() -> Self {
        RawWorkspace { id: "fediversity".into(), name: "fediversity".into(), folder: "fediversity".into() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawScripts {
    dir: Option<PathBuf>,
    concurrency: usize,
}

impl Default for RawScripts {
    fn default() -> Self {
        RawScripts { dir: None, concurrency: 8 }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawToken {
    label: String,
    revoke_previous: bool,
}

impl Default for RawToken {
    fn default() -> Self {
        RawToken { label: "fediversity".into(), revoke_previous: true }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawOpenBao {
    addr: Option<String>,
    token_file: Option<PathBuf>,
    path: Option<String>,
    field: String,
}

impl Default for RawOpenBao {
    fn default() -> Self {
        RawOpenBao { addr: None, token_file: None, path: None, field: "value".into() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawUiAuth {
    file: PathBuf,
    owner: String,
    group: String,
    mode: String,
}

impl Default for RawUiAuth {
    fn default() -> Self {
        RawUiAuth {
            file: "/run/windmill-ui-auth/token.conf".into(),
            owner: "root".into(),
            group: "nginx".into(),
            mode: "0440".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    login_attempts: u32,
    delay_seconds: f64,
    ready_timeout_seconds: f64,
    call_attempts: usize,
    call_delay_seconds: f64,
    request_timeout_seconds: f64,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            login_attempts: 12,
            delay_seconds: 5.0,
            ready_timeout_seconds: 300.0,
            call_attempts: 5,
            call_delay_seconds: 1.0,
            request_timeout_seconds: 30.0,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The configuration the steps use: files read, names resolved, defaults applied.

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
    /// The secrets of the database connection, for [`crate::secret::scrub`].
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

#[derive(Debug)]
pub struct Token {
    pub label: String,
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
}

impl Config {
    /// Every secret of the configuration, for [`crate::secret::scrub`].
    pub fn secrets(&self) -> Vec<&Secret> {
        let mut all = vec![&self.windmill.admin_password];
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
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadFile { what: "configuration file", path: path.into(), source })?;
    // serde_json's message holds a position and the field name, never the surrounding text.
    let raw: RawConfig = serde_json::from_str(&text)
        .map_err(|e| Error::Config(format!("configuration file {} is invalid: {e}", path.display())))?;
    let mut problems = Problems::default();
    let config = resolve(raw, env, &mut problems);
    match config {
        Some(config) if problems.0.is_empty() => Ok(config),
        _ => Err(Error::Config(problems.0.join("\n"))),
    }
}

#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    fn add(&mut self, problem: impl Into<String>) {
        self.0.push(problem.into());
    }
}

fn resolve(raw: RawConfig, env: &dyn Env, problems: &mut Problems) -> Option<Config> {
    let windmill_url = http_url("windmill.url", &raw.windmill.url, problems);
    let admin_email = raw.windmill.admin_email.trim().to_lowercase();
    if admin_email.is_empty() {
        problems.add("windmill.admin_email is empty");
    }
    let admin_password = match &raw.windmill.admin_password_file {
        None => {
            problems.add("windmill.admin_password_file is required");
            None
        }
        Some(file) => secret_file("windmill.admin_password_file", file, problems),
    };
    if let Some(pw) = &admin_password {
        if pw.expose().chars().count() < 8 {
            problems.add("the password in windmill.admin_password_file is shorter than 8 characters");
        }
    }
    if raw.windmill.default_password.is_empty() {
        problems.add("windmill.default_password is empty");
    }
    let database = match &raw.windmill.database_url_file {
        None => {
            problems.add("windmill.database_url_file is required");
            None
        }
        Some(file) => secret_file("windmill.database_url_file", file, problems).and_then(|dsn| {
            match dsn.expose().parse::<tokio_postgres::Config>() {
                Ok(config) => Some((dsn, config)),
                Err(_) => {
                    // tokio-postgres quotes parts of the string in its parse errors.
                    problems.add(format!(
                        "windmill.database_url_file {}: the DSN cannot be parsed (its text is not shown: it may hold a password)",
                        file.display()
                    ));
                    None
                }
            }
        }),
    };
    if raw.windmill.database_role.is_empty() {
        problems.add("windmill.database_role is empty");
    }

    let workspace = Workspace { id: raw.workspace.id, name: raw.workspace.name, folder: raw.workspace.folder };
    // Windmill's own rules (windmill-api.md §2): the workspace id check constraint and the
    // folder name regex. Checking here also keeps both safe to put in a URL path.
    if !is_workspace_id(&workspace.id) {
        problems.add(format!("workspace.id {:?} is invalid: word characters, single hyphens between them", workspace.id));
    }
    if workspace.name.trim().is_empty() {
        problems.add("workspace.name is empty");
    }
    if workspace.folder.is_empty() || !workspace.folder.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        problems.add(format!("workspace.folder {:?} is invalid: letters, digits and underscores only", workspace.folder));
    }

    let scripts_dir = match raw.scripts.dir {
        None => {
            problems.add("scripts.dir is required");
            None
        }
        Some(dir) if !dir.is_dir() => {
            problems.add(format!("scripts.dir {} is not a directory", dir.display()));
            None
        }
        Some(dir) => Some(dir),
    };
    if raw.scripts.concurrency == 0 {
        problems.add("scripts.concurrency must be at least 1");
    }

    if raw.token.label.is_empty() {
        problems.add("token.label is empty");
    }
    // Windmill labels every login session `session`; revoking "older tokens with the same
    // label" would then log out every session of the admin.
    if raw.token.label == "session" {
        problems.add("token.label must not be \"session\": Windmill uses that label for login sessions");
    }

    // Like the OpenBao CLI: BAO_X, else VAULT_X when BAO_X is unset (openbao-and-services.md §1.3).
    let bao_env = |name: &str| env.var(&format!("BAO_{name}")).or_else(|| env.var(&format!("VAULT_{name}")));
    let openbao_addr = match raw.openbao.addr.or_else(|| bao_env("ADDR")) {
        None => {
            problems.add("openbao.addr is required (or BAO_ADDR / VAULT_ADDR in the environment)");
            None
        }
        Some(addr) => http_url("openbao.addr", &addr, problems),
    };
    let openbao_token = match &raw.openbao.token_file {
        Some(file) => secret_file("openbao.token_file", file, problems).map(|t| Secret::new(t.expose().trim())),
        None => bao_env("TOKEN").filter(|t| !t.trim().is_empty()).map(|t| Secret::new(t.trim())),
    };
    let openbao_path = match raw.openbao.path {
        None => {
            problems.add("openbao.path is required");
            None
        }
        Some(path) => {
            let trimmed = path.trim_matches('/').to_owned();
            if trimmed.is_empty() || trimmed.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
                problems.add(format!("openbao.path {path:?} is invalid: a KV path like <mount>/<secret>"));
                None
            } else {
                Some(trimmed)
            }
        }
    };
    if raw.openbao.field.is_empty() {
        problems.add("openbao.field is empty");
    }

    let ui = raw.ui_auth;
    if ui.file.file_name().is_none() || !ui.file.is_absolute() {
        problems.add(format!("ui_auth.file {} must be an absolute file path", ui.file.display()));
    }
    let uid = lookup_user(&ui.owner, problems);
    let gid = lookup_group(&ui.group, problems);
    let mode = match u32::from_str_radix(&ui.mode, 8) {
        Ok(mode) if mode <= 0o777 && ui.mode.len() <= 4 => {
            // The file holds a superadmin token: nobody outside owner and group may read it.
            if mode & 0o007 != 0 {
                problems.add(format!("ui_auth.mode {} gives access to others; the file holds a token", ui.mode));
            }
            Some(mode)
        }
        _ => {
            problems.add(format!("ui_auth.mode {:?} is not an octal file mode like \"0440\"", ui.mode));
            None
        }
    };

    let r = raw.retry;
    let seconds = |field: &str, value: f64, problems: &mut Problems| {
        if (0.0..1e9).contains(&value) {
            Some(Duration::from_secs_f64(value))
        } else {
            problems.add(format!("retry.{field} must be a number of seconds, 0 or more"));
            None
        }
    };
    let delay = seconds("delay_seconds", r.delay_seconds, problems);
    let ready_timeout = seconds("ready_timeout_seconds", r.ready_timeout_seconds, problems);
    let call_delay = seconds("call_delay_seconds", r.call_delay_seconds, problems);
    let request_timeout = seconds("request_timeout_seconds", r.request_timeout_seconds, problems);
    if r.login_attempts == 0 {
        problems.add("retry.login_attempts must be at least 1");
    }
    if r.call_attempts == 0 {
        problems.add("retry.call_attempts must be at least 1");
    }
    if request_timeout == Some(Duration::ZERO) {
        problems.add("retry.request_timeout_seconds must be more than 0");
    }

    Some(Config {
        windmill: Windmill {
            url: windmill_url?,
            admin_email,
            admin_password: admin_password?,
            default_password: Secret::new(raw.windmill.default_password),
        },
        database: {
            let (dsn, config) = database?;
            let password = config.get_password().map(|p| Secret::new(String::from_utf8_lossy(p)));
            Database { dsn, password, config, role: raw.windmill.database_role }
        },
        workspace,
        scripts: Scripts { dir: scripts_dir?, concurrency: raw.scripts.concurrency },
        token: Token { label: raw.token.label, revoke_previous: raw.token.revoke_previous },
        settings: raw
            .settings
            .unwrap_or_else(|| BTreeMap::from([("instance_python_version".to_owned(), Value::from("3.12"))])),
        openbao: OpenBao { addr: openbao_addr?, token: openbao_token, path: openbao_path?, field: raw.openbao.field },
        ui_auth: UiAuth { file: ui.file, owner: ui.owner, uid: uid?, group: ui.group, gid: gid?, mode: mode? },
        retry: Retry {
            login_attempts: r.login_attempts,
            delay: delay?,
            ready_timeout: ready_timeout?,
            call_attempts: r.call_attempts,
            call_delay: call_delay?,
            request_timeout: request_timeout?,
        },
        lock_file: raw.lock_file.unwrap_or_else(|| DEFAULT_LOCK_FILE.into()),
    })
}

/// Reads a secret file: one trailing newline (`\n` or `\r\n`) is dropped, as editors and
/// `echo` add one; the rest is the value.
fn secret_file(field: &str, path: &Path, problems: &mut Problems) -> Option<Secret> {
    match std::fs::read(path) {
        Err(e) => {
            problems.add(format!("{field} {} cannot be read: {e}", path.display()));
            None
        }
        Ok(bytes) => {
            let Ok(mut text) = String::from_utf8(bytes) else {
                problems.add(format!("{field} {} is not UTF-8 text", path.display()));
                return None;
            };
            if text.ends_with('\n') {
                text.pop();
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            if text.is_empty() {
                problems.add(format!("{field} {} is empty", path.display()));
                return None;
            }
            Some(Secret::new(text))
        }
    }
}

fn http_url(field: &str, value: &str, problems: &mut Problems) -> Option<String> {
    match reqwest::Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {
            if !url.username().is_empty() || url.password().is_some() {
                problems.add(format!("{field} must not hold credentials; use the *_file fields"));
                return None;
            }
            if url.query().is_some() || url.fragment().is_some() {
                problems.add(format!("{field} {value:?} must not have a query or fragment"));
                return None;
            }
            Some(url.as_str().trim_end_matches('/').to_owned())
        }
        _ => {
            problems.add(format!("{field} {value:?} is not an http:// or https:// URL"));
            None
        }
    }
}

/// Windmill's check constraint on `workspace.id`: `^\w+(-\w+)*$` (ASCII here).
fn is_workspace_id(id: &str) -> bool {
    !id.is_empty()
        && id.split('-').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// A numeric id as is, else the id of the user or group of that name (`field` and `kind` name
/// it in the problem).
fn lookup_id(
    field: &str,
    kind: &str,
    name: &str,
    find: impl FnOnce(&str) -> nix::Result<Option<u32>>,
    problems: &mut Problems,
) -> Option<u32> {
    if let Ok(id) = name.parse::<u32>() {
        return Some(id);
    }
    match find(name) {
        Ok(Some(id)) => Some(id),
        Ok(None) => {
            problems.add(format!("{field}: no {kind} named {name:?}"));
            None
        }
        Err(e) => {
            problems.add(format!("{field}: cannot look up {kind} {name:?}: {e}"));
            None
        }
    }
}

fn lookup_user(name: &str, problems: &mut Problems) -> Option<u32> {
    lookup_id("ui_auth.owner", "user", name, |n| nix::unistd::User::from_name(n).map(|u| u.map(|u| u.uid.as_raw())), problems)
}

fn lookup_group(name: &str, problems: &mut Problems) -> Option<u32> {
    lookup_id("ui_auth.group", "group", name, |n| nix::unistd::Group::from_name(n).map(|g| g.map(|g| g.gid.as_raw())), problems)
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
        std::fs::write(dir.path().join("dsn"), "host=127.0.0.1 user=windmill password=dbsecret dbname=windmill\n").unwrap();
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
        assert_eq!((c.workspace.id.as_str(), c.workspace.name.as_str(), c.workspace.folder.as_str()), ("fediversity", "fediversity", "fediversity"));
        assert_eq!(c.token.label, "fediversity");
        assert!(c.token.revoke_previous);
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
        // The DSN's password is known, to be scrubbed.
        assert_eq!(c.database.password.as_ref().map(Secret::expose), Some("dbsecret"));
        assert_eq!(c.secrets().len(), 3);
        // The Debug of the whole configuration shows no secret.
        let debug = format!("{c:?}");
        assert!(!debug.contains("a-long-password") && !debug.contains("dbsecret"), "{debug}");
    }

    #[test]
    fn openbao_env_fallback_like_the_cli() {
        let (_dir, path) = setup(serde_json::json!({}));
        let c = load_with(&path, &MapEnv(vec![("VAULT_ADDR", "http://v:1"), ("VAULT_TOKEN", "vt")])).unwrap();
        assert_eq!(c.openbao.addr, "http://v:1");
        assert_eq!(c.openbao.token.unwrap().expose(), "vt");
        let c = load_with(&path, &MapEnv(vec![("BAO_ADDR", "http://b:1"), ("VAULT_ADDR", "http://v:1")])).unwrap();
        assert_eq!(c.openbao.addr, "http://b:1");
        let err = load_with(&path, &NoEnv).unwrap_err().to_string();
        assert!(err.contains("openbao.addr is required"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_by_name() {
        let (_dir, path) = setup(serde_json::json!({
            "openbao": {"addr": "ftp://x"},
            "workspace": {"id": "bad id", "folder": "bad-folder"},
            "token": {"label": "session"},
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
        for needle in ["windmill.admin_password_file is required", "windmill.database_url_file is required", "scripts.dir is required", "openbao.path is required"] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
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
