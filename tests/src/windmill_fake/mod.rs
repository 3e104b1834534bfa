//! The one fake of the test suite: an in-process Windmill HTTP server that answers like a real
//! Windmill CE does, for the calls the bootstrap makes. Every behaviour says where it comes
//! from: "server code" is Windmill's Rust source (`backend/windmill-api-users/src/users.rs` for
//! login and tokens, `windmill-api-workspaces`, `windmill-api-groups/src/folders.rs`,
//! `windmill-api-scripts/src/scripts.rs`, `windmill-api/src/settings.rs`,
//! `windmill-api-auth/src/auth.rs`), "OpenAPI" its `backend/windmill-api/openapi.yaml`,
//! "observed" what a real Windmill CE 1.743.0 answered, "nixpkgs" its package of 1.587.0.
//!
//! Design decisions:
//! - Users are not held here: login reads the admin's `password_hash` from the test's real
//!   PostgreSQL `password` table and verifies it with the argon2 crate, as Windmill does (server
//!   code, `login`). So the bootstrap's database write is exercised end to end: if the hash it
//!   wrote were wrong, the next login would fail.
//! - Script hashes are the first 8 bytes of SHA-256 over the request body in a canonical form
//!   (parsed, top-level `null` fields dropped, keys sorted), in 16 hex digits. Windmill hashes
//!   the deserialised request (server code), which is not reproducible, but shares the properties
//!   that matter: it covers every field including `parent_hash`, so resending the same request
//!   gives the same hash, and identical content under a new parent does not; and since it
//!   hashes the parsed struct, `"parent_hash": null` and no `parent_hash` are the same request.
//! - Authentication goes through an auth cache, as on a real server (observed): a token that
//!   authenticated once is remembered for 120 s, so a deleted token that is not a session keeps
//!   working until its entry expires; a deleted session token stops at once (the database
//!   trigger that clears the cache fires for `label = 'session'` only). Tests that need the old
//!   behaviour shorten the time with [`WindmillFake::set_auth_cache_ttl`].
//! - Every request is recorded (method, path, body, bearer token) before any fault applies.
//! - Faults: refuse connections for the first N seconds or until told to listen (the port is
//!   bound but not listening, so connects are refused, not hung); answer a chosen status on
//!   chosen calls N times; drop the connection before or after handling a call (the latter
//!   loses the answer of a call that took effect); let a "concurrent writer" create a version
//!   just before a script upload.
//!
//! One module per API area, each naming where its behaviour comes from: [`auth`] (auth, tokens,
//! `tokens/list` by pages), [`scopes`] (scoped tokens: the route check, then the run handlers'
//! own), [`workspaces`] (workspaces, archived ones included, and folders), [`scripts`] (with the
//! runtime settings and lock a writer gives), [`settings`] (global settings), [`jobs`] (runs by
//! path and hash, previews, batches and imports, cancels, and the workspace reads a scoped token
//! is refused); [`server`] is the core (listener, recording, faults, dispatch), [`state`] the
//! tables, [`reply`] Windmill's forms of requests and answers.

// Handlers return the error reply itself as `Err`: its size is of no concern in a test fake.
#![allow(clippy::result_large_err)]

mod auth;
mod jobs;
mod reply;
mod scopes;
mod scripts;
mod server;
mod settings;
mod state;
mod workspaces;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

pub use server::Fault;
use server::{FaultRule, Shared};
pub use state::AUTH_CACHE_TTL;
use state::State;

/// `GET /api/version` of the nixpkgs build (nixpkgs: postPatch makes it `CE v1.587.0`).
pub const VERSION: &str = "CE v1.587.0";

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// The query string, without the `?` (empty when there is none).
    pub query: String,
    pub body: String,
    /// The bearer token (or `token` cookie) it carried.
    pub token: Option<String>,
}

impl Recorded {
    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path == path
    }
}

/// A row of the `token` table.
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub token: String,
    pub label: String,
    pub email: String,
    pub super_admin: bool,
    /// As given to `tokens/create`; none or empty: the owner's full rights.
    pub scopes: Option<Vec<String>>,
    /// The workspace the token is bound to, if any.
    pub workspace_id: Option<String>,
    /// RFC 3339, as given to `tokens/create`; none: the token never expires.
    pub expiration: Option<String>,
}

/// A queued job (the fake has no worker: jobs never run).
#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: String,
    pub workspace: String,
    /// `script` (a deployed script by path) or `preview` (code sent with the request).
    pub kind: String,
    pub script_path: Option<String>,
    /// `label-<label>` for a labeled token, `admin` for a login session.
    pub created_by: String,
    /// Whose rights the job runs with (`u/admin` for the admin's own jobs).
    pub permissioned_as: String,
    /// The code a job carries itself (a preview, an inline flow, an imported job).
    pub raw_code: Option<String>,
    pub args: Value,
    pub canceled: bool,
}

/// A row of the `script` table: one version of a script.
#[derive(Debug, Clone)]
pub struct ScriptRow {
    pub workspace: String,
    pub hash: String,
    pub path: String,
    pub parent_hashes: Vec<String>,
    pub summary: String,
    pub description: String,
    pub content: String,
    pub language: String,
    pub lock: Option<String>,
    /// The other fields of `NewScript` the writer set (runtime settings such as `tag`, `envs`,
    /// `timeout`, `on_behalf_of_email`), answered by `get/p` as given.
    pub settings: serde_json::Map<String, Value>,
    /// Set when the version's dependency job failed (`get/p` answers it, OpenAPI `Script`, observed).
    pub lock_error_logs: Option<String>,
    pub archived: bool,
    pub created_by: String,
}

pub struct WindmillFake {
    pub url: String,
    shared: Arc<Shared>,
    /// Ends the refusal of [`start_refusing`](Self::start_refusing) early.
    listen: Arc<Notify>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl WindmillFake {
    /// A fake backed by the `password` table of the database at `dsn`, answering at once.
    pub fn start(dsn: &str) -> WindmillFake {
        Self::start_refusing(dsn, Duration::ZERO)
    }

    /// Like [`start`](Self::start), but connections are refused for the first `refuse_for`, or
    /// until [`listen_now`](Self::listen_now).
    pub fn start_refusing(dsn: &str, refuse_for: Duration) -> WindmillFake {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            dsn: dsn.to_owned(),
        });
        let listen = Arc::new(Notify::new());
        let addr = server::serve(&runtime, shared.clone(), refuse_for, listen.clone());
        WindmillFake {
            url: format!("http://{addr}"),
            shared,
            listen,
            runtime: Some(runtime),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state()
    }

    /// Starts listening now (a fake started with [`start_refusing`](Self::start_refusing)).
    pub fn listen_now(&self) {
        // A stored permit: works whether or not the server task waits yet.
        self.listen.notify_one();
    }

    // ---- fault injection ------------------------------------------------------------------

    /// The next `times` calls whose method is `method` and whose path starts with
    /// `path_prefix` get `fault`.
    pub fn fail(&self, method: &str, path_prefix: &str, fault: Fault, times: usize) {
        self.fail_after(method, path_prefix, 0, fault, times);
    }

    /// As [`fail`](Self::fail), after letting the next `skip` matching calls through.
    pub fn fail_after(&self, method: &str, path_prefix: &str, skip: usize, fault: Fault, times: usize) {
        self.state().faults.push(FaultRule {
            method: method.into(),
            path_prefix: path_prefix.into(),
            fault,
            skip,
            remaining: times,
        });
    }

    /// Just before the next `scripts/create` for `path`, another writer creates a version of
    /// it with `content` (with the current head as parent, like a CLI would).
    pub fn concurrent_write_before_create(&self, path: &str, content: &str) {
        self.state().concurrent_writes.push((path.into(), content.into()));
    }

    // ---- inspection -----------------------------------------------------------------------

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().requests.clone()
    }

    /// Requests recorded from index `mark` on (take a mark with `requests().len()`).
    pub fn requests_since(&self, mark: usize) -> Vec<Recorded> {
        self.state().requests[mark..].to_vec()
    }

    /// The `token` table: what `tokens/list` shows (the auth cache aside).
    pub fn tokens(&self) -> Vec<TokenRow> {
        self.state().tokens.clone()
    }

    /// Whether `token` is still a row of the `token` table (listed by `tokens/list`).
    pub fn has_token(&self, token: &str) -> bool {
        self.state().tokens.iter().any(|t| t.token == token)
    }

    /// How long a token stays in the auth cache ([`AUTH_CACHE_TTL`] by default). Entries cached
    /// before the call keep the time they were cached at, and are judged by the new lifetime.
    pub fn set_auth_cache_ttl(&self, ttl: Duration) {
        self.state().auth_cache_ttl = ttl;
    }

    /// The next `tokens/create` answers `token` (and stores it) instead of a random token: for a
    /// server whose tokens do not look like Windmill's.
    pub fn next_token(&self, token: &str) {
        self.state().next_tokens.push(token.to_owned());
    }

    /// Whether token scopes are enforced (the default, as since Windmill 1.509). Off: a server
    /// that stores a token's scopes and grants every route all the same.
    pub fn set_enforce_scopes(&self, enforce: bool) {
        self.state().enforce_scopes = enforce;
    }

    /// What `GET /api/version` answers from now on ([`VERSION`] by default).
    pub fn set_version(&self, version: &str) {
        self.state().version = version.to_owned();
    }

    /// The jobs queued so far, oldest first.
    pub fn jobs(&self) -> Vec<JobRow> {
        self.state().jobs.clone()
    }

    pub fn ever_minted(&self) -> Vec<String> {
        self.state().ever_minted.clone()
    }

    pub fn workspaces(&self) -> Vec<String> {
        self.state().workspaces.keys().cloned().collect()
    }

    pub fn folders(&self) -> Vec<(String, String)> {
        self.state().folders.iter().cloned().collect()
    }

    /// Every version of `path` in `workspace`, oldest first.
    pub fn versions(&self, workspace: &str, path: &str) -> Vec<ScriptRow> {
        self.state()
            .scripts
            .iter()
            .filter(|s| s.workspace == workspace && s.path == path)
            .cloned()
            .collect()
    }

    pub fn script_count(&self) -> usize {
        self.state().scripts.len()
    }

    pub fn setting(&self, key: &str) -> Option<Value> {
        self.state().settings.get(key).cloned()
    }

    // ---- changing state behind the bootstrap's back ---------------------------------------

    pub fn put_setting(&self, key: &str, value: Value) {
        self.state().settings.insert(key.into(), value);
    }

    /// Someone else deploys a version of `path` on top of the current head (as the UI or the
    /// CLI would), with this content and summary.
    pub fn push_version(&self, workspace: &str, path: &str, content: &str, summary: &str) {
        let mut state = self.state();
        scripts::push_other_version(&mut state, workspace, path, content, summary);
    }

    /// Sets (or, with `None`, clears) `lock_error_logs` of the newest version of a script, as a
    /// failed dependency job does (server code).
    pub fn set_lock_error(&self, workspace: &str, path: &str, logs: Option<&str>) {
        let mut state = self.state();
        let row = state
            .scripts
            .iter_mut()
            .rev()
            .find(|s| s.workspace == workspace && s.path == path)
            .expect("the script exists");
        row.lock_error_logs = logs.map(str::to_owned);
    }

    /// Archives the newest version of a script (as deleting it in the UI does).
    pub fn archive(&self, workspace: &str, path: &str) {
        let mut state = self.state();
        if let Some(row) = state
            .scripts
            .iter_mut()
            .rev()
            .find(|s| s.workspace == workspace && s.path == path)
        {
            row.archived = true;
        }
    }

    /// Sets the `lock` of the newest version of a script, as its dependency job does when it
    /// succeeds (server code: the worker writes the lock it computed into the row).
    pub fn set_lock(&self, workspace: &str, path: &str, lock: &str) {
        let mut state = self.state();
        let row = state
            .scripts
            .iter_mut()
            .rev()
            .find(|s| s.workspace == workspace && s.path == path)
            .expect("the script exists");
        row.lock = Some(lock.to_owned());
    }

    /// Archives a workspace, as `POST /api/w/{id}/workspaces/archive` does (`deleted = true`).
    pub fn archive_workspace(&self, id: &str) {
        self.state().archived_workspaces.insert(id.to_owned());
    }

    pub fn workspace_archived(&self, id: &str) -> bool {
        self.state().archived_workspaces.contains(id)
    }

    /// Adds `count` tokens of the admin with `label` straight to the `token` table, newest last
    /// (as `count` calls of `tokens/create` would, without the HTTP round trips).
    pub fn insert_tokens(&self, label: &str, count: usize) -> Vec<String> {
        let mut state = self.state();
        let tokens: Vec<String> = (0..count).map(|_| reply::random_token()).collect();
        for token in &tokens {
            state.tokens.push(TokenRow {
                token: token.clone(),
                label: label.to_owned(),
                email: crate::postgres::ADMIN_EMAIL.to_owned(),
                super_admin: true,
                scopes: None,
                workspace_id: None,
                expiration: None,
            });
            state.ever_minted.push(token.clone());
        }
        tokens
    }

    /// Lets `token` expire: its row stays (the fake's `tokens/list` still shows it, with its
    /// expiration; whether a real server lists an expired token was not checked), and it no
    /// longer authenticates (server code: the lookup takes `expiration IS NULL` or a future one),
    /// at once, its auth cache entry dropped.
    pub fn expire_token(&self, token: &str) {
        let mut state = self.state();
        let row = state
            .tokens
            .iter_mut()
            .find(|t| t.token == token)
            .expect("the token exists");
        row.expiration = Some("2026-01-01T00:00:00Z".to_owned());
        state.auth_cache.remove(token);
    }
}

impl Drop for WindmillFake {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
