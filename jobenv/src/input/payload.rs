//! The job payload: a JSON object of at most 1 MiB, from a file or stdin, and how its values
//! become the text of environment variables.

use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value};

use super::json::parse_json;
use crate::error::Problem;

/// Larger payloads are refused before parsing: a job has no business sending more.
pub const PAYLOAD_LIMIT: usize = 1 << 20;

/// Reads the payload from `path`, or from stdin when `path` is `-`.
pub fn read(path: &Path) -> Result<Map<String, Value>, Problem> {
    let what = "payload";
    let origin = if path == Path::new("-") { "on stdin".to_owned() } else { path.display().to_string() };
    let mut bytes = Vec::new();
    let result = if path == Path::new("-") {
        std::io::stdin().lock().take(PAYLOAD_LIMIT as u64 + 1).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(PAYLOAD_LIMIT as u64 + 1).read_to_end(&mut bytes))
    };
    result.map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => Problem::MissingFile { what, path: path.to_owned() },
        _ => Problem::UnreadableFile { what, path: path.to_owned(), source },
    })?;
    parse(&origin, &bytes)
}

pub fn parse(origin: &str, bytes: &[u8]) -> Result<Map<String, Value>, Problem> {
    if bytes.len() > PAYLOAD_LIMIT {
        return Err(Problem::PayloadTooLarge { limit: PAYLOAD_LIMIT });
    }
    match parse_json("payload", origin, bytes)? {
        Value::Object(map) => Ok(map),
        _ => Err(Problem::WrongShape { what: "payload", origin: origin.to_owned(), expected: "a JSON object" }),
    }
}

/// A string as is; a number or boolean as its JSON text; an array or object as compact JSON
/// (so `INTERNAL_HOSTS` may be an array); `null` means "not given".
pub fn env_text(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Array(_) | Value::Object(_) => Some(value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conversions() {
        assert_eq!(env_text(&json!("a b")), Some("a b".into()));
        assert_eq!(env_text(&json!(3)), Some("3".into()));
        assert_eq!(env_text(&json!(1.5)), Some("1.5".into()));
        assert_eq!(env_text(&json!(true)), Some("true".into()));
        assert_eq!(env_text(&json!(["a", "b"])), Some(r#"["a","b"]"#.into()));
        assert_eq!(env_text(&json!({"k": [1, 2]})), Some(r#"{"k":[1,2]}"#.into()));
        assert_eq!(env_text(&json!(null)), None);
    }
}
