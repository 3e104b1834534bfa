//! The log formatter on a stderr that nobody reads any more: lines are lost, the process goes on.
//! Each case runs this test binary again as a child whose stderr is a pipe with its read end
//! already closed (the child waits for its stdin to close before it writes, so the order is
//! certain).

use std::io::Read;
use std::process::{Command, Stdio};

const MODE: &str = "SAFE_IO_TEST_CHILD";

/// What the child does, chosen by the parent through [`MODE`].
#[test]
fn child() {
    let Ok(mode) = std::env::var(MODE) else { return };
    std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    match mode.as_str() {
        "log" => {
            safe_io::log::init("child: ", "SAFE_IO_TEST_LOG", &["log"]).unwrap();
            for i in 0..3 {
                tracing::error!("a line nobody reads {i}");
            }
        }
        // The positive control: a plain write to the same broken stderr panics.
        "eprintln" => eprintln!("a line nobody reads"),
        other => panic!("unknown mode {other}"),
    }
    println!("child finished");
}

/// Runs [`child`] in `mode` with a broken stderr: whether it finished, and its exit status.
fn run_with_broken_stderr(mode: &str) -> (bool, std::process::ExitStatus) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(MODE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).contains("child finished"),
        out.status,
    )
}

#[test]
fn a_broken_stderr_loses_the_lines_and_nothing_else() {
    let (finished, status) = run_with_broken_stderr("log");
    assert!(finished && status.success(), "{status}");
}

#[test]
fn positive_control_a_plain_write_to_the_broken_stderr_panics() {
    let (finished, status) = run_with_broken_stderr("eprintln");
    assert!(!finished && !status.success(), "{status}");
}
