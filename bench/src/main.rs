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

use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// An earlier build of jobenv that the start-up benchmark measures beside this one, in the
    /// same rotation (its overhead against this build's, per containment)
    #[arg(long, value_name = "PATH")]
    baseline_jobenv: Option<PathBuf>,
    /// How the report names the baseline build, e.g. the commit it was built from (default: its path)
    #[arg(long, value_name = "TEXT", requires = "baseline_jobenv")]
    baseline_label: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let tools = node::Tools::find(cli.jobenv, cli.bootstrap)?;
    let baseline = match cli.baseline_jobenv {
        Some(jobenv) => {
            anyhow::ensure!(
                jobenv.exists(),
                "--baseline-jobenv: {} does not exist",
                jobenv.display()
            );
            Some(startup::Baseline {
                label: cli.baseline_label.unwrap_or_else(|| jobenv.display().to_string()),
                jobenv,
            })
        }
        None => None,
    };
    let all = cli.benches.is_empty();
    let benches = if all {
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
            Bench::Startup => startup::run(&tools, if cli.quick { 3 } else { 300 }, baseline.as_ref())?,
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
    let (machine, when) = (machine::describe(), humantime_date());
    match cli.out {
        Some(path) => {
            let existing = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n".into());
            let text = if all {
                report::splice(&existing, &report::generated(&machine, &when, &tables))
            } else {
                // Some of the benchmarks: their tables replace theirs, the others' stay.
                report::splice_tables(&existing, &machine, &when, &tables)
            };
            // Whole or not at all: the notes around the tables are written by hand.
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            let mut temporary = tempfile::NamedTempFile::new_in(dir)?;
            if let Ok(meta) = std::fs::metadata(&path) {
                temporary.as_file().set_permissions(meta.permissions())?;
            }
            temporary.write_all(text.as_bytes())?;
            temporary.persist(&path)?;
            eprintln!("fediversity-bench: wrote {}", path.display());
        }
        None => println!("{}", report::generated(&machine, &when, &tables)),
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
