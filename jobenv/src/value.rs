//! How a JSON value becomes the text of an environment variable.

use serde_json::Value;

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
