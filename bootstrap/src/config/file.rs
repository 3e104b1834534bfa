//! The configuration file as written: its fields, each with its default (the
//! "Configuration" table of docs/operators/bootstrap.md), and its parsing. The required fields are `Option`s, so that a missing
//! one is reported by name together with every other problem, rather than by serde alone.
//!
//! Why serde's messages are rewritten: for a value of the wrong type serde quotes the value
//! (`invalid type: integer `12345678`, expected a string`), and in `windmill.default_password`
//! that value is a password; elsewhere it may be one put in the wrong field. So a message names
//! the field (its path, from serde_path_to_error) and what was expected, never the value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    #[serde(default = "section")]
    pub windmill: Windmill,
    #[serde(default = "section")]
    pub workspace: Workspace,
    #[serde(default = "section")]
    pub scripts: Scripts,
    #[serde(default = "section")]
    pub token: Token,
    #[serde(default = "settings")]
    pub settings: BTreeMap<String, Value>,
    #[serde(default = "section")]
    pub openbao: OpenBao,
    #[serde(default = "section")]
    pub ui_auth: UiAuth,
    #[serde(default = "section")]
    pub retry: Retry,
    #[serde(default = "lock_file")]
    pub lock_file: PathBuf,
    #[serde(default = "state_file")]
    pub state_file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Windmill {
    #[serde(default = "windmill_url")]
    pub url: String,
    #[serde(default = "admin_email")]
    pub admin_email: String,
    #[serde(default)]
    pub admin_password_file: Option<PathBuf>,
    #[serde(default = "default_password")]
    pub default_password: String,
    /// A DSN without a secret (the local socket with peer authentication), given in the file;
    /// one with a password belongs in `database_url_file`.
    #[serde(default)]
    pub database_url: Option<String>,
    #[serde(default)]
    pub database_url_file: Option<PathBuf>,
    #[serde(default = "database_role")]
    pub database_role: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workspace {
    #[serde(default = "fediversity")]
    pub id: String,
    #[serde(default = "fediversity")]
    pub name: String,
    #[serde(default = "fediversity")]
    pub folder: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scripts {
    #[serde(default)]
    pub dir: Option<PathBuf>,
    #[serde(default = "concurrency")]
    pub concurrency: usize,
}

/// The front-end's token, the one OpenBao holds, and the workspace operator it belongs to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Token {
    #[serde(default = "fediversity")]
    pub label: String,
    /// The operator's email (it has no password, no instance account).
    #[serde(default = "user_email")]
    pub user_email: String,
    /// The operator's username where Windmill does not derive it from the email.
    #[serde(default = "username")]
    pub username: String,
    /// Absent or `null`: the defaults for the folder; `[]`: an unscoped token.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    #[serde(default = "yes")]
    pub bind_to_workspace: bool,
    #[serde(default = "yes")]
    pub revoke_previous: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenBao {
    /// Else `$BAO_ADDR`, then `$VAULT_ADDR`.
    #[serde(default)]
    pub addr: Option<String>,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default = "openbao_field")]
    pub field: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiAuth {
    /// The label of the include's own token (full rights).
    #[serde(default = "ui_auth_label")]
    pub label: String,
    #[serde(default = "ui_auth_file")]
    pub file: PathBuf,
    #[serde(default = "root")]
    pub owner: String,
    #[serde(default = "nginx")]
    pub group: String,
    #[serde(default = "ui_auth_mode")]
    pub mode: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    #[serde(default = "login_attempts")]
    pub login_attempts: u32,
    #[serde(default = "delay_seconds")]
    pub delay_seconds: f64,
    #[serde(default = "ready_timeout_seconds")]
    pub ready_timeout_seconds: f64,
    #[serde(default = "call_attempts")]
    pub call_attempts: usize,
    #[serde(default = "call_delay_seconds")]
    pub call_delay_seconds: f64,
    #[serde(default = "request_timeout_seconds")]
    pub request_timeout_seconds: f64,
    #[serde(default = "lock_timeout_seconds")]
    pub lock_timeout_seconds: f64,
}

pub const DEFAULT_LOCK_FILE: &str = "/run/fediversity-windmill-bootstrap.lock";
/// The front-end operator's email by default: `.invalid` is a top-level domain reserved never to
/// resolve (RFC 2606), so no mail reaches anyone, and the operator never logs in.
pub const DEFAULT_USER_EMAIL: &str = "frontend@fediversity.invalid";
/// What the bootstrap remembers between runs (the labels it minted under, the script versions it
/// created): kept where it survives a reboot.
pub const DEFAULT_STATE_FILE: &str = "/var/lib/fediversity-windmill/bootstrap-state.json";

// The defaults, one small function each (serde's `default = "…"` takes a function).

/// A section left out of the file: every one of its fields at its default.
fn section<T: DeserializeOwned>() -> T {
    serde_json::from_value(Value::Object(Default::default())).expect("every field of a section has a default")
}
fn settings() -> BTreeMap<String, Value> {
    BTreeMap::from([("instance_python_version".to_owned(), Value::from("3.12"))])
}
fn lock_file() -> PathBuf {
    DEFAULT_LOCK_FILE.into()
}
fn state_file() -> PathBuf {
    DEFAULT_STATE_FILE.into()
}
fn windmill_url() -> String {
    "http://127.0.0.1:8001".into()
}
fn admin_email() -> String {
    "admin@windmill.dev".into()
}
fn default_password() -> String {
    "changeme".into()
}
fn database_role() -> String {
    "windmill_admin".into()
}
fn fediversity() -> String {
    "fediversity".into()
}
fn user_email() -> String {
    DEFAULT_USER_EMAIL.into()
}
fn username() -> String {
    "frontend".into()
}
fn concurrency() -> usize {
    8
}
fn yes() -> bool {
    true
}
fn openbao_field() -> String {
    "value".into()
}
fn ui_auth_label() -> String {
    "fediversity-ui".into()
}
fn ui_auth_file() -> PathBuf {
    "/run/windmill-ui-auth/token.conf".into()
}
fn root() -> String {
    "root".into()
}
fn nginx() -> String {
    "nginx".into()
}
fn ui_auth_mode() -> String {
    "0440".into()
}
fn login_attempts() -> u32 {
    12
}
fn delay_seconds() -> f64 {
    5.0
}
fn ready_timeout_seconds() -> f64 {
    300.0
}
fn call_attempts() -> usize {
    5
}
fn call_delay_seconds() -> f64 {
    1.0
}
fn request_timeout_seconds() -> f64 {
    30.0
}
fn lock_timeout_seconds() -> f64 {
    300.0
}

/// Reads and parses the file at `path`.
pub fn read(path: &Path) -> Result<File> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadFile {
        what: "configuration file",
        path: path.into(),
        source,
    })?;
    parse(&text).map_err(|detail| Error::Config(format!("configuration file {} is invalid: {detail}", path.display())))
}

/// The file's text parsed, or what is wrong with it, without any value from it.
fn parse(text: &str) -> std::result::Result<File, String> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let file: File = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| describe(e.path(), e.inner()))?;
    // Trailing text after the object, as serde_json::from_str refuses it.
    deserializer.end().map_err(|e| e.to_string())?;
    Ok(file)
}

/// serde_json's message without the value it may quote: syntax errors only ever name a position;
/// for data errors the field's path and what was expected are kept, the value is dropped.
fn describe(path: &serde_path_to_error::Path, error: &serde_json::Error) -> String {
    if !error.is_data() {
        return error.to_string();
    }
    let position = format!(" at line {} column {}", error.line(), error.column());
    let full = error.to_string();
    let message = full.strip_suffix(&position).unwrap_or(&full);
    // `expected` comes last and is the type's own description (`a string`, `u32`), never input:
    // whatever precedes its last occurrence may be.
    let expected = message.rsplit_once(", expected ").map(|(_, expected)| expected);
    let message = match expected {
        Some(expected) if message.starts_with("invalid type: ") => format!("invalid type, expected {expected}"),
        Some(expected) if message.starts_with("invalid value: ") => format!("invalid value, expected {expected}"),
        // These quote a field name from the schema or the file's own key, or a count.
        _ if [
            "unknown field `",
            "missing field `",
            "duplicate field `",
            "invalid length ",
        ]
        .iter()
        .any(|p| message.starts_with(p)) =>
        {
            message.to_owned()
        }
        _ => "invalid value (not shown)".to_owned(),
    };
    let path = path.to_string();
    if path == "." {
        format!("{message}{position}")
    } else {
        format!("{path}: {message}{position}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        parse(text).unwrap_err()
    }

    #[test]
    fn an_empty_file_is_every_default() {
        let file = parse("{}").unwrap();
        assert_eq!(file.windmill.url, "http://127.0.0.1:8001");
        assert_eq!(file.windmill.default_password, "changeme");
        assert_eq!(file.workspace.folder, "fediversity");
        assert_eq!(file.scripts.concurrency, 8);
        assert!(file.token.revoke_previous);
        assert!(file.token.bind_to_workspace);
        assert_eq!(file.token.scopes, None);
        assert_eq!(file.ui_auth.label, "fediversity-ui");
        assert_eq!(file.ui_auth.mode, "0440");
        assert_eq!(file.retry.call_attempts, 5);
        assert_eq!(file.retry.lock_timeout_seconds, 300.0);
        assert_eq!(
            (file.token.user_email.as_str(), file.token.username.as_str()),
            ("frontend@fediversity.invalid", "frontend")
        );
        assert_eq!(file.lock_file, PathBuf::from(DEFAULT_LOCK_FILE));
        assert_eq!(file.state_file, PathBuf::from(DEFAULT_STATE_FILE));
        // A section given in part keeps the defaults of the rest.
        let file = parse(r#"{"windmill": {"admin_email": "a@b"}, "retry": {"call_attempts": 2}}"#).unwrap();
        assert_eq!(
            (file.windmill.url.as_str(), file.windmill.admin_email.as_str()),
            ("http://127.0.0.1:8001", "a@b")
        );
        assert_eq!((file.retry.call_attempts, file.retry.login_attempts), (2, 12));
    }

    #[test]
    fn data_errors_name_the_field_and_never_the_value() {
        let e = error(r#"{"windmill": {"default_password": 87654321}}"#);
        assert_eq!(
            e,
            "windmill.default_password: invalid type, expected a string at line 1 column 42"
        );
        let e = error(r#"{"retry": {"login_attempts": "a, expected secret"}}"#);
        assert_eq!(
            e,
            "retry.login_attempts: invalid type, expected u32 at line 1 column 49"
        );
        let e = error(r#"{"retry": {"login_attempts": -1}}"#);
        assert!(
            e.starts_with("retry.login_attempts: invalid value, expected u32"),
            "{e}"
        );
        let e = error(r#""just-a-string""#);
        assert!(e.starts_with("invalid type, expected struct File at line 1"), "{e}");
        // Keys are shown: they are the schema's or the file's own names.
        let e = error(r#"{"windmill": {"admin_password": "inline"}}"#);
        assert!(
            e.contains("unknown field `admin_password`, expected one of") && !e.contains("inline"),
            "{e}"
        );
        let e = error(r#"{"token": {"label": "a", "label": "b"}}"#);
        assert!(e.contains("duplicate field `label`"), "{e}");
    }

    #[test]
    fn syntax_errors_name_a_position() {
        assert_eq!(
            error(r#"{"windmill": {"url": "x",}}"#),
            "trailing comma at line 1 column 26"
        );
        assert_eq!(error("{} x"), "trailing characters at line 1 column 4");
        assert!(error(r#"{"lock_file": "unterminated-secret"#).starts_with("EOF while parsing a string"));
    }
}
