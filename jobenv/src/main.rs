use std::process::ExitCode;

use clap::Parser;
use jobenv::cli::{
    Cli, Command, DrainArgs, EnvArgs, KeysArgs, PruneArgs, RecoverArgs, RunArgs, SchemaArgs, SchemaName, StatusArgs,
};
use jobenv::error::{EXIT_INTERNAL, EXIT_REJECTED, Error, Problem};
use jobenv::input::keys;
use jobenv::record::journal::{self, Journal};
use jobenv::settings::Runner;
use jobenv::show;

/// jobenv holds every secret of the node, the job's payload (a tenant's state password) and its
/// job runner's variables: it must not be readable by the processes of its own user (the program
/// it runs, another job's). A process that is not dumpable has its `/proc/<pid>/` files
/// (`environ`, `fd/`, `mem`, `maps`, ...) owned by root and refuses ptrace to every process
/// without `CAP_SYS_PTRACE`. The kernel makes a process dumpable at each exec (of a readable
/// binary), so this runs as a constructor: before std's runtime and `main`. The program is
/// dumpable again after its own exec; its environment is its own.
#[ctor::ctor(unsafe)]
fn seal() {
    // A bare system call: nothing of std is set up yet. Cannot fail with these arguments;
    // `main` checks the result anyway.
    let _ = nix::sys::prctl::set_dumpable(false);
}

fn main() -> ExitCode {
    if !matches!(nix::sys::prctl::get_dumpable(), Ok(false)) {
        // A build whose constructor did not run (a linker that dropped it) must not run jobs.
        eprintln!(
            "jobenv: error: cannot make this process non-dumpable: its environment and memory would be readable by the program it runs"
        );
        return exit(EXIT_INTERNAL);
    }
    drop_empty_options();
    // Only jobenv's own events: a library's debug line could hold the events URL.
    let logging = safe_io::log::init("jobenv: ", "JOBENV_LOG", &["jobenv", "fediversity_jobenv"]);
    let cli = match (Cli::try_parse(), logging) {
        (Err(error), _) if !error.use_stderr() => {
            // --help, --version
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        (Err(error), _) => return exit(rejected_before_start(&clap_lines(&error))),
        (Ok(_), Err(error)) => return exit(rejected_before_start(&[error.to_string()])),
        (Ok(cli), Ok(())) => cli,
    };
    exit(match cli.command {
        Command::Run(args) => run(args),
        Command::Env(args) => env(args),
        Command::Keys(args) => keys(args),
        Command::Recover(args) => recover(args),
        Command::Status(args) => status(args),
        Command::Prune(args) => prune(args),
        Command::Drain(args) => drain(args),
        Command::Schema(args) => schema(args),
    })
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

/// An empty `JOBENV_*` variable means "unset", for every option alike (a unit or a whitelist
/// that passes a variable it does not set gives it empty: clap would take "" as a value).
fn drop_empty_options() {
    let empty: Vec<_> = std::env::vars_os()
        .filter(|(key, value)| value.is_empty() && key.to_str().is_some_and(|k| k.starts_with("JOBENV_")))
        .map(|(k, _)| k)
        .collect();
    for key in empty {
        // SAFETY: the first thing main does, while jobenv has no other thread that could read
        // the environment concurrently.
        unsafe { std::env::remove_var(key) };
    }
}

/// clap's message, without its `error: ` label and usage hints: the problem, naming the option.
fn clap_lines(error: &clap::Error) -> Vec<String> {
    let text = error.render().to_string();
    let text = text.strip_prefix("error: ").unwrap_or(&text);
    text.split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The command line or jobenv's own environment is wrong: every problem on its own
/// `jobenv: error:` line, exit 2, and under a job runner a `result.json` that says so.
fn rejected_before_start(errors: &[String]) -> i32 {
    for error in errors {
        tracing::error!("{error}");
    }
    let verb = std::env::args()
        .skip_while(|arg| arg != "--verb")
        .nth(1)
        .unwrap_or_default();
    jobenv::record::result_file::record_rejected_before_start(&Runner::from_environment(), &verb, errors);
    EXIT_REJECTED
}

/// Root on a state directory of another user's becomes that user before anything touches it
/// (see `record::owner`): every command that takes `--state-dir` calls this first. The error is
/// the exit code of its refusal, said.
fn as_owner(state_dir: &std::path::Path) -> Result<(), i32> {
    match jobenv::record::owner::become_owner(state_dir) {
        Ok(jobenv::record::owner::Identity::Unchanged) => Ok(()),
        Ok(jobenv::record::owner::Identity::Became { uid, gid, name }) => {
            tracing::debug!(
                "the state directory {} is {name}'s: jobenv runs as that user (uid {uid}, gid {gid}), not as root",
                jobenv::error::shown_path(state_dir)
            );
            Ok(())
        }
        Err(problem) => Err(rejected_before_start(&[problem.to_string()])),
    }
}

fn run(args: RunArgs) -> i32 {
    if let Err(code) = as_owner(&args.state.dir()) {
        return code;
    }
    match args.settings(Runner::from_environment()) {
        Ok(settings) => jobenv::job::run(&settings),
        Err(error) => rejected_before_start(&[error]),
    }
}

fn env(args: EnvArgs) -> i32 {
    if let Err(code) = as_owner(&args.state.dir()) {
        return code;
    }
    match jobenv::input::gather(&args.job.settings())
        .inputs
        .and_then(|inputs| jobenv::plan::plan(&inputs))
        .map_err(Error::Rejected)
    {
        Err(error) => {
            error.log();
            error.exit_code()
        }
        Ok(plan) => {
            for warning in &plan.warnings {
                tracing::warn!("{warning}");
            }
            let look = jobenv::evaluation::look(&plan.evaluation, &args.state.dir());
            print(&show::env(&plan, &look, args.format))
        }
    }
}

fn keys(args: KeysArgs) -> i32 {
    match keys::read_keys(&args.keys) {
        Err(problems) => {
            Error::Rejected(problems).log();
            EXIT_REJECTED
        }
        Ok(declared) => print(show::keys(&declared, args.format).as_bytes()),
    }
}

fn schema(args: SchemaArgs) -> i32 {
    use jobenv::schema;
    let generated = match args.what {
        SchemaName::Payload => schema::of_node(&args.node.settings()),
        SchemaName::Result => Ok(schema::result()),
        SchemaName::EventJobenv => Ok(schema::event_jobenv()),
        SchemaName::EventDd0012 => Ok(schema::event_dd0012()),
        SchemaName::JournalEntry => Ok(schema::journal_entry()),
    };
    match generated {
        Ok(value) => print(schema::text(&value).as_bytes()),
        Err(problems) => {
            Error::Rejected(problems).log();
            EXIT_REJECTED
        }
    }
}

fn open_journal(dir: &std::path::Path) -> Result<Journal, Error> {
    Journal::open(dir).map_err(|source| {
        Problem::Journal {
            path: dir.to_owned(),
            source,
        }
        .into()
    })
}

fn recover(args: RecoverArgs) -> i32 {
    if let Some(error) = ca_without_dsn(&args.cluster_ca_file, &args.cluster_dsn_file) {
        return error;
    }
    let dir = args.state.dir();
    if let Err(code) = as_owner(&dir) {
        return code;
    }
    let journal_problem = |source| {
        Error::from(Problem::Journal {
            path: dir.clone(),
            source,
        })
    };
    // `recover` runs when the worker starts again: programs may start from now on. First, and
    // whatever becomes of the rest: a drain mark left by a recover that failed would refuse every
    // job of this boot.
    let ended = Journal::end_draining(&dir).map_err(journal_problem);
    let mut printed = JsonArray::new();
    let recovered = open_journal(&dir).and_then(|journal| {
        journal
            .recover(|entry| {
                tracing::warn!(
                    "job {} (attempt {}) was interrupted: its jobenv is gone; marked failed",
                    entry.job_id,
                    entry.attempt
                );
                printed.push(entry)
            })
            .map_err(journal_problem)?;
        // Cluster mode: the ends the shared journal did not take, and the ends whose shared row
        // still shows their attempt running. They stay kept if it does not answer now (and
        // their entries are not pruned): the node's next job or `prune` hands them on.
        if let Some(dsn) = &args.cluster_dsn_file {
            if let Err(problem) =
                jobenv::record::store::postgres::hand_on_kept(&journal, dsn, args.cluster_ca_file.as_deref(), true)
            {
                tracing::warn!("{problem}");
            }
        }
        if let Err(error) = journal.prune(jobenv::cli::days(args.retain_days)) {
            tracing::warn!("cannot prune the journal: {error}");
        }
        Ok(())
    });
    if let Err(error) = &ended {
        error.log();
    }
    // What was changed before a failure is printed, as a whole array, all the same.
    let code = printed.finish();
    if let Err(error) = recovered {
        error.log();
        return error.exit_code();
    }
    match (code, ended) {
        (0, Err(error)) => error.exit_code(),
        (code, _) => code,
    }
}

/// `--cluster-ca-file` without `--cluster-dsn-file` does nothing: a configuration error, as for
/// `run`.
fn ca_without_dsn(ca: &Option<std::path::PathBuf>, dsn: &Option<std::path::PathBuf>) -> Option<i32> {
    (ca.is_some() && dsn.is_none()).then(|| rejected_before_start(&[jobenv::cli::CA_WITHOUT_DSN.to_owned()]))
}

fn prune(args: PruneArgs) -> i32 {
    if let Some(error) = ca_without_dsn(&args.cluster_ca_file, &args.cluster_dsn_file) {
        return error;
    }
    let dir = args.state.dir();
    if let Err(code) = as_owner(&dir) {
        return code;
    }
    let retain = jobenv::cli::days(args.retain_days);
    let pruned = open_journal(&dir).and_then(|journal| {
        // Cluster mode: first the ends the shared journal did not take (its rows are pruned
        // below; a failure to reach it fails that too).
        if let Some(dsn) = &args.cluster_dsn_file {
            if let Err(problem) =
                jobenv::record::store::postgres::hand_on_kept(&journal, dsn, args.cluster_ca_file.as_deref(), false)
            {
                tracing::warn!("{problem}");
            }
        }
        let pruned = journal.prune(retain).map_err(|source| Problem::Journal {
            path: dir.clone(),
            source,
        })?;
        // The cached shells of trees no longer deployed (they hold garbage-collector roots). A
        // cache that cannot be pruned keeps what it holds: jobs still run.
        let shells = jobenv::evaluation::prune(&dir, &args.deploy_env).unwrap_or_else(|error| {
            tracing::warn!("cannot prune the cached shells: {error}");
            0
        });
        Ok((pruned, shells))
    });
    // Cluster mode: the shared journal's ended rows by the same retention.
    let shared = args.cluster_dsn_file.as_deref().map(|dsn| {
        jobenv::record::store::postgres::prune(dsn, args.cluster_ca_file.as_deref(), retain).map_err(Error::from)
    });
    match (pruned, shared) {
        (Err(error), _) | (_, Some(Err(error))) => {
            error.log();
            error.exit_code()
        }
        (Ok((pruned, shells)), None) => {
            print(format!("{}\n", serde_json::json!({ "pruned": pruned, "shells_pruned": shells })).as_bytes())
        }
        (Ok((pruned, shells)), Some(Ok(shared))) => print(
            format!(
                "{}\n",
                serde_json::json!({ "pruned": pruned, "shells_pruned": shells, "cluster_pruned": shared })
            )
            .as_bytes(),
        ),
    }
}

fn drain(args: DrainArgs) -> i32 {
    let dir = args.state.dir();
    if let Err(code) = as_owner(&dir) {
        return code;
    }
    let (mut printed, mut stopped, mut left) = (JsonArray::new(), 0, Vec::new());
    let drained = open_journal(&dir).and_then(|journal| {
        let each = |entry: &journal::Entry| {
            match entry.status {
                jobenv::record::Status::Running => left.push(entry.job_id.clone()),
                _ => stopped += 1,
            }
            printed.push(entry)
        };
        journal.drain(args.wait, each).map_err(|source| {
            Problem::Journal {
                path: dir.clone(),
                source,
            }
            .into()
        })
    });
    if let Err(error) = drained {
        printed.finish();
        error.log();
        return error.exit_code();
    }
    if !left.is_empty() {
        tracing::error!("draining: still running after being stopped: {}", left.join(", "));
    }
    tracing::info!("drained: {stopped} job(s) stopped, {} still running", left.len());
    match printed.finish() {
        0 if left.is_empty() => 0,
        0 => 1,
        code => code,
    }
}

fn status(args: StatusArgs) -> i32 {
    // A job id names a file in the journal: never a path that leaves it.
    if let Some(id) = args.job_id.as_ref().filter(|id| !journal::is_valid_job_id(id)) {
        let error = Error::from(Problem::InvalidJobId(id.clone()));
        error.log();
        return error.exit_code();
    }
    let dir = args.state.dir();
    if let Err(code) = as_owner(&dir) {
        return code;
    }
    // Only reads: a node where no job ran yet has no journal, and `status` makes none.
    let journal = match Journal::at(&dir) {
        Ok(journal) => journal,
        Err(source) => {
            let error = Error::from(Problem::Journal { path: dir, source });
            error.log();
            return error.exit_code();
        }
    };
    if let (Some(journal), None) = (&journal, &args.job_id) {
        // Every entry, printed as it is read: the journal may hold more than fits in memory.
        let mut printed = JsonArray::new();
        let listed = journal.for_each_entry_by_start(|entry| printed.push(&entry));
        let code = printed.finish();
        if let Err(source) = listed {
            Error::from(Problem::Journal { path: dir, source }).log();
            return EXIT_REJECTED;
        }
        return code;
    }
    let shown = match (&journal, &args.job_id) {
        (None, Some(_)) => Ok(None),
        (None, None) => Ok(Some(json_line(&Vec::<journal::Entry>::new()))),
        (Some(journal), Some(id)) => journal.read(id).map(|entry| entry.map(|e| json_line(&e))),
        (Some(_), None) => unreachable!("printed above"),
    };
    match shown {
        Ok(Some(text)) => print(text.as_bytes()),
        Ok(None) => {
            tracing::error!("no journal entry for job {}", args.job_id.unwrap_or_default());
            1
        }
        Err(source) => {
            Error::from(Problem::Journal { path: dir, source }).log();
            EXIT_REJECTED
        }
    }
}

/// A JSON array printed one element at a time, exactly as `serde_json::to_string_pretty` prints
/// the whole array (each element's lines indented by two spaces), then a newline: what `status`,
/// `recover` and `drain` print, holding one entry at a time.
struct JsonArray {
    out: std::io::StdoutLock<'static>,
    count: usize,
    failed: bool,
}

impl JsonArray {
    fn new() -> Self {
        JsonArray {
            out: std::io::stdout().lock(),
            count: 0,
            failed: false,
        }
    }

    /// Prints `value`. Stdout gone (a closed pipe, a full disk) never stops the journal's work:
    /// that is said by the exit code ([`JsonArray::finish`]).
    fn push(&mut self, value: &impl serde::Serialize) -> std::io::Result<()> {
        if self.failed {
            return Ok(());
        }
        use std::io::Write;
        let text = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
        let mut element = String::with_capacity(text.len() + 64);
        element.push_str(if self.count == 0 { "[\n" } else { ",\n" });
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                element.push('\n');
            }
            element.push_str("  ");
            element.push_str(line);
        }
        self.count += 1;
        if self.out.write_all(element.as_bytes()).is_err() {
            self.failed = true;
        }
        Ok(())
    }

    /// The end of the array; jobenv's exit code for what was printed.
    fn finish(mut self) -> i32 {
        use std::io::Write;
        let end: &[u8] = if self.count == 0 { b"[]\n" } else { b"\n]\n" };
        match self.failed || self.out.write_all(end).and_then(|()| self.out.flush()).is_err() {
            false => 0,
            true => EXIT_INTERNAL,
        }
    }
}

fn json_line(value: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("journal entries serialize");
    text.push('\n');
    text
}

fn print(bytes: &[u8]) -> i32 {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Ok(()) => 0,
        Err(_) => EXIT_INTERNAL,
    }
}
