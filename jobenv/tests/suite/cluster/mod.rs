//! Cluster mode: nodes that share one PostgreSQL database (`--cluster-dsn-file`) keep one deploy
//! per namespace and a job's result never lost or executed twice by accident across them, as
//! one node does. Two state directories stand for two nodes; the database is the test kit's
//! real PostgreSQL. Leases are short here (4 s, renewed every 0.5 s, deadline 2 s, and so a
//! grace of 1 s at most).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use fediversity_testkit::job_run::{Done, JobRun};
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::postgres;
use fediversity_testkit::process::{Running, StreamWatch, is_alive, kill_all, read_pids, wait_exit, wait_until};
use fediversity_testkit::tcp_proxy::Proxy;
use serde_json::{Value, json};

mod ends;
mod identity;
mod load;
mod small;
mod stops;

const LEASE: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(2);

/// The times of a node's leases, and its `--grace` (the longest that fits, by default).
#[derive(Debug, Clone, Copy)]
struct Timing {
    lease: Duration,
    renew_every: Duration,
    renew_deadline: Duration,
    grace: Duration,
}

const TIMING: Timing = Timing {
    lease: LEASE,
    renew_every: Duration::from_millis(500),
    renew_deadline: RENEW_DEADLINE,
    grace: Duration::from_secs(1),
};

/// A node: its own fixture (state directory, job directory, programs) and the DSN file it
/// gives jobenv. `body` is the program `web-apply`; `$NODE` in it is the node's name.
struct Node {
    name: &'static str,
    f: Fixture,
    dsn_file: Option<PathBuf>,
}

impl Node {
    fn new(name: &'static str, dsn: Option<&str>, body: &str) -> Node {
        let mut f = Fixture::new();
        let body = body
            .replace("$NODE", name)
            .replace("$DSN_FILE", &f.path().join("cluster-dsn").display().to_string());
        f.program("web", "apply", &body);
        let dsn_file = dsn.map(|dsn| {
            let path = f.path().join("cluster-dsn");
            std::fs::write(&path, format!("{dsn}\n")).unwrap();
            path
        });
        Node { name, f, dsn_file }
    }

    /// `run --verb apply` of `namespace` on this node, as job `job_id` of a Windmill worker.
    fn job(&self, job_id: &str, namespace: &str) -> JobRun {
        self.job_timed(job_id, namespace, TIMING)
    }

    /// [`Node::job`] with leases of `timing`.
    fn job_timed(&self, job_id: &str, namespace: &str, timing: Timing) -> JobRun {
        let mut run = self
            .f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .env("WM_JOB_ID", job_id)
            .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": namespace}));
        if let Some(dsn_file) = &self.dsn_file {
            run = run
                .env("JOBENV_CLUSTER_DSN_FILE", dsn_file)
                .env("JOBENV_CLUSTER_LEASE", timing.lease.as_secs_f64().to_string())
                .env(
                    "JOBENV_CLUSTER_RENEW_EVERY",
                    timing.renew_every.as_secs_f64().to_string(),
                )
                .env(
                    "JOBENV_CLUSTER_RENEW_DEADLINE",
                    timing.renew_deadline.as_secs_f64().to_string(),
                )
                .env("JOBENV_GRACE", timing.grace.as_secs_f64().to_string());
        }
        run
    }

    fn result(&self) -> Value {
        self.f.result_json()
    }
}

/// Seconds since the epoch, as `date +%s.%N` prints them.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The `start`/`end` lines programs wrote to `log`: one `(node, start, end)` per run, in the
/// order they started; `end` is missing for a program that never ended on its own.
fn runs(log: &Path) -> Vec<(String, f64, Option<f64>)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut runs: Vec<(String, f64, Option<f64>)> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (what, node, at) = (fields[0], fields[1].to_owned(), fields[2].parse::<f64>().unwrap());
        match what {
            "start" => runs.push((node, at, None)),
            _ => {
                runs.iter_mut()
                    .rev()
                    .find(|r| r.0 == node && r.2.is_none())
                    .expect("an end after its start")
                    .2 = Some(at)
            }
        }
    }
    runs.sort_by(|a, b| a.1.total_cmp(&b.1));
    runs
}

/// Whether any two runs in `log` overlapped in time.
fn overlaps(log: &Path) -> bool {
    runs(log)
        .windows(2)
        .any(|pair| pair[1].1 < pair[0].2.unwrap_or(f64::INFINITY))
}

/// A program that logs its start and end to `log` (shared by both nodes) and takes `secs`.
fn timed(log: &Path, secs: &str) -> String {
    let log = log.display();
    format!("echo \"start $NODE $(date +%s.%N)\" >> {log}; sleep {secs}; echo \"end $NODE $(date +%s.%N)\" >> {log}")
}

/// A program whose runs check themselves: it takes its namespace's lock in `dir` (a directory
/// every node shares) without waiting, and where another program of the namespace holds it
/// (the lock goes with the last process of a program tree, however that ends) logs
/// `overlap <node> <time>` to `dir/overlaps`. Then it logs `start <node> <time>` to `dir/log`,
/// writes its pid to `dir/program-<node>.pid`, waits for `dir/go-<node>` (ignoring SIGTERM
/// when `stubborn`, as a program that takes its time to stop does) and logs `end <node> <time>`.
fn watched(dir: &Path, stubborn: bool) -> String {
    let dir = dir.display();
    let trap = if stubborn { "trap '' TERM; " } else { "" };
    format!(
        "exec 9>>{dir}/ns-$DEPLOYMENT_NAMESPACE.lock; flock -n 9 || echo \"overlap $NODE $(date +%s.%N)\" >> {dir}/overlaps; \
         echo \"start $NODE $(date +%s.%N)\" >> {dir}/log; echo $$ > {dir}/program-$NODE.pid; {trap}\
         while [ ! -e {dir}/go-$NODE ]; do sleep 0.05; done; echo \"end $NODE $(date +%s.%N)\" >> {dir}/log"
    )
}

/// What the programs of [`watched`] found: every overlap they saw.
fn overlaps_seen(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("overlaps")).unwrap_or_default()
}

/// The positive control of [`watched`]'s own check: two nodes without the shared journal run
/// one namespace at once, and their programs see it.
#[test]
fn the_programs_own_check_sees_two_deploys_of_one_namespace_at_once() {
    let shared = tempfile::tempdir().unwrap();
    let body = watched(shared.path(), false);
    let (a, b) = (Node::new("a", None, &body), Node::new("b", None, &body));
    let first = a.job("self-check-a", "ns").spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    let second = b.job("self-check-b", "ns").spawn();
    read_pids(&shared.path().join("program-b.pid"), 1, Duration::from_secs(20));
    for node in ["a", "b"] {
        std::fs::write(shared.path().join(format!("go-{node}")), "").unwrap();
    }
    assert!(finish(first).success() && finish(second).success());
    assert!(
        overlaps_seen(shared.path()).starts_with("overlap b "),
        "the second program did not see the first: {:?}",
        overlaps_seen(shared.path())
    );
}

/// A few random bytes, for the delays between two nodes' starts.
fn random_millis(below: u64) -> u64 {
    use std::io::Read;
    let mut byte = [0u8; 2];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut byte)
        .unwrap();
    u64::from(u16::from_le_bytes(byte)) % below
}

/// Waits for a spawned jobenv and collects what it printed.
fn finish(mut running: Running) -> Done {
    use std::io::Read;
    let mut stdout = running.stdout.take().expect("stdout piped");
    let reading = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let mut stderr = Vec::new();
    if let Some(mut pipe) = running.stderr.take() {
        let _ = pipe.read_to_end(&mut stderr);
    }
    let code = running.wait().unwrap().code();
    let stdout = reading.join().unwrap();
    Done {
        code,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        raw_stdout: stdout,
    }
}

#[test]
fn two_nodes_never_run_one_namespace_at_once_however_their_jobs_interleave() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let log = shared.path().join("log");
    // Positive control: two nodes without the shared journal do run one namespace at once (the
    // check below sees an overlap when there is one): each program waits, up to 5 s, until both
    // have started.
    let meet = format!(
        "echo \"start $NODE $(date +%s.%N)\" >> {log}; i=0; while [ \"$(grep -c ^start {log})\" -lt 2 ] && [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done; \
         echo \"end $NODE $(date +%s.%N)\" >> {log}",
        log = log.display()
    );
    let (a, b) = (Node::new("a", None, &meet), Node::new("b", None, &meet));
    let (first, second) = (
        a.job("control-a", "shared").spawn(),
        b.job("control-b", "shared").spawn(),
    );
    assert!(finish(first).success() && finish(second).success());
    assert!(
        overlaps(&log),
        "without the cluster journal the two deploys should have overlapped: {:?}",
        runs(&log)
    );
    std::fs::remove_file(&log).unwrap();

    let (a, b) = (
        Node::new("a", Some(&db.dsn()), &timed(&log, "0.2")),
        Node::new("b", Some(&db.dsn()), &timed(&log, "0.2")),
    );
    const PAIRS: usize = 12;
    for pair in 0..PAIRS {
        let (early, late) = if pair % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let first = early
            .job(&format!("pair-{pair}-{}", early.name), "shared")
            .args(["--lock-timeout", "30"])
            .spawn();
        std::thread::sleep(Duration::from_millis(random_millis(400)));
        let second = late
            .job(&format!("pair-{pair}-{}", late.name), "shared")
            .args(["--lock-timeout", "30"])
            .spawn();
        let (first, second) = (finish(first), finish(second));
        assert!(
            first.success() && second.success(),
            "pair {pair}\n{first:?}\n{second:?}"
        );
    }
    let all = runs(&log);
    assert_eq!(all.len(), 2 * PAIRS, "{all:?}");
    assert!(!overlaps(&log), "two deploys of one namespace overlapped: {all:?}");
}

#[test]
fn a_finished_job_re_run_on_the_other_node_is_replayed_without_running_it() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    // The program can read the DSN file (it runs as the worker's user): what it prints of it is
    // redacted like a node secret.
    let body = format!("echo ran >> {}/runs; cat $DSN_FILE; exit 3", shared.path().display());
    let (a, b) = (
        Node::new("a", Some(&db.dsn()), &body),
        Node::new("b", Some(&db.dsn()), &body),
    );
    let done = a
        .job("zombie-1", "ns")
        .expect_code(3)
        .expect_nowhere("the DSN's password", &db.password())
        .run();
    assert_eq!(done.stdout, "[REDACTED]\n", "the whole connection string is one secret");
    let first = a.result();
    // Windmill's zombie re-run, picked up by the other node's worker.
    let again = b
        .job("zombie-1", "ns")
        .expect_code(3)
        .expect_nowhere("the DSN's password", &db.password())
        .run();
    assert!(
        again
            .stderr
            .contains("jobenv: job zombie-1 already ended (failed, exit code 3, attempt 1, at "),
        "{again:?}"
    );
    assert_eq!(
        std::fs::read_to_string(shared.path().join("runs")).unwrap(),
        "ran\n",
        "the program ran again"
    );
    let replayed = b.result();
    for field in [
        "status",
        "exit_code",
        "verb",
        "attribute",
        "namespace",
        "job_id",
        "attempt",
    ] {
        assert_eq!(replayed[field], first[field], "{field}: {replayed} vs {first}");
    }
    assert_eq!(replayed["replayed"], true);
    // A job id names one request on every node.
    b.job("zombie-1", "other")
        .expect_code(2)
        .expect_stderr_contains("job zombie-1 was already run for apply of web in namespace ns")
        .run();
}

#[test]
fn in_cluster_mode_the_namespaces_lease_is_a_stage_of_the_jobs_trace() {
    let db = postgres::cluster().jobenv_database();
    let a = Node::new("a", Some(&db.dsn()), "echo ran");
    let receiver = fediversity_testkit::otlp_receiver::Receiver::start();
    a.job("traced-1", "ns")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .expect_success()
        .run();
    let spans = receiver.recorded().spans;
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name}: {spans:#?}"))
    };
    let (job, namespace, lease) = (named("deploy web apply"), named("namespace"), named("lease"));
    // Claimed while the namespace is held, before the program: inside the namespace's stage.
    assert_eq!(lease.parent_span_id, namespace.span_id);
    assert_eq!(namespace.parent_span_id, job.span_id);
    assert_eq!((lease.status.0, namespace.status.0, job.status.0), (0, 0, 0));
    assert!(lease.end_ns <= named("program").start_ns, "{spans:#?}");
    assert_eq!(job.attributes["jobenv.job.attempt"], "1");
    assert_eq!(
        spans.len(),
        6,
        "admission, namespace, lease, program, evaluation, the job: {spans:#?}"
    );
}

#[test]
fn an_interrupted_job_re_run_on_the_other_node_runs_as_attempt_2_once_its_lease_expired() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().display();
    let body = format!(
        "echo \"$NODE $(date +%s.%N)\" >> {dir}/runs; echo $$ > {dir}/program-$NODE.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"
    );
    let (a, b) = (
        Node::new("a", Some(&db.dsn()), &body),
        Node::new("b", Some(&db.dsn()), &body),
    );
    let mut running = a.job("lost-1", "ns").spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    // Node a's jobenv dies without a word (its program with it): its leases are renewed no more.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(running.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    running.wait().unwrap();
    let expires: f64 = db
        .client()
        .query_one(
            "SELECT extract(epoch FROM expires_at)::float8 FROM fediversity_jobenv.namespaces WHERE namespace = 'ns'",
            &[],
        )
        .unwrap()
        .get(0);
    std::fs::write(shared.path().join("go"), "").unwrap();
    let done = b
        .job("lost-1", "ns")
        .args(["--lock-timeout", "20"])
        .expect_success()
        .run();
    assert!(
        done.stderr
            .contains("jobenv: warning: job lost-1: attempt 1 was interrupted; running it again as attempt 2"),
        "{done:?}"
    );
    let lines = std::fs::read_to_string(shared.path().join("runs")).unwrap();
    let b_started: f64 = lines
        .lines()
        .find_map(|l| l.strip_prefix("b "))
        .expect("node b ran it")
        .parse()
        .unwrap();
    assert!(
        b_started >= expires,
        "node b started at {b_started}, before the lease of node a expired at {expires}"
    );
    let result = b.result();
    assert_eq!(
        (result["status"].as_str(), result["attempt"].as_u64()),
        (Some("succeeded"), Some(2)),
        "{result}"
    );
    let entry = b.f.journal_entry(jobenv_bin!(), "lost-1");
    assert_eq!(entry["earlier"][0]["attempt"], 1);
    assert_eq!(entry["earlier"][0]["reason"], "interrupted");
    assert_eq!(entry["earlier"][0]["interrupted_by"], "lease_lost");
}

#[test]
fn a_node_cut_off_from_the_database_stops_its_program_before_its_lease_expires_and_the_other_waits_for_that() {
    let db = postgres::cluster().jobenv_database();
    let proxy = Proxy::start(postgres::cluster().port);
    let shared = tempfile::tempdir().unwrap();
    let log = shared.path().join("log");
    let dir = shared.path().display();
    // The program logs its end also when it is stopped (SIGTERM); the `date` of its trap is in
    // the program tree too, and may get a SIGTERM of its own: tried until it answers.
    let body = format!(
        "echo \"start $NODE $(date +%s.%N)\" >> {log}; trap 't=; while [ -z \"$t\" ]; do t=$(date +%s.%N); done; echo \"end $NODE $t\" >> {log}; exit 143' TERM; \
         echo $$ > {dir}/program-$NODE.pid; while [ ! -e {dir}/go-$NODE ]; do sleep 0.02; done; echo \"end $NODE $(date +%s.%N)\" >> {log}",
        log = log.display()
    );
    let a = Node::new("a", Some(&db.dsn_on(proxy.port)), &body);
    let b = Node::new("b", Some(&db.dsn()), &body);
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    let mut held = a.job("cut-a", "ns").spawn();
    let mut held_err = StreamWatch::new(held.stderr.take().unwrap());
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    // Positive control: while the network holds, node a's deploy goes on past several leases'
    // renewals and the other node's job waits for it.
    let waiting = b.job("cut-b", "ns").args(["--lock-timeout", "30"]).spawn();
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        held.try_wait().unwrap().is_none(),
        "node a stopped while it could renew: {}",
        held_err.text()
    );
    assert_eq!(runs(&log).len(), 1, "node b started beside node a");

    let cut_at = now();
    proxy.cut();
    let status = wait_exit(&mut held, RENEW_DEADLINE + Duration::from_secs(5)).expect("node a stops on its own");
    let stderr = String::from_utf8_lossy(&held_err.finish()).into_owned();
    assert_eq!(status.code(), Some(75), "{stderr}");
    // Its program ended before its lease could expire: its last renewal came at most one
    // renewal period (0.5 s) before the cut.
    let a_ended = runs(&log)[0].2.expect("node a's program logged its end");
    assert!(
        a_ended < cut_at + LEASE.as_secs_f64() - 0.5,
        "node a's program ended {:.2}s after the cut, when its lease may have expired",
        a_ended - cut_at
    );
    assert!(stderr.contains("jobenv: error: this job's leases on the cluster journal were not renewed within 2s: stopping the program tree before they can expire (grace 1s)"), "{stderr}");
    let result = a.result();
    assert_eq!(
        (
            result["status"].as_str(),
            result["reason"].as_str(),
            result["interrupted_by"].as_str()
        ),
        (Some("failed"), Some("interrupted"), Some("lease_lost")),
        "{result}"
    );
    assert!(
        result["errors"][0].as_str().unwrap().ends_with("a retry is safe"),
        "{result}"
    );

    let done = finish(waiting);
    assert!(done.success(), "{done:?}");
    let all = runs(&log);
    assert_eq!(
        all.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "{all:?}"
    );
    assert!(!overlaps(&log), "node b started before node a's program ended: {all:?}");
    // The other node took the namespace only once node a's lease had expired by the database's
    // clock: a's last renewal was at most one renewal period (0.5 s) before the cut.
    let b_started = all[1].1;
    assert!(
        b_started >= cut_at + LEASE.as_secs_f64() - 0.6,
        "node b started {:.2}s after the cut, before node a's lease expired: {all:?}",
        b_started - cut_at
    );
}

#[test]
fn a_terminated_connection_is_made_again_and_the_deploy_goes_on() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().display();
    let a = Node::new(
        "a",
        Some(&db.dsn()),
        &format!("echo $$ > {dir}/program.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"),
    );
    let running = a.job("terminated-1", "ns").spawn();
    read_pids(&shared.path().join("program.pid"), 1, Duration::from_secs(20));
    assert!(
        wait_until(Duration::from_secs(5), || db.terminate_jobenv_backends() > 0),
        "jobenv holds no connection"
    );
    // Longer than the renew deadline: the renewals after the termination went through, on a
    // connection made anew.
    std::thread::sleep(RENEW_DEADLINE + Duration::from_secs(1));
    assert!(db.terminate_jobenv_backends() > 0, "jobenv did not connect again");
    std::fs::write(shared.path().join("go"), "").unwrap();
    let done = finish(running);
    assert!(done.success(), "{done:?}");
    assert_eq!(a.result()["status"], "succeeded");
}

#[test]
fn a_database_that_stops_mid_job_stops_the_deploy_loses_no_result_and_a_node_cannot_start_without_it() {
    let pg = postgres::Cluster::start_private();
    let db = pg.jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().display();
    let body = format!(
        "echo \"$NODE\" >> {dir}/runs; echo $$ > {dir}/program-$NODE.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"
    );
    let (a, b) = (
        Node::new("a", Some(&db.dsn()), &body),
        Node::new("b", Some(&db.dsn()), &body),
    );
    let mut running = a.job("stopped-db", "ns").spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    pg.pause();
    let status = wait_exit(&mut running, RENEW_DEADLINE + Duration::from_secs(5)).expect("node a stops its deploy");
    let stderr = finish(running).stderr;
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(
        stderr.contains("jobenv: warning: cannot renew the leases on the cluster journal ("),
        "{stderr}"
    );
    assert!(
        stderr.contains("the program tree was stopped; the job did not complete and a retry is safe"),
        "{stderr}"
    );
    assert_eq!(a.result()["interrupted_by"], "lease_lost");
    assert_eq!(
        a.f.journal_entry(jobenv_bin!(), "stopped-db")["interrupted_by"],
        "lease_lost",
        "the node's own record says why"
    );

    // Without its database a node starts nothing: it is not ready.
    b.job("stopped-db", "ns")
        .expect_code(75)
        .expect_stderr_contains("jobenv: error: node not ready: the cluster journal cannot be reached: ")
        .expect_nowhere("the DSN's password", &db.password())
        .run();
    assert_eq!(b.result()["status"], "rejected");
    assert_eq!(
        std::fs::read_to_string(shared.path().join("runs")).unwrap(),
        "a\n",
        "node b ran the program without its database"
    );

    // Back: the interrupted job is no result; the other node runs it again as attempt 2.
    pg.resume();
    std::fs::write(shared.path().join("go"), "").unwrap();
    let done = b
        .job("stopped-db", "ns")
        .args(["--lock-timeout", "20"])
        .expect_success()
        .run();
    assert!(
        done.stderr
            .contains("attempt 1 was interrupted; running it again as attempt 2"),
        "{done:?}"
    );
    assert_eq!(std::fs::read_to_string(shared.path().join("runs")).unwrap(), "a\nb\n");
}

#[test]
fn a_node_whose_database_cannot_be_reached_before_the_program_starts_runs_nothing() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let marker = shared.path().join("ran");
    let body = format!("touch {}", marker.display());
    // A port nobody listens on.
    let closed = db.dsn_on(fediversity_testkit::servers::free_port());
    let node = Node::new("a", Some(&closed), &body);
    node.job("unreachable-1", "ns")
        .expect_code(75)
        .expect_stderr_contains("jobenv: error: node not ready: the cluster journal cannot be reached: ")
        .expect_nowhere("the DSN's password", &db.password())
        .run();
    assert!(!marker.exists(), "the program ran without the cluster journal");
    let result = node.result();
    assert_eq!(
        (result["status"].as_str(), result["exit_code"].as_i64()),
        (Some("rejected"), Some(75)),
        "{result}"
    );
    assert!(!result.to_string().contains(&db.password()));
    // A DSN file the node has not rendered yet: not ready either.
    let missing = Node::new("a", Some(&db.dsn()), &body);
    std::fs::remove_file(missing.dsn_file.as_ref().unwrap()).unwrap();
    missing
        .job("unreachable-2", "ns")
        .expect_code(75)
        .expect_stderr_contains("node not ready: the cluster DSN file")
        .run();
    assert!(!marker.exists());
    // Positive control: with the database reachable, the same job runs.
    std::fs::write(missing.dsn_file.as_ref().unwrap(), db.dsn()).unwrap();
    missing.job("unreachable-3", "ns").expect_success().run();
    assert!(marker.exists(), "the program did not run with its database");
}

#[test]
fn what_a_sigkilled_jobenv_left_outside_its_process_group_does_not_outlive_it() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().display();
    // A helper in a session of its own: Windmill's group SIGKILL would miss it.
    let body = format!(
        "setsid sleep 60 & echo $! > {dir}/left-$NODE.pid; echo $$ > {dir}/program-$NODE.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done"
    );
    let left_after_sigkill = |node: &Node| {
        let mut running = node.job(&format!("sigkill-{}", node.name), "ns").spawn();
        let left = read_pids(
            &shared.path().join(format!("left-{}.pid", node.name)),
            1,
            Duration::from_secs(20),
        )[0];
        read_pids(
            &shared.path().join(format!("program-{}.pid", node.name)),
            1,
            Duration::from_secs(20),
        );
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(running.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        running.wait().unwrap();
        left
    };
    // Positive control: on one node the helper outlives its jobenv (the next run of the
    // namespace or `recover` stops it); the check below would see it.
    let alone = Node::new("alone", None, &body);
    let left = left_after_sigkill(&alone);
    std::thread::sleep(Duration::from_secs(1));
    assert!(is_alive(left), "the control's helper is gone");
    kill_all(&[left]);
    // In cluster mode no lease covers it once its jobenv is gone: it dies with its jobenv.
    let node = Node::new("a", Some(&db.dsn()), &body);
    let left = left_after_sigkill(&node);
    assert!(
        wait_until(Duration::from_secs(1), || !is_alive(left)),
        "the helper outlived its SIGKILLed jobenv"
    );
}

/// Nodes a and b on `db`, whose program records its node in `shared/runs` and its pid, then
/// waits for `shared/go-<node>`; node b's may go at once.
fn waiting_pair(db: &postgres::JobenvDb<'_>, shared: &Path) -> (Node, Node) {
    let dir = shared.display();
    let body = format!(
        "echo \"$NODE\" >> {dir}/runs; echo $$ > {dir}/program-$NODE.pid; while [ ! -e {dir}/go-$NODE ]; do sleep 0.02; done"
    );
    std::fs::write(shared.join("go-b"), "").unwrap();
    (
        Node::new("a", Some(&db.dsn()), &body),
        Node::new("b", Some(&db.dsn()), &body),
    )
}

/// Node b's re-run of `job_id`, taken over from node a: it ran the program as attempt 2, which the
/// shared row records as succeeded (returned). Each node's program ran once.
fn ran_again_on_b(done: Done, db: &postgres::JobenvDb<'_>, shared: &Path, job_id: &str) -> Value {
    assert!(
        done.success()
            && done
                .stderr
                .contains("attempt 1 was interrupted; running it again as attempt 2"),
        "{done:?}"
    );
    assert_eq!(std::fs::read_to_string(shared.join("runs")).unwrap(), "a\nb\n");
    let row = shared_entry(db, job_id);
    assert_eq!(
        (row["attempt"].as_u64(), row["status"].as_str()),
        (Some(2), Some("succeeded")),
        "{row}"
    );
    row
}

/// The entry the shared journal's row of `job_id` holds.
fn shared_entry(db: &postgres::JobenvDb<'_>, job_id: &str) -> Value {
    let row: String = db
        .client()
        .query_one(
            "SELECT entry::text FROM fediversity_jobenv.jobs WHERE job_id = $1",
            &[&job_id],
        )
        .unwrap()
        .get(0);
    serde_json::from_str(&row).unwrap()
}

#[test]
fn a_holder_whose_lease_was_taken_over_stops_at_once_and_its_late_write_changes_nothing() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let (a, b) = waiting_pair(&db, shared.path());
    let mut held = a.job("taken-1", "ns").spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    // The job's lease runs out under node a (as if node a had been frozen past it), and Windmill's
    // re-run of the job on node b takes it over: it waits for the namespace, which node a holds.
    db.client()
        .execute(
            "UPDATE fediversity_jobenv.jobs SET expires_at = now() - interval '1 second' WHERE job_id = 'taken-1'",
            &[],
        )
        .unwrap();
    let rerun = b.job("taken-1", "ns").args(["--lock-timeout", "20"]).spawn();
    let status = wait_exit(&mut held, Duration::from_secs(3)).expect("node a stops at its next renewal");
    let stderr = finish(held).stderr;
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert!(
        stderr.contains(
            "jobenv: error: the lease of job taken-1 on the cluster journal expired or was taken over: this run stops"
        ),
        "{stderr}"
    );
    // Node a's end came after node b took the job over: fenced by its epoch, it changed nothing.
    let row = ran_again_on_b(finish(rerun), &db, shared.path(), "taken-1");
    assert_eq!(row["earlier"][0]["interrupted_by"], "lease_lost", "{row}");
    // Its own journal keeps its own record.
    assert_eq!(
        a.f.journal_entry(jobenv_bin!(), "taken-1")["interrupted_by"],
        "lease_lost"
    );
}

/// The case the test above cannot show: node a's program ends right after the takeover, before
/// a renewal of a's tells it the lease is gone. a still holds the job's epoch in memory and writes
/// its end; the database's fence (the row's epoch) refuses it, so node b's attempt runs as if a's
/// write never came.
#[test]
fn an_end_written_after_a_takeover_the_holder_did_not_see_yet_is_fenced_off_by_its_epoch() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let (a, b) = waiting_pair(&db, shared.path());
    // Node a renews rarely: its next renewal comes long after its end.
    let rare = Timing {
        lease: Duration::from_secs(30),
        renew_every: Duration::from_secs(10),
        renew_deadline: Duration::from_secs(15),
        grace: Duration::from_secs(1),
    };
    let held = a.job_timed("fenced-1", "ns", rare).spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    let epoch = || -> i64 {
        db.client()
            .query_one(
                "SELECT epoch FROM fediversity_jobenv.jobs WHERE job_id = 'fenced-1'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let a_epoch = epoch();
    db.client()
        .execute(
            "UPDATE fediversity_jobenv.jobs SET expires_at = now() - interval '1 second' WHERE job_id = 'fenced-1'",
            &[],
        )
        .unwrap();
    let rerun = b.job("fenced-1", "ns").args(["--lock-timeout", "20"]).spawn();
    assert!(
        wait_until(Duration::from_secs(10), || epoch() != a_epoch),
        "node b took the job over"
    );
    // Now node a's program ends: a has not renewed since, and writes its end under its old epoch.
    std::fs::write(shared.path().join("go-a"), "").unwrap();
    let a_done = finish(held);
    assert!(
        a_done
            .stderr
            .contains("another run took job fenced-1 over on the cluster journal"),
        "{a_done:?}"
    );
    // Without the fence, node a's end would have ended the row node b holds: b's running entry
    // would then be refused.
    ran_again_on_b(finish(rerun), &db, shared.path(), "fenced-1");
}

#[test]
fn prune_deletes_the_shared_rows_that_ended_before_the_retention_and_nothing_else() {
    let db = postgres::cluster().jobenv_database();
    let node = Node::new("a", Some(&db.dsn()), "exit 0");
    for job in ["old", "recent"] {
        node.job(job, "ns").expect_success().run();
    }
    db.client()
        .execute(
            "UPDATE fediversity_jobenv.jobs SET finished_at = now() - interval '40 days' WHERE job_id = 'old'",
            &[],
        )
        .unwrap();
    // A job id whose run holds it has not ended, however old its row.
    db.client()
        .execute("INSERT INTO fediversity_jobenv.jobs (job_id, format, holder, holder_node, epoch, expires_at) VALUES ('held', 1, 'x', 'y', 1, now() + interval '1 hour')", &[])
        .unwrap();
    let done = node
        .f
        .jobenv(jobenv_bin!())
        .args(["prune"])
        .env("JOBENV_CLUSTER_DSN_FILE", node.dsn_file.as_ref().unwrap())
        .expect_success()
        .run();
    assert_eq!(
        serde_json::from_str::<Value>(&done.stdout).unwrap()["cluster_pruned"],
        1,
        "{done:?}"
    );
    let left: Vec<String> = db
        .client()
        .query("SELECT job_id FROM fediversity_jobenv.jobs ORDER BY job_id", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(left, ["held", "recent"]);
    // What went is gone: on another node (without an entry of its own) the old job id is a new
    // job, while the recent one is still replayed.
    let other = Node::new("b", Some(&db.dsn()), "exit 0");
    other.job("recent", "ns").expect_success().run();
    assert_eq!(other.result()["replayed"], true);
    other.job("old", "ns").expect_success().run();
    assert!(other.result().get("replayed").is_none(), "{}", other.result());
}

/// With `sslmode=require` jobenv speaks TLS to the database and verifies its certificate (chain
/// and host name) against the node's CA file. The role here is let in over TLS only (the
/// server's rule): a job that runs used TLS, and the positive control (the same DSN without
/// `sslmode=require`) shows the rule holds. A certificate from a CA the node does not trust, or
/// for another host than the one the DSN names, is refused, and nothing runs.
#[test]
fn a_node_speaks_verified_tls_to_the_cluster_journal_when_its_dsn_asks_for_it() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let marker = shared.path().join("runs");
    let body = format!("echo ran >> {}", marker.display());
    let ran = || std::fs::read_to_string(&marker).unwrap_or_default().lines().count();
    let node = |dsn: &str| Node::new("a", Some(dsn), &body);
    let with_ca = |run: JobRun, ca: &Path| run.env("JOBENV_CLUSTER_CA_FILE", ca);
    let trusted = db.ca_file();
    with_ca(node(&db.tls_dsn("127.0.0.1")).job("tls-1", "ns"), &trusted)
        .expect_success()
        .expect_nowhere("the DSN's password", &db.password())
        .run();
    assert_eq!(ran(), 1);
    // The shared row is there: the decision was made on the database, over TLS.
    let rows: i64 = db
        .client()
        .query_one(
            "SELECT count(*) FROM fediversity_jobenv.jobs WHERE job_id = 'tls-1' AND finished_at IS NOT NULL",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    // Positive control: the role gets no plain connection.
    let plain = db.tls_dsn("127.0.0.1").replace(" sslmode=require", "");
    node(&plain)
        .job("tls-2", "ns")
        .expect_code(2)
        .expect_stderr_contains(
            "jobenv: error: the cluster journal cannot be used: FATAL: pg_hba.conf rejects connection",
        )
        .run();
    // A CA the node does not trust: refused, a person must act (exit 2), nothing ran.
    let other = shared.path().join("other-ca.pem");
    std::fs::write(&other, fediversity_testkit::tls::Ca::new("another CA").pem()).unwrap();
    let done = with_ca(node(&db.tls_dsn("127.0.0.1")).job("tls-3", "ns"), &other)
        .expect_code(2)
        .expect_nowhere("the DSN's password", &db.password())
        .run();
    assert!(
        done.stderr
            .contains("jobenv: error: the cluster journal cannot be used: ")
            && done.stderr.contains("UnknownIssuer"),
        "{done:?}"
    );
    // The right CA, but the DSN names a host the certificate is not for.
    let done = with_ca(node(&db.tls_dsn("localhost")).job("tls-4", "ns"), &trusted)
        .expect_code(2)
        .run();
    assert!(
        done.stderr
            .contains("invalid peer certificate: certificate not valid for name \"localhost\""),
        "{done:?}"
    );
    // Without a CA file, the system's trust store, which does not hold the test's CA.
    node(&db.tls_dsn("127.0.0.1"))
        .job("tls-5", "ns")
        .expect_code(2)
        .expect_stderr_contains("UnknownIssuer")
        .run();
    assert_eq!(ran(), 1, "a program ran without a verified database");
}

/// Two nodes for the ends a database does not take: `a` reaches the database through a proxy
/// that can be cut, `b` directly; their program waits for `go` in the shared directory, then
/// logs its node's name to `runs` there.
struct CutOff {
    db: postgres::JobenvDb<'static>,
    proxy: Proxy,
    shared: tempfile::TempDir,
    a: Node,
    b: Node,
}

impl CutOff {
    fn new() -> CutOff {
        let db = postgres::cluster().jobenv_database();
        let proxy = Proxy::start(postgres::cluster().port);
        let shared = tempfile::tempdir().unwrap();
        let dir = shared.path().display();
        let body = format!(
            "echo $$ > {dir}/program-$NODE.pid; while [ ! -e {dir}/go ]; do sleep 0.02; done; echo \"$NODE\" >> {dir}/runs"
        );
        let (a, b) = (
            Node::new("a", Some(&db.dsn_on(proxy.port)), &body),
            Node::new("b", Some(&db.dsn()), &body),
        );
        CutOff {
            db,
            proxy,
            shared,
            a,
            b,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.shared.path().join(name)
    }

    fn runs(&self) -> String {
        std::fs::read_to_string(self.path("runs")).unwrap_or_default()
    }

    /// Node a's kept end of `job`.
    fn kept(&self, job: &str) -> PathBuf {
        self.a.f.state_dir().join(format!("unshared/{job}.json"))
    }

    /// The status the shared row of `job` ended with, if it ended.
    fn ended(&self, job: &str) -> Option<String> {
        let row = self
            .db
            .client()
            .query_one(
                "SELECT finished_at IS NOT NULL, entry->>'status' FROM fediversity_jobenv.jobs WHERE job_id = $1",
                &[&job],
            )
            .unwrap();
        row.get::<_, bool>(0).then(|| row.get(1))
    }

    /// `recover` on node a, in cluster mode.
    fn recover(&self, args: &[&str]) -> JobRun {
        self.a
            .f
            .jobenv(jobenv_bin!())
            .args(std::iter::once("recover").chain(args.iter().copied()))
            .env("JOBENV_CLUSTER_DSN_FILE", self.a.dsn_file.as_ref().unwrap())
    }

    /// Node a runs `job` of `namespace`, and the database goes away right as its program ends:
    /// the end is kept.
    fn cut_at_the_end(&self, job: &str, namespace: &str) {
        let _ = std::fs::remove_file(self.path("go"));
        let _ = std::fs::remove_file(self.path("program-a.pid"));
        let running = self.a.job(job, namespace).spawn();
        read_pids(&self.path("program-a.pid"), 1, Duration::from_secs(20));
        self.proxy.cut();
        std::fs::write(self.path("go"), "").unwrap();
        let done = finish(running);
        assert_eq!(done.code, Some(125), "{done:?}");
        assert!(
            done.stderr.contains("the cluster journal did not take it ("),
            "{done:?}"
        );
        assert!(
            done.stderr.contains("this node keeps it and hands it on when it can"),
            "{done:?}"
        );
        assert!(self.kept(job).exists(), "the end was not kept");
        assert_eq!(self.ended(job), None, "positive control: the database did not take it");
        assert_eq!(
            self.a.f.journal_entry(jobenv_bin!(), job)["status"],
            "succeeded",
            "the node's own journal has the result"
        );
        self.proxy.heal();
    }
}

/// An end the database does not take (cut off right as the program ended, for as long as the
/// lease lasted) is jobenv's failure (125), but not lost: the node keeps it and hands it on once
/// the database answers, after its next job; a re-run on the other node is then replayed. If
/// the other node ran the job again first (once the lease expired), the kept end stays the
/// node's own, and `recover` says so.
#[test]
fn an_end_the_database_did_not_take_is_kept_and_handed_on_when_it_answers_again() {
    let c = CutOff::new();
    c.cut_at_the_end("kept-1", "ns");
    // The node's next job (another namespace: the first one's lease is still live) hands it on.
    c.a.job("next-1", "other").expect_success().run();
    assert_eq!(
        c.ended("kept-1").as_deref(),
        Some("succeeded"),
        "the kept end was not handed on"
    );
    assert!(!c.kept("kept-1").exists());
    // Windmill's re-run of it on the other node is replayed, not run again.
    c.b.job("kept-1", "ns")
        .expect_success()
        .expect_stderr_contains("jobenv: job kept-1 already ended (succeeded, exit code 0, attempt 1, at ")
        .run();
    assert_eq!(c.runs(), "a\na\n", "kept-1 ran again: {}", c.runs());

    // Cut off again; this time the other node runs the job again before the end is handed on
    // (once the lease expired): the cluster's record is its attempt, and recover says so.
    c.cut_at_the_end("kept-2", "ns");
    std::thread::sleep(LEASE);
    c.b.job("kept-2", "ns")
        .args(["--lock-timeout", "10"])
        .expect_success()
        .expect_stderr_contains("running it again as attempt 2")
        .run();
    let recovered = c.recover(&[]).expect_success().run();
    assert!(recovered.stderr.contains("job kept-2: the cluster journal records a later attempt or an end of it (another node ran it again once this node's lease expired): the end of attempt 1 stays in this node's journal only"), "{recovered:?}");
    assert!(!c.kept("kept-2").exists());
    let attempt: String =
        c.db.client()
            .query_one(
                "SELECT entry->>'attempt' FROM fediversity_jobenv.jobs WHERE job_id = 'kept-2'",
                &[],
            )
            .unwrap()
            .get(0);
    assert_eq!(attempt, "2", "the later attempt's end was overwritten");
}

/// Cluster mode's promise rests on the program tree's cgroup (its guard kills what a SIGKILLed
/// jobenv left before the lease can expire): without one, no run. Asking for the /proc walk is
/// a configuration error; a node where no cgroup can be made (here: jobenv as an unprivileged
/// user in a cgroup of root's, no delegation) refuses the job before its program starts.
#[test]
fn cluster_mode_runs_a_program_only_in_a_cgroup_of_its_own() {
    use fediversity_testkit::nix_fixture::WORKER_UID;
    use std::os::unix::process::CommandExt;
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    std::fs::set_permissions(shared.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let body = format!("echo ran >> {}/runs", shared.path().display());
    let ran = || {
        std::fs::read_to_string(shared.path().join("runs"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    let node = Node::new("a", Some(&db.dsn()), &body);
    node.job("proc-1", "ns")
        .env("JOBENV_CONTAINMENT", "proc")
        .expect_code(2)
        .expect_stderr_contains(
            "jobenv: error: --containment proc (JOBENV_CONTAINMENT=proc) cannot be used in cluster mode",
        )
        .run();
    assert_eq!(node.result()["status"], "rejected");
    // As the worker's user, outside a delegated cgroup.
    let as_worker = |node: &Node, job: &str| {
        node.f.hand_to(WORKER_UID);
        let stand_in = node.f.nix_shell_stand_in();
        let mut run = node.job(job, "ns").args(["--nix-shell", stand_in.to_str().unwrap()]);
        run.command().uid(WORKER_UID).gid(WORKER_UID);
        run
    };
    let done = as_worker(&node, "no-cgroup-1").expect_code(2).run();
    assert!(
        done.stderr.contains(
            "jobenv: error: the program tree must be a cgroup of its own (cluster mode), and none can be made: "
        ),
        "{done:?}"
    );
    assert_eq!(ran(), 0, "a program ran in cluster mode without a cgroup");
    // Positive control: on its own, the node falls back to the /proc walk and runs the job.
    as_worker(&Node::new("b", None, &body), "no-cgroup-2")
        .expect_success()
        .run();
    assert_eq!(ran(), 1);
}

/// A kept end is the cluster's record until a later attempt or an end is: another node that
/// claimed the job id but never got to run it (its namespace was busy) does not make it stale,
/// and it is handed on, so the job is replayed, not run again. A directory planted among the
/// kept ends costs only itself, and `recover` never prunes an entry whose end is still kept.
#[test]
fn a_kept_end_outlives_a_claim_that_never_ran_a_planted_directory_and_pruning() {
    let c = CutOff::new();
    let unblock = c.path("unblock");
    let blocker = Node::new(
        "c",
        Some(&c.db.dsn()),
        &format!("while [ ! -e {} ]; do sleep 0.02; done", unblock.display()),
    );
    c.cut_at_the_end("k1", "ns");
    std::thread::sleep(LEASE);
    // Node c holds namespace ns; node b's re-run of k1 claims the job id, then finds ns busy.
    let busy = blocker.job("blocker", "ns").spawn();
    std::thread::sleep(Duration::from_secs(1));
    c.b.job("k1", "ns")
        .expect_code(2)
        .expect_stderr_contains("namespace ns is locked by another deploy")
        .run();
    // A directory among the kept ends, before k1's in the listing and after it.
    for planted in ["aaaa.json", "zzzz.json"] {
        std::fs::create_dir(c.a.f.state_dir().join("unshared").join(planted)).unwrap();
    }
    let recovered = c.recover(&[]).expect_success().run();
    assert!(
        recovered
            .stderr
            .contains("job k1: the end of attempt 1 is on the cluster journal now"),
        "{recovered:?}"
    );
    assert!(c.ended("k1").is_some() && !c.kept("k1").exists(), "{recovered:?}");
    std::fs::write(&unblock, "").unwrap();
    assert!(finish(busy).success());
    c.b.job("k1", "ns")
        .expect_success()
        .expect_stderr_contains("jobenv: job k1 already ended (succeeded, exit code 0, attempt 1, at ")
        .run();
    assert_eq!(c.runs(), "a\n", "k1 ran again");

    // An entry whose end is kept is not pruned, however old: the database away, then recover
    // with a retention of a day, its entry (and file) three days old.
    c.cut_at_the_end("k2", "ns2");
    let entry = c.a.f.state_dir().join("jobs/k2.json");
    let mut text: Value = serde_json::from_str(&std::fs::read_to_string(&entry).unwrap()).unwrap();
    let old = SystemTime::now() - Duration::from_secs(3 * 86_400);
    text["finished_at"] = json!(humantime::format_rfc3339_millis(old).to_string());
    std::fs::write(&entry, serde_json::to_vec(&text).unwrap()).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&entry)
        .unwrap()
        .set_modified(old)
        .unwrap();
    c.proxy.cut();
    c.recover(&["--retain-days", "1"]).expect_success().run();
    assert!(
        entry.exists() && c.kept("k2").exists(),
        "an entry whose end is kept was pruned"
    );
    c.proxy.heal();
    // Positive control: handed on, the end is no longer kept, and the entry goes by its age.
    c.recover(&["--retain-days", "1"]).expect_success().run();
    assert!(c.ended("k2").is_some() && !c.kept("k2").exists() && !entry.exists());
}
