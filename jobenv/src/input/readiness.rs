//! Whether the node is ready for a job: the secrets it declares (`--required-secrets`, a list the
//! NixOS module renders from what its OpenBao agent is to write) must all be there. A secret the
//! agent has not rendered yet is not a configuration error but a node that is not ready (exit
//! 75): a front-end may retry the job later, where a configuration error (exit 2) needs a person.

use std::path::Path;

use super::NodeValues;
use super::env_file::is_variable_name;
use super::json::read_json;
use crate::error::Problem;

/// The secret names in `path`: a JSON array of variable names.
pub fn read(path: &Path) -> Result<Vec<String>, Problem> {
    const WHAT: &str = "required secrets file";
    let shape = || Problem::WrongShape {
        what: WHAT,
        origin: path.display().to_string(),
        expected: "a JSON array of variable names",
    };
    match read_json(WHAT, path)? {
        serde_json::Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                serde_json::Value::String(name) if is_variable_name(&name) => Ok(name),
                _ => Err(shape()),
            })
            .collect(),
        _ => Err(shape()),
    }
}

/// With a list of required secrets, a secrets directory or env file that is missing means the
/// agent has not rendered it yet: not ready, rather than misconfigured.
pub fn reclassify(problem: Problem) -> Problem {
    match problem {
        Problem::MissingSecretsDir(dir) => {
            Problem::NodeNotReady(format!("the secrets directory {} does not exist yet", dir.display()))
        }
        Problem::MissingFile {
            what: "secrets env file",
            path,
        } => Problem::NodeNotReady(format!("the secrets env file {} does not exist yet", path.display())),
        other => other,
    }
}

/// The required secrets the node does not have (or has empty).
pub fn missing(required: &[String], node: &NodeValues) -> Vec<Problem> {
    required
        .iter()
        .filter(|name| {
            !node
                .get(name.as_str())
                .is_some_and(|value| value.value.is_secret() && !value.value.expose().is_empty())
        })
        .map(|name| Problem::NodeNotReady(format!("the secret {name} is missing or empty (not rendered yet?)")))
        .collect()
}
