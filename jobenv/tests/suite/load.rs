//! Load: 50 jobs at once, each in its own namespace, each writing 10 MB of its own marker
//! through redaction. Every output holds only its own marker, every exit code is right, and no
//! program sees a descriptor that is not its own (its own namespace lock is).

use std::process::Output;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, run_with_payload};
use serde_json::json;

const JOBS: usize = 50;
/// Lines of about 34 bytes: 10 MB per job.
const LINES: usize = 300_000;

#[test]
fn fifty_concurrent_jobs_keep_their_outputs_apart() {
    let mut f = Fixture::new();
    f.program(
        "web",
        "apply",
        &format!(
            r#"yes "marker-$DEPLOYMENT_NAMESPACE $LOAD_SECRET" | head -n {LINES}; ls -l /proc/$$/fd/ >&2; exit "$EXIT_CODE""#
        ),
    );
    f.declare("EXIT_CODE", None)
        .declare("LOAD_SECRET", None)
        .secret("LOAD_SECRET", "load-secret-5f2a");
    f.write();
    let outputs: Vec<(usize, Output)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..JOBS)
            .map(|i| {
                let f = &f;
                scope.spawn(move || {
                    let command = f.command(
                        jobenv_bin!(),
                        &["run", "--verb", "apply", "--job-id", &format!("load-{i}")],
                    );
                    (
                        i,
                        run_with_payload(
                            command,
                            &json!({"ATTRIBUTE": "web", "NAMESPACE": format!("load-{i}"), "EXIT_CODE": i % 7}),
                        ),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let state = f.state_dir().display().to_string();
    for (i, out) in outputs {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some((i % 7) as i32), "job {i}: {stderr}");
        let expected = format!("marker-load-{i} [REDACTED]");
        let text = String::from_utf8(out.stdout).expect("markers are text");
        assert_eq!(text.lines().count(), LINES, "job {i}: lines went missing");
        assert!(
            text.lines().all(|l| l == expected),
            "job {i}: a line that is not its own marker"
        );
        // Only its own namespace lock, which the program tree holds on purpose (fd 4).
        let into_state: Vec<&str> = stderr.lines().filter(|l| l.contains(&state)).collect();
        let own_lock = format!(" 4 -> {state}/locks/namespace-load-{i}.tree.lock");
        assert!(
            into_state.len() == 1 && into_state[0].ends_with(&own_lock),
            "job {i}: a journal or lock descriptor reached the program: {stderr}"
        );
        // None of jobenv's warnings (Nix's, of its database busy with fifty evaluations at
        // once, are Nix's).
        assert!(!stderr.contains("jobenv: warning"), "job {i}: {stderr}");
    }
}
