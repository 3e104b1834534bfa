//! The deployment program of the redaction benchmark: writes BENCH_BYTES of output as fast as a
//! program can, in lines of BENCH_LINE bytes (0: one line without a newline), with a secret
//! (BENCH_SECRET_0, BENCH_SECRET_1, ... from its environment) about every 64 KiB.

use std::io::Write;

fn main() -> std::io::Result<()> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let total = var("BENCH_BYTES").unwrap_or(1 << 20);
    let line = var("BENCH_LINE").unwrap_or(80);
    let secrets: Vec<String> = (0..).map_while(|i| std::env::var(format!("BENCH_SECRET_{i}")).ok()).collect();

    // One block, built once and written over and over: the generator must outrun any filter.
    const BLOCK: usize = 1 << 20;
    let mut block = Vec::with_capacity(BLOCK + 128);
    let filler = b"the quick brown fox jumps over the lazy dog; deployment output 0123456789 ";
    let mut next_secret = 0;
    while block.len() < BLOCK {
        if block.len() % (64 << 10) < filler.len() && !secrets.is_empty() {
            block.extend_from_slice(secrets[next_secret % secrets.len()].as_bytes());
            next_secret += 1;
        }
        block.extend_from_slice(filler);
    }
    block.truncate(BLOCK);
    if line > 0 {
        for i in (line - 1..BLOCK).step_by(line) {
            block[i] = b'\n';
        }
    }
    let mut out = std::io::stdout().lock();
    let mut written = 0;
    while written < total {
        let n = BLOCK.min(total - written);
        out.write_all(&block[..n])?;
        written += n;
    }
    out.flush()
}
