//! What `env` and `keys` print. `env` output goes through the same redaction as the
//! program's output, so a derived value that embeds a secret is masked too.

use std::collections::BTreeMap;

use serde_json::json;

use crate::cli::Format;
use crate::files::DeclaredKey;
use crate::plan::{Plan, Source};
use crate::redact::Redactor;

pub fn env(plan: &Plan, format: Format) -> Vec<u8> {
    let shown = |key: &str| {
        let var = &plan.env[key];
        if var.source == Source::Secret { "[REDACTED]".to_owned() } else { var.value.clone() }
    };
    let text = match format {
        Format::Json => {
            let env: serde_json::Map<_, _> = plan
                .env
                .iter()
                .map(|(key, var)| (key.clone(), json!({"value": shown(key), "source": var.source})))
                .collect();
            let mut text = serde_json::to_string_pretty(&json!({"argv": plan.argv, "env": env})).expect("serializes");
            text.push('\n');
            text
        }
        Format::Text => {
            let mut text = String::from("# argv, one argument per line\n");
            for arg in &plan.argv {
                text.push_str(&format!("{}\n", arg.escape_debug()));
            }
            text.push_str("# environment: KEY=VALUE  # source\n");
            for (key, var) in &plan.env {
                text.push_str(&format!("{key}={}  # {}\n", shown(key).escape_debug(), var.source));
            }
            text
        }
    };
    let mut redactor = Redactor::new(&plan.secrets);
    let mut out = Vec::with_capacity(text.len());
    redactor.push(text.as_bytes(), &mut out);
    redactor.finish(&mut out);
    out
}

pub fn keys(declared: &BTreeMap<String, DeclaredKey>, format: Format) -> String {
    match format {
        Format::Json => {
            let mut text = serde_json::to_string_pretty(declared).expect("serializes");
            text.push('\n');
            text
        }
        Format::Text => {
            let mut text = String::new();
            for (key, entry) in declared {
                text.push_str(key);
                text.push('\n');
                if !entry.description.is_empty() {
                    for line in entry.description.lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                }
                if let Some(default) = &entry.default {
                    text.push_str(&format!("    default: {}\n", default.escape_debug()));
                }
            }
            text
        }
    }
}
