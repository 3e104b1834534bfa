//! The control keys: what jobenv itself needs to run a job (where the programs are, which
//! nixpkgs, which system, attribute, executable and namespace, where state and progress events
//! go). Each is checked against its rule here; none reaches the program as it is.

use std::path::Path;

use reqwest::Url;

use super::admit::Payload;
use super::json::{self, Members};
use super::names;
use super::node::takes_row_secrets;
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
}
