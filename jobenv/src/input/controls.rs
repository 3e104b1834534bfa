//! The control keys: what jobenv itself needs to run a job (where the programs are, which
//! nixpkgs, which system, attribute, executable and namespace, where state and progress events
//! go). Each is checked against its rule here; none reaches the program as it is.

use std::path::Path;

use reqwest::Url;

use super::admit::Payload;
use super::json::{self, Members};
use super::names;
use super::state::{self, StateAddress};
use super::{Inputs, NodeValues};
use crate::error::Problem;
use crate::events::dd0012::{self, RowKind};
use crate::events::{Target, Wire};
use safe_io::secret::{Hidden, Secret, Text};

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
    /// Where progress events go (`EVENTS_URL`, `EVENTS_SECRET` and `EVENTS_FORMAT` of the node,
    /// and for DD-0012 the row the payload names).
    pub events: Option<Target>,
    /// The payload's `EVENTS_SECRET`, when the node took it: redacted like every secret,
    /// whether or not events are sent.
    pub row_secret: Option<Secret>,
    /// The payload's W3C trace context, when its `TRACEPARENT` is valid ([`trace_context`]).
    pub trace: Option<crate::telemetry::context::Parent>,
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
            problems.push(Problem::BadControl {
                key: "DEPLOYMENT_ROOT",
                shown: shown_node("DEPLOYMENT_ROOT", &root),
                rule: "must be an absolute path",
            });
            None
        }
        Some(root) if !Path::new(&root).exists() => {
            problems.push(Problem::BadControl {
                key: "DEPLOYMENT_ROOT",
                shown: shown_node("DEPLOYMENT_ROOT", &root),
                rule: "does not exist",
            });
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
            let source = if inputs.node.contains_key("NIXPKGS") {
                "NIXPKGS"
            } else {
                "DEPLOYMENT_NIXPKGS"
            };
            problems.push(Problem::BadControl {
                key: "NIXPKGS",
                shown: shown_node(source, &path),
                rule: "must be an absolute path",
            });
            None
        }
        (Some(path), _) | (None, Some(path)) => Some(path),
        (None, None) => {
            problems.push(missing(
                "NIXPKGS",
                " (the node's deploy-env.json must set NIXPKGS or DEPLOYMENT_NIXPKGS)",
            ));
            None
        }
    };

    // A payload SYSTEM the node also sets was dropped with the other keys the node owns.
    let system = node("SYSTEM")
        .or_else(|| payload.get("SYSTEM").cloned())
        .unwrap_or_else(|| inputs.running_system.clone());
    if !names::is_valid_system(&system) {
        problems.push(Problem::BadControl {
            key: "SYSTEM",
            shown: shown_node("SYSTEM", &system),
            rule: "must match ^[a-z0-9_]+-[a-z0-9_]+$",
        });
    }

    let attribute = payload.get("ATTRIBUTE").cloned();
    match &attribute {
        None => problems.push(missing("ATTRIBUTE", " (the job payload must name the deployment)")),
        Some(a) if !names::is_valid_attribute(a) => problems.push(Problem::BadControl {
            key: "ATTRIBUTE",
            shown: shown(a),
            rule: "must match ^[A-Za-z0-9][A-Za-z0-9_-]*$",
        }),
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
            let rule = if inputs.verb == "apply" {
                "<ATTRIBUTE>-<VERB>, or <ATTRIBUTE> for apply"
            } else {
                "<ATTRIBUTE>-<VERB>"
            };
            let (given, expected) = (
                super::cut(given, super::SHOWN_CHARS),
                super::cut(expected, super::SHOWN_CHARS),
            );
            problems.push(Problem::BadExecutable { given, expected, rule });
        }
    }

    let addresses_ok = state::check_addresses(payload, problems);
    let namespace = state::namespace(payload, problems);

    if let Some(id) = payload.get("BUILD_ID").filter(|id| !names::is_valid_build_id(id)) {
        problems.push(Problem::BadControl {
            key: "BUILD_ID",
            shown: shown(id),
            rule: "must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
        });
    }

    let base = node("STATE_BASE_ADDRESS");
    // Never shown: the node's base may carry credentials. A query or a dot segment there would
    // let two namespaces address the same state, so the rules of a state address hold for it.
    // Credentials in it only where they are redacted (a secrets source); and state credentials
    // of the node only with a base of the node: they must never go to an address a job chose.
    let base_secret = inputs
        .node
        .get("STATE_BASE_ADDRESS")
        .is_some_and(|v| v.value.is_secret());
    let base_rule = base
        .as_deref()
        .and_then(|base| state::url_problem(base, true))
        .or_else(|| {
            let userinfo = base.as_deref().is_some_and(state::has_userinfo);
            (userinfo && !base_secret).then_some(
                "carries credentials outside a secrets source: put them in TF_HTTP_USERNAME and TF_HTTP_PASSWORD",
            )
        });
    if let Some(rule) = base_rule {
        problems.push(Problem::BadControl {
            key: "STATE_BASE_ADDRESS",
            shown: "(value not shown)".into(),
            rule,
        });
    }
    if base.is_none() {
        if let Some(key) = ["TF_HTTP_USERNAME", "TF_HTTP_PASSWORD"]
            .into_iter()
            .find(|key| inputs.node.contains_key(*key))
        {
            problems.push(Problem::CredentialsWithoutBase { key });
        }
    }
    let state = match (&namespace, base_rule, addresses_ok) {
        (Some(namespace), None, true) => state::address(namespace, base.as_deref(), payload, problems),
        _ => None,
    };

    let row = payload_row(|key| payload.get(key).cloned())
        .map_err(|p| problems.extend(p))
        .ok()
        .flatten();
    let row_secret = payload.get("EVENTS_SECRET");
    let events = events_target(&inputs.node, row, row_secret.map(String::as_str), &inputs.verb)
        .map_err(|p| problems.extend(p))
        .ok()
        .flatten();

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
        row_secret: row_secret.map(Secret::new),
        trace: None,
    })
}

/// The payload's `TRACEPARENT` and `TRACESTATE`, checked by the W3C rules: a bad one never
/// refuses a job (its trace simply starts at jobenv), it is dropped with a warning naming the
/// rule; a `TRACESTATE` without a valid `TRACEPARENT` goes with it.
pub fn trace_context(
    payload: &std::collections::BTreeMap<&'static str, String>,
    warnings: &mut Vec<String>,
) -> Option<crate::telemetry::context::Parent> {
    let traceparent = payload.get("TRACEPARENT");
    let tracestate = payload.get("TRACESTATE");
    let Some(traceparent) = traceparent else {
        if tracestate.is_some() {
            warnings.push("payload TRACESTATE dropped: it goes with a TRACEPARENT, and there is none".to_owned());
        }
        return None;
    };
    let (parent, problem) = crate::telemetry::context::parse(traceparent, tracestate.map(String::as_str));
    if let Some((key, rule)) = problem {
        let value = if key == "TRACEPARENT" {
            traceparent
        } else {
            tracestate.expect("a bad TRACESTATE is one given")
        };
        let also = if key == "TRACEPARENT" && tracestate.is_some() {
            " (and TRACESTATE with it)"
        } else {
            ""
        };
        warnings.push(format!("payload {key} {} dropped{also}: {rule}", shown(value)));
    }
    parent
}

/// A shorter shared secret is too easy to guess (and one under 4 bytes would not be redacted).
pub const MIN_EVENTS_SECRET_LEN: usize = 16;
pub const MAX_EVENTS_SECRET_LEN: usize = 1024;
const EVENTS_SECRET_RULE: &str = "must be 16 to 1024 printable ASCII characters without spaces";

/// The DD-0012 row a payload names (`EVENTS_KIND`, `EVENTS_ROW_ID`), parsed: these two parts,
/// and never the text a payload wrote, make the address of its notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub kind: RowKind,
    pub id: u64,
}

/// The row a payload names, if any: both keys or neither, each against its grammar. Checked on
/// every node, like `BUILD_ID`; only a node whose events are DD-0012's sends to it.
pub fn payload_row(get: impl Fn(&str) -> Option<String>) -> Result<Option<Row>, Vec<Problem>> {
    let (kind, id) = match (get("EVENTS_KIND"), get("EVENTS_ROW_ID")) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(vec![Problem::EventsHalfConfigured {
                set: "EVENTS_KIND",
                missing: "EVENTS_ROW_ID",
            }]);
        }
        (None, Some(_)) => {
            return Err(vec![Problem::EventsHalfConfigured {
                set: "EVENTS_ROW_ID",
                missing: "EVENTS_KIND",
            }]);
        }
        (Some(kind), Some(id)) => (kind, id),
    };
    let mut problems = Vec::new();
    let parsed_kind = RowKind::parse(&kind);
    if parsed_kind.is_none() {
        problems.push(Problem::BadControl {
            key: "EVENTS_KIND",
            shown: shown(&kind),
            rule: "must be jobs or deployments",
        });
    }
    let parsed_id = dd0012::row_id(&id);
    if parsed_id.is_none() {
        let rule = "must be a positive integer of at most 18 digits, without a sign or a leading zero";
        problems.push(Problem::BadControl {
            key: "EVENTS_ROW_ID",
            shown: shown(&id),
            rule,
        });
    }
    match (parsed_kind, parsed_id) {
        (Some(kind), Some(id)) => Ok(Some(Row { kind, id })),
        _ => Err(problems),
    }
}

/// Whether the node's events are DD-0012's, whose rows have secrets of their own: only then is
/// a payload's `EVENTS_SECRET` taken (and a node's still wins).
pub fn takes_row_secrets(node: &NodeValues) -> bool {
    node.get("EVENTS_FORMAT")
        .is_some_and(|format| format.value.expose() == "dd-0012")
}

/// The event target of a job, if the node configures events: `EVENTS_URL` (deploy-env.json or
/// a secrets source), `EVENTS_SECRET` (a secrets source only) and `EVENTS_FORMAT`. In jobenv's
/// format both keys or neither, and the events go to `EVENTS_URL`; in DD-0012's, `EVENTS_URL`
/// is the base of the `row`'s address and the secret the payload's (`row_secret`), the row's
/// own: who can write a row is who holds its secret. A node's `EVENTS_SECRET` is refused there,
/// since with it the payload alone would choose the row it writes to. Every problem is a
/// configuration or input error (exit 2, nothing runs).
pub fn events_target(
    node: &NodeValues,
    row: Option<Row>,
    row_secret: Option<&str>,
    verb: &str,
) -> Result<Option<Target>, Vec<Problem>> {
    let (url, secret, format) = (
        node.get("EVENTS_URL"),
        node.get("EVENTS_SECRET"),
        node.get("EVENTS_FORMAT"),
    );
    let dd0012 = match format.map(|f| f.value.expose()) {
        None | Some("jobenv") => false,
        Some("dd-0012") => true,
        Some(other) => {
            let shown = if format.is_some_and(|f| f.value.is_secret()) {
                "(value not shown: it comes from a secret)".into()
            } else {
                shown(other)
            };
            return Err(vec![Problem::BadControl {
                key: "EVENTS_FORMAT",
                shown,
                rule: "must be jobenv or dd-0012",
            }]);
        }
    };
    let url = match (url, secret, format) {
        (None, None, None) => return Ok(None),
        (None, _, Some(_)) => {
            return Err(vec![Problem::EventsHalfConfigured {
                set: "EVENTS_FORMAT",
                missing: "EVENTS_URL",
            }]);
        }
        (None, Some(_), None) => {
            return Err(vec![Problem::EventsHalfConfigured {
                set: "EVENTS_SECRET",
                missing: "EVENTS_URL",
            }]);
        }
        (Some(_), None, _) if !dd0012 => {
            return Err(vec![Problem::EventsHalfConfigured {
                set: "EVENTS_URL",
                missing: "EVENTS_SECRET",
            }]);
        }
        (Some(url), _, _) => url,
    };
    let mut problems = Vec::new();
    // Never shown: a URL may carry credentials, and it may come from a secrets source.
    let hidden = || "(value not shown)".to_owned();
    let url = match Url::parse(url.value.expose()) {
        Ok(url) if dd0012 && (url.query().is_some() || url.fragment().is_some()) => {
            let rule = "must be an http:// or https:// URL without a query or a fragment: the base of <kind>/<row>/notifications";
            problems.push(Problem::BadControl {
                key: "EVENTS_URL",
                shown: hidden(),
                rule,
            });
            None
        }
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => Some(url),
        _ => {
            problems.push(Problem::BadControl {
                key: "EVENTS_URL",
                shown: hidden(),
                rule: "must be an http:// or https:// URL",
            });
            None
        }
    };
    let node_secret = match secret.map(|secret| (&secret.value, secret)) {
        None => None,
        // A secret in deploy-env.json would be neither protected on disk nor redacted.
        Some((Text::Plain(_), secret)) => {
            problems.push(Problem::SecretOutsideSecrets {
                key: "EVENTS_SECRET",
                origin: secret.origin.clone(),
            });
            None
        }
        Some((Text::Secret(value), _)) if !is_valid_events_secret(value.expose()) => {
            problems.push(Problem::BadControl {
                key: "EVENTS_SECRET",
                shown: hidden(),
                rule: EVENTS_SECRET_RULE,
            });
            None
        }
        // A DD-0012 row is written with its own secret; the node's would open every row to
        // every job (and to whoever holds the front-end's token).
        Some((Text::Secret(_), secret)) if dd0012 => {
            problems.push(Problem::NodeSecretForRows {
                origin: secret.origin.clone(),
            });
            None
        }
        Some((Text::Secret(value), _)) => Some(value.clone()),
    };
    let Some(url) = url.filter(|_| problems.is_empty()) else {
        return Err(problems);
    };
    let (Some(row), true) = (row, dd0012) else {
        // jobenv's format (which has a node secret, checked above), or a job that names no row.
        return Ok(node_secret.filter(|_| !dd0012).map(|secret| Target {
            url: Hidden(url),
            secret,
            wire: Wire::Jobenv,
        }));
    };
    if row.kind == RowKind::Deployments && !matches!(verb, "apply" | "destroy") {
        return Err(vec![Problem::DeploymentRowVerb { verb: verb.to_owned() }]);
    }
    // The row's secret, which only the payload brings (a node's was refused above).
    let secret = match row_secret {
        Some(secret) if is_valid_events_secret(secret) => Secret::new(secret),
        Some(_) => {
            return Err(vec![Problem::BadControl {
                key: "EVENTS_SECRET",
                shown: hidden(),
                rule: EVENTS_SECRET_RULE,
            }]);
        }
        None => {
            let hint = " (a payload that names a DD-0012 row brings the row's own secret)";
            return Err(vec![Problem::MissingControl {
                key: "EVENTS_SECRET",
                hint,
            }]);
        }
    };
    let url = dd0012::notifications_url(&url, row.kind, row.id);
    Ok(Some(Target {
        url: Hidden(url),
        secret,
        wire: Wire::Dd0012(row.kind),
    }))
}

/// The event target of a job that is rejected, so its front-end still sees why: the node's
/// settings as [`events_target`] takes them, with the row and the secret read from the payload
/// as it is (nothing when either is not good).
pub fn target_of_rejected(node: &NodeValues, payload: &Members, verb: &str) -> Option<Target> {
    let get = |key: &str| payload.get(key).and_then(|raw| json::text(raw));
    let row = payload_row(get).ok().flatten();
    let secret = get("EVENTS_SECRET").filter(|_| takes_row_secrets(node));
    events_target(node, row, secret.as_deref(), verb).ok().flatten()
}

/// Fits an HTTP header value as is (no control characters, nothing to trim).
fn is_valid_events_secret(value: &str) -> bool {
    (MIN_EVENTS_SECRET_LEN..=MAX_EVENTS_SECRET_LEN).contains(&value.len())
        && value.bytes().all(|b| b.is_ascii_graphic())
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
            [
                r#"EXECUTABLE "web-apply; rm -rf /" is not allowed: it must be "web-apply" (<ATTRIBUTE>-<VERB>, or <ATTRIBUTE> for apply)"#
            ]
        );
        i.set_payload("EXECUTABLE", json!("web-apply"));
        assert!(super::super::check(&i).is_ok());
        // A program without verb siblings deploys when run; any other verb needs its own.
        i.set_payload("EXECUTABLE", json!("web"));
        assert_eq!(crate::plan::plan(&i).unwrap().argv[5], "exec web");
        i.verb = "destroy".into();
        assert_eq!(
            problems(&i),
            [r#"EXECUTABLE "web" is not allowed: it must be "web-destroy" (<ATTRIBUTE>-<VERB>)"#]
        );
    }

    #[test]
    fn control_keys_are_validated() {
        let mut i = inputs();
        i.set_payload("ATTRIBUTE", json!("other"));
        i.set_payload("NAMESPACE", json!("Bad NS"));
        i.set_payload("SYSTEM", json!("x86_64"));
        let p = problems(&i);
        assert!(p.iter().any(|l| l.starts_with("unknown ATTRIBUTE \"other\"")), "{p:?}");
        assert!(
            p.iter().any(|l| l.starts_with("NAMESPACE \"Bad NS\" is invalid")),
            "{p:?}"
        );
        assert!(p.iter().any(|l| l.starts_with("SYSTEM \"x86_64\" is invalid")), "{p:?}");
    }

    #[test]
    fn a_control_value_from_a_secret_is_not_shown_in_errors() {
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "x86_64-SECRETSYS", true)]));
        i.node.insert(
            "DEPLOYMENT_ROOT".into(),
            super::super::node::NodeValue {
                value: Text::Secret(safe_io::secret::Secret::new("relative-SECRETROOT")),
                origin: "secret".into(),
                hidden_key: false,
            },
        );
        let p = problems(&i).join("\n");
        assert!(!p.contains("SECRETSYS") && !p.contains("SECRETROOT"), "{p}");
        // Positive control: the same values from deploy-env.json are shown.
        assert!(
            p.contains("SYSTEM (value not shown: it comes from a secret) is invalid"),
            "{p}"
        );
        let mut i = inputs();
        i.node.extend(node(&[("SYSTEM", "x86_64-PLAINSYS", false)]));
        assert!(
            problems(&i)
                .join("\n")
                .contains("SYSTEM \"x86_64-PLAINSYS\" is invalid")
        );
    }

    #[test]
    fn a_bad_trace_context_is_dropped_with_a_warning_never_refused() {
        const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let planned = |pairs: &[(&str, &str)]| {
            let mut i = inputs();
            for (key, value) in pairs {
                i.set_payload(key, json!(value));
            }
            crate::plan::plan(&i).expect("never refused")
        };
        let plan = planned(&[("TRACEPARENT", GOOD), ("TRACESTATE", "fe=1")]);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
        assert_eq!(plan.env["TRACEPARENT"].value.expose(), GOOD);
        assert_eq!(plan.env["TRACESTATE"].value.expose(), "fe=1");
        assert_eq!(plan.env["TRACEPARENT"].source, crate::plan::Source::Payload);
        let plan = planned(&[("TRACEPARENT", "00-ab-cd-01"), ("TRACESTATE", "fe=1")]);
        assert_eq!(
            plan.warnings,
            [format!(
                "payload TRACEPARENT \"00-ab-cd-01\" dropped (and TRACESTATE with it): {}",
                crate::telemetry::context::TRACEPARENT_RULE
            )]
        );
        assert!(!plan.env.contains_key("TRACEPARENT") && !plan.env.contains_key("TRACESTATE"));
        let plan = planned(&[("TRACEPARENT", GOOD), ("TRACESTATE", "BAD=1")]);
        assert_eq!(
            plan.warnings,
            [format!(
                "payload TRACESTATE \"BAD=1\" dropped: {}",
                crate::telemetry::context::TRACESTATE_RULE
            )]
        );
        assert!(plan.env.contains_key("TRACEPARENT") && !plan.env.contains_key("TRACESTATE"));
        let plan = planned(&[("TRACESTATE", "fe=1")]);
        assert_eq!(
            plan.warnings,
            ["payload TRACESTATE dropped: it goes with a TRACEPARENT, and there is none"]
        );
        // A node cannot set them: they are a job's.
        let mut i = inputs();
        i.node.extend(node(&[("TRACEPARENT", GOOD, false)]));
        assert_eq!(
            problems(&i),
            ["test:TRACEPARENT sets TRACEPARENT, which only a job payload may set"]
        );
    }

    fn event_problems(pairs: &[(&str, &str, bool)]) -> Vec<String> {
        events_target(&node(pairs), None, None, "apply")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn neither_event_key_means_no_events() {
        assert!(
            events_target(&node(&[("A", "x", false)]), None, None, "apply")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn both_event_keys_make_a_target_whose_debug_shows_nothing() {
        let target = events_target(
            &node(&[
                ("EVENTS_URL", "http://127.0.0.1:9/e?k=v", false),
                ("EVENTS_SECRET", SECRET, true),
            ]),
            None,
            None,
            "apply",
        )
        .unwrap()
        .unwrap();
        assert_eq!(target.url.as_str(), "http://127.0.0.1:9/e?k=v");
        assert_eq!(target.secret.expose(), SECRET);
        let shown = format!("{target:?}");
        assert!(!shown.contains(SECRET) && !shown.contains("127.0.0.1"), "{shown}");
    }

    #[test]
    fn one_event_key_alone_names_the_missing_one() {
        assert_eq!(
            event_problems(&[("EVENTS_URL", "http://x/", false)]),
            ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]
        );
        assert_eq!(
            event_problems(&[("EVENTS_SECRET", SECRET, true)]),
            ["EVENTS_SECRET is set but EVENTS_URL is not: progress events need both"]
        );
    }

    #[test]
    fn bad_event_values_are_named_but_never_shown() {
        let p = event_problems(&[
            ("EVENTS_URL", "ftp://user:pw@x/", false),
            ("EVENTS_SECRET", "short-pw", true),
        ]);
        assert_eq!(
            p,
            [
                "EVENTS_URL (value not shown) is invalid: must be an http:// or https:// URL",
                "EVENTS_SECRET (value not shown) is invalid: must be 16 to 1024 printable ASCII characters without spaces",
            ]
        );
        assert!(!p.concat().contains("pw@") && !p.concat().contains("short-pw"));
        let p = event_problems(&[
            ("EVENTS_URL", "http://x/", false),
            ("EVENTS_SECRET", "with a space in it, long", true),
        ]);
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
            [
                "payload value for EVENTS_SECRET ignored: only the node may set it",
                "payload value for EVENTS_URL ignored: only the node may set it"
            ]
        );
        i.set_payload("BUILD_ID", json!("../x"));
        assert_eq!(
            problems(&i),
            [r#"BUILD_ID "../x" is invalid: must match ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"#]
        );
        let mut i = inputs();
        i.node
            .extend(node(&[("EVENTS_URL", "http://events.example/hook", false)]));
        assert_eq!(
            problems(&i),
            ["EVENTS_URL is set but EVENTS_SECRET is not: progress events need both"]
        );
    }

    const ROW_SECRET: &str = "row-secret-abcdef0123456";

    /// A node whose events are DD-0012's, at `https://web.example/api`, with `pairs` added.
    fn dd0012_inputs(pairs: &[(&str, &str, bool)]) -> super::super::Inputs {
        let mut i = inputs();
        i.node.extend(node(&[
            ("EVENTS_URL", "https://web.example/api", false),
            ("EVENTS_FORMAT", "dd-0012", false),
        ]));
        i.node.extend(node(pairs));
        i
    }

    #[test]
    fn a_dd0012_row_is_addressed_from_its_parts_with_the_rows_secret() {
        let mut i = dd0012_inputs(&[]);
        i.set_payload("EVENTS_KIND", json!("deployments"));
        i.set_payload("EVENTS_ROW_ID", json!(42));
        i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        let plan = crate::plan::plan(&i).unwrap();
        let target = plan.events.as_ref().unwrap();
        assert_eq!(
            target.url.as_str(),
            "https://web.example/api/deployments/42/notifications"
        );
        assert_eq!(
            (target.secret.expose(), target.wire),
            (ROW_SECRET, Wire::Dd0012(RowKind::Deployments))
        );
        assert!(
            plan.warnings.is_empty() && plan.ignored.is_empty(),
            "{:?}",
            plan.warnings
        );
        // Redacted like any secret, and never given to the program.
        assert!(plan.secrets.contains(&ROW_SECRET.as_bytes().to_vec()));
        assert!(plan.env.values().all(|var| !var.value.expose().contains(ROW_SECRET)));
        for key in [
            "EVENTS_KIND",
            "EVENTS_ROW_ID",
            "EVENTS_SECRET",
            "EVENTS_URL",
            "EVENTS_FORMAT",
        ] {
            assert!(!plan.env.contains_key(key), "{key} reached the program");
        }
        // A row id given as a string is the same row.
        i.set_payload("EVENTS_ROW_ID", json!("42"));
        assert_eq!(
            crate::plan::plan(&i).unwrap().events.unwrap().url.as_str(),
            "https://web.example/api/deployments/42/notifications"
        );
    }

    /// With one secret for every row, the payload alone would choose which row it writes to: a
    /// dd-0012 node with a secret of its own is refused, whatever the job, with what to do.
    #[test]
    fn a_node_wide_secret_is_refused_on_a_dd0012_node() {
        let refused = "test:EVENTS_SECRET sets EVENTS_SECRET, but EVENTS_FORMAT is dd-0012, whose rows have secrets of their own: one secret for every row would let any job post to any row. Remove EVENTS_SECRET from the node; the front-end sends each row's secret in the payload's EVENTS_SECRET";
        let mut i = dd0012_inputs(&[("EVENTS_SECRET", SECRET, true)]);
        assert_eq!(problems(&i), [refused], "a job that names no row");
        i.set_payload("EVENTS_KIND", json!("jobs"));
        i.set_payload("EVENTS_ROW_ID", json!(7));
        assert_eq!(problems(&i), [refused], "a job that names a row");
        i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        assert_eq!(problems(&i), [refused], "a job that brings the row's secret too");
        // Without a secret anywhere, the row cannot be written to.
        let mut i = dd0012_inputs(&[]);
        i.set_payload("EVENTS_KIND", json!("jobs"));
        i.set_payload("EVENTS_ROW_ID", json!(7));
        assert_eq!(
            problems(&i),
            ["EVENTS_SECRET is required but not set (a payload that names a DD-0012 row brings the row's own secret)"]
        );
        // Positive controls: the same node without its secret takes the row's from the payload,
        // and a job that names no row gets no events.
        i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        let plan = crate::plan::plan(&i).unwrap();
        assert_eq!(plan.events.unwrap().secret.expose(), ROW_SECRET);
        let plan = crate::plan::plan(&dd0012_inputs(&[])).unwrap();
        assert!(plan.events.is_none());
    }

    #[test]
    fn a_payloads_events_secret_is_taken_only_in_the_dd0012_format() {
        let mut i = inputs();
        i.node.extend(node(&[
            ("EVENTS_URL", "http://events.example/hook", false),
            ("EVENTS_SECRET", SECRET, true),
            ("EVENTS_FORMAT", "jobenv", false),
        ]));
        i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        i.set_payload("EVENTS_KIND", json!("jobs"));
        i.set_payload("EVENTS_ROW_ID", json!(7));
        let plan = crate::plan::plan(&i).unwrap();
        let target = plan.events.unwrap();
        assert_eq!(
            (target.url.as_str(), target.secret.expose(), target.wire),
            ("http://events.example/hook", SECRET, Wire::Jobenv)
        );
        assert_eq!(
            plan.warnings,
            ["payload value for EVENTS_SECRET ignored: the node sets it"]
        );
        // On a node without events it is the node's key alone, as before.
        let mut i = inputs();
        i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        assert_eq!(
            crate::plan::plan(&i).unwrap().warnings,
            ["payload value for EVENTS_SECRET ignored: only the node may set it"]
        );
    }

    #[test]
    fn a_payload_cannot_send_a_request_anywhere_but_its_row_under_the_nodes_base() {
        for (kind, row) in [
            (json!("jobs"), json!("7/../../../evil.example/x")),
            (json!("jobs"), json!("7%2F..%2F..%2Fx")),
            (json!("jobs"), json!("7/")),
            (json!("jobs"), json!("007")),
            (json!("jobs"), json!("+7")),
            (json!("jobs"), json!(-7)),
            (json!("jobs"), json!(0)),
            (json!("jobs"), json!(7.0)),
            (json!("jobs"), json!(1e3)),
            (json!("jobs"), json!("12345678901234567890123456789")),
            (json!("jobs"), json!(12345678901234567890u64)),
            (json!("jobs"), json!("7?x=1")),
            (json!("jobs"), json!("7#x")),
            (json!("jobs"), json!("@evil.example")),
            (json!("../jobs"), json!(7)),
            (json!("jobs/../../x"), json!(7)),
            (json!("JOBS"), json!(7)),
            (json!("https://evil.example/"), json!(7)),
            (json!(["jobs"]), json!(7)),
        ] {
            let mut i = dd0012_inputs(&[]);
            i.set_payload("EVENTS_KIND", kind.clone());
            i.set_payload("EVENTS_ROW_ID", row.clone());
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
            i.set_payload("EVENTS_URL", json!("https://evil.example/"));
            let p = problems(&i);
            assert!(
                !p.is_empty()
                    && p.iter()
                        .all(|l| l.starts_with("EVENTS_KIND ") || l.starts_with("EVENTS_ROW_ID ")),
                "{kind} {row}: {p:?}"
            );
            let payload = i.payload.0.clone();
            assert!(
                target_of_rejected(&i.node, &payload, "apply").is_none(),
                "{kind} {row}: a rejected job's events went somewhere"
            );
        }
        // Positive control: the same payload with a good row reaches the node's host only, even
        // with the payload's own EVENTS_URL (dropped: the node sets it).
        let mut i = dd0012_inputs(&[]);
        i.set_payload("EVENTS_KIND", json!("jobs"));
        i.set_payload("EVENTS_ROW_ID", json!(7));
        i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        i.set_payload("EVENTS_URL", json!("https://evil.example/"));
        let plan = crate::plan::plan(&i).unwrap();
        assert_eq!(
            plan.events.unwrap().url.as_str(),
            "https://web.example/api/jobs/7/notifications"
        );
        assert_eq!(
            plan.warnings,
            ["payload value for EVENTS_URL ignored: the node sets it"]
        );
        let payload = i.payload.0.clone();
        assert_eq!(
            target_of_rejected(&i.node, &payload, "apply").unwrap().url.as_str(),
            "https://web.example/api/jobs/7/notifications"
        );
    }

    #[test]
    fn dd0012_settings_are_checked() {
        let row = |i: &mut super::super::Inputs| {
            i.set_payload("EVENTS_KIND", json!("deployments"));
            i.set_payload("EVENTS_ROW_ID", json!(3));
            i.set_payload("EVENTS_SECRET", json!(ROW_SECRET));
        };
        let mut i = dd0012_inputs(&[]);
        row(&mut i);
        i.verb = "plan".into();
        assert_eq!(
            problems(&i),
            ["EVENTS_KIND deployments is for apply and destroy: a plan job reports on a jobs row"]
        );
        i.verb = "destroy".into();
        assert!(crate::plan::plan(&i).is_ok());
        let mut i = dd0012_inputs(&[]);
        i.set_payload("EVENTS_ROW_ID", json!(3));
        assert_eq!(
            problems(&i),
            ["EVENTS_ROW_ID is set but EVENTS_KIND is not: progress events need both"]
        );
        let mut i = dd0012_inputs(&[]);
        row(&mut i);
        i.set_payload("EVENTS_SECRET", json!("short"));
        assert_eq!(
            problems(&i),
            [
                "EVENTS_SECRET (value not shown) is invalid: must be 16 to 1024 printable ASCII characters without spaces"
            ]
        );
        let mut i = dd0012_inputs(&[]);
        i.node
            .extend(node(&[("EVENTS_URL", "https://web.example/api?token=x", false)]));
        assert_eq!(
            problems(&i),
            [
                "EVENTS_URL (value not shown) is invalid: must be an http:// or https:// URL without a query or a fragment: the base of <kind>/<row>/notifications"
            ]
        );
        let mut i = inputs();
        i.node.extend(node(&[("EVENTS_FORMAT", "dd-0012", false)]));
        assert_eq!(
            problems(&i),
            ["EVENTS_FORMAT is set but EVENTS_URL is not: progress events need both"]
        );
        let mut i = dd0012_inputs(&[("EVENTS_FORMAT", "webhook", false)]);
        assert_eq!(
            problems(&i),
            [r#"EVENTS_FORMAT "webhook" is invalid: must be jobenv or dd-0012"#]
        );
        i.node.extend(node(&[("EVENTS_FORMAT", "DD-0012", true)]));
        assert_eq!(
            problems(&i),
            ["EVENTS_FORMAT (value not shown: it comes from a secret) is invalid: must be jobenv or dd-0012"]
        );
        // The row keys are payload keys, checked on every node.
        let mut i = inputs();
        i.node.extend(node(&[("EVENTS_KIND", "jobs", false)]));
        i.set_payload("EVENTS_KIND", json!("rows"));
        i.set_payload("EVENTS_ROW_ID", json!(1));
        assert_eq!(
            problems(&i),
            [
                "test:EVENTS_KIND sets EVENTS_KIND, which only a job payload may set",
                r#"EVENTS_KIND "rows" is invalid: must be jobs or deployments"#
            ]
        );
    }
}
