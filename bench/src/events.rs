//! Benchmark 5: progress events must never slow the program (issue 7). A program writes 100 MB
//! in lines of 100 bytes through jobenv with a secret configured; the same node without events
//! is the baseline, beside a receiver that sleeps 5 s per request and one that answers at once.
//! Measured: the time to the last byte of jobenv's output (how long the program's output took
//! to get through) and the time to jobenv's exit (which includes the bounded final wait).

use std::time::Duration;

use fediversity_testkit::events_receiver::Receiver;
use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::stats::{Samples, ms};

const SECRET: &str = "bench-events-secret-5e1f0c";
const TOKEN: (&str, &str) = ("TF_VAR_token", "bench-tf-token-0123456789");

struct Times {
    output: Samples,
    exit: Samples,
}

fn node(tools: &Tools, events_url: Option<&str>) -> anyhow::Result<Node> {
    let mut secrets = vec![(TOKEN.0.to_owned(), TOKEN.1.to_owned())];
    if events_url.is_some() {
        secrets.push(("EVENTS_SECRET".to_owned(), SECRET.to_owned()));
    }
    let node = Node::new(tools, &tools.generate, &secrets, &["BENCH_BYTES", "BENCH_LINE"])?;
    if let Some(url) = events_url {
        node.set_deploy_env("EVENTS_URL", url)?;
    }
    Ok(node)
}

fn once(node: &Node, bytes: usize) -> anyhow::Result<(Duration, Duration)> {
    // No secret occurs in this output, so jobenv passes exactly `bytes`: the last of them marks
    // the end of the program's output (the pipe itself closes only when jobenv exits, after its
    // bounded wait for the final status).
    let command =
        node.jobenv_run(&json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "BENCH_BYTES": bytes, "BENCH_LINE": 100}))?;
    crate::telemetry::timed(command, bytes)
}

pub fn run(tools: &Tools, bytes: usize, runs: usize) -> anyhow::Result<Table> {
    let slow = Receiver::slow(SECRET, Duration::from_secs(5));
    let fast = Receiver::start(SECRET);
    let nodes = [
        ("no events (baseline)", node(tools, None)?),
        ("slow receiver, 5 s per request", node(tools, Some(&slow.url()))?),
        ("fast receiver", node(tools, Some(&fast.url()))?),
    ];
    let mut times: Vec<Times> = (0..nodes.len())
        .map(|_| Times {
            output: Samples::default(),
            exit: Samples::default(),
        })
        .collect();
    // Alternating, so a change in the machine's load hits every node alike.
    for _ in 0..runs {
        for (i, (_, node)) in nodes.iter().enumerate() {
            let (output, exit) = once(node, bytes)?;
            times[i].output.push(output);
            times[i].exit.push(exit);
        }
    }
    let base = &times[0];
    let ratio = |s: &Samples, b: &Samples| s.median().as_secs_f64() / b.median().as_secs_f64();
    let rows = nodes
        .iter()
        .zip(&times)
        .map(|((name, _), t)| {
            vec![
                (*name).to_owned(),
                format!(
                    "{} ({} – {})",
                    ms(t.output.median()),
                    ms(t.output.min()),
                    ms(t.output.max())
                ),
                format!("{:.2}", ratio(&t.output, &base.output)),
                ms(t.exit.median()),
                format!("{:.2}", ratio(&t.exit, &base.exit)),
            ]
        })
        .collect();
    let slow_output = ratio(&times[1].output, &base.output);
    let slow_exit = times[1].exit.median().saturating_sub(times[1].output.median());
    Ok(Table {
        title: "5. Progress events with a slow receiver".into(),
        method: format!(
            "{} MB of program output in lines of 100 bytes per run, {runs} runs per node, the nodes interleaved, medians (min – max). A secret is configured on every node (with events there always is one, `EVENTS_SECRET`). The receivers are the test harness's (axum on 127.0.0.1, in the benchmark's process), which check the `x-action-secret` header against a SHA-256.",
            bytes / 1_000_000
        ),
        header: [
            "node",
            "to the last byte of output",
            "output ratio",
            "to jobenv's exit",
            "exit ratio",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        targets: vec![
            Target {
                text: format!(
                    "a slow receiver does not slow the program: output ratio {slow_output:.2} (we hold it to ≤ 1.3)"
                ),
                met: slow_output <= 1.3,
            },
            Target {
                text: format!(
                    "the final status waits at most 2 s: exit minus output with the slow receiver {} (target ≤ 2.2 s)",
                    ms(slow_exit)
                ),
                met: slow_exit <= Duration::from_millis(2200),
            },
        ],
    })
}
