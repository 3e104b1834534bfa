//! What the kernel could not pass to a program is refused before anything runs (exit 2, the key
//! named, no "running"), not found out by a failing exec (125) after the job was reported as
//! running: one `KEY=VALUE` over `MAX_ARG_STRLEN` (128 KiB with its NUL), and an argv and
//! environment too large in total for the stack limit jobenv runs under.

use std::path::Path;
use std::process::Command;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, run_with_payload};
use serde_json::{Value, json};

/// The kernel's limit for one string of argv or the environment, its NUL included.
const MAX_ARG_STRLEN: usize = 128 * 1024;

fn fixture() -> Fixture {
    let mut f = Fixture::new();
    let started = f.path().join("started");
    f.program(
        "web",
        "apply",
        &format!(
            "touch {}; echo \"$(printf %s \"$BIG\" | wc -c) $(printf %s \"$MORE\" | wc -c)\"",
            started.display()
        ),
    );
    f.declare("BIG", None).declare("MORE", None).declare("EVEN_MORE", None);
    f
}

/// jobenv `run --verb apply` with `payload`, under a soft stack limit of `stack_kib`.
fn run_with_stack(f: &Fixture, stack_kib: u32, payload: &Value) -> (Option<i32>, String, String) {
    let jobenv = f.command(jobenv_bin!(), &["run", "--verb", "apply"]);
    let mut command = Command::new("/bin/sh");
    command
        .args([
            "-c",
            "ulimit -S -s \"$1\" && shift && exec \"$@\"",
            "sh",
            &stack_kib.to_string(),
        ])
        .arg(jobenv.get_program())
        .args(jobenv.get_args())
        .current_dir(jobenv.get_current_dir().expect("the job directory"))
        .env_clear();
    for (key, value) in jobenv.get_envs() {
        command.env(key, value.expect("set"));
    }
    let out = run_with_payload(command, payload);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn started(f: &Fixture) -> bool {
    Path::new(&f.path().join("started")).exists()
}

#[test]
fn one_variable_over_the_kernels_limit_is_refused_naming_it() {
    let f = fixture();
    // `BIG=<value>` plus its NUL: exactly the limit passes (the positive control), a byte more
    // does not.
    let fits = "b".repeat(MAX_ARG_STRLEN - "BIG=".len() - 1);
    let (code, stdout, stderr) = run_with_stack(&f, 8192, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BIG": fits}));
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, format!("{} 0\n", fits.len()));
    std::fs::remove_file(f.path().join("started")).unwrap();

    let over = format!("{fits}b");
    let (code, _, stderr) = run_with_stack(&f, 8192, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BIG": over}));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("jobenv: error: BIG (payload) cannot be passed to a program: BIG=<value> is 131072 bytes, the kernel takes at most 131071"),
        "{stderr}"
    );
    assert!(!stderr.contains("running") && !started(&f), "{stderr}");
    assert!(!stderr.contains("bbbbbbbb"), "the value is not shown");
}

#[test]
fn an_environment_too_large_for_the_stack_limit_is_refused_before_it_runs() {
    let f = fixture();
    // Under a 1 MiB stack the kernel takes 256 KiB of argv and environment: three variables of
    // 100 KiB would fail at exec. jobenv leaves half of it to what nix-shell adds.
    let value = "m".repeat(100 * 1024);
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BIG": value, "MORE": value, "EVEN_MORE": value});
    let (code, _, stderr) = run_with_stack(&f, 1024, &payload);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("jobenv: error: the program's arguments and environment take"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "bytes, more than the 131072 that jobenv leaves them under this stack limit (largest: BIG, EVEN_MORE, MORE)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("running") && !started(&f), "{stderr}");
    // Positive controls: the same job runs under the usual 8 MiB stack, and one variable of
    // 100 KiB runs under the small one.
    let (code, stdout, stderr) = run_with_stack(&f, 8192, &payload);
    assert_eq!((code, stdout.as_str()), (Some(0), "102400 102400\n"), "{stderr}");
    let (code, _, stderr) = run_with_stack(&f, 1024, &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "BIG": value}));
    assert_eq!(code, Some(0), "{stderr}");
}
