//! Which keys are admitted from which layer, by their [`KeyClass`]: every node key must be
//! declared, a control key or a Nix/OpenTofu variable; every payload key must be declared or a
//! payload control key, and never reserved or node-only; only a fixed set of names passes from
//! jobenv's own environment. All offending keys of one kind are collected, so one error line
//! lists them all.

use std::collections::BTreeMap;

use super::json::text as env_text;
use super::names::DeclaredKey;
use super::names::{self, KeyClass};
use super::node::NodeValue;
use super::{Inputs, NodeValues};
use crate::error::Problem;

/// The longest `TF_HTTP_PASSWORD` a payload may send.
pub const MAX_PAYLOAD_PASSWORD: usize = 4096;

/// The payload, split by what each key is.
#[derive(Debug, Default)]
pub struct Payload {
    /// Declared keys (and the state backend's credentials) with their text, in the payload's
    /// order.
    pub values: Vec<(String, String)>,
    /// Control keys (`ATTRIBUTE`, `NAMESPACE`, ...) and the state addresses, with their text.
    pub controls: BTreeMap<&'static str, String>,
    /// Keys whose payload value was dropped because the node owns them.
    pub ignored: Vec<String>,
}

/// Only the fixed pass-through names and the declared keys pass from jobenv's environment:
/// none of the job runner's own variables (`WM_TOKEN`, `PYTHONPATH`, ...), and no node-only key
/// (the node's files are its only source).
pub fn environ_admits(declared: &BTreeMap<String, DeclaredKey>, key: &str) -> bool {
    names::ENVIRON_PASSTHROUGH.contains(&key) || names::class(key, declared).environ_may_set()
}

/// Node keys must be declared, control keys the node may set, or Nix/OpenTofu variables.
pub fn check_node(node: &NodeValues, declared: &BTreeMap<String, DeclaredKey>, problems: &mut Vec<Problem>) {
    for (key, value) in node {
        let origin = value.origin.clone();
        match names::class(key, declared) {
            KeyClass::Derived { .. } => problems.push(Problem::DerivedKeyOnNode {
                key: key.clone(),
                origin,
            }),
            KeyClass::PayloadControl { node_may_set: false } => problems.push(Problem::PayloadOnlyKeyOnNode {
                key: key.clone(),
                origin,
            }),
            class if class.node_may_set() => {}
            _ if value.hidden_key => problems.push(Problem::HiddenNodeKey {
                origin,
                what: "sets a key that is neither declared in the keys file nor a Nix/OpenTofu variable a node may set",
            }),
            _ => problems.push(Problem::UndeclaredNodeKey {
                key: key.clone(),
                origin,
            }),
        }
    }
}

/// A keys file that declares a control key would hand the program a key jobenv consumes.
pub fn check_declared(declared: &BTreeMap<String, DeclaredKey>, problems: &mut Vec<Problem>) {
    for key in declared.keys().filter(|key| names::class(key, declared).is_consumed()) {
        problems.push(Problem::DeclaredControlKey { key: key.clone() });
    }
}

/// Splits the payload; every key the node owns is dropped (with a warning unless the node has
/// the same value), every other offending key refuses the job.
pub fn payload(inputs: &Inputs, problems: &mut Vec<Problem>, warnings: &mut Vec<String>) -> Payload {
    let mut admitted = Payload::default();
    let (mut undeclared, mut reserved) = (Vec::new(), Vec::new());
    let node_has_credentials = ["TF_HTTP_USERNAME", "TF_HTTP_PASSWORD"]
        .iter()
        .any(|key| inputs.node.contains_key(*key));
    for (key, value) in inputs.payload.iter() {
        if !names::is_valid_key(key) {
            problems.push(Problem::InvalidKey {
                key: super::cut(key, super::SHOWN_CHARS),
                origin: "payload".into(),
            });
            continue;
        }
        let Some(text) = env_text(value) else { continue };
        let class = names::class(key, &inputs.declared);
        let credential = matches!(class, KeyClass::StateCredential { .. });
        // A payload-only or derived key on the node is the node's error (`check_node`), not a
        // reason to drop the payload's value.
        let node_sets = inputs.node.contains_key(key)
            && !matches!(
                class,
                KeyClass::Derived { .. } | KeyClass::PayloadControl { node_may_set: false }
            );
        // A row's secret only where events are DD-0012's: elsewhere it is the node's alone.
        let node_only =
            class.is_node_only() || (key == "EVENTS_SECRET" && !super::node::takes_row_secrets(&inputs.node));
        if node_sets || node_only || (credential && node_has_credentials) {
            // Silent only for an equal value the job could know anyway: for a secret, silence
            // would tell the job whether its guess was right.
            let node = node_value(inputs, key);
            if node.is_none_or(|node| node.value.is_secret() || node.value.expose() != text) {
                let why = match node {
                    Some(_) => "the node sets it",
                    None if credential => "the node sets the state backend's credentials",
                    None => "only the node may set it",
                };
                warnings.push(format!("payload value for {} ignored: {why}", key.escape_debug()));
            }
            admitted.ignored.push(key.clone());
            continue;
        }
        let control = match class {
            KeyClass::Reserved { .. }
            | KeyClass::Derived {
                payload_may_propose: false,
            } => {
                reserved.push(super::cut(key, super::SHOWN_CHARS));
                continue;
            }
            KeyClass::Undeclared | KeyClass::NodeTool => {
                undeclared.push(super::cut(key, super::SHOWN_CHARS));
                continue;
            }
            KeyClass::PayloadControl { .. } | KeyClass::Derived { .. } | KeyClass::NodeControl => true,
            KeyClass::StateCredential { .. } | KeyClass::Declared(_) => false,
        };
        // A bad trace context never refuses a job (`controls::trace_context` drops it, saying
        // why); a NUL in it is one more way to be bad.
        if text.contains('\0') && !matches!(key.as_str(), "TRACEPARENT" | "TRACESTATE") {
            problems.push(Problem::NulInValue {
                key: key.clone(),
                origin: "payload".into(),
            });
            continue;
        }
        // The password becomes a redaction needle in every escaped form: a bound keeps that
        // small whatever a payload sends.
        if key == "TF_HTTP_PASSWORD" && text.len() > MAX_PAYLOAD_PASSWORD {
            problems.push(Problem::PayloadPasswordTooLong {
                max: MAX_PAYLOAD_PASSWORD,
            });
            continue;
        }
        match names::PAYLOAD_CONTROL_KEYS
            .iter()
            .chain(names::STATE_KEYS)
            .find(|c| **c == key)
        {
            Some(name) if control => {
                admitted.controls.insert(*name, text);
            }
            _ => admitted.values.push((key.clone(), text)),
        }
    }
    if !undeclared.is_empty() {
        problems.push(Problem::UndeclaredPayloadKeys(undeclared));
    }
    if !reserved.is_empty() {
        problems.push(Problem::ReservedPayloadKeys(reserved));
    }
    admitted
}

/// What the node has for `key`: its own value, or for the nixpkgs pin the one it set under
/// either name.
fn node_value<'a>(inputs: &'a Inputs, key: &str) -> Option<&'a NodeValue> {
    let value = |key: &str| inputs.node.get(key);
    match key {
        "NIXPKGS" | "DEPLOYMENT_NIXPKGS" => value("NIXPKGS").or_else(|| value("DEPLOYMENT_NIXPKGS")),
        _ => value(key),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{inputs, node, problems};
    use serde_json::json;

    #[test]
    fn payload_offences_are_listed_together() {
        let mut i = inputs();
        for k in [
            "NOPE",
            "ALSO_NOPE",
            "TF_HTTP_RETRY_MAX",
            "PATH",
            "LD_PRELOAD",
            "BASH_ENV",
        ] {
            i.set_payload(k, json!("x"));
        }
        assert_eq!(
            problems(&i),
            [
                "payload rejected: undeclared keys: ALSO_NOPE, NOPE",
                "payload rejected: reserved keys: BASH_ENV, LD_PRELOAD, PATH, TF_HTTP_RETRY_MAX"
            ]
        );
    }

    #[test]
    fn node_keys_must_be_declared_or_tool_variables() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("TF_VAR_x", "1", true),
            ("NIX_CONFIG", "x", false),
            ("SURPRISE", "s", false),
            ("NAMESPACE", "n", false),
        ]));
        assert_eq!(
            problems(&i),
            [
                "test:NAMESPACE sets NAMESPACE, which only a job payload may set",
                "test:SURPRISE sets SURPRISE, which is neither declared in the keys file nor a Nix/OpenTofu variable a node may set",
            ]
        );
    }

    #[test]
    fn a_keys_file_that_declares_a_control_key_is_refused() {
        let mut i = inputs();
        for key in ["SYSTEM", "BUILD_ID", "DEPLOYMENT_ROOT"] {
            i.declared.insert(
                key.into(),
                super::DeclaredKey {
                    default: Some("x".into()),
                    ..Default::default()
                },
            );
        }
        // Derived keys may be declared: the program reads them, jobenv sets them.
        i.declared
            .insert("DEPLOYMENT_NAMESPACE".into(), super::DeclaredKey::default());
        assert_eq!(
            problems(&i),
            [
                "the keys file declares BUILD_ID, a control key jobenv consumes and never passes to the program",
                "the keys file declares DEPLOYMENT_ROOT, a control key jobenv consumes and never passes to the program",
                "the keys file declares SYSTEM, a control key jobenv consumes and never passes to the program",
            ]
        );
    }

    #[test]
    fn long_key_names_are_cut_in_errors() {
        let mut i = inputs();
        i.set_payload(&"U".repeat(5000), json!("x"));
        i.set_payload(&format!("LD_{}", "R".repeat(5000)), json!("x"));
        i.set_payload(&format!("{}=", "E".repeat(5000)), json!("x"));
        let p = problems(&i).join("\n");
        assert!(p.len() < 600, "{p}");
        assert!(p.contains(&format!("undeclared keys: {}...", "U".repeat(64))), "{p}");
        assert!(p.contains(&format!("reserved keys: LD_{}...", "R".repeat(61))), "{p}");
        assert!(
            p.contains(&format!("invalid variable name \"{}...\" in payload", "E".repeat(64))),
            "{p}"
        );
    }
}
