//! The Windmill scripts (`scripts/f/fediversity/`), run the way a Windmill worker runs a Python
//! job (Windmill's `python_executor.rs`, and what a real CE 1.743.0 worker did): a job directory holding the script at
//! `f/fediversity/<name>.py`, `args.json` and a `wrapper.py` that calls `main(**args)` and turns
//! an exception into `result.json` + exit 1; `python3 -u -m wrapper` with the job directory as
//! cwd, an environment cleared except `WM_*`, `PATH`, `HOME`, `TZ`, `BASE_INTERNAL_URL` and
//! `PYTHONPATH`, as the leader of its own process group. The shared helper `_jobenv` is not in
//! the job directory: it resolves as `f.fediversity._jobenv` through `PYTHONPATH` (or, in one
//! test, through a meta-path finder like Windmill's loader).
//!
//! Against the real jobenv binary and a real nix-shell fixture. The one thing that is not the
//! worker's: `JOBENV_*` point jobenv at the fixture's node files, since tests cannot use /etc.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, TEST_PATH, parse_env_lines};
use fediversity_testkit::process::{StreamWatch, is_alive, kill_all, pgid, read_pids, wait_exit, wait_until};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// A new Windmill job id for each job, as the worker hands out (jobenv journals by job id and
/// replays a job id that already ended instead of running it again).
fn new_job_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "01a22715-984d-f09c-{:04x}-{:012x}",
        std::process::id() & 0xffff,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
const WM_TOKEN: &str = "jwt_wm-token-of-the-job-must-not-reach-the-program";

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/f/fediversity")
}

/// The job directory and node of one Windmill job.
struct Job {
    f: Fixture,
    /// A directory on PYTHONPATH holding `f/fediversity/_jobenv.py` (no `__init__.py`: `f` and
    /// `f.fediversity` are namespace packages spanning it and the job directory).
    lib: PathBuf,
    path: String,
    extra_env: Vec<(String, String)>,
    /// The WM_JOB_ID of the job last prepared by `command`.
    job_id: std::cell::RefCell<String>,
}

impl Job {
    fn new(f: Fixture) -> Self {
        let lib = f.path().join("lib");
        std::fs::create_dir_all(lib.join("f/fediversity")).unwrap();
        std::fs::copy(scripts_dir().join("_jobenv.py"), lib.join("f/fediversity/_jobenv.py")).unwrap();
        let jobenv_dir = jobenv_bin!().parent().unwrap().display().to_string();
        Job {
            f,
            lib,
            path: format!("{jobenv_dir}:{TEST_PATH}"),
            extra_env: Vec::new(),
            job_id: Default::default(),
        }
    }

    fn job_dir(&self) -> PathBuf {
        self.f.job_dir()
    }

    /// Prepares the job directory for `script` (deploy or destroy) with `args` as the raw text
    /// of args.json; `prelude` is Python run by the wrapper before it imports the script.
    fn command(&self, script: &str, args: &str, prelude: &str) -> Command {
        self.f.write();
        let dir = self.job_dir();
        std::fs::create_dir_all(dir.join("f/fediversity")).unwrap();
        std::fs::copy(
            scripts_dir().join(format!("{script}.py")),
            dir.join(format!("f/fediversity/{script}.py")),
        )
        .unwrap();
        std::fs::write(dir.join("args.json"), args).unwrap();
        std::fs::write(dir.join("wrapper.py"), wrapper(script, prelude)).unwrap();

        let job_id = new_job_id();
        *self.job_id.borrow_mut() = job_id.clone();
        let mut command = Command::new("python3");
        command
            .args(["-u", "-m", "wrapper"])
            .current_dir(&dir)
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", self.f.path())
            .env("TZ", "")
            .env("BASE_INTERNAL_URL", "http://localhost:41867")
            .env("PYTHONPATH", &self.lib)
            .env("WM_JOB_ID", &job_id)
            .env("WM_ROOT_JOB_ID", &job_id)
            .env("WM_TOKEN", WM_TOKEN)
            .env("WM_WORKSPACE", "fediversity")
            .env("WM_JOB_PATH", format!("f/fediversity/{script}"))
            .env("WM_EMAIL", "admin@windmill.dev")
            .env("WM_USERNAME", "admin")
            .env("JOBENV_DEPLOY_ENV", self.f.deploy_env_path())
            .env("JOBENV_KEYS", self.f.keys_path())
            .env("JOBENV_ATTRIBUTES", self.f.attributes_path())
            .env("JOBENV_SECRETS_DIRS", self.f.secrets_dir())
            .env("JOBENV_STATE_DIR", self.f.state_dir())
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The worker spawns each job as the leader of a new process group.
            .process_group(0);
        command
    }

    fn run(&self, script: &str, payload: &Value) -> Output {
        self.run_raw(script, &payload.to_string(), "")
    }

    fn run_raw(&self, script: &str, args: &str, prelude: &str) -> Output {
        let child = self.command(script, args, prelude).spawn().expect("start python3");
        wait_output(child, Duration::from_secs(60))
    }

    fn start(&self, script: &str, payload: &Value, prelude: &str) -> Child {
        self.command(script, &payload.to_string(), prelude)
            .spawn()
            .expect("start python3")
    }

    /// The job's result: what the worker reads from result.json.
    fn result(&self) -> Value {
        let path = self.job_dir().join("result.json");
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let result: Value = serde_json::from_slice(&text).expect("result.json is JSON");
        // jobenv's, once the script handed over; else the script's own error.
        if result.get("status").is_some() {
            fediversity_testkit::schemas::Contract::Result.check(&result);
        }
        result
    }
}

/// What Windmill's generated wrapper does for a `main(**kwargs)` script (python_executor.rs,
/// `handle_python_job`): load args.json, drop `<function call>` placeholders, call main, write
/// the return value or the exception to result.json, exit 1 on an exception.
fn wrapper(script: &str, prelude: &str) -> String {
    format!(
        r#"import os
import json
import sys
import traceback
{prelude}
from f.fediversity import {script} as inner_script

with open("args.json") as f:
    kwargs = json.load(f, strict=False)
args = kwargs
result_json = os.path.join(os.path.abspath(os.path.dirname(__file__)), "result.json")
try:
    for k, v in list(args.items()):
        if v == "<function call>":
            del args[k]
    res = inner_script.main(**args)
    with open(result_json, "w") as f:
        f.write(json.dumps(res, separators=(",", ":"), default=str))
except BaseException as e:
    tb = traceback.format_tb(sys.exc_info()[2])
    with open(result_json, "w") as f:
        err = {{"message": str(e), "name": e.__class__.__name__, "stack": "\n".join(tb[1:])}}
        f.write(json.dumps(err, separators=(",", ":"), default=str))
    sys.exit(1)
"#
    )
}

fn wait_output(mut child: Child, limit: Duration) -> Output {
    let stdout = StreamWatch::new(child.stdout.take().unwrap());
    let stderr = StreamWatch::new(child.stderr.take().unwrap());
    let status = wait_exit(&mut child, limit).unwrap_or_else(|| {
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        panic!("the job did not finish within {limit:?}")
    });
    Output {
        status,
        stdout: stdout.finish(),
        stderr: stderr.finish(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn log(out: &Output) -> String {
    format!("--- stdout\n{}--- stderr\n{}", text(&out.stdout), text(&out.stderr))
}

/// A node with the attribute `web`, whose apply program prints the keys of the test and writes
/// its whole environment to `<fixture>/program-env`.
fn payload_fixture() -> Fixture {
    let mut f = Fixture::new();
    let env_file = f.path().join("program-env");
    f.declare("MESSAGE", None)
        .declare("COUNT", None)
        .declare("HOSTS", None)
        .declare("REGION", Some("eu-1"));
    f.program(
        "web",
        "apply",
        &format!(
            "echo \"web-apply: namespace=$DEPLOYMENT_NAMESPACE message=$MESSAGE count=$COUNT hosts=$HOSTS region=$REGION\"\nenv > {}",
            env_file.display()
        ),
    );
    f
}

#[test]
fn deploy_hands_the_payload_to_the_apply_program_and_the_job_succeeds() {
    let job = Job::new(payload_fixture());
    let message = "hello \"world\" $HOME `id` 'single' ünïcode";
    let out = job.run(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns-1", "MESSAGE": message, "COUNT": 3, "HOSTS": ["a", "b"], "SYSTEM": null}),
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(
        text(&out.stdout),
        format!("web-apply: namespace=ns-1 message={message} count=3 hosts=[\"a\",\"b\"] region=eu-1\n"),
        "{}",
        log(&out)
    );
    let env = parse_env_lines(&std::fs::read_to_string(job.f.path().join("program-env")).unwrap());
    assert_eq!(env["MESSAGE"], message);
    assert_eq!(env["COUNT"], "3");
    assert_eq!(env["HOSTS"], r#"["a","b"]"#);
    assert_eq!(env["DEPLOYMENT_NAMESPACE"], "ns-1");
    // The worker's own variables stop at jobenv (the same file holds the payload keys above,
    // so it does show the program's environment).
    for name in [
        "WM_TOKEN",
        "WM_JOB_ID",
        "WM_WORKSPACE",
        "PYTHONPATH",
        "BASE_INTERNAL_URL",
        "JOBENV_KEYS",
    ] {
        assert!(!env.contains_key(name), "{name} reached the program");
    }
    assert!(!text(&out.stdout).contains(WM_TOKEN) && !text(&out.stderr).contains(WM_TOKEN));
    // The hand-over is logged, without any value.
    assert!(
        text(&out.stderr).contains("fediversity: handing the job to "),
        "{}",
        log(&out)
    );
    assert!(
        text(&out.stderr).contains(" run --verb apply (payload of 6 keys, "),
        "{}",
        log(&out)
    );
    assert!(!text(&out.stderr).contains("hello"), "{}", log(&out));

    let result = job.result();
    assert_eq!(result["status"], "succeeded", "{result}");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["verb"], "apply");
    assert_eq!(result["attribute"], "web");
    assert_eq!(result["namespace"], "ns-1");
    assert_eq!(result["job_id"], *job.job_id.borrow());

    // The job id reached jobenv through the exec: the run is journaled under it.
    let journal = job.f.state_dir().join(format!("jobs/{}.json", job.job_id.borrow()));
    let entry: Value = serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
    fediversity_testkit::schemas::Contract::JournalEntry.check(&entry);
    assert_eq!(
        (
            entry["status"].as_str(),
            entry["verb"].as_str(),
            entry["namespace"].as_str()
        ),
        (Some("succeeded"), Some("apply"), Some("ns-1"))
    );
}

/// What a front-end built to the seeds submits to the deploy script (see front_end.rs): the
/// address already scoped and no NAMESPACE, node keys the node overrides, a verb-less program,
/// the state backend's credentials, arrays and objects as values.
#[test]
fn deploy_runs_a_seed_shaped_payload_as_a_worker_calls_main() {
    const PASSWORD: &str = "state-password-from-the-front-end-7Qx";
    let mut f = Fixture::new();
    let env_file = f.path().join("program-env");
    f.program(
        "web",
        "apply",
        &format!(
            "{{ echo \"PROGRAM=$0\"; /usr/bin/env; }} > {}; echo \"password: $TF_HTTP_PASSWORD\"",
            env_file.display()
        ),
    );
    std::fs::copy(f.root().join("bin/web-apply"), f.root().join("bin/web")).unwrap();
    for key in [
        "SSH_PRIVATE_KEY_FILE",
        "INTERNAL_HOSTS",
        "PUBLISHED_HOSTS",
        "ENVIRONMENTS",
    ] {
        f.declare(key, None);
    }
    let job = Job::new(f);
    let out = job.run(
        "deploy",
        &json!({
            "ATTRIBUTE": "web",
            "EXECUTABLE": "web",
            "SYSTEM": format!("{}-linux", std::env::consts::ARCH),
            "DEPLOYMENT_ROOT": "/srv/front-end/deployments",
            "NIXPKGS": "/nix/store/front-end-nixpkgs",
            "TF_HTTP_ADDRESS": "https://state.example/tf/team-a",
            "TF_HTTP_USERNAME": "front-end",
            "TF_HTTP_PASSWORD": PASSWORD,
            "SSH_PRIVATE_KEY_FILE": "/run/secrets/deploy-key",
            "INTERNAL_HOSTS": ["web01.internal", "db01.internal"],
            "PUBLISHED_HOSTS": ["team-a.example"],
            "ENVIRONMENTS": {"production": {"replicas": 2}},
        }),
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(text(&out.stdout), "password: [REDACTED]\n", "{}", log(&out));
    assert!(
        text(&out.stderr).contains("jobenv: warning: payload value for DEPLOYMENT_ROOT ignored: the node sets it"),
        "{}",
        log(&out)
    );
    assert!(!text(&out.stderr).contains(PASSWORD), "{}", log(&out));
    let env = parse_env_lines(&std::fs::read_to_string(&env_file).unwrap());
    let root = job.f.root().display().to_string();
    assert_eq!(env["PROGRAM"], format!("{root}/bin/web"));
    assert_eq!(env["NIX_PATH"], format!("nixpkgs={root}"));
    assert_eq!(env["TF_HTTP_ADDRESS"], "https://state.example/tf/team-a");
    assert_eq!(env["DEPLOYMENT_NAMESPACE"], "team-a");
    assert_eq!(
        env["TF_HTTP_PASSWORD"], PASSWORD,
        "the positive control: the password reached the program"
    );
    assert_eq!(env["INTERNAL_HOSTS"], r#"["web01.internal","db01.internal"]"#);
    assert_eq!(env["ENVIRONMENTS"], r#"{"production":{"replicas":2}}"#);
    let result = job.result();
    assert_eq!(
        (
            result["status"].as_str(),
            result["namespace"].as_str(),
            result["attribute"].as_str()
        ),
        (Some("succeeded"), Some("team-a"), Some("web")),
        "{result}"
    );
    assert!(!result.to_string().contains(PASSWORD), "{result}");
}

#[test]
fn destroy_runs_the_destroy_program() {
    let mut f = Fixture::new();
    f.program("web", "apply", "echo web-apply ran").program(
        "web",
        "destroy",
        "echo web-destroy ran in $DEPLOYMENT_NAMESPACE",
    );
    let job = Job::new(f);
    let out = job.run("destroy", &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns-2"}));
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(text(&out.stdout), "web-destroy ran in ns-2\n");
    assert!(text(&out.stderr).contains(" run --verb destroy "), "{}", log(&out));
    let result = job.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["verb"], "destroy");

    // The control: deploy with the same node runs the other program.
    let out = job.run("deploy", &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns-2"}));
    assert_eq!(text(&out.stdout), "web-apply ran\n", "{}", log(&out));
    assert_eq!(job.result()["verb"], "apply");
}

#[test]
fn a_failing_program_fails_the_job_with_its_output_in_the_log() {
    let mut f = Fixture::new();
    f.program(
        "web",
        "apply",
        "echo 'step 1: planned 2 changes'\necho 'error: provider refused the change' >&2\nexit 3",
    );
    let job = Job::new(f);
    let out = job.run("deploy", &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    // A non-zero exit of the job process fails the Windmill job whatever result.json says.
    assert_eq!(out.status.code(), Some(3), "{}", log(&out));
    assert!(text(&out.stdout).contains("step 1: planned 2 changes"), "{}", log(&out));
    assert!(
        text(&out.stderr).contains("error: provider refused the change"),
        "{}",
        log(&out)
    );
    let result = job.result();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["exit_code"], 3);
}

#[test]
fn the_job_process_becomes_jobenv_and_the_payload_is_never_on_a_command_line() {
    let mut f = Fixture::new();
    let pid_file = f.path().join("program.pid");
    let go = f.path().join("go");
    f.declare("API_PASSWORD", None);
    f.program(
        "web",
        "apply",
        &format!(
            "echo $$ > {}\nwhile [ ! -e {} ]; do sleep 0.05; done\necho done",
            pid_file.display(),
            go.display()
        ),
    );
    let job = Job::new(f);
    let marker = "payload-value-7f3a9c-not-for-the-command-line";
    let mut child = job.start(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "API_PASSWORD": marker}),
        "",
    );
    let stdout = StreamWatch::new(child.stdout.take().unwrap());
    let stderr = StreamWatch::new(child.stderr.take().unwrap());
    let program = read_pids(&pid_file, 1, Duration::from_secs(30))[0];
    let job_pid = child.id() as i32;

    // The process Windmill started (and signals) is jobenv itself now, not a Python parent.
    let exe = std::fs::read_link(format!("/proc/{job_pid}/exe")).unwrap();
    assert_eq!(exe, jobenv_bin!().canonicalize().unwrap());
    let argv: Vec<String> = std::fs::read(format!("/proc/{job_pid}/cmdline"))
        .unwrap()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(text)
        .collect();
    assert_eq!(argv[1..], ["run", "--verb", "apply", "--payload", "-"]);
    // Its stdin is the anonymous in-memory file holding the payload.
    let stdin = std::fs::read_link(format!("/proc/{job_pid}/fd/0")).unwrap();
    assert!(
        stdin
            .display()
            .to_string()
            .starts_with("/memfd:fediversity-job-payload"),
        "{}",
        stdin.display()
    );
    // The program stays in the job's process group, where the worker's SIGKILL reaches it.
    assert_eq!(pgid(program), Some(job_pid));
    // jobenv never holds the worker's credentials: the job's WM_TOKEN has its owner's full
    // rights. Positive control: the job id, which jobenv needs, and the node's settings arrive.
    let jobenv_env = text(&std::fs::read(format!("/proc/{job_pid}/environ")).unwrap());
    let names: Vec<&str> = jobenv_env
        .split('\0')
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, _)| key)
        .collect();
    assert!(
        names.contains(&"WM_JOB_ID") && names.contains(&"JOBENV_STATE_DIR") && names.contains(&"PATH"),
        "{names:?}"
    );
    for dropped in [
        "WM_TOKEN",
        "WM_ROOT_JOB_ID",
        "WM_WORKSPACE",
        "WM_EMAIL",
        "WM_USERNAME",
        "WM_JOB_PATH",
        "BASE_INTERNAL_URL",
    ] {
        assert!(!names.contains(&dropped), "jobenv was given {dropped}: {names:?}");
    }
    assert!(!jobenv_env.contains(WM_TOKEN));

    // Never on a command line: not jobenv's, not the program's, not any process of the job.
    // Positive control: the value is in the program's environment, where the scan looks too.
    let environ = std::fs::read(format!("/proc/{program}/environ")).unwrap();
    assert!(text(&environ).contains(&format!("API_PASSWORD={marker}")));
    for pid in [job_pid, program] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(
            !text(&cmdline).contains(marker),
            "the payload is on the command line of {pid}"
        );
    }

    std::fs::write(&go, "").unwrap();
    let status = wait_exit(&mut child, Duration::from_secs(30)).expect("the job ends");
    let (stdout, stderr) = (text(&stdout.finish()), text(&stderr.finish()));
    assert_eq!(status.code(), Some(0), "{stdout}{stderr}");
    assert_eq!(stdout, "done\n");
    assert!(!stderr.contains(marker));
    assert_eq!(job.result()["status"], "succeeded");
}

/// A program that starts a tree: two background sleeps (one in a child shell) and itself, one
/// of them ignoring SIGTERM so jobenv's SIGKILL after the grace is needed too.
fn tree_fixture() -> (Fixture, PathBuf) {
    let mut f = Fixture::new();
    let pids = f.path().join("pids");
    let p = pids.display();
    f.program(
        "web",
        "apply",
        &format!(
            "sleep 300 & echo $! >> {p}\nsh -c 'trap \"\" TERM; sleep 301 & echo $! >> {p}; while :; do sleep 0.1; done' & echo $! >> {p}\necho $$ >> {p}\necho ready\nwait"
        ),
    );
    (f, pids)
}

#[test]
fn sigint_to_the_job_process_stops_the_whole_program_tree_before_it_exits() {
    // Windmill with MAX_WAIT_FOR_SIGINT (the module sets it): SIGINT to the job process alone,
    // and if that process exits, nothing else is ever killed.
    let (f, pids) = tree_fixture();
    let job = Job::new(f);
    let mut child = job.start("deploy", &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}), "");
    let mut stdout = StreamWatch::new(child.stdout.take().unwrap());
    let stderr = StreamWatch::new(child.stderr.take().unwrap());
    let tree = read_pids(&pids, 4, Duration::from_secs(30));
    assert!(stdout.wait_for(b"ready", Duration::from_secs(10)));
    // Positive control: the whole tree runs before the cancel.
    assert!(tree.iter().all(|&p| is_alive(p)), "{tree:?}");

    let signalled = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    // grace (3 s, jobenv's default) + 1 s
    let status = wait_exit(&mut child, Duration::from_secs(4));
    let took = signalled.elapsed();
    let alive: Vec<_> = tree.iter().copied().filter(|&p| is_alive(p)).collect();
    kill_all(&tree);
    let status = status.expect("the job process exits within grace + 1 s");
    assert!(
        alive.is_empty(),
        "left behind after the job process exited: {alive:?} of {tree:?}"
    );
    assert_eq!(status.code(), Some(130), "{}", text(&stderr.finish()));
    assert!(
        took >= Duration::from_millis(2500),
        "the SIGTERM-ignoring process needed the grace: {took:?}"
    );
    assert_eq!(job.result()["status"], "canceled");
}

#[test]
fn windmills_default_cancel_sigkill_to_the_group_leaves_nothing() {
    let (f, pids) = tree_fixture();
    let job = Job::new(f);
    let mut child = job.start("deploy", &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}), "");
    let tree = read_pids(&pids, 4, Duration::from_secs(30));
    assert!(tree.iter().all(|&p| is_alive(p)), "{tree:?}");
    killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    assert_eq!(
        wait_exit(&mut child, Duration::from_secs(2)).expect("killed").code(),
        None
    );
    let gone = wait_until(Duration::from_secs(1), || tree.iter().all(|&p| !is_alive(p)));
    kill_all(&tree);
    assert!(gone, "a process of the tree survived the group SIGKILL");
}

/// Nine declared keys of about 100 KiB of JSON each: over 900 KiB of payload, far more than a
/// pipe buffer (64 KiB), each value below the kernel's 128 KiB limit for one environment string.
fn large_payload_job(with_tmpdir: bool) -> (Job, Value, Vec<String>) {
    let mut f = Fixture::new();
    let out = f.path().join("values");
    std::fs::create_dir_all(&out).unwrap();
    let mut payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "big"});
    let mut body = String::new();
    let mut values = Vec::new();
    for i in 0..9 {
        let key = format!("BIG{i}");
        f.declare(&key, None);
        // Varied text: quotes, dollars, backslashes, spaces, multi-byte characters.
        let value: String = (0..9350)
            .map(|n| format!("{:02}\"$\\ é{}", (n + i) % 100, (b'a' + (n % 26) as u8) as char))
            .collect();
        payload[&key] = json!(value);
        values.push(value);
        body.push_str(&format!("printf '%s' \"${key}\" > {}/{key}\n", out.display()));
    }
    f.program("web", "apply", &body);
    let mut job = Job::new(f);
    if with_tmpdir {
        let tmp = job.f.path().join("tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        job.extra_env.push(("TMPDIR".into(), tmp.display().to_string()));
    }
    (job, payload, values)
}

fn assert_values_arrived(job: &Job, values: &[String]) {
    for (i, value) in values.iter().enumerate() {
        let got = std::fs::read_to_string(job.f.path().join(format!("values/BIG{i}"))).unwrap();
        assert!(
            got == *value,
            "BIG{i} arrived changed ({} bytes, expected {})",
            got.len(),
            value.len()
        );
    }
}

#[test]
fn a_payload_of_900_kib_arrives_intact() {
    let (job, payload, values) = large_payload_job(false);
    let size = payload.to_string().len();
    assert!(size > 900 * 1024 && size < 1024 * 1024, "{size}");
    let out = job.run("deploy", &payload);
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_values_arrived(&job, &values);
    assert_eq!(job.result()["status"], "succeeded");
}

#[test]
fn without_memfd_the_payload_goes_through_an_unlinked_temporary_file() {
    // A Python without os.memfd_create (not Linux, or an old kernel) takes the other path.
    let (job, payload, values) = large_payload_job(true);
    let tmp = job.f.path().join("tmp");
    let jobenv = jobenv_bin!().canonicalize().unwrap();
    let mut child = job
        .command("deploy", &payload.to_string(), "del os.memfd_create")
        .spawn()
        .unwrap();
    let stdout = StreamWatch::new(child.stdout.take().unwrap());
    let stderr = StreamWatch::new(child.stderr.take().unwrap());
    let job_pid = child.id() as i32;
    // jobenv's stdin, seen from outside once the exec has happened.
    let mut link = None;
    wait_until(Duration::from_secs(30), || {
        if std::fs::read_link(format!("/proc/{job_pid}/exe")).ok().as_deref() == Some(jobenv.as_path()) {
            link = std::fs::read_link(format!("/proc/{job_pid}/fd/0")).ok();
        }
        link.is_some() || !is_alive(job_pid)
    });
    let status = wait_exit(&mut child, Duration::from_secs(60)).expect("the job ends");
    let out = Output {
        status,
        stdout: stdout.finish(),
        stderr: stderr.finish(),
    };
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_values_arrived(&job, &values);
    let link = link.expect("saw jobenv's stdin").display().to_string();
    assert!(!link.starts_with("/memfd:"), "{link}");
    assert!(
        link.starts_with(&tmp.display().to_string()) && link.ends_with("(deleted)"),
        "{link}"
    );
    assert_eq!(
        std::fs::read_dir(&tmp).unwrap().count(),
        0,
        "a payload file was left behind"
    );
}

#[test]
fn a_missing_jobenv_fails_the_job_naming_it() {
    // The control is every other test: the same job with jobenv's directory on PATH succeeds.
    let mut f = Fixture::new();
    f.program("web", "apply", "echo should not run");
    let mut job = Job::new(f);
    job.path = TEST_PATH.into();
    let out = job.run("deploy", &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
    assert_eq!(out.status.code(), Some(1), "{}", log(&out));
    assert!(!text(&out.stdout).contains("should not run"));
    let result = job.result();
    assert_eq!(result["name"], "JobenvNotFound", "{result}");
    let message = result["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("fediversity-jobenv was not found on PATH ({TEST_PATH})")),
        "{message}"
    );
}

#[test]
fn a_payload_jobenv_refuses_fails_the_job_naming_the_keys_not_the_values() {
    let mut f = Fixture::new();
    f.program("web", "apply", "echo should not run");
    let job = Job::new(f);
    let value = "rogue-value-5be1e0";
    let out = job.run(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "ROGUE_KEY": value, "NIX_PATH": value}),
    );
    assert_eq!(out.status.code(), Some(2), "{}", log(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("payload rejected: undeclared keys: ROGUE_KEY"),
        "{stderr}"
    );
    assert!(stderr.contains("payload rejected: reserved keys: NIX_PATH"), "{stderr}");
    assert!(!stderr.contains(value) && !text(&out.stdout).contains(value));
    assert!(!text(&out.stdout).contains("should not run"));
    let result = job.result();
    assert_eq!(result["status"], "rejected");
    assert!(!result.to_string().contains(value));
}

#[test]
fn a_payload_that_is_not_json_data_fails_the_job_naming_the_key() {
    // Python's json module reads NaN from args.json; JSON cannot carry it on.
    let mut f = Fixture::new();
    f.program("web", "apply", "echo should not run");
    f.declare("COUNT", None);
    let job = Job::new(f);
    let out = job.run_raw("deploy", r#"{"ATTRIBUTE": "web", "NAMESPACE": "ns", "COUNT": NaN}"#, "");
    assert_eq!(out.status.code(), Some(1), "{}", log(&out));
    let result = job.result();
    assert_eq!(result["name"], "PayloadError", "{result}");
    assert_eq!(
        result["message"],
        "payload key 'COUNT': the value holds NaN or Infinity, which JSON cannot carry"
    );
    assert!(!text(&out.stdout).contains("should not run"));
}

/// Bits of SIGINT (2), SIGPIPE (13) and SIGXFSZ (25) in a `SigIgn:` mask of /proc/<pid>/status.
fn ignored(status: &str) -> Vec<&'static str> {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .expect("SigIgn line")
        .trim();
    let mask = u64::from_str_radix(mask, 16).unwrap();
    [("SIGINT", 2), ("SIGPIPE", 13), ("SIGXFSZ", 25)]
        .into_iter()
        .filter(|(_, n)| mask & (1 << (n - 1)) != 0)
        .map(|(s, _)| s)
        .collect()
}

#[test]
fn the_program_does_not_inherit_the_signals_python_ignores() {
    let mut f = Fixture::new();
    let status_file = f.path().join("program-status");
    f.program(
        "web",
        "apply",
        &format!("cat /proc/$$/status > {}", status_file.display()),
    );
    let python_status = f.path().join("python-status");
    let job = Job::new(f);
    // The wrapper records Python's own dispositions first: Python ignores SIGPIPE and SIGXFSZ.
    let prelude = format!(
        "open({:?}, 'w').write(open('/proc/self/status').read())",
        python_status.display().to_string()
    );
    let out = job.run_raw(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}).to_string(),
        &prelude,
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(
        ignored(&std::fs::read_to_string(&python_status).unwrap()),
        ["SIGPIPE", "SIGXFSZ"]
    );
    assert_eq!(
        ignored(&std::fs::read_to_string(&status_file).unwrap()),
        Vec::<&str>::new()
    );

    // Positive control: a hand-over that execs jobenv without restoring the dispositions leaves
    // the program with SIGXFSZ ignored (SIGPIPE is reset by jobenv's own process spawning).
    std::fs::remove_file(&status_file).unwrap();
    let naive = "import f.fediversity._jobenv as _h\n_h._RESET_SIGNALS = ()";
    let out = job.run_raw(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}).to_string(),
        naive,
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(ignored(&std::fs::read_to_string(&status_file).unwrap()), ["SIGXFSZ"]);
}

#[test]
fn the_helper_loads_the_way_windmills_loader_serves_it() {
    // On a worker, `f.fediversity._jobenv` is not on any path: a finder appended to
    // sys.meta_path (windmill-worker/loader.py) writes the fetched source under the job
    // directory and loads it with a spec that has no origin, so the module has no __file__.
    let mut f = Fixture::new();
    f.program("web", "apply", "echo loaded and ran");
    let served = f.path().join("served");
    let mut job = Job::new(f);
    // Nothing on PYTHONPATH: the job directory alone would not resolve the helper.
    let remote = job.lib.clone();
    job.lib = job.f.path().join("empty");
    std::fs::create_dir_all(&job.lib).unwrap();
    let prelude = format!(
        r#"from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, SourceFileLoader
class WindmillLikeFinder(MetaPathFinder):
    @classmethod
    def find_spec(cls, name, path, target=None):
        parts = name.split(".")
        if parts[0] != "f" or len(parts) <= 2:
            return None
        source = open(os.path.join({remote:?}, *parts) + ".py").read()
        folder = os.path.join(os.getcwd(), "tmp", *parts[:-1])
        os.makedirs(folder, exist_ok=True)
        full = os.path.join(folder, parts[-1] + ".py")
        open(full, "w").write(source)
        open({served:?}, "a").write(name + "\n")
        return ModuleSpec(name, SourceFileLoader(name, full))
sys.meta_path.append(WindmillLikeFinder)"#,
        remote = remote.display().to_string(),
        served = served.display().to_string(),
    );
    let out = job.run_raw(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}).to_string(),
        &prelude,
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(text(&out.stdout), "loaded and ran\n");
    assert_eq!(std::fs::read_to_string(&served).unwrap(), "f.fediversity._jobenv\n");
}

#[test]
fn the_scripts_use_only_the_standard_library_and_deploy_and_destroy_define_only_main() {
    // Windmill maps every top-level import that is not in its standard-library list to a PyPI
    // requirement, and its import parser reads a script only up to the first "def main(".
    let check = r#"
import ast, sys, pathlib
def problems(name, text):
    found = []
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            mods = []
        for m in mods:
            top = m.split(".")[0]
            if top != "f" and top not in sys.stdlib_module_names:
                found.append(f"{name}: third-party import {m}")
    if name != "_jobenv.py":
        funcs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if [f.name for f in funcs] != ["main"]:
            found.append(f"{name}: defines {[f.name for f in funcs]}")
        else:
            a = funcs[0].args
            if a.args or a.posonlyargs or a.kwonlyargs or a.vararg or not a.kwarg:
                found.append(f"{name}: main must take only **payload")
        others = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Expr))]
        if others:
            found.append(f"{name}: top-level statements besides imports and main")
        if text.count("def main(") != 1:
            found.append(f"{name}: 'def main(' must appear exactly once")
    elif "def main(" in text:
        found.append(f"{name}: 'def main(' would cut Windmill's import parsing short")
    return found
# Positive control: the check flags what it exists to flag.
assert problems("x.py", "import requests\ndef main(**p):\n    pass\n") == ["x.py: third-party import requests"]
assert problems("y.py", "import os\ndef helper():\n    pass\ndef main(**p):\n    pass\n")[0].startswith("y.py: defines")
assert problems("z.py", "def main(a, **p):\n    pass\n") == ["z.py: main must take only **payload"]
found = []
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.py")):
    found += problems(path.name, path.read_text())
print("\n".join(found))
sys.exit(1 if found else 0)
"#;
    let names: Vec<String> = std::fs::read_dir(scripts_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["_jobenv.py", "deploy.py", "destroy.py"]);
    let out = Command::new("python3")
        .args(["-c", check])
        .arg(scripts_dir())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", log(&out));
}

#[test]
fn the_node_files_the_nixos_module_renders_are_what_jobenv_reads() {
    // deploy-env.json, deploy-keys.json and deployment-attributes.json as nixos-module/lib.nix
    // renders them (evaluated by nix-instantiate), in place of the fixture's own.
    let mut f = Fixture::new();
    f.program(
        "web",
        "apply",
        "echo \"web-apply: message=$MESSAGE region=$REGION hosting=$HOSTING_CONFIG\"",
    );
    let root = f.root().display().to_string();
    let lib = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nixos-module/lib.nix")
        .display()
        .to_string();
    let expr = format!(
        r#"let lib = import {lib}; in {{
             env = lib.renderDeployEnv {{ DEPLOYMENT_ROOT = {root}; DEPLOYMENT_NIXPKGS = {root}; NIX_BUILD_SHELL = "/bin/bash"; }};
             keys = lib.renderDeployKeys {{ MESSAGE = {{ description = "a message"; default = null; }}; REGION = {{ description = "a region"; default = "eu-1"; }}; }};
             attributes = lib.renderDeploymentAttributes [ "web" ];
           }}"#,
        lib = Value::from(lib),
        root = Value::from(root),
    );
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "-E", &expr])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rendered: Value = serde_json::from_slice(&out.stdout).unwrap();
    let node = f.path().join("rendered");
    std::fs::create_dir_all(&node).unwrap();
    let mut job = Job::new(f);
    for (key, file, var) in [
        ("env", "deploy-env.json", "JOBENV_DEPLOY_ENV"),
        ("keys", "deploy-keys.json", "JOBENV_KEYS"),
        ("attributes", "deployment-attributes.json", "JOBENV_ATTRIBUTES"),
    ] {
        std::fs::write(node.join(file), rendered[key].to_string()).unwrap();
        job.extra_env.push((var.into(), node.join(file).display().to_string()));
    }

    // HOSTING_CONFIG is a structural pin the module declares node-only: the payload's is
    // dropped with a warning. REGION takes its default; MESSAGE comes from the payload.
    let out = job.run(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "MESSAGE": "m1", "HOSTING_CONFIG": "hc"}),
    );
    assert_eq!(out.status.code(), Some(0), "{}", log(&out));
    assert_eq!(text(&out.stdout), "web-apply: message=m1 region=eu-1 hosting=\n");
    assert!(
        text(&out.stderr)
            .contains("jobenv: warning: payload value for HOSTING_CONFIG ignored: only the node may set it"),
        "{}",
        log(&out)
    );

    // The control: the rendered keys are an allow-list, not a pass-through.
    let out = job.run(
        "deploy",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "UNDECLARED": "x"}),
    );
    assert_eq!(out.status.code(), Some(2), "{}", log(&out));
    assert!(
        text(&out.stderr).contains("payload rejected: undeclared keys: UNDECLARED"),
        "{}",
        log(&out)
    );
}
