//! Which node holds a lease: containers on one host (Docker, Podman, Kubernetes, LXC) share the
//! kernel's boot id and may have their state directories at one path. Here two nodes' state
//! directories are each bound at the same path in a mount namespace of their own (`unshare -m`),
//! as two containers' volumes are: they are still two nodes, and neither takes the other's live
//! leases for its own. A node's own jobenv that is gone is still taken over at once.

use std::path::Path;
use std::time::Duration;

use fediversity_testkit::job_run::JobRun;
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::postgres;
use fediversity_testkit::process::{is_alive, kill_all, read_pids};

use super::{Node, TIMING, Timing, finish, overlaps_seen, runs, watched};

/// `run` on `node` with its state directory bound at `common`, in a mount namespace of its own.
fn contained(node: &Node, run: JobRun, common: &Path) -> JobRun {
    let own = node.f.state_dir();
    run.wrapped(
        "/usr/bin/unshare",
        [
            "-m".as_ref(),
            "--propagation".as_ref(),
            "private".as_ref(),
            "--".as_ref(),
            "/bin/sh".as_ref(),
            "-c".as_ref(),
            "mount --bind \"$0\" \"$1\" && shift && exec \"$@\"".as_ref(),
            own.as_os_str(),
            common.as_os_str(),
        ],
    )
    .env("JOBENV_STATE_DIR", common)
}

#[test]
fn two_containers_whose_state_directories_share_a_path_and_a_boot_id_are_two_nodes() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let common = shared.path().join("state");
    std::fs::create_dir(&common).unwrap();
    let body = watched(shared.path(), false);
    let (a, b) = (
        Node::new("a", Some(&db.dsn()), &body),
        Node::new("b", Some(&db.dsn()), &body),
    );
    let first = contained(&a, a.job("held-1", "ns"), &common).spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    // Node b: a deploy of the same namespace, and Windmill's re-run of node a's job picked up by
    // node b's worker. Both wait for node a: its leases are live, and they are not node b's.
    let other = contained(&b, b.job("other-1", "ns").args(["--lock-timeout", "30"]), &common).spawn();
    let rerun = contained(&b, b.job("held-1", "ns").args(["--lock-timeout", "30"]), &common).spawn();
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !shared.path().join("program-b.pid").exists(),
        "node b took node a's leases for its own and ran beside it: {:?}",
        runs(&shared.path().join("log"))
    );
    for node in ["a", "b"] {
        std::fs::write(shared.path().join(format!("go-{node}")), "").unwrap();
    }
    let (first, rerun, other) = (finish(first), finish(rerun), finish(other));
    assert!(first.success(), "node a's deploy was ended by node b: {first:?}");
    assert!(
        rerun.success()
            && rerun
                .stderr
                .contains("jobenv: job held-1 already ended (succeeded, exit code 0, attempt 1, at "),
        "the job ran again on node b: {rerun:?}"
    );
    assert!(other.success(), "{other:?}");
    let all = runs(&shared.path().join("log"));
    assert_eq!(
        all.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "{all:?}"
    );
    assert_eq!(overlaps_seen(shared.path()), "", "{all:?}");
    // Each state directory has an identity of its own.
    let id = |node: &Node| std::fs::read_to_string(node.f.state_dir().join("node-id")).unwrap();
    assert_ne!(id(&a), id(&b));

    // Positive control: a jobenv of node a that is gone (SIGKILLed) is node a's own, as the
    // locks in its state directory prove: its leases are taken over at once, long before they
    // expire (20 s here).
    let long = Timing {
        lease: Duration::from_secs(20),
        ..TIMING
    };
    std::fs::remove_file(shared.path().join("go-a")).unwrap();
    std::fs::remove_file(shared.path().join("program-a.pid")).unwrap();
    let mut killed = contained(&a, a.job_timed("gone-1", "ns2", long), &common).spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(killed.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    killed.wait().unwrap();
    let expires: f64 = db
        .client()
        .query_one(
            "SELECT extract(epoch FROM expires_at)::float8 FROM fediversity_jobenv.namespaces WHERE namespace = 'ns2'",
            &[],
        )
        .unwrap()
        .get(0);
    std::fs::write(shared.path().join("go-a"), "").unwrap();
    let again = contained(&a, a.job_timed("gone-1", "ns2", long), &common)
        .expect_success()
        .expect_stderr_contains("jobenv: warning: job gone-1: attempt 1 was interrupted; running it again as attempt 2")
        .run();
    let restarted = runs(&shared.path().join("log")).last().unwrap().1;
    assert!(
        restarted < expires - 5.0,
        "node a waited for its own gone jobenv's lease to expire: started {:.1}s before it\n{again:?}",
        expires - restarted
    );
    assert_eq!(
        a.f.journal_entry(jobenv_bin!(), "gone-1")["earlier"][0]["interrupted_by"],
        "jobenv_gone"
    );
}

/// A job id names one request: a run of another one is refused before it takes anything. Here
/// the job's holder is node a's own jobenv, gone (SIGKILLed): a run on node a could take its
/// lease at once, and a run of the same request does; one of another request leaves the row as
/// it is.
#[test]
fn a_run_of_another_request_is_refused_before_it_takes_the_jobs_lease() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let a = Node::new("a", Some(&db.dsn()), &watched(shared.path(), false));
    let mut killed = a.job("req-1", "ns").spawn();
    read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(killed.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    killed.wait().unwrap();
    let row = || -> (i64, String, Option<f64>) {
        let row = db
            .client()
            .query_one(
                "SELECT epoch, holder, extract(epoch FROM expires_at)::float8 FROM fediversity_jobenv.jobs WHERE job_id = 'req-1'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let before = row();
    a.job("req-1", "other")
        .expect_code(2)
        .expect_stderr_contains("job req-1 was already run for apply of web in namespace ns")
        .run();
    assert_eq!(row(), before, "a run of another request took the job's lease");
    // Positive control: the same request takes it over at once (this node's own gone jobenv).
    std::fs::write(shared.path().join("go-a"), "").unwrap();
    a.job("req-1", "ns")
        .expect_success()
        .expect_stderr_contains("attempt 1 was interrupted; running it again as attempt 2")
        .run();
    assert_ne!(row().0, before.0);
}

/// A state directory copied while its node deployed (to set up another node, say: the copy gets
/// an identity of its own) holds that deploy's record of its program tree. The copy's jobenv
/// holds its own copies of the node-local locks, which prove nothing of the original's jobenv:
/// neither its `recover` (the new worker's start) nor a deploy of the namespace on it may stop
/// the original's live program tree (one host, one user: it could). A record of its own node is
/// still acted on: the positive control, with the original's jobenv gone (SIGKILLed, its guard
/// stopped so that the record alone can end what of the tree left its process group).
#[test]
fn a_copy_of_a_state_directory_made_during_a_deploy_leaves_that_deploys_tree_alone() {
    let db = postgres::cluster().jobenv_database();
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().display();
    // A helper in a session of its own, which outlives its jobenv's SIGKILL.
    let body = format!(
        "setsid sleep 120 & echo $! > {dir}/left-$NODE.pid; {}",
        watched(shared.path(), false)
    );
    let (a, b) = (
        Node::new("a", Some(&db.dsn()), &body),
        Node::new("b", Some(&db.dsn()), &body),
    );
    // Should the copy run its deploy, it ends at once (the assertions below say so).
    std::fs::write(shared.path().join("go-b"), "").unwrap();
    let mut running = a.job("copied-1", "ns").spawn();
    let program = read_pids(&shared.path().join("program-a.pid"), 1, Duration::from_secs(20))[0];
    let left = read_pids(&shared.path().join("left-a.pid"), 1, Duration::from_secs(20))[0];
    let copy = shared.path().join("copy");
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(a.f.state_dir())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    assert!(
        std::fs::read_dir(copy.join("locks"))
            .unwrap()
            .any(|e| e.unwrap().file_name() == "namespace-ns.tree.json"),
        "the copy holds no record of the tree: the test proves nothing"
    );
    // The copy's worker starts (recover), then a deploy of the namespace comes to it: it waits
    // for node a's lease of the namespace, and gives up.
    let recovered =
        b.f.jobenv(jobenv_bin!())
            .args(["recover"])
            .env("JOBENV_STATE_DIR", &copy)
            .env("JOBENV_CLUSTER_DSN_FILE", b.dsn_file.as_ref().unwrap())
            .run();
    assert!(recovered.success(), "{recovered:?}");
    assert!(
        recovered
            .stderr
            .contains("namespace-ns.tree.json: it was written in another state directory"),
        "{recovered:?}"
    );
    let busy = b
        .job("copied-2", "ns")
        .env("JOBENV_STATE_DIR", &copy)
        .args(["--lock-timeout", "2"])
        .run();
    assert_eq!(busy.code, Some(2), "{busy:?}");
    assert!(
        is_alive(program) && is_alive(left),
        "the copy's jobenv stopped the original's live program tree\n{recovered:?}\n{busy:?}"
    );
    assert!(
        !shared.path().join("program-b.pid").exists(),
        "the copy ran its deploy beside the original's"
    );

    // Positive control: node a's own record is acted on once its jobenv is gone. Its guard is
    // stopped first (it would kill the tree by itself); the helper outlives the SIGKILL.
    let jobenv = running.id() as i32;
    let guard = guard_of(jobenv, "copied-1").expect("node a's deploy has a guard");
    let signal = |pid: i32, signal| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    signal(guard, nix::sys::signal::Signal::SIGSTOP);
    signal(jobenv, nix::sys::signal::Signal::SIGKILL);
    running.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let alive = is_alive(left);
    let recovered = a.f.jobenv(jobenv_bin!()).args(["recover"]).run();
    signal(guard, nix::sys::signal::Signal::SIGKILL);
    kill_all(&[left, program]);
    assert!(
        alive,
        "the control's helper is gone before recover: the control proves nothing"
    );
    assert!(recovered.success(), "{recovered:?}");
    assert!(
        recovered
            .stderr
            .contains("process(es) of the program tree of job copied-1 (attempt 1"),
        "node a's recover left its own deploy's tree running\n{recovered:?}"
    );
}

/// The guard of job `job_id`'s deploy run by jobenv `jobenv`: a process of jobenv's binary (a
/// fork of it), not jobenv itself, with that job's environment.
fn guard_of(jobenv: i32, job_id: &str) -> Option<i32> {
    let needle = format!("WM_JOB_ID={job_id}\0");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let ours =
            pid != jobenv && exe == jobenv_bin!() && environ.windows(needle.len()).any(|w| w == needle.as_bytes());
        ours.then_some(pid)
    })
}
