//! Strict JSON: every node file and the payload are parsed here. A key that appears twice in one
//! object is refused, and every way a file can be wrong becomes a [`Problem`] naming the file.

use std::io::ErrorKind;
use std::path::Path;

use serde_json::Value;

use crate::error::Problem;

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

