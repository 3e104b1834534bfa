//! The deployment program of the redaction benchmark: writes BENCH_BYTES of output as fast as a
//! program can, in lines of BENCH_LINE bytes (0: one line without a newline), with one printed
//! secret in every 64 KiB. It prints each secret of its environment (BENCH_SECRET_0,
//! BENCH_SECRET_1, ...) in every distinct form a program may print it, one after another (as it
//! is, and JSON-escaped as common encoders write it: `bench/src/printed.rs`).
//!
//! Each printed secret stands between two tabs (no secret holds one), so whoever reads the
//! output can tell a secret redacted whole from one that leaked in part.
//!
//! With BENCH_REPEAT=near or BENCH_REPEAT=whole it prints what agrees with the job's
//! TF_HTTP_PASSWORD (`bench/src/redaction/shape.rs`): the password cut one byte short on each
//! line, or the password over and over with nothing between.
//!
//! With BENCH_NEAR=1 it prints near misses instead, as a hostile or unlucky program would: every
//! form of every secret cut one byte short, one per line, back to back, so that the redactor
//! finds a possible secret at nearly every place it looks and must compare it to the end. A line that holds a
//! secret is longer than BENCH_LINE by the secret's length. Output is cut only at multiples of
//! 64 KiB, so a BENCH_BYTES that is one never cuts a secret in two.

use std::io::Write;

#[path = "../printed.rs"]
mod printed;

use printed::printed_forms;

/// One printed secret per segment, after a little filler, so it never straddles a segment.
const SEGMENT: usize = 64 << 10;
const LEAD: usize = 1000;
const FILLER: &[u8] = b"the quick brown fox jumps over the lazy dog; deployment output 0123456789 ";

fn main() -> std::io::Result<()> {
    let var = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok());
    let total = var("BENCH_BYTES").unwrap_or(1 << 20);
    let line = var("BENCH_LINE").unwrap_or(80);
    let secrets: Vec<String> = (0..)
        .map_while(|i| std::env::var(format!("BENCH_SECRET_{i}")).ok())
        .collect();
    if let Ok(repeat) = std::env::var("BENCH_REPEAT") {
        let password = std::env::var("TF_HTTP_PASSWORD").unwrap_or_default();
        let cycle = match repeat.as_str() {
            "near" => format!("{}\n", &password[..password.len().saturating_sub(1)]),
            _ => password,
        };
        return write_cycle(cycle.repeat((1 << 16) / cycle.len().max(1) + 1).as_bytes(), total);
    }
    let printed: Vec<String> = secrets.iter().flat_map(|s| printed_forms(s, line == 0)).collect();
    if std::env::var("BENCH_NEAR").is_ok_and(|v| v == "1") {
        let mut cycle = Vec::new();
        for form in &printed {
            // Cut at a character boundary, so the line is still text.
            let cut = form.char_indices().last().map_or(0, |(at, _)| at);
            cycle.extend_from_slice(&form.as_bytes()[..cut]);
            cycle.push(b'\n');
        }
        return write_cycle(&cycle, total);
    }

    // Built once and written over and over: the generator must outrun any filter.
    // No more of the cycle than the output needs (a short run would spend its time building).
    let needed = total.div_ceil(SEGMENT);
    let cycle = Cycle::build(&printed[..printed.len().min(needed)], line);
    write_cycle(&cycle.bytes, total)
}

/// `cycle` over and over, `total` bytes.
fn write_cycle(cycle: &[u8], total: usize) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let mut written = 0;
    while written < total {
        let n = cycle.len().min(total - written);
        out.write_all(&cycle[..n])?;
        written += n;
    }
    out.flush()
}

/// Every printed secret once, each in its own segment (one segment of filler alone when there
/// is no secret).
struct Cycle {
    bytes: Vec<u8>,
    /// Bytes since the last newline.
    column: usize,
    /// Where the filler text goes on.
    filler_at: usize,
}

impl Cycle {
    fn build(printed: &[String], line: usize) -> Self {
        let mut cycle = Cycle {
            bytes: Vec::with_capacity(printed.len().max(1) * SEGMENT),
            column: 0,
            filler_at: 0,
        };
        let segments: Vec<Option<&String>> = if printed.is_empty() {
            vec![None]
        } else {
            printed.iter().map(Some).collect()
        };
        for secret in segments {
            let end = cycle.bytes.len() + SEGMENT;
            cycle.filler(LEAD, line);
            if let Some(secret) = secret {
                cycle.bytes.push(b'\t');
                cycle.bytes.extend_from_slice(secret.as_bytes());
                cycle.bytes.push(b'\t');
                cycle.column = match secret.rfind('\n') {
                    Some(at) => secret.len() - at,
                    None => cycle.column + secret.len() + 2,
                };
            }
            cycle.filler(end - cycle.bytes.len(), line);
        }
        cycle
    }

    /// `n` bytes of filler text, a newline whenever a line has `line - 1` bytes.
    fn filler(&mut self, mut n: usize, line: usize) {
        while n > 0 {
            if line > 0 && self.column + 1 >= line {
                self.bytes.push(b'\n');
                self.column = 0;
                n -= 1;
                continue;
            }
            let at = self.filler_at % FILLER.len();
            let room = if line > 0 { line - 1 - self.column } else { usize::MAX };
            let take = n.min(room).min(FILLER.len() - at);
            self.bytes.extend_from_slice(&FILLER[at..at + take]);
            self.filler_at += take;
            self.column += take;
            n -= take;
        }
    }
}
