//! The smaller edges of cluster mode: a renewal that races the final write, a connection
//! dropped before the program starts, and leases that went unrenewed while a run waited for its
//! node's own lock.

use std::time::Duration;

use fediversity_testkit::postgres;
use fediversity_testkit::process::{StreamWatch, read_pids, wait_exit, wait_until};
use fediversity_testkit::tcp_proxy::Proxy;

use super::{Node, TIMING, Timing, finish, watched};

/// A program that counts its runs on one node in `dir` (`started-<n>`, the node's runs of a
/// namespace come one at a time) and waits for `dir/go-<n>`.
fn counted(dir: &std::path::Path) -> String {
    let dir = dir.display();
    format!(
        "n=$(ls {dir} | grep -c '^started-'); n=$((n+1)); touch {dir}/started-$n; \
         while [ ! -e {dir}/go-$n ]; do sleep 0.05; done"
    )
}

/// The final write (the job's end) and a renewal of the job's lease can meet: the renewal, sent
/// once the end was written, finds the job's lease ended. That is this run's own doing, not a
/// lost lease: no "this run stops" after a success, and the namespace's lease is let go, not
/// left to expire. Renewals here come every 10 ms and every answer is 50 ms late, so that most
/// jobs' ends meet one.
#[test]
fn a_renewal_that_meets_the_final_write_is_no_lost_lease() {
    let db = postgres::cluster().jobenv_database();
    let proxy = Proxy::start(postgres::cluster().port);
    let a = Node::new("a", Some(&db.dsn_on(proxy.port)), "sleep 0.2");
    let eager = Timing {
        renew_every: Duration::from_millis(10),
        ..TIMING
    };
    proxy.delay_replies(Duration::from_millis(50));
    for job in 0..5 {
        let namespace = format!("race-{job}");
        let done = a.job_timed(&format!("race-{job}"), &namespace, eager).run();
        assert!(
            done.success() && !done.stderr.contains("this run stops"),
            "job {job}: a renewal after its end was taken for a lost lease\n{done:?}"
        );
        let released: bool = db
            .client()
            .query_one(
                "SELECT expires_at = '-infinity' FROM fediversity_jobenv.namespaces WHERE namespace = $1",
                &[&namespace],
            )
            .unwrap()
            .get(0);
        assert!(
            released,
            "job {job}: the namespace's lease was left to expire\n{done:?}"
        );
    }
}

/// A connection dropped while a run waits for a namespace (the database restarted: every
/// connection ends, and new ones are refused for a moment) is made anew, as the running phase
/// does, within the renew deadline: the job is not failed as a node that is not ready.
#[test]
fn a_connection_dropped_before_the_program_starts_is_made_again() {
    let db = postgres::cluster().jobenv_database();
    let proxy = Proxy::start(postgres::cluster().port);
    let shared = tempfile::tempdir().unwrap();
    let body = watched(shared.path(), false);
    let (a, b) = (
        Node::new("a", Some(&db.dsn_on(proxy.port)), &body),
        Node::new("b", Some(&db.dsn()), &body),
    );
    let holding = b.job("holding", "ns").spawn();
    read_pids(&shared.path().join("program-b.pid"), 1, Duration::from_secs(20));
    let mut waiting = a.job("waiting", "ns").args(["--lock-timeout", "30"]).spawn();
    let mut waiting_err = StreamWatch::new(waiting.stderr.take().unwrap());
    assert!(
        waiting_err.wait_for(b"is held on the cluster journal by", Duration::from_secs(20)),
        "{}",
        waiting_err.text()
    );
    // Node a's connection ends, and for 1 s (half the renew deadline) none is let in.
    proxy.reset(Duration::from_secs(1));
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    std::fs::write(shared.path().join("go-a"), "").unwrap();
    assert!(finish(holding).success());
    let status = waiting.wait().unwrap();
    let stderr = String::from_utf8_lossy(&waiting_err.finish()).into_owned();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(a.result()["status"], "succeeded");
}

/// A run waiting for its node's own lock of the namespace (another job of the node deploys it)
/// holds its job's lease on the cluster journal meanwhile. The database cannot be reached for
/// longer than the renew deadline: the run's renewals give up, and nothing renews its leases
/// from then on. The database answers again, and the other job ends: the run takes the
/// namespace's lease and writes its running entry (its job's lease had not expired yet), but
/// it must not start a program that nothing renews the leases of (it would be stopped as a
/// lost lease one renew deadline later, half deployed). It ends as a run whose leases were
/// lost before its program started: not started, a retry is safe.
#[test]
fn a_run_whose_renewals_gave_up_while_it_waited_for_the_nodes_lock_does_not_start_its_program() {
    let db = postgres::cluster().jobenv_database();
    let proxy = Proxy::start(postgres::cluster().port);
    let shared = tempfile::tempdir().unwrap();
    let a = Node::new("a", Some(&db.dsn()), &counted(shared.path()));
    // The waiting run reaches the database through the proxy; its job's lease lasts 8 s, so that
    // it has not expired when the run takes the namespace.
    let proxied = shared.path().join("proxied-dsn");
    std::fs::write(&proxied, format!("{}\n", db.dsn_on(proxy.port))).unwrap();
    let long = Timing {
        lease: Duration::from_secs(8),
        ..TIMING
    };
    let first = a.job("first", "ns").spawn();
    made(&shared.path().join("started-1"));
    let mut second = a
        .job_timed("second", "ns", long)
        .env("JOBENV_CLUSTER_DSN_FILE", &proxied)
        .args(["--lock-timeout", "60"])
        .spawn();
    let mut second_err = StreamWatch::new(second.stderr.take().unwrap());
    assert!(
        second_err.wait_for(b"namespace-ns.lock is held by", Duration::from_secs(20)),
        "{}",
        second_err.text()
    );
    // Past the renew deadline (2 s) and the retry after it, before the job's lease expires (8 s).
    proxy.cut();
    std::thread::sleep(Duration::from_secs(3));
    proxy.heal();
    std::fs::write(shared.path().join("go-1"), "").unwrap();
    assert!(finish(first).success());
    let status = wait_exit(&mut second, Duration::from_secs(30));
    // A program that did start waits for this.
    std::fs::write(shared.path().join("go-2"), "").unwrap();
    let status = status.or_else(|| second.wait().ok());
    let stderr = String::from_utf8_lossy(&second_err.finish()).into_owned();
    assert!(
        !shared.path().join("started-2").exists(),
        "the program started with nothing renewing its leases\n{stderr}"
    );
    assert_eq!(status.and_then(|s| s.code()), Some(75), "{stderr}");
    assert!(
        stderr.contains("the cluster journal did not renew this job's lease in time: the program is not started"),
        "{stderr}"
    );
    assert_eq!(a.result()["interrupted_by"], "lease_lost", "{}", a.result());
}

/// Waits for a file a program makes.
fn made(path: &std::path::Path) {
    assert!(
        wait_until(Duration::from_secs(20), || path.exists()),
        "{} was not made",
        path.display()
    );
}
