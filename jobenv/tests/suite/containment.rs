//! The program tree is a cgroup of the deploy's own. Everything a deploy starts is in it however
//! it leaves the process tree (a `setsid`'d helper, a double-forked daemon, a Python step run
//! through `subprocess.run`, which closes the descriptors it does not pass), is stopped with it
//! on a cancel, the timeout, a lost worker and `drain`; and when its jobenv is gone (SIGKILLed,
//! or Windmill's group SIGKILL that missed what left the group), the next run of the namespace
//! or `recover` stops what is left, with grace, before anything else of the namespace runs, and
//! records it in the journal.
//!
//! These tests ask for a cgroup (`JOBENV_CONTAINMENT=cgroup`): without a writable cgroup v2 (CI
//! runs them as root on one) they fail instead of falling back. Where the fallback, the /proc
//! walk, behaves otherwise, the test shows that too: it is what the cgroup is for.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use fediversity_testkit::cgroup::{cgroup_of, populated, recorded};
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, WORKER_UID, write_executable};
use fediversity_testkit::process::{Running, is_alive, kill_all, read_pids, wait_exit, wait_until};
use fediversity_testkit::worker::Worker;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};

/// A node whose program does what the payload's `STEP` says, then runs until `go` exists:
/// `escape` starts a helper in a session of its own (`setsid`) and a double-forked daemon;
/// `step` execs Python, whose step (`subprocess.run`, descriptors closed) runs until stopped;
/// `stubborn` starts a helper in a session of its own that ignores SIGTERM; `capture` moves its
/// jobenv into the program's own cgroup (as any process of the worker's user may) and logs
/// `captured`; `plain` only logs. Every process logs `<name> TERM` when it gets SIGTERM, then
/// exits.
struct Deploy {
    f: Fixture,
    dir: PathBuf,
}

impl Deploy {
    fn new(containment: &'static str) -> Self {
        let mut f = Fixture::with_containment(containment);
        // The programs' files, in a directory of their own: a test that lets the worker's user
        // write them must not let it change the state directory's path (jobenv as root refuses
        // a state directory at such a path).
        let dir = f.path().join("files");
        std::fs::create_dir(&dir).unwrap();
        let d = dir.display();
        // Runs until SIGTERM; its pid goes to <name>.pid. Its output goes nowhere: once its
        // jobenv is gone, a write to the job's output would end it by SIGPIPE instead.
        write_executable(
            &dir.join("escapee"),
            &format!(
                "#!/bin/sh\nexec >/dev/null 2>&1\ntrap \"echo $1 TERM >> {d}/log; exit 0\" TERM\necho $$ > {d}/$1.pid.tmp && mv {d}/$1.pid.tmp {d}/$1.pid\nwhile :; do sleep 0.05; done\n"
            ),
        );
        // Ignores SIGTERM: only SIGKILL ends it.
        write_executable(
            &dir.join("stubborn"),
            &format!(
                "#!/bin/sh\nexec >/dev/null 2>&1\ntrap '' TERM\necho $$ > {d}/$1.pid.tmp && mv {d}/$1.pid.tmp {d}/$1.pid\nwhile :; do sleep 0.05; done\n"
            ),
        );
        std::fs::write(
            dir.join("step.py"),
            format!("import subprocess\nsubprocess.run([\"{d}/escapee\", \"step\"])\n"),
        )
        .unwrap();
        f.program(
            "web",
            "apply",
            &format!(
                "echo \"start $STEP\" >> {d}/log\necho $$ > {d}/program.pid.tmp && mv {d}/program.pid.tmp {d}/program.pid\n\
                 case \"$STEP\" in\n\
                 escape) setsid {d}/escapee helper </dev/null >/dev/null 2>&1 &\n  ( setsid {d}/escapee daemon </dev/null >/dev/null 2>&1 & ) ;;\n\
                 step) exec /usr/bin/python3 {d}/step.py ;;\n\
                 stubborn) setsid {d}/stubborn \"stubborn-$DEPLOYMENT_NAMESPACE\" </dev/null >/dev/null 2>&1 & ;;\n\
                 capture) p=$$; while [ \"$(cat /proc/$p/comm)\" != fediversity-job ]; do p=$(cut -d' ' -f4 /proc/$p/stat); done\n  \
                 mnt=$(awk '{{for (i = 1; i <= NF; i++) if ($i == \"-\") {{ if ($(i + 1) == \"cgroup2\") print $5; break }}}}' /proc/self/mountinfo | head -n 1)\n  \
                 echo $p > \"$mnt$(sed -n 's/^0:://p' /proc/self/cgroup)/cgroup.procs\" && echo captured >> {d}/log ;;\n\
                 esac\n\
                 while [ ! -e {d}/go ]; do sleep 0.05; done\necho \"end $STEP\" >> {d}/log"
            ),
        );
        f.declare("STEP", None);
        Deploy { f, dir }
    }

    fn payload(step: &str) -> Value {
        json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "STEP": step})
    }

    /// jobenv as a front-end's subprocess.
    fn start(&self, step: &str, args: &[&str]) -> Running {
        self.f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .args(args)
            .payload(&Self::payload(step))
            .spawn()
    }

    /// Under a Windmill worker's stand-in (jobenv leads its process group).
    fn start_under_worker(&self, job_id: &str, step: &str) -> Worker {
        Worker::start(
            &self.f,
            jobenv_bin!(),
            job_id,
            "apply",
            &Self::payload(step),
            &["--grace", "1"],
        )
    }

    fn pid(&self, name: &str) -> i32 {
        read_pids(&self.dir.join(format!("{name}.pid")), 1, Duration::from_secs(20))[0]
    }

    /// The helper and the daemon, once both run.
    fn escapees(&self) -> Vec<i32> {
        vec![self.pid("helper"), self.pid("daemon")]
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn go(&self) {
        std::fs::write(self.dir.join("go"), "").unwrap();
    }

    fn entry(&self, job_id: &str) -> Value {
        self.f.journal_entry(jobenv_bin!(), job_id)
    }
}

/// Each of `pids` is gone within `limit`, and each of `names` logged its SIGTERM first (it was
/// given its grace, not just killed).
fn assert_stopped_with_grace(d: &Deploy, pids: &[i32], names: &[&str], limit: Duration) {
    let gone = wait_until(limit, || pids.iter().all(|&p| !is_alive(p)));
    let alive: Vec<_> = pids.iter().filter(|&&p| is_alive(p)).collect();
    kill_all(pids);
    assert!(gone, "still running: {alive:?} of {pids:?}");
    let log = d.log();
    for name in names {
        assert!(
            log.contains(&format!("{name} TERM")),
            "{name} was not given SIGTERM first: {log:?}"
        );
    }
}

fn sid(pid: i32) -> Option<Pid> {
    nix::unistd::getsid(Some(Pid::from_raw(pid))).ok()
}

#[test]
fn the_program_and_what_leaves_its_session_run_in_a_cgroup_of_the_deploys_own() {
    let d = Deploy::new("cgroup");
    let mut jobenv = d.start("escape", &[]);
    let (program, escapees) = (d.pid("program"), d.escapees());
    let dirs = recorded(&d.f.state_dir());
    assert_eq!(dirs.len(), 1, "the namespace's tree record names one cgroup: {dirs:?}");
    let name = dirs[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with(&format!("jobenv-ns-{}-", jobenv.id())), "{name}");
    // Under the cgroup jobenv runs in (this test's), wherever the v2 hierarchy is mounted.
    let expected = format!(
        "{}/{name}",
        cgroup_of(std::process::id() as i32).unwrap().trim_end_matches('/')
    );
    for pid in [program].iter().chain(&escapees) {
        assert_eq!(cgroup_of(*pid), Some(expected.clone()), "pid {pid}");
    }
    assert!(
        escapees.iter().all(|&p| sid(p) != sid(program)),
        "the helper and the daemon left the program's session"
    );
    // The program ends; what it left running is stopped with grace, and the cgroup goes.
    d.go();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(10)).and_then(|s| s.code()),
        Some(0)
    );
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    assert!(!dirs[0].exists(), "the deploy's cgroup is removed once it is empty");
    assert_eq!(
        recorded(&d.f.state_dir()),
        Vec::<PathBuf>::new(),
        "the tree record is removed with it"
    );
}

#[test]
fn without_a_cgroup_the_program_shares_jobenvs_and_nothing_is_recorded() {
    let d = Deploy::new("proc");
    let mut jobenv = d.start("plain", &[]);
    let program = d.pid("program");
    assert_eq!(
        cgroup_of(program),
        cgroup_of(std::process::id() as i32),
        "JOBENV_CONTAINMENT=proc makes no cgroup"
    );
    assert_eq!(recorded(&d.f.state_dir()), Vec::<PathBuf>::new());
    d.go();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(10)).and_then(|s| s.code()),
        Some(0)
    );
}

#[test]
fn a_cancel_stops_a_setsid_helper_and_a_double_forked_daemon() {
    let d = Deploy::new("cgroup");
    let mut jobenv = d.start("escape", &["--grace", "1"]);
    let escapees = d.escapees();
    assert!(
        escapees.iter().all(|&p| is_alive(p)),
        "positive control: both run before the cancel"
    );
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(5)).and_then(|s| s.code()),
        Some(143)
    );
    // jobenv has exited: anything still running would be left for good.
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
}

/// A program can move its jobenv into its own cgroup (the worker's user may write the
/// `cgroup.procs` of jobenv's cgroup and of the deploy's): a cancel must not make jobenv kill
/// itself with the tree (its entry would stay `running`, and the job run again). It moves
/// itself back out, and stops the tree as always.
#[test]
fn a_program_that_moves_jobenv_into_its_cgroup_does_not_make_it_kill_itself_on_a_cancel() {
    let d = Deploy::new("cgroup");
    let mut jobenv =
        d.f.jobenv(jobenv_bin!())
            .verb("apply")
            .args(["--grace", "1", "--job-id", "captured-1"])
            .payload(&Deploy::payload("capture"))
            .spawn();
    let program = d.pid("program");
    assert!(
        wait_until(Duration::from_secs(10), || d.log().contains(&"captured".to_owned())),
        "{:?}",
        d.log()
    );
    // Positive control: jobenv is in its program's cgroup now.
    assert_eq!(cgroup_of(jobenv.id() as i32), cgroup_of(program));
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGTERM).unwrap();
    let status = wait_exit(&mut jobenv, Duration::from_secs(10));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut jobenv.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(143),
        "jobenv did not end as a cancel: {stderr}"
    );
    assert!(!is_alive(program));
    assert!(
        stderr.contains("jobenv: warning: jobenv was moved into the program tree's cgroup "),
        "{stderr}"
    );
    assert_eq!(d.entry("captured-1")["status"], "canceled");
}

#[test]
fn the_timeout_stops_a_setsid_helper_and_a_double_forked_daemon() {
    let d = Deploy::new("cgroup");
    let mut jobenv = d.start("escape", &["--grace", "1", "--timeout", "2"]);
    let escapees = d.escapees();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(15)).and_then(|s| s.code()),
        Some(124)
    );
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
}

#[test]
fn a_lost_worker_stops_a_setsid_helper_and_a_double_forked_daemon() {
    let d = Deploy::new("cgroup");
    let mut worker = d.start_under_worker("lost", "escape");
    let escapees = d.escapees();
    worker.kill();
    // Noticed within about a second, then the grace (1 s).
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::from_secs(5));
    assert!(
        wait_until(Duration::from_secs(2), || !worker.job_alive()),
        "jobenv outlived its job"
    );
    assert_eq!(d.entry("lost")["interrupted_by"], "worker_lost");
}

#[test]
fn drain_stops_a_setsid_helper_and_a_double_forked_daemon() {
    let d = Deploy::new("cgroup");
    let mut worker = d.start_under_worker("drained", "escape");
    let escapees = d.escapees();
    let done =
        d.f.jobenv(jobenv_bin!())
            .args(["drain", "--wait", "0"])
            .expect_success()
            .run();
    assert!(done.stderr.contains("draining: stopping job drained"), "{done:?}");
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    assert!(worker.wait(Duration::from_secs(5)).is_some());
    assert_eq!(d.entry("drained")["interrupted_by"], "node_stopped");
}

/// Windmill's default cancel: SIGKILL to the job's process group. jobenv and the program die;
/// the helper and the daemon, in sessions of their own, do not (the positive control of what
/// follows), and their cgroup stays populated. Returns them.
fn group_sigkill(d: &Deploy, job_id: &str) -> Vec<i32> {
    let mut worker = d.start_under_worker(job_id, "escape");
    let (program, escapees) = (d.pid("program"), d.escapees());
    killpg(Pid::from_raw(worker.job), Signal::SIGKILL).unwrap();
    assert!(worker.wait(Duration::from_secs(5)).is_some());
    assert!(
        wait_until(Duration::from_secs(2), || !is_alive(program)),
        "the program survived its group's SIGKILL"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        escapees.iter().all(|&p| is_alive(p)),
        "the group SIGKILL was to miss what left the group: {escapees:?}"
    );
    let dirs = recorded(&d.f.state_dir());
    assert!(
        dirs.len() == 1 && populated(&dirs[0]),
        "the deploy's cgroup holds them: {dirs:?}"
    );
    escapees
}

/// The journal entry of `job_id` records its orphans, stopped by `by`, and the attempt as
/// interrupted.
fn assert_recorded(entry: &Value, by: &str) {
    assert_eq!(
        (entry["status"].as_str(), entry["reason"].as_str()),
        (Some("failed"), Some("interrupted")),
        "{entry}"
    );
    let orphans = &entry["orphans"];
    assert!(orphans["found"].as_u64().is_some_and(|n| n >= 2), "{entry}");
    assert_eq!(orphans["killed"], 0, "SIGTERM was enough: {entry}");
    assert!(
        orphans["stopped_by"].as_str().is_some_and(|s| s.starts_with(by)),
        "{entry}"
    );
    assert!(orphans["stopped_at"].is_string(), "{entry}");
}

#[test]
fn after_a_group_sigkill_the_next_run_of_the_namespace_stops_what_is_left_before_it_runs() {
    let d = Deploy::new("cgroup");
    let escapees = group_sigkill(&d, "killed");
    let job = d.entry("killed")["pid"].as_i64().unwrap();
    d.go();
    let done =
        d.f.jobenv(jobenv_bin!())
            .verb("apply")
            .args(["--job-id", "next"])
            .payload(&Deploy::payload("plain"))
            .expect_success()
            .run();
    // Two shells, and whichever of their `sleep`s runs at that moment.
    let said = format!(
        "process(es) of the program tree of job killed (attempt 1, jobenv pid {job}) still running without their jobenv: stopping them (grace 1s)"
    );
    assert!(
        done.stderr_lines()
            .iter()
            .any(|l| l.starts_with("jobenv: warning: namespace ns: ") && l.ends_with(&said)),
        "{done:?}"
    );
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    let log = d.log();
    let at = |line: &str| {
        log.iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("{line:?} not in {log:?}"))
    };
    assert!(
        at("helper TERM") < at("start plain") && at("daemon TERM") < at("start plain"),
        "the next deploy ran beside them: {log:?}"
    );
    assert_recorded(&d.entry("killed"), "job next, jobenv pid ");
    assert_eq!(recorded(&d.f.state_dir()), Vec::<PathBuf>::new());
}

#[test]
fn after_a_group_sigkill_recover_stops_what_is_left_and_records_it() {
    let d = Deploy::new("cgroup");
    let escapees = group_sigkill(&d, "killed");
    let dir = recorded(&d.f.state_dir()).remove(0);
    let done = d.f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    let printed: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(printed.as_array().map(Vec::len), Some(1), "{done:?}");
    assert_eq!(printed[0]["job_id"], "killed");
    assert_recorded(&printed[0], "recover");
    assert_recorded(&d.entry("killed"), "recover");
    assert!(
        !dir.exists() && recorded(&d.f.state_dir()).is_empty(),
        "the cgroup and its record are gone"
    );
    // Nothing left: a second recover does nothing.
    let again = d.f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    assert_eq!(serde_json::from_str::<Value>(&again.stdout).unwrap(), json!([]));
}

#[test]
fn windmills_re_run_of_the_same_job_records_its_earlier_attempts_orphans() {
    let d = Deploy::new("cgroup");
    let escapees = group_sigkill(&d, "zombie");
    d.go();
    let mut again = d.start_under_worker("zombie", "plain");
    assert_eq!(again.wait(Duration::from_secs(30)), Some(0), "{}", again.log.text());
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    let entry = d.entry("zombie");
    assert_eq!(
        (entry["attempt"].as_u64(), entry["status"].as_str()),
        (Some(2), Some("succeeded")),
        "{entry}"
    );
    assert!(entry.get("orphans").is_none(), "attempt 2 left nothing: {entry}");
    assert_recorded(&entry["earlier"][0], "job zombie, jobenv pid ");
}

#[test]
fn drain_stops_what_a_jobenv_it_had_to_sigkill_left_in_its_cgroup() {
    let d = Deploy::new("cgroup");
    let mut worker = d.start_under_worker("stuck", "escape");
    let escapees = d.escapees();
    // A jobenv that cannot act on drain's SIGTERM: drain SIGKILLs its process group after the
    // grace (1 s) and 5 s, which the helper and the daemon, in sessions of their own, escape.
    kill(Pid::from_raw(worker.job), Signal::SIGSTOP).unwrap();
    let done =
        d.f.jobenv(jobenv_bin!())
            .args(["drain", "--wait", "0"])
            .expect_success()
            .run();
    assert!(done.stderr.contains("did not end within 6s: SIGKILL"), "{done:?}");
    assert!(worker.wait(Duration::from_secs(5)).is_some());
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    let printed: Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(printed[0]["interrupted_by"], "node_stopped", "{printed}");
    assert_recorded(&printed[0], "drain");
    assert!(recorded(&d.f.state_dir()).is_empty());
}

/// Whether `pid` holds a descriptor of a file whose path ends with `name`.
fn holds(pid: i32, name: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target.to_string_lossy().ends_with(name)))
}

/// A Python program's step (`subprocess.run`, descriptors closed) outlives its SIGKILLed
/// jobenv: the program dies of its parent-death signal, the step runs on, without the
/// namespace's tree lock. Then a second deploy of the namespace runs. Returns the step and
/// whether it still ran when the second deploy's program started.
fn second_deploy_beside_a_step(containment: &'static str) -> (Deploy, i32, bool) {
    let d = Deploy::new(containment);
    let mut jobenv = d.start("step", &["--job-id", "stepper", "--grace", "1"]);
    let (python, step) = (d.pid("program"), d.pid("step"));
    let lock = "namespace-ns.tree.lock";
    assert!(
        holds(python, lock) && !holds(step, lock),
        "the step runs without the tree lock that its program holds"
    );
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    jobenv.wait().unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || !is_alive(python)),
        "the program outlived its SIGKILLed jobenv"
    );
    assert!(is_alive(step), "the step outlives the program");
    std::fs::write(d.dir.join("go"), "").unwrap();
    d.f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "second"])
        .payload(&Deploy::payload("plain"))
        .expect_success()
        .run();
    let log = d.log();
    let beside = !log.iter().any(|l| l == "step TERM")
        || log.iter().position(|l| l == "start plain") < log.iter().position(|l| l == "step TERM");
    (d, step, beside)
}

#[test]
fn a_step_that_closed_its_descriptors_keeps_the_namespace_locked_until_it_ends() {
    let (d, step, beside) = second_deploy_beside_a_step("cgroup");
    assert!(!beside, "the second deploy ran while the step still ran: {:?}", d.log());
    assert_stopped_with_grace(&d, &[step], &["step"], Duration::ZERO);
    let entry = d.entry("stepper");
    assert!(entry["orphans"]["found"].as_u64().is_some_and(|n| n >= 1), "{entry}");
}

#[test]
fn without_a_cgroup_a_step_that_closed_its_descriptors_does_not_hold_the_namespace() {
    // The fallback's weakness, which docs/operators/lifecycle.md states: nothing holds the tree lock once the
    // program is gone, and nothing finds the step.
    let (d, step, beside) = second_deploy_beside_a_step("proc");
    let alive = is_alive(step);
    kill_all(&[step]);
    assert!(
        beside && alive,
        "the /proc walk was expected to lose the step: {:?}",
        d.log()
    );
}

/// A cgroup `<name>-<pid>` below this test's, delegated to the worker's user as systemd hands a
/// unit's user one (`Delegate=yes`): the directory and the files that move processes are that
/// user's. Returns it and its `cgroup.procs`, open for writing (a child writes itself into it
/// before it execs).
fn delegated_cgroup(name: &str) -> (PathBuf, std::fs::File) {
    let own = fediversity_testkit::cgroup::dir_of(std::process::id() as i32).expect("this test's cgroup");
    let unit = own.join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir(&unit).unwrap();
    for path in [
        unit.clone(),
        unit.join("cgroup.procs"),
        unit.join("cgroup.threads"),
        unit.join("cgroup.subtree_control"),
    ] {
        std::os::unix::fs::chown(&path, Some(WORKER_UID), Some(WORKER_UID)).unwrap();
    }
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(unit.join("cgroup.procs"))
        .unwrap();
    (unit, procs)
}

/// As under systemd with `Delegate=yes` and `User=`: jobenv runs as the worker's user in a
/// cgroup that user owns (the unit's), and makes the deploy's cgroup below it.
#[test]
fn an_unprivileged_jobenv_in_a_delegated_cgroup_contains_its_program() {
    let d = Deploy::new("cgroup");
    let (unit, procs) = delegated_cgroup("delegated");
    let stand_in = d.f.nix_shell_stand_in();
    d.f.hand_to(WORKER_UID);
    // The program's pid files and log, written as the worker's user.
    std::fs::set_permissions(&d.dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut run =
        d.f.jobenv(jobenv_bin!())
            .verb("apply")
            .args(["--grace", "1", "--nix-shell", stand_in.to_str().unwrap()]);
    let procs_fd = std::os::fd::AsRawFd::as_raw_fd(&procs);
    // SAFETY: between fork and exec only system calls: into the unit's cgroup as root (as
    // systemd starts a unit's process), then the worker's user.
    unsafe {
        run.command().pre_exec(move || {
            if nix::libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            let id = WORKER_UID;
            if nix::libc::setgroups(0, std::ptr::null()) != 0
                || nix::libc::setgid(id) != 0
                || nix::libc::setuid(id) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut jobenv = run.payload(&Deploy::payload("escape")).spawn();
    let (program, escapees) = (d.pid("program"), d.escapees());
    let unit_cgroup = cgroup_of(jobenv.id() as i32).unwrap();
    assert!(
        unit_cgroup.ends_with(&format!("/delegated-{}", std::process::id())),
        "{unit_cgroup}"
    );
    let deploy = cgroup_of(program).unwrap();
    assert!(
        deploy.starts_with(&format!("{unit_cgroup}/jobenv-ns-{}-", jobenv.id())),
        "{deploy}"
    );
    assert!(escapees.iter().all(|&p| cgroup_of(p).as_ref() == Some(&deploy)));
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGTERM).unwrap();
    assert_eq!(
        wait_exit(&mut jobenv, Duration::from_secs(5)).and_then(|s| s.code()),
        Some(143)
    );
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::ZERO);
    assert!(
        wait_until(Duration::from_secs(2), || std::fs::remove_dir(&unit).is_ok()),
        "the deploy's cgroup was left in the unit's"
    );
}

/// What deploys of several namespaces left running is stopped by `recover` under one deadline:
/// each gets its grace, at the same time, not one after the other.
#[test]
fn recover_stops_what_several_deploys_left_under_one_deadline() {
    let d = Deploy::new("cgroup");
    let mut stubborn = Vec::new();
    for (job, namespace) in [("one", "ns"), ("two", "ns2")] {
        let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": namespace, "STEP": "stubborn"});
        let mut worker = Worker::start(&d.f, jobenv_bin!(), job, "apply", &payload, &["--grace", "3"]);
        stubborn.push(d.pid(&format!("stubborn-{namespace}")));
        killpg(Pid::from_raw(worker.job), Signal::SIGKILL).unwrap();
        assert!(worker.wait(Duration::from_secs(5)).is_some());
    }
    assert_eq!(
        recorded(&d.f.state_dir()).len(),
        2,
        "positive control: both cgroups are left populated"
    );
    let started = std::time::Instant::now();
    let done = d.f.jobenv(jobenv_bin!()).args(["recover"]).expect_success().run();
    let took = started.elapsed();
    let gone = wait_until(Duration::from_secs(2), || stubborn.iter().all(|&p| !is_alive(p)));
    kill_all(&stubborn);
    assert!(gone, "{done:?}");
    // Each was given its 3 s of grace (it ignores SIGTERM, so it took all of it), together.
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(5),
        "recover took {took:?}: {done:?}"
    );
    for job in ["one", "two"] {
        let entry = d.entry(job);
        assert!(entry["orphans"]["killed"].as_u64().is_some_and(|n| n >= 1), "{entry}");
        assert_eq!(entry["orphans"]["stopped_by"], "recover", "{entry}");
    }
}

/// A deploy run by hand as root in the worker's state directory runs as the worker (jobenv
/// becomes the state directory's owner first), and so its cgroup is the worker's, made by the
/// worker: the node's own `recover` (which runs as the worker's user) takes it for one of its
/// deploys and stops what it left when its jobenv was SIGKILLed, with grace. Where the worker
/// may not make a cgroup (root's own, a login session's), a deploy that must have one is
/// refused and nothing runs.
#[test]
fn a_deploy_run_as_root_in_the_workers_state_directory_is_the_workers_and_so_is_its_cgroup() {
    use std::os::unix::fs::MetadataExt;
    let d = Deploy::new("cgroup");
    let stand_in = d.f.nix_shell_stand_in();
    d.f.hand_to(WORKER_UID);
    // The program's pid files and log, written as the worker's user.
    std::fs::set_permissions(&d.dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let args = [
        "--job-id",
        "by-hand",
        "--grace",
        "1",
        "--nix-shell",
        stand_in.to_str().unwrap(),
    ];
    // In this test's cgroup, root's: refused, nothing ran.
    d.f.jobenv(jobenv_bin!())
        .verb("apply")
        .args(args)
        .payload(&Deploy::payload("escape"))
        .expect_code(2)
        .expect_stderr_contains("the program tree must be a cgroup of its own (JOBENV_CONTAINMENT=cgroup), and none can be made: cannot create the cgroup")
        .expect_stderr_contains("Permission denied")
        .run();
    assert!(!d.dir.join("program.pid").exists(), "a program ran without its cgroup");
    // In a cgroup delegated to the worker's user (`systemd-run --uid=<worker> -p Delegate=yes`
    // gives one), started as root.
    let (unit, procs) = delegated_cgroup("by-hand");
    let procs_fd = std::os::fd::AsRawFd::as_raw_fd(&procs);
    let mut run = d.f.jobenv(jobenv_bin!()).verb("apply").args(args);
    // SAFETY: one write(2) between fork and exec, on a descriptor opened before the fork.
    unsafe {
        run.command().pre_exec(move || {
            if nix::libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut jobenv = run.payload(&Deploy::payload("escape")).spawn();
    let escapees = d.escapees();
    let dirs = recorded(&d.f.state_dir());
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert_eq!(
        std::fs::metadata(&dirs[0]).unwrap().uid(),
        WORKER_UID,
        "the deploy's cgroup is the state directory owner's"
    );
    assert!(dirs[0].starts_with(&unit), "{dirs:?}");
    kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL).unwrap();
    jobenv.wait().unwrap();
    assert!(
        escapees.iter().all(|&p| is_alive(p)),
        "positive control: what left the session outlives the SIGKILLed jobenv"
    );
    let mut recover = d.f.jobenv(jobenv_bin!()).args(["recover"]);
    recover.command().uid(WORKER_UID).gid(WORKER_UID);
    let done = recover.expect_success().run();
    // The worker's own processes: each gets its SIGTERM and its grace.
    assert_stopped_with_grace(&d, &escapees, &["helper", "daemon"], Duration::from_secs(5));
    let entry = d.entry("by-hand");
    assert_eq!(
        (entry["status"].as_str(), entry["orphans"]["stopped_by"].as_str()),
        (Some("failed"), Some("recover")),
        "{entry} {done:?}"
    );
    assert!(
        recorded(&d.f.state_dir()).is_empty(),
        "the record goes once the cgroup is empty"
    );
    assert!(
        wait_until(Duration::from_secs(2), || std::fs::remove_dir(&unit).is_ok()),
        "the deploy's cgroup was left in the delegated one"
    );
}
