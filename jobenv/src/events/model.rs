//! What a progress event is, whatever the wire: the statuses, the log levels, what one event
//! carries ([`Item`]), and [`encode`], the one place where a wire format is chosen. The sender
//! hands every item to [`encode`] and posts what comes back; it never looks at a format itself.
//! The formats: [`super::envelope`] (jobenv's own, the default) and [`super::dd0012`].

use std::time::SystemTime;

use schemars::JsonSchema;
use serde::Serialize;

use super::Ids;
use super::dd0012::{self, DeploymentStatus, JobStatus, RowKind};

/// Where a job is, as front-ends see it. `preparing` covers validation and nix-shell
/// instantiating the dev shell; `running` starts when the deployment program itself is exec'd;
/// the rest are terminal (`destroyed` is a `destroy` that succeeded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
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

/// `info`: the program's stdout; `warning`: its stderr; `error`: jobenv's own failures (a
/// rejected job, jobenv failing to run the program).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Info,
    Warning,
    Error,
}

/// One line of redacted output (or one of jobenv's error lines).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Line {
    pub level: Level,
    /// At most 4096 bytes of UTF-8; a longer line is cut and ends in ` [truncated]`.
    pub line: String,
    /// The job's status when jobenv read the line.
    pub source_status: Progress,
    /// When jobenv read the line: the timestamp of the batch that starts with it.
    #[serde(skip)]
    pub at: SystemTime,
}

/// How a job ended, in the words of every wire format: one row of the outcome table in
/// `record::ending`. jobenv's own events say the terminal [`Progress`] and the exit code; a
/// DD-0012 row says the status of its kind, and its last log message says how the job ended
/// (a canceled or timed-out job is `failed` on a jobs row: the message says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    pub exit_code: i32,
    pub job: JobStatus,
    pub deployment: DeploymentStatus,
    /// The level and the words of the last message: `<verb> <said> with exit code <code>`.
    pub level: Level,
    pub said: &'static str,
}

/// What one event carries, in the order things happened.
#[derive(Debug)]
pub enum Item {
    /// `preparing` or `running`.
    Status {
        status: Progress,
        at: SystemTime,
    },
    /// The terminal status.
    End {
        status: Progress,
        end: End,
        at: SystemTime,
    },
    Logs {
        lines: Vec<Line>,
    },
}

impl Item {
    pub fn is_end(&self) -> bool {
        matches!(self, Item::End { .. })
    }

    /// When the status changed, or when the first line was read.
    pub fn at(&self) -> SystemTime {
        match self {
            Item::Status { at, .. } | Item::End { at, .. } => *at,
            Item::Logs { lines } => lines.first().map_or_else(SystemTime::now, |l| l.at),
        }
    }
}

/// The wire format of a job's events, chosen by the node (`EVENTS_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// jobenv's own envelope, to the node's `EVENTS_URL` (docs/front-ends/events.md).
    Jobenv,
    /// DD-0012's notifications, to the row the payload names.
    Dd0012(RowKind),
}

/// What one event of a job says: its number, the running total of lines lost, and the item.
pub struct Envelope<'a> {
    pub ids: &'a Ids,
    pub seq: u64,
    pub dropped: u64,
    pub item: &'a Item,
}

/// The JSON body of one event, or `None` when this format has nothing to say for the item (a
/// deployments row stays `preparing` while the program runs: jobenv's `running` changes
/// nothing there).
pub fn encode(wire: Wire, event: &Envelope) -> Option<Vec<u8>> {
    match wire {
        Wire::Jobenv => Some(super::envelope::encode(event)),
        Wire::Dd0012(kind) => dd0012::encode(kind, event),
    }
}

/// Whether `next` may go in the same event as `first`: a DD-0012 message has one level.
pub fn joins(wire: Wire, first: &Line, next: &Line) -> bool {
    match wire {
        Wire::Jobenv => true,
        Wire::Dd0012(_) => first.level == next.level,
    }
}
