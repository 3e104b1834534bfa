//! DD-0012's notifications (`EVENTS_FORMAT=dd-0012`; docs/front-ends/events.md, "DD-0012";
//! `schemas/event-dd-0012.schema.json`): a front-end keeps a row per job or deployment, with a
//! secret of its own, and takes its updates as `POST <base>/<jobs|deployments>/<row>/notifications`
//! with `{"status": ..., "log": {"level": ..., "message": ...}}`. Every notification carries
//! the row's status, always one of its kind's set; lines of one level go in one message.
//!
//! The address is made here, from parts that were parsed: the node's base, a [`RowKind`] and a
//! row number. Nothing a payload writes is ever put into a URL as text.

use reqwest::Url;
use schemars::JsonSchema;
use serde::Serialize;

use super::model::{End, Envelope, Item, Level, Progress};

/// The two kinds of DD-0012 rows (`EVENTS_KIND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    Jobs,
    Deployments,
}

impl RowKind {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "jobs" => Some(RowKind::Jobs),
            "deployments" => Some(RowKind::Deployments),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::Jobs => "jobs",
            RowKind::Deployments => "deployments",
        }
    }

    /// The status a row has while the job is at `progress` (preparing or running): a
    /// deployments row is `preparing` until the job's end says what became of it.
    fn standing(self, progress: Progress) -> RowStatus {
        match (self, progress) {
            (RowKind::Jobs, Progress::Running) => RowStatus::Job(JobStatus::Running),
            (RowKind::Jobs, _) => RowStatus::Job(JobStatus::Preparing),
            (RowKind::Deployments, _) => RowStatus::Deployment(DeploymentStatus::Preparing),
        }
    }

    /// The status a change to `progress` gives the row, unless it has it already.
    fn changed(self, progress: Progress) -> Option<RowStatus> {
        (self == RowKind::Jobs || progress == Progress::Preparing).then(|| self.standing(progress))
    }

    fn ended(self, progress: Progress, end: &End) -> RowStatus {
        let (job, deployment) = ended(progress, end);
        match self {
            RowKind::Jobs => RowStatus::Job(job),
            RowKind::Deployments => RowStatus::Deployment(deployment),
        }
    }
}

/// DD-0012's column of the outcome table (`record::ending`): the status a job that ended at
/// `progress` gives a jobs row and a deployments row. A row stays in its kind's set of
/// statuses: a deploy that succeeded leaves its deployment running; a job someone else stopped
/// (canceled, interrupted) leaves it stopped; anything else that did not succeed is `failed`.
pub fn ended(progress: Progress, end: &End) -> (JobStatus, DeploymentStatus) {
    use DeploymentStatus as D;
    use JobStatus as J;
    match progress {
        Progress::Destroyed => (J::Destroyed, D::Destroyed),
        Progress::Succeeded => (J::Succeeded, D::Running),
        Progress::Canceled => (J::Failed, D::Stopped),
        Progress::Failed if end.interrupted => (J::Failed, D::Stopped),
        Progress::Failed | Progress::TimedOut | Progress::Preparing | Progress::Running => (J::Failed, D::Failed),
    }
}

/// The statuses of a jobs row.
// Every status DD-0012 defines is in the schema; jobenv itself never sends the front-end's own.
#[expect(
    dead_code,
    reason = "the schema lists DD-0012's statuses that only a front-end writes"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Pending,
    Preparing,
    Queued,
    Running,
    Succeeded,
    Failed,
    Destroyed,
}

/// The statuses of a deployments row.
#[expect(
    dead_code,
    reason = "the schema lists DD-0012's statuses that only a front-end writes"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentStatus {
    Pending,
    Preparing,
    Running,
    Stopped,
    Destroyed,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
enum RowStatus {
    Job(JobStatus),
    Deployment(DeploymentStatus),
}

/// The most digits of a row number: every serial a front-end's database hands out in practice,
/// and a number every JSON parser reads exactly.
pub const ROW_ID_DIGITS: usize = 18;

/// `EVENTS_ROW_ID`: a positive decimal integer of at most [`ROW_ID_DIGITS`] digits, with no
/// sign, no leading zero, nothing else (`^[1-9][0-9]{0,17}$`).
pub fn row_id(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let digits = !bytes.is_empty() && bytes.len() <= ROW_ID_DIGITS && bytes.iter().all(u8::is_ascii_digit);
    if !digits || bytes[0] == b'0' {
        return None;
    }
    text.parse().ok()
}

/// `<base>/<kind>/<row>/notifications`, a trailing `/` of the base aside. `base` is the node's
/// (an http(s) URL with a host, checked before).
pub fn notifications_url(base: &Url, kind: RowKind, row: u64) -> Url {
    let mut url = base.clone();
    url.path_segments_mut()
        .expect("an http(s) URL with a host has a path")
        .pop_if_empty()
        .extend([kind.as_str(), &row.to_string(), "notifications"]);
    url
}

/// One notification: the row's status, and some of the job's log.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "{S}Notification")]
pub struct Notification<S> {
    pub status: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<Log>,
}

#[derive(Serialize, JsonSchema)]
pub struct Log {
    pub level: Level,
    /// Lines of one level, joined by `\n`: at most 64 lines of at most 4096 bytes each, 64 KiB
    /// in all. The last message of a job says how it ended.
    pub message: String,
}

/// What a DD-0012 back-end takes: a notification of a jobs row or of a deployments row.
#[derive(JsonSchema)]
#[schemars(
    title = "DD-0012 notification",
    description = "The body of POST <EVENTS_URL>/<EVENTS_KIND>/<EVENTS_ROW_ID>/notifications (EVENTS_FORMAT=dd-0012)"
)]
#[serde(untagged)]
#[allow(dead_code)] // the schema's type only: what is sent is a `Notification`
pub enum AnyNotification {
    Job(Notification<JobStatus>),
    Deployment(Notification<DeploymentStatus>),
}

pub(super) fn encode(kind: RowKind, event: &Envelope) -> Option<Vec<u8>> {
    let (status, log) = match event.item {
        Item::Status { status, .. } => (kind.changed(*status)?, None),
        Item::End { status, end, .. } => (
            kind.ended(*status, end),
            Some(Log {
                level: end.level,
                message: last_message(&event.ids.verb, end, event.dropped),
            }),
        ),
        Item::Logs { lines } => {
            let first = lines.first()?;
            let message = lines
                .iter()
                .map(|line| line.line.as_str())
                .collect::<Vec<_>>()
                .join("\n");
            (
                kind.standing(first.source_status),
                Some(Log {
                    level: first.level,
                    message,
                }),
            )
        }
    };
    Some(serde_json::to_vec(&Notification { status, log }).expect("a notification serializes"))
}

/// `apply was canceled with exit code 143`, as jobenv's own last line says it, and what was
/// lost on the way.
fn last_message(verb: &str, end: &End, dropped: u64) -> String {
    let mut message = format!("{verb} {} with exit code {}", end.said, end.exit_code);
    if dropped > 0 {
        message.push_str(&format!(" ({dropped} log line(s) were dropped)"));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::super::Ids;
    use super::super::model::Line;
    use super::*;
    use serde_json::{Value, json};
    use std::time::SystemTime;

    #[test]
    fn row_ids_are_plain_positive_integers() {
        assert_eq!(row_id("1"), Some(1));
        assert_eq!(row_id("42"), Some(42));
        assert_eq!(row_id(&"9".repeat(ROW_ID_DIGITS)), Some(999_999_999_999_999_999));
        for bad in [
            "",
            "0",
            "007",
            "+7",
            "-7",
            " 7",
            "7 ",
            "7.0",
            "1e3",
            "0x10",
            "٣",
            "7/../8",
            "7%2F8",
            "7/",
            "/7",
            "..",
            "7?x",
            "7#x",
            "99999999999999999999999999",
            "1234567890123456789",
        ] {
            assert_eq!(row_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_address_is_made_of_the_parts_only() {
        let url = |base: &str, kind, row| notifications_url(&Url::parse(base).unwrap(), kind, row).to_string();
        assert_eq!(
            url("https://web.example/api", RowKind::Jobs, 7),
            "https://web.example/api/jobs/7/notifications"
        );
        assert_eq!(
            url("https://web.example/api/", RowKind::Deployments, 12),
            "https://web.example/api/deployments/12/notifications"
        );
        assert_eq!(
            url("http://127.0.0.1:8000", RowKind::Jobs, 1),
            "http://127.0.0.1:8000/jobs/1/notifications"
        );
        // Whatever the row, host and port stay the base's.
        let base = Url::parse("https://web.example:8443/api").unwrap();
        for row in [1, 42, 999_999_999_999_999_999] {
            let made = notifications_url(&base, RowKind::Deployments, row);
            assert_eq!(
                (made.host_str(), made.port(), made.query(), made.fragment()),
                (Some("web.example"), Some(8443), None, None)
            );
            assert!(made.path().starts_with("/api/deployments/"), "{made}");
        }
    }

    fn notification(kind: RowKind, item: &Item, dropped: u64) -> Option<Value> {
        let ids = Ids {
            deployment: "ns".into(),
            build: None,
            verb: "apply".into(),
        };
        encode(
            kind,
            &Envelope {
                ids: &ids,
                seq: 1,
                dropped,
                item,
            },
        )
        .map(|body| serde_json::from_slice(&body).unwrap())
    }

    #[test]
    fn statuses_and_lines_become_notifications() {
        let at = SystemTime::UNIX_EPOCH;
        let status = |status| Item::Status { status, at };
        assert_eq!(
            notification(RowKind::Jobs, &status(Progress::Preparing), 0),
            Some(json!({"status": "preparing"}))
        );
        assert_eq!(
            notification(RowKind::Jobs, &status(Progress::Running), 0),
            Some(json!({"status": "running"}))
        );
        assert_eq!(
            notification(RowKind::Deployments, &status(Progress::Preparing), 0),
            Some(json!({"status": "preparing"}))
        );
        assert_eq!(
            notification(RowKind::Deployments, &status(Progress::Running), 0),
            None,
            "a deployment stays preparing"
        );

        let line = |level, text: &str| Line {
            level,
            line: text.into(),
            source_status: Progress::Running,
            at,
        };
        let logs = Item::Logs {
            lines: vec![line(Level::Warning, "one"), line(Level::Warning, "two")],
        };
        assert_eq!(
            notification(RowKind::Jobs, &logs, 0),
            Some(json!({"status": "running", "log": {"level": "warning", "message": "one\ntwo"}}))
        );
        assert_eq!(
            notification(RowKind::Deployments, &logs, 0).unwrap()["status"],
            "preparing"
        );

        let end = End {
            exit_code: 143,
            interrupted: false,
            level: Level::Warning,
            said: "was canceled",
        };
        let item = Item::End {
            status: Progress::Canceled,
            end,
            at,
        };
        assert_eq!(
            notification(RowKind::Jobs, &item, 0),
            Some(
                json!({"status": "failed", "log": {"level": "warning", "message": "apply was canceled with exit code 143"}})
            )
        );
        assert_eq!(
            notification(RowKind::Deployments, &item, 3),
            Some(
                json!({"status": "stopped", "log": {"level": "warning", "message": "apply was canceled with exit code 143 (3 log line(s) were dropped)"}})
            )
        );
    }
}
