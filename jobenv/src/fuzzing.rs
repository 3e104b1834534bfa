//! The invariants the fuzz targets check (jobenv/fuzz), shared with the regression test that
//! replays what the fuzzers found (jobenv/tests/suite/fuzz_regressions.rs). Each function panics
//! when an invariant breaks; that is how libFuzzer sees a failure.

use std::collections::BTreeMap;

use crate::error::Problem;
use crate::input::Inputs;
use crate::input::keys::DeclaredKey;
use crate::input::names as policy;
use crate::input::node::NodeValue;
use crate::plan::plan;
use crate::run::redact::{Redactor, can_be_spelled_by_marker, redact_all};

/// The streaming redactor and its whole-buffer reference, for the property test that checks one
/// against the other (tests/suite/redactor_property.rs).
pub mod redact {
    pub use crate::run::redact::{MARKER, Redactor, can_be_spelled_by_marker, redact_all};
}

/// Any bytes as a payload: parsing never panics, and whatever is accepted obeys the rules.
pub fn payload(data: &[u8]) {
    let Ok(payload) = crate::input::payload::parse("fuzz", data) else {
        return;
    };
    let declared: BTreeMap<String, DeclaredKey> = ["DOMAIN", "HOSTS", "PATH", "NIX_CONFIG"]
        .into_iter()
        .map(|k| (k.to_owned(), DeclaredKey::default()))
        .collect();
    let node: BTreeMap<String, NodeValue> = [
        ("DEPLOYMENT_ROOT", "/"),
        ("NIXPKGS", "/nixpkgs"),
        ("DOMAIN", "node.example"),
    ]
    .into_iter()
    .map(|(k, v)| {
        (
            k.to_owned(),
            NodeValue {
                value: safe_io::secret::Text::Plain(v.to_owned()),
                origin: "node".into(),
                hidden_key: false,
            },
        )
    })
    .collect();
    let inputs = Inputs {
        verb: "apply".into(),
        node,
        declared,
        attributes: vec!["web".into(), "db-1".into()],
        payload: safe_io::secret::Hidden(payload.clone()),
        environ: safe_io::secret::Hidden(vec![("PATH".into(), "/bin".into())]),
        nix_shell: "/bin/nix-shell".into(),
        running_system: "x86_64-linux".into(),
        exec_budget: crate::input::exec_budget(8 << 20),
    };
    let Ok(plan) = plan(&inputs) else { return };
    assert!(
        ["web", "db-1"].contains(&plan.attribute.as_str()),
        "an unpublished attribute was accepted"
    );
    assert_eq!(
        plan.argv[7],
        format!("exec {}-apply", plan.attribute),
        "the shell text is not exec <ATTRIBUTE>-<VERB>"
    );
    assert!(policy::is_valid_namespace(&plan.namespace));
    assert!(policy::is_valid_system(&plan.system));
    assert_eq!(
        plan.env["DOMAIN"].value.expose(),
        "node.example",
        "the payload overrode the node"
    );
    for (key, var) in &plan.env {
        assert!(
            policy::is_valid_key(key) && !var.value.expose().contains('\0'),
            "an invalid variable reached the plan"
        );
        if payload.contains_key(key) && var.source == crate::plan::Source::Payload {
            assert!(!policy::is_reserved(key), "the payload set reserved {key}");
        }
    }
    assert_eq!(plan.env["PATH"].value.expose(), "/bin", "the payload set PATH");
}

/// Any text as a secrets env file: parsing never panics, every accepted key is a variable name,
/// and no problem about the file quotes its text. A problem carries text of the file only in a
/// `key` field, and only the key of an ordinary line (not one that may be the tail of a wrapped
/// secret, `KEY=` or `KEY==`: see [`NodeValue::hidden_key`]); every other field is the file's
/// path and line numbers, or fixed text.
pub fn env_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut last_line = 0;
    // Keys of ordinary lines, which a problem may name; not those of lines that may be the tail
    // of a wrapped secret (found here on their own), unless an ordinary line has the same key.
    let mut ordinary = std::collections::HashSet::new();
    for item in crate::input::env_file::parse_env_file(text) {
        let line = match item {
            Ok((key, value, line)) => {
                if !value.bytes().all(|b| b == b'=') {
                    ordinary.insert(key);
                }
                assert!(
                    crate::input::env_file::is_variable_name(key),
                    "a key that is not a variable name was accepted"
                );
                assert!(!value.contains('\n'), "a value spans lines");
                line
            }
            Err((line, _)) => line,
        };
        assert!(line > last_line, "line numbers go backwards");
        last_line = line;
    }

    const PATH: &str = "/node/secrets.env";
    let (values, mut problems) = crate::input::node::env_file_values(std::path::Path::new(PATH), text);
    crate::input::admit::check_node(&values, &BTreeMap::new(), &mut problems);
    let lines = text.split('\n').count();
    let is_origin = |origin: &str| {
        origin.split(" and ").all(|one| {
            one.strip_prefix(PATH)
                .and_then(|l| l.strip_prefix(':'))
                .and_then(|l| l.parse::<usize>().ok())
                .is_some_and(|l| (1..=lines).contains(&l))
        })
    };
    let named = |key: &str| {
        assert!(
            crate::input::env_file::is_variable_name(key),
            "a problem names a key that is not a variable name"
        );
        assert!(ordinary.contains(key), "a problem names a key that may be secret text");
    };
    for problem in &problems {
        match problem {
            Problem::BadEnvFileLine { path, line, .. } => {
                assert!(path.to_str() == Some(PATH) && (1..=lines).contains(line), "{problem}")
            }
            Problem::HiddenNodeKey { origin, .. } => assert!(is_origin(origin), "{problem}"),
            Problem::UndeclaredNodeKey { key, origin } | Problem::NulInValue { key, origin } => {
                named(key);
                assert!(is_origin(origin), "{problem}");
            }
            // These name one of jobenv's own names, whatever the line's value.
            Problem::DerivedKeyOnNode { key, origin } | Problem::PayloadOnlyKeyOnNode { key, origin } => {
                let none = BTreeMap::new();
                assert!(
                    matches!(
                        policy::class(key, &none),
                        policy::KeyClass::Derived { .. } | policy::KeyClass::PayloadControl { .. }
                    ),
                    "{problem}"
                );
                assert!(is_origin(origin), "{problem}");
            }
            Problem::DuplicateNodeKey { key, first, second } => {
                named(key);
                assert!(is_origin(first) && is_origin(second), "{problem}");
            }
            other => panic!("an env file made a problem of an unexpected kind: {other:?}"),
        }
    }
}

/// A secret (any text of at least 4 bytes) printed by a program in one of the spellings common
/// encoders and tools use, amid other output and split at any points: it never survives the
/// redactor built from the plan's needles. The spellings are written here independently of
/// `safe_io::secret::forms`, which the needles come from. Bit 128 of the first byte chooses a
/// tool's spelling ([`tool_spelling`]), bit 64 Rust's `Debug`, and otherwise a JSON one.
pub fn escaped_redaction(data: &[u8]) {
    let Some((&how, rest)) = data.split_first() else { return };
    let Some((&split, rest)) = rest.split_first() else {
        return;
    };
    let split = usize::from(split).min(rest.len());
    let (secret, around) = rest.split_at(split);
    let Ok(secret) = std::str::from_utf8(secret) else {
        return;
    };
    if secret.len() < crate::plan::MIN_SECRET_LEN {
        return;
    }
    let debug = format!("{secret:?}");
    let (spelled, must_go) = if how & 128 != 0 {
        let Some(spelled) = tool_spelling(secret, how, around.len() % 6) else {
            return;
        };
        spelled
    } else if how & 64 != 0 {
        let inside = debug[1..debug.len() - 1].to_owned();
        let all = 0..inside.len();
        (inside, all)
    } else {
        let json = json_spelling(secret, how);
        let all = 0..json.len();
        (json, all)
    };
    let mut warnings = Vec::new();
    let needles = crate::plan::redaction_needles(std::iter::once(("SECRET", secret)), &mut warnings);
    // The secret's spelling in the middle of the rest of the input, written in pieces.
    let (before, after) = around.split_at(around.len() / 2);
    let input = [before, spelled.as_bytes(), after].concat();
    let mut redactor = Redactor::new(&needles);
    let mut out = Vec::new();
    for piece in input.chunks(usize::from(how % 7) + 1) {
        redactor.push(piece, &mut out);
    }
    redactor.finish(&mut out);
    assert_eq!(
        out,
        redact_all(&needles, &input),
        "streamed redaction differs from the reference"
    );
    // Every byte of the spelling that holds something of the secret is one that a needle
    // covers: none of it reaches the output, not even in part.
    let must_go = before.len() + must_go.start..before.len() + must_go.end;
    let mut covered = vec![false; input.len()];
    for needle in &needles {
        for start in (0..input.len()).filter(|&start| input[start..].starts_with(needle)) {
            covered[start..start + needle.len()].fill(true);
        }
    }
    assert!(
        covered[must_go.clone()].iter().all(|&c| c),
        "a spelling of the secret survived in part: {:?}",
        String::from_utf8_lossy(&input[must_go])
    );
}

/// What a tool prints for `text`, chosen by bits of `how`, and the part of it that must not
/// survive: the whole of it, but for base64 of the secret after some other bytes (what
/// `curl -u user:$SECRET` sends), only the characters with the secret's bits. `None` where the
/// tool would not print that (base64 of fewer than 8 bytes is not redacted).
fn tool_spelling(text: &str, how: u8, lead: usize) -> Option<(String, std::ops::Range<usize>)> {
    let per_char = |escape: &dyn Fn(char) -> Option<String>| -> String {
        text.chars()
            .map(|c| escape(c).unwrap_or_else(|| c.to_string()))
            .collect()
    };
    let spelled = match how % 8 {
        // bash's set -x, Python's shlex.quote, SQL.
        0 => text.replace('\'', "'\\''"),
        1 => text.replace('\'', "'\"'\"'"),
        2 => text.replace('\'', "''"),
        // bash's $'…' in the C locale: printable ASCII as it is, the rest in octal.
        3 => per_char(&|c| match c {
            '\'' | '\\' => Some(format!("\\{c}")),
            '\n' => Some("\\n".into()),
            '\t' => Some("\\t".into()),
            c if (' '..='~').contains(&c) => None,
            c => Some(c.to_string().bytes().map(|b| format!("\\{b:03o}")).collect()),
        }),
        // RFC 3986 percent-encoding.
        4 => text
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    char::from(b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect(),
        // XML.
        5 => per_char(&|c| {
            let entity = match c {
                '&' => "&amp;",
                '<' => "&lt;",
                '>' => "&gt;",
                '"' => "&quot;",
                '\'' => "&apos;",
                _ => return None,
            };
            Some(entity.into())
        }),
        // base64 after `lead` (0 to 5) bytes of `user:`, URL-safe with bit 8, padded with bit
        // 16, and followed by a newline with bit 32.
        _ => {
            use base64::Engine as _;
            if text.len() < safe_io::secret::BASE64_MIN_LEN {
                return None;
            }
            let lead = &b"user:"[..lead];
            let trail: &[u8] = if how & 32 != 0 { b"\n" } else { b"" };
            let data = [lead, text.as_bytes(), trail].concat();
            let engine = match (how & 8 != 0, how & 16 != 0) {
                (false, true) => base64::engine::general_purpose::STANDARD,
                (false, false) => base64::engine::general_purpose::STANDARD_NO_PAD,
                (true, true) => base64::engine::general_purpose::URL_SAFE,
                (true, false) => base64::engine::general_purpose::URL_SAFE_NO_PAD,
            };
            let encoded = engine.encode(&data);
            // 6 bits per character: from the first without a bit of `lead`, to the last
            // without a bit of `trail` (or to the end, padding and all, when there is none).
            let first = (8 * lead.len()).div_ceil(6);
            let end = if trail.is_empty() {
                encoded.len()
            } else {
                8 * (lead.len() + text.len()) / 6
            };
            return Some((encoded, first..end));
        }
    };
    let all = 0..spelled.len();
    Some((spelled, all))
}

/// `text` inside a JSON string as an encoder chosen by the bits of `how` writes it: `\uXXXX` for
/// everything outside printable ASCII (Python, PHP, .NET; astral characters as surrogate pairs),
/// for `<`, `>`, `&`, U+2028 and U+2029 (Go, .NET), `\/` for `/` (PHP), upper-case hex (.NET);
/// with bit 16, .NET's default exactly (which also writes `"` `'` `+` and the backtick as `\u`);
/// with bit 32, Gson's default (`<` `>` `&` `=` `'` as `\u`, lower-case, non-ASCII as it is).
fn json_spelling(text: &str, how: u8) -> String {
    let gson = how & 32 != 0 && how & 16 == 0;
    let dotnet = how & 16 != 0;
    let (ascii, html, slash, upper) = if gson {
        (false, true, false, false)
    } else {
        (
            dotnet || how & 1 != 0,
            dotnet || how & 2 != 0,
            !dotnet && how & 4 != 0,
            dotnet || how & 8 != 0,
        )
    };
    let mut out = String::new();
    let unit = |out: &mut String, unit: u16| {
        out.push_str(&if upper {
            format!("\\u{unit:04X}")
        } else {
            format!("\\u{unit:04x}")
        });
    };
    for c in text.chars() {
        match c {
            '"' | '\'' | '+' | '`' if dotnet => unit(&mut out, c as u16),
            '=' | '\'' if gson => unit(&mut out, c as u16),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '/' if slash => out.push_str("\\/"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' if html => unit(&mut out, c as u16),
            c if (c as u32) < 0x20 || (ascii && !(' '..='~').contains(&c)) => {
                for u in c.encode_utf16(&mut [0; 2]) {
                    unit(&mut out, *u);
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Bytes split into secrets, cut points and a stream: the streamed redaction equals the
/// whole-buffer reference and no secret survives.
pub fn redactor(data: &[u8]) {
    let Some((&count, mut rest)) = data.split_first() else {
        return;
    };
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
    let Some((&cut_count, rest)) = rest.split_first() else {
        return;
    };
    let cuts_len = usize::from(cut_count % 8).min(rest.len());
    let (cut_bytes, input) = rest.split_at(cuts_len);
    let mut cuts: Vec<usize> = cut_bytes.iter().map(|&b| usize::from(b) * input.len() / 255).collect();
    cuts.sort_unstable();

    // One to four beginnings per searcher: the merge across searchers is fuzzed too; with bit
    // 128, every secret is searched by its beginning, none by the sampled search; with bit 64,
    // every sampled secret is verified by the search for repeating secrets.
    let group = usize::from(count / 4 % 4) + 1;
    let mut redactor = if count & 128 != 0 {
        Redactor::tuned(&secrets, group, |_| false, u32::MAX)
    } else if count & 64 != 0 {
        Redactor::tuned(&secrets, group, |_| true, 0)
    } else {
        Redactor::with_group_size(&secrets, group)
    };
    let mut out = Vec::new();
    let mut start = 0;
    for cut in cuts {
        redactor.push(&input[start..cut], &mut out);
        start = cut;
    }
    redactor.push(&input[start..], &mut out);
    redactor.finish(&mut out);
    assert_eq!(
        out,
        redact_all(&secrets, input),
        "streamed redaction differs from the reference"
    );
    for secret in secrets.iter().filter(|s| !can_be_spelled_by_marker(s)) {
        assert!(!out.windows(secret.len()).any(|w| w == *secret), "a secret survived");
    }
}
