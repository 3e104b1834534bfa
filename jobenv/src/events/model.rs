//! What a progress event is: the statuses, the log levels and the JSON that goes on the wire
//! (the schema is the README's, "Progress events"). `dropped` is the running total of log lines
//! this job has lost so far, so a receiver sees every loss in the next event it gets.

use std::time::SystemTime;

use serde::Serialize;

use super::Ids;

/// Where a job is, as front-ends see it. `preparing` covers validation and nix-shell
/// instantiating the dev shell; `running` starts when the deployment program itself is exec'd;
/// the rest are terminal (`destroyed` is a `destroy` that succeeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    Preparing,
    Running,
    Succeeded,
    Failed,
    Canceled,
    TimedOut,
    Destroyed,
}

impl Progress {
    pub fn is_terminal(self) -> bool {
        !matches!(self, Progress::Preparing | Progress::Running)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,    // the program's stdout
    Warning, // the program's stderr
    Error,   // jobenv's own failures (a rejected job, jobenv failing to run the program)
}

/// One line of redacted output (or one of jobenv's error lines).
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub level: Level,
    pub line: String,
    /// The job's status when jobenv read the line.
    pub source_status: Progress,
    /// When jobenv read the line: the timestamp of the batch that starts with it.
    #[serde(skip)]
    pub at: SystemTime,
}

/// What one event carries: its `type` and the fields of that type.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Item {
    Status {
        status: Progress,
        /// On terminal statuses only.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// When the status changed.
        #[serde(skip)]
        at: SystemTime,
    },
    Logs {
        lines: Vec<Line>,
    },
}

#[derive(Serialize)]
struct Envelope<'a> {
    #[serde(flatten)]
    ids: &'a Ids,
    seq: u64,
    timestamp: String,
    dropped: u64,
    #[serde(flatten)]
    item: &'a Item,
}

/// The JSON body of one event.
pub fn encode(ids: &Ids, seq: u64, dropped: u64, item: &Item) -> Vec<u8> {
    let at = match item {
        Item::Status { at, .. } => *at,
        Item::Logs { lines } => lines.first().map_or_else(SystemTime::now, |l| l.at),
    };
    let timestamp = humantime::format_rfc3339_millis(at).to_string();
    serde_json::to_vec(&Envelope { ids, seq, timestamp, dropped, item }).expect("an event serializes")
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
        let item = Item::Status { status: Progress::TimedOut, exit_code: Some(124), at };
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
        let line = |level, text: &str| Line { level, line: text.into(), source_status: Progress::Running, at };
        let item = Item::Logs { lines: vec![line(Level::Info, "out"), line(Level::Warning, "err")] };
        let ids = Ids { build: None, ..ids() };
        let event: Value = serde_json::from_slice(&encode(&ids, 1, 0, &item)).unwrap();
        assert_eq!(
            event,
            json!({"deployment": "ns", "build": null, "verb": "apply", "seq": 1, "timestamp": "1970-01-01T00:00:00.000Z", "dropped": 0,
                   "type": "logs", "lines": [{"level": "info", "line": "out", "source_status": "running"},
                                             {"level": "warning", "line": "err", "source_status": "running"}]})
        );
    }
}
