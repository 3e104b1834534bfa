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

/// The front-end token's label and the UI token's, by default.
pub const FRONT_END: &str = "fediversity";
pub const UI: &str = "fediversity-ui";

/// A fresh node (see [`Node::new`]) whose OpenBao token may also read its secret, as `--check`
/// needs to compare the stored token.
pub fn node() -> Node {
    let bao = openbao::shared();
    let name = OpenBao::unique("windmill");
    let token = bao.token_with_policy(
        &OpenBao::unique("reader-writer"),
        &format!("path \"secret/data/{name}/apiToken\" {{ capabilities = [\"read\", \"create\", \"update\"] }}\n"),
    );
    Node::with_openbao(&bao.addr, &format!("secret/{name}/apiToken"), &token)
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

/// The tokens of `label` in the fake's token table.
pub fn labeled(node: &Node, label: &str) -> Vec<String> {
    node.windmill
        .tokens()
        .into_iter()
        .filter(|t| t.label == label)
        .map(|t| t.token)
        .collect()
}

/// The one front-end token of the node (the one a run stores in OpenBao).
#[track_caller]
pub fn front_token(node: &Node) -> String {
    let tokens = labeled(node, FRONT_END);
    assert_eq!(tokens.len(), 1, "one token labeled {FRONT_END}");
    tokens[0].clone()
}

/// The default scopes of the front-end's token, for the folder `fediversity`.
pub const DEFAULT_SCOPES: &str = "jobs:run:scripts:f/fediversity/deploy,f/fediversity/destroy";

/// What step 7's line says of the proof: the five calls refused, `read` the read probe.
pub fn refused(read: &str) -> String {
    format!(
        "refused GET /api/w/fediversity/{read}, POST /api/w/fediversity/jobs/run/preview, POST /api/w/fediversity/scripts/create, \
         POST /api/w/fediversity/jobs/run/p/f/fediversity/probe_[..], POST /api/w/fediversity/jobs/add_batch_jobs/0 (403 each) as its scopes require"
    )
}

/// The whole line of step 7 for the default scopes: `place` is `<path> field <field> (<mount>)`.
pub fn openbao_line(place: &str, outcome: &str) -> String {
    format!(
        "fediversity-windmill-bootstrap: step 7/9 openbao: {place} holds the new token labeled fediversity \
         (scopes {DEFAULT_SCOPES}; bound to workspace fediversity), {}{outcome}",
        refused("variables/list")
    )
}

/// The calls of step 7's proof, as the fake recorded them (the run probe's random name as
/// `probe_*`), in order.
pub fn proof_calls(requests: &[fediversity_testkit::windmill_fake::Recorded], token: &str) -> Vec<String> {
    requests
        .iter()
        .filter(|r| r.token.as_deref() == Some(token))
        .map(|r| {
            let path = match r.path.split_once("/probe_") {
                Some((before, _)) => format!("{before}/probe_*"),
                None => r.path.clone(),
            };
            format!("{} {path} {}", r.method, r.body)
        })
        .collect()
}

/// What [`proof_calls`] must be for the default scopes.
pub const PROOF: [&str; 5] = [
    "GET /api/w/fediversity/variables/list ",
    "POST /api/w/fediversity/jobs/run/preview {}",
    "POST /api/w/fediversity/scripts/create {}",
    "POST /api/w/fediversity/jobs/run/p/f/fediversity/probe_* {}",
    r#"POST /api/w/fediversity/jobs/add_batch_jobs/0 {"kind":"noop"}"#,
];

/// Whether `request` is a script upload of the bootstrap: a `scripts/create` with a script in its
/// body (step 7's proof sends one with an empty body, with the front-end's new token).
pub fn is_upload(request: &fediversity_testkit::windmill_fake::Recorded) -> bool {
    request.is("POST", "/api/w/fediversity/scripts/create") && request.body != "{}"
}
