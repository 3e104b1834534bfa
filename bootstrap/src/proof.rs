//! What a token is shown to do, with the token itself.
//!
//! Step 7's proof, before OpenBao holds the front-end's new token (the operator's):
//!
//! - **What it must do**: for each script its run scopes list, it runs a job (scheduled a
//!   century ahead, so that no worker starts it), reads that job back, cancels it, and reads it
//!   again cancelled. A 404 there is a script with no runnable version (Windmill runs a version
//!   only once a worker locked it: step 5 waits for that).
//! - **What it must be refused**: the calls that would run code or reach jobs that are not its
//!   own (previews, flow previews, dynamic selects, dependency jobs, inline previews, another
//!   script of the folder and one outside it, batches, imports, deleting jobs, reading and
//!   cancelling a job of
//!   the superadmin's), write code or rights (scripts, flows, variables, resources, folders, the
//!   folder's ACL, tokens), settings and another workspace. Each targets something that exists
//!   (the probe scripts of step 5, a job of the superadmin's queued for the proof, its own job)
//!   and sends a body that would be read, so that only a refusal keeps it from happening: 401 or
//!   403 (or the 500 `Permission denied` of versions that mapped it so, or the cancel route's 400
//!   `You are not logged in` to a token its scopes do not let through) is a refusal; a 404 with
//!   no body is a route this version does not have (nobody can use it), and so is the 500 of a
//!   route whose code was not built in (`… requires the worker feature`); 2xx is a grant and fails
//!   the step; any other answer (a 404 `not found`, a 400 or 422 about the body) is about
//!   something else and fails the step too: it proves no refusal. A call that a configured
//!   scope names the domain of is not proved (the configuration grants it), and said so.
//!   Whatever a grant would queue is scheduled a century ahead as well, and every job the proof
//!   made is cancelled at the end with the superadmin's token, however the proof ended.
//! - Windmill before 1.715 lets any member read a job of the workspace by its id, and before
//!   1.772 cancel one: on those versions reading and cancelling the superadmin's job are granted,
//!   which the step reports with a warning rather than failing (nixpkgs' 1.587 is one of them).
//! - What no call can show: a flaw of older Windmills that lets whoever may run a script choose
//!   the code its worker runs ([`FLAWS`]). It shows only on the worker, in a job that runs, so it
//!   is judged by the version the server names, and reported with a warning (a version that
//!   names none may have it).
//!
//! `--check`'s test that a stored token works: the front-end's reads the jobs it may see (200)
//! and is refused a read its scopes do not cover; the UI's gets `GET /api/users/whoami` (200).

use reqwest::Method;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::scope;
use crate::token::TokenSpec;
use crate::windmill::Windmill;

/// How far ahead the proof's runs are scheduled (`scheduled_in_secs`): about a century. A
/// worker takes only jobs that are due; each is cancelled right away all the same.
pub const FAR_AHEAD_SECS: i64 = 3_155_760_000;

/// The harmless code of the previews the token must be refused (were one granted, it would be
/// scheduled a century ahead and cancelled).
const PROBE_CODE: &str = "# fediversity-windmill-bootstrap: a preview the front-end must be refused\nexit 0\n";

/// A flaw of Windmill before `fixed` that lets whoever may run a script run code of its choosing
/// on the worker: nothing the API answers shows it (it happens when a worker runs the job), so it
/// is judged by the version the server names.
#[derive(Debug, PartialEq, Eq)]
pub struct Flaw {
    pub advisory: &'static str,
    pub fixed: &'static str,
    /// What the flawed versions do, after "it".
    pub what: &'static str,
}

/// The flaws of the versions the bootstrap speaks to (1.509 to 1.788) that a token which runs
/// the deploy script reaches: Windmill takes a job's `_ENTRYPOINT_OVERRIDE` argument (any caller
/// of `jobs/run/p/<path>` sets it) as the function its wrapper calls, and until 1.703.3 its
/// workers pasted it unchecked into the Python (and Bun, Deno, PHP) wrapper they run
/// (`python_executor.rs`, `prepare_wrapper`; fixed by "validate entrypoint override to prevent
/// worker code injection", upstream #9204).
pub const FLAWS: &[Flaw] = &[Flaw {
    advisory: "GHSA-wxjq-w5pj-jqhx",
    fixed: "1.703.3",
    what: "pastes a job's _ENTRYPOINT_OVERRIDE argument unchecked into the code its worker runs",
}];

/// What the proof reaches: the workspace, the folder, the probe scripts of step 5 (in the folder,
/// outside it).
pub struct Targets<'a> {
    pub workspace: &'a str,
    pub folder: &'a str,
    pub probe_inside: &'a str,
    pub probe_outside: &'a str,
}

/// How a token's rights were shown.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Proof {
    /// The scripts it ran (and, as its scopes allow, read and cancelled) a job of.
    pub ran: Vec<String>,
    /// What it did with them: `ran`, `ran and read`, `ran, read and cancelled`.
    pub did: &'static str,
    /// Refused (401 or 403).
    pub refused: Vec<&'static str>,
    /// Routes this version does not have.
    pub absent: Vec<&'static str>,
    /// Not proved: a configured scope names their domain.
    pub by_scopes: Vec<&'static str>,
    /// Granted by a version before the one that refuses them: what, from which version on
    /// Windmill refuses it, and the call.
    pub gaps: Vec<(&'static str, &'static str, String)>,
    /// An unscoped token: nothing to be refused.
    pub unscoped: bool,
    /// The flaws of this version that let the token run code of its choosing (see [`FLAWS`]),
    /// and whether the version is known (`false`: it names none, so it may have them).
    pub flaws: Vec<&'static Flaw>,
    pub version_known: bool,
}

impl Proof {
    /// One warning line for what this version grants that later ones refuse, if anything.
    pub fn warn_of_gaps(&self, version: &str) {
        if self.gaps.is_empty() {
            return;
        }
        let calls: Vec<&str> = self.gaps.iter().map(|(_, _, call)| call.as_str()).collect();
        let whats: Vec<String> = self
            .gaps
            .iter()
            .map(|(what, since, _)| format!("{what} from {since}"))
            .collect();
        tracing::warn!(
            "Windmill {version} lets the front-end's token reach a job that is not its own, given its id ({} answered 2xx): \
             on this version any member of the workspace reads and cancels any job whose id it knows; Windmill refuses {}",
            calls.join(", "),
            whats.join(", ")
        );
    }

    /// One warning line per flaw of this version (or, when it names none, that it may have).
    pub fn warn_of_flaws(&self, version: &str) {
        for flaw in &self.flaws {
            let (is, it) = if self.version_known {
                (format!("is older than {}", flaw.fixed), "it")
            } else {
                (
                    format!(
                        "does not name its version, and one older than {} would be open",
                        flaw.fixed
                    ),
                    "such a version",
                )
            };
            tracing::warn!(
                "Windmill {version} {is}: {it} {} ({}), so whoever holds the front-end's token runs code of its choosing on the worker, \
                 which reads the node's deploy secrets, whatever the token's scopes; upgrade Windmill to {} or later",
                flaw.what,
                flaw.advisory,
                flaw.fixed
            );
        }
    }

    pub fn describe(&self) -> String {
        let mut text = format!("which {} a job of {}", self.did, self.ran.join(" and "));
        if self.unscoped {
            text.push_str(", unscoped, so no limit to prove");
            text.push_str(&self.describe_flaws());
            return text;
        }
        text.push_str(&format!(
            ", and was refused {} (401 or 403 each)",
            self.refused.join(", ")
        ));
        if !self.absent.is_empty() {
            text.push_str(&format!("; this Windmill has no route for {}", self.absent.join(", ")));
        }
        if !self.by_scopes.is_empty() {
            text.push_str(&format!(
                "; not proved, as token.scopes name their domain: {}",
                self.by_scopes.join(", ")
            ));
        }
        if !self.gaps.is_empty() {
            let gaps: Vec<String> = self
                .gaps
                .iter()
                .map(|(what, since, _)| format!("{what} (refused from Windmill {since} on)"))
                .collect();
            text.push_str(&format!("; granted by this Windmill: {}", gaps.join(", ")));
        }
        text.push_str(&self.describe_flaws());
        text
    }

    fn describe_flaws(&self) -> String {
        if self.flaws.is_empty() {
            return String::new();
        }
        let flaws: Vec<String> = self
            .flaws
            .iter()
            .map(|f| format!("{} (fixed in Windmill {})", f.advisory, f.fixed))
            .collect();
        let open = if self.version_known { "open" } else { "maybe open" };
        format!(
            "; {open} to code of the token's choosing on the worker: {}",
            flaws.join(", ")
        )
    }
}

/// One call the token must be refused.
struct Refusal {
    what: &'static str,
    method: Method,
    path: String,
    body: Option<Value>,
    /// The scope domain whose scopes would grant it: not proved when one is configured.
    domain: Option<&'static str>,
    /// Granted by Windmill before this version: a warning there, not a failure.
    since: Option<&'static str>,
}

fn refusals(t: &Targets, own_job: &str, admin_job: &str) -> Vec<Refusal> {
    let w = format!("/api/w/{}", t.workspace);
    let later = format!("?scheduled_in_secs={FAR_AHEAD_SECS}");
    let preview = json!({"content": PROBE_CODE, "language": "bash", "args": {}});
    let call = |what, method, path: String, body: Option<Value>, domain| Refusal {
        what,
        method,
        path,
        body,
        domain,
        since: None,
    };
    let mut all = vec![
        call(
            "a preview",
            Method::POST,
            format!("{w}/jobs/run/preview{later}"),
            Some(preview.clone()),
            None,
        ),
        call(
            "a preview waiting for its result",
            Method::POST,
            format!("{w}/jobs/run_wait_result/preview{later}"),
            Some(preview),
            None,
        ),
        call(
            "a flow preview",
            Method::POST,
            format!("{w}/jobs/run/preview_flow{later}"),
            Some(json!({"value": {"modules": []}, "args": {}})),
            None,
        ),
        call(
            "a dynamic select",
            Method::POST,
            format!("{w}/jobs/run/dynamic_select{later}"),
            Some(
                json!({"runnable_ref": {"source": "inline", "code": "def main():\n    return []\n", "lang": "python3"},
                        "entrypoint_function": "main", "args": {}}),
            ),
            None,
        ),
        call(
            "a dependency job",
            Method::POST,
            format!("{w}/jobs/run/dependencies"),
            Some(json!({"raw_scripts": [], "entrypoint": "main"})),
            None,
        ),
        // Runs the code at once, in the server's process (1.590 on): `jobs:write` passes its route
        // check, and before 1.703.3 its handler refused neither operators nor scoped tokens.
        call(
            "an inline preview",
            Method::POST,
            format!("{w}/jobs/run_inline/preview"),
            Some(json!({"content": "SELECT 1", "language": "duckdb", "args": {}})),
            None,
        ),
        call(
            "another script of the folder",
            Method::POST,
            format!("{w}/jobs/run/p/{}{later}", t.probe_inside),
            Some(json!({})),
            None,
        ),
        call(
            "a script outside the folder",
            Method::POST,
            format!("{w}/jobs/run/p/{}{later}", t.probe_outside),
            Some(json!({})),
            None,
        ),
        call(
            "a batch of jobs",
            Method::POST,
            format!("{w}/jobs/add_batch_jobs/0"),
            Some(json!({"kind": "noop"})),
            None,
        ),
        call(
            "importing jobs",
            Method::POST,
            format!("{w}/jobs/queue/import"),
            Some(json!([])),
            None,
        ),
        call(
            "deleting jobs",
            Method::POST,
            format!("{w}/jobs/delete"),
            Some(json!([])),
            None,
        ),
        call(
            "deleting its own job",
            Method::POST,
            format!("{w}/jobs/completed/delete/{own_job}"),
            None,
            None,
        ),
        Refusal {
            since: Some("1.715"),
            ..call(
                "reading a job of the superadmin's",
                Method::GET,
                format!("{w}/jobs_u/get/{admin_job}"),
                None,
                None,
            )
        },
        Refusal {
            since: Some("1.772"),
            ..call(
                "cancelling a job of the superadmin's",
                Method::POST,
                format!("{w}/jobs_u/queue/cancel/{admin_job}"),
                Some(json!({"reason": "fediversity-windmill-bootstrap: a cancel the front-end must be refused"})),
                None,
            )
        },
        call(
            "creating a script",
            Method::POST,
            format!("{w}/scripts/create"),
            Some(json!({})),
            Some("scripts"),
        ),
        call(
            "creating a flow",
            Method::POST,
            format!("{w}/flows/create"),
            Some(json!({})),
            Some("flows"),
        ),
        call(
            "creating a variable",
            Method::POST,
            format!("{w}/variables/create"),
            Some(json!({})),
            Some("variables"),
        ),
        call(
            "creating a resource",
            Method::POST,
            format!("{w}/resources/create"),
            Some(json!({})),
            Some("resources"),
        ),
        call(
            "creating a folder",
            Method::POST,
            format!("{w}/folders/create"),
            Some(json!({})),
            Some("folders"),
        ),
        call(
            "changing the folder's ACL",
            Method::POST,
            format!("{w}/acls/add/folder/{}", t.folder),
            Some(json!({})),
            Some("acls"),
        ),
        call(
            "reading a global setting",
            Method::GET,
            "/api/settings/global/instance_python_version".to_owned(),
            None,
            Some("settings"),
        ),
        call(
            "minting a token",
            Method::POST,
            "/api/users/tokens/create".to_owned(),
            Some(json!({})),
            Some("users"),
        ),
    ];
    // Every node has the `admins` workspace (Windmill's own); the front-end has no place there.
    if t.workspace != "admins" {
        all.push(call(
            "another workspace",
            Method::GET,
            "/api/w/admins/jobs/list".to_owned(),
            None,
            None,
        ));
    }
    all
}

/// How an answer to a call the token must be refused came out.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Refused,
    /// A 404 with an empty body: Windmill's answer to a route it does not have.
    Absent,
    Granted(u16),
    /// Any other answer: about something else than the token's rights.
    Other(u16),
}

fn verdict(status: u16, body: &str) -> Verdict {
    match status {
        401 | 403 => Verdict::Refused,
        500 if body.starts_with("Permission denied") => Verdict::Refused,
        // The cancel route takes a token its scopes do not let through as an anonymous caller,
        // whom it refuses a job that is not an anonymous one's.
        400 if body.contains("You are not logged in") => Verdict::Refused,
        404 if body.trim().is_empty() => Verdict::Absent,
        // The stub a build without the route's code answers (nixpkgs builds no `run_inline`).
        500 if body.contains("requires the worker feature") => Verdict::Absent,
        200..=299 => Verdict::Granted(status),
        other => Verdict::Other(other),
    }
}

/// Whether the version `GET /api/version` answered (`CE v1.587.0`) is at least `since`
/// (`1.715`); `None` when it names no version (a build outside git answers `CE unknown-version`).
fn at_least(version: &str, since: &str) -> Option<bool> {
    let numbers = |text: &str| -> Option<Vec<u64>> {
        let parts: Vec<u64> = text.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        (parts.len() >= 2).then_some(parts)
    };
    let found = version
        .split_whitespace()
        .find_map(|word| numbers(word.trim_start_matches('v')))?;
    Some(found >= numbers(since)?)
}

/// A job id as Windmill answers one: a UUID.
fn job_id(body: &str) -> Option<String> {
    let id = body.trim().trim_matches('"');
    (id.len() == 36 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')).then(|| id.to_owned())
}

/// Step 7's proof, with the new token `front` carries and the superadmin's `admin` (for its own
/// probe job, and to cancel whatever the proof queued): see the module comment. Any failure
/// names the call, its answer and the server's `version` (the caller deletes the token).
pub async fn prove(
    front: &Windmill,
    admin: &Windmill,
    spec: &TokenSpec,
    t: &Targets<'_>,
    version: &str,
) -> Result<Proof> {
    let mut queued: Vec<String> = Vec::new();
    let result = prove_queuing(front, admin, spec, t, version, &mut queued).await;
    // Whatever it came to: no job of the proof stays queued.
    for id in queued {
        let path = format!("/api/w/{}/jobs_u/queue/cancel/{id}", t.workspace);
        let body = json!({"reason": "fediversity-windmill-bootstrap: the end of step 7's proof"});
        match admin.answer_to(Method::POST, &path, Some(&body)).await {
            Ok((_, answer)) if answer.status.is_success() => {}
            Ok((call, answer)) => tracing::warn!(
                "could not cancel job {id} of step 7's proof ({call} answered {}: {}); it is scheduled a century ahead",
                answer.status.as_u16(),
                answer.shown()
            ),
            Err(error) => {
                tracing::warn!("could not cancel job {id} of step 7's proof ({error}); it is scheduled a century ahead")
            }
        }
    }
    result
}

async fn prove_queuing(
    front: &Windmill,
    admin: &Windmill,
    spec: &TokenSpec,
    t: &Targets<'_>,
    version: &str,
    queued: &mut Vec<String>,
) -> Result<Proof> {
    let mut proof = Proof::default();
    let w = format!("/api/w/{}", t.workspace);
    let later = format!("?scheduled_in_secs={FAR_AHEAD_SECS}");
    let fail = |what: String, call: String, why: String| Error::ProofRun {
        version: version.to_owned(),
        label: spec.label.clone(),
        what,
        call,
        why,
    };
    // What it must do: run, read, cancel, read cancelled; an unscoped token the default scripts.
    let mut own_job = None;
    let scripts = if spec.scopes.is_empty() {
        scope::run_scripts(&scope::defaults(t.folder))
    } else {
        scope::run_scripts(&spec.scopes)
    };
    // Reading its jobs needs `jobs:read` (a run scope reads them only from 1.511 on), cancelling
    // `jobs:write`: what the scopes do not give is not asked.
    let jobs_scope = |actions: &[&str]| {
        spec.scopes.is_empty()
            || spec
                .scopes
                .iter()
                .any(|s| s == "*" || actions.iter().any(|a| *s == format!("jobs:{a}")))
    };
    let (reads, cancels) = (
        jobs_scope(&["read", "write", "delete"]),
        jobs_scope(&["write", "delete"]),
    );
    proof.did = match (reads, cancels) {
        (_, true) => "ran, read and cancelled",
        (true, false) => "ran and read",
        (false, false) => "ran",
    };
    for script in scripts {
        let what = format!("run a job of {script}");
        let (call, answer) = front
            .answer_to(
                Method::POST,
                &format!("{w}/jobs/run/p/{script}{later}"),
                Some(&json!({})),
            )
            .await?;
        let id = match (answer.status.as_u16(), job_id(&answer.body)) {
            (200..=299, Some(id)) => id,
            (404, _) => {
                let why = format!(
                    "404 ({}): the script has no version that runs (Windmill runs one only once a worker has locked it)",
                    answer.shown()
                );
                return Err(fail(what, call, why));
            }
            (status, _) => return Err(fail(what, call, format!("{status}: {}", answer.shown()))),
        };
        queued.push(id.clone());
        own_job.get_or_insert(id.clone());
        proof.ran.push(script.clone());
        if !reads {
            continue;
        }
        let job = format!("{w}/jobs_u/get/{id}");
        let read = read_job(front, &job).await?;
        if !read.found || read.canceled {
            return Err(fail(
                format!("read its job of {script}"),
                format!("GET {job}"),
                read.why,
            ));
        }
        if !cancels {
            continue;
        }
        let cancel = format!("{w}/jobs_u/queue/cancel/{id}");
        let reason =
            json!({"reason": "fediversity-windmill-bootstrap: step 7's proof, a job scheduled a century ahead"});
        let (call, answer) = front.answer_to(Method::POST, &cancel, Some(&reason)).await?;
        if !answer.status.is_success() {
            let why = format!("{}: {}", answer.status.as_u16(), answer.shown());
            return Err(fail(format!("cancel its job of {script}"), call, why));
        }
        let read = read_job(front, &job).await?;
        if !read.found || !read.canceled {
            return Err(fail(
                format!("cancel its job of {script}"),
                format!("GET {job}"),
                format!("the job is not cancelled: {}", read.why),
            ));
        }
    }
    let Some(own_job) = own_job else {
        return Err(Error::Config(
            "token.scopes name no script to run (jobs:run:scripts:<paths>): the front-end could not deploy".to_owned(),
        ));
    };
    // It runs a script: what the version lets a run do that no answer shows.
    proof.version_known = at_least(version, "1.0").is_some();
    proof.flaws = FLAWS
        .iter()
        .filter(|flaw| at_least(version, flaw.fixed) != Some(true))
        .collect();
    if spec.scopes.is_empty() {
        proof.unscoped = true;
        return Ok(proof);
    }
    // A job of the superadmin's, outside the folder, for the token to be refused.
    let (call, answer) = admin
        .answer_to(
            Method::POST,
            &format!("{w}/jobs/run/p/{}{later}", t.probe_outside),
            Some(&json!({})),
        )
        .await?;
    let Some(admin_job) = job_id(&answer.body).filter(|_| answer.status.is_success()) else {
        return Err(Error::Status {
            service: "Windmill",
            call,
            status: answer.status.as_u16(),
            message: answer.shown(),
            tries: answer.tries,
        });
    };
    queued.push(admin_job.clone());
    for refusal in refusals(t, &own_job, &admin_job) {
        if refusal
            .domain
            .is_some_and(|domain| spec.scopes.iter().any(|s| s.split(':').next() == Some(domain)))
        {
            proof.by_scopes.push(refusal.what);
            continue;
        }
        let (call, answer) = front
            .answer_to(refusal.method.clone(), &refusal.path, refusal.body.as_ref())
            .await?;
        match verdict(answer.status.as_u16(), &answer.body) {
            Verdict::Refused => proof.refused.push(refusal.what),
            Verdict::Absent => proof.absent.push(refusal.what),
            Verdict::Granted(status) => {
                if let Some(id) = job_id(&answer.body).filter(|id| !queued.contains(id)) {
                    queued.push(id);
                }
                // Granted by a version before the one that refuses it (or one that does not say
                // which it is): a warning; by a version that should refuse it, a failure.
                match refusal.since.filter(|since| at_least(version, since) != Some(true)) {
                    Some(since) => proof.gaps.push((refusal.what, since, call)),
                    None => {
                        return Err(Error::Granted {
                            version: version.to_owned(),
                            label: spec.label.clone(),
                            what: refusal.what.to_owned(),
                            call,
                            status,
                        });
                    }
                }
            }
            Verdict::Other(status) => {
                return Err(Error::LimitNotShown {
                    version: version.to_owned(),
                    label: spec.label.clone(),
                    call,
                    why: format!(
                        "{status} ({}), an answer about something else than the token's rights",
                        answer.shown()
                    ),
                });
            }
        }
    }
    Ok(proof)
}

/// A job as `jobs_u/get` answered it.
struct Read {
    found: bool,
    canceled: bool,
    /// What was answered, for a message.
    why: String,
}

/// `GET jobs_u/get/<id>`: found (200, the JSON of a job) and whether it is cancelled, read
/// tolerantly: a `CompletedJob` with `canceled: true` (every version), or `canceled` alone.
async fn read_job(front: &Windmill, path: &str) -> Result<Read> {
    let (_, answer) = front.answer_to(Method::GET, path, None).await?;
    let status = answer.status.as_u16();
    let job: Option<Value> = (status == 200)
        .then(|| serde_json::from_str(&answer.body).ok())
        .flatten()
        .filter(Value::is_object);
    Ok(match job {
        Some(job) => Read {
            found: true,
            canceled: job.get("canceled").and_then(Value::as_bool) == Some(true),
            why: format!(
                "200, a {} with canceled {}",
                job.get("type").and_then(Value::as_str).unwrap_or("job"),
                job.get("canceled").unwrap_or(&Value::Null)
            ),
        },
        None => Read {
            found: false,
            canceled: false,
            why: format!("{status}: {}", answer.shown()),
        },
    })
}

/// Whether a stored token still works (`--check`).
#[derive(Debug, PartialEq, Eq)]
pub enum Works {
    /// The calls were answered as they must be.
    Yes,
    /// 401 on what it must be allowed: the token no longer authenticates.
    NotAuthenticated { call: String },
    /// A scoped token granted the read its scopes do not cover.
    Granted { call: String },
    /// Bound to a workspace (`bound`) or not, unlike its spec: a bound token is refused every
    /// global route as unauthenticated (401 `Unauthorized`), an unbound one by its scopes
    /// (`Required scope`) or not at all. `tokens/list` says so only from about 1.693 on.
    Bound { call: String, status: u16, bound: bool },
}

/// Asks Windmill, with the stored token `api` carries, the calls that show it works: for the
/// UI's (unscoped, unbound) `GET /api/users/whoami` (200); for the front-end's, `GET …/jobs/list`
/// (200: it reads the jobs it may see), `GET /api/users/whoami` (bound as configured: see
/// [`Works::Bound`]) and, when scoped, a read of a domain its scopes do not name (refused).
/// Another answer is an error: it cannot be told.
pub async fn works(api: &Windmill, spec: &TokenSpec, workspace: &str) -> Result<Works> {
    let unexpected = |call: String, answer: crate::http::Answer| Error::Status {
        service: "Windmill",
        call,
        status: answer.status.as_u16(),
        message: answer.shown(),
        tries: answer.tries,
    };
    let own = if spec.workspace.is_none() && spec.scopes.is_empty() {
        "/api/users/whoami".to_owned()
    } else {
        format!("/api/w/{workspace}/jobs/list?per_page=1")
    };
    let (call, answer) = api.answer_to(Method::GET, &own, None).await?;
    match answer.status.as_u16() {
        200 => {}
        401 => return Ok(Works::NotAuthenticated { call }),
        _ => return Err(unexpected(call, answer)),
    }
    if own != "/api/users/whoami" {
        let (call, answer) = api.answer_to(Method::GET, "/api/users/whoami", None).await?;
        let status = answer.status.as_u16();
        let bound = status == 401 && !answer.body.contains("scope");
        if bound != spec.workspace.is_some() {
            return Ok(Works::Bound { call, status, bound });
        }
    }
    let Some(read) = (!spec.scopes.is_empty()).then(|| scope::probe(&spec.scopes)).flatten() else {
        return Ok(Works::Yes);
    };
    let (call, answer) = api
        .answer_to(Method::GET, &format!("/api/w/{workspace}/{read}"), None)
        .await?;
    match verdict(answer.status.as_u16(), &answer.body) {
        Verdict::Refused => Ok(Works::Yes),
        Verdict::Granted(_) => Ok(Works::Granted { call }),
        _ => Err(unexpected(call, answer)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_classified_strictly() {
        assert_eq!(
            verdict(401, "Not authorized: Access denied. Required scope: jobs:run"),
            Verdict::Refused
        );
        assert_eq!(
            verdict(403, "Permission denied: Required scope: scripts:write"),
            Verdict::Refused
        );
        assert_eq!(verdict(500, "Permission denied: no"), Verdict::Refused);
        assert_eq!(
            verdict(
                400,
                "Bad request: You are not logged in and this job was not created by an anonymous user like you so you cannot cancel it"
            ),
            Verdict::Refused
        );
        assert_eq!(verdict(404, ""), Verdict::Absent);
        assert_eq!(
            verdict(500, "Internal: inline preview requires the worker feature"),
            Verdict::Absent
        );
        assert_eq!(
            verdict(201, "0190aaaa-0000-4000-a000-000000000001"),
            Verdict::Granted(201)
        );
        // About something else: a missing script, a malformed body, a server error.
        assert_eq!(
            verdict(404, "Not found: script not found at name f/x/y"),
            Verdict::Other(404)
        );
        assert_eq!(verdict(422, "Failed to deserialize"), Verdict::Other(422));
        assert_eq!(verdict(400, "Bad request: x"), Verdict::Other(400));
        assert_eq!(verdict(500, "Internal: x"), Verdict::Other(500));
    }

    #[test]
    fn versions_are_compared_by_their_numbers() {
        assert_eq!(at_least("CE v1.587.0", "1.715"), Some(false));
        assert_eq!(at_least("CE v1.788.0", "1.772"), Some(true));
        assert_eq!(at_least("CE v1.715.0", "1.715"), Some(true));
        assert_eq!(at_least("EE v1.1000.2", "1.772"), Some(true));
        assert_eq!(at_least("CE unknown-version", "1.772"), None);
        assert_eq!(at_least("", "1.772"), None);
        // Three parts: the flaw fixed in 1.703.3.
        assert_eq!(at_least("CE v1.703.2", "1.703.3"), Some(false));
        assert_eq!(at_least("CE v1.703.3", "1.703.3"), Some(true));
        assert_eq!(at_least("CE v1.704.0", "1.703.3"), Some(true));
        assert_eq!(at_least("CE v1.704", "1.703.3"), Some(true));
    }

    #[test]
    fn job_ids_are_uuids() {
        assert_eq!(
            job_id("0190aaaa-0000-4000-a000-000000000001\n").as_deref(),
            Some("0190aaaa-0000-4000-a000-000000000001")
        );
        assert_eq!(job_id("[]"), None);
        assert_eq!(job_id("deleted"), None);
    }

    #[test]
    fn every_refusal_targets_something_that_exists_and_queues_nothing_that_is_due() {
        let t = Targets {
            workspace: "w",
            folder: "f",
            probe_inside: "f/f/bootstrap_probe",
            probe_outside: "u/admin/bootstrap_probe",
        };
        let all = refusals(&t, "own", "theirs");
        assert_eq!(all.len(), 23);
        for r in &all {
            // An inline preview queues nothing, it runs at once: were it granted, only a query
            // of nothing would have run.
            if r.path.contains("/jobs/run_inline/") {
                assert_eq!(r.body.as_ref().unwrap()["content"], "SELECT 1");
                continue;
            }
            // Whatever would queue a job is scheduled a century ahead.
            if r.path.contains("/jobs/run") {
                assert!(
                    r.path.ends_with(&format!("?scheduled_in_secs={FAR_AHEAD_SECS}"))
                        || r.path.contains("dependencies"),
                    "{}",
                    r.path
                );
            }
        }
        let paths: Vec<&str> = all.iter().map(|r| r.path.as_str()).collect();
        assert!(paths.contains(&"/api/w/w/jobs/run/p/f/f/bootstrap_probe?scheduled_in_secs=3155760000"));
        assert!(paths.contains(&"/api/w/w/jobs_u/get/theirs"));
        assert!(paths.contains(&"/api/w/w/jobs/completed/delete/own"));
        // In the admins workspace there is no other to try.
        let admins = Targets {
            workspace: "admins",
            ..t
        };
        assert_eq!(refusals(&admins, "own", "theirs").len(), 22);
    }
}
