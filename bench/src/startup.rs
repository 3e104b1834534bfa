//! Benchmark 1: start-up overhead of `fediversity-jobenv run` for a program that exits at once,
//! on a node with 100 secrets. The target is a ratio: jobenv's overhead over a direct exec of
//! the program must be at least 10 times less than that of a minimal Python runner doing the
//! same job (`bench/reference_runner.py`). An absolute time would say little: a deploy job's
//! cost is dominated by nix-shell, so what matters is that jobenv adds a small share of what
//! the runner it replaces would. jobenv runs twice over: with its program tree in a cgroup of
//! the deploy's own (what a node with a writable cgroup v2 does) and with the /proc walk (the
//! fallback, and jobenv before the cgroup), so the cgroup's own cost shows as a ratio too.
//! With `--baseline-jobenv`, an earlier build runs the same two ways in the same rotation, so a
//! change's cost to start-up shows as a ratio of two builds measured side by side.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::secrets::node_secrets;
use crate::stats::{Samples, ms};

const WARM_UP: usize = 5;
const FACTOR_TARGET: f64 = 10.0;
/// The cgroup (make it, record it, place the program, read `cgroup.events`, remove it) may cost
/// at most this share of jobenv's overhead with the /proc walk on top of it.
const CGROUP_TARGET: f64 = 1.25;
/// This build's overhead may be at most this times the baseline build's (a restructuring must
/// not slow start-up beyond the noise of one run).
const BASELINE_TARGET: f64 = 1.05;

/// An earlier build of jobenv to measure beside this one (`--baseline-jobenv`).
pub struct Baseline {
    pub jobenv: PathBuf,
    /// How the report names it, e.g. the commit it was built from.
    pub label: String,
}

pub fn run(tools: &Tools, rounds: usize, baseline: Option<&Baseline>) -> anyhow::Result<Table> {
    let secrets = node_secrets(100);
    let declared = ["DOMAIN", "HOSTS"];
    let node = Node::new(tools, Path::new("/bin/true"), &secrets, &declared)?;
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "DOMAIN": "example.org", "HOSTS": ["a", "b"]});
    node.write_payload(&payload)?;
    // The baseline build gets a node of its own, made alike: two builds never share a state
    // directory (an older build need not read what a newer one records there).
    let baseline_node = baseline
        .map(|b| {
            let tools = Tools {
                jobenv: b.jobenv.clone(),
                ..tools.clone()
            };
            Node::new(&tools, Path::new("/bin/true"), &secrets, &declared)
        })
        .transpose()?;
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference_runner.py");
    let python = Python::find()?;

    let direct = || {
        let mut c = Command::new("/usr/bin/env");
        c.arg("-i").arg(node.path("bin/web-apply"));
        c
    };
    // The one exec that jobenv and the Python runner both add by design (nix-shell's, here the
    // stand-in's), measured alone so jobenv's own share shows.
    let stand_in = || {
        let mut c = Command::new("/usr/bin/env");
        c.arg("-i")
            .arg(format!("PATH={}", node.path("bin").display()))
            .arg(&node.stand_in)
            .args(["--run", "exec web-apply"]);
        c
    };
    let jobenv = |node: &Node, containment: &str| -> anyhow::Result<Command> {
        let mut c = node.jobenv_run_on_stdin(&payload)?;
        c.env("JOBENV_CONTAINMENT", containment);
        Ok(c)
    };
    let python_runner = || -> anyhow::Result<Command> {
        let mut c = Command::new(&python.path);
        c.arg("-S").arg(&reference).args(["--verb", "apply"]);
        node.env(&mut c);
        c.stdin(std::fs::File::open(node.path("payload.json"))?);
        Ok(c)
    };

    let mut commands = vec![
        Which::Direct,
        Which::StandIn,
        Which::Jobenv(&node, "cgroup"),
        Which::Jobenv(&node, "proc"),
        Which::Python,
    ];
    if let Some(base) = &baseline_node {
        commands.extend([Which::Jobenv(base, "cgroup"), Which::Jobenv(base, "proc")]);
    }
    let n = commands.len();
    let mut samples = vec![Samples::default(); n];
    for round in 0..rounds + WARM_UP {
        // Rotate the order each round so drift on a busy machine hits all commands alike.
        for k in 0..n {
            let mut which = (round + k) % n;
            // And the two builds trade places every other round: a cgroup's placement costs more
            // the longer since the last one (the notes on the cgroup), so neither build may
            // always come a fixed number of commands after the other's.
            if round % 2 == 1 && n == 7 {
                which = match which {
                    2 | 3 => which + 3,
                    5 | 6 => which - 3,
                    _ => which,
                };
            }
            let command = match commands[which] {
                Which::Direct => direct(),
                Which::StandIn => stand_in(),
                Which::Jobenv(node, containment) => jobenv(node, containment)?,
                Which::Python => python_runner()?,
            };
            let took = time(command)?;
            if round >= WARM_UP {
                samples[which].push(took);
            }
        }
    }
    let base = samples[0].median();
    let over = |s: &Samples| s.median().saturating_sub(base);
    let (direct, stand_in, jobenv, walk, python_samples) =
        (&samples[0], &samples[1], &samples[2], &samples[3], &samples[4]);
    let (jobenv_over, walk_over, python_over, stand_in_over) =
        (over(jobenv), over(walk), over(python_samples), over(stand_in));
    let jobenv_own = jobenv.median().saturating_sub(stand_in.median());
    let factor = python_over.as_secs_f64() / jobenv_over.as_secs_f64().max(1e-6);
    let cgroup_factor = jobenv_over.as_secs_f64() / walk_over.as_secs_f64().max(1e-6);
    let ratio = |this: Duration, baseline: &Samples| this.as_secs_f64() / over(baseline).as_secs_f64().max(1e-6);
    let row = |name: &str, s: &Samples, overhead: String| {
        vec![name.to_owned(), ms(s.median()), ms(s.min()), ms(s.max()), overhead]
    };
    // Every command's row but the direct exec's, which is the baseline of the others.
    let over_row = |name: &str, s: &Samples| row(name, s, format!("+{}", ms(over(s))));
    let method = format!(
        "Wall time of each command from spawn to exit, {rounds} rounds after {WARM_UP} warm-up rounds, the {n} commands in a rotating order; a command's overhead is its median minus the direct exec's median. The program is `/bin/true`. The node has deploy-env.json, keys.json ({declared} declared keys), attributes.json and a secrets directory of 100 files, as a node has (`bench/src/secrets.rs`); the payload (4 keys) comes on stdin. jobenv (`run --verb apply --payload -`, without a job id, so nothing is journaled) reads and validates all of them, merges, builds its redaction needles from the 100 secrets, takes the namespace lock, runs the evaluation of the shell through the nix-instantiate beside its nix-shell (the node's tree is not in the store, so it is evaluated for every job, as before the cache of shells; here the same stand-in, which evaluates nothing and names a derivation) and the program through `--nix-shell` = a stand-in (`bench/src/bin/nix_shell_stand_in.rs`) that execs it as `nix-shell --run \"exec PROG\"` would, without nix's evaluation; jobenv supervises the program and redacts its output. It runs twice over: with `JOBENV_CONTAINMENT=cgroup`, the program tree in a cgroup of its own (made below the benchmark's cgroup, recorded in the state directory, the program placed in it before it execs, its emptiness read from `cgroup.events`, removed at the end), and with `JOBENV_CONTAINMENT=proc`, the /proc walk of jobenv's descendants (the fallback, and how jobenv kept the tree before). The Python runner (`bench/reference_runner.py`, {version}, started with `-S`: it needs only the standard library, and this machine's site hooks are no runner's cost) parses the payload from stdin, reads the same node files and 100 secrets, merges (node over payload over environment, declared keys only) and `subprocess.run`s the same stand-in with the same argv; it does not redact, lock or supervise.{baseline}",
        declared = secrets.len() + 2,
        version = python.version,
        baseline = match baseline {
            Some(b) => format!(
                " The baseline build ({}, `--baseline-jobenv`) runs the same two ways with the same command line (doing what jobenv did at that commit), on a node of its own made alike (two builds never share a state directory), in the same rotation; the two builds trade places every other round.",
                b.label
            ),
            None => String::new(),
        },
    );
    let mut rows = vec![
        row("`env -i PROG` (baseline)", direct, "—".into()),
        over_row("`env -i STAND-IN --run \"exec PROG\"` (the stand-in alone)", stand_in),
        over_row("`fediversity-jobenv run`, the program in a cgroup", jobenv),
        over_row(
            "`fediversity-jobenv run`, the /proc walk (`JOBENV_CONTAINMENT=proc`)",
            walk,
        ),
        over_row("Python runner (`bench/reference_runner.py`)", python_samples),
    ];
    let mut targets = vec![
        Target {
            text: format!(
                "Python runner's overhead / jobenv's overhead (with its cgroup): {factor:.1}× (target ≥ {FACTOR_TARGET:.0}×); jobenv's overhead {}, of which the stand-in's exec {} and jobenv's own {}",
                ms(jobenv_over),
                ms(stand_in_over),
                ms(jobenv_own)
            ),
            met: factor >= FACTOR_TARGET,
        },
        Target {
            text: format!(
                "jobenv's overhead with its cgroup / with the /proc walk: {cgroup_factor:.2}× (target ≤ {CGROUP_TARGET:.2}×): {} against {}",
                ms(jobenv_over),
                ms(walk_over)
            ),
            met: cgroup_factor <= CGROUP_TARGET,
        },
    ];
    if let Some(b) = baseline {
        for (way, this, theirs) in [
            ("cgroup", jobenv_over, &samples[5]),
            ("/proc walk", walk_over, &samples[6]),
        ] {
            // Beside this build's rows, before the Python runner's.
            rows.insert(
                rows.len() - 1,
                over_row(
                    &format!("`fediversity-jobenv run` (baseline build {}), {way}", b.label),
                    theirs,
                ),
            );
            let ratio = ratio(this, theirs);
            targets.push(Target {
                text: format!(
                    "{way}: this build's overhead / the baseline build's ({}): {ratio:.2}× (target ≤ {BASELINE_TARGET:.2}×): {} against {}",
                    b.label,
                    ms(this),
                    ms(over(theirs))
                ),
                met: ratio <= BASELINE_TARGET,
            });
        }
    }
    Ok(Table {
        title: "1. Start-up overhead of jobenv".into(),
        method,
        header: [
            "command",
            "median",
            "min",
            "max",
            "overhead over the direct exec (median)",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        targets,
    })
}

/// How long `command` took from spawn to exit; its output is discarded and it must succeed.
pub fn time(mut command: Command) -> anyhow::Result<Duration> {
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let start = Instant::now();
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    let took = start.elapsed();
    anyhow::ensure!(status.success(), "{command:?} failed: {status}");
    Ok(took)
}

/// The interpreter `python3` on PATH runs, by its real path: a version manager's shim (a shell
/// script) in front of it would add its own start-up to the yardstick.
struct Python {
    path: PathBuf,
    version: String,
}

impl Python {
    fn find() -> anyhow::Result<Self> {
        let out = Command::new("python3")
            .args([
                "-S",
                "-c",
                "import platform, sys; print(sys.executable); print(platform.python_version())",
            ])
            .output()
            .context("python3 is needed for the start-up benchmark's Python runner")?;
        anyhow::ensure!(
            out.status.success(),
            "python3 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout)?;
        let mut lines = text.lines();
        let (Some(path), Some(version)) = (lines.next(), lines.next()) else {
            anyhow::bail!("python3 did not name itself: {text}")
        };
        Ok(Python {
            path: path.into(),
            version: format!("Python {version}"),
        })
    }
}

/// One of the commands the rotation runs.
#[derive(Clone, Copy)]
enum Which<'a> {
    Direct,
    StandIn,
    /// jobenv on this node (this build's or the baseline's), with this containment.
    Jobenv(&'a Node, &'static str),
    Python,
}
