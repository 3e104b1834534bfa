//! Benchmark 1: start-up overhead of `fediversity-jobenv run` for a program that exits at once,
//! against running that program directly (`env -i PROG`) and against a Python reference that
//! merges, validates and runs the way the Python runner jobenv replaces did.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::stats::{Samples, ms};

pub fn run(tools: &Tools, rounds: usize) -> anyhow::Result<Table> {
    let node = Node::new(tools, std::path::Path::new("/bin/true"), &[], &["DOMAIN", "HOSTS"])?;
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "DOMAIN": "example.org", "HOSTS": ["a", "b"]});
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference_runner.py");
    let python = which("python3")?;

    let direct = || {
        let mut c = Command::new("/usr/bin/env");
        c.arg("-i").arg(node.path("bin/web-apply"));
        c
    };
    // The same path without jobenv: the stand-in execs the program. What it costs is the
    // benchmark's, not jobenv's, and is reported apart.
    let stand_in = || {
        let mut c = Command::new("/usr/bin/env");
        c.arg("-i").arg(format!("PATH={}", node.path("bin").display())).arg(&node.stand_in).args(["--run", "exec web-apply"]);
        c
    };
    let jobenv = || node.jobenv_run(&payload);
    let python_ref = || -> anyhow::Result<Command> {
        let mut c = Command::new(&python);
        c.arg(&reference).args(["--verb", "apply"]);
        node.env(&mut c);
        c.stdin(std::fs::File::open(node.path("payload.json"))?);
        Ok(c)
    };
    jobenv()?; // writes payload.json for the reference too

    let mut samples = [Samples::default(), Samples::default(), Samples::default(), Samples::default()];
    for round in 0..rounds + 5 {
        // Rotate the order each round so drift on a busy machine hits all four alike.
        for k in 0..4 {
            let which = (round + k) % 4;
            let command = match which {
                0 => direct(),
                1 => jobenv()?,
                2 => python_ref()?,
                _ => stand_in(),
            };
            let took = time(command)?;
            if round >= 5 {
                samples[which].push(took);
            }
        }
    }
    let [direct, jobenv, python, stand_in] = samples;
    let base = direct.median();
    let over = |s: &Samples| s.median().saturating_sub(base);
    let jobenv_over = over(&jobenv);
    let python_over = over(&python);
    let stand_in_over = over(&stand_in);
    let jobenv_own = jobenv.median().saturating_sub(stand_in.median());
    let factor = python_over.as_secs_f64() / jobenv_over.as_secs_f64().max(1e-6);
    let row = |name: &str, s: &Samples, overhead: String| vec![name.to_owned(), ms(s.median()), ms(s.min()), ms(s.max()), overhead];
    Ok(Table {
        title: "1. Start-up overhead of jobenv".into(),
        method: format!(
            "Wall time from spawn to exit, {rounds} rounds after 5 warm-up rounds, the four commands interleaved. The program is `/bin/true`; jobenv and the Python reference run it through `--nix-shell` = a stand-in that execs it (nix-shell's own evaluation left out). jobenv reads the node files, payload and an empty secrets directory, validates, takes the namespace lock and supervises the program."
        ),
        header: ["command", "median", "min", "max", "overhead over the baseline (median)"].map(String::from).to_vec(),
        rows: vec![
            row("`env -i PROG` (baseline)", &direct, "—".into()),
            row("`env -i STAND-IN --run \"exec PROG\"` (the stand-in alone)", &stand_in, format!("+{}", ms(stand_in_over))),
            row("`fediversity-jobenv run`", &jobenv, format!("+{}", ms(jobenv_over))),
            row("Python reference (`bench/reference_runner.py`)", &python, format!("+{}", ms(python_over))),
        ],
        targets: vec![
            Target {
                text: format!(
                    "median overhead of jobenv over the direct exec: {} (target < 2 ms); of which the stand-in's own exec {}, jobenv's own {}",
                    ms(jobenv_over),
                    ms(stand_in_over),
                    ms(jobenv_own)
                ),
                met: jobenv_over < Duration::from_millis(2),
            },
            Target { text: format!("Python reference overhead / jobenv overhead: {factor:.1}× (target ≥ 10×)"), met: factor >= 10.0 },
        ],
    })
}

fn time(mut command: Command) -> anyhow::Result<Duration> {
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let start = Instant::now();
    let status = command.status().with_context(|| format!("running {command:?}"))?;
    let took = start.elapsed();
    anyhow::ensure!(status.success(), "{command:?} failed: {status}");
    Ok(took)
}

pub fn which(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).with_context(|| format!("{name} not found in PATH"))
}
