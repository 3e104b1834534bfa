//! What a progress event is: the statuses, the log levels and the JSON that goes on the wire.
//!
//! The schema (one JSON object per POST):
//!
//! ```text
//! {"deployment": "<NAMESPACE>", "build": "<BUILD_ID or job id>" | null, "verb": "apply",
//!  "seq": 1, "timestamp": "2026-05-04T10:11:12.345Z", "dropped": 0,
//!  "type": "status", "status": "running", "exit_code": 0}            // exit_code: terminal only
//! {..., "type": "logs", "lines": [{"level": "info", "line": "...", "source_status": "running"}]}
//! ```
//!
//! `dropped` is the running total of log lines this job has lost so far (dropped from the
//! queue or given up after retries), so a receiver sees every loss in the next event it gets.

use crate::status::JobStatus;
use std::time::{Instant, SystemTime};

use serde::Serialize;

/// Where a job is. `preparing` covers validation and nix-shell instantiating the dev shell;
/// `running` starts when the deployment program itself is exec'd; the rest are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Preparing,
    Running,
    Succeeded,
    Failed,
    Canceled,
    TimedOut,
    /// A `destroy` that succeeded: the deployment is gone.
    Destroyed,
}

impl Status {
    pub fn is_terminal(self) -> bool {
        !matches!(self, Status::Preparing | Status::Running)
    }

    /// The terminal status for a job that ended with `ended`.
    pub fn terminal(ended: JobStatus, verb: &str) -> Status {
        match ended {
            JobStatus::Succeeded if verb == "destroy" => Status::Destroyed,
            JobStatus::Succeeded => Status::Succeeded,
            JobStatus::Canceled => Status::Canceled,
            JobStatus::TimedOut => Status::TimedOut,
            // A job refused before it ran has failed for its watchers. (A job is never
            // `Running` when it ends.)
            JobStatus::Failed | JobStatus::Rejected | JobStatus::Running => Status::Failed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// The program's stdout.
    Info,
    /// The program's stderr.
    Warning,
    /// jobenv's own failures (a rejected job, jobenv failing to run the program).
    Error,
}

/// One line of redacted output (or one of jobenv's error lines).
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub level: Level,
    pub line: String,
    /// The job's status when jobenv read the line.
    pub source_status: Status,
    /// When jobenv read the line: the timestamp of the batch that starts with it.
    #[serde(skip)]
    pub at: SystemTime,
    /// The same moment on the monotonic clock, for batching.
    #[serde(skip)]
    pub since: Instant,
}

/// What the event names; the same in every event of a job.
#[derive(Debug, Clone)]
pub struct Ids {
    pub deployment: String,
    pub build: Option<String>,
    pub verb: String,
}

#[derive(Debug, Clone)]
pub struct StatusChange {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub at: SystemTime,
}

#[derive(Debug)]
pub enum Item {
    Status(StatusChange),
    Logs(Vec<Line>),
}

#[derive(Serialize)]
struct Envelope<'a> {
    deployment: &'a str,
    build: Option<&'a str>,
    verb: &'a str,
    seq: u64,
    timestamp: String,
    dropped: u64,
    #[serde(flatten)]
    body: Body<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Body<'a> {
    Status {
        status: Status,
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    Logs {
        lines: &'a [Line],
    },
}

/// The JSON body of one event.
pub fn encode(ids: &Ids, seq: u64, dropped: u64, item: &Item) -> Vec<u8> {
    let (at, body) = match item {
        Item::Status(change) => (change.at, Body::Status { status: change.status, exit_code: change.exit_code }),
        Item::Logs(lines) => (lines.first().map_or_else(SystemTime::now, |l| l.at), Body::Logs { lines }),
    };
    let envelope = Envelope {
        deployment: &ids.deployment,
        build: ids.build.as_deref(),
        verb: &ids.verb,
        seq,
        timestamp: humantime::format_rfc3339_millis(at).to_string(),
        dropped,
        body,
    };
    serde_json::to_vec(&envelope).expect("an event serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::time::Duration;

    fn ids() -> Ids {
        Ids { deployment: "ns".into(), build: Some("b-1".into()), verb: "apply".into() }
    }

    #[test]
    fn a_status_event() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let item = Item::Status(StatusChange { status: Status::TimedOut, exit_code: Some(124), at });
        let event: Value = serde_json::from_slice(&encode(&ids(), 3, 5, &item)).unwrap();
        assert_eq!(
            event,
            json!({"deployment": "ns", "build": "b-1", "verb": "apply", "seq": 3, "timestamp": "2023-11-14T22:13:20.123Z",
                   "dropped": 5, "type": "status", "status": "timed_out", "exit_code": 124})
        );
    }

    #[test]
    fn a_logs_event_without_a_build() {
        let at = SystemTime::UNIX_EPOCH;
        let line = |level, text: &str| Line { level, line: text.into(), source_status: Status::Running, at, since: Instant::now() };
        let item = Item::Logs(vec![line(Level::Info, "out"), line(Level::Warning, "err")]);
        let ids = Ids { build: None, ..ids() };
        let event: Value = serde_json::from_slice(&encode(&ids, 1, 0, &item)).unwrap();
        assert_eq!(
            event,
            json!({"deployment": "ns", "build": null, "verb": "apply", "seq": 1, "timestamp": "1970-01-01T00:00:00.000Z", "dropped": 0,
                   "type": "logs", "lines": [{"level": "info", "line": "out", "source_status": "running"},
                                             {"level": "warning", "line": "err", "source_status": "running"}]})
        );
    }

    #[test]
    fn terminal_statuses() {
        assert_eq!(Status::terminal(JobStatus::Succeeded, "apply"), Status::Succeeded);
        assert_eq!(Status::terminal(JobStatus::Succeeded, "destroy"), Status::Destroyed);
        assert_eq!(Status::terminal(JobStatus::Failed, "destroy"), Status::Failed);
        assert_eq!(Status::terminal(JobStatus::Rejected, "apply"), Status::Failed);
        assert_eq!(Status::terminal(JobStatus::Canceled, "apply"), Status::Canceled);
        assert_eq!(Status::terminal(JobStatus::TimedOut, "apply"), Status::TimedOut);
    }
}
