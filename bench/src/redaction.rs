//! Benchmark 2: redaction throughput and memory. A program writes `bytes` of output with 100
//! secrets (8–64 bytes) configured and one of them about every 64 KiB, in lines of 80 bytes, in
//! lines of 1 MiB, and as one line without a newline; through jobenv, and through `cat` in the
//! same pipe as the baseline. jobenv's peak RSS is sampled from /proc while it runs.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::node::{Node, Tools};
use crate::report::{Table, Target};
use crate::stats::{Samples, ms};

const SHAPES: [(&str, usize); 3] = [("lines of 80 bytes", 80), ("lines of 1 MiB", 1 << 20), ("one line, no newline", 0)];
const RSS_LIMIT_KIB: u64 = 16 * 1024;

pub fn run(tools: &Tools, bytes: usize, runs: usize) -> anyhow::Result<Table> {
    let secrets = secrets(100);
    let node = Node::new(tools, &tools.generate, &secrets, &["BENCH_BYTES", "BENCH_LINE"])?;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for (shape, line) in SHAPES {
        let (mut cat, mut jobenv, mut peak_kib) = (Samples::default(), Samples::default(), 0u64);
        for _ in 0..runs {
            cat.push(through_cat(tools, &secrets, bytes, line)?);
            let (took, rss) = through_jobenv(&node, bytes, line)?;
            jobenv.push(took);
            peak_kib = peak_kib.max(rss);
        }
        let mib_s = |d: Duration| bytes as f64 / (1 << 20) as f64 / d.as_secs_f64();
        let ratio = mib_s(jobenv.median()) / mib_s(cat.median());
        rows.push(vec![
            shape.to_owned(),
            format!("{} ({:.0} MiB/s)", ms(cat.median()), mib_s(cat.median())),
            format!("{} ({:.0} MiB/s)", ms(jobenv.median()), mib_s(jobenv.median())),
            format!("{} / {}", ms(jobenv.min()), ms(jobenv.max())),
            format!("{ratio:.2}"),
            format!("{:.1} MiB", peak_kib as f64 / 1024.0),
        ]);
        targets.push(Target { text: format!("{shape}: jobenv/cat throughput {ratio:.2} (target ≥ 0.5)"), met: ratio >= 0.5 });
        targets.push(Target {
            text: format!("{shape}: jobenv peak RSS {:.1} MiB (target < 16 MiB)", peak_kib as f64 / 1024.0),
            met: peak_kib < RSS_LIMIT_KIB,
        });
    }
    Ok(Table {
        title: "2. Redaction throughput and memory".into(),
        method: format!(
            "{} MiB of program output per run, {runs} run(s) per shape, medians. The program writes through jobenv (100 secrets of 8–64 bytes in its secrets directory, one occurring about every 64 KiB of output) into a pipe the benchmark drains; the baseline sends the same program's output through `cat` into the same kind of pipe. Peak RSS is jobenv's own `VmHWM`, sampled every 5 ms.",
            bytes >> 20
        ),
        header: ["output", "`cat` median", "jobenv median", "jobenv min / max", "jobenv/cat throughput", "jobenv peak RSS"].map(String::from).to_vec(),
        rows,
        targets,
    })
}

/// Deterministic secrets of 8–64 characters (a fixed xorshift: the same secrets every run).
fn secrets(count: usize) -> Vec<(String, String)> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..count)
        .map(|i| {
            let len = 8 + (next() % 57) as usize;
            let value: String = (0..len).map(|_| ALPHABET[(next() % ALPHABET.len() as u64) as usize] as char).collect();
            (format!("BENCH_SECRET_{i}"), value)
        })
        .collect()
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

fn through_cat(tools: &Tools, secrets: &[(String, String)], bytes: usize, line: usize) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut generator = Command::new(&tools.generate)
        .env_clear()
        .envs(secrets.iter().map(|(k, v)| (k, v)))
        .env("BENCH_BYTES", bytes.to_string())
        .env("BENCH_LINE", line.to_string())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut cat = Command::new("cat").stdin(generator.stdout.take().expect("piped")).stdout(Stdio::piped()).spawn()?;
    let got = drain(&mut cat)?;
    anyhow::ensure!(generator.wait()?.success() && cat.wait()?.success(), "the cat pipeline failed");
    let took = start.elapsed();
    anyhow::ensure!(got == bytes as u64, "cat passed {got} of {bytes} bytes");
    Ok(took)
}

fn through_jobenv(node: &Node, bytes: usize, line: usize) -> anyhow::Result<(Duration, u64)> {
    let mut command = node.jobenv_run(&json!({"ATTRIBUTE": "web", "NAMESPACE": "bench", "BENCH_BYTES": bytes, "BENCH_LINE": line}))?;
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
