//! Strict JSON: every node file and the payload are parsed here. A key that appears twice in one
//! object is refused, and every way a file can be wrong becomes a [`Problem`] naming the file.
//!
//! A value that becomes a variable keeps the text it was written in ([`Members`], [`text`]):
//! numbers reach a program exactly as written (`12345678901234567890123`, `1e2`, `-0`), never
//! re-formatted through a float. serde_json's `arbitrary_precision` would not do: it keeps the
//! digits but rewrites the exponent (`1e2` becomes `1e+2`).

use std::collections::{BTreeMap, HashSet};
use std::io::ErrorKind;
use std::path::Path;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
pub use serde_json::value::RawValue;

use crate::error::Problem;

/// The members of a JSON object, each value as the text it was written in.
pub type Members = BTreeMap<String, Box<RawValue>>;

/// Reads and parses a JSON file; a missing file is its own problem, not an empty one.
pub fn read_json(what: &'static str, path: &Path) -> Result<Value, Problem> {
    parse_json(what, &path.display().to_string(), &read(what, path)?)
}

/// Reads a file that must hold a JSON object; `expected` says what it should be if it is not.
pub fn read_object(what: &'static str, path: &Path, expected: &'static str) -> Result<Members, Problem> {
    parse_object(what, &path.display().to_string(), &read(what, path)?, expected)
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, Problem> {
    std::fs::read(path).map_err(|source| match source.kind() {
        ErrorKind::NotFound => Problem::MissingFile {
            what,
            path: path.to_owned(),
        },
        _ => Problem::UnreadableFile {
            what,
            path: path.to_owned(),
            source,
        },
    })
}

/// serde_json's message names a line and column, never the text there. A key that appears twice
/// in one object is refused (serde_json would silently keep the last): a payload with two
/// `ATTRIBUTE`s means something different to jobenv than to whatever checked it first.
pub fn parse_json(what: &'static str, origin: &str, bytes: &[u8]) -> Result<Value, Problem> {
    no_repeated_key(what, origin, bytes)?;
    serde_json::from_slice(bytes).map_err(not_json(what, origin))
}

/// A JSON object's members, each value kept as its text; anything but an object is a
/// [`Problem::WrongShape`] saying it must be `expected`.
pub fn parse_object(
    what: &'static str,
    origin: &str,
    bytes: &[u8],
    expected: &'static str,
) -> Result<Members, Problem> {
    no_repeated_key(what, origin, bytes)?;
    let whole: Box<RawValue> = serde_json::from_slice(bytes).map_err(not_json(what, origin))?;
    object(&whole).ok_or_else(|| Problem::WrongShape {
        what,
        origin: origin.to_owned(),
        expected,
    })
}

/// The members of `raw` when it is a JSON object (one that was parsed here: no repeated key).
pub fn object(raw: &RawValue) -> Option<Members> {
    raw.get()
        .starts_with('{')
        .then(|| serde_json::from_str(raw.get()).expect("an object that parsed before parses again"))
}

/// The text of a variable for a JSON value: a string as is; a number or boolean as its JSON text
/// exactly as written; an array or object as compact JSON (so `INTERNAL_HOSTS` may be an array)
/// whose numbers keep their text; `null` means "not given".
pub fn text(raw: &RawValue) -> Option<String> {
    let raw = raw.get();
    match raw.as_bytes().first() {
        Some(b'"') => Some(serde_json::from_str(raw).expect("a string that parsed before parses again")),
        Some(b'n') => None,
        _ => Some(compact(raw)),
    }
}

/// `value` written as serde_json writes it, as a member's text (for unit tests and the fuzzers,
/// which build inputs in code).
#[cfg(test)]
pub fn raw(value: &Value) -> Box<RawValue> {
    RawValue::from_string(value.to_string()).expect("serde_json writes JSON")
}

/// The members of an object built in code (see [`raw`]).
#[cfg(test)]
pub fn members(value: &Value) -> Members {
    value
        .as_object()
        .expect("an object")
        .iter()
        .map(|(key, value)| (key.clone(), raw(value)))
        .collect()
}

/// Compact JSON text of JSON text that parsed: whitespace between tokens dropped, each string
/// written again the way serde_json writes it (minimal escaping), numbers and literals as they
/// are. Outside strings valid JSON is ASCII, so bytes and characters are the same there.
fn compact(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(raw.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b' ' | b'\t' | b'\n' | b'\r' => at += 1,
            b'"' => {
                let end = string_end(bytes, at);
                let string: String =
                    serde_json::from_str(&raw[at..end]).expect("a string that parsed before parses again");
                out.push_str(&serde_json::to_string(&string).expect("a string serializes"));
                at = end;
            }
            byte => {
                out.push(char::from(byte));
                at += 1;
            }
        }
    }
    out
}

/// The index just past the closing quote of the string that starts at `start`.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut at = start + 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return at + 1,
            _ => at += 1,
        }
    }
    bytes.len()
}

fn not_json<'a>(what: &'static str, origin: &'a str) -> impl Fn(serde_json::Error) -> Problem + 'a {
    move |e| Problem::NotJson {
        what,
        origin: origin.to_owned(),
        detail: detail(&e),
    }
}

/// serde_json's message, but where it speaks of a `\u` escape that is no whole character: what
/// it says there ("unexpected end of hex escape" for `"\ud800"`) does not name the reason, a
/// lone surrogate, which no variable can hold (its text is UTF-8).
fn detail(error: &serde_json::Error) -> String {
    let message = error.to_string();
    let surrogate = [
        "unexpected end of hex escape",
        "lone leading surrogate in hex escape",
        "invalid unicode code point",
    ];
    match surrogate.iter().find(|start| message.starts_with(*start)) {
        Some(start) => message.replacen(
            start,
            "a \\u escape that is no whole Unicode character (a lone surrogate such as \\ud800, or fewer than four hex digits)",
            1,
        ),
        None => message,
    }
}

/// Refuses a document with a repeated key in any of its objects, a string that is no Unicode
/// text (a lone surrogate), and any syntax error. Numbers are never parsed here: a value is kept
/// as its text ([`RawValue`]), so `1e400` or a 400-digit integer passes as written instead of
/// being out of a float's range.
fn no_repeated_key(what: &'static str, origin: &str, bytes: &[u8]) -> Result<(), Problem> {
    let whole: &RawValue = serde_json::from_slice(bytes).map_err(not_json(what, origin))?;
    bad_value(bytes, whole).map_or(Ok(()), |detail| {
        Err(Problem::NotJson {
            what,
            origin: origin.to_owned(),
            detail,
        })
    })
}

/// What is wrong in `raw`, a value inside `document`, with its position in `document`: the
/// first repeated key of its objects, or a string of it that is no Unicode text (skipping a
/// value as [`RawValue`] checks a string's escapes for syntax only). Each object and array is
/// read again from its own text (at most serde_json's 128 levels of nesting, each reading what
/// it holds).
fn bad_value(document: &[u8], raw: &RawValue) -> Option<String> {
    let text = raw.get();
    let children = match text.as_bytes().first() {
        Some(b'{') => serde_json::from_str::<Keys>(text).map(|keys| keys.0),
        Some(b'[') => serde_json::from_str::<Vec<&RawValue>>(text),
        Some(b'"') => serde_json::from_str::<String>(text).map(|_| Vec::new()),
        _ => return None,
    };
    match children {
        Ok(children) => children.into_iter().find_map(|child| bad_value(document, child)),
        Err(error) => Some(in_document(document, text, &error)),
    }
}

/// `error`'s message ([`detail`]), positioned in `document` instead of in `part`, a slice of it.
fn in_document(document: &[u8], part: &str, error: &serde_json::Error) -> String {
    let message = detail(error);
    let message = message.split(" at line ").next().unwrap_or_default().to_owned();
    // The byte the error points at: its line and column (bytes, from 1) within `part`.
    let line_start: usize = part
        .split_inclusive('\n')
        .take(error.line().saturating_sub(1))
        .map(str::len)
        .sum();
    let at = (part.as_ptr() as usize - document.as_ptr() as usize) + line_start + error.column().saturating_sub(1);
    let before = &document[..at.min(document.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = at
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |newline| newline + 1)
        + 1;
    format!("{message} at line {line} column {column}")
}

/// How many characters of a repeated key its message shows: a key may be as long as the file.
const SHOWN_KEY_CHARS: usize = 64;

/// The values of a JSON object whose keys are all different; a repeated key is an error.
struct Keys<'a>(Vec<&'a RawValue>);

impl<'de> serde::Deserialize<'de> for Keys<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(KeysVisitor)
    }
}

struct KeysVisitor;

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Keys<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys<'de>, A::Error> {
        let mut seen = HashSet::new();
        let mut values = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                let mut shown: String = key.chars().take(SHOWN_KEY_CHARS).collect();
                if shown.len() < key.len() {
                    shown.push_str("...");
                }
                return Err(serde::de::Error::custom(format_args!(
                    "the key {shown:?} appears twice"
                )));
            }
            values.push(map.next_value::<&RawValue>()?);
            seen.insert(key);
        }
        Ok(Keys(values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_and_named() {
        let error = parse_json("payload", "on stdin", br#"{"ATTRIBUTE": "a", "ATTRIBUTE": "b"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with(r#"payload on stdin is not valid JSON: the key "ATTRIBUTE" appears twice"#),
            "{error}"
        );
        assert!(
            !error.contains("\"a\"") && !error.contains("\"b\""),
            "values are not shown: {error}"
        );
        assert!(parse_json("payload", "x", br#"{"H": [{"k": 1, "k": 2}]}"#).is_err());
        assert!(
            parse_object("payload", "x", br#"{"H": {"n": {"k": 1e2, "k": 2}}}"#, "an object").is_err(),
            "in members too"
        );
        // Positive control: the same shapes without a repeat parse as serde_json would.
        let ok = parse_json(
            "payload",
            "x",
            br#"{"A": "a", "H": [{"k": 1, "j": 2.5, "n": null, "t": true}], "N": -3}"#,
        )
        .unwrap();
        assert_eq!(
            ok,
            json!({"A": "a", "H": [{"k": 1, "j": 2.5, "n": null, "t": true}], "N": -3})
        );
    }

    #[test]
    fn a_repeated_key_is_named_where_it_is_in_the_document() {
        let doc = b"{\"A\": 1,\n \"H\": [2, {\"k\": 1,\n  \"k\": 2}]}";
        let error = parse_object("payload", "x", doc, "an object").unwrap_err().to_string();
        // serde_json points at the repeated key's closing quote: line 3, column 5.
        assert_eq!(
            error,
            r#"payload x is not valid JSON: the key "k" appears twice at line 3 column 5"#
        );
        // The same repeat at the top level, as serde_json itself counts.
        let error = parse_object("payload", "x", b"{\"k\": 1,\n  \"k\": 2}", "an object")
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            r#"payload x is not valid JSON: the key "k" appears twice at line 2 column 5"#
        );
    }

    #[test]
    fn a_lone_surrogate_is_refused_by_its_name() {
        for doc in [r#"{"S": "\ud800"}"#, r#"{"S": "\udc00x"}"#, r#"{"S": "\ud800\u0041"}"#] {
            let error = parse_object("payload", "x", doc.as_bytes(), "an object")
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(r"payload x is not valid JSON: a \u escape that is no whole Unicode character (a lone surrogate such as \ud800"), "{doc}: {error}");
            assert!(error.contains(" at line 1 column "), "{error}");
        }
        // Positive control: a surrogate pair is one character.
        let members = parse_object("payload", "x", br#"{"S": "\ud83d\ude00"}"#, "an object").unwrap();
        assert_eq!(super::text(&members["S"]).as_deref(), Some("\u{1f600}"));
    }

    #[test]
    fn numbers_beyond_a_float_pass_as_written() {
        let big = format!("1{}", "0".repeat(400));
        let doc = format!(r#"{{"a": 1e400, "b": [-1E-400, {{"c": {big}}}], "d": {big}}}"#);
        let members = parse_object("payload", "x", doc.as_bytes(), "an object").unwrap();
        assert_eq!(super::text(&members["a"]).as_deref(), Some("1e400"));
        assert_eq!(super::text(&members["b"]), Some(format!(r#"[-1E-400,{{"c":{big}}}]"#)));
        assert_eq!(super::text(&members["d"]), Some(big));
        // Positive control: a repeated key beside them is still found.
        assert!(
            parse_object(
                "payload",
                "x",
                br#"{"a": 1e400, "n": {"k": 1e999, "k": 2}}"#,
                "an object"
            )
            .is_err()
        );
    }

    #[test]
    fn a_long_repeated_key_is_cut() {
        let key = "K".repeat(10_000);
        let error = parse_json("payload", "x", format!(r#"{{"{key}": 1, "{key}": 2}}"#).as_bytes())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(&format!("\"{}...\"", "K".repeat(64))) && error.len() < 300,
            "{error}"
        );
    }

    #[test]
    fn a_value_becomes_text_and_numbers_keep_theirs() {
        let members = parse_object(
            "payload",
            "x",
            br#"{"big": 12345678901234567890123, "exp": 1e2, "zero": -0, "frac": 0.10, "flag": true, "none": null,
                 "s": "a \u00e4\n\"q\"", "list": [ 1E+2 , "\u00e4\/", {"k" : [ -0.0 ] } ], "empty": {}}"#,
            "an object",
        )
        .unwrap();
        let text = |key: &str| super::text(&members[key]);
        assert_eq!(text("big").as_deref(), Some("12345678901234567890123"));
        assert_eq!(text("exp").as_deref(), Some("1e2"));
        assert_eq!(text("zero").as_deref(), Some("-0"));
        assert_eq!(text("frac").as_deref(), Some("0.10"));
        assert_eq!(text("flag").as_deref(), Some("true"));
        assert_eq!(text("none"), None, "null means not given");
        assert_eq!(text("s").as_deref(), Some("a ä\n\"q\""));
        // Strings inside are written as serde_json writes them; numbers as they were.
        assert_eq!(text("list").as_deref(), Some(r#"[1E+2,"ä/",{"k":[-0.0]}]"#));
        assert_eq!(text("empty").as_deref(), Some("{}"));
    }

    #[test]
    fn the_shape_of_an_object_file() {
        let error = parse_object("keys file", "k.json", b"[1]", "a JSON object of keys")
            .unwrap_err()
            .to_string();
        assert_eq!(error, "keys file k.json must be a JSON object of keys");
        assert!(object(&raw(&json!("x"))).is_none());
        assert_eq!(object(&raw(&json!({"a": 1}))).unwrap().len(), 1);
    }
}
