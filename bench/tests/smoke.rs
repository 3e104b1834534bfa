//! Every benchmark runs once with tiny sizes, so none can rot unnoticed. This measures
//! nothing: the figures of a quick run are meaningless and no target is asserted.

use std::process::Command;

#[test]
fn every_benchmark_runs_in_quick_mode() {
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("BENCHMARKS.md");
    std::fs::write(&report, "# Benchmarks\n\nHand-written notes stay.\n").unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_fediversity-bench"))
        .arg("--quick")
        .arg("--out")
        .arg(&report)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "a benchmark failed (is the whole workspace built? cargo test --workspace builds it)"
    );
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.contains("Hand-written notes stay."),
        "the notes around the tables were lost"
    );
    for title in [
        "### 1. Start-up overhead of jobenv",
        "### 2. Redaction throughput and memory",
        "### 3. Bootstrap no-op rerun",
        "### 4. Cold bootstrap, per step",
        "### 5. Progress events with a slow receiver",
        "### 7. A job's start-up, cold against warm",
        "### 8. Redaction against the shape of the secret",
        "### 9. OTLP export: start-up and throughput",
    ] {
        assert!(text.contains(title), "{title} missing:\n{text}");
    }
    // Each table reports its targets, met or not: start-up 1, redaction 3 for each of its 3
    // shapes, the no-op rerun 3, events 2.
    let targets = text
        .lines()
        .filter(|l| l.starts_with("- ") && (l.ends_with("**met**") || l.ends_with("**MISSED**")))
        .count();
    assert!(targets >= 15, "{targets} target lines:\n{text}");
}
