//! The one line each step logs: `step N/9 <name>: <what it looked at>: <outcome>`.

use std::fmt;

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
