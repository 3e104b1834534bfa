//! The review's load: many jobs at once on few namespaces across three nodes, submitted again
//! and again as Windmill does when their worker dies, with random SIGKILLs (of jobenv's process
//! group, as Windmill's cancel, or of jobenv alone) and the database ending every connection
//! now and then. The programs check themselves: each takes its namespace's lock and its job's
//! lock in a directory every node shares without waiting, and says so when another program
//! holds either (two deploys of a namespace at once, or one job run twice at once). After all,
//! every job is delivered once more and replayed, no program of a job started once the cluster
//! journal had recorded its end, every job ended once, and each node's journal agrees with the
//! shared one.

use std::collections::{BTreeMap, VecDeque};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::postgres;
use fediversity_testkit::process::wait_exit;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::json;

use super::{Node, finish, random_millis};

const JOBS: usize = 36;
const NAMESPACES: usize = 3;
const SUBMITTERS: usize = 6;
/// How many times one job may be submitted before the test gives up on it.
const MOST_SUBMISSIONS: usize = 12;

/// The program: both locks, then its start, a short while, its end (`$JOB_TAG` is the job id).
fn program(dir: &Path) -> String {
    let dir = dir.display();
    format!(
        "exec 9>>{dir}/ns-$DEPLOYMENT_NAMESPACE.lock; flock -n 9 || echo \"namespace $DEPLOYMENT_NAMESPACE overlap: $JOB_TAG on $NODE\" >> {dir}/violations; \
         exec 8>>{dir}/job-$JOB_TAG.lock; flock -n 8 || echo \"job $JOB_TAG twice at once, on $NODE\" >> {dir}/violations; \
         echo \"start $JOB_TAG $NODE $(date +%s.%N)\" >> {dir}/log; sleep 0.$(od -An -N1 -tu1 /dev/urandom | tr -d ' ' | cut -c1); \
         echo \"end $JOB_TAG $NODE $(date +%s.%N)\" >> {dir}/log"
    )
}

/// What became of one submission.
#[derive(Debug)]
enum Submitted {
    Succeeded,
    Replayed,
    /// Killed by the test.
    Killed,
    /// Try again: busy, not ready, lease lost.
    Again,
}

#[test]
fn many_jobs_on_few_namespaces_across_three_nodes_with_random_kills_never_overlap_or_run_twice() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let body = program(shared.path());
    let nodes: Vec<Node> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            let mut node = Node::new(name, Some(&db.dsn()), &body);
            node.f.declare("JOB_TAG", None);
            node
        })
        .collect();
    let queue: Mutex<VecDeque<(usize, usize)>> = Mutex::new((0..JOBS).map(|job| (job, 0)).collect());
    let outcomes: Mutex<BTreeMap<usize, Vec<(String, Submitted)>>> = Mutex::new(BTreeMap::new());
    let unexpected: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let started = Instant::now();
    let submissions = std::sync::atomic::AtomicUsize::new(0);
    let submit = |job: usize, node: &Node| -> Submitted {
        let mut run = node
            .job(&format!("load-{job:02}"), &format!("ns{}", job % NAMESPACES))
            .args(["--lock-timeout", "20"])
            .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": format!("ns{}", job % NAMESPACES), "JOB_TAG": format!("load-{job:02}")}));
        // As under a Windmill worker: jobenv leads its process group.
        run.command().process_group(0);
        let mut running = run.spawn();
        let pid = Pid::from_raw(running.id() as i32);
        // Every third submission is killed at a random moment of its first 1.5 s: its process
        // group (Windmill's cancel), or jobenv alone. (A count, not a coin: enough kills to mean
        // something in every run.)
        if submissions.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3 == 0 {
            let at = Duration::from_millis(random_millis(1500));
            if wait_exit(&mut running, at).is_none() {
                if random_millis(2) == 0 {
                    let _ = killpg(pid, Signal::SIGKILL);
                } else {
                    let _ = kill(pid, Signal::SIGKILL);
                }
                let _ = finish(running);
                // Its worker starts again: `recover` first, as the module's worker does.
                node.f
                    .jobenv(jobenv_bin!())
                    .args(["recover"])
                    .env("JOBENV_CLUSTER_DSN_FILE", node.dsn_file.as_ref().unwrap())
                    .expect_success()
                    .run();
                return Submitted::Killed;
            }
        }
        let done = finish(running);
        match done.code {
            Some(0) if done.stderr.contains("already ended") => Submitted::Replayed,
            Some(0) => Submitted::Succeeded,
            Some(75) => Submitted::Again,
            Some(2)
                if done.stderr.contains("is already running")
                    || done.stderr.contains("is locked by another deploy") =>
            {
                Submitted::Again
            }
            _ => {
                unexpected.lock().unwrap().push(format!("load-{job:02}: {done:?}"));
                Submitted::Again
            }
        }
    };
    std::thread::scope(|scope| {
        // The database ends every connection of jobenv's role every 3 s.
        let chaos = scope.spawn(|| {
            while started.elapsed() < Duration::from_secs(300) && !queue.lock().unwrap().is_empty() {
                std::thread::sleep(Duration::from_secs(3));
                db.terminate_jobenv_backends();
            }
        });
        let submitters: Vec<_> = (0..SUBMITTERS)
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let Some((job, tries)) = queue.lock().unwrap().pop_front() else {
                            return;
                        };
                        let node = &nodes[random_millis(nodes.len() as u64) as usize];
                        let submitted = submit(job, node);
                        let again = matches!(submitted, Submitted::Killed | Submitted::Again);
                        outcomes
                            .lock()
                            .unwrap()
                            .entry(job)
                            .or_default()
                            .push((node.name.to_owned(), submitted));
                        if again {
                            assert!(
                                tries + 1 < MOST_SUBMISSIONS,
                                "load-{job:02} never ended: {:?}",
                                outcomes.lock().unwrap()[&job]
                            );
                            std::thread::sleep(Duration::from_millis(200));
                            queue.lock().unwrap().push_back((job, tries + 1));
                        }
                    }
                })
            })
            .collect();
        for submitter in submitters {
            submitter.join().unwrap();
        }
        chaos.join().unwrap();
    });
    // Windmill delivers each job once more, to any node: every one is replayed.
    for job in 0..JOBS {
        let node = &nodes[random_millis(nodes.len() as u64) as usize];
        let replayed = node
            .job(&format!("load-{job:02}"), &format!("ns{}", job % NAMESPACES))
            .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": format!("ns{}", job % NAMESPACES), "JOB_TAG": format!("load-{job:02}")}))
            .run();
        assert!(
            replayed.success() && replayed.stderr.contains("already ended"),
            "load-{job:02} was not replayed on node {}: {replayed:?}",
            node.name
        );
    }
    let outcomes = outcomes.into_inner().unwrap();
    let violations = std::fs::read_to_string(shared.path().join("violations")).unwrap_or_default();
    assert_eq!(violations, "", "{outcomes:?}");
    assert_eq!(unexpected.into_inner().unwrap(), Vec::<String>::new());
    let kills = outcomes
        .values()
        .flatten()
        .filter(|(_, s)| matches!(s, Submitted::Killed))
        .count();
    assert!(kills >= 3, "too few kills to mean anything: {outcomes:?}");
    // Program starts, by job.
    let log = std::fs::read_to_string(shared.path().join("log")).unwrap();
    let mut starts: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for line in log.lines().filter(|l| l.starts_with("start ")) {
        let fields: Vec<&str> = line.split(' ').collect();
        starts
            .entry(fields[1].to_owned())
            .or_default()
            .push(fields[3].parse().unwrap());
    }
    for job in 0..JOBS {
        let id = format!("load-{job:02}");
        let tried = &outcomes[&job];
        // Exactly one submission ran it to a recorded success, unless a killed one did (its
        // re-runs replayed it).
        let succeeded = tried.iter().filter(|(_, s)| matches!(s, Submitted::Succeeded)).count();
        assert!(succeeded <= 1, "{id} succeeded {succeeded} times: {tried:?}");
        let row = db
            .client()
            .query_one(
                "SELECT extract(epoch FROM finished_at)::float8, entry->>'status', (entry->>'attempt')::int FROM fediversity_jobenv.jobs WHERE job_id = $1",
                &[&id],
            )
            .unwrap();
        let (finished, status, attempt): (Option<f64>, Option<String>, Option<i32>) =
            (row.get(0), row.get(1), row.get(2));
        assert_eq!(status.as_deref(), Some("succeeded"), "{id}: {tried:?}");
        let finished = finished.unwrap_or_else(|| panic!("{id}: the cluster journal records no end: {tried:?}"));
        let late: Vec<&f64> = starts[&id].iter().filter(|&&t| t > finished).collect();
        assert!(
            late.is_empty(),
            "{id} ran again after the cluster journal recorded its end at {finished}: {late:?}, {tried:?}"
        );
        // The node whose attempt ended it has the same end in its own journal.
        let agreeing = nodes.iter().any(|node| {
            let done = node.f.jobenv(jobenv_bin!()).args(["status", &id]).run();
            done.success()
                && serde_json::from_str::<serde_json::Value>(&done.stdout)
                    .is_ok_and(|e| e["status"] == "succeeded" && e["attempt"] == json!(attempt.unwrap()))
        });
        assert!(
            agreeing,
            "{id}: no node's journal has the end the cluster's has ({status:?}, attempt {attempt:?})"
        );
    }
    eprintln!(
        "{JOBS} jobs, {} submissions, {kills} killed, in {:?}",
        outcomes.values().map(Vec::len).sum::<usize>(),
        started.elapsed()
    );
}
