//! The one fake of the test suite: an in-process Windmill HTTP server that answers like a real
//! Windmill CE does, for the calls the bootstrap makes. Every behaviour says where it comes
//! from: "server code" is Windmill's Rust source (`backend/windmill-api-users/src/users.rs` for
//! login and tokens, `windmill-api-workspaces`, `windmill-api-groups/src/folders.rs`,
//! `windmill-api-scripts/src/scripts.rs`, `windmill-api/src/settings.rs`,
//! `windmill-api-auth/src/auth.rs`), "OpenAPI" its `backend/windmill-api/openapi.yaml`,
//! "observed" what a real Windmill CE 1.743.0 answered, "nixpkgs" its package of 1.587.0.
//! Where versions differ, the fake answers as its [`Profile`] (see [`profile`] for each
//! difference and whether a real server of that version was checked for it).
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
//! - A worker is simulated: a version that needs a lock (python3) gets one once its dependency
//!   job is due ([`WindmillFake::set_worker`]; at once by default), and a run by path finds only
//!   locked versions (server code, observed on 1.587 and 1.788).
//!
//! One module per API area, each naming where its behaviour comes from: [`auth`] (auth, tokens,
//! impersonation, `tokens/list` by pages), [`scopes`] (scoped tokens: the route check, then the
//! run handlers' own), [`workspaces`] (workspaces, archived ones included, folders and their
//! ACLs), [`members`] (workspace users: operators, roles), [`scripts`] (with the runtime
//! settings and lock a writer gives), [`settings`] (global settings), [`jobs`] (runs by path
//! and hash, scheduled runs, previews, batches and imports, reads and cancels, and the operator
//! role's refusals); [`profile`] the version profiles; [`server`] is the core (listener,
//! recording, faults, dispatch), [`state`] the tables, [`reply`] Windmill's forms of requests
//! and answers.

// Handlers return the error reply itself as `Err`: its size is of no concern in a test fake.
#![allow(clippy::result_large_err)]

mod auth;
mod jobs;
mod members;
mod profile;
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

pub use profile::Profile;
pub use server::Fault;
use server::{FaultRule, Shared};
pub use state::AUTH_CACHE_TTL;
use state::State;

/// The profile a fake answers as unless told otherwise: nixpkgs' Windmill.
pub const DEFAULT_PROFILE: Profile = Profile::V1_587;
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

/// A job (the fake's worker runs none: a job stays queued until it is cancelled).
#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: String,
    pub workspace: String,
    /// `script` (a deployed script by path), `preview` (code sent with the request),
    /// `flowpreview`, `dependencies`, `noop`, `flow`.
    pub kind: String,
    pub script_path: Option<String>,
    /// `label-<label>` for a labeled token (before 1.788), the user's name otherwise.
    pub created_by: String,
    /// Whose rights the job runs with (`u/<username>` of whoever started it).
    pub permissioned_as: String,
    /// The email of whoever started it.
    pub email: String,
    /// The code a job carries itself (a preview, an inline flow, an imported job).
    pub raw_code: Option<String>,
    pub args: Value,
    /// `scheduled_in_secs` of the run: how far in the future it was scheduled.
    pub scheduled_in_secs: Option<i64>,
    pub canceled: bool,
    /// The name of whoever cancelled it.
    pub canceled_by: Option<String>,
    /// Done: cancelled before it started (it completes at once, server code), or deleted.
    pub completed: bool,
}

/// A member of a workspace (a row of `usr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub email: String,
    pub username: String,
    pub is_admin: bool,
    pub operator: bool,
    pub disabled: bool,
}

/// A folder's owners (`u/<name>` or `g/<group>`) and ACL (`extra_perms`: owner → write).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FolderRow {
    pub owners: Vec<String>,
    pub extra_perms: std::collections::BTreeMap<String, bool>,
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
    /// When it was created: its dependency job is due [`WindmillFake::set_worker`]'s delay later.
    pub created_at: std::time::Instant,
}

pub struct WindmillFake {
    pub url: String,
    shared: Arc<Shared>,
    /// Ends the refusal of [`start_refusing`](Self::start_refusing) early.
    listen: Arc<Notify>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl WindmillFake {
    /// A fake backed by the `password` table of the database at `dsn`, answering at once as
    /// [`DEFAULT_PROFILE`].
    pub fn start(dsn: &str) -> WindmillFake {
        Self::start_refusing(dsn, Duration::ZERO)
    }

    /// A fake that answers as `profile`.
    pub fn start_profile(dsn: &str, profile: Profile) -> WindmillFake {
        Self::start_with(dsn, Duration::ZERO, profile)
    }

    /// Like [`start`](Self::start), but connections are refused for the first `refuse_for`, or
    /// until [`listen_now`](Self::listen_now).
    pub fn start_refusing(dsn: &str, refuse_for: Duration) -> WindmillFake {
        Self::start_with(dsn, refuse_for, DEFAULT_PROFILE)
    }

    /// The fake of `profile`, refusing connections for the first `refuse_for`.
    pub fn start_with(dsn: &str, refuse_for: Duration, profile: Profile) -> WindmillFake {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(profile)),
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

    /// The profile this fake answers as.
    pub fn profile(&self) -> Profile {
        self.state().profile
    }

    /// The worker that locks new versions: after `delay` (their dependency job runs then), or,
    /// with `None`, never (no worker: such versions do not run).
    pub fn set_worker(&self, delay: Option<Duration>) {
        self.state().worker = delay;
    }

    /// The next dependency job of `path` fails: its version gets `lock_error_logs`, no lock.
    pub fn fail_next_lock(&self, path: &str) {
        self.state().failing_locks.push(path.to_owned());
    }

    /// A server that has just started: for `duration`, every job submission (a python3 script's
    /// creation queues its dependency job) answers the 400 of a job table still being migrated,
    /// as 1.587 does until its "v2 finalization" ran. Only for the profiles that migrate at start.
    pub fn start_migrating(&self, duration: Duration) {
        let mut state = self.state();
        assert!(
            state.profile.migrates_at_start(),
            "{} does not migrate its job tables at start",
            state.profile
        );
        state.migrating_until = Some(std::time::Instant::now() + duration);
    }

    /// Ends the migration [`start_migrating`](Self::start_migrating) began, now: a test that
    /// checks both sides of it need not race a clock.
    pub fn finish_migrating(&self) {
        self.state().migrating_until = None;
    }

    /// `tokens/list` answers every page, whatever is asked, with a full page of tokens never
    /// seen, each labeled with `label_len` characters: a broken or hostile server.
    pub fn answer_endless_token_pages(&self, label_len: usize) {
        self.state().endless_token_pages = Some(label_len);
    }

    /// Whether new workspace members get a derived username (the global setting
    /// `automate_username_creation`; on by default, as on a fresh database).
    pub fn set_automate_usernames(&self, automate: bool) {
        self.state().automate_usernames = automate;
    }

    /// The members of `workspace` (the superadmin is none of them).
    pub fn users(&self, workspace: &str) -> Vec<UserRow> {
        self.state()
            .users
            .iter()
            .filter(|((w, _), _)| w == workspace)
            .map(|(_, u)| u.clone())
            .collect()
    }

    /// Changes a member's role behind the bootstrap's back (as an admin in the UI would).
    pub fn update_user(&self, workspace: &str, email: &str, change: impl FnOnce(&mut UserRow)) {
        let mut state = self.state();
        let user = state
            .users
            .get_mut(&(workspace.to_owned(), email.to_owned()))
            .expect("the user is a member");
        change(user);
    }

    /// Adds a member behind the bootstrap's back.
    pub fn add_user(&self, workspace: &str, user: UserRow) {
        self.state()
            .users
            .insert((workspace.to_owned(), user.email.clone()), user);
    }

    /// A folder's owners and ACL.
    pub fn folder(&self, workspace: &str, name: &str) -> Option<FolderRow> {
        self.state()
            .folders
            .get(&(workspace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Changes a folder's owners and ACL behind the bootstrap's back.
    pub fn update_folder(&self, workspace: &str, name: &str, change: impl FnOnce(&mut FolderRow)) {
        let mut state = self.state();
        let folder = state
            .folders
            .get_mut(&(workspace.to_owned(), name.to_owned()))
            .expect("the folder exists");
        change(folder);
    }

    /// Queues a job of the superadmin's (as the UI would), `scheduled_in_secs` in the future:
    /// its id.
    pub fn queue_admin_job(&self, workspace: &str, script_path: &str, scheduled_in_secs: Option<i64>) -> String {
        let id = jobs::job_id();
        self.state().jobs.push(JobRow {
            id: id.clone(),
            workspace: workspace.to_owned(),
            kind: "script".to_owned(),
            script_path: Some(script_path.to_owned()),
            created_by: "admin".to_owned(),
            permissioned_as: "u/admin".to_owned(),
            email: crate::postgres::ADMIN_EMAIL.to_owned(),
            raw_code: None,
            args: serde_json::json!({}),
            scheduled_in_secs,
            canceled: false,
            canceled_by: None,
            completed: false,
        });
        id
    }

    /// The jobs queued so far, oldest first.
    pub fn jobs(&self) -> Vec<JobRow> {
        self.state().jobs.clone()
    }

    pub fn ever_minted(&self) -> Vec<String> {
        self.state().ever_minted.clone()
    }

    /// The tokens `tokens/impersonate` handed out, revoked or not.
    pub fn impersonations(&self) -> Vec<String> {
        self.state().impersonations.clone()
    }

    pub fn workspaces(&self) -> Vec<String> {
        self.state().workspaces.keys().cloned().collect()
    }

    pub fn folders(&self) -> Vec<(String, String)> {
        self.state().folders.keys().cloned().collect()
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
        self.insert_tokens_of(crate::postgres::ADMIN_EMAIL, label, count)
    }

    /// Adds `count` tokens of the user `email` (the superadmin's are the superadmin's), unscoped
    /// and unbound, with `label`: as a leaked impersonation, or that user's own `tokens/create`.
    pub fn insert_tokens_of(&self, email: &str, label: &str, count: usize) -> Vec<String> {
        let mut state = self.state();
        let tokens: Vec<String> = (0..count).map(|_| reply::random_token()).collect();
        for token in &tokens {
            state.tokens.push(TokenRow {
                token: token.clone(),
                label: label.to_owned(),
                email: email.to_owned(),
                super_admin: email == crate::postgres::ADMIN_EMAIL,
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
