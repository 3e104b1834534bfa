//! What the modules share: whole-line assertions with wildcards, for the log lines the manual
//! (docs/operators/bootstrap.md) specifies.

/// Whether `line` is `pattern`, where each `[..]` in the pattern stands for any text (none
/// included), as in cargo-test-support's `str![..]` patterns.
pub fn matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Asserts that `line` is `pattern` as a whole (see [`matches`]).
#[track_caller]
pub fn assert_line(line: &str, pattern: &str) {
    assert!(matches(pattern, line), "the line\n  {line}\nis not\n  {pattern}");
}

/// Asserts that one line of `output` is `pattern` as a whole.
#[track_caller]
pub fn assert_has_line(output: &str, pattern: &str) {
    assert!(
        output.lines().any(|l| matches(pattern, l)),
        "no line is\n  {pattern}\nin:\n{output}"
    );
}

#[test]
fn wildcards_stand_for_any_text_and_the_rest_must_match_whole() {
    assert!(matches("a: [..]: created", "a: anything at all: created"));
    assert!(matches("a[..]", "a"));
    assert!(matches("[..]b[..]d", "xbyd"));
    assert!(matches("exact", "exact"));
    // Positive controls: a line that only contains the text does not match.
    assert!(!matches("a: [..]: created", "x a: y: created"));
    assert!(!matches("a: [..]: created", "a: y: created!"));
    assert!(!matches("exact", "exact and more"));
    assert!(!matches("[..]b[..]d", "xdyb"));
}

use fediversity_testkit::node::Node;
use fediversity_testkit::openbao::{self, OpenBao};
use fediversity_testkit::windmill_fake::{Profile, Recorded};

/// The front-end token's label and the UI token's, by default.
pub const FRONT_END: &str = "fediversity";
pub const UI: &str = "fediversity-ui";
/// The front-end's operator, by default.
pub const OPERATOR_EMAIL: &str = "frontend@fediversity.invalid";
pub const OPERATOR: &str = "frontend";

/// A fresh node (see [`Node::new`]) whose OpenBao token may also read its secret, as `--check`
/// needs to compare the stored token; its Windmill answers as nixpkgs' (1.587).
pub fn node() -> Node {
    node_on(fediversity_testkit::windmill_fake::DEFAULT_PROFILE)
}

/// [`node`], with a Windmill that answers as `profile`.
pub fn node_on(profile: Profile) -> Node {
    let bao = openbao::shared();
    let name = OpenBao::unique("windmill");
    let token = bao.token_with_policy(
        &OpenBao::unique("reader-writer"),
        &format!("path \"secret/data/{name}/apiToken\" {{ capabilities = [\"read\", \"create\", \"update\"] }}\n"),
    );
    Node::with_openbao_on(&bao.addr, &format!("secret/{name}/apiToken"), &token, profile)
}

/// A test per profile: `on_every_profile!(name, |profile| body)` makes the module `name` with one
/// test per version profile of the fake (`v1_509` … `v1_788`), each running `body`.
#[macro_export]
macro_rules! on_every_profile {
    ($name:ident, $body:expr) => {
        mod $name {
            use fediversity_testkit::windmill_fake::Profile;
            fn body(profile: Profile) {
                let body: fn(Profile) = $body;
                body(profile)
            }
            #[test]
            fn v1_509() {
                body(Profile::V1_509)
            }
            #[test]
            fn v1_587() {
                body(Profile::V1_587)
            }
            #[test]
            fn v1_743() {
                body(Profile::V1_743)
            }
            #[test]
            fn v1_788() {
                body(Profile::V1_788)
            }
        }
    };
}

/// The token the node's OpenBao secret holds (KV v2 at the shared server's `secret/`).
pub fn stored_token(node: &Node) -> Option<String> {
    let rest = node
        .bao_path
        .strip_prefix("secret/")
        .expect("a path on the shared server's secret/ mount");
    let secret = openbao::shared().read_kv2("secret", rest)?;
    Some(secret["value"].as_str().expect("a string field `value`").to_owned())
}

/// The tokens of `label` in the fake's token table, whoever's.
pub fn labeled(node: &Node, label: &str) -> Vec<String> {
    node.windmill
        .tokens()
        .into_iter()
        .filter(|t| t.label == label)
        .map(|t| t.token)
        .collect()
}

/// The tokens of the user `email` in the fake's token table.
pub fn of(node: &Node, email: &str) -> Vec<String> {
    node.windmill
        .tokens()
        .into_iter()
        .filter(|t| t.email == email)
        .map(|t| t.token)
        .collect()
}

/// The one front-end token of the node (the one a run stores in OpenBao): the operator's only.
#[track_caller]
pub fn front_token(node: &Node) -> String {
    let tokens = of(node, OPERATOR_EMAIL);
    assert_eq!(tokens.len(), 1, "one token of the operator");
    tokens[0].clone()
}

/// The default scopes of the front-end's token, for the folder `fediversity`, as the line names
/// them.
pub const DEFAULT_SCOPES: &str = "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy jobs:write";
/// The default run scope.
pub const RUN_SCOPE: &str = "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy";

/// What step 7's line says of the proof on `profile` with the default scopes.
pub fn proof(profile: Profile) -> String {
    let absent: &[&str] = match profile {
        Profile::V1_509 => &[
            "a dynamic select",
            "an inline preview",
            "importing jobs",
            "deleting jobs",
        ],
        Profile::V1_587 => &["an inline preview", "importing jobs", "deleting jobs"],
        _ => &[],
    };
    let gaps: &[(&str, &str)] = match profile {
        Profile::V1_509 | Profile::V1_587 => &[
            ("reading a job of the superadmin's", "1.715"),
            ("cancelling a job of the superadmin's", "1.772"),
        ],
        Profile::V1_743 => &[("cancelling a job of the superadmin's", "1.772")],
        Profile::V1_788 => &[],
    };
    let refused: Vec<&str> = REFUSALS
        .iter()
        .copied()
        .filter(|r| !absent.contains(r) && !gaps.iter().any(|(g, _)| g == r))
        .collect();
    let mut text = format!(
        "which ran, read and cancelled a job of f/fediversity/deploy and f/fediversity/destroy, and was refused {} (401 or 403 each)",
        refused.join(", ")
    );
    if !absent.is_empty() {
        text.push_str(&format!("; this Windmill has no route for {}", absent.join(", ")));
    }
    if !gaps.is_empty() {
        let gaps: Vec<String> = gaps
            .iter()
            .map(|(what, since)| format!("{what} (refused from Windmill {since} on)"))
            .collect();
        text.push_str(&format!("; granted by this Windmill: {}", gaps.join(", ")));
    }
    if profile.pastes_entrypoint_override() {
        text.push_str(&format!("; {FLAWED}"));
    }
    text
}

/// What step 7's line adds on a version with the flaw no call shows (see `flaws`).
pub const FLAWED: &str =
    "open to code of the token's choosing on the worker: GHSA-wxjq-w5pj-jqhx (fixed in Windmill 1.703.3)";

/// Every call the proof makes the token be refused, in order.
pub const REFUSALS: [&str; 23] = [
    "a preview",
    "a preview waiting for its result",
    "a flow preview",
    "a dynamic select",
    "a dependency job",
    "an inline preview",
    "another script of the folder",
    "a script outside the folder",
    "a batch of jobs",
    "importing jobs",
    "deleting jobs",
    "deleting its own job",
    "reading a job of the superadmin's",
    "cancelling a job of the superadmin's",
    "creating a script",
    "creating a flow",
    "creating a variable",
    "creating a resource",
    "creating a folder",
    "changing the folder's ACL",
    "reading a global setting",
    "minting a token",
    "another workspace",
];

/// The whole line of step 7 for the default scopes: `place` is `<path> field <field> (<mount>)`.
pub fn openbao_line(place: &str, profile: Profile, outcome: &str) -> String {
    format!(
        "fediversity-windmill-bootstrap: step 7/9 openbao: {place} holds the new token labeled fediversity \
         (scopes {DEFAULT_SCOPES}; bound to workspace fediversity) of the operator frontend, {}{outcome}",
        proof(profile)
    )
}

/// The calls the front-end's token `token` made (step 7's proof), as `<method> <path>` with job
/// ids as `{id}`, in order.
pub fn proof_calls(requests: &[Recorded], token: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.token.as_deref() == Some(token))
        .map(|r| format!("{} {}", r.method, without_ids(&r.path)))
        .collect()
}

/// A path with every job id (a UUID) replaced by `{id}`.
pub fn without_ids(path: &str) -> String {
    path.split('/')
        .map(|part| {
            if part.len() == 36 && part.chars().filter(|c| *c == '-').count() == 4 {
                "{id}"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether `request` is a script upload of the bootstrap: a `scripts/create` with a script in its
/// body (step 7's proof sends one with an empty body, with the front-end's new token).
pub fn is_upload(request: &Recorded) -> bool {
    request.is("POST", "/api/w/fediversity/scripts/create") && request.body != "{}"
}
