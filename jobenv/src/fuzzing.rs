//! The invariants the fuzz targets check (jobenv/fuzz), shared with the regression test that
//! replays what the fuzzers found (jobenv/tests/fuzz_regressions.rs). Each function panics
//! when an invariant breaks; that is how libFuzzer sees a failure.

use std::collections::BTreeMap;

use crate::input::keys::DeclaredKey;
use crate::input::names as policy;
use crate::input::node::NodeValue;
use crate::input::Inputs;
use crate::plan::plan;
use crate::run::redact::{Redactor, can_be_spelled_by_marker, redact_all};

/// Any bytes as a payload: parsing never panics, and whatever is accepted obeys the rules.
pub fn payload(data: &[u8]) {
    let Ok(payload) = crate::input::payload::parse("fuzz", data) else { return };
    let declared: BTreeMap<String, DeclaredKey> = ["DOMAIN", "HOSTS", "PATH", "NIX_CONFIG"]
        .into_iter()
        .map(|k| (k.to_owned(), DeclaredKey { description: String::new(), default: None }))
        .collect();
    let node: BTreeMap<String, NodeValue> = [("DEPLOYMENT_ROOT", "/"), ("NIXPKGS", "/nixpkgs"), ("DOMAIN", "node.example")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), NodeValue { value: v.to_owned(), origin: "node".into(), secret: false, hidden_key: false }))
        .collect();
    let inputs = Inputs {
        verb: "apply".into(),
        node,
        declared,
        attributes: vec!["web".into(), "db-1".into()],
        payload: payload.clone(),
        environ: vec![("PATH".into(), "/bin".into())],
        nix_shell: "/bin/nix-shell".into(),
        running_system: "x86_64-linux".into(),
        exec_budget: crate::plan::exec_budget(8 << 20),
    };
    let Ok(plan) = plan(&inputs) else { return };
    assert!(["web", "db-1"].contains(&plan.attribute.as_str()), "an unpublished attribute was accepted");
    assert_eq!(plan.argv[7], format!("exec {}-apply", plan.attribute), "the shell text is not exec <ATTRIBUTE>-<VERB>");
    assert!(policy::is_valid_namespace(&plan.namespace));
    assert!(policy::is_valid_system(&plan.system));
    assert_eq!(plan.env["DOMAIN"].value, "node.example", "the payload overrode the node");
    for (key, var) in &plan.env {
        assert!(policy::is_valid_key(key) && !var.value.contains('\0'), "an invalid variable reached the plan");
        if payload.contains_key(key) && var.source == crate::plan::Source::Payload {
            assert!(!policy::is_reserved(key), "the payload set reserved {key}");
        }
    }
    assert_eq!(plan.env["PATH"].value, "/bin", "the payload set PATH");
}

/// Any text as a secrets env file: parsing never panics and every accepted key is valid.
pub fn env_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut last_line = 0;
    for item in crate::input::env_file::parse_env_file(text) {
        let line = match item {
            Ok((key, value, line)) => {
                assert!(policy::is_valid_key(key), "invalid key accepted");
                assert!(!value.contains('\n'), "a value spans lines");
                line
            }
            Err((line, _)) => line,
        };
        assert!(line > last_line, "line numbers go backwards");
        last_line = line;
    }
}

/// Bytes split into secrets, cut points and a stream: the streamed redaction equals the
/// whole-buffer reference and no secret survives.
pub fn redactor(data: &[u8]) {
    let Some((&count, mut rest)) = data.split_first() else { return };
    let mut secrets: Vec<&[u8]> = Vec::new();
    for _ in 0..(count % 4 + 1) {
        let Some((&len, tail)) = rest.split_first() else { return };
        let len = 4 + usize::from(len % 20);
        if tail.len() < len {
            return;
        }
        secrets.push(&tail[..len]);
        rest = &tail[len..];
    }
    let Some((&cut_count, rest)) = rest.split_first() else { return };
    let cuts_len = usize::from(cut_count % 8).min(rest.len());
    let (cut_bytes, input) = rest.split_at(cuts_len);
    let mut cuts: Vec<usize> = cut_bytes.iter().map(|&b| usize::from(b) * input.len() / 255).collect();
    cuts.sort_unstable();

    // One searcher per secret or all in one: the merge across searchers is fuzzed too.
    let mut redactor = Redactor::with_group_size(&secrets, usize::from(count / 4 % 4) + 1);
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts {
        redactor.push(&input[start..cut], &mut out);
        start = cut;
    }
    redactor.push(&input[start..], &mut out);
    redactor.finish(&mut out);
    assert_eq!(out, redact_all(&secrets, input), "streamed redaction differs from the reference");
    for secret in secrets.iter().filter(|s| !can_be_spelled_by_marker(s)) {
        assert!(!out.windows(secret.len()).any(|w| w == *secret), "a secret survived");
    }
}
