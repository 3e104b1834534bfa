//! The smaller edges of cluster mode: a renewal that races the final write, and a connection
//! dropped before the program starts.

use std::time::Duration;

use fediversity_testkit::postgres;
use fediversity_testkit::process::{StreamWatch, read_pids};
use fediversity_testkit::tcp_proxy::Proxy;

use super::{Node, TIMING, Timing, finish, watched};

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
