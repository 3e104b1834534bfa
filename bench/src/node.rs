//! A node for jobenv made for benchmarks: its node files, a secrets directory, a state
//! directory, and the deployment program `web-apply` (a link to the benchmark's program),
//! run through the nix-shell stand-in so nix's own evaluation stays out of the figures.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use serde_json::json;
use tempfile::TempDir;

pub struct Node {
    pub dir: TempDir,
    pub jobenv: PathBuf,
    pub stand_in: PathBuf,
}

impl Node {
    /// `program` becomes `web-apply`; `secrets` become files of the secrets directory;
    /// `declared` are the keys the payload may set.
    pub fn new(tools: &Tools, program: &Path, secrets: &[(String, String)], declared: &[&str]) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new().prefix("fediversity-bench-").tempdir()?;
        for sub in ["bin", "secrets", "state", "nix"] {
            std::fs::create_dir(dir.path().join(sub))?;
        }
        // The stand-in under Nix's three names, as Nix's own are installed (one binary): jobenv
        // runs the nix-instantiate and nix-store beside its nix-shell.
        for name in ["nix-shell", "nix-instantiate", "nix-store"] {
            std::os::unix::fs::symlink(&tools.stand_in, dir.path().join("nix").join(name))?;
        }
        std::os::unix::fs::symlink(program, dir.path().join("bin/web-apply"))?;
        for (key, value) in secrets {
            std::fs::write(dir.path().join("secrets").join(key), format!("{value}\n"))?;
        }
        let root = dir.path().display().to_string();
        std::fs::write(
            dir.path().join("deploy-env.json"),
            json!({"DEPLOYMENT_ROOT": root, "NIXPKGS": root, "NIX_BUILD_SHELL": "/bin/sh"}).to_string(),
        )?;
        let mut keys = serde_json::Map::new();
        // Control keys (EVENTS_SECRET) are the node's own, not keys a program declares.
        for key in declared.iter().copied().chain(
            secrets
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !k.starts_with("EVENTS_")),
        ) {
            keys.insert(key.to_owned(), json!({"description": "benchmark key"}));
        }
        std::fs::write(
            dir.path().join("keys.json"),
            serde_json::Value::Object(keys).to_string(),
        )?;
        std::fs::write(dir.path().join("attributes.json"), r#"["web"]"#)?;
        let stand_in = dir.path().join("nix/nix-shell");
        Ok(Node {
            dir,
            jobenv: tools.jobenv.clone(),
            stand_in,
        })
    }

    /// Adds a key to deploy-env.json.
    pub fn set_deploy_env(&self, key: &str, value: &str) -> anyhow::Result<()> {
        let path = self.path("deploy-env.json");
        let mut env: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        env[key] = json!(value);
        std::fs::write(&path, env.to_string())?;
        Ok(())
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The node's environment for jobenv (and for the Python reference), nothing else.
    pub fn env(&self, command: &mut Command) {
        command
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", self.path("bin").display()))
            .env("JOBENV_DEPLOY_ENV", self.path("deploy-env.json"))
            .env("JOBENV_KEYS", self.path("keys.json"))
            .env("JOBENV_ATTRIBUTES", self.path("attributes.json"))
            .env("JOBENV_SECRETS_DIRS", self.path("secrets"))
            .env("JOBENV_STATE_DIR", self.path("state"))
            .env("JOBENV_NIX_SHELL", &self.stand_in);
    }

    /// `fediversity-jobenv run --verb apply --payload FILE` with the node's environment.
    pub fn jobenv_run(&self, payload: &serde_json::Value) -> anyhow::Result<Command> {
        let path = self.write_payload(payload)?;
        Ok(self.jobenv_with_payload(path.as_os_str()))
    }

    /// The same with the payload on stdin (`--payload -`), as Windmill hands a job over.
    pub fn jobenv_run_on_stdin(&self, payload: &serde_json::Value) -> anyhow::Result<Command> {
        let path = self.write_payload(payload)?;
        let mut command = self.jobenv_with_payload("-".as_ref());
        command.stdin(std::fs::File::open(path)?);
        Ok(command)
    }

    /// Writes `payload.json`, which the Python reference reads as well.
    pub fn write_payload(&self, payload: &serde_json::Value) -> anyhow::Result<PathBuf> {
        let path = self.path("payload.json");
        std::fs::write(&path, payload.to_string())?;
        Ok(path)
    }

    fn jobenv_with_payload(&self, payload: &OsStr) -> Command {
        let mut command = Command::new(&self.jobenv);
        command.args(["run", "--verb", "apply", "--payload"]).arg(payload);
        self.env(&mut command);
        command
    }
}

/// The binaries under test, next to the benchmark's own executable unless named.
#[derive(Debug, Clone)]
pub struct Tools {
    pub jobenv: PathBuf,
    pub bootstrap: PathBuf,
    pub stand_in: PathBuf,
    pub generate: PathBuf,
    pub peak: PathBuf,
}

impl Tools {
    pub fn find(jobenv: Option<PathBuf>, bootstrap: Option<PathBuf>) -> anyhow::Result<Self> {
        let here = std::env::current_exe()?
            .parent()
            .context("the benchmark binary has a directory")?
            .to_owned();
        let tools = Tools {
            jobenv: jobenv.unwrap_or_else(|| here.join("fediversity-jobenv")),
            bootstrap: bootstrap.unwrap_or_else(|| here.join("fediversity-windmill-bootstrap")),
            stand_in: here.join("nix-shell-stand-in"),
            generate: here.join("bench-generate"),
            peak: here.join("bench-peak"),
        };
        for tool in [
            &tools.jobenv,
            &tools.bootstrap,
            &tools.stand_in,
            &tools.generate,
            &tools.peak,
        ] {
            anyhow::ensure!(
                tool.exists(),
                "{} is missing: build the workspace first (cargo build --release --workspace)",
                tool.display()
            );
        }
        Ok(tools)
    }
}
