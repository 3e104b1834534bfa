//! The job journal: one JSON entry per job id in the state directory, written atomically
//! before the program starts (`running`) and again when it ends (the terminal status). It is
//! what makes a job's result impossible to lose or to execute twice by accident:
//! - the same job id again replays a terminal entry instead of running the program;
//! - an entry still `running` under a live jobenv is refused, unless that attempt is stopping
//!   because its worker is gone (then the new run waits for it, see `job.rs`);
//! - one `running` under a dead jobenv was interrupted: it is recorded as failed
//!   (`interrupted`) and the job runs again as the next attempt.
//!
//! An interrupted attempt is not a result: a later run of that job id runs it again, even after
//! `recover` marked it (that is what a worker that re-pulls a crashed job needs). An attempt
//! whose program ran but whose end could not be recorded is `result_unknown`: it is never run
//! again by accident, and never replayed as a success either.
//!
//! An entry's identity is its file name: an entry whose `job_id` is not its file name is
//! corrupt, reported by path and never acted on.

use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::ending::{Ending, InterruptedBy, Reason, Status};
use crate::error::{EXIT_INTERNAL, Problem, ReadError};
use crate::process;

/// How long a stopping attempt is given beyond its grace.
pub const STOP_MARGIN: Duration = Duration::from_secs(5);
/// The most grace a journal entry can claim for its attempt (`--grace` is rarely more than a
/// minute; a forged entry must not hold `drain` or the next run for days).
pub const MAX_STOP_GRACE: Duration = Duration::from_secs(600);

/// An attempt that ended before the current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Attempt {
    pub attempt: u32,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<InterruptedBy>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphans: Option<Orphans>,
}

/// Processes of an attempt's program tree that were still running in its cgroup after its
/// jobenv was gone, and were stopped (see `record::orphans`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Orphans {
    /// How many there were (each got SIGTERM).
    pub found: usize,
    /// How many were still running after the grace, and got SIGKILL.
    pub killed: usize,
    /// Who stopped them: `recover`, `drain`, or the run of the namespace that found them.
    pub stopped_by: String,
    pub stopped_at: String,
}

/// The journal entry of one job id: its latest attempt, plus the earlier ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(
    title = "fediversity-jobenv journal entry",
    description = "One job's entry, as `fediversity-jobenv status JOB_ID` prints it"
)]
pub struct Entry {
    /// The entry's format ([`FORMAT`] when this jobenv wrote it; an entry without one is of
    /// format 1, before formats were numbered).
    #[serde(default = "first_format")]
    pub format: u32,
    pub job_id: String,
    pub attempt: u32,
    pub verb: String,
    pub attribute: String,
    pub namespace: String,
    /// jobenv's pid and the pid's start time (together they name one process, within the boot
    /// `boot_id`).
    pub pid: i32,
    pub pid_start: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The process that started jobenv (the Windmill worker) and its start time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<(i32, u64)>,
    /// jobenv's `--grace`, for a run that waits for this attempt to stop ([`Entry::stop_wait`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_ms: Option<u64>,
    pub started_at: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// With `result_unknown`: what the program exited with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<InterruptedBy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orphans: Option<Orphans>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<Attempt>,
}

impl Entry {
    /// Ended with a result of its own (an interrupted attempt has none; an unknown result is
    /// one: the program ran).
    pub fn is_result(&self) -> bool {
        self.status != Status::Running && self.reason != Some(Reason::Interrupted)
    }

    /// Still `running` under a jobenv that is alive (in this boot).
    pub fn is_live(&self) -> bool {
        let this_boot = self.boot_id.as_deref().is_none_or(|id| process::boot_id() == Some(id));
        self.status == Status::Running && this_boot && process::is_jobenv(self.pid, self.pid_start)
    }

    /// How long this attempt may take to stop: its grace and a margin, bounded, whatever the
    /// entry says (it is a file a program of the worker's user could write).
    pub fn stop_wait(&self) -> Duration {
        Duration::from_millis(self.grace_ms.unwrap_or(3000)).min(MAX_STOP_GRACE) + STOP_MARGIN
    }

    /// Live, but the process that started its jobenv is gone (a dead Windmill worker): the
    /// attempt is stopping its program tree and will record itself interrupted.
    pub fn is_stopping(&self) -> bool {
        let Some((parent, parent_start)) = self.parent else {
            return false;
        };
        self.is_live() && (process::parent_of(self.pid) != Some(parent) || !process::is_running(parent, parent_start))
    }

    /// Records that this attempt ended without a result: failed, interrupted, and why.
    pub fn mark_interrupted(&mut self, by: InterruptedBy) {
        self.status = Status::Failed;
        self.reason = Some(Reason::Interrupted);
        self.interrupted_by = Some(by);
        self.exit_code = None;
        self.finished_at = Some(now());
    }

    /// Records the orphans of attempt `attempt` (this one or an earlier one); false if the
    /// entry has no such attempt.
    pub fn note_orphans(&mut self, attempt: u32, orphans: Orphans) -> bool {
        if self.attempt == attempt {
            self.orphans = Some(orphans);
            return true;
        }
        note_orphans(&mut self.earlier, attempt, orphans)
    }

    /// Records how this attempt ended.
    pub fn end(&mut self, ending: &Ending) {
        self.status = ending.status;
        self.exit_code = Some(ending.exit_code);
        self.finished_at = Some(now());
        if ending.interrupted_by.is_some() {
            self.reason = ending.reason();
            self.interrupted_by = ending.interrupted_by;
        }
    }

    /// A job id names one request: the problem, if this entry holds it for another verb,
    /// attribute or namespace than `asked`.
    pub fn another_request(&self, asked: &Request<'_>) -> Option<Problem> {
        let Request {
            verb,
            attribute,
            namespace,
        } = *asked;
        let differs = self.verb != verb || attribute != Some(&self.attribute) || namespace != Some(&self.namespace);
        differs.then(|| Problem::AnotherRequest {
            job_id: self.job_id.clone(),
            recorded: format!("{} of {} in namespace {}", self.verb, self.attribute, self.namespace),
            asked: format!(
                "{} of {} in namespace {}",
                verb.escape_debug(),
                attribute.unwrap_or("(none)").escape_debug(),
                namespace.unwrap_or("(none)").escape_debug()
            ),
        })
    }

    /// How the recorded attempt ended, for a replay.
    pub fn ending(&self) -> Ending {
        let mut ending = Ending {
            status: self.status,
            exit_code: self.exit_code.unwrap_or(EXIT_INTERNAL),
            errors: Vec::new(),
            interrupted_by: None,
        };
        if self.reason == Some(Reason::ResultUnknown) {
            let code = self
                .program_exit_code
                .map_or("an unknown code".to_owned(), |code| format!("exit code {code}"));
            ending.errors.push(format!("the program of this job ran (attempt {}, {code}) but its end could not be recorded: the result is unknown", self.attempt));
            ending.exit_code = EXIT_INTERNAL;
        }
        ending
    }

    pub(crate) fn as_attempt(&self) -> Attempt {
        Attempt {
            attempt: self.attempt,
            status: self.status,
            exit_code: self.exit_code,
            reason: self.reason,
            interrupted_by: self.interrupted_by,
            started_at: self.started_at.clone(),
            finished_at: self.finished_at.clone(),
            orphans: self.orphans.clone(),
        }
    }
}

/// Records the orphans of attempt `attempt` among `earlier`; false if there is no such attempt.
pub fn note_orphans(earlier: &mut [Attempt], attempt: u32, orphans: Orphans) -> bool {
    match earlier.iter_mut().find(|a| a.attempt == attempt) {
        Some(earlier) => {
            earlier.orphans = Some(orphans);
            true
        }
        None => false,
    }
}

impl Entry {
    /// The `running` entry of a new attempt of the job `[verb, attribute, namespace]`, by this
    /// jobenv, started by `parent` (pid and start time) under a job runner.
    pub fn running(
        job_id: &str,
        attempt: u32,
        earlier: Vec<Attempt>,
        [verb, attribute, namespace]: [&String; 3],
        parent: Option<(i32, u64)>,
        grace: Duration,
    ) -> Entry {
        let pid = std::process::id() as i32;
        Entry {
            format: FORMAT,
            job_id: job_id.to_owned(),
            attempt,
            verb: verb.clone(),
            attribute: attribute.clone(),
            namespace: namespace.clone(),
            pid,
            pid_start: process::start_time(pid).unwrap_or_default(),
            boot_id: process::boot_id().map(str::to_owned),
            parent,
            grace_ms: Some(grace.as_millis() as u64),
            started_at: now(),
            status: Status::Running,
            exit_code: None,
            program_exit_code: None,
            finished_at: None,
            reason: None,
            interrupted_by: None,
            orphans: None,
            earlier,
        }
    }
}

/// What a run asks of a job id (what its payload says, as far as it could be read): a job id
/// names one request ([`Entry::another_request`]).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub verb: &'a str,
    pub attribute: Option<&'a str>,
    pub namespace: Option<&'a str>,
}

/// What to do with a job id, given its entry.
#[derive(Debug)]
pub enum Decision {
    /// It already ended: report the recorded result, run nothing.
    Replay(Box<Entry>),
    /// It is running under another jobenv right now.
    Refuse,
    /// Run it as this attempt, keeping the earlier ones.
    Run { attempt: u32, earlier: Vec<Attempt> },
}

/// What a journal knows of a job id when a run claims it: its entry, and whether an attempt holds
/// it right now (then who, for the message of a refused run).
#[derive(Debug)]
pub struct Known {
    pub entry: Option<Entry>,
    pub live: Option<String>,
    /// What ended a `running` entry that no attempt holds any more: its jobenv is gone (one
    /// node), or its lease expired (the cluster journal).
    pub gone: InterruptedBy,
}

impl Known {
    /// As the node's own journal knows it: an attempt is live while its jobenv runs.
    pub fn local(entry: Option<Entry>) -> Known {
        let live = entry
            .as_ref()
            .filter(|e| e.is_live())
            .map(|e| format!("journal entry of attempt {} under live jobenv pid {}", e.attempt, e.pid));
        Known {
            entry,
            live,
            gone: InterruptedBy::JobenvGone,
        }
    }
}

#[cfg(test)]
pub fn decide(existing: Option<Entry>) -> Decision {
    decide_known(Known::local(existing))
}

/// The same decision on one node and on a cluster: a result is replayed, a live attempt refused,
/// anything else runs as the next attempt (a `running` entry nobody holds any more was
/// interrupted).
pub fn decide_known(known: Known) -> Decision {
    match known.entry {
        None => Decision::Run {
            attempt: 1,
            earlier: Vec::new(),
        },
        Some(entry) if entry.is_result() => Decision::Replay(Box::new(entry)),
        Some(_) if known.live.is_some() => Decision::Refuse,
        Some(mut entry) => {
            if entry.status == Status::Running {
                entry.mark_interrupted(known.gone);
            }
            let mut earlier = std::mem::take(&mut entry.earlier);
            earlier.push(entry.as_attempt());
            Decision::Run {
                attempt: entry.attempt + 1,
                earlier,
            }
        }
    }
}

/// `^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`: a job id becomes a file name.
pub fn is_valid_job_id(id: &str) -> bool {
    let mut bytes = id.bytes();
    id.len() <= 128
        && matches!(bytes.next(), Some(b) if b.is_ascii_alphanumeric())
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

pub fn now() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The format of the entries this jobenv writes. Format 1: the entries before formats were
/// numbered (no `format` field), read as they were meant. Format 2 adds the field and nothing
/// else. A change that an older jobenv would misread (a new status, a field that changes what a
/// decision means) takes the next number; adding a field an older jobenv may ignore does not.
pub const FORMAT: u32 = 2;

fn first_format() -> u32 {
    1
}

/// Parses the entry read from the file of `job_id` (`shown`: its path as messages show it): its
/// `job_id` must be a valid id and its file's name, and its format one this jobenv reads.
pub(crate) fn parse(job_id: &str, shown: &str, bytes: &[u8]) -> Result<Entry, ReadError> {
    let corrupt = |why: String| ReadError::Corrupt {
        shown: shown.to_owned(),
        why,
    };
    // The format first: a newer entry is not parsed as this one, whatever its fields say.
    #[derive(serde::Deserialize)]
    struct Format {
        #[serde(default = "first_format")]
        format: u32,
    }
    if let Ok(Format { format }) = serde_json::from_slice::<Format>(bytes) {
        if format > FORMAT {
            let job_id = Some(job_id)
                .filter(|id| is_valid_job_id(id))
                .unwrap_or("(unnamed)")
                .to_owned();
            return Err(ReadError::Newer {
                job_id,
                format,
                known: FORMAT,
            });
        }
    }
    // serde's message may quote the file's text: escaped, it cannot start a line of its own.
    let entry: Entry = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string().escape_debug().to_string()))?;
    if !is_valid_job_id(&entry.job_id) || job_id != entry.job_id {
        return Err(corrupt("its job_id is not its file name".into()));
    }
    // What messages quote of an entry has the grammar jobenv wrote it in: a forged entry cannot
    // put a line of its own, or anything else, into a log.
    let time = |t: &str| humantime::parse_rfc3339(t).is_ok();
    let names = crate::input::names::VERBS.contains(&entry.verb.as_str())
        && crate::input::names::is_valid_attribute(&entry.attribute)
        && crate::input::names::is_valid_namespace(&entry.namespace);
    let times = time(&entry.started_at)
        && entry.finished_at.as_deref().is_none_or(time)
        && entry
            .earlier
            .iter()
            .all(|a| time(&a.started_at) && a.finished_at.as_deref().is_none_or(time));
    if !names || !times {
        return Err(corrupt(
            "its verb, attribute, namespace or times are not as jobenv writes them".into(),
        ));
    }
    Ok(entry)
}
