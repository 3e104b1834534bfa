//! fediversity-bench: runs the benchmarks and writes their tables into BENCHMARKS.md.
//!
//! Every benchmark measures its baseline in the same run and reports ratios: absolute times
//! depend on the machine and on what else it is doing.

mod bootstrap;
mod events;
mod journal;
mod machine;
mod node;
mod printed;
mod redaction;
mod report;
mod secrets;
mod shells;
mod startup;
mod stats;
mod telemetry;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Bench {
    Startup,
    Redaction,
    BootstrapRerun,
    BootstrapCold,
    Events,
    Journal,
    Shells,
    SecretShape,
    Telemetry,
}

#[derive(Debug, Parser)]
#[command(
    name = "fediversity-bench",
    about = "Benchmarks of jobenv and the bootstrap, with same-run baselines"
)]
struct Cli {
    /// Which benchmarks to run (default: all)
    #[arg(value_enum)]
    benches: Vec<Bench>,
    /// Tiny sizes and one round: checks that every benchmark still works, measures nothing
    #[arg(long)]
    quick: bool,
    /// Write the tables into this file (between its generated-section markers); else print them
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// The jobenv binary (default: next to this one)
    #[arg(long, value_name = "PATH")]
    jobenv: Option<PathBuf>,
    /// The bootstrap binary (default: next to this one)
    #[arg(long, value_name = "PATH")]
    bootstrap: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let tools = node::Tools::find(cli.jobenv, cli.bootstrap)?;
    let benches = if cli.benches.is_empty() {
        vec![
            Bench::Startup,
            Bench::Redaction,
            Bench::BootstrapRerun,
            Bench::BootstrapCold,
            Bench::Events,
            Bench::Journal,
            Bench::Shells,
            Bench::SecretShape,
            Bench::Telemetry,
        ]
    } else {
        cli.benches
    };
    let mut tables = Vec::new();
    for bench in benches {
        eprintln!("fediversity-bench: running {bench:?}");
        tables.push(match bench {
            Bench::Startup => startup::run(&tools, if cli.quick { 3 } else { 300 })?,
            Bench::Redaction => redaction::run(
                &tools,
                if cli.quick { 4 << 20 } else { 1 << 30 },
                if cli.quick { 1 } else { 5 },
            )?,
            Bench::BootstrapRerun => bootstrap::noop_rerun(
                &tools,
                if cli.quick { [5, 12] } else { [5, 500] },
                if cli.quick { 1 } else { 7 },
            )?,
            Bench::BootstrapCold => bootstrap::cold(&tools, 5, if cli.quick { 1 } else { 5 })?,
            Bench::Events => events::run(
                &tools,
                if cli.quick { 2_000_000 } else { 100_000_000 },
                if cli.quick { 1 } else { 11 },
            )?,
            Bench::SecretShape => redaction::shape::run(
                &tools,
                if cli.quick { 4 << 20 } else { 256 << 20 },
                if cli.quick { 1 } else { 5 },
            )?,
            Bench::Journal => journal::run(
                &tools,
                if cli.quick {
                    &[0, 100]
                } else {
                    &[0, 1_000, 10_000, 100_000]
                },
                if cli.quick { 1 } else { 21 },
            )?,
            Bench::Shells => shells::run(&tools, if cli.quick { 1 } else { 9 }, cli.quick)?,
            Bench::Telemetry => telemetry::run(
                &tools,
                if cli.quick { 2 } else { 300 },
                if cli.quick { 2_000_000 } else { 100_000_000 },
                if cli.quick { 1 } else { 21 },
            )?,
        });
    }
    let when = humantime_date();
    let text = report::generated(&machine::describe(), &when, &tables);
    match cli.out {
        Some(path) => {
            let existing = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n".into());
            std::fs::write(&path, report::splice(&existing, &text))?;
            eprintln!("fediversity-bench: wrote {}", path.display());
        }
        None => println!("{text}"),
    }
    Ok(())
}

/// Today's date, from `date` (no time crate for one line of a report).
fn humantime_date() -> String {
    std::process::Command::new("date")
        .arg("+%Y-%m-%d")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}
