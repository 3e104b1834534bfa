//! Nothing undeclared reaches a deployment, and two deployments never share state.

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use serde_json::{Value, json};

fn payload() -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})
}

#[test]
fn job_runner_variables_do_not_reach_the_program_but_declared_keys_do() {
    let mut f = Fixture::new();
    f.program("web", "apply", "/usr/bin/env").declare("DECLARED", None);
    let done = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("WM_TOKEN", "jwt_job_token")
        .env("WM_JOB_ID", "0192-job")
        .env("BASE_INTERNAL_URL", "http://localhost:1234")
        .env("PYTHONPATH", "/tmp/python-path")
        .env("SOME_RANDOM_VARIABLE", "random")
        .env("LD_PRELOAD", "/tmp/evil.so")
        .env("DECLARED", "yes")
        .payload(&payload())
        .expect_success()
        .run();
    let env = done.env();
    // Positive control: the same mechanism passes a declared key.
    assert_eq!(env.get("DECLARED").map(String::as_str), Some("yes"), "{env:?}");
    for leaked in [
        "WM_TOKEN",
        "WM_JOB_ID",
        "BASE_INTERNAL_URL",
        "PYTHONPATH",
        "SOME_RANDOM_VARIABLE",
        "LD_PRELOAD",
    ] {
        assert!(!env.contains_key(leaked), "{leaked} reached the program: {env:?}");
    }
    assert!(!done.stdout.contains("jwt_job_token"));
}

#[test]
fn two_namespaces_get_two_state_addresses() {
    let mut f = Fixture::new();
    f.program("web", "apply", r#"echo "address=$TF_HTTP_ADDRESS lock=$TF_HTTP_LOCK_ADDRESS unlock=$TF_HTTP_UNLOCK_ADDRESS ns=$DEPLOYMENT_NAMESPACE""#);
    f.node("STATE_BASE_ADDRESS", "https://state.example/tf/");
    let run = |ns: &str| {
        f.jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": ns}))
            .expect_success()
            .run()
            .stdout
    };
    assert_eq!(
        run("team-a"),
        "address=https://state.example/tf/team-a lock=https://state.example/tf/team-a/lock unlock=https://state.example/tf/team-a/lock ns=team-a\n"
    );
    assert_eq!(
        run("team-b"),
        "address=https://state.example/tf/team-b lock=https://state.example/tf/team-b/lock unlock=https://state.example/tf/team-b/lock ns=team-b\n"
    );
}

#[test]
fn a_payload_cannot_address_another_namespaces_state() {
    let mut f = Fixture::new();
    let started = f.path().join("started");
    f.program("web", "apply", &format!("touch {}", started.display()));
    f.node("STATE_BASE_ADDRESS", "https://state.example/tf");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "a", "TF_HTTP_ADDRESS": "https://state.example/tf/b"}))
        .expect_code(2)
        .expect_stderr_contains(
            r#"NAMESPACE "a" differs from the last segment of TF_HTTP_ADDRESS "https://state.example/tf/b""#,
        )
        .run();
    assert!(!started.exists(), "the program ran");
}

#[test]
fn the_program_gets_the_node_pin_of_nixpkgs() {
    let mut f = Fixture::new();
    f.program("web", "apply", "/usr/bin/env");
    let env = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload())
        .expect_success()
        .run()
        .env();
    assert_eq!(env["NIX_PATH"], format!("nixpkgs={}", f.root().display()));
}

#[test]
fn descriptors_jobenv_inherits_do_not_reach_the_program() {
    use std::os::fd::AsRawFd;
    let mut f = Fixture::new();
    // One `ls`, no command substitution: the shell itself opens no pipe while listing.
    f.program("web", "apply", "ls -l /proc/$$/fd/");
    // A file opened without close-on-exec, as a job runner's socket or a caller's pipe would be.
    let marker = f.path().join("inherited-marker");
    std::fs::write(&marker, "x").unwrap();
    let file = std::fs::File::open(&marker).unwrap();
    let inherited = nix::unistd::dup(&file).unwrap();
    let fds = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload())
        .expect_success()
        .run()
        .stdout;
    // Positive control: the same listing, run without jobenv by this process (which passes the
    // descriptor on, as a job runner would), does show it.
    assert!(inherited.as_raw_fd() > 2);
    let direct = std::process::Command::new("/bin/sh")
        .args(["-c", "ls -l /proc/$$/fd/"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&direct.stdout).contains("inherited-marker"),
        "the check cannot see an inherited descriptor"
    );
    assert!(
        !fds.contains("inherited-marker"),
        "an inherited descriptor reached the program:\n{fds}"
    );
    // Of the state directory, the program holds only the namespace's tree lock, at fd 4, so
    // that the namespace stays locked while any process of its tree lives.
    let state = f.state_dir().display().to_string();
    let into_state: Vec<&str> = fds.lines().filter(|l| l.contains(&state)).collect();
    assert_eq!(into_state.len(), 1, "a lock or journal descriptor leaked:\n{fds}");
    assert!(
        into_state[0].contains(&format!(" 4 -> {state}/locks/namespace-ns.tree.lock")),
        "{fds}"
    );
    assert!(!fds.contains("socket:"), "{fds}");
    let pipes: Vec<&str> = fds
        .lines()
        .filter(|l| l.contains("pipe:"))
        .filter_map(|l| l.split(" -> ").next()?.rsplit(' ').next())
        .collect();
    assert_eq!(pipes, ["1", "2"], "only stdout and stderr are pipes:\n{fds}");
}

/// Variables that make bash, an interpreter, git, ssh, the resolver or OpenTofu run code or read
/// config of the job's choosing: declared or not, no payload sets them.
const STEERING: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "PS4",
    "TF_CLI_ARGS_init",
    "TF_CLI_CONFIG_FILE",
    "TF_LOG_PATH",
    "TF_WORKSPACE",
    "GIT_SSH_COMMAND",
    "GIT_CONFIG_GLOBAL",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PERL5OPT",
    "PERLLIB",
    "RUBYOPT",
    "NODE_OPTIONS",
    "LUA_INIT",
    "JAVA_TOOL_OPTIONS",
    "OPENSSL_CONF",
    "SSH_AUTH_SOCK",
    "SSH_ASKPASS",
    "XDG_CONFIG_HOME",
    "HOSTALIASES",
];

#[test]
fn declared_variables_that_steer_a_shell_an_interpreter_git_ssh_or_opentofu_are_refused_in_a_payload() {
    let mut f = Fixture::new();
    let started = f.path().join("started");
    // bash (nix-shell's shell, and the program's) sources BASH_ENV before anything else.
    let hook = f.path().join("hook.sh");
    let hooked = f.path().join("hooked");
    std::fs::write(&hook, format!("touch {}\n", hooked.display())).unwrap();
    f.program("web", "apply", &format!("touch {}", started.display()))
        .declare("DOMAIN", None);
    for key in STEERING {
        f.declare(key, None);
    }
    let mut payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"});
    for key in STEERING {
        payload[*key] = json!(hook.display().to_string());
    }
    let mut sorted = STEERING.to_vec();
    sorted.sort_unstable();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&payload)
        .expect_code(2)
        .expect_stderr_contains(format!("payload rejected: reserved keys: {}", sorted.join(", ")))
        .run();
    assert!(!started.exists() && !hooked.exists(), "the program or the hook ran");
    // Positive controls: BASH_ENV really runs code in bash, and a declared ordinary key passes.
    std::process::Command::new("bash")
        .args(["-c", "true"])
        .env("BASH_ENV", &hook)
        .status()
        .unwrap();
    assert!(hooked.exists(), "the check could not see a BASH_ENV hook run");
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "DOMAIN": "d"}))
        .expect_success()
        .run();
    assert!(started.exists());
}

#[test]
fn declared_steering_variables_in_jobenvs_own_environment_never_reach_the_program() {
    let mut f = Fixture::new();
    f.program("web", "apply", "/usr/bin/env").declare("DECLARED", None);
    for key in STEERING {
        f.declare(key, None);
    }
    let mut run = f.jobenv(jobenv_bin!()).verb("apply").env("DECLARED", "yes");
    for key in STEERING {
        run = run.env(key, "/nonexistent/from-the-worker");
    }
    let env = run.payload(&payload()).expect_success().run().env();
    // Positive control: the same way, a declared ordinary key does pass.
    assert_eq!(env.get("DECLARED").map(String::as_str), Some("yes"), "{env:?}");
    for key in STEERING {
        assert!(!env.contains_key(*key), "{key} reached the program: {env:?}");
    }
}

use fediversity_testkit::nix_fixture::WORKER_UID;

/// jobenv holds every secret of the node and the payload (a tenant's state password): no process
/// of its own user can read its environment, its descriptors or its memory, not even the program
/// it runs. Its `/proc` files belong to root while it runs. The positive controls: the same
/// checks, by the same process, succeed against an ordinary process of that user, and the
/// descriptor jobenv is refused is there (root sees it).
#[test]
fn jobenv_is_sealed_from_the_processes_of_its_own_user() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    use std::time::Duration;

    let mut f = Fixture::new();
    let (checked, go) = (f.job_dir().join("checked"), f.job_dir().join("go"));
    // The program is a child of jobenv ($PPID): nix-shell's stand-in below execs into it.
    f.program(
        "web",
        "apply",
        &format!(
            r#"jobenv=$PPID
sleep 30 & peer=$!
echo "uid: $(id -u)"
for file in environ fd/0 mem; do
  for who in jobenv peer; do
    eval pid=\$$who
    if (exec 5< /proc/$pid/$file) 2>/dev/null; then echo "$who $file: readable"; else echo "$who $file: denied"; fi
  done
done
printf "%s\\n%s\\n" $jobenv $$ > {checked}.tmp && mv {checked}.tmp {checked}
while [ ! -e {go} ]; do sleep 0.05; done
kill $peer"#,
            checked = checked.display(),
            go = go.display()
        ),
    );
    f.declare("API_TOKEN", None)
        .secret("API_TOKEN", "node-secret-in-jobenvs-memory");
    let stand_in = f.nix_shell_stand_in();
    let mut run = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--nix-shell", stand_in.to_str().unwrap()])
        .payload(&payload());
    run.command().uid(WORKER_UID).gid(WORKER_UID);
    f.hand_to(WORKER_UID);
    let mut jobenv = run.spawn();
    if !fediversity_testkit::process::wait_until(Duration::from_secs(20), || checked.exists()) {
        let _ = jobenv.kill();
        let mut stderr = String::new();
        std::io::Read::read_to_string(jobenv.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        panic!("the program never ran its checks:\n{stderr}");
    }
    let pids = fediversity_testkit::process::read_pids(&checked, 2, Duration::from_secs(20));
    let (jobenv_pid, program) = (pids[0], pids[1]);
    assert_eq!(jobenv_pid, jobenv.id() as i32, "the program's parent is jobenv");

    // As root: jobenv's files belong to root, the program's to the worker's user; the payload
    // descriptor the program was refused exists.
    let owner = |pid: i32, file: &str| std::fs::metadata(format!("/proc/{pid}/{file}")).unwrap().uid();
    assert_eq!(owner(jobenv_pid, "environ"), 0);
    assert_eq!(owner(jobenv_pid, "status"), 0);
    assert_eq!(owner(program, "environ"), WORKER_UID);
    assert!(
        std::fs::read_link(format!("/proc/{jobenv_pid}/fd/0")).is_ok(),
        "jobenv's stdin is open"
    );

    std::fs::write(&go, "").unwrap();
    let status = fediversity_testkit::process::wait_exit(&mut jobenv, Duration::from_secs(20)).expect("jobenv ends");
    let mut stdout = String::new();
    std::io::Read::read_to_string(jobenv.stdout.as_mut().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{status:?}\n{stdout}");
    assert_eq!(
        stdout,
        format!(
            "uid: {WORKER_UID}\njobenv environ: denied\npeer environ: readable\njobenv fd/0: denied\npeer fd/0: readable\njobenv mem: denied\npeer mem: readable\n"
        )
    );
}

/// Why the NixOS module gives the worker a copy of jobenv it may run but not read: the kernel
/// starts a process of a binary its user cannot read not dumpable, so even a process of that
/// user that traces the job process from before its exec (the window before jobenv's own seal)
/// is refused its memory and environment at the very first stop after the exec. The positive
/// control: the same trace of a readable copy gets both.
#[test]
fn an_execute_only_jobenv_is_sealed_from_its_first_instruction() {
    use std::os::unix::fs::PermissionsExt;
    const TRACER: &str = r#"
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
target = sys.argv[1]
pid = os.fork()
if pid == 0:
    libc.ptrace(0, 0, None, None)  # PTRACE_TRACEME
    os.kill(os.getpid(), signal.SIGSTOP)
    os.execv(target, [target, "--version"])
    os._exit(127)
os.waitpid(pid, 0)  # its SIGSTOP
libc.ptrace(7, pid, None, None)  # PTRACE_CONT
os.waitpid(pid, 0)  # the SIGTRAP after the exec: nothing of jobenv has run yet
for name in ("mem", "environ"):
    try:
        open(f"/proc/{pid}/{name}", "rb").close()
        print(f"{name}: readable")
    except PermissionError:
        print(f"{name}: denied")
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
"#;
    let dir = tempfile::Builder::new().prefix("sealed-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let trace = |mode: u32| {
        let copy = dir.path().join(format!("fediversity-jobenv-{mode:o}"));
        std::fs::copy(jobenv_bin!(), &copy).unwrap();
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "65534",
                "--regid",
                "65534",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                TRACER,
            ])
            .arg(&copy)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        trace(0o755),
        "mem: readable\nenviron: readable\n",
        "the window a readable copy leaves"
    );
    assert_eq!(trace(0o111), "mem: denied\nenviron: denied\n");
}
