//! From the file as written to the configuration the steps use: secret files read, names and
//! URLs checked, owner and group resolved, seconds made durations. One function per section;
//! each adds its problems and returns `None` for what it could not resolve.

use std::collections::BTreeMap;
use std::time::Duration;

use safe_io::secret::Secret;
use serde_json::Value;

use super::checks;
use super::file::{self, File};
use super::{Config, Database, Env, OpenBao, Problems, Retry, Scripts, Token, UiAuth, Windmill, Workspace};
use crate::scope;

pub fn config(raw: File, env: &dyn Env, problems: &mut Problems) -> Option<Config> {
    let windmill = windmill(&raw.windmill, problems);
    let database = database(&raw.windmill, problems);
    let token = token(raw.token, &raw.workspace.folder, &raw.windmill.admin_email, problems);
    let workspace = workspace(raw.workspace, problems);
    let scripts = scripts(raw.scripts, problems);
    let settings = settings(raw.settings, problems);
    let openbao = openbao(raw.openbao, env, problems);
    let ui_auth = ui_auth(raw.ui_auth, problems);
    if ui_auth.as_ref().is_some_and(|ui| ui.label == token.label) {
        // Step 9 deletes the older tokens of each label: with one label for both, each token
        // would be revoked as an "older" token of the other.
        problems.add(format!(
            "token.label and ui_auth.label are both {:?}: the two tokens need labels of their own",
            token.label
        ));
    }
    let retry = retry(&raw.retry, problems);
    if raw.state_file.file_name().is_none() || !raw.state_file.is_absolute() {
        problems.add(format!(
            "state_file {} must be an absolute file path",
            raw.state_file.display()
        ));
    }
    Some(Config {
        windmill: windmill?,
        database: database?,
        workspace,
        scripts: scripts?,
        token,
        settings,
        openbao: openbao?,
        ui_auth: ui_auth?,
        retry: retry?,
        lock_file: raw.lock_file,
        state_file: raw.state_file,
    })
}

fn windmill(raw: &file::Windmill, problems: &mut Problems) -> Option<Windmill> {
    let url = checks::http_url("windmill.url", &raw.url, problems);
    let admin_email = raw.admin_email.trim().to_lowercase();
    if admin_email.is_empty() {
        problems.add("windmill.admin_email is empty");
    }
    let admin_password = match &raw.admin_password_file {
        None => {
            problems.add("windmill.admin_password_file is required");
            None
        }
        Some(file) => checks::secret_file("windmill.admin_password_file", file, problems),
    };
    if admin_password
        .as_ref()
        .is_some_and(|pw| pw.expose().chars().count() < 8)
    {
        problems.add("the password in windmill.admin_password_file is shorter than 8 characters");
    }
    if raw.default_password.is_empty() {
        problems.add("windmill.default_password is empty");
    }
    Some(Windmill {
        url: url?,
        admin_email,
        admin_password: admin_password?,
        default_password: Secret::new(&raw.default_password),
    })
}

fn database(raw: &file::Windmill, problems: &mut Problems) -> Option<Database> {
    if raw.database_role.is_empty() {
        problems.add("windmill.database_role is empty");
    }
    let (dsn, config) = match (&raw.database_url, &raw.database_url_file) {
        (Some(_), Some(_)) => {
            problems.add("windmill.database_url and windmill.database_url_file are both set: give one");
            return None;
        }
        (None, None) => {
            problems.add(
                "windmill.database_url_file (or, for a DSN without a password, windmill.database_url) is required",
            );
            return None;
        }
        (None, Some(file)) => {
            let dsn = checks::secret_file("windmill.database_url_file", file, problems)?;
            let Ok(config) = dsn.expose().parse::<tokio_postgres::Config>() else {
                // tokio-postgres quotes parts of the string in its parse errors.
                problems.add(format!(
                    "windmill.database_url_file {}: the DSN cannot be parsed (its text is not shown: it may hold a password)",
                    file.display()
                ));
                return None;
            };
            (dsn, config)
        }
        (Some(url), None) => {
            // Still treated as a secret (scrubbed from messages), though it should hold none: a
            // password put here by mistake must not be printed either.
            let dsn = Secret::new(url);
            let Ok(config) = dsn.expose().parse::<tokio_postgres::Config>() else {
                problems.add(
                    "windmill.database_url: the DSN cannot be parsed (its text is not shown: it may hold a password)",
                );
                return None;
            };
            if config.get_password().is_some() {
                // The configuration file is not a secret (the NixOS module renders it into the
                // Nix store, readable by every user of the node).
                problems.add(
                    "windmill.database_url holds a password, and the configuration file is no place for a secret: put that DSN in windmill.database_url_file",
                );
                return None;
            }
            (dsn, config)
        }
    };
    let password = config.get_password().map(|p| Secret::new(String::from_utf8_lossy(p)));
    Some(Database {
        dsn,
        password,
        config,
        role: raw.database_role.clone(),
    })
}

fn workspace(raw: file::Workspace, problems: &mut Problems) -> Workspace {
    // Windmill's own rules; they also keep both safe to put in a URL path.
    if !checks::is_workspace_id(&raw.id) {
        problems.add(format!(
            "workspace.id {:?} is invalid: word characters, single hyphens between them",
            raw.id
        ));
    }
    if raw.name.trim().is_empty() {
        problems.add("workspace.name is empty");
    }
    if !checks::is_folder_name(&raw.folder) {
        problems.add(format!(
            "workspace.folder {:?} is invalid: letters, digits and underscores only",
            raw.folder
        ));
    }
    Workspace {
        id: raw.id,
        name: raw.name,
        folder: raw.folder,
    }
}

fn scripts(raw: file::Scripts, problems: &mut Problems) -> Option<Scripts> {
    if raw.concurrency == 0 {
        problems.add("scripts.concurrency must be at least 1");
    }
    match raw.dir {
        None => {
            problems.add("scripts.dir is required");
            None
        }
        Some(dir) if !dir.is_dir() => {
            problems.add(format!("scripts.dir {} is not a directory", dir.display()));
            None
        }
        Some(dir) => Some(Scripts {
            dir,
            concurrency: raw.concurrency,
        }),
    }
}

fn token(raw: file::Token, folder: &str, admin_email: &str, problems: &mut Problems) -> Token {
    checks::token_label("token.label", &raw.label, problems);
    if raw.label == crate::operator::IMPERSONATION_LABEL {
        // Step 9 keeps the operator's older tokens of token.label when revoke_previous is off:
        // an impersonation token a dead run left behind (unscoped) would be kept with them.
        problems.add(format!(
            "token.label must not be {:?}: the bootstrap labels the operator's short-lived impersonation tokens so, and revokes every one a run left behind",
            raw.label
        ));
    }
    let user_email = raw.user_email.trim().to_lowercase();
    checks::email("token.user_email", &user_email, problems);
    if user_email == admin_email.trim().to_lowercase() {
        problems.add("token.user_email is the superadmin's (windmill.admin_email): the front-end needs a user of its own, an operator");
    }
    if !checks::is_username(&raw.username) {
        problems.add(format!(
            "token.username {:?} is invalid: a letter, then letters, digits and underscores (Windmill's usernames)",
            raw.username
        ));
    }
    let scopes = match raw.scopes {
        None => scope::defaults(folder),
        Some(scopes) => scopes,
    };
    checks::scopes("token.scopes", &scopes, problems);
    Token {
        label: raw.label,
        user_email,
        username: raw.username,
        scopes,
        bind_to_workspace: raw.bind_to_workspace,
        revoke_previous: raw.revoke_previous,
    }
}

fn settings(raw: BTreeMap<String, Value>, problems: &mut Problems) -> BTreeMap<String, Value> {
    for name in raw.keys().filter(|name| !checks::is_setting_name(name)) {
        problems.add(format!(
            "settings: the name {name:?} is invalid: a lower-case letter, then lower-case letters, digits and _"
        ));
    }
    raw
}

fn openbao(raw: file::OpenBao, env: &dyn Env, problems: &mut Problems) -> Option<OpenBao> {
    // Like the OpenBao CLI: BAO_X, else VAULT_X when BAO_X is unset (OpenBao's
    // `api/client.go`, which reads both names).
    let bao_env = |name: &str| {
        [format!("BAO_{name}"), format!("VAULT_{name}")]
            .into_iter()
            .find_map(|var| env.var(&var).map(|value| (var, value)))
    };
    let addr = match (raw.addr, bao_env("ADDR")) {
        (Some(addr), _) => checks::http_url("openbao.addr", &addr, problems),
        (None, Some((var, addr))) => checks::http_url(&format!("openbao.addr (from {var})"), &addr, problems),
        (None, None) => {
            problems.add("openbao.addr is required (or BAO_ADDR / VAULT_ADDR in the environment)");
            None
        }
    };
    let token = match &raw.token_file {
        Some(file) => checks::secret_file("openbao.token_file", file, problems).map(|t| Secret::new(t.expose().trim())),
        None => bao_env("TOKEN")
            .map(|(_, t)| t)
            .filter(|t| !t.trim().is_empty())
            .map(|t| Secret::new(t.trim())),
    };
    let path = match raw.path {
        None => {
            problems.add("openbao.path is required");
            None
        }
        Some(path) => checks::kv_path("openbao.path", &path, problems),
    };
    if raw.field.is_empty() {
        problems.add("openbao.field is empty");
    }
    Some(OpenBao {
        addr: addr?,
        token,
        path: path?,
        field: raw.field,
    })
}

fn ui_auth(raw: file::UiAuth, problems: &mut Problems) -> Option<UiAuth> {
    if raw.file.file_name().is_none() || !raw.file.is_absolute() {
        problems.add(format!(
            "ui_auth.file {} must be an absolute file path",
            raw.file.display()
        ));
    }
    let uid = checks::user_id("ui_auth.owner", &raw.owner, problems);
    let gid = checks::group_id("ui_auth.group", &raw.group, problems);
    let mode = checks::file_mode("ui_auth.mode", &raw.mode, problems);
    checks::token_label("ui_auth.label", &raw.label, problems);
    Some(UiAuth {
        label: raw.label,
        file: raw.file,
        owner: raw.owner,
        uid: uid?,
        group: raw.group,
        gid: gid?,
        mode: mode?,
    })
}

fn retry(raw: &file::Retry, problems: &mut Problems) -> Option<Retry> {
    let mut seconds = |field: &str, value: f64| {
        if (0.0..1e9).contains(&value) {
            Some(Duration::from_secs_f64(value))
        } else {
            problems.add(format!("retry.{field} must be a number of seconds, 0 or more"));
            None
        }
    };
    let delay = seconds("delay_seconds", raw.delay_seconds);
    let ready_timeout = seconds("ready_timeout_seconds", raw.ready_timeout_seconds);
    let call_delay = seconds("call_delay_seconds", raw.call_delay_seconds);
    let request_timeout = seconds("request_timeout_seconds", raw.request_timeout_seconds);
    let lock_timeout = seconds("lock_timeout_seconds", raw.lock_timeout_seconds);
    if raw.login_attempts == 0 {
        problems.add("retry.login_attempts must be at least 1");
    }
    if raw.call_attempts == 0 {
        problems.add("retry.call_attempts must be at least 1");
    }
    if request_timeout == Some(Duration::ZERO) {
        problems.add("retry.request_timeout_seconds must be more than 0");
    }
    Some(Retry {
        login_attempts: raw.login_attempts,
        delay: delay?,
        ready_timeout: ready_timeout?,
        call_attempts: raw.call_attempts,
        call_delay: call_delay?,
        request_timeout: request_timeout?,
        lock_timeout: lock_timeout?,
    })
}
