//! The deployment repository's two published lists, as the node renders them: the declared keys
//! (each with a description and maybe a default) and the attribute names that exist.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::json::read_json;
use super::payload::env_text;
use crate::error::Problem;

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
        if !super::names::is_valid_key(&key) {
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
