//! Under the worker's lifecycle: a worker that dies or a node that stops never leaves a deploy
//! running unsupervised, Windmill's re-run of a lost job (same job id) completes it, and every
//! attempt's record says what happened.
//!
//! The worker is a stand-in ([`Worker`]) that starts the job as a real Windmill CE worker does:
//! the job process (jobenv) leads its own process group in the worker's session, with
//! `WM_JOB_ID`, its output piped to the worker.

use std::time::{Duration, Instant};

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::process::{is_alive, kill_all, read_pids, wait_until};
use fediversity_testkit::worker::Worker;
use serde_json::{Value, json};

/// The program's tree: a background `sleep`, a shell with its own, and itself; it runs until
/// `go` exists (then exits 0). With `trap`, it first installs that shell code (e.g. a SIGTERM
/// trap that lingers). `containment`: the containment (`JOBENV_CONTAINMENT`).
fn fixture_in(trap: &str, containment: &'static str) -> Fixture {
    let mut f = Fixture::with_containment(containment);
    let dir = f.path().display().to_string();
    f.program(
        "web",
        "apply",
        &format!(
            "{trap}\necho run >> {dir}/runs\nsleep 300 & echo $! >> {dir}/pids\nsh -c 'sleep 301 & echo $! >> {dir}/pids; wait' & echo $! >> {dir}/pids\necho $$ >> {dir}/pids\n\
             while [ ! -e {dir}/go ]; do sleep 0.05; done\nkill $(grep -vx $$ {dir}/pids) 2>/dev/null\nexit 0"
        ),
    );
    f
}

/// The same with jobenv's default containment.
fn fixture(trap: &str) -> Fixture {
    fixture_in(trap, "auto")
}

fn payload() -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"})
}

fn runs(f: &Fixture) -> usize {
    std::fs::read_to_string(f.path().join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// The pids of the first attempt's tree, once it runs.
fn tree(f: &Fixture) -> Vec<i32> {
    read_pids(&f.path().join("pids"), 4, Duration::from_secs(20))
}

with_each_tree!(
    a_worker_that_dies_leaves_no_deploy_running_and_the_re_run_completes_it,
    a_re_run_that_comes_while_the_lost_attempt_still_stops_waits_for_it,
    drain_stops_running_jobs_through_their_jobenv_and_records_them_interrupted,
    a_program_that_unlocks_what_it_holds_cannot_let_a_second_deploy_in_beside_it,
    a_stop_request_left_from_an_earlier_attempt_does_not_turn_a_cancel_into_a_node_stop
);

fn assert_all_gone(tree: &[i32], limit: Duration) {
    let gone = wait_until(limit, || tree.iter().all(|&pid| !is_alive(pid)));
    let alive: Vec<_> = tree.iter().filter(|&&p| is_alive(p)).collect();
    kill_all(tree);
    assert!(gone, "still running without a worker: {alive:?} of {tree:?}");
}

fn a_worker_that_dies_leaves_no_deploy_running_and_the_re_run_completes_it(containment: &'static str) {
    let f = fixture_in("", containment);
    let mut worker = Worker::start(&f, jobenv_bin!(), "lost-1", "apply", &payload(), &["--grace", "1"]);
    let tree = tree(&f);
    // Positive control: the whole tree runs under the live worker.
    assert!(tree.iter().all(|&p| is_alive(p)) && worker.job_alive(), "{tree:?}");
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        tree.iter().all(|&p| is_alive(p)),
        "the tree was stopped while its worker lived"
    );

    worker.kill();
    // Noticed within about a second, then the grace (1 s): nothing is left.
    assert_all_gone(&tree, Duration::from_secs(4));
    assert!(
        wait_until(Duration::from_secs(2), || !worker.job_alive()),
        "jobenv outlived its job"
    );
    let entry = f.journal_entry(jobenv_bin!(), "lost-1");
    assert_eq!(
        (entry["status"].as_str(), entry["reason"].as_str()),
        (Some("failed"), Some("interrupted")),
        "{entry}"
    );
    assert_eq!(entry["interrupted_by"], "worker_lost", "{entry}");

    // Windmill re-runs the lost job with the same id on another worker: the next attempt.
    std::fs::write(f.path().join("go"), "").unwrap();
    let mut again = Worker::start(&f, jobenv_bin!(), "lost-1", "apply", &payload(), &[]);
    assert_eq!(again.wait(Duration::from_secs(30)), Some(0), "{}", again.log.text());
    let entry = f.journal_entry(jobenv_bin!(), "lost-1");
    assert_eq!(
        (entry["attempt"].as_u64(), entry["status"].as_str()),
        (Some(2), Some("succeeded")),
        "{entry}"
    );
    assert_eq!(entry["earlier"][0]["interrupted_by"], "worker_lost");
    assert_eq!(runs(&f), 2);
}

fn a_re_run_that_comes_while_the_lost_attempt_still_stops_waits_for_it(containment: &'static str) {
    // The program lingers 1.5 s after SIGTERM (its `sleep` ignores the SIGTERMs jobenv sends
    // every process of the tree): the old attempt is still stopping when the re-run comes.
    let f = fixture_in("trap 'trap \"\" TERM; sleep 1.5; exit 143' TERM", containment);
    let mut worker = Worker::start(&f, jobenv_bin!(), "lost-2", "apply", &payload(), &["--grace", "3"]);
    let tree = tree(&f);
    worker.kill();
    // Give the old jobenv time to notice (it checks twice a second) and start stopping.
    std::thread::sleep(Duration::from_millis(800));
    std::fs::write(f.path().join("go"), "").unwrap();
    let started = Instant::now();
    let mut again = Worker::start(&f, jobenv_bin!(), "lost-2", "apply", &payload(), &[]);
    assert_eq!(again.wait(Duration::from_secs(30)), Some(0), "{}", again.log.text());
    let log = again.log.text();
    assert!(
        log.contains("job lost-2: attempt 1 lost its worker and is stopping"),
        "{log}"
    );
    assert!(
        log.contains("attempt 1 was interrupted; running it again as attempt 2"),
        "{log}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the re-run did not wait"
    );
    assert_all_gone(&tree, Duration::from_secs(1));
    let entry = f.journal_entry(jobenv_bin!(), "lost-2");
    assert_eq!(
        (entry["attempt"].as_u64(), entry["status"].as_str()),
        (Some(2), Some("succeeded")),
        "{entry}"
    );
    assert_eq!(entry["earlier"][0]["interrupted_by"], "worker_lost");
}

#[test]
fn a_duplicate_under_a_live_worker_is_refused() {
    let f = fixture("");
    let mut first = Worker::start(&f, jobenv_bin!(), "dup-1", "apply", &payload(), &[]);
    tree(&f);
    let mut second = Worker::start(&f, jobenv_bin!(), "dup-1", "apply", &payload(), &[]);
    assert_eq!(second.wait(Duration::from_secs(20)), Some(2));
    assert!(
        second
            .log
            .text()
            .contains("jobenv: error: job dup-1 is already running"),
        "{}",
        second.log.text()
    );
    assert!(first.job_alive(), "the refused duplicate disturbed the running job");
    std::fs::write(f.path().join("go"), "").unwrap();
    assert_eq!(first.wait(Duration::from_secs(20)), Some(0));
    assert_eq!(runs(&f), 1);
}

fn drain(f: &Fixture, wait: &str) -> (Option<i32>, Value, String) {
    let done = f.jobenv(jobenv_bin!()).args(["drain", "--wait", wait]).run();
    let printed = serde_json::from_str(&done.stdout).unwrap_or(Value::Null);
    (done.code, printed, done.stderr)
}

fn drain_stops_running_jobs_through_their_jobenv_and_records_them_interrupted(containment: &'static str) {
    let f = fixture_in("trap 'echo got TERM; exit 143' TERM", containment);
    let mut worker = Worker::start(&f, jobenv_bin!(), "drained-1", "apply", &payload(), &["--grace", "2"]);
    let tree = tree(&f);
    let started = Instant::now();
    let (code, printed, stderr) = drain(&f, "0.3");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "drain did not let the job run for --wait first"
    );
    assert!(stderr.contains("draining: stopping job drained-1"), "{stderr}");
    assert_eq!(printed[0]["job_id"], "drained-1", "{printed}");
    assert_eq!(printed[0]["interrupted_by"], "node_stopped", "{printed}");
    assert_all_gone(&tree, Duration::from_millis(500));
    assert!(
        worker.wait(Duration::from_secs(5)).is_some(),
        "the job process did not end"
    );
    let log = worker.log.text();
    assert!(
        log.contains("got TERM"),
        "the program was not given its SIGTERM first: {log}"
    );
    assert!(
        log.contains("received SIGTERM (the node is stopping): stopping the program tree"),
        "{log}"
    );
    let result: Value = f.result_json();
    assert_eq!(
        (result["reason"].as_str(), result["interrupted_by"].as_str()),
        (Some("interrupted"), Some("node_stopped")),
        "{result}"
    );
    assert!(
        result["errors"][0].as_str().unwrap().contains("a retry is safe"),
        "{result}"
    );
    // Not a result: once the worker starts again (its `recover`), the same job id runs again
    // as the next attempt.
    std::fs::write(f.path().join("go"), "").unwrap();
    f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    let mut again = Worker::start(&f, jobenv_bin!(), "drained-1", "apply", &payload(), &[]);
    assert_eq!(again.wait(Duration::from_secs(30)), Some(0));
    assert_eq!(f.journal_entry(jobenv_bin!(), "drained-1")["attempt"], 2);
}

#[test]
fn drain_lets_a_job_that_ends_in_time_end_on_its_own() {
    let f = fixture("");
    let mut worker = Worker::start(&f, jobenv_bin!(), "in-time", "apply", &payload(), &[]);
    tree(&f);
    let go = f.path().join("go");
    let finisher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(go, "").unwrap();
    });
    let (code, printed, stderr) = drain(&f, "20");
    finisher.join().unwrap();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(printed, json!([]), "a job that ended on its own was stopped");
    assert_eq!(worker.wait(Duration::from_secs(5)), Some(0));
    assert_eq!(f.journal_entry(jobenv_bin!(), "in-time")["status"], "succeeded");
}

#[test]
fn drain_with_nothing_running_ends_at_once() {
    let f = fixture("");
    let started = Instant::now();
    let (code, printed, stderr) = drain(&f, "60");
    assert_eq!((code, printed), (Some(0), json!([])), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_worker_that_dies_while_its_job_waits_for_the_namespace_starts_nothing() {
    let f = fixture("");
    // A first deploy holds the namespace.
    let mut first = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "holder"])
        .payload(&payload())
        .spawn();
    tree(&f);
    let mut waiting = Worker::start(
        &f,
        jobenv_bin!(),
        "waiter",
        "apply",
        &payload(),
        &["--lock-timeout", "60"],
    );
    assert!(
        wait_until(Duration::from_secs(10), || waiting.log.text().contains("waiting up to")),
        "{}",
        waiting.log.text()
    );
    waiting.kill();
    assert!(
        wait_until(Duration::from_secs(3), || !waiting.job_alive()),
        "the orphaned job went on waiting"
    );
    std::fs::write(f.path().join("go"), "").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    assert_eq!(runs(&f), 1, "the orphaned job ran its program");
    // Nothing was recorded for it: Windmill's re-run is its first attempt, and runs.
    let mut again = Worker::start(&f, jobenv_bin!(), "waiter", "apply", &payload(), &[]);
    assert_eq!(again.wait(Duration::from_secs(30)), Some(0), "{}", again.log.text());
    assert_eq!(f.journal_entry(jobenv_bin!(), "waiter")["attempt"], 1);
    assert_eq!(runs(&f), 2);
}

fn a_program_that_unlocks_what_it_holds_cannot_let_a_second_deploy_in_beside_it(containment: &'static str) {
    let mut f = fixture_in("", containment);
    let dir = f.path().display().to_string();
    // The program releases the namespace's tree lock it was given (fd 4), then goes on.
    f.program(
        "web",
        "apply",
        &format!("flock -u 4; echo unlocked > {dir}/unlocked; while [ ! -e {dir}/go ]; do sleep 0.05; done"),
    );
    let mut first = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "unlocker"])
        .payload(&payload())
        .spawn();
    assert!(wait_until(Duration::from_secs(20), || f
        .path()
        .join("unlocked")
        .exists()));
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "second"])
        .payload(&payload())
        .expect_code(2)
        .expect_stderr("jobenv: error: namespace ns is locked by another deploy: job unlocker, jobenv pid [..]\n")
        .run();
    std::fs::write(f.path().join("go"), "").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    // Positive control: once the first deploy ended, the second runs.
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "second"])
        .payload(&payload())
        .expect_success()
        .run();
}

fn a_stop_request_left_from_an_earlier_attempt_does_not_turn_a_cancel_into_a_node_stop(containment: &'static str) {
    let f = fixture_in("", containment);
    // What a drain that was itself killed would leave behind.
    std::fs::create_dir_all(f.state_dir().join("jobs")).unwrap();
    std::fs::write(f.state_dir().join("jobs/.stale.stop"), "").unwrap();
    let mut worker = Worker::start(&f, jobenv_bin!(), "stale", "apply", &payload(), &["--grace", "1"]);
    let tree = tree(&f);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker.job), nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(worker.wait(Duration::from_secs(10)), Some(130));
    assert_all_gone(&tree, Duration::from_secs(1));
    let result = f.result_json();
    assert_eq!(
        (result["status"].as_str(), result.get("interrupted_by")),
        (Some("canceled"), None),
        "{result}"
    );
    assert_eq!(f.journal_entry(jobenv_bin!(), "stale")["status"], "canceled");
}

/// jobenv is not dumpable, so most of its `/proc` is closed to its own user: `recover` and
/// `drain`, run as the worker's user, still know a live jobenv from a dead one and stop it. A
/// live job is left alone by `recover` (its positive control: once that jobenv is SIGKILLed,
/// `recover` marks it), and `drain` stops and records it.
#[test]
fn recover_and_drain_as_the_workers_user_see_through_a_sealed_jobenv() {
    use fediversity_testkit::nix_fixture::WORKER_UID;
    use std::os::unix::process::CommandExt;

    let mut f = Fixture::new();
    let pid_file = f.job_dir().join("program.pid");
    // One process, no children: after a SIGKILL of its jobenv it dies of the parent-death
    // signal, and with it the namespace's tree lock is free.
    f.program(
        "web",
        "apply",
        &format!(
            "echo $$ > {0}.tmp && mv {0}.tmp {0}\nexec sleep 300",
            pid_file.display()
        ),
    );
    let stand_in = f.nix_shell_stand_in();
    let as_worker = |args: &[&str]| {
        let mut run = f.jobenv(jobenv_bin!()).args(args.iter().copied());
        run.command().uid(WORKER_UID).gid(WORKER_UID);
        f.hand_to(WORKER_UID);
        run
    };
    let start = |job_id: &str| {
        let _ = std::fs::remove_file(&pid_file);
        let mut job = as_worker(&[
            "run",
            "--verb",
            "apply",
            "--grace",
            "1",
            "--nix-shell",
            stand_in.to_str().unwrap(),
            "--job-id",
            job_id,
        ])
        .payload(&payload())
        .spawn();
        if !wait_until(Duration::from_secs(20), || pid_file.exists()) {
            let _ = job.kill();
            let mut stderr = String::new();
            std::io::Read::read_to_string(job.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            panic!("job {job_id} never started its program:\n{stderr}");
        }
        job
    };
    let printed =
        |done: &fediversity_testkit::job_run::Done| serde_json::from_str::<Value>(&done.stdout).expect("JSON");

    let mut killed = start("sealed-1");
    let done = as_worker(&["recover"]).expect_success().run();
    assert_eq!(
        printed(&done),
        json!([]),
        "recover took a live, sealed jobenv for a dead one: {done:?}"
    );
    let program = read_pids(&pid_file, 1, Duration::from_secs(1))[0];
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || !is_alive(program)),
        "the program outlived its SIGKILLed jobenv"
    );
    let done = as_worker(&["recover"]).expect_success().run();
    assert_eq!(printed(&done)[0]["job_id"], "sealed-1", "{done:?}");

    let mut drained = start("sealed-2");
    let done = as_worker(&["drain", "--wait", "0"])
        .expect_success()
        .expect_stderr_contains("draining: stopping job sealed-2")
        .run();
    assert_eq!(printed(&done)[0]["interrupted_by"], "node_stopped", "{done:?}");
    assert!(
        drained.wait().unwrap().code().is_some(),
        "jobenv ended on its own, after stopping its program"
    );
}

/// From the moment `drain` begins until the worker starts again (`recover`), no program starts:
/// a job that waited for the namespace when the drain began refuses at its program's start,
/// recorded like a drained job, and the drain reports it. The positive control: after `recover`
/// a job runs again.
#[test]
fn a_job_waiting_for_its_namespace_when_the_node_drains_never_starts_its_program() {
    let f = fixture("");
    let mut holder = Worker::start(&f, jobenv_bin!(), "holder", "apply", &payload(), &["--grace", "1"]);
    tree(&f);
    let mut waiter = Worker::start(
        &f,
        jobenv_bin!(),
        "waiter",
        "apply",
        &payload(),
        &["--lock-timeout", "60"],
    );
    assert!(
        wait_until(Duration::from_secs(10), || waiter.log.text().contains("waiting up to")),
        "{}",
        waiter.log.text()
    );
    let (code, printed, stderr) = drain(&f, "0");
    assert_eq!(code, Some(0), "{stderr}");
    let reported: Vec<(&str, &str)> = printed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["job_id"].as_str().unwrap(), e["interrupted_by"].as_str().unwrap()))
        .collect();
    assert_eq!(
        reported,
        [("holder", "node_stopped"), ("waiter", "node_stopped")],
        "{printed}"
    );
    assert!(holder.wait(Duration::from_secs(10)).is_some() && waiter.wait(Duration::from_secs(10)).is_some());
    assert!(
        waiter
            .log
            .text()
            .contains("jobenv: warning: the node is draining (since "),
        "{}",
        waiter.log.text()
    );
    assert_eq!(runs(&f), 1, "the waiting job started its program on a draining node");
    assert_eq!(
        f.journal_entry(jobenv_bin!(), "waiter")["interrupted_by"],
        "node_stopped"
    );
    // The worker starts again.
    f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    std::fs::write(f.path().join("go"), "").unwrap();
    let mut again = Worker::start(&f, jobenv_bin!(), "waiter", "apply", &payload(), &[]);
    assert_eq!(again.wait(Duration::from_secs(30)), Some(0), "{}", again.log.text());
    assert_eq!(runs(&f), 2);
}

/// `drain` stops its jobs together, under one deadline: jobenvs that cannot act on its SIGTERM
/// (stopped) are SIGKILLed after one bound for all of them (the longest grace plus 5 s), not
/// after that bound once for each in turn.
#[test]
fn drain_stops_several_stuck_jobs_within_one_bound_for_all() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let mut f = Fixture::new();
    let started = f.job_dir().join("started");
    f.program(
        "web",
        "apply",
        &format!("echo $$ >> {}\nexec sleep 300", started.display()),
    );
    let count = || std::fs::read_to_string(&started).unwrap_or_default().lines().count();
    let mut workers: Vec<Worker> = ["a", "b", "c"]
        .iter()
        .map(|ns| {
            Worker::start(
                &f,
                jobenv_bin!(),
                &format!("stuck-{ns}"),
                "apply",
                &json!({"ATTRIBUTE": "web", "NAMESPACE": format!("ns-{ns}")}),
                &["--grace", "1"],
            )
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(30), || count() == 3),
        "the programs did not all start"
    );
    for worker in &workers {
        kill(Pid::from_raw(worker.job), Signal::SIGSTOP).unwrap();
    }
    let begun = Instant::now();
    let (code, printed, stderr) = drain(&f, "0");
    let took = begun.elapsed();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stderr.matches("did not end within 6s: SIGKILL").count(), 3, "{stderr}");
    // The positive control of the bound: drain did wait for the stuck jobenvs...
    assert!(took >= Duration::from_secs(6), "{took:?}");
    // ...once: 6 s, then a moment for the SIGKILLs and the records; 3 x 6 s one after another
    // would be 18 s.
    assert!(took < Duration::from_secs(13), "drain took {took:?}: {stderr}");
    let mut stopped: Vec<(&str, &str)> = printed
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["job_id"].as_str().unwrap(),
                e["interrupted_by"].as_str().unwrap_or("none"),
            )
        })
        .collect();
    stopped.sort();
    assert_eq!(
        stopped,
        [
            ("stuck-a", "node_stopped"),
            ("stuck-b", "node_stopped"),
            ("stuck-c", "node_stopped")
        ],
        "{printed}"
    );
    for worker in &mut workers {
        assert!(
            worker.wait(Duration::from_secs(5)).is_some(),
            "a job process outlived the drain"
        );
    }
}

/// A running entry names its jobenv by pid and start time, which anyone can read from /proc of
/// any jobenv: `drain` signals only a jobenv that holds the entry's job lock in this state
/// directory, so an entry planted on one node never stops another node's (or an operator's) job.
#[test]
fn drain_leaves_alone_a_jobenv_that_a_planted_entry_names_but_that_runs_elsewhere() {
    let mut elsewhere = Fixture::new();
    let started = elsewhere.job_dir().join("started");
    elsewhere.program(
        "web",
        "apply",
        &format!("echo $$ >> {}\nexec sleep 300", started.display()),
    );
    let mut victim = Worker::start(
        &elsewhere,
        jobenv_bin!(),
        "victim",
        "apply",
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "far"}),
        &["--grace", "1"],
    );
    assert!(
        wait_until(Duration::from_secs(30), || started.exists()),
        "the victim's program did not start"
    );
    // Field 22 of /proc/<pid>/stat, after the parenthesised name.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", victim.job)).unwrap();
    let start: u64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();

    let here = Fixture::new();
    let jobs = here.state_dir().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    std::fs::create_dir_all(here.state_dir().join("locks")).unwrap();
    let forged = json!({"format": 2, "job_id": "forged", "attempt": 1, "verb": "apply", "attribute": "web", "namespace": "near",
        "pid": victim.job, "pid_start": start, "boot_id": std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim(),
        "grace_ms": 100, "started_at": "2026-12-01T00:00:00.000Z", "status": "running"});
    std::fs::write(jobs.join("forged.json"), forged.to_string()).unwrap();
    let (code, _, stderr) = drain(&here, "0");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("draining: job forged names jobenv pid"), "{stderr}");
    assert!(
        victim.wait(Duration::from_millis(500)).is_none(),
        "drain stopped a jobenv of another state directory"
    );

    // Positive control: the drain of its own node stops it.
    let (code, printed, stderr) = drain(&elsewhere, "0");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(printed[0]["job_id"], "victim", "{printed}");
    assert!(
        victim.wait(Duration::from_secs(10)).is_some(),
        "the victim's own drain did not stop it"
    );
}
