//! A crash sweep of the journal: jobenv is SIGKILLed at many different moments of a run (before
//! its `running` entry, while the program runs, between the program's end and the terminal
//! entry), then the job is recovered and run again. Whatever the moment:
//! - a job whose result was recorded never runs again (it is replayed);
//! - an attempt without a recorded result runs again, as the next attempt;
//! - nothing outside the state directory changes but what the program itself writes.
//!
//! The moments come from a sweep of delays after the start, over the time a whole run takes on
//! this machine now (measured first: a loaded machine, or the cgroup's placement, makes a run
//! slower), and later ones while the runs turn out slower than that; the test reports which kinds
//! of moment it hit and fails if it hit fewer than three.

use std::collections::BTreeMap;
use std::time::Duration;

use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::Fixture;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const PAYLOAD: &str = r#"{"ATTRIBUTE": "web", "NAMESPACE": "ns"}"#;

fn runs(f: &Fixture, job: &str) -> usize {
    std::fs::read_to_string(f.path().join(format!("runs-{job}")))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Old finished entries, which `recover` prunes.
fn plant_old_entries(f: &Fixture) {
    let jobs = f.state_dir().join("jobs");
    std::fs::create_dir_all(&jobs).unwrap();
    for i in 0..150 {
        let entry = json!({
            "job_id": format!("old-{i}"), "attempt": 1, "verb": "apply", "attribute": "web", "namespace": "ns",
            "pid": 1, "pid_start": 0, "started_at": "2026-01-01T00:00:00.000Z", "status": "succeeded", "exit_code": 0,
            "finished_at": "2026-01-01T00:00:01.000Z"
        });
        let path = jobs.join(format!("old-{i}.json"));
        std::fs::write(&path, entry.to_string()).unwrap();
        let ended = humantime::parse_rfc3339("2026-01-01T00:00:01.000Z").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(ended)
            .unwrap();
    }
}

/// Every file outside the state directory, with its contents (the runs files aside).
fn outside_state(f: &Fixture) -> BTreeMap<String, Vec<u8>> {
    walk(f.path())
        .into_iter()
        .filter(|(path, _)| !path.starts_with(&f.state_dir().display().to_string()) && !path.contains("/runs-"))
        .collect()
}

fn walk(dir: &std::path::Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.insert(path.display().to_string(), std::fs::read(&path).unwrap_or_default());
        }
    }
    files
}

#[test]
fn whatever_the_moment_of_a_crash_a_result_is_never_run_twice_and_an_interruption_runs_again() {
    let mut f = Fixture::new();
    let dir = f.path().display().to_string();
    f.program("web", "apply", &format!("echo run >> {dir}/runs-$JOB; exit 0"))
        .declare("JOB", None);
    f.write();
    let whole = {
        let started = std::time::Instant::now();
        let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": "ns", "JOB": "measure"});
        f.jobenv(jobenv_bin!())
            .verb("apply")
            .args(["--job-id", "measure"])
            .payload(&payload)
            .expect_success()
            .run();
        started.elapsed()
    };
    let mut hit: BTreeMap<&str, usize> = BTreeMap::new();
    // 45 kill points over 1.2 times a whole run, at least 2 ms apart; then, while fewer than three
    // kinds were hit (runs slower than the measured one: a loaded machine), up to 15 more, each
    // 0.4 runs later than the last.
    let whole_ms = whole.as_millis() as u64;
    let step = (whole_ms * 6 / 5 / 45).max(2);
    for i in 0..60 {
        let delay = match i {
            0..45 => i * step,
            _ if hit.len() < 3 => whole_ms * 6 / 5 + (i - 44) * whole_ms * 2 / 5,
            _ => break,
        };
        let job = format!("sweep-{i}");
        plant_old_entries(&f);
        let before = outside_state(&f);
        let payload: Value = serde_json::from_str(PAYLOAD).unwrap();
        let mut payload = payload.as_object().unwrap().clone();
        payload.insert("JOB".into(), json!(job));
        let mut jobenv = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .args(["--job-id", &job])
            .payload(&Value::Object(payload.clone()))
            .spawn();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = kill(Pid::from_raw(jobenv.id() as i32), Signal::SIGKILL);
        jobenv.wait().unwrap();
        // The program's own children die with it (parent-death signal); give them a moment.
        std::thread::sleep(Duration::from_millis(30));

        let entry = f.state_dir().join(format!("jobs/{job}.json"));
        let recorded: Option<Value> = std::fs::read(&entry)
            .ok()
            .map(|b| serde_json::from_slice(&b).expect("an entry is never torn"));
        if let Some(recorded) = &recorded {
            fediversity_testkit::schemas::Contract::JournalEntry.check(recorded);
        }
        let ran = runs(&f, &job);
        let moment = match &recorded {
            None => "before the running entry",
            Some(e) if e["status"] == "running" && ran == 0 => "after the running entry, before the program ran",
            Some(e) if e["status"] == "running" => "after the program ran, before the terminal entry",
            Some(_) => "after the terminal entry",
        };
        *hit.entry(moment).or_default() += 1;
        assert_eq!(
            outside_state(&f),
            before,
            "{moment}: a file outside the state directory changed"
        );

        if i % 2 == 0 {
            f.jobenv(jobenv_bin!())
                .args(["recover", "--retain-days", "1"])
                .expect_success()
                .run();
        }
        let again = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .args(["--job-id", &job, "--lock-timeout", "5"])
            .payload(&Value::Object(payload))
            .run();
        assert_eq!(again.code, Some(0), "{moment}: {again:?}");
        let now: Value = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
        fediversity_testkit::schemas::Contract::JournalEntry.check(&now);
        assert_eq!(now["status"], "succeeded", "{moment}: {now}");
        match &recorded {
            Some(e) if e["status"] == "succeeded" => {
                assert_eq!(runs(&f, &job), ran, "{moment}: a recorded result ran again");
                assert!(
                    again.stderr.contains("replaying the recorded result"),
                    "{moment}: {again:?}"
                );
            }
            Some(e) => {
                assert_eq!(
                    runs(&f, &job),
                    ran + 1,
                    "{moment}: an interrupted attempt did not run again"
                );
                assert_eq!(now["attempt"], e["attempt"].as_u64().unwrap() + 1, "{moment}: {now}");
                assert_eq!(now["earlier"][0]["reason"], "interrupted", "{moment}: {now}");
            }
            None => {
                assert_eq!(
                    runs(&f, &job),
                    ran + 1,
                    "{moment}: a job that never started did not run"
                );
                assert_eq!(now["attempt"], 1, "{moment}: {now}");
            }
        }
    }
    eprintln!("crash sweep: kill points hit, by kind: {hit:?}");
    assert!(hit.len() >= 3, "the sweep hit too few kinds of moment: {hit:?}");
}
