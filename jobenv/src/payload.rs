//! Reading the job payload: a JSON object of at most 1 MiB, from a file or stdin.

use std::io::Read;
use std::path::Path;

use serde_json::{Map, Value};

use crate::error::Problem;
use crate::files::parse_json;

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
