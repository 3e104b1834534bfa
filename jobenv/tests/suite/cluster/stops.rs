//! Every stop of a program tree in cluster mode ends before the run's leases can expire: a
//! `--grace` that could not is refused at start; the longest that can is given in full even when
//! the database is black-holed right before the renew deadline; a lease lost during a stop ends
//! it at once; and a jobenv that is frozen (SIGSTOP) cannot stop its tree in time, so the
//! tree's guard kills it by then. The other node's deploy of the namespace starts only once the
//! lease expired; the programs themselves check that they never overlap ([`super::watched`]).

use std::time::{Duration, Instant};

use fediversity_testkit::postgres;
use fediversity_testkit::process::{StreamWatch, is_alive, read_pids, wait_exit};
use fediversity_testkit::tcp_proxy::Proxy;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::{Node, TIMING, Timing, finish, overlaps_seen, runs, watched};

/// A process stopped with SIGSTOP, continued when dropped (a failed test must not leave a
/// stopped jobenv that nothing waits out).
struct Frozen(i32);

impl Frozen {
    fn new(pid: i32) -> Frozen {
        kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
        Frozen(pid)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.0), Signal::SIGCONT);
    }
}

/// Leases of 8 s with the renew deadline at 2 s: the longest grace is 5 s.
const LONG: Timing = Timing {
    lease: Duration::from_secs(8),
    renew_every: Duration::from_millis(500),
    renew_deadline: Duration::from_secs(2),
    grace: Duration::from_secs(5),
};

#[test]
fn a_grace_that_cannot_fit_is_refused_and_the_longest_that_can_ends_before_the_lease_even_cut_off() {
    let db = postgres::cluster().jobenv_database();
    let proxy = Proxy::start(postgres::cluster().port);
    let shared = tempfile::tempdir().unwrap();
    let body = watched(shared.path(), true);
    let a = Node::new("a", Some(&db.dsn_on(proxy.port)), &body);
    let b = Node::new("b", Some(&db.dsn()), &body);
    // A grace of 7 s does not fit 8 s leases with a 2 s renew deadline: refused, nothing runs.
    let too_long = Timing {
        grace: Duration::from_secs(7),
        ..LONG
    };
    let mut refused = a.job_timed("grace-1", "ns", too_long).spawn();
    let status = wait_exit(&mut refused, Duration::from_secs(10));
    std::fs::write(shared.path().join("go-a"), "").unwrap();
    let done = finish(refused);
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{done:?}");
    assert!(
        done.stderr.contains("jobenv: error: --grace 7s does not fit cluster mode's leases: a stop must end before the lease can expire, and with --cluster-lease 8s and --cluster-renew-deadline 2s the longest grace that fits is 5s"),
        "{done:?}"
    );
    assert_eq!(a.result()["status"], "rejected");
    assert!(!shared.path().join("log").exists(), "a program ran");
    std::fs::remove_file(shared.path().join("go-a")).unwrap();

    // The longest grace that fits, at the worst moment: the database black-holed, then a cancel
    // right before the renew deadline. The program ignores SIGTERM and is given all 5 s.
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    let mut held = a.job_timed("grace-2", "ns", LONG).spawn();
    let mut held_err = StreamWatch::new(held.stderr.take().unwrap());
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    let waiting = b
        .job_timed("grace-3", "ns", LONG)
        .args(["--lock-timeout", "30"])
        .spawn();
    std::thread::sleep(Duration::from_secs(1));
    proxy.cut();
    let cut = Instant::now();
    // The cancel comes 1.5 s after the cut, right before the renew deadline (2 s after the last
    // renewal, which came at most 0.5 s before the cut). On a loaded machine whose renewals ran
    // late, the deadline itself may come first and begin the stop: that is the other worst
    // moment, and the grace is then counted from it.
    let mut began = None;
    while began.is_none() && cut.elapsed() < Duration::from_millis(1500) {
        if held_err.wait_for(b"stopping the program tree", Duration::from_millis(10)) {
            began = Some(Instant::now());
        }
    }
    kill(Pid::from_raw(held.id() as i32), Signal::SIGTERM).unwrap();
    let began = began.unwrap_or_else(Instant::now);
    wait_exit(&mut held, Duration::from_secs(15)).expect("node a stops");
    let stopped_after = began.elapsed();
    let stderr = String::from_utf8_lossy(&held_err.finish()).into_owned();
    assert!(
        stopped_after >= Duration::from_millis(4500),
        "the grace was not given: stopped {stopped_after:?} after the stop began\n{stderr}"
    );
    assert!(
        stderr.contains("jobenv: warning: received SIGTERM: stopping the program tree (grace 5s)")
            || stderr
                .contains("were not renewed within 2s: stopping the program tree before they can expire (grace 5s)"),
        "{stderr}"
    );
    let done = finish(waiting);
    assert!(done.success(), "{done:?}");
    let all = runs(&shared.path().join("log"));
    assert_eq!(
        all.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "{all:?}"
    );
    assert_eq!(overlaps_seen(shared.path()), "", "{all:?}");
}

#[test]
fn a_lease_lost_during_a_stop_ends_the_stop_at_once() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let a = Node::new("a", Some(&db.dsn()), &watched(shared.path(), true));
    let mut held = a.job_timed("lost-in-stop", "ns", LONG).spawn();
    let mut held_err = StreamWatch::new(held.stderr.take().unwrap());
    let program = read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20))[0];
    kill(Pid::from_raw(held.id() as i32), Signal::SIGTERM).unwrap();
    assert!(held_err.wait_for(b"stopping the program tree (grace 5s)", Duration::from_secs(5)));
    // Positive control: the stop gives the grace while the lease holds.
    std::thread::sleep(Duration::from_secs(1));
    assert!(is_alive(program), "the program was killed before its grace");
    // The lease runs out under it (as if taken over): the next renewal finds it lost.
    db.client()
        .execute(
            "UPDATE fediversity_jobenv.jobs SET expires_at = now() - interval '1 second' WHERE job_id = 'lost-in-stop'",
            &[],
        )
        .unwrap();
    let expired = Instant::now();
    wait_exit(&mut held, Duration::from_secs(15)).expect("node a stops");
    let stderr = String::from_utf8_lossy(&held_err.finish()).into_owned();
    assert!(
        expired.elapsed() < Duration::from_millis(2500),
        "the stop went on for {:?} once the lease was lost (its grace ends 4 s after that)\n{stderr}",
        expired.elapsed()
    );
    assert!(
        stderr
            .contains("the lease of job lost-in-stop on the cluster journal expired or was taken over: this run stops"),
        "{stderr}"
    );
    assert!(!is_alive(program));
}

/// jobenv is frozen (SIGSTOP): it renews nothing and cannot stop its program, which runs on.
/// The program tree's guard, not frozen with it, kills the tree by the lease's expiry (less the
/// margin), before the other node may take the namespace. Then the same, briefly: a freeze of
/// 1.8 s (shorter than lease − renew deadline) straddling the renew deadline while the database
/// is cut off.
#[test]
fn a_frozen_jobenvs_program_is_killed_by_its_guard_before_the_lease_can_expire() {
    let db = postgres::cluster().jobenv_database();
    let proxy = Proxy::start(postgres::cluster().port);
    let shared = tempfile::tempdir().unwrap();
    let body = watched(shared.path(), true);
    let a = Node::new("a", Some(&db.dsn_on(proxy.port)), &body);
    let b = Node::new("b", Some(&db.dsn()), &body);
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    let frozen_run = |job: &str, cut: bool, freeze_at: Duration, freeze_for: Option<Duration>| {
        let _ = std::fs::remove_file(shared.path().join("program-a.pid"));
        let mut held = a.job(&format!("{job}-a"), job).spawn();
        let program = read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20))[0];
        let waiting = b.job(&format!("{job}-b"), job).args(["--lock-timeout", "30"]).spawn();
        if cut {
            proxy.cut();
        }
        std::thread::sleep(freeze_at);
        let frozen = Frozen::new(held.id() as i32);
        match freeze_for {
            Some(freeze) => {
                std::thread::sleep(freeze);
                drop(frozen);
            }
            None => {
                // Until node b has run: the guard alone ends node a's program.
                let done = finish(waiting);
                assert!(done.success(), "{done:?}");
                assert!(
                    !is_alive(program),
                    "node a's program outlived its frozen jobenv's lease"
                );
                drop(frozen);
                let status = wait_exit(&mut held, Duration::from_secs(15)).expect("node a ends once it thaws");
                assert_eq!(status.code(), Some(75));
                assert_eq!(a.result()["interrupted_by"], "lease_lost", "{}", a.result());
                return;
            }
        }
        let status = wait_exit(&mut held, Duration::from_secs(15)).expect("node a ends");
        assert_eq!(status.code(), Some(75));
        proxy.heal();
        let done = finish(waiting);
        assert!(done.success(), "{done:?}");
    };
    frozen_run("frozen", false, Duration::from_millis(300), None);
    // Frozen from 1.6 s after the cut (the renew deadline is 2 s after the last renewal, sent
    // at most 0.5 s before the cut) for 1.8 s: past the deadline, and thawed after the point
    // where the tree must die (3 s after the last renewal), before the lease expires.
    frozen_run(
        "straddling",
        true,
        Duration::from_millis(1600),
        Some(Duration::from_millis(1800)),
    );
    let all = runs(&shared.path().join("log"));
    assert_eq!(all.len(), 4, "{all:?}");
    assert_eq!(overlaps_seen(shared.path()), "", "{all:?}");
    let _ = TIMING;
}

/// The state of process `pid` (`/proc/<pid>/stat`'s third field: `T` when stopped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// jobenv frozen (SIGSTOP) at the last moment before its program starts: it took the
/// namespace's lease, wrote the running entry, looked at its leases one last time and gave its
/// guard the time by which the tree must die; it is making the program's pipes. It stays frozen
/// until its lease expired and node b runs its deploy of the namespace. The guard killed the
/// tree's cgroup at that time, while nothing was in it. Thawed, jobenv must not start its
/// program: the program tree runs only while the leases hold. `strace` freezes it there (at the
/// second `pipe2` once it waits for the namespace: the guard's pipe is the first) and sees
/// whether the program was executed.
#[test]
fn a_jobenv_frozen_right_before_its_program_starts_does_not_start_it_once_its_lease_expired() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let body = watched(shared.path(), false);
    let a = Node::new("a", Some(&db.dsn()), &body);
    let b = Node::new("b", Some(&db.dsn()), &body);
    let holding = b.job("before-freeze", "ns").spawn();
    read_pids(&shared.path().join("program-b.pid"), 1, Duration::from_secs(20));
    let mut held = a.job("freeze", "ns").args(["--lock-timeout", "60"]).spawn();
    let mut held_err = StreamWatch::new(held.stderr.take().unwrap());
    assert!(
        held_err.wait_for(b"is held on the cluster journal by", Duration::from_secs(20)),
        "{}",
        held_err.text()
    );
    let jobenv = held.id() as i32;
    let traced_path = shared.path().join("strace");
    let traced = &traced_path;
    let mut strace = std::process::Command::new("/usr/bin/strace")
        .args(["-f", "-qq", "-e", "trace=epoll_create1,pipe2,execve", "-e"])
        .arg("inject=pipe2:signal=SIGSTOP:when=2")
        .arg("-o")
        .arg(traced)
        .args(["-p", &jobenv.to_string()])
        .spawn()
        .unwrap();
    assert!(
        fediversity_testkit::process::wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{jobenv}/status"))
                .is_ok_and(|s| s.lines().any(|l| l.starts_with("TracerPid:") && !l.ends_with("\t0")))
        }),
        "strace did not attach"
    );
    // Node b's deploy ends: node a takes the namespace, and is frozen before its program.
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    assert!(finish(holding).success());
    std::fs::remove_file(shared.path().join("go-b")).unwrap();
    std::fs::remove_file(shared.path().join("program-b.pid")).unwrap();
    assert!(
        fediversity_testkit::process::wait_until(Duration::from_secs(20), || state(jobenv) == Some('t')
            || state(jobenv) == Some('T')),
        "node a was not frozen: {:?}\n{}",
        state(jobenv),
        held_err.text()
    );
    let frozen = Frozen(jobenv);
    // Node b's next deploy waits for node a's lease to expire, then runs.
    let after = b.job("after-freeze", "ns").args(["--lock-timeout", "30"]).spawn();
    read_pids(&shared.path().join("program-b.pid"), 1, Duration::from_secs(30));
    drop(frozen);
    let status = wait_exit(&mut held, Duration::from_secs(20)).expect("node a ends once it thaws");
    let _ = nix::sys::signal::kill(Pid::from_raw(strace.id() as i32), Signal::SIGINT);
    let _ = strace.wait();
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    std::fs::write(shared.path().join("go-a"), "").unwrap();
    assert!(finish(after).success());
    let stderr = String::from_utf8_lossy(&held_err.finish()).into_owned();
    let traced = std::fs::read_to_string(traced).unwrap();
    // Frozen after the program's runtime was made (after the last look at the leases).
    let (before, after) = traced
        .split_once("--- stopped by SIGSTOP ---")
        .unwrap_or_else(|| panic!("not frozen\n{traced}"));
    assert!(
        before.contains("epoll_create1") && !after.contains("epoll_create1"),
        "not frozen where meant\n{traced}"
    );
    assert_eq!(
        executed(&traced),
        Vec::<&str>::new(),
        "node a started its program after its lease expired, beside node b's\n{stderr}"
    );
    assert_eq!(status.code(), Some(75), "{stderr}");
    assert_eq!(a.result()["interrupted_by"], "lease_lost", "{}", a.result());
    assert_eq!(overlaps_seen(shared.path()), "");

    // Positive control: the same trace of a run that is not frozen shows its program started.
    let _ = std::fs::remove_file(&traced_path);
    a.job("not-frozen", "ns")
        .wrapped(
            "/usr/bin/strace",
            [
                "-f",
                "-qq",
                "-e",
                "trace=execve",
                "-o",
                &traced_path.display().to_string(),
            ],
        )
        .expect_success()
        .run();
    let traced = std::fs::read_to_string(&traced_path).unwrap();
    assert!(!executed(&traced).is_empty(), "{traced}");
}

/// The programs a process traced by `strace` executed (jobenv itself, started by it, aside).
fn executed(trace: &str) -> Vec<&str> {
    trace
        .lines()
        .filter(|line| line.contains("execve(") && line.ends_with("= 0") && !line.contains("fediversity-jobenv"))
        .collect()
}
