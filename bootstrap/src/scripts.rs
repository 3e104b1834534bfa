//! The deploy scripts: the local tree (`scripts.dir`) and bringing Windmill's copies to it.
//!
//! A file's path relative to the tree, without its extension, is its Windmill path
//! (`f/fediversity/deploy.py` → `f/fediversity/deploy`); `.py` is python3 and `.sh` bash; other
//! files are ignored. The summary is the file stem and the description empty, so that every
//! field the bootstrap sends is compared.
//!
//! Per script, as the `wmill` CLI's `handleFile` does (Windmill's
//! `cli/src/commands/script/script.ts`): GET the newest version; leave it when it is what the
//! bootstrap would create (see [`decide`]); otherwise create a version with `parent_hash` = its
//! hash (none when absent), with the bootstrap's own fields only. `lock` is never sent: the
//! server fills it in for python3.
//!
//! What the bootstrap would create: not archived, its dependency job not failed, content (by
//! SHA-256), language, summary and description as the file says, every runtime setting the
//! bootstrap does not send at its default, and no lock but the server's own. A failed
//! dependency job (`lock_error_logs` set) counts as drift: nixpkgs' Windmill 1.587 locks Python
//! with 3.11 until step 6 sets `instance_python_version`, so the scripts a fresh node gets in
//! step 5 may be left with a lock error; with content unchanged they would otherwise never be
//! uploaded again, and never run.
//!
//! A version that needs a lock (python3) runs only once a worker has computed it: until then a
//! run by path finds the previous locked version, or answers 404 (server code from 1.509 on,
//! `get_latest_deployed_hash_for_path`; observed on 1.587 and 1.788). A run waits for those
//! locks ([`await_locks`], bounded by `retry.lock_timeout_seconds`), so that a converged node
//! runs the scripts it was given; `--check` reports a version still waiting as drift.
//!
//! Besides the tree, step 5 keeps two scripts of the bootstrap's own, the [`probes`] of step 7's
//! proof: bash (no lock to wait for), doing nothing, one in the folder and one outside it, for
//! the front-end's token to be refused running.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::{Error, Result};
use crate::state::State;
use crate::windmill::{Created, NewScript, RemoteScript, Windmill};

#[derive(Debug)]
pub struct LocalScript {
    pub path: String,
    pub file: PathBuf,
    pub language: &'static str,
    pub summary: String,
    pub description: String,
    pub content: String,
    pub sha256: [u8; 32],
}

/// Windmill's path check constraint: `^[ufg](/[\w-]+){2,}$` (the `proper_id` constraint of the
/// `script` table).
fn is_windmill_path(path: &str) -> bool {
    let mut parts = path.split('/');
    matches!(parts.next(), Some("u" | "f" | "g")) && {
        let rest: Vec<&str> = parts.collect();
        rest.len() >= 2
            && rest
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'))
    }
}

fn language_of(extension: &str) -> Option<&'static str> {
    match extension {
        "py" => Some("python3"),
        "sh" => Some("bash"),
        _ => None,
    }
}

/// Reads the tree. Symlinks are followed (a Nix store tree may be made of them). Problems are
/// configuration errors: nothing has been touched yet.
pub fn scan(dir: &Path) -> Result<Vec<LocalScript>> {
    let mut scripts = Vec::new();
    let mut problems = Vec::new();
    for entry in walkdir::WalkDir::new(dir).follow_links(true).sort_by_file_name() {
        let entry = entry.map_err(|e| Error::Config(format!("scripts.dir {}: cannot walk: {e}", dir.display())))?;
        if !entry.file_type().is_file() {
            continue;
        }
        let file = entry.path();
        let Some(language) = file.extension().and_then(|e| e.to_str()).and_then(language_of) else {
            tracing::debug!("ignoring {} (not .py or .sh)", file.display());
            continue;
        };
        let relative = file
            .strip_prefix(dir)
            .expect("walkdir stays under its root")
            .with_extension("");
        let Some(path) = relative.to_str().map(str::to_owned) else {
            problems.push(format!("{}: the path is not UTF-8", file.display()));
            continue;
        };
        if !is_windmill_path(&path) {
            problems.push(format!(
                "{}: {path:?} is not a Windmill path (u/, f/ or g/, then at least two parts of letters, digits, _ or -)",
                file.display()
            ));
            continue;
        }
        let content = match std::fs::read(file) {
            Err(e) => {
                problems.push(format!("{} cannot be read: {e}", file.display()));
                continue;
            }
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => text,
                Err(_) => {
                    problems.push(format!("{} is not UTF-8 text", file.display()));
                    continue;
                }
            },
        };
        let summary = path.rsplit('/').next().unwrap_or_default().to_owned();
        let sha256 = Sha256::digest(content.as_bytes()).into();
        scripts.push(LocalScript {
            path,
            file: file.to_owned(),
            language,
            summary,
            description: String::new(),
            content,
            sha256,
        });
    }
    let mut seen = BTreeMap::new();
    for script in &scripts {
        if let Some(other) = seen.insert(script.path.clone(), script.file.clone()) {
            problems.push(format!(
                "{} and {} are both the Windmill path {}",
                other.display(),
                script.file.display(),
                script.path
            ));
        }
    }
    if problems.is_empty() {
        Ok(scripts)
    } else {
        Err(Error::Config(problems.join("\n")))
    }
}

/// The probe scripts' content: what the front-end's token must be refused running.
const PROBE: &str = "# A probe of fediversity-windmill-bootstrap (step 7): the front-end's token must be refused\n\
                     # running this script. Nobody runs it, and it does nothing.\nexit 0\n";

/// The name of the probe scripts.
pub const PROBE_NAME: &str = "bootstrap_probe";

/// The two probe scripts of step 7's proof: `f/<folder>/bootstrap_probe`, in the folder but in no
/// run scope, and `u/<admin>/bootstrap_probe`, the superadmin's own, outside the folder.
pub fn probes(folder: &str, admin: &str) -> [LocalScript; 2] {
    [format!("f/{folder}/{PROBE_NAME}"), format!("u/{admin}/{PROBE_NAME}")].map(|path| LocalScript {
        path,
        file: PathBuf::from("(the bootstrap's own probe)"),
        language: "bash",
        summary: PROBE_NAME.to_owned(),
        description: String::new(),
        content: PROBE.to_owned(),
        sha256: Sha256::digest(PROBE.as_bytes()).into(),
    })
}

/// What step 5 did about one script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converged {
    pub change: Change,
    /// The hash of the version it created, when it did and knows it.
    pub created: Option<String>,
    /// Its newest version waits for a worker to lock it (python3, no lock, no lock error).
    pub unlocked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Created,
    /// A new version replaces the remote one, for these reasons (field names, never values: an
    /// `envs` entry may hold a secret).
    Updated(Vec<String>),
}

/// The fields of `NewScript` the bootstrap leaves at their defaults (Windmill's OpenAPI and
/// `backend/windmill-types/src/scripts.rs`) that change how, where, as whom or how long a script
/// runs, besides `lock` (see [`decide`]). Whoever sets one (an `on_behalf_of_email`, `envs`, a
/// `tag` that sends the job to another worker, a `timeout`, `delete_after_use`, a `codebase` or
/// `modules` that run other code than `content`) changes what a deploy does without touching
/// the content; the bootstrap puts its own version back. `debounce_*` fields are matched by
/// prefix. Fields the server derives from the content (`has_preprocessor`, `no_main_func`,
/// `assets`) follow the content, compared already.
const RUNTIME_FIELDS: [&str; 21] = [
    "kind",
    "tag",
    "draft_only",
    "envs",
    "concurrent_limit",
    "concurrency_time_window_s",
    "concurrency_key",
    "cache_ttl",
    "cache_ignore_s3_path",
    "dedicated_worker",
    "ws_error_handler_muted",
    "priority",
    "restart_unless_cancelled",
    "timeout",
    "delete_after_use",
    "visible_to_runner_only",
    "codebase",
    "on_behalf_of_email",
    "preserve_on_behalf_of",
    "schema",
    "modules",
];

/// A field at the value the server gives it when the request leaves it out: absent, null, false,
/// empty; `kind` is `script`.
fn is_default(field: &str, value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty() || (field == "kind" && s == "script"),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) | Value::Bool(true) => false,
    }
}

/// What to do about one script, from its newest remote version; `ours`: the hash of the last
/// version the bootstrap created at this path (the state file).
///
/// A `lock` is expected on python3 versions the bootstrap created (the server's dependency job
/// fills it in); on any other version it may be one the writer chose (pinned packages of their
/// own), so it is drift. Bash never has one (the server forces `""`).
pub fn decide(local: &LocalScript, remote: Option<&RemoteScript>, ours: Option<&str>) -> Change {
    let Some(r) = remote else { return Change::Created };
    let mut why: Vec<String> = Vec::new();
    let mut differs = |differs: bool, what: &str| {
        if differs {
            why.push(what.to_owned());
        }
    };
    differs(r.archived, "archived");
    differs(
        r.lock_error_logs.as_deref().is_some_and(|logs| !logs.is_empty()),
        "its dependency job failed",
    );
    differs(r.language != local.language, "language");
    differs(r.summary.as_deref().unwrap_or("") != local.summary, "summary");
    differs(
        r.description.as_deref().unwrap_or("") != local.description,
        "description",
    );
    differs(
        <[u8; 32]>::from(Sha256::digest(r.content.as_bytes())) != local.sha256,
        "content",
    );
    for (field, value) in &r.other {
        let runtime = RUNTIME_FIELDS.contains(&field.as_str()) || field.starts_with("debounce_");
        differs(runtime && !is_default(field, value), field);
    }
    let lock = r.other.get("lock").filter(|lock| !is_default("lock", lock));
    let servers_own = local.language == "python3" && ours == Some(r.hash.as_str());
    differs(lock.is_some() && !servers_own, "lock");
    if why.is_empty() {
        Change::Unchanged
    } else {
        Change::Updated(why)
    }
}

/// Whether `remote`, the newest version, waits for its lock: a python3 version with none and no
/// failed dependency job (bash needs none: the server gives it `""`).
pub fn unlocked(remote: &RemoteScript) -> bool {
    remote.language == "python3"
        && remote.other.get("lock").is_none_or(|lock| lock.is_null())
        && remote.lock_error_logs.as_deref().is_none_or(str::is_empty)
}

/// Converges one script; with `check`, only says what it would do.
async fn converge_one(
    client: &Windmill,
    workspace: &str,
    local: &LocalScript,
    ours: Option<&str>,
    check: bool,
) -> Result<Converged> {
    let mut reread = false;
    loop {
        let remote = client.get_script(workspace, &local.path).await?;
        let change = decide(local, remote.as_ref(), ours);
        if change == Change::Unchanged || check {
            return Ok(Converged {
                change,
                created: None,
                unlocked: remote.as_ref().is_some_and(unlocked),
            });
        }
        let new = NewScript {
            path: &local.path,
            parent_hash: remote.as_ref().map(|r| r.hash.as_str()),
            summary: &local.summary,
            description: &local.description,
            content: &local.content,
            language: local.language,
        };
        match client.create_script(workspace, &new).await? {
            Created::Hash(hash) => {
                tracing::debug!("{}: version {hash} created", local.path);
                return Ok(Converged {
                    change,
                    created: Some(hash),
                    unlocked: local.language == "python3",
                });
            }
            // The identical request was applied by an earlier try whose answer got lost: the
            // version we wanted exists, and is the head unless someone wrote since.
            Created::SameHashExists => {
                let head = client.get_script(workspace, &local.path).await?;
                let waits = head.as_ref().is_some_and(unlocked);
                let ours = head
                    .filter(|h| decide(local, Some(h), Some(&h.hash)) == Change::Unchanged)
                    .map(|h| h.hash);
                return Ok(Converged {
                    change,
                    created: ours,
                    unlocked: waits,
                });
            }
            Created::Conflict(message) if !reread => {
                tracing::debug!("{}: {message}; re-reading once", local.path);
                reread = true;
            }
            Created::Conflict(_) => {
                return Err(Error::ScriptConflict {
                    path: local.path.clone(),
                });
            }
        }
    }
}

/// Every script, `concurrency` at a time over the one client (one connection pool). The
/// first error stops new scripts from starting; those in flight finish.
pub async fn converge(
    client: &Windmill,
    workspace: &str,
    scripts: Vec<LocalScript>,
    state: &State,
    concurrency: usize,
    check: bool,
) -> Result<BTreeMap<String, Converged>> {
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = JoinSet::new();
    for local in scripts {
        let (client, workspace, permits, stop) = (client.clone(), workspace.to_owned(), permits.clone(), stop.clone());
        let ours = state.created(&workspace, &local.path).map(str::to_owned);
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            let result = converge_one(&client, &workspace, &local, ours.as_deref(), check).await;
            if result.is_err() {
                stop.store(true, Ordering::Relaxed);
            }
            Some((local.path, result))
        });
    }
    let mut changes = BTreeMap::new();
    let mut first_error: Option<(String, Error)> = None;
    while let Some(joined) = tasks.join_next().await {
        match joined.expect("a script task does not panic") {
            None => {}
            Some((path, Ok(change))) => {
                changes.insert(path, change);
            }
            // The first in path order, so the message does not depend on timing.
            Some((path, Err(error))) if first_error.as_ref().is_none_or(|(p, _)| path < *p) => {
                first_error = Some((path, error));
            }
            Some((_, Err(_))) => {}
        }
    }
    match first_error {
        Some((path, error)) => Err(with_path(&path, error)),
        None => Ok(changes),
    }
}

/// How a version that waited for its lock came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lock {
    /// Locked: it runs.
    Locked,
    /// Its dependency job failed (`lock_error_logs`): it does not run; the next run uploads it again.
    Failed,
}

/// Waits until the newest version of each of `paths` is locked or its dependency job failed,
/// looking at each (`GET …/scripts/get/p/<path>`) every 0.25 s at first, every 2 s at most, for at
/// most `timeout`: a version with neither by then fails the wait, naming it.
pub async fn await_locks(
    client: &Windmill,
    workspace: &str,
    paths: &[String],
    timeout: Duration,
) -> Result<BTreeMap<String, Lock>> {
    let started = Instant::now();
    let mut done = BTreeMap::new();
    let mut pause = Duration::from_millis(250);
    loop {
        let waiting: Vec<&String> = paths.iter().filter(|p| !done.contains_key(*p)).collect();
        for path in waiting {
            let head = client
                .get_script(workspace, path)
                .await
                .map_err(|e| with_path(path, e))?;
            match head {
                Some(head) if head.lock_error_logs.as_deref().is_some_and(|l| !l.is_empty()) => {
                    done.insert(path.clone(), Lock::Failed);
                }
                Some(head) if !unlocked(&head) => {
                    done.insert(path.clone(), Lock::Locked);
                }
                Some(_) => {}
                None => {
                    return Err(Error::Script {
                        path: path.clone(),
                        source: Box::new(Error::Unexpected {
                            service: "Windmill",
                            call: format!("GET /api/w/{workspace}/scripts/get/p/{path}"),
                            detail: "the script is gone while its lock was waited for".into(),
                        }),
                    });
                }
            }
        }
        let waiting: Vec<&String> = paths.iter().filter(|p| !done.contains_key(*p)).collect();
        if waiting.is_empty() {
            return Ok(done);
        }
        let elapsed = started.elapsed();
        if elapsed >= timeout {
            return Err(Error::LockTimeout {
                paths: waiting.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(" "),
                seconds: timeout.as_secs_f64(),
            });
        }
        tokio::time::sleep(pause.min(timeout - elapsed)).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

fn with_path(path: &str, error: Error) -> Error {
    match error {
        // Already names the path.
        Error::ScriptConflict { .. } => error,
        other => Error::Script {
            path: path.to_owned(),
            source: Box::new(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windmill_paths() {
        assert!(is_windmill_path("f/fediversity/deploy"));
        assert!(is_windmill_path("f/fediversity/_runner"));
        assert!(is_windmill_path("u/admin/a-b/c"));
        assert!(!is_windmill_path("deploy"));
        assert!(!is_windmill_path("f/deploy"));
        assert!(!is_windmill_path("x/fediversity/deploy"));
        assert!(!is_windmill_path("f/fedi versity/deploy"));
        assert!(!is_windmill_path("f//deploy"));
    }

    #[test]
    fn scan_maps_paths_languages_and_ignores_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("f/fediversity");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("deploy.py"), "def main():\n    return 1\n").unwrap();
        std::fs::write(sub.join("hello.sh"), "echo hi\n").unwrap();
        std::fs::write(sub.join("README.md"), "notes").unwrap();
        let found = scan(dir.path()).unwrap();
        let summary: Vec<_> = found
            .iter()
            .map(|s| (s.path.as_str(), s.language, s.summary.as_str()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("f/fediversity/deploy", "python3", "deploy"),
                ("f/fediversity/hello", "bash", "hello")
            ]
        );
        assert_eq!(
            found[0].sha256,
            <[u8; 32]>::from(Sha256::digest(b"def main():\n    return 1\n"))
        );
    }

    #[test]
    fn scan_rejects_bad_paths_and_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("top.py"), "x").unwrap();
        std::fs::create_dir_all(dir.path().join("f/a")).unwrap();
        std::fs::write(dir.path().join("f/a/b.py"), "x").unwrap();
        std::fs::write(dir.path().join("f/a/b.sh"), "x").unwrap();
        let err = scan(dir.path()).unwrap_err().to_string();
        assert!(err.contains("\"top\" is not a Windmill path"), "{err}");
        assert!(err.contains("are both the Windmill path f/a/b"), "{err}");
    }

    fn remote(content: &str) -> RemoteScript {
        RemoteScript {
            hash: "0123456789abcdef".into(),
            content: content.into(),
            language: "python3".into(),
            summary: Some("deploy".into()),
            description: Some(String::new()),
            archived: false,
            lock_error_logs: None,
            other: serde_json::Map::new(),
        }
    }

    fn with(field: &str, value: serde_json::Value) -> RemoteScript {
        let mut r = remote("a");
        r.other.insert(field.into(), value);
        r
    }

    fn updated(why: &[&str]) -> Change {
        Change::Updated(why.iter().map(|w| w.to_string()).collect())
    }

    #[test]
    fn decide_compares_what_the_bootstrap_sends_and_every_runtime_setting_it_does_not() {
        use serde_json::json;
        let local = LocalScript {
            path: "f/x/deploy".into(),
            file: "deploy.py".into(),
            language: "python3",
            summary: "deploy".into(),
            description: String::new(),
            content: "a".into(),
            sha256: Sha256::digest(b"a").into(),
        };
        assert_eq!(decide(&local, None, None), Change::Created);
        assert_eq!(decide(&local, Some(&remote("a")), None), Change::Unchanged);
        assert_eq!(decide(&local, Some(&remote("b")), None), updated(&["content"]));
        assert_eq!(
            decide(
                &local,
                Some(&RemoteScript {
                    archived: true,
                    ..remote("a")
                }),
                None
            ),
            updated(&["archived"])
        );
        assert_eq!(
            decide(
                &local,
                Some(&RemoteScript {
                    language: "bash".into(),
                    ..remote("a")
                }),
                None
            ),
            updated(&["language"])
        );
        assert_eq!(
            decide(
                &local,
                Some(&RemoteScript {
                    summary: Some("x".into()),
                    ..remote("a")
                }),
                None
            ),
            updated(&["summary"])
        );
        assert_eq!(
            decide(
                &local,
                Some(&RemoteScript {
                    description: Some("x".into()),
                    ..remote("a")
                }),
                None
            ),
            updated(&["description"])
        );
        let failed = RemoteScript {
            lock_error_logs: Some("no matching distribution".into()),
            ..remote("a")
        };
        assert_eq!(
            decide(&local, Some(&failed), None),
            updated(&["its dependency job failed"])
        );
        assert_eq!(
            decide(
                &local,
                Some(&RemoteScript {
                    lock_error_logs: Some(String::new()),
                    ..remote("a")
                }),
                None
            ),
            Change::Unchanged
        );
        // Runtime settings: drift when set, not when at the server's default or not runtime.
        for (field, value) in [
            ("tag", json!("other-worker")),
            ("envs", json!(["SECRET=x"])),
            ("timeout", json!(5)),
            ("delete_after_use", json!(true)),
            ("on_behalf_of_email", json!("someone@example.org")),
            ("kind", json!("approval")),
            ("schema", json!({"properties": {}})),
            ("debounce_delay_s", json!(3)),
            ("codebase", json!("abc")),
        ] {
            assert_eq!(
                decide(&local, Some(&with(field, value)), None),
                updated(&[field]),
                "{field}"
            );
        }
        for (field, value) in [
            ("tag", json!(null)),
            ("envs", json!([])),
            ("kind", json!("script")),
            ("delete_after_use", json!(false)),
            ("is_template", json!(true)),
            ("assets", json!([{"path": "x"}])),
        ] {
            assert_eq!(
                decide(&local, Some(&with(field, value)), None),
                Change::Unchanged,
                "{field}"
            );
        }
        // A lock: the server's own on a version the bootstrap created; anyone else's is drift.
        let locked = with("lock", json!("# py: 3.12\n"));
        assert_eq!(
            decide(&local, Some(&locked), Some("0123456789abcdef")),
            Change::Unchanged
        );
        assert_eq!(
            decide(&local, Some(&locked), Some("fedcba9876543210")),
            updated(&["lock"])
        );
        assert_eq!(decide(&local, Some(&locked), None), updated(&["lock"]));
        assert_eq!(decide(&local, Some(&with("lock", json!(""))), None), Change::Unchanged);
    }
}
