//! The deployment repository's two published lists, as the node renders them: the declared keys
//! (each with a description and maybe a default: a [`DeclaredKey`], which lives with the key
//! classes it is one of) and the attribute names that exist.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::json::{object, read_json, read_object, text};
use super::names::DeclaredKey;
use crate::error::Problem;

/// The fields of a keys-file entry.
const FIELDS: &[&str] = &["description", "default", "node_only"];

/// `{"KEY": {"description": "...", "default": "..."?, "node_only": true?}}`
pub fn read_keys(path: &Path) -> Result<BTreeMap<String, DeclaredKey>, Vec<Problem>> {
    const WHAT: &str = "keys file";
    let entries = read_object(WHAT, path, "a JSON object of keys").map_err(|p| vec![p])?;
    let origin = path.display().to_string();
    let mut problems = Vec::new();
    let mut keys = BTreeMap::new();
    for (key, entry) in entries {
        if !super::names::is_valid_key(&key) {
            problems.push(Problem::InvalidKey {
                key: super::cut(&key, super::SHOWN_CHARS),
                origin: origin.clone(),
            });
            continue;
        }
        let shape = |expected| Problem::WrongShape {
            what: WHAT,
            origin: format!("{origin} entry {key}"),
            expected,
        };
        let Some(fields) = object(&entry) else {
            problems.push(shape("an object with \"description\" and an optional \"default\""));
            continue;
        };
        // Strict like the bootstrap's config: a misspelt "default" would silently leave the key
        // without one.
        let unknown: Vec<&String> = fields
            .keys()
            .filter(|field| !FIELDS.contains(&field.as_str()))
            .collect();
        if !unknown.is_empty() {
            for field in unknown {
                problems.push(Problem::UnknownKeysField {
                    origin: origin.clone(),
                    key: key.clone(),
                    field: super::cut(field, super::SHOWN_CHARS),
                });
            }
            continue;
        }
        let description = match fields.get("description").map(|raw| raw.get()) {
            None | Some("null") => String::new(),
            Some(raw) if raw.starts_with('"') => {
                serde_json::from_str(raw).expect("a string that parsed before parses again")
            }
            Some(_) => {
                problems.push(shape("a string \"description\""));
                continue;
            }
        };
        let default = fields.get("default").and_then(|raw| text(raw));
        if default.as_deref().is_some_and(|d| d.contains('\0')) {
            problems.push(Problem::NulInValue {
                key,
                origin: origin.clone(),
            });
            continue;
        }
        let node_only = match fields.get("node_only").map(|raw| raw.get()) {
            None | Some("null" | "false") => false,
            Some("true") => true,
            Some(_) => {
                problems.push(shape("a boolean \"node_only\""));
                continue;
            }
        };
        keys.insert(
            key,
            DeclaredKey {
                description,
                default,
                node_only,
            },
        );
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
