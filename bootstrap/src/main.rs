//! Placeholder until the bootstrap lands (issue 3).
use clap::Parser;

#[derive(Parser)]
#[command(name = "fediversity-windmill-bootstrap", version)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    Cli::parse();
    anyhow::bail!("not implemented yet")
}
