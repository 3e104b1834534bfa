//! Stands in for nix-shell in the benchmarks, so nix's own evaluation (tens of ms, or minutes
//! with builds) is left out and what remains is the runner's overhead: takes the `--run` string
//! from its arguments and does what the dev shell's bash would do with it, then execs the
//! program from PATH.
//!
//! jobenv's `--run` string is `exec PROG`, or with progress events
//! `printf x 2>/dev/null >&3; exec PROG 3>&-`: the shell writes a byte to fd 3 (the ready pipe,
//! which tells jobenv that the program is about to start) and closes fd 3 for the program.
//!
//! Called `nix-instantiate` (a link of that name beside the one called `nix-shell`: jobenv runs
//! the evaluation with the nix-instantiate beside its nix-shell), it evaluates nothing either:
//! it roots (`--add-root`) or prints a derivation's path that does not exist, which it never
//! reads as nix-shell. Called `nix-store`, it does nothing.

use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;

const READY: &str = "printf x 2>/dev/null >&3; ";
const CLOSE_READY: &str = " 3>&-";

/// The derivation the stand-in nix-instantiate names.
const DRV: &str = "/nix/store/00000000000000000000000000000000-stand-in.drv";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let called = args.first().and_then(|a| a.rsplit('/').next()).unwrap_or_default();
    if called == "nix-store" {
        return;
    }
    if called == "nix-instantiate" {
        match args
            .iter()
            .position(|a| a == "--add-root")
            .and_then(|i| args.get(i + 1))
        {
            Some(root) => {
                let _ = std::fs::remove_file(root);
                if let Err(error) = std::os::unix::fs::symlink(DRV, root) {
                    eprintln!("nix-instantiate stand-in: cannot root {root}: {error}");
                    std::process::exit(1);
                }
                println!("{root}");
            }
            None => println!("{DRV}"),
        }
        return;
    }
    let Some(run) = args.iter().position(|a| a == "--run").and_then(|i| args.get(i + 1)) else {
        eprintln!("nix-shell-stand-in: no --run argument");
        std::process::exit(2);
    };
    let (ready, rest) = match run.strip_prefix(READY) {
        Some(rest) => (true, rest),
        None => (false, run.as_str()),
    };
    let rest = rest.strip_prefix("exec ").unwrap_or(rest);
    let executable = rest.strip_suffix(CLOSE_READY).unwrap_or(rest);
    if ready {
        // SAFETY: with this run string, jobenv started us with fd 3 open as the write end of
        // its ready pipe, and nothing else in this process owns or uses fd 3. The File takes
        // it over and closes it when dropped, before the exec, as `3>&-` would.
        let mut pipe = unsafe { File::from_raw_fd(3) };
        let _ = pipe.write_all(b"x"); // `2>/dev/null`: a closed pipe is not our concern
    }
    let error = std::process::Command::new(executable).exec();
    eprintln!("nix-shell-stand-in: cannot exec {executable}: {error}");
    std::process::exit(127);
}
