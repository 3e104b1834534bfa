//! How a job ended: one [`Status`] and one [`Ending`], for the exit code, the job log,
//! `result.json`, the journal and progress events alike.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{EXIT_INTERNAL, Error};
use crate::events::{End, Level, Progress};
use crate::run::Outcome;

/// How a job stands or ended, one spelling for result.json, the journal and the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Only in the journal, while the program runs.
    Running,
    Succeeded,
    Failed,
    Canceled,
    TimedOut,
    /// Refused before anything ran (configuration or input error, exit 2).
    Rejected,
}

impl Status {
    /// Every status but `running`: how a job can end.
    pub const ENDED: [Status; 5] = [
        Status::Succeeded,
        Status::Failed,
        Status::Canceled,
        Status::TimedOut,
        Status::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Canceled => "canceled",
            Status::TimedOut => "timed_out",
            Status::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an attempt ended as it did, beyond its status (`reason` in the journal and
/// `result.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Stopped without a result of its own ([`InterruptedBy`] says why): not a result, and a
    /// retry of the job is safe.
    Interrupted,
    /// The program ran but its end could not be recorded: never run again by accident, never
    /// replayed as a success either.
    ResultUnknown,
}

/// What stopped an interrupted attempt (`interrupted_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptedBy {
    /// Its jobenv died (found by the next run of the job id, or `recover`).
    JobenvGone,
    /// The worker that started its jobenv died.
    WorkerLost,
    /// The node stopped (`drain`).
    NodeStopped,
    /// Cluster mode: its lease on the shared journal was not renewed in time. Its holder
    /// stopped its program before the lease could expire, or (seen by the node that took the
    /// expired lease over) its node is gone or cut off.
    LeaseLost,
}

/// How a run ended: what jobenv exits with and what every record of the job says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub status: Status,
    pub exit_code: i32,
    /// One line per problem of a rejected job or of jobenv's own failure; never a value.
    pub errors: Vec<String>,
    /// Set when the attempt was stopped without a result of its own (a lost worker, a node that
    /// stopped): it is not a result, and a retry of the job is safe.
    pub interrupted_by: Option<InterruptedBy>,
}

impl Ending {
    /// The job was refused before its program ran.
    pub fn rejected(error: &Error) -> Self {
        Ending {
            status: Status::Rejected,
            exit_code: error.exit_code(),
            errors: lines(error),
            interrupted_by: None,
        }
    }

    /// jobenv itself failed after validation (exit 125).
    pub fn failed(error: &Error) -> Self {
        Ending {
            status: Status::Failed,
            exit_code: EXIT_INTERNAL,
            errors: lines(error),
            interrupted_by: None,
        }
    }
}

/// The table of how a run ended: its status, what interrupted it (then its one error line), and
/// its exit code ([`Outcome::exit_code`]); what front-ends see follows from the status and the
/// interruption ([`Ending::progress`]), the journal's and `result.json`'s `reason` from the interruption
/// ([`Ending::reason`]).
impl From<Outcome> for Ending {
    fn from(outcome: Outcome) -> Self {
        let (status, interrupted_by) = match outcome {
            Outcome::Exited(0) => (Status::Succeeded, None),
            Outcome::Exited(_) | Outcome::Killed(_) => (Status::Failed, None),
            Outcome::Cancelled(_) => (Status::Canceled, None),
            Outcome::TimedOut => (Status::TimedOut, None),
            Outcome::WorkerLost => (Status::Failed, Some(InterruptedBy::WorkerLost)),
            Outcome::NodeStopped(_) => (Status::Failed, Some(InterruptedBy::NodeStopped)),
            Outcome::LeaseLost => (Status::Failed, Some(InterruptedBy::LeaseLost)),
        };
        let errors = who(interrupted_by)
            .map(|who| format!("{who}: the program tree was stopped; the job did not complete and a retry is safe"))
            .into_iter()
            .collect();
        Ending {
            status,
            exit_code: outcome.exit_code(),
            errors,
            interrupted_by,
        }
    }
}

/// Who interrupted an attempt, as its one error line says it.
fn who(interrupted_by: Option<InterruptedBy>) -> Option<&'static str> {
    match interrupted_by {
        Some(InterruptedBy::WorkerLost) => Some("the Windmill worker that started this job is gone"),
        Some(InterruptedBy::NodeStopped) => Some("the node stopped"),
        Some(InterruptedBy::LeaseLost) => {
            Some("this node could not renew the job's lease on the cluster journal in time")
        }
        Some(InterruptedBy::JobenvGone) | None => None,
    }
}

impl Ending {
    /// The job ended before its program started (a cancel, a lost worker, a node that drains):
    /// as [`Ending::from`] the outcome, but its line says that the program never started.
    pub fn not_started(outcome: Outcome) -> Self {
        let mut ending = Ending::from(outcome);
        ending.errors = who(ending.interrupted_by)
            .map(|who| format!("{who}: the program was not started; a retry is safe"))
            .into_iter()
            .collect();
        ending
    }

    /// `interrupted` when the attempt has no result of its own.
    pub fn reason(&self) -> Option<Reason> {
        self.interrupted_by.map(|_| Reason::Interrupted)
    }

    /// How front-ends see a job that ended so: the terminal status of jobenv's own events, and
    /// the end as every format says it ([`End`]). One row per ending (the table of
    /// docs/front-ends/events.md, "DD-0012"; DD-0012's status column is `dd0012::ended` of this
    /// row): a DD-0012 row stays in its kind's set of statuses, and its last message says what
    /// the status cannot (canceled, timed out, rejected).
    pub fn progress(&self, verb: &str) -> (Progress, End) {
        use Level::{Error, Info, Warning};
        let destroy = verb == "destroy";
        let (progress, interrupted, level, said) = match (self.status, self.interrupted_by) {
            (Status::Succeeded, _) if destroy => (Progress::Destroyed, false, Info, "succeeded"),
            // A deployments row takes apply and destroy only (`EVENTS_KIND`): a deploy that
            // succeeded leaves its deployment running.
            (Status::Succeeded, _) => (Progress::Succeeded, false, Info, "succeeded"),
            // Stopped without a result of its own (a lost worker, a node that stopped): someone
            // else stopped it, and a retry is safe.
            (Status::Failed, Some(_)) => (Progress::Failed, true, Warning, "was interrupted"),
            (Status::Failed, None) => (Progress::Failed, false, Error, "failed"),
            // A job refused before it ran has failed for its watchers.
            (Status::Rejected, _) => (Progress::Failed, false, Error, "was rejected"),
            (Status::Canceled, _) => (Progress::Canceled, false, Warning, "was canceled"),
            (Status::TimedOut, _) => (Progress::TimedOut, false, Warning, "timed out"),
            // A job is never `Running` when it ends.
            (Status::Running, _) => (Progress::Failed, false, Error, "failed"),
        };
        (
            progress,
            End {
                exit_code: self.exit_code,
                interrupted,
                level,
                said,
            },
        )
    }
}

fn lines(error: &Error) -> Vec<String> {
    error.to_string().lines().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_display_agree() {
        for status in [
            Status::Running,
            Status::Succeeded,
            Status::Failed,
            Status::Canceled,
            Status::TimedOut,
            Status::Rejected,
        ] {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
    }

    #[test]
    fn every_ending_has_one_status_per_format() {
        use crate::events::dd0012::{self, DeploymentStatus as D, JobStatus as J};
        let ending = |status, interrupted_by| Ending {
            status,
            exit_code: 9,
            errors: Vec::new(),
            interrupted_by,
        };
        let table = [
            (
                ending(Status::Succeeded, None),
                "apply",
                Progress::Succeeded,
                J::Succeeded,
                D::Running,
                "succeeded",
            ),
            (
                ending(Status::Succeeded, None),
                "destroy",
                Progress::Destroyed,
                J::Destroyed,
                D::Destroyed,
                "succeeded",
            ),
            (
                ending(Status::Failed, None),
                "destroy",
                Progress::Failed,
                J::Failed,
                D::Failed,
                "failed",
            ),
            (
                ending(Status::Rejected, None),
                "apply",
                Progress::Failed,
                J::Failed,
                D::Failed,
                "was rejected",
            ),
            (
                ending(Status::Canceled, None),
                "apply",
                Progress::Canceled,
                J::Failed,
                D::Stopped,
                "was canceled",
            ),
            (
                ending(Status::TimedOut, None),
                "apply",
                Progress::TimedOut,
                J::Failed,
                D::Failed,
                "timed out",
            ),
            (
                ending(Status::Failed, Some(InterruptedBy::WorkerLost)),
                "apply",
                Progress::Failed,
                J::Failed,
                D::Stopped,
                "was interrupted",
            ),
            (
                ending(Status::Failed, Some(InterruptedBy::NodeStopped)),
                "destroy",
                Progress::Failed,
                J::Failed,
                D::Stopped,
                "was interrupted",
            ),
            (
                ending(Status::Failed, Some(InterruptedBy::LeaseLost)),
                "apply",
                Progress::Failed,
                J::Failed,
                D::Stopped,
                "was interrupted",
            ),
        ];
        for (ending, verb, progress, job, deployment, said) in table {
            let (shown, end) = ending.progress(verb);
            let (end_job, end_deployment) = dd0012::ended(shown, &end);
            assert_eq!(
                (shown, end_job, end_deployment, end.said, end.exit_code),
                (progress, job, deployment, said, 9),
                "{ending:?} {verb}"
            );
        }
        // Canceled and timed out are both `failed` on a jobs row: the message tells them apart.
        let (canceled_progress, canceled) = ending(Status::Canceled, None).progress("apply");
        let (timed_out_progress, timed_out) = ending(Status::TimedOut, None).progress("apply");
        assert_eq!(
            dd0012::ended(canceled_progress, &canceled).0,
            dd0012::ended(timed_out_progress, &timed_out).0
        );
        assert_ne!(canceled.said, timed_out.said);
    }

    #[test]
    fn outcomes_become_endings() {
        let ending = |o| Ending::from(o);
        assert_eq!(
            (ending(Outcome::Exited(0)).status, ending(Outcome::Exited(0)).exit_code),
            (Status::Succeeded, 0)
        );
        assert_eq!(
            (ending(Outcome::Exited(3)).status, ending(Outcome::Exited(3)).exit_code),
            (Status::Failed, 3)
        );
        assert_eq!(
            (ending(Outcome::Killed(9)).status, ending(Outcome::Killed(9)).exit_code),
            (Status::Failed, 137)
        );
        assert_eq!(
            (
                ending(Outcome::Cancelled(2)).status,
                ending(Outcome::Cancelled(2)).exit_code
            ),
            (Status::Canceled, 130)
        );
        assert_eq!(
            (ending(Outcome::TimedOut).status, ending(Outcome::TimedOut).exit_code),
            (Status::TimedOut, 124)
        );
        let lost = ending(Outcome::LeaseLost);
        assert_eq!(
            (lost.status, lost.exit_code, lost.interrupted_by),
            (Status::Failed, 75, Some(InterruptedBy::LeaseLost))
        );
        // Stopped, or never started: the same ending, each line saying which.
        let stopped = Ending::from(Outcome::NodeStopped(15));
        let not_started = Ending::not_started(Outcome::NodeStopped(15));
        assert_eq!(
            (not_started.status, not_started.exit_code, not_started.interrupted_by),
            (stopped.status, stopped.exit_code, stopped.interrupted_by)
        );
        assert_eq!(
            stopped.errors,
            ["the node stopped: the program tree was stopped; the job did not complete and a retry is safe"]
        );
        assert_eq!(
            not_started.errors,
            ["the node stopped: the program was not started; a retry is safe"]
        );
    }
}
