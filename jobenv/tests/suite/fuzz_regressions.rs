//! Replays every input the fuzzers found (and any seed kept next to them) through the same
//! invariant checks the fuzz targets run (jobenv::fuzzing): a fixed find stays fixed.
//! Inputs live in tests/fuzz_regressions/<target>/; jobenv/fuzz/run seeds its corpora from them.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        check(&std::fs::read(&path).unwrap());
        count += 1;
    }
    count
}

#[test]
fn redactor_finds() {
    assert!(
        replay("redactor", jobenv::fuzzing::redactor) >= 1,
        "the known finds are gone"
    );
}

#[test]
fn payload_finds() {
    replay("payload", jobenv::fuzzing::payload);
}

#[test]
fn env_file_finds() {
    assert!(replay("env_file", jobenv::fuzzing::env_file) >= 2, "the seeds are gone");
}

#[test]
fn escaped_redaction_finds() {
    assert!(
        replay("escaped_redaction", jobenv::fuzzing::escaped_redaction) >= 4,
        "the seeds are gone"
    );
}
