//! Stands in for nix-shell in the start-up benchmark, so nix's own evaluation (tens of ms) is
//! left out and what remains is jobenv's overhead: takes `--run "exec <EXECUTABLE>"` from its
//! arguments and execs that executable from PATH, as the dev shell would.

use std::os::unix::process::CommandExt;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(run) = args.iter().position(|a| a == "--run").and_then(|i| args.get(i + 1)) else {
        eprintln!("nix-shell-stand-in: no --run argument");
        std::process::exit(2);
    };
    let executable = run.strip_prefix("exec ").unwrap_or(run);
    let error = std::process::Command::new(executable).exec();
    eprintln!("nix-shell-stand-in: cannot exec {executable}: {error}");
    std::process::exit(127);
}
