//! Benchmark 6: a journaled run's cost against the journal's size. A node keeps the entries of
//! 30 days; a busy one holds tens of thousands. A run must not pay a pass over them: the target
//! is a run with 100,000 entries at most 1.2 times one with an empty journal, measured in the same
//! run with the sizes interleaved. `recover` and `status` (which do read every entry) are timed
//! at each size too, as the curve an operator meets.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::startup::time;
use crate::stats::{Samples, ms};

const RATIO_TARGET: f64 = 1.2;
const WARM_UP: usize = 3;

pub fn run(tools: &Tools, sizes: &[usize], rounds: usize) -> anyhow::Result<Table> {
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench"});
    let nodes = sizes
        .iter()
        .map(|&size| {
            let node = Node::new(tools, Path::new("/bin/true"), &[], &[])?;
            fill(&node.path("state"), size)?;
            Ok((size, node))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut runs = vec![Samples::default(); sizes.len()];
    for round in 0..rounds + WARM_UP {
        // Rotate the sizes each round so a busy moment of the machine hits all alike.
        for k in 0..nodes.len() {
            let which = (round + k) % nodes.len();
            let (_, node) = &nodes[which];
            let mut command = node.jobenv_run_on_stdin(&payload)?;
            command.env("WM_JOB_ID", format!("new-{round}"));
            // A job with an id writes its result.json where it runs: in the node's directory.
            command.current_dir(node.dir.path());
            let took = time(command)?;
            if round >= WARM_UP {
                runs[which].push(took);
            }
        }
    }
    let mut rows = Vec::new();
    for (i, (size, node)) in nodes.iter().enumerate() {
        let upkeep = |verb: &str| -> anyhow::Result<Duration> {
            let mut command = Command::new(&node.jobenv);
            command.arg(verb);
            node.env(&mut command);
            time(command)
        };
        let (recover, status) = (upkeep("recover")?, upkeep("status")?);
        rows.push(vec![
            size.to_string(),
            ms(runs[i].median()),
            ms(runs[i].min()),
            ms(runs[i].max()),
            ms(recover),
            ms(status),
        ]);
    }
    let (first, last) = (
        runs.first().context("a size")?.median(),
        runs.last().context("a size")?.median(),
    );
    let ratio = last.as_secs_f64() / first.as_secs_f64().max(1e-6);
    let largest = *sizes.last().context("a size")?;
    Ok(Table {
        title: "6. A journaled run against the journal's size".into(),
        method: format!(
            "Wall time of `fediversity-jobenv run --verb apply --payload -` with a job id of its own (`WM_JOB_ID`, so the run is journaled: job lock, entry read, `running` entry, end entry), the program `/bin/true` through the nix-shell stand-in, on nodes whose journals hold {sizes:?} finished entries (written as jobenv writes them, all within the retention, so none is pruned); {rounds} rounds after {WARM_UP} warm-up rounds, the sizes in a rotating order. `recover` and `status` (every entry) once per size, after the runs."
        ),
        header: ["entries", "run: median", "min", "max", "recover", "status (all)"]
            .map(String::from)
            .to_vec(),
        rows,
        targets: vec![Target {
            text: format!(
                "a run with {largest} entries / with {} entries: {ratio:.2}× (target ≤ {RATIO_TARGET:.1}×): {} against {}",
                sizes[0],
                ms(last),
                ms(first)
            ),
            met: ratio <= RATIO_TARGET,
        }],
    })
}

/// `size` finished entries in `state/jobs`, as jobenv writes them (format 2).
fn fill(state: &Path, size: usize) -> anyhow::Result<()> {
    let jobs = state.join("jobs");
    std::fs::create_dir_all(&jobs)?;
    let now = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
    for i in 0..size {
        let job_id = format!("old-{i}");
        let entry = json!({
            "format": 2, "job_id": job_id, "attempt": 1, "verb": "apply", "attribute": "web", "namespace": format!("ns-{}", i % 500),
            "pid": 1, "pid_start": 1, "started_at": now, "status": "succeeded", "exit_code": 0, "finished_at": now
        });
        std::fs::write(jobs.join(format!("{job_id}.json")), serde_json::to_vec_pretty(&entry)?)?;
    }
    Ok(())
}
