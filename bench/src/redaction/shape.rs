//! Benchmark 7: what a secret's shape does to the cost of redaction. A job's payload brings a
//! `TF_HTTP_PASSWORD` of 4096 characters (the most a payload may bring): one of random letters
//! and digits (the baseline), and ones that repeat themselves: 4096 `a`s, `ab` 2048 times, and
//! 2048 `a`s before 2048 random characters. The program prints what agrees with the password
//! from nearly every byte on, as a program that prints runs of the same character does: the
//! password cut one byte short on every line, or the password over and over. Compared:
//! jobenv's time for the same output with each password, in the same rounds.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::stats::Samples;

/// A repeating password costs at most this many times what the random one costs.
const RATIO_TARGET: f64 = 4.0;
const LEN: usize = 4096;

fn random(len: usize, seed: u64) -> String {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"[(x % 62) as usize])
        })
        .collect()
}

fn passwords() -> Vec<(&'static str, String)> {
    vec![
        ("random (baseline)", random(LEN, 0x9E37_79B9_7F4A_7C15)),
        ("`a` × 4096", "a".repeat(LEN)),
        ("`ab` × 2048", "ab".repeat(LEN / 2)),
        (
            "`a` × 2048, then random",
            format!("{}{}", "a".repeat(LEN / 2), random(LEN / 2, 7)),
        ),
    ]
}

const OUTPUTS: [(&str, &str); 2] = [
    ("near", "the password cut one byte short, one per line"),
    ("whole", "the password over and over"),
];

fn once(node: &Node, password: &str, output: &str, bytes: usize) -> anyhow::Result<Duration> {
    let payload = json!({
        "ATTRIBUTE": "web",
        "TF_HTTP_ADDRESS": "https://state.example/tf/bench",
        "TF_HTTP_PASSWORD": password,
        "BENCH_BYTES": bytes,
        "BENCH_REPEAT": output,
    });
    let mut command = node.jobenv_run(&payload)?;
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let start = Instant::now();
    let mut child = command.spawn()?;
    let mut out = child.stdout.take().expect("piped");
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0u64;
    loop {
        match out.read(&mut buf)? {
            0 => break,
            n => got += n as u64,
        }
    }
    let status = child.wait()?;
    let took = start.elapsed();
    anyhow::ensure!(status.success(), "jobenv failed: {status}");
    // Near misses pass whole; a password over and over is one marker.
    let expected = if output == "near" { bytes as u64 } else { 10 };
    anyhow::ensure!(
        got == expected,
        "jobenv passed {got} bytes of {bytes}, expected {expected}"
    );
    Ok(took)
}

pub fn run(tools: &Tools, bytes: usize, runs: usize) -> anyhow::Result<Table> {
    let node = Node::new(tools, &tools.generate, &[], &["BENCH_BYTES", "BENCH_REPEAT"])?;
    let passwords = passwords();
    // Whole passwords over and over: the output must end on a whole one.
    let bytes = bytes / LEN * LEN;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for (output, said) in OUTPUTS {
        let mut times = vec![Samples::default(); passwords.len()];
        // Each round runs every password once, so a drift of the machine moves them all.
        let mut ratios = vec![Vec::new(); passwords.len()];
        for _ in 0..runs {
            let round: Vec<Duration> = passwords
                .iter()
                .map(|(_, password)| once(&node, password, output, bytes))
                .collect::<anyhow::Result<_>>()?;
            for (i, took) in round.iter().enumerate() {
                times[i].push(*took);
                ratios[i].push(took.as_secs_f64() / round[0].as_secs_f64());
            }
        }
        for (i, (name, _)) in passwords.iter().enumerate() {
            ratios[i].sort_by(f64::total_cmp);
            let ratio = ratios[i][ratios[i].len() / 2];
            let mib_s = bytes as f64 / f64::from(1 << 20) / times[i].median().as_secs_f64();
            rows.push(vec![
                (*name).to_owned(),
                said.to_owned(),
                format!("{:.0} ms", times[i].median().as_secs_f64() * 1e3),
                format!("{mib_s:.0} MiB/s"),
                format!("{ratio:.2}"),
            ]);
            if i > 0 {
                targets.push(Target {
                    text: format!(
                        "{name}, {said}: {ratio:.2}× the random password's time (target ≤ {RATIO_TARGET:.0}×)"
                    ),
                    met: ratio <= RATIO_TARGET,
                });
            }
        }
    }
    Ok(Table {
        title: "8. Redaction against the shape of the secret".into(),
        method: format!(
            "{} MiB of program output per run, {runs} round(s), each running every password once; medians, and the ratio is the median of the rounds' ratios to the random password. A job's payload brings a `TF_HTTP_PASSWORD` of {LEN} characters (the most a payload may bring): random letters and digits (the baseline), or a password that repeats itself. The program (`bench/src/bin/generate.rs`) prints the password cut one byte short on every line (nothing to redact, and a possible password at nearly every byte), or the password over and over (one marker). jobenv writes into a pipe the benchmark drains. Before the redactor bounded its cost (722b992), `a` × 4096 took seconds per MiB of such output.",
            bytes >> 20
        ),
        header: ["password", "output", "jobenv median", "throughput", "time / random's"]
            .map(String::from)
            .to_vec(),
        rows,
        targets,
    })
}
