//! The control keys: what jobenv itself needs to run a job (where the programs are, which
//! nixpkgs, which system, attribute, executable and namespace, where state and progress events
//! go). Each is checked against its rule here; none reaches the program as it is.

use std::path::Path;

use reqwest::Url;

use super::admit::Payload;
use super::names;
use super::state::{self, StateAddress};
use super::{Inputs, NodeValues};
use crate::error::Problem;
use crate::events::Target;
use safe_io::secret::{Hidden, Text};

/// The resolved control keys of a job that passed every check.
#[derive(Debug, Clone)]
pub struct Controls {
    pub root: String,
    pub nixpkgs: String,
    pub system: String,
    pub attribute: String,
    pub executable: String,
    pub namespace: String,
    /// The state backend's addresses, when the job has them.
    pub state: Option<StateAddress>,
    /// Where progress events go (`EVENTS_URL` and `EVENTS_SECRET` of the node).
    pub events: Option<Target>,
}

/// How a value from a job appears in an error: quoted, and cut short.
fn shown(value: &str) -> String {
    super::shown(value, super::SHOWN_CHARS)
}

/// Checks every control key; problems are added to `problems`. `None` when any check failed.
pub fn resolve(inputs: &Inputs, payload: &Payload, problems: &mut Vec<Problem>) -> Option<Controls> {
    let before = problems.len();
    let payload = &payload.controls;
    let node = |key: &str| inputs.node.get(key).map(|v| v.value.expose().to_owned());
    // A control key may come from a secrets directory: then its value is never shown.
    let shown_node = |key: &str, value: &str| match inputs.node.get(key) {
        Some(v) if v.value.is_secret() => "(value not shown: it comes from a secret)".to_owned(),
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

    // A payload SYSTEM the node also sets was dropped with the other keys the node owns.
    let system = node("SYSTEM").or_else(|| payload.get("SYSTEM").cloned()).unwrap_or_else(|| inputs.running_system.clone());
    if !names::is_valid_system(&system) {
        problems.push(Problem::BadControl { key: "SYSTEM", shown: shown_node("SYSTEM", &system), rule: "must match ^[a-z0-9_]+-[a-z0-9_]+$" });
    }

    let attribute = payload.get("ATTRIBUTE").cloned();
    match &attribute {
        None => problems.push(missing("ATTRIBUTE", " (the job payload must name the deployment)")),
        Some(a) if !names::is_valid_attribute(a) => {
            problems.push(Problem::BadControl { key: "ATTRIBUTE", shown: shown(a), rule: "must match ^[A-Za-z0-9][A-Za-z0-9_-]*$" })
        }
        Some(a) if !inputs.attributes.iter().any(|known| known == a) => {
            problems.push(Problem::UnknownAttribute(super::cut(a, super::SHOWN_CHARS)))
        }
        Some(_) => {}
    }

    // <ATTRIBUTE>-<VERB>, or for `apply` also <ATTRIBUTE> alone: a program without verb
    // siblings deploys when run. Both are of the checked attribute's alphabet.
    let expected = attribute.as_ref().map(|a| format!("{a}-{}", inputs.verb));
    let executable = payload.get("EXECUTABLE").cloned().or_else(|| expected.clone());
    if let (Some(given), Some(expected), Some(attribute)) = (payload.get("EXECUTABLE"), &expected, &attribute) {
        let verbless = inputs.verb == "apply" && given == attribute;
        if given != expected && !verbless {
            let rule = if inputs.verb == "apply" { "<ATTRIBUTE>-<VERB>, or <ATTRIBUTE> for apply" } else { "<ATTRIBUTE>-<VERB>" };
            let (given, expected) = (super::cut(given, super::SHOWN_CHARS), super::cut(expected, super::SHOWN_CHARS));
            problems.push(Problem::BadExecutable { given, expected, rule });
        }
    }

    let addresses_ok = state::check_addresses(payload, problems);
    let namespace = state::namespace(payload, problems);

    if let Some(id) = payload.get("BUILD_ID").filter(|id| !names::is_valid_build_id(id)) {
        problems.push(Problem::BadControl { key: "BUILD_ID", shown: shown(id), rule: "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$" });
    }

    let base = node("STATE_BASE_ADDRESS");
    // Never shown: the node's base may carry credentials. A query or a dot segment there would
    // let two namespaces address the same state, so the rules of a state address hold for it.
    // Credentials in it only where they are redacted (a secrets source); and state credentials
    // of the node only with a base of the node: they must never go to an address a job chose.
    let base_secret = inputs.node.get("STATE_BASE_ADDRESS").is_some_and(|v| v.value.is_secret());
    let base_rule = base.as_deref().and_then(|base| state::url_problem(base, true)).or_else(|| {
        let userinfo = base.as_deref().is_some_and(state::has_userinfo);
        (userinfo && !base_secret).then_some("carries credentials outside a secrets source: put them in TF_HTTP_USERNAME and TF_HTTP_PASSWORD")
    });
    if let Some(rule) = base_rule {
        problems.push(Problem::BadControl { key: "STATE_BASE_ADDRESS", shown: "(value not shown)".into(), rule });
    }
    if base.is_none() {
        if let Some(key) = ["TF_HTTP_USERNAME", "TF_HTTP_PASSWORD"].into_iter().find(|key| inputs.node.contains_key(*key)) {
            problems.push(Problem::CredentialsWithoutBase { key });
        }
    }
    let state = match (&namespace, base_rule, addresses_ok) {
        (Some(namespace), None, true) => state::address(namespace, base.as_deref(), payload, problems),
        _ => None,
    };

    let events = events_target(&inputs.node).map_err(|p| problems.extend(p)).ok().flatten();

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
        state,
        events,
    })
}

/// A shorter shared secret is too easy to guess (and one under 4 bytes would not be redacted).
pub const MIN_EVENTS_SECRET_LEN: usize = 16;
pub const MAX_EVENTS_SECRET_LEN: usize = 1024;

/// The event target the node configures, if any: `EVENTS_URL` (deploy-env.json or a secrets
/// source) and `EVENTS_SECRET` (a secrets source only). Both keys or neither: one alone is a
/// configuration error, like every other problem here (exit 2, nothing runs).
pub fn events_target(node: &NodeValues) -> Result<Option<Target>, Vec<Problem>> {
    let (url, secret) = match (node.get("EVENTS_URL"), node.get("EVENTS_SECRET")) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(vec![Problem::EventsHalfConfigured { set: "EVENTS_URL", missing: "EVENTS_SECRET" }]),
        (None, Some(_)) => return Err(vec![Problem::EventsHalfConfigured { set: "EVENTS_SECRET", missing: "EVENTS_URL" }]),
        (Some(url), Some(secret)) => (url, secret),
    };
    let mut problems = Vec::new();
    // Never shown: a URL may carry credentials, and it may come from a secrets source.
    let hidden = || "(value not shown)".to_owned();
    let url = match Url::parse(url.value.expose()) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => Some(url),
        _ => {
            problems.push(Problem::BadControl { key: "EVENTS_URL", shown: hidden(), rule: "must be an http:// or https:// URL" });
            None
        }
    };
    let secret = match &secret.value {
        // A secret in deploy-env.json would be neither protected on disk nor redacted.
        Text::Plain(_) => {
            problems.push(Problem::SecretOutsideSecrets { key: "EVENTS_SECRET", origin: secret.origin.clone() });
            None
        }
        Text::Secret(value) if !is_valid_events_secret(value.expose()) => {
            problems.push(Problem::BadControl {
                key: "EVENTS_SECRET",
                shown: hidden(),
                rule: "must be 16 to 1024 printable ASCII characters without spaces",
            });
            None
        }
        Text::Secret(value) => Some(value.clone()),
    };
    match (url, secret) {
        (Some(url), Some(secret)) if problems.is_empty() => Ok(Some(Target { url: Hidden(url), secret })),
        _ => Err(problems),
    }
}

/// Fits an HTTP header value as is (no control characters, nothing to trim).
fn is_valid_events_secret(value: &str) -> bool {
    (MIN_EVENTS_SECRET_LEN..=MAX_EVENTS_SECRET_LEN).contains(&value.len()) && value.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{inputs, node, problems};
    use super::*;
    use serde_json::json;

    const SECRET: &str = "events-secret-0123456789";

    #[test]
    fn executable_must_be_attribute_dash_verb() {
        let mut i = inputs();
        i.set_payload("EXECUTABLE", json!("web-apply; rm -rf /"));
        assert_eq!(
            problems(&i),
            [r#"EXECUTABLE "web-apply; rm -rf /" is not allowed: it must be "web-apply" (<ATTRIBUTE>-<VERB>, or <ATTRIBUTE> for apply)"#]
        );
        i.set_payload("EXECUTABLE", json!("web-apply"));
        assert!(super::super::check(&i).is_ok());
        // A program without verb siblings deploys when run; any other verb needs its own.
        i.set_payload("EXECUTABLE", json!("web"));
        assert_eq!(crate::plan::plan(&i).unwrap().argv[7], "exec web");
        i.verb = "destroy".into();
        assert_eq!(problems(&i), [r#"EXECUTABLE "web" is not allowed: it must be "web-destroy" (<ATTRIBUTE>-<VERB>)"#]);
    }

    #[test]
    fn control_keys_are_validated() {
        let mut i = inputs();
        i.set_payload("ATTRIBUTE", json!("other"));
        i.set_payload("NAMESPACE", json!("Bad NS"));
        i.set_payload("SYSTEM", json!("x86_64"));
        let p = problems(&i);
        assert!(p.iter().any(|l| l.starts_with("unknown ATTRIBUTE \"other\"")), "{p:?}");
        assert!(p.iter().any(|l| l.starts_with("NAMESPACE \"Bad NS\" is invalid")), "{p:?}");
        assert!(p.iter().any(|l| l.starts_with("SYSTEM \"x86_64\" is invalid")), "{p:?}");
    }

    #[test]
    fn a_control_value_from_a_secret_is_not_shown_in_errors() {
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "x86_64-SECRETSYS", true)]));
        i.node.insert("DEPLOYMENT_ROOT".into(), super::super::node::NodeValue { value: Text::Secret(safe_io::secret::Secret::new("relative-SECRETROOT")), origin: "secret".into(), hidden_key: false });
        let p = problems(&i).join("\n");
        assert!(!p.contains("SECRETSYS") && !p.contains("SECRETROOT"), "{p}");
        // Positive control: the same values from deploy-env.json are shown.
        assert!(p.contains("SYSTEM (value not shown: it comes from a secret) is invalid"), "{p}");
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "x86_64-PLAINSYS", false)]));
        assert!(problems(&i).join("\n").contains("SYSTEM \"x86_64-PLAINSYS\" is invalid"));
    }

    fn event_problems(pairs: &[(&str, &str, bool)]) -> Vec<String> {
        events_target(&node(pairs)).unwrap_err().iter().map(ToString::to_string).collect()
    }

    #[test]
    fn neither_event_key_means_no_events() {
        assert!(events_target(&node(&[("A", "x", false)])).unwrap().is_none());
    }

    #[test]
    fn both_event_keys_make_a_target_whose_debug_shows_nothing() {
        let target = events_target(&node(&[("EVENTS_URL", "http://127.0.0.1:9/e?k=v", false), ("EVENTS_SECRET", SECRET, true)])).unwrap().unwrap();
        assert_eq!(target.url.as_str(), "http://127.0.0.1:9/e?k=v");
        assert_eq!(target.secret.expose(), SECRET);
        let shown = format!("{target:?}");
        assert!(!shown.contains(SECRET) && !shown.contains("127.0.0.1"), "{shown}");
    }

    #[test]
    fn one_event_key_alone_names_the_missing_one() {
        assert_eq!(event_problems(&[("EVENTS_URL", "http://x/", false)]), ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]);
        assert_eq!(event_problems(&[("EVENTS_SECRET", SECRET, true)]), ["EVENTS_SECRET is set but EVENTS_URL is not: progress events need both"]);
    }

    #[test]
    fn bad_event_values_are_named_but_never_shown() {
        let p = event_problems(&[("EVENTS_URL", "ftp://user:pw@x/", false), ("EVENTS_SECRET", "short-pw", true)]);
        assert_eq!(
            p,
            [
                "EVENTS_URL (value not shown) is invalid: must be an http:// or https:// URL",
                "EVENTS_SECRET (value not shown) is invalid: must be 16 to 1024 printable ASCII characters without spaces",
            ]
        );
        assert!(!p.concat().contains("pw@") && !p.concat().contains("short-pw"));
        let p = event_problems(&[("EVENTS_URL", "http://x/", false), ("EVENTS_SECRET", "with a space in it, long", true)]);
        assert_eq!(p.len(), 1, "{p:?}");
    }

    #[test]
    fn the_events_secret_must_come_from_a_secrets_source() {
        assert_eq!(
            event_problems(&[("EVENTS_URL", "http://x/", false), ("EVENTS_SECRET", SECRET, false)]),
            ["test:EVENTS_SECRET sets EVENTS_SECRET, which must come from a secrets directory or a secrets env file"]
        );
    }

    #[test]
    fn event_keys_are_the_nodes_and_a_payload_cannot_set_them() {
        let mut i = inputs();
        i.set_payload("EVENTS_URL", json!("http://evil/"));
        i.set_payload("EVENTS_SECRET", json!("x"));
        let plan = crate::plan::plan(&i).unwrap();
        assert!(plan.events.is_none(), "the payload's event settings took effect");
        assert_eq!(plan.ignored, ["EVENTS_SECRET", "EVENTS_URL"]);
        assert_eq!(
            plan.warnings,
            ["payload value for EVENTS_SECRET ignored: only the node may set it", "payload value for EVENTS_URL ignored: only the node may set it"]
        );
        i.set_payload("BUILD_ID", json!("../x"));
        assert_eq!(problems(&i), [r#"BUILD_ID "../x" is invalid: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"#]);
        let mut i = inputs();
        i.node.extend(node(&[("EVENTS_URL", "http://events.example/hook", false)]));
        assert_eq!(problems(&i), ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]);
    }
}
