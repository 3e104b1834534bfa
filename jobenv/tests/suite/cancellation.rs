//! Cancellation leaves no process of the program tree running, in each way a Windmill worker
//! or a front-end ends a job (as a real Windmill CE worker was observed to cancel: a SIGKILL of
//! the job's process group, or with MAX_WAIT_FOR_SIGINT a SIGINT to the job process alone).
//!
//! The program starts a tree: a background `sleep`, a shell with its own background `sleep`,
//! and itself; every pid goes to a file so the test can watch each process. Each test runs with
//! each kind of program tree (`with_each_tree!`).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use fediversity_testkit::process::{Running, StreamWatch, is_alive, kill_all, pgid, read_pids, wait_exit, wait_until};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::json;

const TREE: usize = 4;

with_each_tree!(
    sigterm_stops_every_process_of_the_tree_and_exits_143,
    without_leading_a_group_jobenv_gives_the_program_its_own_and_spares_its_parents,
    sigint_to_a_group_leading_jobenv_stops_the_tree_before_it_exits,
    windmills_default_cancel_sigkills_the_group_and_everything_dies,
    a_program_that_traps_sigterm_and_lingers_is_killed_after_the_grace,
    the_timeout_stops_the_tree_and_exits_124,
    sigkill_of_jobenv_alone_takes_the_program_with_it,
    processes_left_behind_by_a_finished_program_are_stopped
);

struct Job {
    f: Fixture,
    pids_file: PathBuf,
    program_file: PathBuf,
}

impl Job {
    /// `trap` is shell code run first (e.g. a SIGTERM trap); the tree is then started.
    fn new(trap: &str, containment: &'static str) -> Self {
        let mut f = Fixture::with_containment(containment);
        let pids_file = f.path().join("pids");
        let program_file = f.path().join("program.pid");
        let p = pids_file.display();
        let me = program_file.display();
        f.program(
            "web",
            "apply",
            &format!(
                "{trap}\nsleep 300 & echo $! >> {p}\nsh -c 'sleep 301 & echo $! >> {p}; wait' & echo $! >> {p}\necho $$ >> {p}\necho $$ > {me}\necho ready\nwait\nwhile :; do sleep 0.1; done"
            ),
        );
        Job {
            f,
            pids_file,
            program_file,
        }
    }

    /// Starts jobenv; `own_group` makes it lead a process group, as a Windmill job process does.
    fn start(&self, args: &[&str], own_group: bool) -> Running {
        let mut run = self
            .f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .args(args)
            .payload(&json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}));
        if own_group {
            run.command().process_group(0);
        }
        run.spawn()
    }

    fn tree(&self) -> Vec<i32> {
        read_pids(&self.pids_file, TREE, Duration::from_secs(20))
    }

    /// The direct child of jobenv: nix-shell execs bash, which execs the program.
    fn program(&self) -> i32 {
        read_pids(&self.program_file, 1, Duration::from_secs(20))[0]
    }
}

fn assert_all_gone(tree: &[i32], limit: Duration) {
    let gone = wait_until(limit, || tree.iter().all(|&pid| !is_alive(pid)));
    let alive: Vec<_> = tree.iter().filter(|&&p| is_alive(p)).collect();
    kill_all(tree);
    assert!(gone, "still alive: {alive:?} of {tree:?}");
}

fn sigterm_stops_every_process_of_the_tree_and_exits_143(containment: &'static str) {
    let job = Job::new("", containment);
    let mut jobenv = job.start(&[], false);
    let tree = job.tree();
    // Positive control: the whole tree is running before the signal.
    assert!(tree.iter().all(|&p| is_alive(p)), "{tree:?}");
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut jobenv, Duration::from_secs(4)).expect("jobenv exits within grace + 1 s");
    assert_eq!(status.code(), Some(143));
    assert_all_gone(&tree, Duration::from_secs(1));
}

fn without_leading_a_group_jobenv_gives_the_program_its_own_and_spares_its_parents(containment: &'static str) {
    let job = Job::new("", containment);
    let mut jobenv = job.start(&[], false);
    let tree = job.tree();
    let program = job.program();
    assert_eq!(pgid(program), Some(program), "the program leads a group of its own");
    assert_ne!(pgid(program), pgid(std::process::id() as i32));
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGHUP).unwrap();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(4)).unwrap().code(),
        Some(129)
    );
    assert_all_gone(&tree, Duration::from_secs(1));
    // This test process shares jobenv's group and is still here to assert it.
}

fn sigint_to_a_group_leading_jobenv_stops_the_tree_before_it_exits(containment: &'static str) {
    // Windmill with MAX_WAIT_FOR_SIGINT: SIGINT to the job process alone; if it exits first,
    // nothing else is ever killed, so jobenv must leave nothing behind.
    let job = Job::new("", containment);
    let mut jobenv = job.start(&[], true);
    let tree = job.tree();
    let program = job.program();
    assert_eq!(
        pgid(program),
        Some(jobenv.id() as i32),
        "the program stays in jobenv's group"
    );
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGINT).unwrap();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(4)).unwrap().code(),
        Some(130)
    );
    // jobenv has exited: anything alive now would be orphaned for good.
    assert!(
        tree.iter().all(|&p| !is_alive(p)),
        "left behind: {:?}",
        tree.iter().filter(|&&p| is_alive(p)).collect::<Vec<_>>()
    );
}

fn windmills_default_cancel_sigkills_the_group_and_everything_dies(containment: &'static str) {
    let job = Job::new("", containment);
    let mut jobenv = job.start(&[], true);
    let tree = job.tree();
    killpg(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(2)).unwrap().code(),
        None,
        "jobenv was killed"
    );
    assert_all_gone(&tree, Duration::from_secs(1));
}

fn a_program_that_traps_sigterm_and_lingers_is_killed_after_the_grace(containment: &'static str) {
    let job = Job::new("trap 'echo got TERM' TERM", containment);
    let mut jobenv = job.start(&["--grace", "1"], false);
    let mut stdout = StreamWatch::new(jobenv.stdout.take().unwrap());
    let tree = job.tree();
    assert!(stdout.wait_for(b"ready", Duration::from_secs(10)));
    let signalled = Instant::now();
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut jobenv, Duration::from_secs(3)).expect("exits within grace + 1 s");
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(143));
    assert!(
        took >= Duration::from_millis(900),
        "the grace period was not given: {took:?}"
    );
    assert_all_gone(&tree, Duration::from_millis(500));
    assert!(
        String::from_utf8_lossy(&stdout.finish()).contains("got TERM"),
        "the program saw SIGTERM first"
    );
}

fn the_timeout_stops_the_tree_and_exits_124(containment: &'static str) {
    let job = Job::new("", containment);
    let mut jobenv = job.start(&["--timeout", "1"], false);
    let tree = job.tree();
    let status = wait_exit(&mut jobenv, Duration::from_secs(10)).expect("the timeout ends the job");
    assert_eq!(status.code(), Some(124));
    assert_all_gone(&tree, Duration::from_secs(1));
    let mut stderr = String::new();
    use std::io::Read;
    jobenv.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(stderr.contains("jobenv: warning: timeout of 1s reached"), "{stderr}");
}

fn sigkill_of_jobenv_alone_takes_the_program_with_it(containment: &'static str) {
    let job = Job::new("", containment);
    let mut jobenv = job.start(&[], false);
    let tree = job.tree();
    let program = job.program();
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    jobenv.wait().unwrap();
    let died = wait_until(Duration::from_secs(2), || !is_alive(program));
    // The grandchildren are orphans now (Windmill's group SIGKILL would take them): clean up.
    kill_all(&tree);
    assert!(died, "the direct child outlived jobenv: no parent-death signal");
}

fn processes_left_behind_by_a_finished_program_are_stopped(containment: &'static str) {
    let mut f = Fixture::with_containment(containment);
    let pids = f.path().join("pids");
    f.program(
        "web",
        "apply",
        &format!(
            "setsid sleep 300 > /dev/null 2>&1 & echo $! > {}; echo done",
            pids.display()
        ),
    );
    let out = f.run(
        jobenv_bin!(),
        &["run", "--verb", "apply"],
        &json!({"ATTRIBUTE": "web", "NAMESPACE": "ns"}),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let leftover = read_pids(&pids, 1, Duration::from_secs(1));
    let gone = !is_alive(leftover[0]);
    kill_all(&leftover);
    assert!(out.status.success(), "{stderr}");
    assert!(gone, "a process that left the program's session survived the job");
    assert!(
        stderr.contains("jobenv: warning: the program exited but left processes running: stopping them"),
        "{stderr}"
    );
}

/// A front-end that pipes the payload and stalls (the pipe open, nothing written): a cancel
/// still ends the job, as a canceled job whose program never started. The positive control:
/// until the signal, jobenv was waiting for its payload, not gone.
#[test]
fn a_cancel_while_the_payload_is_still_awaited_ends_the_job() {
    use std::process::Stdio;
    let mut f = Fixture::new();
    let started = f.path().join("started");
    f.program("web", "apply", &format!("touch {}", started.display()));
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let mut command = f.command(jobenv_bin!(), &["run", "--verb", "apply", "--payload", "-"]);
        command
            .env("WM_JOB_ID", "stalled-payload")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut jobenv = Running(command.spawn().unwrap());
        let _pipe = jobenv.stdin.take();
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            jobenv.try_wait().unwrap().is_none(),
            "jobenv should be waiting for its payload"
        );
        let sent = Instant::now();
        kill(Pid::from_raw(jobenv.id() as i32), signal).unwrap();
        let status = wait_exit(&mut jobenv, Duration::from_secs(5)).expect("the cancel ends the job");
        assert!(sent.elapsed() < Duration::from_secs(2), "{:?}", sent.elapsed());
        let mut stderr = String::new();
        std::io::Read::read_to_string(jobenv.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(128 + signal as i32), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "jobenv: warning: received {}: the job is canceled before its program started\n",
                signal.as_str()
            )
        );
        assert_eq!(f.result_json()["status"], "canceled");
        assert!(!started.exists(), "the program ran");
    }
}
