//! The job payload: a JSON object of at most 1 MiB, from a file or stdin. Its values become the
//! text of environment variables as [`super::json::text`] says.

use std::io::Read;
use std::path::Path;

use super::json::{Members, parse_object};
use crate::error::Problem;

/// Larger payloads are refused before parsing: a job has no business sending more.
pub const PAYLOAD_LIMIT: usize = 1 << 20;

/// Reads the payload from `path`, or from stdin when `path` is `-`.
pub fn read(path: &Path) -> Result<Members, Problem> {
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

pub fn parse(origin: &str, bytes: &[u8]) -> Result<Members, Problem> {
    if bytes.len() > PAYLOAD_LIMIT {
        return Err(Problem::PayloadTooLarge { limit: PAYLOAD_LIMIT });
    }
    parse_object("payload", origin, bytes, "a JSON object")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_an_object_of_at_most_one_mebibyte() {
        assert_eq!(parse("x", b"[]").unwrap_err().to_string(), "payload x must be a JSON object");
        let big = format!(r#"{{"A": "{}"}}"#, "a".repeat(PAYLOAD_LIMIT));
        assert_eq!(parse("x", big.as_bytes()).unwrap_err().to_string(), "payload is larger than 1048576 bytes");
        assert_eq!(parse("x", br#"{"A": 1e2}"#).unwrap()["A"].get(), "1e2");
    }
}
