//! Is the benchmark's needle set the real one? One untimed run per shape, in which the program
//! prints every form of every secret once, compared with the same program's output unfiltered:
//! each secret between its two tabs must come out as one `[REDACTED]` (not in part: a form that
//! only a line of a multi-line secret matched still leaks the rest), and every other byte as it
//! was. Without this, a redactor that misses the escaped forms would be timed on fewer matches
//! than a node sees, and the benchmark would not say so.

use std::process::{Command, Stdio};

use serde_json::json;

use crate::node::{Node, Tools};

const MARKER: &[u8] = b"[REDACTED]";

#[derive(Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Printed secrets that came out as exactly one marker.
    pub whole: usize,
    /// Printed secrets.
    pub printed: usize,
    /// Every byte outside the printed secrets came out unchanged.
    pub rest_unchanged: bool,
}

/// Runs the program once directly and once through jobenv, `bytes` of output each.
pub fn run(
    tools: &Tools,
    node: &Node,
    secrets: &[(String, String)],
    bytes: usize,
    line: usize,
) -> anyhow::Result<Verdict> {
    let raw = Command::new(&tools.generate)
        .env_clear()
        .envs(secrets.iter().map(|(k, v)| (k, v)))
        .env("BENCH_BYTES", bytes.to_string())
        .env("BENCH_LINE", line.to_string())
        .stderr(Stdio::null())
        .output()?;
    anyhow::ensure!(
        raw.status.success() && raw.stdout.len() == bytes,
        "the program alone failed: {}",
        raw.status
    );
    let mut command =
        node.jobenv_run(&json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "BENCH_BYTES": bytes, "BENCH_LINE": line}))?;
    let redacted = command.stderr(Stdio::null()).output()?;
    anyhow::ensure!(redacted.status.success(), "jobenv failed: {}", redacted.status);
    Ok(compare(&raw.stdout, &redacted.stdout))
}

/// Fields between tabs alternate: filler, secret, filler, ... A marker holds no tab, so the
/// fields of the two outputs line up one to one when nothing else changed.
pub fn compare(raw: &[u8], redacted: &[u8]) -> Verdict {
    let raw: Vec<&[u8]> = raw.split(|&b| b == b'\t').collect();
    let out: Vec<&[u8]> = redacted.split(|&b| b == b'\t').collect();
    let whole = out
        .iter()
        .skip(1)
        .step_by(2)
        .take(raw.len() / 2)
        .filter(|field| **field == MARKER)
        .count();
    let rest_unchanged = raw.len() == out.len() && raw.iter().zip(&out).step_by(2).all(|(a, b)| a == b);
    Verdict {
        whole,
        printed: raw.len() / 2,
        rest_unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_redacted_in_part_is_not_whole() {
        let raw = b"aa\tsecret-one\tbb\tline-one\\nline-two\tcc";
        let all = compare(raw, b"aa\t[REDACTED]\tbb\t[REDACTED]\tcc");
        assert_eq!(
            all,
            Verdict {
                whole: 2,
                printed: 2,
                rest_unchanged: true
            }
        );
        let part = compare(raw, b"aa\t[REDACTED]\tbb\t[REDACTED]\\nline-two\tcc");
        assert_eq!(
            part,
            Verdict {
                whole: 1,
                printed: 2,
                rest_unchanged: true
            }
        );
        let leaked = compare(raw, raw);
        assert_eq!(
            leaked,
            Verdict {
                whole: 0,
                printed: 2,
                rest_unchanged: true
            }
        );
    }

    #[test]
    fn a_change_outside_the_secrets_is_seen() {
        let raw = b"aa\tsecret-one\tbb";
        assert!(!compare(raw, b"aa\t[REDACTED]\tbX").rest_unchanged);
        assert!(!compare(raw, b"aa\t[REDACTED]\tbb\tsurplus").rest_unchanged);
        assert!(!compare(raw, b"aa\t[REDACTED]").rest_unchanged);
    }
}
