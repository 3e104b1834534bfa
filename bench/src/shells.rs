//! Benchmark 7: a job's start-up, cold against warm, with the real Nix. A deployment whose
//! evaluation takes at least a second (a tree in the Nix store whose shell sums a large
//! generated attribute set, calibrated on this machine); the program exits at once. Cold: the
//! node has no cached shell (its cache is emptied before each run), so jobenv evaluates,
//! roots and caches it, then runs it; warm: the shell is cached, the job runs it without
//! evaluating. What every job cost before the cache, `nix-shell <tree> -A ... --run` alone, is
//! measured beside them. The targets: warm at least 10 times faster than cold, with at least 4
//! times less peak memory.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::stats::{Samples, ms};

const SPEED_TARGET: f64 = 10.0;
const MEMORY_TARGET: f64 = 4.0;
/// The evaluation is made at least this long.
const EVALUATION: Duration = Duration::from_secs(1);

/// A tree whose evaluation sums `n` generated attributes; its shell runs the node's programs.
fn tree(bin: &Path, n: u64, mark: &str) -> String {
    format!(
        r#"{{ n ? {n}, ... }}:
let
  system = builtins.currentSystem;
  attrs = builtins.listToAttrs (builtins.genList (i: {{ name = "k${{toString i}}"; value = i * i; }}) n);
  sum = builtins.foldl' (a: b: a + b) 0 (builtins.attrValues attrs);
in {{
  devShells.${{system}}.web = builtins.derivation {{
    name = "bench-shell"; inherit system; builder = "/bin/sh"; args = [ "-c" "echo > $out" ];
    PATH = "{bin}:/usr/bin:/bin"; SUM = toString sum; MARK = "{mark}";
  }};
}}
"#,
        bin = bin.display()
    )
}

/// One run: its wall time and the peak resident memory of its largest process, in KiB (the
/// job's tree: `wait4`'s `ru_maxrss` covers every descendant that was waited for, and jobenv
/// reaps them all), taken by `bench-peak`, a small process that starts it (see there why).
/// `command` has its whole environment set (`env_clear` first).
fn measure(peak: &Path, command: Command) -> anyhow::Result<(Duration, u64)> {
    let figure = tempfile::NamedTempFile::new()?;
    let mut wrapped = Command::new(peak);
    wrapped
        .arg(figure.path())
        .arg(command.get_program())
        .args(command.get_args())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            wrapped.env(key, value);
        }
    }
    if let Some(dir) = command.get_current_dir() {
        wrapped.current_dir(dir);
    }
    let start = Instant::now();
    let status = wrapped.status().with_context(|| format!("running {command:?}"))?;
    let took = start.elapsed();
    anyhow::ensure!(status.success(), "{command:?} failed: {status}");
    let kib = std::fs::read_to_string(figure.path())?.trim().parse()?;
    Ok((took, kib))
}

pub fn run(tools: &Tools, rounds: usize, quick: bool) -> anyhow::Result<Table> {
    let node = Node::new(tools, Path::new("/bin/true"), &[], &[])?;
    let nix_shell = which("nix-shell")?;
    let nix_env = |command: &mut Command| {
        command
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", node.path(""))
            .env("NIX_CONFIG", "substituters =");
    };
    // The evaluation's size: doubled until nix-instantiate alone takes long enough.
    let tree_dir = node.path("tree");
    std::fs::create_dir(&tree_dir)?;
    let mark = node.dir.path().display().to_string();
    let mut n: u64 = if quick { 1000 } else { 100_000 };
    loop {
        std::fs::write(tree_dir.join("default.nix"), tree(&node.path("bin"), n, &mark))?;
        let mut instantiate = Command::new("nix-instantiate");
        nix_env(&mut instantiate);
        instantiate.arg(&tree_dir).args(["-A", "devShells.x86_64-linux.web"]);
        let (took, _) = measure(&tools.peak, instantiate)?;
        if quick || took >= EVALUATION + EVALUATION / 5 || n >= 16_000_000 {
            break;
        }
        n *= 2;
    }
    let mut add = Command::new("nix-store");
    nix_env(&mut add);
    let added = add.arg("--add").arg(&tree_dir).output()?;
    anyhow::ensure!(
        added.status.success(),
        "nix-store --add: {}",
        String::from_utf8_lossy(&added.stderr)
    );
    let store_tree = String::from_utf8(added.stdout)?.trim().to_owned();
    for (key, value) in [
        ("DEPLOYMENT_ROOT", store_tree.as_str()),
        ("NIXPKGS", store_tree.as_str()),
        ("NIX_BUILD_SHELL", "/bin/bash"),
        ("NIX_CONFIG", "substituters ="),
    ] {
        node.set_deploy_env(key, value)?;
    }
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench"});
    let jobenv = || -> anyhow::Result<Command> {
        let mut command = node.jobenv_run(&payload)?;
        command.env("JOBENV_NIX_SHELL", &nix_shell).env("HOME", node.path(""));
        Ok(command)
    };
    let nix_shell_alone = || {
        let mut command = Command::new(&nix_shell);
        nix_env(&mut command);
        command.env("NIX_BUILD_SHELL", "/bin/bash").arg(&store_tree).args([
            "-A",
            "devShells.x86_64-linux.web",
            "--run",
            "exec web-apply",
        ]);
        command
    };
    let shells = node.path("state/shells");
    // The warm runs find the cache the first job made.
    measure(&tools.peak, jobenv()?)?;
    let kinds = ["nix-shell alone", "cold", "warm"];
    let mut times = vec![Samples::default(); kinds.len()];
    let mut memory: Vec<Vec<u64>> = vec![Vec::new(); kinds.len()];
    for round in 0..rounds {
        // Rotate the kinds each round so a busy moment of the machine hits all alike.
        for k in 0..kinds.len() {
            let which = (round + k) % kinds.len();
            let command = match which {
                0 => nix_shell_alone(),
                1 => {
                    // No cached shell: the job evaluates, roots and caches it.
                    std::fs::remove_dir_all(&shells)?;
                    jobenv()?
                }
                _ => jobenv()?,
            };
            let (took, peak) = measure(&tools.peak, command)?;
            times[which].push(took);
            memory[which].push(peak);
            if which == 1 {
                // The next warm run finds the cache this one made.
                anyhow::ensure!(shells.exists(), "the cold job cached nothing");
            }
        }
    }
    let median_kib = |v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or_default()
    };
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let rows = kinds
        .iter()
        .zip(times.iter().zip(&memory))
        .map(|(kind, (samples, peaks))| {
            let name = match *kind {
                "nix-shell alone" => {
                    "`nix-shell <tree> -A … --run \"exec PROG\"` (what every job evaluated before)".to_owned()
                }
                "cold" => {
                    "`fediversity-jobenv run`, cold (no cached shell: it evaluates, roots and caches it)".to_owned()
                }
                _ => "`fediversity-jobenv run`, warm (the cached shell: no evaluation)".to_owned(),
            };
            vec![
                name,
                ms(samples.median()),
                ms(samples.min()),
                ms(samples.max()),
                mib(median_kib(peaks)),
            ]
        })
        .collect();
    let speed = times[1].median().as_secs_f64() / times[2].median().as_secs_f64().max(1e-6);
    let less = median_kib(&memory[1]) as f64 / (median_kib(&memory[2]) as f64).max(1.0);
    Ok(Table {
        title: "7. A job's start-up, cold against warm".into(),
        method: format!(
            "Wall time from spawn to exit and peak resident memory (the largest process of the job: `wait4`'s `ru_maxrss`, which covers every descendant jobenv reaps, taken by `bench/src/bin/peak.rs`, which starts the command from a small process) of `fediversity-jobenv run --verb apply --payload FILE` with the real nix-shell (`{}`), nix-instantiate and nix-store, {rounds} rounds of the three commands in a rotating order. The program is `/bin/true`. The deployment tree is in the Nix store; its shell's evaluation sums {n} generated attributes, calibrated so that nix-instantiate alone takes at least {:?} here (no nixpkgs: the machine is offline, `NIX_CONFIG=\"substituters =\"`, `NIX_BUILD_SHELL=/bin/bash`). Cold: the state directory's `shells/` is removed before the run, so jobenv evaluates the shell (nix-instantiate, in the node's environment), checks that the tree is a valid store path, realises and roots its inputs, writes the entry and runs it; warm: the next job of the same tree runs the cached derivation (`nix-shell <drv> --run`).",
            nix_shell.display(),
            EVALUATION
        ),
        header: ["command", "median", "min", "max", "peak memory (median)"]
            .map(String::from)
            .to_vec(),
        rows,
        targets: vec![
            Target {
                text: format!(
                    "warm against cold, wall time: {speed:.1}× faster (target ≥ {SPEED_TARGET:.0}×): {} against {}",
                    ms(times[2].median()),
                    ms(times[1].median())
                ),
                met: speed >= SPEED_TARGET,
            },
            Target {
                text: format!(
                    "warm against cold, peak memory: {less:.1}× less (target ≥ {MEMORY_TARGET:.0}×): {} against {}",
                    mib(median_kib(&memory[2])),
                    mib(median_kib(&memory[1]))
                ),
                met: less >= MEMORY_TARGET,
            },
        ],
    })
}

/// `program` as found on PATH.
fn which(program: &str) -> anyhow::Result<std::path::PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .with_context(|| format!("{program} is needed for this benchmark (Debian: nix-bin)"))
}
