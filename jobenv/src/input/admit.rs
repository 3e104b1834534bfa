//! Which keys are admitted from which layer: every node key must be declared, a control key or a
//! Nix/OpenTofu variable; every payload key must be declared or a payload control key, and never
//! reserved or node-only; only a fixed set of names passes from jobenv's own environment. All
//! offending keys of one kind are collected, so one error line lists them all.

use std::collections::BTreeMap;

use super::keys::DeclaredKey;
use super::names;
use super::payload::env_text;
use super::{Inputs, NodeValues};
use crate::error::Problem;

/// The payload, split into values for declared keys and control keys.
#[derive(Debug, Default)]
pub struct Payload {
    /// Declared keys with their text, in the payload's order.
    pub values: Vec<(String, String)>,
    /// Control keys (`ATTRIBUTE`, `NAMESPACE`, ...) with their text.
    pub controls: BTreeMap<&'static str, String>,
}

/// A key no layer passes on as it is: jobenv consumes it or derives it.
pub fn is_control(key: &str) -> bool {
    names::is_consumed(key) || names::is_derived(key)
}

/// Only the fixed pass-through names and the declared keys pass from jobenv's environment:
/// none of the job runner's own variables (`WM_TOKEN`, `PYTHONPATH`, ...).
pub fn environ_admits(declared: &BTreeMap<String, DeclaredKey>, key: &str) -> bool {
    names::ENVIRON_PASSTHROUGH.contains(&key) || (declared.contains_key(key) && !names::is_reserved(key) && !is_control(key))
}

/// Node keys must be declared, control keys the node may set, or Nix/OpenTofu variables.
pub fn check_node(node: &NodeValues, declared: &BTreeMap<String, DeclaredKey>, problems: &mut Vec<Problem>) {
    for (key, value) in node {
        let origin = value.origin.clone();
        if names::is_derived(key) {
            problems.push(Problem::DerivedKeyOnNode { key: key.clone(), origin });
        } else if names::is_payload_control(key) && !names::is_shared_control(key) {
            problems.push(Problem::PayloadOnlyKeyOnNode { key: key.clone(), origin });
        } else if !(declared.contains_key(key)
            || names::is_node_control(key)
            || names::is_shared_control(key)
            || names::is_node_tool_key(key))
        {
            problems.push(Problem::UndeclaredNodeKey { key: key.clone(), origin });
        }
    }
}

/// A keys file that declares a control key would hand the program a key jobenv consumes.
pub fn check_declared(declared: &BTreeMap<String, DeclaredKey>, problems: &mut Vec<Problem>) {
    for key in declared.keys().filter(|key| names::is_consumed(key)) {
        problems.push(Problem::DeclaredControlKey { key: key.clone() });
    }
}

/// Splits the payload into declared values and control keys.
pub fn payload(inputs: &Inputs, problems: &mut Vec<Problem>) -> Payload {
    let mut admitted = Payload::default();
    let (mut undeclared, mut node_only, mut reserved) = (Vec::new(), Vec::new(), Vec::new());
    for (key, value) in &inputs.payload {
        if !names::is_valid_key(key) {
            problems.push(Problem::InvalidKey { key: key.clone(), origin: "payload".into() });
            continue;
        }
        if names::is_node_control(key) {
            node_only.push(key.clone());
            continue;
        }
        if names::is_reserved(key) || names::is_derived(key) {
            reserved.push(key.clone());
            continue;
        }
        let control = names::PAYLOAD_CONTROL_KEYS.iter().find(|c| **c == key);
        if control.is_none() && !inputs.declared.contains_key(key) {
            undeclared.push(key.clone());
            continue;
        }
        let Some(text) = env_text(value) else { continue };
        if text.contains('\0') {
            problems.push(Problem::NulInValue { key: key.clone(), origin: "payload".into() });
            continue;
        }
        match control {
            Some(name) => {
                admitted.controls.insert(*name, text);
            }
            None => admitted.values.push((key.clone(), text)),
        }
    }
    if !undeclared.is_empty() {
        problems.push(Problem::UndeclaredPayloadKeys(undeclared));
    }
    if !node_only.is_empty() {
        problems.push(Problem::NodeOnlyPayloadKeys(node_only));
    }
    if !reserved.is_empty() {
        problems.push(Problem::ReservedPayloadKeys(reserved));
    }
    admitted
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{inputs, node, problems};
    use serde_json::json;

    #[test]
    fn payload_offences_are_listed_together() {
        let mut i = inputs();
        for k in ["NOPE", "ALSO_NOPE", "DEPLOYMENT_ROOT", "TF_HTTP_ADDRESS", "PATH", "LD_PRELOAD"] {
            i.payload.insert(k.into(), json!("x"));
        }
        assert_eq!(
            problems(&i),
            [
                "payload rejected: undeclared keys: ALSO_NOPE, NOPE",
                "payload rejected: keys only the node may set: DEPLOYMENT_ROOT",
                "payload rejected: reserved keys: LD_PRELOAD, PATH, TF_HTTP_ADDRESS",
            ]
        );
    }

    #[test]
    fn node_keys_must_be_declared_or_tool_variables() {
        let mut i = inputs();
        i.node.extend(node(&[("TF_VAR_x", "1", true), ("NIX_CONFIG", "x", false), ("SURPRISE", "s", false), ("NAMESPACE", "n", false)]));
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
            i.declared.insert(key.into(), super::DeclaredKey { description: String::new(), default: Some("x".into()) });
        }
        // Derived keys may be declared: the program reads them, jobenv sets them.
        i.declared.insert("DEPLOYMENT_NAMESPACE".into(), super::DeclaredKey { description: String::new(), default: None });
        assert_eq!(
            problems(&i),
            [
                "the keys file declares BUILD_ID, a control key jobenv consumes and never passes to the program",
                "the keys file declares DEPLOYMENT_ROOT, a control key jobenv consumes and never passes to the program",
                "the keys file declares SYSTEM, a control key jobenv consumes and never passes to the program",
            ]
        );
    }
}
