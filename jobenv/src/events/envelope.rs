//! jobenv's own wire format (docs/front-ends/events.md; `schemas/event-jobenv.schema.json`):
//! one JSON object per event, naming the job, numbered, with the running total of lines lost,
//! and either a status or a batch of lines. `dropped` lets a receiver see every loss in the
//! next event it gets.

use schemars::JsonSchema;
use serde::Serialize;

use super::Ids;
use super::model::{Envelope, Item, Line, Progress};

/// One event on jobenv's wire.
#[derive(Serialize, JsonSchema)]
#[schemars(
    title = "fediversity-jobenv progress event",
    description = "One POST of jobenv's own events format (EVENTS_FORMAT=jobenv)"
)]
pub struct Event<'a> {
    #[serde(flatten)]
    pub ids: &'a Ids,
    /// 1, 2, 3, ... per job, in the order jobenv sent them; a retry resends the same number.
    #[schemars(range(min = 1))]
    pub seq: u64,
    /// RFC 3339 UTC with milliseconds: when the status changed, or when the first line of the
    /// batch was read.
    #[schemars(regex(pattern = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$"))]
    pub timestamp: String,
    /// The running total of this job's log lines lost so far.
    pub dropped: u64,
    #[serde(flatten)]
    pub body: Body<'a>,
}

#[derive(Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Body<'a> {
    /// A status change.
    Status {
        status: Progress,
        /// jobenv's exit code, on terminal statuses only.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
    },
    /// A batch of at most 64 lines and 64 KiB.
    Logs {
        #[schemars(length(min = 1, max = 64))]
        lines: &'a [Line],
    },
}

pub(super) fn encode(event: &Envelope) -> Vec<u8> {
    let body = match event.item {
        Item::Status { status, .. } => Body::Status {
            status: *status,
            exit_code: None,
        },
        Item::End { status, end, .. } => Body::Status {
            status: *status,
            exit_code: Some(end.exit_code),
        },
        Item::Logs { lines } => Body::Logs { lines },
    };
    let timestamp = humantime::format_rfc3339_millis(event.item.at()).to_string();
    let event = Event {
        ids: event.ids,
        seq: event.seq,
        timestamp,
        dropped: event.dropped,
        body,
    };
    serde_json::to_vec(&event).expect("an event serializes")
}

#[cfg(test)]
mod tests {
    use super::super::model::{End, Level};
    use super::*;
    use serde_json::{Value, json};
    use std::time::{Duration, SystemTime};

    fn ids() -> Ids {
        Ids {
            deployment: "ns".into(),
            build: Some("b-1".into()),
            verb: "apply".into(),
        }
    }

    fn encoded(ids: &Ids, seq: u64, dropped: u64, item: &Item) -> Value {
        serde_json::from_slice(&encode(&Envelope {
            ids,
            seq,
            dropped,
            item,
        }))
        .unwrap()
    }

    #[test]
    fn a_status_event() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let end = End {
            exit_code: 124,
            interrupted: false,
            level: Level::Warning,
            said: "timed out",
        };
        let item = Item::End {
            status: Progress::TimedOut,
            end,
            at,
        };
        assert_eq!(
            encoded(&ids(), 3, 5, &item),
            json!({"deployment": "ns", "build": "b-1", "verb": "apply", "seq": 3, "timestamp": "2023-11-14T22:13:20.123Z",
                   "dropped": 5, "type": "status", "status": "timed_out", "exit_code": 124})
        );
        let item = Item::Status {
            status: Progress::Running,
            at,
        };
        assert_eq!(
            encoded(&ids(), 2, 0, &item)["exit_code"],
            Value::Null,
            "only terminal statuses carry an exit code"
        );
    }

    #[test]
    fn a_logs_event_without_a_build() {
        let at = SystemTime::UNIX_EPOCH;
        let line = |level, text: &str| Line {
            level,
            line: text.into(),
            source_status: Progress::Running,
            at,
        };
        let item = Item::Logs {
            lines: vec![line(Level::Info, "out"), line(Level::Warning, "err")],
        };
        let ids = Ids { build: None, ..ids() };
        assert_eq!(
            encoded(&ids, 1, 0, &item),
            json!({"deployment": "ns", "build": null, "verb": "apply", "seq": 1, "timestamp": "1970-01-01T00:00:00.000Z", "dropped": 0,
                   "type": "logs", "lines": [{"level": "info", "line": "out", "source_status": "running"},
                                             {"level": "warning", "line": "err", "source_status": "running"}]})
        );
    }
}
