//! The command line: the configuration file and `--check`. Secrets are never arguments.

use std::path::PathBuf;

use clap::Parser;

const AFTER_HELP: &str = "\
Steps, in order: 1 ready, 2 login, 3 token, 4 workspace, 5 scripts, 6 settings, 7 openbao,
8 ui-auth, 9 revoke. Each logs one line to stderr ending in created, updated or unchanged.

Exit codes:
  0  every step held (with --check: the node is converged)
  1  --check found something a run would change
  2  configuration error (bad or missing field, unreadable file, invalid BOOTSTRAP_LOG);
     nothing was changed
  3  a step failed; the error line names it (systemd's Restart=on-failure retries),
     or the lock file could not be taken (`lock failed: ...`); with --check: a part
     could not be reached or read";

#[derive(Debug, Parser)]
#[command(
    name = "fediversity-windmill-bootstrap",
    version,
    about = "Converge a Windmill CE node: admin password, API token, workspace, scripts, settings",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// The JSON configuration file (see docs/operators/bootstrap.md for every field and its default)
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Only look: log in, compare workspace, folder, scripts, settings, the token OpenBao holds and the include; change nothing
    #[arg(long)]
    pub check: bool,
}
