//! The front-end contract as the repository publishes it: the JSON Schemas checked in under
//! `schemas/` at the workspace root (jobenv generates them; a test of jobenv fails when one is
//! stale). The test kit checks what jobenv wrote against them wherever it reads it (a
//! `result.json`, a journal entry `status` printed, an event a receiver took), so every run of
//! the suite is also a run against the published contract.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

/// One schema of `schemas/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    Payload,
    Result,
    EventJobenv,
    EventDd0012,
    JournalEntry,
}

impl Contract {
    const ALL: [Contract; 5] = [
        Contract::Payload,
        Contract::Result,
        Contract::EventJobenv,
        Contract::EventDd0012,
        Contract::JournalEntry,
    ];

    pub fn file(self) -> &'static str {
        match self {
            Contract::Payload => "payload.schema.json",
            Contract::Result => "result.schema.json",
            Contract::EventJobenv => "event-jobenv.schema.json",
            Contract::EventDd0012 => "event-dd-0012.schema.json",
            Contract::JournalEntry => "journal-entry.schema.json",
        }
    }

    fn validator(self) -> &'static jsonschema::Validator {
        static VALIDATORS: OnceLock<Vec<jsonschema::Validator>> = OnceLock::new();
        let all = VALIDATORS.get_or_init(|| {
            Contract::ALL
                .iter()
                .map(|contract| {
                    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("../schemas")
                        .join(contract.file());
                    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let schema: Value =
                        serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
                })
                .collect()
        });
        &all[Contract::ALL.iter().position(|c| *c == self).expect("one of ALL")]
    }

    /// Every way `value` breaks the schema, one line each (none: it fits).
    pub fn errors(self, value: &Value) -> Vec<String> {
        self.validator()
            .iter_errors(value)
            .map(|e| format!("{}: {e} at {}", self.file(), e.instance_path()))
            .collect()
    }

    /// Panics, naming each problem and the value, unless `value` fits.
    pub fn check(self, value: &Value) {
        let errors = self.errors(value);
        assert!(
            errors.is_empty(),
            "{value:#}\ndoes not fit the published schema:\n{}",
            errors.join("\n")
        );
    }

    /// [`Contract::check`] of a value, or of each value of an array (what `status` and
    /// `recover` print).
    pub fn check_each(self, value: &Value) {
        match value.as_array() {
            Some(values) => values.iter().for_each(|value| self.check(value)),
            None => self.check(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_schemas_load_and_tell_good_from_bad() {
        let good = json!({"status": "succeeded", "exit_code": 0, "verb": "apply", "attribute": "web", "namespace": "ns", "duration_ms": 5});
        Contract::Result.check(&good);
        let mut bad = good.clone();
        bad["status"] = json!("done");
        assert_eq!(
            Contract::Result.errors(&bad).len(),
            1,
            "{:?}",
            Contract::Result.errors(&bad)
        );
        assert!(
            !Contract::EventDd0012
                .errors(&json!({"status": "stopped", "log": {"level": "debug", "message": "x"}}))
                .is_empty()
        );
        Contract::EventDd0012.check(&json!({"status": "stopped", "log": {"level": "warning", "message": "x"}}));
        // A jobs row has no `stopped`; a deployments row no `succeeded`: either fits, neither
        // status outside both sets does.
        Contract::EventDd0012.check(&json!({"status": "succeeded"}));
        assert!(!Contract::EventDd0012.errors(&json!({"status": "canceled"})).is_empty());
    }
}
