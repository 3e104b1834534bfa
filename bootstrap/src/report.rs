//! The one line each step logs: `step N/9 <name>: <what it looked at>: <outcome>`.

use std::fmt;

use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Ready = 1,
    Login,
    Token,
    Workspace,
    Scripts,
    Settings,
    OpenBao,
    UiAuth,
    Revoke,
}

pub const STEPS: usize = 9;

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Ready => "ready",
            Step::Login => "login",
            Step::Token => "token",
            Step::Workspace => "workspace",
            Step::Scripts => "scripts",
            Step::Settings => "settings",
            Step::OpenBao => "openbao",
            Step::UiAuth => "ui-auth",
            Step::Revoke => "revoke",
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{STEPS} {}", *self as u8, self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unchanged,
    Created,
    Updated,
}

impl Outcome {
    /// Several changes in one step: `created` only if everything changed was created.
    pub fn combine(self, other: Outcome) -> Outcome {
        match (self, other) {
            (Outcome::Unchanged, o) | (o, Outcome::Unchanged) => o,
            (Outcome::Created, Outcome::Created) => Outcome::Created,
            _ => Outcome::Updated,
        }
    }

    fn word(self, check: bool) -> &'static str {
        match (self, check) {
            (Outcome::Unchanged, _) => "unchanged",
            (Outcome::Created, false) => "created",
            (Outcome::Updated, false) => "updated",
            (Outcome::Created, true) => "would create",
            (Outcome::Updated, true) => "would update",
        }
    }
}

pub fn line(step: Step, what: &str, outcome: Outcome, check: bool) {
    tracing::info!("step {step}: {what}: {}", outcome.word(check));
}

/// What a step looked at and how it came out (its log line), and what it hands on.
pub struct Noted<T> {
    pub what: String,
    pub outcome: Outcome,
    pub value: T,
}

pub fn noted<T>(what: impl Into<String>, outcome: Outcome, value: T) -> Noted<T> {
    Noted {
        what: what.into(),
        outcome,
        value,
    }
}

/// The steps' log lines, and the steps that changed something (or, with `--check`, would).
pub struct Notes {
    check: bool,
    drift: Vec<Step>,
}

impl Notes {
    pub fn new(check: bool) -> Self {
        Notes {
            check,
            drift: Vec::new(),
        }
    }

    pub fn check(&self) -> bool {
        self.check
    }

    /// Runs one step: a failure is wrapped with the step's name; otherwise its line is logged
    /// and a change recorded.
    pub async fn step<T>(&mut self, step: Step, work: impl Future<Output = Result<Noted<T>>>) -> Result<T> {
        let noted = work.await.map_err(|error| Error::Step {
            step: step.to_string(),
            source: Box::new(error),
        })?;
        line(step, &noted.what, noted.outcome, self.check);
        if noted.outcome != Outcome::Unchanged {
            self.drift.push(step);
        }
        Ok(noted.value)
    }

    /// The steps that changed something, in order.
    pub fn drift(self) -> Vec<Step> {
        self.drift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combine() {
        use Outcome::*;
        assert_eq!(Unchanged.combine(Unchanged), Unchanged);
        assert_eq!(Unchanged.combine(Created), Created);
        assert_eq!(Created.combine(Created), Created);
        assert_eq!(Created.combine(Updated), Updated);
        assert_eq!(Step::UiAuth.to_string(), "8/9 ui-auth");
    }
}
