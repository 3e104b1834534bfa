//! Reading the node's JSON files: deploy-env.json, the keys file and the attributes file.
//! Each reader turns every way a file can be wrong into a [`Problem`] naming the file.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::Path;

use serde_json::Value;

use crate::error::Problem;
use crate::value::env_text;

/// Replaces `dir/name` with `bytes` atomically: a temporary file beside it, synced, renamed over
/// it, and the directory synced, so a crash leaves the old file or the new one, never a torn one.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = tempfile::Builder::new().prefix(&format!(".{name}.")).tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(dir.join(name)).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

/// Reads and parses a JSON file; a missing file is its own problem, not an empty one.
pub fn read_json(what: &'static str, path: &Path) -> Result<Value, Problem> {
    let bytes = std::fs::read(path).map_err(|source| match source.kind() {
        ErrorKind::NotFound => Problem::MissingFile { what, path: path.to_owned() },
        _ => Problem::UnreadableFile { what, path: path.to_owned(), source },
    })?;
    parse_json(what, &path.display().to_string(), &bytes)
}

/// serde_json's message names a line and column, never the text there. A key that appears twice
/// in one object is refused (serde_json would silently keep the last): a payload with two
/// `ATTRIBUTE`s means something different to jobenv than to whatever checked it first.
pub fn parse_json(what: &'static str, origin: &str, bytes: &[u8]) -> Result<Value, Problem> {
    serde_json::from_slice::<Strict>(bytes).map(|Strict(value)| value).map_err(|e| Problem::NotJson {
        what,
        origin: origin.to_owned(),
        detail: e.to_string(),
    })
}

/// A JSON value whose objects have no repeated key.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!("the key {key:?} appears twice")));
            }
            let Strict(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_at_any_depth_and_named() {
        let error = parse_json("payload", "on stdin", br#"{"ATTRIBUTE": "a", "ATTRIBUTE": "b"}"#).unwrap_err().to_string();
        assert!(error.starts_with(r#"payload on stdin is not valid JSON: the key "ATTRIBUTE" appears twice"#), "{error}");
        assert!(!error.contains("\"a\"") && !error.contains("\"b\""), "values are not shown: {error}");
        assert!(parse_json("payload", "x", br#"{"H": [{"k": 1, "k": 2}]}"#).is_err());
        // Positive control: the same shapes without a repeat parse as serde_json would.
        let ok = parse_json("payload", "x", br#"{"A": "a", "H": [{"k": 1, "j": 2.5, "n": null, "t": true}], "N": -3}"#).unwrap();
        assert_eq!(ok, serde_json::json!({"A": "a", "H": [{"k": 1, "j": 2.5, "n": null, "t": true}], "N": -3}));
    }
}

/// One declared key: what it means and what it is when no layer sets it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeclaredKey {
    pub description: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// `{"KEY": {"description": "...", "default": "..."?}}`
pub fn read_keys(path: &Path) -> Result<BTreeMap<String, DeclaredKey>, Vec<Problem>> {
    const WHAT: &str = "keys file";
    let value = read_json(WHAT, path).map_err(|p| vec![p])?;
    let origin = path.display().to_string();
    let Value::Object(entries) = value else {
        return Err(vec![Problem::WrongShape { what: WHAT, origin, expected: "a JSON object of keys" }]);
    };
    let mut problems = Vec::new();
    let mut keys = BTreeMap::new();
    for (key, entry) in entries {
        if !crate::policy::is_valid_key(&key) {
            problems.push(Problem::InvalidKey { key, origin: origin.clone() });
            continue;
        }
        let shape = |expected| Problem::WrongShape { what: WHAT, origin: format!("{origin} entry {key}"), expected };
        let Value::Object(fields) = entry else {
            problems.push(shape("an object with \"description\" and an optional \"default\""));
            continue;
        };
        let description = match fields.get("description") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => {
                problems.push(shape("a string \"description\""));
                continue;
            }
        };
        let default = fields.get("default").and_then(env_text);
        if default.as_deref().is_some_and(|d| d.contains('\0')) {
            problems.push(Problem::NulInValue { key, origin: origin.clone() });
            continue;
        }
        keys.insert(key, DeclaredKey { description, default });
    }
    if problems.is_empty() { Ok(keys) } else { Err(problems) }
}

/// A JSON array of the attribute names that exist.
pub fn read_attributes(path: &Path) -> Result<Vec<String>, Problem> {
    const WHAT: &str = "attributes file";
    let shape = || Problem::WrongShape {
        what: WHAT,
        origin: path.display().to_string(),
        expected: "a JSON array of attribute names",
    };
    match read_json(WHAT, path)? {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(s),
                _ => Err(shape()),
            })
            .collect(),
        _ => Err(shape()),
    }
}
