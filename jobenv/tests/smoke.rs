use fediversity_testkit::nix_fixture::Fixture;
use serde_json::json;
use std::path::Path;

fn jobenv() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_fediversity-jobenv"))
}

#[test]
fn a_program_runs_through_nix_shell() {
    let mut f = Fixture::new();
    f.program("web", "apply", "echo hello from $DEPLOYMENT_NAMESPACE");
    let out = f.run(jobenv(), &["run", "--verb", "apply"], &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns1"}));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from ns1\n", "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success());
}
