//! What the fake Windmill holds: the rows of the tables the bootstrap's calls touch, the auth
//! cache, the recorded requests and the faults still to apply.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::profile::Profile;
use super::server::FaultRule;
use super::{FolderRow, JobRow, Recorded, ScriptRow, TokenRow, UserRow};

/// Windmill's auth cache lifetime (observed: a deleted non-session token worked for up to 120 s).
pub const AUTH_CACHE_TTL: Duration = Duration::from_secs(120);

pub(super) struct State {
    /// The `token` table.
    pub tokens: Vec<TokenRow>,
    /// The auth cache: token → (row, when it was cached).
    pub auth_cache: HashMap<String, (TokenRow, Instant)>,
    pub auth_cache_ttl: Duration,
    /// What the next `tokens/create` answers instead of a random token.
    pub next_tokens: Vec<String>,
    /// Every token ever handed out, revoked or not (for secret scans).
    pub ever_minted: Vec<String>,
    /// The tokens `tokens/impersonate` handed out.
    pub impersonations: Vec<String>,
    pub workspaces: BTreeMap<String, String>,
    /// Workspaces archived (`deleted = true`): they still exist.
    pub archived_workspaces: BTreeSet<String>,
    /// Folders by (workspace, name), with their owners and ACL.
    pub folders: BTreeMap<(String, String), FolderRow>,
    /// The `usr` table: workspace members by (workspace, email). The superadmin is no row: it is
    /// admin in every workspace (server code).
    pub users: BTreeMap<(String, String), UserRow>,
    /// The instance-wide usernames of emails (`pending_user` and `password`), as `add_user`
    /// derives them.
    pub usernames: BTreeMap<String, String>,
    /// The global setting `automate_username_creation` (a fresh database sets it: migration
    /// `20240307130500`).
    pub automate_usernames: bool,
    pub scripts: Vec<ScriptRow>,
    pub settings: BTreeMap<String, Value>,
    pub requests: Vec<Recorded>,
    pub faults: Vec<FaultRule>,
    pub concurrent_writes: Vec<(String, String)>,
    /// Queued jobs (no worker runs them).
    pub jobs: Vec<JobRow>,
    /// Whether token scopes are enforced on every route (since Windmill 1.509).
    pub enforce_scopes: bool,
    /// What `GET /api/version` answers.
    pub version: String,
    /// The version the fake answers as.
    pub profile: Profile,
    /// The worker that locks new versions (runs their dependency job): after this long; none:
    /// no worker, versions that need a lock stay unrunnable.
    pub worker: Option<Duration>,
    /// Paths whose next dependency job fails (`lock_error_logs` set instead of a lock).
    pub failing_locks: Vec<String>,
    /// Until then, every job submission answers the 400 of a server still migrating its job
    /// tables (profiles that migrate at start).
    pub migrating_until: Option<Instant>,
    /// `tokens/list` answers every page with a full page of tokens never seen, each labeled
    /// with this many characters: a broken or hostile server.
    pub endless_token_pages: Option<usize>,
}

impl State {
    pub fn new(profile: Profile) -> Self {
        let mut workspaces = BTreeMap::new();
        // A fresh database holds only the `admins` workspace (observed).
        workspaces.insert("admins".into(), "Admins".into());
        State {
            tokens: Vec::new(),
            auth_cache: HashMap::new(),
            auth_cache_ttl: AUTH_CACHE_TTL,
            next_tokens: Vec::new(),
            ever_minted: Vec::new(),
            impersonations: Vec::new(),
            workspaces,
            archived_workspaces: BTreeSet::new(),
            folders: BTreeMap::new(),
            users: BTreeMap::new(),
            usernames: BTreeMap::new(),
            automate_usernames: true,
            scripts: Vec::new(),
            settings: BTreeMap::new(),
            requests: Vec::new(),
            faults: Vec::new(),
            concurrent_writes: Vec::new(),
            jobs: Vec::new(),
            enforce_scopes: true,
            version: profile.version().to_owned(),
            profile,
            worker: Some(Duration::ZERO),
            failing_locks: Vec::new(),
            migrating_until: None,
            endless_token_pages: None,
        }
    }

    /// What the worker did since the last look: every version waiting for its lock whose
    /// dependency job is due gets its lock (or, if its path was told to fail, its error logs).
    pub fn settle(&mut self) {
        let Some(delay) = self.worker else { return };
        for row in self.scripts.iter_mut() {
            if row.lock.is_none() && row.lock_error_logs.is_none() && row.created_at.elapsed() >= delay {
                if let Some(at) = self.failing_locks.iter().position(|p| *p == row.path) {
                    self.failing_locks.remove(at);
                    row.lock_error_logs =
                        Some("error: the dependency job failed (the fake's worker was told to)".to_owned());
                } else {
                    row.lock = Some("# py: 3.12\n".to_owned());
                }
            }
        }
    }

    /// Whether the server still refuses job submissions (its startup migration has not run).
    pub fn migrating(&self) -> bool {
        self.migrating_until.is_some_and(|until| Instant::now() < until)
    }

    /// Deletes token rows; a session's cache entry goes with it (the invalidation trigger), any
    /// other token's stays until it expires (observed).
    pub fn delete_tokens(&mut self, doomed: impl Fn(&TokenRow) -> bool) -> usize {
        let (gone, kept): (Vec<TokenRow>, Vec<TokenRow>) =
            std::mem::take(&mut self.tokens).into_iter().partition(|t| doomed(t));
        self.tokens = kept;
        for row in &gone {
            if row.label == "session" {
                self.auth_cache.remove(&row.token);
            }
        }
        gone.len()
    }
}
