//! The merge: from the node layer, the payload and jobenv's own environment to the exact argv
//! and environment of the deployment program. A pure function of its inputs, so the priority
//! rules are unit-tested without a process, and `env` shows exactly what `run` would do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::Problem;
use crate::files::DeclaredKey;
use crate::node::NodeValue;
use crate::policy::{self, ENVIRON_PASSTHROUGH};
use crate::value::env_text;

/// Secrets shorter than this would shred the log if redacted; they draw a warning instead.
pub const MIN_SECRET_LEN: usize = 4;
/// Lines of a multi-line secret are redacted on their own from this length up.
pub const MIN_SECRET_LINE_LEN: usize = 8;

/// Where a variable of the final environment came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Node,
    Secret,
    Payload,
    Environ,
    Default,
    Derived,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Source::Node => "node",
            Source::Secret => "secret",
            Source::Payload => "payload",
            Source::Environ => "environ",
            Source::Default => "default",
            Source::Derived => "derived",
        };
        f.write_str(text)
    }
}

#[derive(Clone, PartialEq, Eq)]
pub struct Var {
    pub value: String,
    pub source: Source,
}

/// A secret's value never appears in a Debug output (a `{:?}` in a log line or a panic).
impl std::fmt::Debug for Var {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value: &dyn std::fmt::Debug = if self.source == Source::Secret { &"[REDACTED]" } else { &self.value };
        f.debug_struct("Var").field("value", value).field("source", &self.source).finish()
    }
}

/// Everything the merge needs, already read from disk.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub verb: String,
    pub node: BTreeMap<String, NodeValue>,
    pub declared: BTreeMap<String, DeclaredKey>,
    pub attributes: Vec<String>,
    pub payload: Map<String, Value>,
    /// jobenv's own environment (only admitted names are used).
    pub environ: Vec<(String, String)>,
    /// The nix-shell to run, already resolved to a path.
    pub nix_shell: PathBuf,
    pub running_system: String,
}

/// What `run` executes, and what `env` prints. Its Debug output holds no secret value: secret
/// variables show as `[REDACTED]` (see [`Var`]) and the redaction needles only by number.
#[derive(Clone)]
pub struct Plan {
    pub verb: String,
    pub attribute: String,
    pub namespace: String,
    pub system: String,
    pub executable: String,
    /// Where progress events go (`EVENTS_URL` and `EVENTS_SECRET` of the node).
    pub events: Option<crate::events::Target>,
    pub argv: Vec<String>,
    pub env: BTreeMap<String, Var>,
    /// The byte strings the redactor replaces.
    pub secrets: Vec<Vec<u8>>,
    /// One line each, naming keys only.
    pub warnings: Vec<String>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("verb", &self.verb)
            .field("attribute", &self.attribute)
            .field("namespace", &self.namespace)
            .field("system", &self.system)
            .field("executable", &self.executable)
            .field("events", &self.events)
            .field("argv", &self.argv)
            .field("env", &self.env)
            .field("secrets", &format_args!("{} needles", self.secrets.len()))
            .field("warnings", &self.warnings)
            .finish()
    }
}

pub fn plan(inputs: &Inputs) -> Result<Plan, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();

    if !policy::VERBS.contains(&inputs.verb.as_str()) {
        problems.push(Problem::UnknownVerb { verb: inputs.verb.clone() });
    }
    check_node_keys(inputs, &mut problems);
    for key in inputs.declared.keys().filter(|key| policy::is_consumed(key)) {
        problems.push(Problem::DeclaredControlKey { key: key.clone() });
    }
    let (payload_values, controls) = classify_payload(inputs, &mut problems);

    let node_text = |key: &str| inputs.node.get(key).map(|v| v.value.as_str());
    let control = Controls::resolve(inputs, &controls, &mut problems, &mut warnings);
    let events = crate::events::config::from_node(&inputs.node).map_err(|p| problems.extend(p)).ok().flatten();

    if !problems.is_empty() {
        return Err(problems);
    }
    let control = control.expect("controls resolve whenever no problem was found");

    let mut env: BTreeMap<String, Var> = BTreeMap::new();
    // Lowest first; each layer overwrites what the one below set.
    for (key, value) in &inputs.environ {
        if environ_admits(&inputs.declared, key) {
            env.insert(key.clone(), Var { value: value.clone(), source: Source::Environ });
        }
    }
    for (key, value) in payload_values {
        if inputs.node.contains_key(&key) {
            warnings.push(format!("payload value for {key} ignored: the node sets it"));
            continue;
        }
        env.insert(key, Var { value, source: Source::Payload });
    }
    for (key, node_value) in &inputs.node {
        if policy::is_consumed(key) {
            continue;
        }
        let source = if node_value.secret { Source::Secret } else { Source::Node };
        env.insert(key.clone(), Var { value: node_value.value.clone(), source });
    }
    for (key, declared) in &inputs.declared {
        if let (false, Some(default)) = (env.contains_key(key), &declared.default) {
            if !is_control(key) {
                env.insert(key.clone(), Var { value: default.clone(), source: Source::Default });
            }
        }
    }
    let derived = |value: String| Var { value, source: Source::Derived };
    env.insert("DEPLOYMENT_NAMESPACE".into(), derived(control.namespace.clone()));
    if let Some(base) = node_text("STATE_BASE_ADDRESS") {
        let address = format!("{}/{}", base.trim_end_matches('/'), control.namespace);
        env.insert("TF_HTTP_LOCK_ADDRESS".into(), derived(format!("{address}/lock")));
        env.insert("TF_HTTP_UNLOCK_ADDRESS".into(), derived(format!("{address}/lock")));
        env.insert("TF_HTTP_ADDRESS".into(), derived(address));
    }
    // <nixpkgs> inside the program is the node's pin, the same nix-shell gets with -I; a
    // NIX_PATH the node sets comes after it (Nix takes the first match).
    let nix_path = match node_text("NIX_PATH") {
        Some(rest) if !rest.is_empty() => format!("nixpkgs={}:{rest}", control.nixpkgs),
        _ => format!("nixpkgs={}", control.nixpkgs),
    };
    env.insert("NIX_PATH".into(), derived(nix_path));

    let argv = vec![
        inputs.nix_shell.display().to_string(),
        control.root.clone(),
        "-I".into(),
        format!("nixpkgs={}", control.nixpkgs),
        "-A".into(),
        format!("devShells.{}.{}", control.system, control.attribute),
        "--run".into(),
        // EXECUTABLE was checked to equal <ATTRIBUTE>-<VERB>, both of a safe alphabet: this is
        // the only text that reaches a shell, and no job can put anything else in it.
        format!("exec {}", control.executable),
    ];

    let secrets = redaction_needles(&inputs.node, &mut warnings);

    Ok(Plan {
        verb: inputs.verb.clone(),
        attribute: control.attribute,
        namespace: control.namespace,
        system: control.system,
        executable: control.executable,
        events,
        argv,
        env,
        secrets,
        warnings,
    })
}

/// A key no layer passes on as it is: jobenv consumes it or derives it.
fn is_control(key: &str) -> bool {
    policy::is_consumed(key) || policy::is_derived(key)
}

/// Only the fixed pass-through names and the declared keys pass from jobenv's environment:
/// none of the job runner's own variables (`WM_TOKEN`, `PYTHONPATH`, ...).
pub fn environ_admits(declared: &BTreeMap<String, DeclaredKey>, key: &str) -> bool {
    ENVIRON_PASSTHROUGH.contains(&key) || (declared.contains_key(key) && !policy::is_reserved(key) && !is_control(key))
}

fn check_node_keys(inputs: &Inputs, problems: &mut Vec<Problem>) {
    for (key, value) in &inputs.node {
        let origin = value.origin.clone();
        if policy::is_derived(key) {
            problems.push(Problem::DerivedKeyOnNode { key: key.clone(), origin });
        } else if policy::is_payload_control(key) && !policy::is_shared_control(key) {
            problems.push(Problem::PayloadOnlyKeyOnNode { key: key.clone(), origin });
        } else if !(inputs.declared.contains_key(key)
            || policy::is_node_control(key)
            || policy::is_shared_control(key)
            || policy::is_node_tool_key(key))
        {
            problems.push(Problem::UndeclaredNodeKey { key: key.clone(), origin });
        }
    }
}

/// Splits the payload into declared values and control keys; every offending key of every
/// kind is collected so the one error lists them all.
fn classify_payload(
    inputs: &Inputs,
    problems: &mut Vec<Problem>,
) -> (Vec<(String, String)>, BTreeMap<&'static str, String>) {
    let mut values = Vec::new();
    let mut controls = BTreeMap::new();
    let (mut undeclared, mut node_only, mut reserved) = (Vec::new(), Vec::new(), Vec::new());
    for (key, value) in &inputs.payload {
        if !policy::is_valid_key(key) {
            problems.push(Problem::InvalidKey { key: key.clone(), origin: "payload".into() });
            continue;
        }
        if policy::is_node_control(key) {
            node_only.push(key.clone());
            continue;
        }
        if policy::is_reserved(key) || policy::is_derived(key) {
            reserved.push(key.clone());
            continue;
        }
        let control = policy::PAYLOAD_CONTROL_KEYS.iter().find(|c| **c == key);
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
                controls.insert(*name, text);
            }
            None => values.push((key.clone(), text)),
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
    (values, controls)
}

/// The resolved control keys.
struct Controls {
    root: String,
    nixpkgs: String,
    system: String,
    attribute: String,
    executable: String,
    namespace: String,
}

/// How a value from a job appears in an error: quoted, and cut short.
fn shown(value: &str) -> String {
    let cut: String = value.chars().take(64).collect();
    if cut.len() < value.len() { format!("{cut:?}...") } else { format!("{cut:?}") }
}

impl Controls {
    fn resolve(
        inputs: &Inputs,
        payload: &BTreeMap<&'static str, String>,
        problems: &mut Vec<Problem>,
        warnings: &mut Vec<String>,
    ) -> Option<Self> {
        let before = problems.len();
        let node = |key: &str| inputs.node.get(key).map(|v| v.value.clone());
        // A control key may come from a secrets directory: then its value is never shown.
        let shown_node = |key: &str, value: &str| match inputs.node.get(key) {
            Some(v) if v.secret => "(value not shown: it comes from a secret)".to_owned(),
            _ => shown(value),
        };
        let missing = |key, hint| Problem::MissingControl { key, hint };

        let root = match node("DEPLOYMENT_ROOT") {
            None => {
                problems.push(missing("DEPLOYMENT_ROOT", " (the node's deploy-env.json must set it)"));
                None
            }
            Some(root) if !Path::new(&root).is_absolute() => {
                problems.push(Problem::BadControl { key: "DEPLOYMENT_ROOT", shown: shown_node("DEPLOYMENT_ROOT", &root), rule: "must be an absolute path" });
                None
            }
            Some(root) if !Path::new(&root).exists() => {
                problems.push(Problem::BadControl { key: "DEPLOYMENT_ROOT", shown: shown_node("DEPLOYMENT_ROOT", &root), rule: "does not exist" });
                None
            }
            Some(root) => Some(root),
        };

        let nixpkgs = match (node("NIXPKGS"), node("DEPLOYMENT_NIXPKGS")) {
            (Some(a), Some(b)) if a != b => {
                problems.push(Problem::ConflictingNixpkgs);
                None
            }
            (Some(path), _) | (None, Some(path)) if !Path::new(&path).is_absolute() => {
                let source = if inputs.node.contains_key("NIXPKGS") { "NIXPKGS" } else { "DEPLOYMENT_NIXPKGS" };
                problems.push(Problem::BadControl { key: "NIXPKGS", shown: shown_node(source, &path), rule: "must be an absolute path" });
                None
            }
            (Some(path), _) | (None, Some(path)) => Some(path),
            (None, None) => {
                problems.push(missing("NIXPKGS", " (the node's deploy-env.json must set NIXPKGS or DEPLOYMENT_NIXPKGS)"));
                None
            }
        };

        if node("SYSTEM").is_some() && payload.contains_key("SYSTEM") {
            warnings.push("payload value for SYSTEM ignored: the node sets it".to_owned());
        }
        let system = node("SYSTEM").or_else(|| payload.get("SYSTEM").cloned()).unwrap_or_else(|| inputs.running_system.clone());
        if !policy::is_valid_system(&system) {
            problems.push(Problem::BadControl { key: "SYSTEM", shown: shown_node("SYSTEM", &system), rule: "must match ^[a-z0-9_]+-[a-z0-9_]+$" });
        }

        let attribute = payload.get("ATTRIBUTE").cloned();
        match &attribute {
            None => problems.push(missing("ATTRIBUTE", " (the job payload must name the deployment)")),
            Some(a) if !policy::is_valid_attribute(a) => {
                problems.push(Problem::BadControl { key: "ATTRIBUTE", shown: shown(a), rule: "must match ^[A-Za-z0-9][A-Za-z0-9_-]*$" })
            }
            Some(a) if !inputs.attributes.iter().any(|known| known == a) => problems.push(Problem::UnknownAttribute(a.clone())),
            Some(_) => {}
        }

        let expected = attribute.as_ref().map(|a| format!("{a}-{}", inputs.verb));
        let executable = payload.get("EXECUTABLE").cloned().or_else(|| expected.clone());
        if let (Some(given), Some(expected)) = (payload.get("EXECUTABLE"), &expected) {
            if given != expected {
                problems.push(Problem::BadExecutable { given: given.clone(), expected: expected.clone() });
            }
        }

        let namespace = payload.get("NAMESPACE").cloned();
        match &namespace {
            None => problems.push(missing("NAMESPACE", " (the job payload must name the deployment's namespace)")),
            Some(ns) if !policy::is_valid_namespace(ns) => {
                problems.push(Problem::BadControl { key: "NAMESPACE", shown: shown(ns), rule: "must match ^[a-z0-9][a-z0-9-]{0,62}$" })
            }
            Some(_) => {}
        }

        if let Some(id) = payload.get("BUILD_ID").filter(|id| !policy::is_valid_build_id(id)) {
            problems.push(Problem::BadControl { key: "BUILD_ID", shown: shown(id), rule: "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$" });
        }

        if let Some(base) = node("STATE_BASE_ADDRESS") {
            // Never shown: a state backend URL may carry credentials.
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                problems.push(Problem::BadControl { key: "STATE_BASE_ADDRESS", shown: "(value not shown)".into(), rule: "must be an http:// or https:// URL" });
            }
        }

        if problems.len() > before {
            return None;
        }
        Some(Controls {
            root: root?,
            nixpkgs: nixpkgs?,
            system,
            attribute: attribute?,
            executable: executable?,
            namespace: namespace?,
        })
    }
}

/// Every secret value, each line of at least [`MIN_SECRET_LINE_LEN`] bytes of a multi-line
/// secret, and the JSON-escaped form of each (a program that logs JSON would otherwise leak a
/// secret that contains a quote or a newline). Longest first is not needed: the redactor
/// merges overlapping matches.
fn redaction_needles(node: &BTreeMap<String, NodeValue>, warnings: &mut Vec<String>) -> Vec<Vec<u8>> {
    let mut needles: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (key, value) in node.iter().filter(|(_, v)| v.secret) {
        let text = value.value.as_str();
        if text.len() < MIN_SECRET_LEN {
            warnings.push(format!("secret {key} is shorter than {MIN_SECRET_LEN} bytes and will not be redacted"));
            continue;
        }
        needles.insert(text.as_bytes().to_vec());
        if text.contains('\n') {
            for line in text.split('\n') {
                let line = line.strip_suffix('\r').unwrap_or(line);
                if line.len() >= MIN_SECRET_LINE_LEN {
                    needles.insert(line.as_bytes().to_vec());
                }
            }
        }
        let escaped = serde_json::to_string(text).expect("a string serializes");
        let escaped = &escaped[1..escaped.len() - 1];
        if escaped != text {
            needles.insert(escaped.as_bytes().to_vec());
        }
    }
    needles.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(pairs: &[(&str, &str, bool)]) -> BTreeMap<String, NodeValue> {
        pairs
            .iter()
            .map(|(k, v, secret)| ((*k).into(), NodeValue { value: (*v).into(), origin: format!("test:{k}"), secret: *secret }))
            .collect()
    }

    fn inputs() -> Inputs {
        let declared = [("A", None), ("B", Some("b-default")), ("C", None), ("HOSTING_CONFIG", None)]
            .into_iter()
            .map(|(k, d): (&str, Option<&str>)| (k.to_owned(), DeclaredKey { description: format!("{k} key"), default: d.map(Into::into) }))
            .collect();
        Inputs {
            verb: "apply".into(),
            node: node(&[("DEPLOYMENT_ROOT", "/", false), ("NIXPKGS", "/nixpkgs", false)]),
            declared,
            attributes: vec!["web".into()],
            payload: json!({"ATTRIBUTE": "web", "NAMESPACE": "ns1"}).as_object().unwrap().clone(),
            environ: vec![],
            nix_shell: "/bin/nix-shell".into(),
            running_system: "x86_64-linux".into(),
        }
    }

    fn problems(inputs: &Inputs) -> Vec<String> {
        plan(inputs).unwrap_err().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn argv_is_fixed_shape() {
        let plan = plan(&inputs()).unwrap();
        assert_eq!(
            plan.argv,
            ["/bin/nix-shell", "/", "-I", "nixpkgs=/nixpkgs", "-A", "devShells.x86_64-linux.web", "--run", "exec web-apply"]
        );
    }

    #[test]
    fn node_beats_payload_beats_environ_and_defaults_fill_the_rest() {
        let mut i = inputs();
        i.node.extend(node(&[("A", "node", false)]));
        i.payload.insert("A".into(), json!("payload"));
        i.payload.insert("C".into(), json!("payload"));
        i.environ = vec![("A".into(), "environ".into()), ("C".into(), "environ".into())];
        let plan = plan(&i).unwrap();
        assert_eq!(plan.env["A"], Var { value: "node".into(), source: Source::Node });
        assert_eq!(plan.env["C"], Var { value: "payload".into(), source: Source::Payload });
        assert_eq!(plan.env["B"], Var { value: "b-default".into(), source: Source::Default });
        assert!(!plan.env.contains_key("HOSTING_CONFIG"));
        assert_eq!(plan.warnings, ["payload value for A ignored: the node sets it"]);
    }

    #[test]
    fn environ_admits_only_passthrough_and_declared() {
        let mut i = inputs();
        i.environ = [("PATH", "/bin"), ("WM_TOKEN", "x"), ("PYTHONPATH", "/p"), ("C", "c"), ("RANDOM_VAR", "r")]
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let plan = plan(&i).unwrap();
        assert_eq!(plan.env["PATH"].source, Source::Environ);
        assert_eq!(plan.env["C"].value, "c");
        for k in ["WM_TOKEN", "PYTHONPATH", "RANDOM_VAR"] {
            assert!(!plan.env.contains_key(k), "{k} leaked");
        }
    }

    #[test]
    fn state_address_is_scoped_to_the_namespace() {
        let mut i = inputs();
        i.node.extend(node(&[("STATE_BASE_ADDRESS", "https://state.example/tf/", false)]));
        let plan = plan(&i).unwrap();
        assert_eq!(plan.env["TF_HTTP_ADDRESS"].value, "https://state.example/tf/ns1");
        assert_eq!(plan.env["TF_HTTP_LOCK_ADDRESS"].value, "https://state.example/tf/ns1/lock");
        assert_eq!(plan.env["TF_HTTP_UNLOCK_ADDRESS"].value, "https://state.example/tf/ns1/lock");
        assert_eq!(plan.env["DEPLOYMENT_NAMESPACE"].value, "ns1");
        assert_eq!(plan.env["NIX_PATH"].value, "nixpkgs=/nixpkgs");
    }

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
    fn executable_must_be_attribute_dash_verb() {
        let mut i = inputs();
        i.payload.insert("EXECUTABLE".into(), json!("web-apply; rm -rf /"));
        assert_eq!(problems(&i), [r#"EXECUTABLE "web-apply; rm -rf /" is not allowed: it must be "web-apply" (<ATTRIBUTE>-<VERB>)"#]);
        i.payload.insert("EXECUTABLE".into(), json!("web-apply"));
        assert!(plan(&i).is_ok());
    }

    #[test]
    fn control_keys_are_validated() {
        let mut i = inputs();
        i.payload.insert("ATTRIBUTE".into(), json!("other"));
        i.payload.insert("NAMESPACE".into(), json!("Bad NS"));
        i.payload.insert("SYSTEM".into(), json!("x86_64"));
        let p = problems(&i);
        assert!(p.iter().any(|l| l.starts_with("unknown ATTRIBUTE \"other\"")), "{p:?}");
        assert!(p.iter().any(|l| l.starts_with("NAMESPACE \"Bad NS\" is invalid")), "{p:?}");
        assert!(p.iter().any(|l| l.starts_with("SYSTEM \"x86_64\" is invalid")), "{p:?}");
    }

    #[test]
    fn event_keys_are_the_nodes_and_never_reach_the_program() {
        let mut i = inputs();
        i.node.extend(node(&[("EVENTS_URL", "http://events.example/hook", false), ("EVENTS_SECRET", "events-secret-0123456789", true)]));
        i.payload.insert("BUILD_ID".into(), json!("build-7"));
        let plan = plan(&i).unwrap();
        assert!(plan.events.is_some());
        for key in ["EVENTS_URL", "EVENTS_SECRET", "BUILD_ID"] {
            assert!(!plan.env.contains_key(key), "{key} reached the program");
        }
        assert!(plan.secrets.contains(&b"events-secret-0123456789".to_vec()), "the event secret is redacted like any secret");

        let mut i = inputs();
        i.payload.insert("EVENTS_URL".into(), json!("http://evil/"));
        i.payload.insert("EVENTS_SECRET".into(), json!("x"));
        i.payload.insert("BUILD_ID".into(), json!("../x"));
        assert_eq!(
            problems(&i),
            [
                "payload rejected: keys only the node may set: EVENTS_SECRET, EVENTS_URL",
                r#"BUILD_ID "../x" is invalid: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"#,
            ]
        );
        let mut i = inputs();
        i.node.extend(node(&[("EVENTS_URL", "http://events.example/hook", false)]));
        assert_eq!(problems(&i), ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]);
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
            i.declared.insert(key.into(), DeclaredKey { description: String::new(), default: Some("x".into()) });
        }
        // Derived keys may be declared: the program reads them, jobenv sets them.
        i.declared.insert("DEPLOYMENT_NAMESPACE".into(), DeclaredKey { description: String::new(), default: None });
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
    fn a_payload_system_the_node_overrides_draws_a_warning() {
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "aarch64-linux", false)]));
        i.payload.insert("SYSTEM".into(), json!("x86_64-linux"));
        let plan = plan(&i).unwrap();
        assert_eq!(plan.system, "aarch64-linux");
        assert_eq!(plan.warnings, ["payload value for SYSTEM ignored: the node sets it"]);
    }

    #[test]
    fn the_nixpkgs_pin_comes_first_in_nix_path() {
        let mut i = inputs();
        i.node.extend(node(&[("NIX_PATH", "nixpkgs=/elsewhere:other=/o", false)]));
        let plan = plan(&i).unwrap();
        assert_eq!(plan.env["NIX_PATH"], Var { value: "nixpkgs=/nixpkgs:nixpkgs=/elsewhere:other=/o".into(), source: Source::Derived });
    }

    #[test]
    fn a_control_value_from_a_secret_is_not_shown_in_errors() {
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "x86_64-SECRETSYS", true)]));
        i.node.insert("DEPLOYMENT_ROOT".into(), NodeValue { value: "relative-SECRETROOT".into(), origin: "secret".into(), secret: true });
        let p = problems(&i).join("\n");
        assert!(!p.contains("SECRETSYS") && !p.contains("SECRETROOT"), "{p}");
        // Positive control: the same values from deploy-env.json are shown.
        assert!(p.contains("SYSTEM (value not shown: it comes from a secret) is invalid"), "{p}");
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "x86_64-PLAINSYS", false)]));
        assert!(problems(&i).join("\n").contains("SYSTEM \"x86_64-PLAINSYS\" is invalid"));
    }

    #[test]
    fn debug_output_holds_no_secret_value() {
        let mut i = inputs();
        i.node.extend(node(&[("TF_VAR_token", "debug-secret-value", true), ("A", "plain-node-value", false)]));
        let plan = plan(&i).unwrap();
        let shown = format!("{plan:?} {:?}", i.node);
        assert!(!shown.contains("debug-secret-value"), "{shown}");
        // Positive control: the secret is in the plan, and other values do show.
        assert_eq!(plan.env["TF_VAR_token"].value, "debug-secret-value");
        assert!(shown.contains("plain-node-value") && shown.contains("[REDACTED]"), "{shown}");
    }

    #[test]
    fn secrets_become_needles_and_short_ones_warn() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("TF_VAR_long", "first-line-xx\nshort\nthird-line-yy", true),
            ("TF_VAR_tiny", "abc", true),
            ("A", "not-a-secret", false),
        ]));
        let plan = plan(&i).unwrap();
        let needles: Vec<String> = plan.secrets.iter().map(|n| String::from_utf8(n.clone()).unwrap()).collect();
        assert!(needles.contains(&"first-line-xx\nshort\nthird-line-yy".to_owned()));
        assert!(needles.contains(&"first-line-xx".to_owned()));
        assert!(needles.contains(&"third-line-yy".to_owned()));
        assert!(needles.contains(&r"first-line-xx\nshort\nthird-line-yy".to_owned()));
        assert!(!needles.contains(&"short".to_owned()));
        assert!(!needles.iter().any(|n| n.contains("not-a-secret") || n == "abc"));
        assert_eq!(plan.warnings, ["secret TF_VAR_tiny is shorter than 4 bytes and will not be redacted"]);
    }
}
