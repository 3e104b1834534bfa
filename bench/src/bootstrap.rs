//! Benchmarks 3 and 4: the bootstrap against the in-process Windmill fake, a real OpenBao dev
//! server and a throwaway PostgreSQL (the test harness's node, argon2 hashing included).
//!
//! 3. A no-op rerun on a converged node with 5 and with 500 scripts: requests sent (one GET per
//!    script, no write of a script, workspace, folder or setting) and wall time.
//! 4. A cold run with 5 scripts, broken down per step: each `step N/9` line is timestamped as
//!    it arrives on the bootstrap's stderr, so the binary itself is not instrumented.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use fediversity_testkit::node::{Node, SCRIPTS};
use fediversity_testkit::windmill_fake::Recorded;

use crate::node::Tools;
use crate::report::{Table, Target};
use crate::stats::{Samples, ms};

/// Scripts the node starts with (its tree also holds a README the bootstrap ignores).
fn base_scripts() -> usize {
    SCRIPTS
        .iter()
        .filter(|(path, _)| path.ends_with(".py") || path.ends_with(".sh"))
        .count()
}

fn node_with_scripts(total: usize) -> Node {
    let node = Node::new();
    for i in base_scripts()..total {
        node.write_script(
            &format!("f/fediversity/bench_{i:04}.py"),
            &format!("def main():\n    return {i}\n"),
        );
    }
    node
}

/// Calls that change what the node holds, besides the tokens every run mints and revokes by
/// design (and stores in OpenBao and the include), the login session it opens and logs out, and
/// the proof of the front-end token's limit (calls made with a scoped token, which Windmill
/// refuses).
fn is_write(r: &Recorded, scoped: &[String]) -> bool {
    r.method != "GET"
        && !r.token.as_ref().is_some_and(|token| scoped.contains(token))
        && !r.path.starts_with("/api/auth/login")
        && !r.path.starts_with("/api/auth/logout")
        && !r.path.starts_with("/api/users/tokens/")
        && !r.path.starts_with("/api/workspaces/exists")
}

fn is_script_get(r: &Recorded) -> bool {
    r.method == "GET" && r.path.contains("/scripts/get/p/")
}

struct Rerun {
    times: Samples,
    requests: usize,
    script_gets: usize,
    writes: usize,
}

fn rerun(tools: &Tools, scripts: usize, runs: usize) -> anyhow::Result<Rerun> {
    let node = node_with_scripts(scripts);
    let first = node.run(&tools.bootstrap, &[]);
    anyhow::ensure!(first.code == 0, "the first run did not converge: {first:?}");
    let mut result = Rerun {
        times: Samples::default(),
        requests: 0,
        script_gets: 0,
        writes: 0,
    };
    for _ in 0..runs {
        let mark = node.windmill.requests().len();
        let start = Instant::now();
        let run = node.run(&tools.bootstrap, &[]);
        result.times.push(start.elapsed());
        anyhow::ensure!(run.code == 0, "a rerun failed: {run:?}");
        let sent = node.windmill.requests_since(mark);
        // The same every run; the last run's counts are reported.
        result.requests = sent.len();
        result.script_gets = sent.iter().filter(|r| is_script_get(r)).count();
        let scoped: Vec<String> = node
            .windmill
            .tokens()
            .into_iter()
            .filter(|t| t.scopes.as_ref().is_some_and(|s| !s.is_empty()))
            .map(|t| t.token)
            .collect();
        result.writes = sent.iter().filter(|r| is_write(r, &scoped)).count();
    }
    Ok(result)
}

pub fn noop_rerun(tools: &Tools, counts: [usize; 2], runs: usize) -> anyhow::Result<Table> {
    let small = rerun(tools, counts[0], runs)?;
    let large = rerun(tools, counts[1], runs)?;
    let ratio = large.times.median().as_secs_f64() / small.times.median().as_secs_f64();
    let row = |n: usize, r: &Rerun| {
        vec![
            format!("{n} scripts"),
            ms(r.times.median()),
            ms(r.times.min()),
            ms(r.times.max()),
            r.requests.to_string(),
            r.script_gets.to_string(),
            r.writes.to_string(),
        ]
    };
    Ok(Table {
        title: "3. Bootstrap no-op rerun".into(),
        method: format!(
            "A node converged by a first run, then {runs} reruns each, medians of the whole process's wall time. Requests are counted by the Windmill fake during one rerun; \"writes\" are calls that would change a script, workspace, folder or setting (the token every run mints, stores and revokes by design is not one). The {}-script figures are the baseline.",
            counts[0]
        ),
        header: ["node", "median", "min", "max", "requests", "script GETs", "writes"]
            .map(String::from)
            .to_vec(),
        rows: vec![row(counts[0], &small), row(counts[1], &large)],
        targets: vec![
            Target {
                text: format!(
                    "{}-script rerun / {}-script rerun: {ratio:.2}× (target ≤ 5×)",
                    counts[1], counts[0]
                ),
                met: ratio <= 5.0,
            },
            Target {
                text: format!(
                    "one GET per script: {} and {} GETs for {} and {} scripts",
                    small.script_gets, large.script_gets, counts[0], counts[1]
                ),
                met: small.script_gets == counts[0] && large.script_gets == counts[1],
            },
            Target {
                text: format!(
                    "writes on a converged node: {} and {} (target 0)",
                    small.writes, large.writes
                ),
                met: small.writes == 0 && large.writes == 0,
            },
        ],
    })
}

const STEPS: [&str; 9] = [
    "ready",
    "login",
    "token",
    "workspace",
    "scripts",
    "settings",
    "openbao",
    "ui_auth",
    "revoke",
];

/// One cold run on a fresh node: the time from start to each step's line.
fn cold_once(tools: &Tools, scripts: usize) -> anyhow::Result<Vec<Duration>> {
    let node = node_with_scripts(scripts);
    let config = node.write_config();
    let mut command = Node::command(&tools.bootstrap, &config, &[]);
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = command.spawn()?;
    let mut at = Vec::new();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stderr.take().context("stderr")?).lines() {
        let line = line?;
        if line.contains(&format!(": step {}/9 ", at.len() + 1)) {
            at.push(start.elapsed());
        }
        lines.push(line);
    }
    let status = child.wait()?;
    anyhow::ensure!(
        status.success() && at.len() == 9,
        "the cold run failed ({status}):\n{}",
        lines.join("\n")
    );
    Ok(at)
}

pub fn cold(tools: &Tools, scripts: usize, runs: usize) -> anyhow::Result<Table> {
    let mut per_step: Vec<Samples> = vec![Samples::default(); 9];
    let mut total = Samples::default();
    for _ in 0..runs {
        let at = cold_once(tools, scripts)?;
        for (i, t) in at.iter().enumerate() {
            per_step[i].push(*t - if i == 0 { Duration::ZERO } else { at[i - 1] });
        }
        total.push(at[8]);
    }
    let whole = total.median().as_secs_f64();
    let mut rows: Vec<Vec<String>> = per_step
        .iter()
        .enumerate()
        .map(|(i, s)| {
            vec![
                format!("{} {}", i + 1, STEPS[i]),
                ms(s.median()),
                ms(s.min()),
                ms(s.max()),
                format!("{:.0}%", 100.0 * s.median().as_secs_f64() / whole),
            ]
        })
        .collect();
    rows.push(vec![
        "whole run (to the last step line)".into(),
        ms(total.median()),
        ms(total.min()),
        ms(total.max()),
        "100%".into(),
    ]);
    Ok(Table {
        title: "4. Cold bootstrap, per step".into(),
        method: format!(
            "A fresh node ({scripts} scripts, the seed admin with password `changeme`, a real OpenBao dev server, a throwaway PostgreSQL) converged from scratch, {runs} run(s), medians. Step 2 includes the argon2id hash of the node password and its write in one PostgreSQL transaction, and the login retried with it. Each step's time runs from the previous step's log line to its own (step 1 from the process start)."
        ),
        header: ["step", "median", "min", "max", "share of the run"]
            .map(String::from)
            .to_vec(),
        rows,
        targets: vec![],
    })
}
