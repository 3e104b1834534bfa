//! An end is never lost between the two journals: a jobenv SIGKILLed between its program's end
//! and the database's answer (Windmill's group SIGKILL, the OOM killer, power) has written the
//! intent to hand the end on before it wrote the end anywhere. Whenever it died, once `recover`,
//! `prune` or the node's next job ran, the node's own journal and the shared one say the same:
//! the end where this node's journal has one, the attempt not ended where it has none (then the
//! next run records it interrupted). `recover` also hands on an end whose shared row still shows
//! that attempt running when nothing was kept (a jobenv of before the intent, a lost file).

use std::time::Duration;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::process::{read_pids, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::CutOff;

/// How a killed run's end is handed on: `recover`, `prune`, or the node's next job.
#[derive(Debug, Clone, Copy)]
enum Upkeep {
    Recover,
    Prune,
    NextJob,
}

impl CutOff {
    /// Node a runs `job` of `namespace`; `before_end` sets the network up right before its
    /// program ends, and node a's jobenv is SIGKILLed `after` the program's end.
    fn killed_after_the_end(&self, job: &str, namespace: &str, before_end: impl FnOnce(&CutOff), after: Duration) {
        let _ = std::fs::remove_file(self.path("go"));
        let _ = std::fs::remove_file(self.path("program-a.pid"));
        let mut running = self.a.job(job, namespace).spawn();
        if !wait_until(Duration::from_secs(20), || self.path("program-a.pid").exists()) {
            let _ = kill(Pid::from_raw(running.id() as i32), Signal::SIGTERM);
            panic!("job {job}: the program did not start: {:?}", super::finish(running));
        }
        read_pids(&self.path("program-a.pid"), 1, Duration::from_secs(20));
        let ended = self.runs().lines().count();
        before_end(self);
        std::fs::write(self.path("go"), "").unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || self.runs().lines().count() > ended),
            "the program did not end"
        );
        std::thread::sleep(after);
        kill(Pid::from_raw(running.id() as i32), Signal::SIGKILL).unwrap();
        running.wait().unwrap();
        self.proxy.heal();
    }

    /// After `upkeep` on node a: node a's entry of `job` and the shared row say the same, and
    /// nothing is kept any more. Returns whether node a's journal held the end.
    fn journals_agree(&self, job: &str, upkeep: Upkeep) -> bool {
        match upkeep {
            Upkeep::Recover => {
                self.recover(&[]).expect_success().run();
            }
            Upkeep::Prune => {
                self.a
                    .f
                    .jobenv(jobenv_bin!())
                    .args(["prune"])
                    .env("JOBENV_CLUSTER_DSN_FILE", self.a.dsn_file.as_ref().unwrap())
                    .expect_success()
                    .run();
            }
            Upkeep::NextJob => {
                self.a
                    .job(&format!("after-{job}"), &format!("after-{job}"))
                    .expect_success()
                    .run();
            }
        }
        let local = self.a.f.journal_entry(jobenv_bin!(), job);
        let ended_here = local["status"] != "running" && local["reason"] != "interrupted";
        let row = self
            .db
            .client()
            .query_one(
                "SELECT finished_at IS NOT NULL, entry->>'status', entry->>'attempt' FROM fediversity_jobenv.jobs WHERE job_id = $1",
                &[&job],
            )
            .unwrap();
        let (ended, status, attempt): (bool, Option<String>, Option<String>) = (row.get(0), row.get(1), row.get(2));
        if ended_here {
            assert!(
                ended && status.as_deref() == local["status"].as_str() && attempt == Some(local["attempt"].to_string()),
                "job {job} ({upkeep:?}): this node's journal has its end, the cluster's does not: {local} vs {status:?} {attempt:?}"
            );
        } else {
            assert!(
                !ended,
                "job {job} ({upkeep:?}): the cluster journal has an end this node's journal has not: {local} vs {status:?}"
            );
        }
        assert!(
            !self.kept(job).exists(),
            "job {job} ({upkeep:?}): its end is still kept"
        );
        ended_here
    }
}

#[test]
fn a_jobenv_killed_between_its_programs_end_and_the_databases_answer_loses_no_end() {
    let c = CutOff::new();
    let upkeeps = [Upkeep::Recover, Upkeep::Prune, Upkeep::NextJob];
    let mut handed = 0;
    let mut moment = 0;
    let mut check = |c: &CutOff, job: &str, upkeep: Upkeep| {
        let ended = c.journals_agree(job, upkeep);
        eprintln!("{job}: {}", if ended { "ended on both" } else { "interrupted on both" });
        handed += usize::from(ended);
    };
    // The database took the end, and its answer was lost.
    c.killed_after_the_end(
        "answer-lost",
        "ns-answer",
        |c| c.proxy.cut_replies(),
        Duration::from_millis(800),
    );
    check(&c, "answer-lost", Upkeep::Recover);
    // Nothing reached it.
    for upkeep in upkeeps {
        let job = format!("unsent-{upkeep:?}").to_lowercase();
        c.killed_after_the_end(&job, &job, |c| c.proxy.cut(), Duration::from_millis(800));
        check(&c, &job, upkeep);
    }
    // Its answers late (0.4 s): killed at moments from right at the program's end to after the
    // answer, before the end is written, between the two journals, and after.
    for after in [0, 10, 30, 60, 120, 250, 450, 700] {
        let (job, upkeep) = (format!("late-{after}"), upkeeps[moment % upkeeps.len()]);
        moment += 1;
        c.killed_after_the_end(
            &job,
            &job,
            |c| c.proxy.delay_replies(Duration::from_millis(400)),
            Duration::from_millis(after),
        );
        check(&c, &job, upkeep);
    }
    assert!(
        handed >= 4,
        "too few of the kills came after the end was written: {handed}"
    );
}

#[test]
fn recover_hands_on_an_end_whose_shared_row_still_shows_that_attempt_running() {
    let c = CutOff::new();
    c.killed_after_the_end("unkept", "ns", |c| c.proxy.cut(), Duration::from_millis(800));
    // What a jobenv of before the kept intent left, or a kept file lost: nothing names it.
    std::fs::remove_file(c.kept("unkept")).unwrap();
    let recovered = c.recover(&[]).expect_success().run();
    assert!(
        recovered.stderr.contains(
            "job unkept: the end of attempt 1 is on the cluster journal now (its row still showed that attempt running)"
        ),
        "{recovered:?}"
    );
    assert!(c.journals_agree("unkept", Upkeep::Recover));
    // Node b's re-run of it is replayed.
    c.b.job("unkept", "ns")
        .args(["--lock-timeout", "10"])
        .expect_success()
        .expect_stderr_contains("jobenv: job unkept already ended (succeeded, exit code 0, attempt 1, at ")
        .run();
    assert_eq!(c.runs(), "a\n", "the job ran again");
}
