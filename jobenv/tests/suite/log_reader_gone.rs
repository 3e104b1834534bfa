//! When whoever reads jobenv's output goes away (a crashed front-end, a worker's log reader),
//! jobenv's own log lines can no longer be written. That must change nothing: the job still
//! ends with the program's code, and a cancel still stops the whole program tree.
//!
//! (It once did: tracing-subscriber reports a failed write with `eprintln!`, which panics on a
//! broken stderr, and the panicking jobenv left the program's children running.)

use std::process::Stdio;
use std::time::Duration;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::process::{Running, is_alive, kill_all, read_pids, wait_exit, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

/// Starts jobenv with `body` as the program, then closes the read ends of its stdout and
/// stderr once `pids` holds `count` pids written by the program.
fn start_and_close_output(f: &mut Fixture, body: &str, count: usize) -> (Running, Vec<i32>) {
    let pids_file = f.path().join("pids");
    f.program("web", "apply", &body.replace("PIDS", &pids_file.display().to_string()));
    let mut child = f
        .command(jobenv_bin!(), &["run", "--verb", "apply"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start jobenv");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}).to_string().as_bytes())
        .unwrap();
    let pids = read_pids(&pids_file, count, Duration::from_secs(20));
    drop(child.stdout.take());
    drop(child.stderr.take());
    (Running(child), pids)
}

#[test]
fn a_cancel_still_stops_the_whole_tree() {
    let mut f = Fixture::new();
    let (mut jobenv, tree) = start_and_close_output(
        &mut f,
        "sleep 300 & echo $! >> PIDS; echo $$ >> PIDS; echo output; wait",
        2,
    );
    // Positive control: the tree runs, and the program has written to the closed stdout.
    assert!(tree.iter().all(|&pid| is_alive(pid)), "{tree:?}");
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGTERM).unwrap();
    let code = wait_exit(&mut jobenv, Duration::from_secs(5)).and_then(|s| s.code());
    let gone = wait_until(Duration::from_secs(1), || tree.iter().all(|&pid| !is_alive(pid)));
    let alive: Vec<_> = tree.iter().filter(|&&pid| is_alive(pid)).collect();
    kill_all(&tree);
    assert_eq!(code, Some(143), "jobenv did not end as cancelled");
    assert!(gone, "left running: {alive:?}");
}

#[test]
fn a_finished_program_still_gives_its_exit_code() {
    let mut f = Fixture::new();
    let go = f.path().join("go");
    let body = format!(
        "echo $$ >> PIDS; while [ ! -e {} ]; do sleep 0.02; done; echo done; echo done >&2; exit 5",
        go.display()
    );
    let (mut jobenv, tree) = start_and_close_output(&mut f, &body, 1);
    std::fs::write(&go, "").unwrap();
    let code = wait_exit(&mut jobenv, Duration::from_secs(10)).and_then(|s| s.code());
    kill_all(&tree);
    assert_eq!(code, Some(5));
}
