//! What the fake Windmill holds: the rows of the tables the bootstrap's calls touch, the auth
//! cache, the recorded requests and the faults still to apply.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::server::FaultRule;
use super::{JobRow, Recorded, ScriptRow, TokenRow, VERSION};

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
    pub workspaces: BTreeMap<String, String>,
    /// Workspaces archived (`deleted = true`): they still exist.
    pub archived_workspaces: BTreeSet<String>,
    pub folders: BTreeSet<(String, String)>,
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
}

impl Default for State {
    fn default() -> Self {
        let mut workspaces = BTreeMap::new();
        // A fresh database holds only the `admins` workspace (observed).
        workspaces.insert("admins".into(), "Admins".into());
        State {
            tokens: Vec::new(),
            auth_cache: HashMap::new(),
            auth_cache_ttl: AUTH_CACHE_TTL,
            next_tokens: Vec::new(),
            ever_minted: Vec::new(),
            workspaces,
            archived_workspaces: BTreeSet::new(),
            folders: BTreeSet::new(),
            scripts: Vec::new(),
            settings: BTreeMap::new(),
            requests: Vec::new(),
            faults: Vec::new(),
            concurrent_writes: Vec::new(),
            jobs: Vec::new(),
            enforce_scopes: true,
            version: VERSION.to_owned(),
        }
    }
}

impl State {
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
