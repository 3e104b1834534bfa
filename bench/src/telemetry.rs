//! Benchmark 9: what OTLP export costs (issue 33). Without an endpoint it must cost nothing;
//! with one, a deploy's start-up and its output's throughput are measured against the same node
//! without export, in the same run, and a black-hole collector must add at most the flush bound
//! to the job's end.
//!
//! Start-up: the program is `/bin/true` on a node of 100 secrets (as benchmark 1), jobenv run
//! without any `OTEL_*` variable (the baseline), with every variable of export but the endpoint,
//! exporting to a receiver that answers at once, and to a black hole. Throughput: the program
//! writes `bytes` in lines of 100 bytes (as benchmark 5), without export and with it.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fediversity_testkit::otlp_receiver::{self, Receiver};
use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::secrets::node_secrets;
use crate::stats::{Samples, ms};

const WARM_UP: usize = 3;
/// The black hole's flush bound.
const FLUSH: Duration = Duration::from_secs(1);

/// The variables of each way a job runs.
fn variables(way: usize, receiver: &str, hole: &str) -> Vec<(&'static str, String)> {
    let attributes = ("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=fediversity".to_owned());
    match way {
        0 => vec![],
        1 => vec![
            ("OTEL_SERVICE_NAME", "fediversity-jobenv".into()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".into()),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=bench-key-0123456789".into()),
            attributes,
        ],
        2 => vec![("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.to_owned()), attributes],
        _ => vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", hole.to_owned()),
            ("JOBENV_OTLP_FLUSH_TIMEOUT", format!("{}", FLUSH.as_secs_f64())),
            attributes,
        ],
    }
}

const WAYS: [&str; 4] = [
    "no `OTEL_*` variable (baseline)",
    "every variable but the endpoint",
    "exporting to a collector that answers at once",
    "exporting to a black hole (flush bound 1 s)",
];

/// Runs `command` and times the last byte of its output (`bytes` of it) and its exit.
pub fn timed(mut command: Command, bytes: usize) -> anyhow::Result<(Duration, Duration)> {
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let start = Instant::now();
    let mut child = command.spawn()?;
    let mut out = child.stdout.take().expect("piped");
    let mut buf = vec![0u8; 1 << 20];
    let (mut got, mut output_done) = (0usize, None);
    loop {
        match out.read(&mut buf)? {
            0 => break,
            n => got += n,
        }
        if got >= bytes && output_done.is_none() {
            output_done = Some(start.elapsed());
        }
    }
    let output_done = output_done.unwrap_or_else(|| start.elapsed());
    let status = child.wait()?;
    let exited = start.elapsed();
    anyhow::ensure!(status.success(), "jobenv failed: {status}");
    anyhow::ensure!(got == bytes, "jobenv passed {got} of {bytes} bytes");
    Ok((output_done, exited))
}

pub fn run(tools: &Tools, rounds: usize, bytes: usize, runs: usize) -> anyhow::Result<Table> {
    let receiver = Receiver::start();
    let hole = otlp_receiver::black_hole();
    let (endpoint, black_hole) = (receiver.endpoint(), hole.endpoint());

    // Start-up.
    let secrets = node_secrets(100);
    let startup = Node::new(tools, std::path::Path::new("/bin/true"), &secrets, &["DOMAIN"])?;
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "DOMAIN": "example.org"});
    let mut start_samples: Vec<Samples> = (0..WAYS.len()).map(|_| Samples::default()).collect();
    // The black hole's second a round is measured in fewer rounds, beside the same baseline.
    let hole_rounds = runs.min(rounds);
    for round in 0..rounds + WARM_UP {
        // Rotate the order each round so drift on a busy machine hits every way alike.
        for k in 0..WAYS.len() {
            let way = (round + k) % WAYS.len();
            if way == 3 && round >= hole_rounds + WARM_UP {
                continue;
            }
            let mut command = startup.jobenv_run_on_stdin(&payload)?;
            command
                .env("JOBENV_CONTAINMENT", "proc")
                .envs(variables(way, &endpoint, &black_hole));
            let (_, exit) = timed(command, 0)?;
            if round >= WARM_UP {
                start_samples[way].push(exit);
            }
        }
    }

    // Throughput.
    let output = Node::new(
        tools,
        &tools.generate,
        &[("TF_VAR_token".into(), "bench-tf-token-0123456789".into())],
        &["BENCH_BYTES", "BENCH_LINE"],
    )?;
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "BENCH_BYTES": bytes, "BENCH_LINE": 100});
    let throughput_ways = [0usize, 2, 3];
    let mut out_samples: Vec<(Samples, Samples)> = throughput_ways
        .iter()
        .map(|_| (Samples::default(), Samples::default()))
        .collect();
    let received_before = receiver.recorded().records.len();
    for _ in 0..runs {
        for (i, way) in throughput_ways.iter().enumerate() {
            let mut command = output.jobenv_run(&payload)?;
            command.envs(variables(*way, &endpoint, &black_hole));
            let (last_byte, exit) = timed(command, bytes)?;
            out_samples[i].0.push(last_byte);
            out_samples[i].1.push(exit);
        }
    }
    let exported = (receiver.recorded().records.len() - received_before) / runs.max(1);

    let base = start_samples[0].median();
    let over = |s: &Samples| {
        let d = s.median().as_secs_f64() - base.as_secs_f64();
        format!("{}{:.2} ms", if d < 0.0 { "" } else { "+" }, d * 1000.0)
    };
    let mut rows: Vec<Vec<String>> = start_samples
        .iter()
        .zip(WAYS)
        .map(|(s, way)| {
            vec![
                format!("start-up, `/bin/true`: {way}"),
                format!("{} ({} – {})", ms(s.median()), ms(s.min()), ms(s.max())),
                over(s),
            ]
        })
        .collect();
    let (out_base, exit_base) = (out_samples[0].0.median(), out_samples[0].1.median());
    for (i, way) in throughput_ways.iter().enumerate() {
        let (to_output, to_exit) = &out_samples[i];
        rows.push(vec![
            format!("{} MB of output: {}", bytes / 1_000_000, WAYS[*way]),
            format!(
                "to the last byte {} ({:.2}×), to the exit {}",
                ms(to_output.median()),
                to_output.median().as_secs_f64() / out_base.as_secs_f64(),
                ms(to_exit.median())
            ),
            format!("exit +{}", ms(to_exit.median().saturating_sub(exit_base))),
        ]);
    }
    let quiet = start_samples[1].median().as_secs_f64() / base.as_secs_f64();
    let export_start = start_samples[2].median().saturating_sub(base);
    let hole_end = start_samples[3].median().saturating_sub(base);
    let out_ratio = out_samples[1].0.median().as_secs_f64() / out_base.as_secs_f64();
    let hole_ratio = out_samples[2].0.median().as_secs_f64() / out_base.as_secs_f64();
    let hole_flush = out_samples[2].1.median().saturating_sub(out_samples[2].0.median());
    Ok(Table {
        title: "9. OTLP export: start-up and throughput".into(),
        method: format!(
            "Start-up: wall time from spawn to exit, {rounds} rounds after {WARM_UP} warm-up rounds ({hole_rounds} for the black hole), the four ways in a rotating order, of `fediversity-jobenv run` (proc walk, no job id) on benchmark 1's node (100 secrets) with `/bin/true`; the variables of each way are `bench/src/telemetry.rs`'s. Throughput: benchmark 5's program writes {} MB in lines of 100 bytes, {runs} runs per way, interleaved; a secret is configured. The collector is the test kit's OTLP receiver (axum on 127.0.0.1 in the benchmark's process, decoding every request); the black hole takes connections and never answers. Exporting, every line becomes a log record: the receiver got {exported} records per throughput run (the rest is past the in-flight bound while it decodes; counted in jobenv's one line).",
            bytes / 1_000_000
        ),
        header: ["job", "median (min – max)", "over the baseline"]
            .map(String::from)
            .to_vec(),
        rows,
        targets: vec![
            Target {
                text: format!(
                    "without an endpoint nothing runs: start-up with every other variable / without any: {quiet:.3}× (target ≤ 1.05×)"
                ),
                met: quiet <= 1.05,
            },
            Target {
                text: format!(
                    "exporting adds {} to a job that does nothing (building the exporter, its three threads, the final flush to a collector that answers; target ≤ 25 ms)",
                    ms(export_start)
                ),
                met: export_start <= Duration::from_millis(25),
            },
            Target {
                text: format!(
                    "a black hole adds at most the flush bound: {} to the job's end (target ≤ {} + 0.3 s)",
                    ms(hole_end),
                    ms(FLUSH)
                ),
                met: hole_end <= FLUSH + Duration::from_millis(300),
            },
            Target {
                text: format!(
                    "export never waits for the collector: to the last byte with a black hole, where nothing is ever delivered, {hole_ratio:.2}× (target ≤ 1.3×: the records the in-flight bound holds are made and handed over, the rest of the lines only counted); with a collector that answers, {out_ratio:.2}× (no target: the collector decodes on the same two cores, and every record exported is CPU taken from the program)"
                ),
                met: hole_ratio <= 1.3,
            },
            Target {
                text: format!(
                    "after its output, a job with a black hole ends within the flush bound: {} (target ≤ {} + 0.3 s)",
                    ms(hole_flush),
                    ms(FLUSH)
                ),
                met: hole_flush <= FLUSH + Duration::from_millis(300),
            },
        ],
    })
}
