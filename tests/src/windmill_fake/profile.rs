//! Version profiles: where Windmill versions answer the bootstrap's calls differently, each
//! profile answers as its version does. Every difference names where it comes from:
//!
//! - **observed**: what a real server of that version answered (the reference's "Worker 9"
//!   for 1.743.0, "Worker 10" for 1.788.0 and 1.587.0);
//! - **source**: read in Windmill's source at that release's commit (the public mirror
//!   `nagyist/windmill` holds every release), **no real server of that version was checked**.
//!
//! The profiles:
//!
//! | | 1.509 | 1.587 (nixpkgs) | 1.743 | 1.788 |
//! |---|---|---|---|---|
//! | a run by path looks the script up before its scope check (404 for a missing script) | yes (source) | yes (observed) | no, 403 (observed) | yes (observed) |
//! | a run by path needs a locked version (`lock IS NOT NULL AND lock_error_logs IS NULL`) | source | observed | source | observed |
//! | a route refused by a token's scopes answers | 401 `Not authorized: Access denied. Required scope: …` (source) | 401 (observed) | 403 `Permission denied: …` (observed) | 403 (observed) |
//! | the route check counts a preview as a run of kind `scripts` (handlers then refuse operators) | yes (source) | yes (source) | no (observed: 403 `jobs:run`) | no (observed) |
//! | `tokens/list` rows have `workspace_id` (and `read_only`) | no (source) | no (source) | yes (observed) | yes (source) |
//! | a job submission answers 400 `null value in column "__job_kind"` until the startup "v2 finalization" ran | yes (source) | yes (observed, about 5 s after start) | no (source: a regular migration since about 1.615) | no |
//! | `jobs/run/dynamic_select` exists | no (source) | yes (source) | yes | yes |
//! | `jobs/queue/import` and `jobs/delete` exist | no (source) | no (source) | yes (source) | yes (source) |
//! | `jobs/run_inline/preview` exists (since 1.590; code run at once in the server's process; `jobs:write` passes its route check; its handler refuses operators and requires `jobs:run` since 1.703.3) | no (source) | no (source) | yes, refused (source) | yes, refused (source) |
//! | a job's `_ENTRYPOINT_OVERRIDE` argument is pasted unchecked into the worker's wrapper code (GHSA-wxjq-w5pj-jqhx, fixed in 1.703.3): whoever may run a script runs code of its choosing | yes (source) | yes (source) | no (source) | no (source) |
//! | reading a job by id checks the caller may see it (else 403) | no: any job of the workspace (source) | no (source) | yes, since 1.715 (source) | yes (observed) |
//! | cancelling a job by id checks the caller may see it (else 403) | no (source) | no (source) | no (source) | yes, since 1.772 (observed) |
//! | a job started with a labeled token records `created_by` | `label-<label>` (source) | `label-<label>` (source) | `label-<label>` (observed) | the user's name (observed) |
//!
//! Shared by every profile (source for all four, observed on 1.587 and 1.788 as the reference
//! records): `workspaces/add_user` with `operator: true` (201 `user with email … added`; a
//! `username` refused while usernames are automated, the default of a fresh database; required
//! when they are not), `acls/add/folder/…`, `folders/removeowner/…`, `users/tokens/impersonate`
//! (superadmin only, 201, a token of that user without scopes), `users/tokens/create` by any user
//! for itself, `tokens/delete/<prefix>` of the caller's own tokens only, the operator's role
//! refusals (previews, flow previews, inline dynamic selects and dependency jobs 401; batches
//! 401 super admin only; imports, job deletion 403 admin only; scripts and flows 401; variables,
//! resources, folders and ACLs 401 without write or ownership), `scheduled_in_secs` on runs,
//! cancelling a job that has not started (it completes at once as canceled), and
//! `tokens/list` by pages of at most 10000, 1000 by default.

use std::fmt;

/// A Windmill version the fake answers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// 1.509.0, the first release with route-level token scopes ("feat: granular token scopes",
    /// 2025-07-17): the oldest the bootstrap supports. From source only: no real 1.509 server
    /// was checked.
    V1_509,
    /// 1.587.0, the version nixpkgs ships (observed: "Worker 10").
    V1_587,
    /// 1.743.0 (observed: the reference's sections 5 and "Worker 3" to "Worker 9").
    V1_743,
    /// 1.788.0, the newest checked (observed: "Worker 10").
    V1_788,
}

impl Profile {
    /// Every profile, oldest first: the bootstrap's tests run against each.
    pub const ALL: [Profile; 4] = [Profile::V1_509, Profile::V1_587, Profile::V1_743, Profile::V1_788];

    /// What `GET /api/version` answers: a tagged build's `CE v<version>` (nixpkgs' is tagged;
    /// the 1.788 server observed was built outside git and answered `CE unknown-version`).
    pub fn version(self) -> &'static str {
        match self {
            Profile::V1_509 => "CE v1.509.0",
            Profile::V1_587 => "CE v1.587.0",
            Profile::V1_743 => "CE v1.743.0",
            Profile::V1_788 => "CE v1.788.0",
        }
    }

    /// A run by path finds the script (a locked version) before it checks the token's run scope.
    pub fn lookup_before_scope(self) -> bool {
        self != Profile::V1_743
    }

    /// A refusal by a token's scopes: 401 `Not authorized: …` (`Error::NotAuthorized`) before
    /// scope refusals became `Error::PermissionDenied`, 403.
    pub fn scope_refusals_are_401(self) -> bool {
        matches!(self, Profile::V1_509 | Profile::V1_587)
    }

    /// The route check's list of script runs includes `jobs/run/preview` (and, by prefix,
    /// `jobs/run_wait_result/preview`): a run scope of kind `scripts` passes the route check of a
    /// preview, which the handler then refuses to operators (and grants anyone else).
    pub fn preview_is_a_script_run(self) -> bool {
        matches!(self, Profile::V1_509 | Profile::V1_587)
    }

    /// `tokens/list` rows carry `workspace_id` and `read_only`.
    pub fn lists_token_workspace(self) -> bool {
        matches!(self, Profile::V1_743 | Profile::V1_788)
    }

    /// A fresh server refuses job submissions until its startup migration of the job tables ran.
    pub fn migrates_at_start(self) -> bool {
        matches!(self, Profile::V1_509 | Profile::V1_587)
    }

    pub fn has_dynamic_select(self) -> bool {
        self != Profile::V1_509
    }

    /// `jobs/queue/import` and `jobs/delete`.
    pub fn has_job_import_and_delete(self) -> bool {
        matches!(self, Profile::V1_743 | Profile::V1_788)
    }

    /// `jobs/run_inline/preview` (upstream builds with its code; nixpkgs' does not).
    pub fn has_inline_preview(self) -> bool {
        matches!(self, Profile::V1_743 | Profile::V1_788)
    }

    /// Its workers paste a job's `_ENTRYPOINT_OVERRIDE` argument into the code they run. The fake
    /// runs no job: this says what the version does, for what the bootstrap must report.
    pub fn pastes_entrypoint_override(self) -> bool {
        matches!(self, Profile::V1_509 | Profile::V1_587)
    }

    /// `jobs_u/get/{id}` checks that the caller may see the job.
    pub fn checks_job_reads(self) -> bool {
        matches!(self, Profile::V1_743 | Profile::V1_788)
    }

    /// `jobs_u/queue/cancel/{id}` checks that the caller may see the job.
    pub fn checks_job_cancels(self) -> bool {
        self == Profile::V1_788
    }

    /// A job started with a labeled token records the user's name, not `label-<label>`.
    pub fn created_by_is_the_user(self) -> bool {
        self == Profile::V1_788
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.version())
    }
}
