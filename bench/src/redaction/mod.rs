//! Benchmark 2: redaction throughput and memory. A program writes `bytes` of output with a
//! node's 100 secrets configured (`crate::secrets`) and one secret printed every 64 KiB, each in
//! turn in each of its forms (`crate::printed`), in lines of 80 bytes, in lines of 1 MiB, and as
//! one line without a newline; and, as a hostile program's output, nothing but near misses
//! (every form cut one byte short); through jobenv, and through `cat` in the same pipe as the
//! baseline. jobenv's peak RSS is sampled from /proc while it runs. An untimed run per shape
//! first checks that every printed secret is redacted whole ([`check`]).

mod check;
pub mod shape;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::node::{Node, Tools};
use crate::printed::printed_forms;
use crate::report::{Table, Target};
use crate::secrets::node_secrets;
use crate::stats::{Samples, ms};

/// Name, line length (0: one line), near misses only.
const SHAPES: [(&str, usize, bool); 4] = [
    ("lines of 80 bytes", 80, false),
    ("lines of 1 MiB", 1 << 20, false),
    ("one line, no newline", 0, false),
    ("near misses only", 80, true),
];
const RSS_LIMIT_KIB: u64 = 8 * 1024;
/// jobenv's throughput as a share of `cat`'s, for output as programs print it.
const THROUGHPUT_TARGET: f64 = 0.9;
/// The least throughput of any output, near misses included, in MB/s (10^6 bytes).
const FLOOR_MB_S: f64 = 50.0;
/// The program prints one secret per this many bytes (`bench/src/bin/generate.rs`).
const SEGMENT: usize = 64 << 10;

/// `bytes` must be a multiple of 64 KiB (the program then never cuts a printed secret).
pub fn run(tools: &Tools, bytes: usize, runs: usize) -> anyhow::Result<Table> {
    anyhow::ensure!(bytes % SEGMENT == 0, "{bytes} bytes is not a multiple of 64 KiB");
    let secrets = node_secrets(100);
    let node = Node::new(
        tools,
        &tools.generate,
        &secrets,
        &["BENCH_BYTES", "BENCH_LINE", "BENCH_NEAR"],
    )?;
    // As many segments as the program prints forms (`bench/src/bin/generate.rs`).
    let printed = |line: usize| {
        secrets
            .iter()
            .map(|(_, v)| printed_forms(v, line == 0).len())
            .sum::<usize>()
    };
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for (shape, line, near) in SHAPES {
        // Every printed form once, in one segment each (near misses have no secret to check).
        let verdict = if near {
            None
        } else {
            Some(check::run(tools, &node, &secrets, printed(line) * SEGMENT, line)?)
        };
        let (mut cat, mut jobenv, mut peak_kib) = (Samples::default(), Samples::default(), 0u64);
        // Each jobenv run is paired with the `cat` run just before it: the ratio is the median
        // of the pairs' ratios, so a drift of the machine between pairs moves both sides.
        let mut ratios = Vec::new();
        for _ in 0..runs {
            let baseline = through_cat(tools, &secrets, bytes, line, near)?;
            let (took, rss) = through_jobenv(&node, bytes, line, near)?;
            cat.push(baseline);
            jobenv.push(took);
            ratios.push(baseline.as_secs_f64() / took.as_secs_f64());
            peak_kib = peak_kib.max(rss);
        }
        let mib_s = |d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
        let mb_s = |d: Duration| bytes as f64 / 1e6 / d.as_secs_f64();
        ratios.sort_by(f64::total_cmp);
        let ratio = ratios[ratios.len() / 2];
        rows.push(vec![
            shape.to_owned(),
            format!("{} ({:.0} MiB/s)", ms(cat.median()), mib_s(cat.median())),
            format!("{} ({:.0} MiB/s)", ms(jobenv.median()), mib_s(jobenv.median())),
            format!("{} / {}", ms(jobenv.min()), ms(jobenv.max())),
            format!("{ratio:.2}"),
            format!("{:.1} MiB", peak_kib as f64 / 1024.0),
            match &verdict {
                Some(v) => format!(
                    "{} / {}{}",
                    v.whole,
                    v.printed,
                    if v.rest_unchanged { "" } else { ", other output changed" }
                ),
                None => "—".to_owned(),
            },
        ]);
        if !near {
            targets.push(Target {
                text: format!("{shape}: jobenv/cat throughput {ratio:.2} (target ≥ {THROUGHPUT_TARGET:.1})"),
                met: ratio >= THROUGHPUT_TARGET,
            });
        }
        // The slowest run, not the median: no output may be slower than the floor.
        let slowest = mb_s(jobenv.max());
        targets.push(Target {
            text: format!("{shape}: jobenv's slowest run {slowest:.0} MB/s (target ≥ {FLOOR_MB_S:.0} MB/s)"),
            met: slowest >= FLOOR_MB_S,
        });
        targets.push(Target {
            text: format!(
                "{shape}: jobenv peak RSS {:.1} MiB (target < {} MiB)",
                peak_kib as f64 / 1024.0,
                RSS_LIMIT_KIB / 1024
            ),
            met: peak_kib < RSS_LIMIT_KIB,
        });
        if let Some(verdict) = verdict {
            targets.push(Target {
                text: format!(
                    "{shape}: printed secrets redacted whole {} of {}, the rest of the output unchanged: {} (target all of them, and yes)",
                    verdict.whole,
                    verdict.printed,
                    if verdict.rest_unchanged { "yes" } else { "no" }
                ),
                met: verdict.whole == verdict.printed && verdict.rest_unchanged,
            });
        }
    }
    Ok(Table {
        title: "2. Redaction throughput and memory".into(),
        method: format!(
            "{} MiB of program output per run, {runs} run(s) per shape, each a `cat` run then a jobenv run; medians, and the throughput ratio is the median of the runs' ratios. The node has 100 secrets of {}–{} characters in its secrets directory (`bench/src/secrets.rs`): 60 API tokens, and 10 each of passwords with non-ASCII characters, URLs with credentials (`/`, `&`), passwords with `<`, `&`, quotes and backslashes, and multi-line keys. The program (`bench/src/bin/generate.rs`) prints one secret every 64 KiB, going through every distinct form of each (`bench/src/printed.rs`, from the test kit's encoders): as it is; as Rust's `Debug` and `str::escape_debug` write it; JSON-escaped as serde_json, Python's `json.dumps`, PHP's `json_encode` (`\\/`), Go's `encoding/json` (`\\u003c`), .NET's default (upper-case hex, `\\u002B`) and Gson (`\\u003d`) write it, and Python's and Go's forms with upper-case hex; quoted as bash's `set -x`, `declare -p` and `printf %q` and Python's `shlex.quote` write it, with `''` and `\\\"`; percent-encoded five ways and XML- and HTML-escaped four ways; and in base64 after 0, 1 and 2 other bytes in both alphabets with and without padding, and wrapped at 76 and 64 columns: {} forms of the 100 secrets ({} in the one-line shape, which leaves out the forms with a newline). \"Near misses only\": the program prints every one of those forms cut one byte short, one per line, and nothing else. jobenv writes into a pipe the benchmark drains; the baseline sends the same program's output through `cat` into the same kind of pipe. Peak RSS is jobenv's own `VmHWM`, sampled every 5 ms. \"Redacted whole\": one untimed run per shape first prints every form once, and jobenv's output is compared with the program's own: each printed secret must come out as one `[REDACTED]` and every other byte unchanged.",
            bytes >> 20,
            secrets.iter().map(|(_, v)| v.chars().count()).min().unwrap_or(0),
            secrets.iter().map(|(_, v)| v.chars().count()).max().unwrap_or(0),
            printed(80),
            printed(0),
        ),
        header: [
            "output",
            "`cat` median",
            "jobenv median",
            "jobenv min / max",
            "jobenv/cat throughput",
            "jobenv peak RSS",
            "redacted whole",
        ]
        .map(String::from)
        .to_vec(),
        rows,
        targets,
    })
}

fn drain(child: &mut Child) -> anyhow::Result<u64> {
    let mut out = child.stdout.take().expect("piped");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        match out.read(&mut buf)? {
            0 => return Ok(total),
            n => total += n as u64,
        }
    }
}

fn through_cat(
    tools: &Tools,
    secrets: &[(String, String)],
    bytes: usize,
    line: usize,
    near: bool,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut generator = Command::new(&tools.generate)
        .env_clear()
        .envs(secrets.iter().map(|(k, v)| (k, v)))
        .env("BENCH_BYTES", bytes.to_string())
        .env("BENCH_LINE", line.to_string())
        .env("BENCH_NEAR", if near { "1" } else { "0" })
        .stdout(Stdio::piped())
        .spawn()?;
    let mut cat = Command::new("cat")
        .stdin(generator.stdout.take().expect("piped"))
        .stdout(Stdio::piped())
        .spawn()?;
    let got = drain(&mut cat)?;
    anyhow::ensure!(
        generator.wait()?.success() && cat.wait()?.success(),
        "the cat pipeline failed"
    );
    let took = start.elapsed();
    anyhow::ensure!(got == bytes as u64, "cat passed {got} of {bytes} bytes");
    Ok(took)
}

fn through_jobenv(node: &Node, bytes: usize, line: usize, near: bool) -> anyhow::Result<(Duration, u64)> {
    let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "BENCH_BYTES": bytes, "BENCH_LINE": line, "BENCH_NEAR": if near { "1" } else { "0" }});
    let mut command = node.jobenv_run(&payload)?;
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let start = Instant::now();
    let mut child = command.spawn()?;
    let peak = Arc::new(Mutex::new(0u64));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done, pid) = (Arc::clone(&peak), Arc::clone(&done), child.id());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(kib) = vm_hwm_kib(pid) {
                    let mut p = peak.lock().unwrap();
                    *p = (*p).max(kib);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let got = drain(&mut child)?;
    let status = child.wait()?;
    let took = start.elapsed();
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    anyhow::ensure!(status.success(), "jobenv failed: {status}");
    // Redaction shortens or lengthens the output a little; a large gap means lost output.
    anyhow::ensure!(got > bytes as u64 / 2, "jobenv passed only {got} of {bytes} bytes");
    let peak = *peak.lock().unwrap();
    Ok((took, peak))
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
