//! A node and a deployment repository for jobenv, on disk, for real `nix-shell`.
//!
//! The deployment root holds a `default.nix` with one dev shell per attribute, built from a
//! `builtins.derivation` with `builder = "/bin/sh"`, so nix-shell instantiates it offline without
//! nixpkgs; its PATH holds the fixture's programs. The node files (deploy-env.json, keys,
//! attributes, a secrets directory) live beside it, and [`Fixture::command`] runs jobenv with
//! exactly these files and a clean environment.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Map, Value, json};
use tempfile::TempDir;

pub struct Fixture {
    dir: TempDir,
    deploy_env: Map<String, Value>,
    keys: Map<String, Value>,
    attributes: Vec<String>,
    /// `JOBENV_CONTAINMENT` for every jobenv of this fixture (unset: jobenv's default).
    containment: Option<&'static str>,
}

/// The derivation the stand-in nix-instantiate of [`Fixture::nix_shell_stand_in`] names (no such
/// file exists).
pub const STAND_IN_DRV: &str = "/nix/store/00000000000000000000000000000000-stand-in.drv";

/// The PATH jobenv itself runs with in tests: enough to find nix-shell and a shell.
pub const TEST_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// An unprivileged user standing for a Windmill worker's (`nobody`): jobenv, the program it
/// runs and every other job's program run as one user.
pub const WORKER_UID: u32 = 65534;

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    /// A node whose deploy-env.json already sets the required control keys.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("jobenv-fixture-")
            .tempdir()
            .expect("temp dir");
        for sub in ["root/bin", "secrets", "job", "state"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("fixture dirs");
        }
        let root = dir.path().join("root").display().to_string();
        let mut deploy_env = Map::new();
        deploy_env.insert("DEPLOYMENT_ROOT".into(), json!(root));
        deploy_env.insert("NIXPKGS".into(), json!(root));
        // Skips nix-shell's evaluation of <nixpkgs>.bashInteractive, which needs nixpkgs.
        deploy_env.insert("NIX_BUILD_SHELL".into(), json!("/bin/bash"));
        Fixture {
            dir,
            deploy_env,
            keys: Map::new(),
            attributes: Vec::new(),
            containment: None,
        }
    }

    /// A node whose jobenv keeps its program trees as `containment` says (`JOBENV_CONTAINMENT`:
    /// `cgroup`, `proc` or `auto`).
    pub fn with_containment(containment: &'static str) -> Self {
        let mut fixture = Self::new();
        fixture.containment = Some(containment);
        fixture
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn secrets_dir(&self) -> PathBuf {
        self.dir.path().join("secrets")
    }

    /// jobenv's state directory (journal and locks).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The working directory jobenv runs in (a Windmill job directory).
    pub fn job_dir(&self) -> PathBuf {
        self.dir.path().join("job")
    }

    pub fn deploy_env_path(&self) -> PathBuf {
        self.dir.path().join("deploy-env.json")
    }

    pub fn keys_path(&self) -> PathBuf {
        self.dir.path().join("deploy-keys.json")
    }

    pub fn attributes_path(&self) -> PathBuf {
        self.dir.path().join("deployment-attributes.json")
    }

    /// The deployment program `<attribute>-<verb>`: a /bin/sh script with this body. The
    /// attribute is published in the attribute list.
    pub fn program(&mut self, attribute: &str, verb: &str, body: &str) -> &mut Self {
        let path = self.root().join("bin").join(format!("{attribute}-{verb}"));
        write_executable(&path, &format!("#!/bin/sh\nPATH=/usr/bin:/bin\n{body}\n"));
        if !self.attributes.iter().any(|a| a == attribute) {
            self.attributes.push(attribute.to_owned());
        }
        self
    }

    /// Publishes an attribute without a program (for validation tests).
    pub fn attribute(&mut self, attribute: &str) -> &mut Self {
        if !self.attributes.iter().any(|a| a == attribute) {
            self.attributes.push(attribute.to_owned());
        }
        self
    }

    pub fn declare(&mut self, key: &str, default: Option<&str>) -> &mut Self {
        let mut entry = Map::new();
        entry.insert("description".into(), json!(format!("test key {key}")));
        if let Some(default) = default {
            entry.insert("default".into(), json!(default));
        }
        self.keys.insert(key.into(), Value::Object(entry));
        self
    }

    /// Declares a key only the node may set (`"node_only": true`).
    pub fn declare_node_only(&mut self, key: &str, default: Option<&str>) -> &mut Self {
        self.declare(key, default);
        self.keys[key]["node_only"] = json!(true);
        self
    }

    /// Sets a key in deploy-env.json.
    pub fn node(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.deploy_env.insert(key.into(), value.into());
        self
    }

    /// Removes a key from deploy-env.json.
    pub fn unset_node(&mut self, key: &str) -> &mut Self {
        self.deploy_env.remove(key);
        self
    }

    /// A file in the secrets directory; its content is the value plus a newline.
    pub fn secret(&mut self, key: &str, value: &str) -> &mut Self {
        std::fs::write(self.secrets_dir().join(key), format!("{value}\n")).expect("secret file");
        self
    }

    /// Hands the node to an unprivileged user, as a node hands it to its worker's user: the
    /// fixture readable, the state and job directories its own. Run jobenv as that user with
    /// [`Fixture::nix_shell_stand_in`]: nix-shell itself cannot build as another user on a
    /// single-user Nix store.
    pub fn hand_to(&self, uid: u32) -> &Self {
        std::fs::set_permissions(self.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod the fixture");
        for dir in [self.state_dir(), self.job_dir()] {
            std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).expect("chown");
        }
        self
    }

    /// A nix-shell for jobenv that enters no shell: it puts the programs on PATH and execs the
    /// `--run` string, so the program is jobenv's own child. Beside it, the nix-instantiate and
    /// nix-store jobenv runs before it: they evaluate nothing (the first roots or prints a
    /// derivation's path that does not exist, which the stand-in nix-shell never reads).
    pub fn nix_shell_stand_in(&self) -> PathBuf {
        let dir = self.path().join("stand-in");
        std::fs::create_dir_all(&dir).expect("stand-in dir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod stand-in dir");
        let path = dir.join("nix-shell");
        let script = format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --run ] && run=$2; shift; done\nPATH={}/bin:/usr/bin:/bin exec /bin/sh -c \"$run\"\n",
            self.root().display()
        );
        write_executable(&path, &script);
        write_executable(
            &dir.join("nix-instantiate"),
            &format!(
                "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --add-root ] && root=$2; shift; done\nif [ -n \"$root\" ]; then /bin/ln -sfn {STAND_IN_DRV} \"$root\" && echo \"$root\"; else echo {STAND_IN_DRV}; fi\n"
            ),
        );
        write_executable(&dir.join("nix-store"), "#!/bin/sh\nexit 0\n");
        path
    }

    /// A deployment tree in the Nix store, which jobenv caches the shells of: `default_nix`
    /// written into the directory `name` of the fixture and added with `nix-store --add` (to
    /// the store the node's `NIX_REMOTE` names, if deploy-env.json sets one); DEPLOYMENT_ROOT and
    /// NIXPKGS name it from now on. Returns its store path. (The fixture's own root is a
    /// temporary directory: its jobs are evaluated each time.)
    pub fn store_tree(&mut self, name: &str, default_nix: &str) -> String {
        let tree = self.path().join(name);
        std::fs::create_dir_all(&tree).expect("tree dir");
        std::fs::write(tree.join("default.nix"), default_nix).expect("default.nix");
        let out = self
            .nix("nix-store")
            .arg("--add")
            .arg(&tree)
            .output()
            .expect("run nix-store --add");
        assert!(
            out.status.success(),
            "nix-store --add: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = String::from_utf8(out.stdout).expect("a path").trim().to_owned();
        self.node("DEPLOYMENT_ROOT", path.clone()).node("NIXPKGS", path.clone());
        path
    }

    /// A program of Nix's (`nix-store`, `nix-instantiate`) with the node's `NIX_REMOTE` and
    /// `NIX_CONFIG` (as deploy-env.json sets them now), the fixture's home, and nothing else.
    pub fn nix(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env_clear().env("PATH", TEST_PATH).env("HOME", self.path());
        for key in ["NIX_REMOTE", "NIX_CONFIG"] {
            if let Some(value) = self.deploy_env.get(key).and_then(Value::as_str) {
                command.env(key, value);
            }
        }
        command
    }

    /// The bin directory of the fixture's programs ([`Fixture::program`]), for a tree's
    /// `default.nix` to put on its shells' PATH.
    pub fn bin(&self) -> PathBuf {
        self.root().join("bin")
    }

    /// Writes deploy-env.json, the keys and attributes files and default.nix.
    pub fn write(&self) -> &Self {
        write_json(&self.deploy_env_path(), &Value::Object(self.deploy_env.clone()));
        write_json(&self.keys_path(), &Value::Object(self.keys.clone()));
        write_json(&self.attributes_path(), &json!(self.attributes));
        let shells: String = self
            .attributes
            .iter()
            .map(|a| format!("    {a:?} = shell {:?};\n", format!("{a}-shell")))
            .collect();
        let default_nix = format!(
            r#"{{ ... }}:
let
  system = builtins.currentSystem;
  shell = name: builtins.derivation {{
    inherit name system;
    builder = "/bin/sh";
    args = [ "-c" "echo > $out" ];
    PATH = "{bin}:/usr/bin:/bin";
  }};
in
{{
  devShells.${{system}} = {{
{shells}  }};
}}
"#,
            bin = self.root().join("bin").display()
        );
        write_atomically(&self.root().join("default.nix"), default_nix.as_bytes());
        self
    }

    /// jobenv with this fixture's node files, in the job directory, with a clean environment
    /// holding only PATH and HOME; add more with `.env(...)`.
    pub fn command(&self, jobenv: &Path, args: &[&str]) -> Command {
        self.write();
        let mut command = Command::new(jobenv);
        command
            .args(args)
            .current_dir(self.job_dir())
            .env_clear()
            .env("PATH", TEST_PATH)
            .env("HOME", self.path())
            .env("JOBENV_DEPLOY_ENV", self.deploy_env_path())
            .env("JOBENV_KEYS", self.keys_path())
            .env("JOBENV_ATTRIBUTES", self.attributes_path())
            .env("JOBENV_SECRETS_DIRS", self.secrets_dir())
            .env("JOBENV_STATE_DIR", self.state_dir());
        if let Some(containment) = self.containment {
            command.env("JOBENV_CONTAINMENT", containment);
        }
        command
    }

    /// jobenv against this fixture, to be given arguments, input and expectations.
    pub fn jobenv(&self, jobenv: &Path) -> crate::job_run::JobRun {
        crate::job_run::JobRun::new(self.command(jobenv, &[]))
    }

    /// The `result.json` jobenv left in the job directory; it fits the published schema.
    pub fn result_json(&self) -> Value {
        let bytes = std::fs::read(self.job_dir().join("result.json")).expect("result.json in the job directory");
        let result = serde_json::from_slice(&bytes).expect("result.json is JSON");
        crate::schemas::Contract::Result.check(&result);
        result
    }

    /// `fediversity-jobenv status JOB_ID`: the job's journal entry (checked against the
    /// published schema by [`crate::job_run::JobRun::run`]).
    pub fn journal_entry(&self, jobenv: &Path, job_id: &str) -> Value {
        let done = self.jobenv(jobenv).args(["status", job_id]).expect_success().run();
        serde_json::from_str(&done.stdout).expect("status prints JSON")
    }

    /// Runs jobenv to completion with `payload` on stdin.
    pub fn run(&self, jobenv: &Path, args: &[&str], payload: &Value) -> Output {
        run_with_payload(self.command(jobenv, args), payload)
    }
}

impl Drop for Fixture {
    /// A test that SIGKILLed a jobenv may leave its deploy's cgroup behind (under the test's
    /// own): what the state directory records is killed and removed with the fixture.
    fn drop(&mut self) {
        crate::cgroup::sweep(&self.state_dir());
    }
}

/// Runs a command to completion with the JSON `payload` on stdin.
pub fn run_with_payload(command: Command, payload: &Value) -> Output {
    run_with_stdin(command, payload.to_string().as_bytes())
}

/// Runs a command with `stdin` as its input and collects its output.
pub fn run_with_stdin(mut command: Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start jobenv");
    // jobenv may refuse a job before it reads its payload: a closed pipe is not an error here.
    match child.stdin.take().expect("stdin").write_all(stdin) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write payload: {e}"),
        _ => {}
    }
    child.wait_with_output().expect("wait for jobenv")
}

pub fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write program");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod program");
}

fn write_json(path: &Path, value: &Value) {
    write_atomically(path, &serde_json::to_vec_pretty(value).expect("json"));
}

/// Jobs of one fixture may run while another test step rewrites its files: like a real node,
/// replace files whole, never truncate them in place.
fn write_atomically(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new_in(path.parent().expect("a parent")).expect("temp file");
    file.write_all(bytes).expect("write");
    // As a node renders them (and readable by the worker's user of [`Fixture::hand_to`]).
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .expect("chmod");
    file.persist(path).expect("rename into place");
}

/// Parses `KEY=VALUE` lines (the output of `env`) into a map; other lines are ignored.
pub fn parse_env_lines(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(key, _)| !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
