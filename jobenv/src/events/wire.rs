//! The wire formats of progress events and the one place that chooses between them: the sender
//! hands every item to [`encode`] and posts what comes back; it never looks at a format itself.
//! The formats: [`super::envelope`] (jobenv's own, the default) and [`super::dd0012`].

use super::dd0012::{self, RowKind};
use super::model::{Envelope, Line};

/// The wire format of a job's events, chosen by the node (`EVENTS_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// jobenv's own envelope, to the node's `EVENTS_URL` (docs/front-ends/events.md).
    Jobenv,
    /// DD-0012's notifications, to the row the payload names.
    Dd0012(RowKind),
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
