//! How a job stands or ended, one spelling for result.json, the journal and progress events.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Only in the journal, while the program runs.
    Running,
    Succeeded,
    Failed,
    Canceled,
    TimedOut,
    /// Refused before anything ran (configuration or input error, exit 2).
    Rejected,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
            JobStatus::Canceled => "canceled",
            JobStatus::TimedOut => "timed_out",
            JobStatus::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_and_display_agree() {
        for status in [JobStatus::Running, JobStatus::Succeeded, JobStatus::Failed, JobStatus::Canceled, JobStatus::TimedOut, JobStatus::Rejected] {
            assert_eq!(serde_json::to_value(status).unwrap(), serde_json::json!(status.as_str()));
        }
    }
}
