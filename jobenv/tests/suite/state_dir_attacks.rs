//! The state directory belongs to the worker's user, and so to every deploy program: whatever
//! that user plants there never steers jobenv run as root (`recover`, `drain`, `status`, a run
//! by hand). No file of root's is written, deleted or shown through a link; no FIFO, device or
//! huge file hangs jobenv or fills its memory; no planted name forges a log line; a `jobs/` or
//! `locks/` that is not a directory of its own is refused.
//!
//! Each test plants its files as the worker's user (uid 65534), runs jobenv as root, and has
//! its positive control: the node's ordinary jobs still run beside what was planted. jobenv
//! started as root becomes the state directory's owner before it touches the directory (the
//! last tests here show it does, all the way): these tests are the proof that the guarantee
//! then holds by construction.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fediversity_testkit::job_run::{Done, JobRun};
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, WORKER_UID};
use fediversity_testkit::process::{StreamWatch, wait_exit};
use serde_json::{Value, json};

fn payload(namespace: &str) -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": namespace})
}

/// A node handed to the worker's user, whose journal that user's first job made (`jobs/` and
/// `locks/` its own), and whose program counts its runs (in the job directory, the worker's).
fn node() -> Fixture {
    let f = node_running("web", |job| format!("echo run >> {}/runs", job.display()));
    f.hand_to(WORKER_UID);
    let stand_in = f.nix_shell_stand_in();
    let mut first = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .args(["--job-id", "first", "--nix-shell", stand_in.to_str().unwrap()])
        .payload(&payload("ns"));
    first.command().uid(WORKER_UID).gid(WORKER_UID);
    first.expect_success().run();
    f
}

fn runs(f: &Fixture) -> usize {
    std::fs::read_to_string(f.job_dir().join("runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Runs `script` with `sh` in the state directory as the worker's user, as a deploy program
/// could.
fn plant(f: &Fixture, script: &str) {
    let status = std::process::Command::new("/bin/sh")
        .args(["-c", &format!("set -e\n{script}")])
        .current_dir(f.state_dir())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .uid(WORKER_UID)
        .gid(WORKER_UID)
        .status()
        .unwrap();
    assert!(status.success(), "planting failed: {script}");
}

/// A file of root's that the worker's user cannot read, outside the state directory.
fn roots_file(f: &Fixture, name: &str, text: &str) -> PathBuf {
    let path = f.path().join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A directory of root's that the worker's user cannot enter, outside the state directory.
fn roots_dir(f: &Fixture, name: &str) -> PathBuf {
    let path = f.path().join(name);
    std::fs::create_dir(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o700)).unwrap();
    path
}

/// jobenv as root against the node. A `run` gets the stand-in nix-shell: jobenv runs it as the
/// worker's user, and nix-shell cannot build as that user on the test machine's single-user
/// Nix store.
fn as_root(f: &Fixture, args: &[&str]) -> JobRun {
    let run = f.jobenv(jobenv_bin!()).args(args.iter().copied());
    match args.first() {
        Some(&"run") if !args.contains(&"--nix-shell") => {
            run.args(["--nix-shell", f.nix_shell_stand_in().to_str().unwrap()])
        }
        _ => run,
    }
}

/// A journal entry as jobenv writes it, of a job that finished 40 days ago (older than the
/// retention).
fn old_entry(job_id: &str) -> String {
    json!({
        "job_id": job_id, "attempt": 1, "verb": "apply", "attribute": "web", "namespace": "ns", "pid": 1, "pid_start": 0,
        "started_at": "2020-01-01T00:00:00.000Z", "status": "succeeded", "exit_code": 0, "finished_at": "2020-01-01T00:00:01.000Z",
    })
    .to_string()
}

/// Runs to its end within `limit` and under a 4 GiB address space, else the test fails (and the
/// run is killed): a jobenv that reads a FIFO hangs, one that reads `/dev/zero` grows without end.
fn bounded(limit: Duration, mut run: JobRun) -> Done {
    let command = run.command();
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let bytes = 4 << 30;
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, bytes, bytes)
                .map_err(std::io::Error::from)
        });
    }
    let mut running = run.spawn();
    let stdout = StreamWatch::new(running.stdout.take().unwrap());
    let mut stderr = StreamWatch::new(running.stderr.take().unwrap());
    let Some(status) = wait_exit(&mut running, limit) else {
        let _ = running.kill();
        panic!("jobenv did not end within {limit:?}:\n{}", stderr.text());
    };
    let raw_stdout = stdout.finish();
    Done {
        code: status.code(),
        stdout: String::from_utf8_lossy(&raw_stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr.finish()).into_owned(),
        raw_stdout,
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_lock_file_planted_as_a_link_never_lets_root_write_the_file_it_names() {
    let f = node();
    let shadow = roots_file(&f, "shadow", "root:$6$the-hash-of-roots-password:19000::::::\n");
    let before = std::fs::read(&shadow).unwrap();
    let target = shadow.display();
    // The job lock of a job about to run, a namespace's lock, a namespace's tree record, and the
    // lock of an old entry that pruning takes.
    plant(
        &f,
        &format!(
            "ln -s {target} locks/job-victim.lock\nln -s {target} locks/namespace-ns2.lock\nln -s {target} locks/namespace-ns3.tree.json\n\
         ln -s {target} locks/job-old.lock\necho '{}' > jobs/old.json\necho '{}' > jobs/old-2.json\n\
         touch -d 2020-01-01T00:00:01Z jobs/old.json jobs/old-2.json",
            old_entry("old"),
            old_entry("old-2"),
        ),
    );
    // Where fs.protected_hardlinks is off, the worker's user can link a file of root's too, and
    // always one of its own (outside the state directory: the worker's key, say).
    std::fs::hard_link(&shadow, f.state_dir().join("locks/job-hard.lock")).unwrap();
    let workers = f.job_dir().join("workers-key");
    plant(
        &f,
        &format!(
            "echo the-workers-key > {0}
ln {0} locks/job-own.lock",
            workers.display()
        ),
    );

    as_root(&f, &["run", "--verb", "apply", "--job-id", "victim"])
        .payload(&payload("ns"))
        .expect_code(2)
        .expect_stderr_contains("locks/job-victim.lock is refused: it is a symbolic link")
        .run();
    as_root(&f, &["run", "--verb", "apply", "--job-id", "other"])
        .payload(&payload("ns2"))
        .expect_code(2)
        .expect_stderr_contains("locks/namespace-ns2.lock is refused: it is a symbolic link")
        .run();
    // jobenv, the worker's user by then, cannot open root's file at all...
    as_root(&f, &["run", "--verb", "apply", "--job-id", "hard"])
        .payload(&payload("ns"))
        .expect_code(2)
        .expect_stderr_contains("locks/job-hard.lock: Permission denied")
        .run();
    // ...and refuses the link to one of the worker's.
    as_root(&f, &["run", "--verb", "apply", "--job-id", "own"])
        .payload(&payload("ns"))
        .expect_code(2)
        .expect_stderr_contains("locks/job-own.lock is refused: it has more than one link")
        .run();
    as_root(&f, &["recover"])
        .expect_success()
        .expect_stderr_contains("locks/job-old.lock is refused: it is a symbolic link: left as it is")
        .run();
    as_root(&f, &["drain", "--wait", "0"]).expect_success().run();
    as_root(&f, &["recover"]).expect_success().run();

    assert_eq!(
        std::fs::read(&shadow).unwrap(),
        before,
        "root wrote through a link into a file of root's"
    );
    assert_eq!(
        std::fs::read_to_string(&workers).unwrap(),
        "the-workers-key\n",
        "jobenv wrote through a link into a file of the worker's"
    );
    assert!(
        f.state_dir().join("jobs/old.json").exists(),
        "an entry whose lock cannot be taken was pruned"
    );
    // Positive control: beside all that, the node's jobs run, their locks record their holder,
    // and pruning goes on with the entries it can lock.
    as_root(&f, &["run", "--verb", "apply", "--job-id", "control"])
        .payload(&payload("ns"))
        .expect_success()
        .run();
    assert_eq!(runs(&f), 2);
    assert!(
        std::fs::read_to_string(f.state_dir().join("locks/job-control.lock"))
            .unwrap()
            .starts_with("job control, jobenv pid ")
    );
    assert!(
        !f.state_dir().join("jobs/old-2.json").exists(),
        "an old entry was not pruned"
    );
}

#[test]
fn a_jobs_or_locks_directory_that_is_a_link_or_a_file_is_refused() {
    let f = node();
    let elsewhere = roots_dir(&f, "roots-dir");
    std::fs::write(elsewhere.join("old.json"), old_entry("old")).unwrap();
    // As old as its end, as the file of an entry that ended then is: pruning would read it.
    let ended = humantime::parse_rfc3339("2020-01-01T00:00:01Z").unwrap();
    std::fs::File::options()
        .write(true)
        .open(elsewhere.join("old.json"))
        .unwrap()
        .set_modified(ended)
        .unwrap();
    let target = elsewhere.display();

    plant(&f, &format!("mv jobs jobs.real\nln -s {target} jobs"));
    for args in [
        &["recover"][..],
        &["status"],
        &["status", "old"],
        &["drain", "--wait", "0"],
    ] {
        let done = as_root(&f, args)
            .expect_code(2)
            .expect_stderr_contains("jobs is refused: it is a symbolic link")
            .run();
        assert!(
            !done.stdout.contains("old"),
            "{args:?} showed what the link leads to: {done:?}"
        );
    }
    as_root(&f, &["run", "--verb", "apply", "--job-id", "x"])
        .payload(&payload("ns"))
        .expect_code(2)
        .expect_stderr_contains("jobs is refused")
        .run();
    assert_eq!(names(&elsewhere), ["old.json"], "root pruned or wrote through the link");

    plant(
        &f,
        &format!("rm jobs\nmv jobs.real jobs\nmv locks locks.real\nln -s {target} locks"),
    );
    as_root(&f, &["recover"])
        .expect_code(2)
        .expect_stderr_contains("locks is refused: it is a symbolic link")
        .run();
    as_root(&f, &["run", "--verb", "apply", "--job-id", "x"])
        .payload(&payload("ns"))
        .expect_code(2)
        .expect_stderr_contains("locks is refused")
        .run();
    plant(&f, "rm locks\ntouch locks");
    as_root(&f, &["recover"])
        .expect_code(2)
        .expect_stderr_contains("locks is refused: it is not a directory")
        .run();
    assert_eq!(
        names(&elsewhere),
        ["old.json"],
        "root wrote into the directory a link leads to"
    );
    assert_eq!(runs(&f), 1, "a program ran on a refused journal");

    // Positive control: with its own directories back, the same old entry in the journal is
    // pruned, and jobs run.
    plant(
        &f,
        &format!(
            "rm locks\nmv locks.real locks\necho '{}' > jobs/old.json\ntouch -d 2020-01-01T00:00:01Z jobs/old.json",
            old_entry("old")
        ),
    );
    as_root(&f, &["recover"]).expect_success().run();
    assert!(
        !f.state_dir().join("jobs/old.json").exists(),
        "the old entry was not pruned"
    );
    as_root(&f, &["run", "--verb", "apply", "--job-id", "x"])
        .payload(&payload("ns"))
        .expect_success()
        .run();
    assert_eq!(runs(&f), 2);
}

#[test]
fn fifos_devices_and_huge_files_in_the_state_directory_neither_hang_nor_fill_jobenvs_memory() {
    let f = node();
    plant(
        &f,
        "mkfifo jobs/fifo.json\nln -s /dev/zero jobs/zero.json\ntruncate -s 64G jobs/huge.json\nrm -f draining\nmkfifo draining\n\
                   mkfifo locks/namespace-ns.tree.json\nmkfifo locks/job-piped.lock\nmkfifo locks/job-first.lock.new\nrm locks/job-first.lock\nmv locks/job-first.lock.new locks/job-first.lock",
    );
    let limit = Duration::from_secs(30);
    // A run (which reads the drain mark, its namespace's tree record and, pruning, every entry),
    // then each upkeep command.
    let stand_in = f.nix_shell_stand_in();
    let run = as_root(
        &f,
        &[
            "run",
            "--verb",
            "apply",
            "--job-id",
            "second",
            "--nix-shell",
            stand_in.to_str().unwrap(),
        ],
    )
    .payload(&payload("ns"));
    let done = bounded(limit, run);
    assert_eq!(done.code, Some(0), "{done:?}");
    assert!(
        done.stderr
            .contains("draining is refused: it is not a regular file: taken as no drain"),
        "{done:?}"
    );
    let status = bounded(limit, as_root(&f, &["status"]));
    assert_eq!(status.code, Some(0), "{status:?}");
    for (name, why) in [
        ("fifo.json", "it is not a regular file"),
        ("zero.json", "it is a symbolic link"),
        ("huge.json", "it is larger than 1024 KiB"),
    ] {
        assert!(
            status.stderr.contains(&format!("jobs/{name} is refused: {why}")),
            "{name}: {status:?}"
        );
    }
    // Positive control: the real entries are listed beside them.
    let listed: Vec<Value> = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(
        listed.iter().map(|e| e["job_id"].as_str().unwrap()).collect::<Vec<_>>(),
        ["first", "second"],
        "{status:?}"
    );
    assert_eq!(runs(&f), 2);
    let done = bounded(limit, as_root(&f, &["status", "fifo"]));
    assert_eq!(done.code, Some(2), "{done:?}");
    assert!(
        done.stderr
            .contains("jobs/fifo.json is refused: it is not a regular file"),
        "{done:?}"
    );
    for args in [&["recover"][..], &["drain", "--wait", "0"], &["recover"]] {
        plant(&f, "[ -p draining ] || { rm -f draining; mkfifo draining; }");
        let done = bounded(limit, as_root(&f, args));
        assert_eq!(done.code, Some(0), "{args:?}: {done:?}");
    }
}

/// Runs to its end under a limit on jobenv's data (its heap): what it holds of the journal at
/// once.
fn with_data_limit(bytes: u64, mut run: JobRun) -> Done {
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        run.command().pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_DATA, bytes, bytes)
                .map_err(std::io::Error::from)
        });
    }
    run.run()
}

/// The worker's user may fill the journal with entries of up to 1 MiB each (here 48 MiB of
/// them, half `running` under a jobenv that is gone, half corrupt, their start 1 MB long): root's `status`, `recover` and `drain` go
/// through them one at a time, printing as they go, in 16 MiB of heap. Before, each held every
/// entry at once and died of it.
#[test]
fn a_journal_of_large_entries_is_listed_recovered_and_drained_in_bounded_memory() {
    let f = node();
    let jobs = f.state_dir().join("jobs");
    for i in 0..24 {
        let entry = json!({
            "format": 2, "job_id": format!("big{i}"), "attempt": 1, "verb": "apply", "attribute": "web", "namespace": "ns",
            "pid": 1, "pid_start": 0, "started_at": format!("2020-01-01T00:00:{i:02}.000Z"), "status": "running",
            "orphans": {"found": 1, "killed": 0, "stopped_by": "x".repeat(1_000_000), "stopped_at": "2020-01-01T00:00:01.000Z"},
        });
        let path = jobs.join(format!("big{i}.json"));
        std::fs::write(&path, entry.to_string()).unwrap();
        std::os::unix::fs::chown(&path, Some(WORKER_UID), Some(WORKER_UID)).unwrap();
        // And as many whose start is the large part: `status` orders by start, and must keep
        // no more of it than a time.
        let forged = json!({"format": 2, "job_id": format!("long{i}"), "started_at": "9".repeat(1_000_000)});
        let path = jobs.join(format!("long{i}.json"));
        std::fs::write(&path, forged.to_string()).unwrap();
        std::os::unix::fs::chown(&path, Some(WORKER_UID), Some(WORKER_UID)).unwrap();
    }
    let limit = 16 << 20;
    let status = with_data_limit(
        limit,
        as_root(&f, &["status"])
            .expect_success()
            .expect_stderr_contains("jobs/long0.json is corrupt"),
    );
    let listed: Vec<jobenv::JournalEntry> = serde_json::from_str(&status.stdout).unwrap();
    let ids: Vec<&str> = listed.iter().map(|e| e.job_id.as_str()).collect();
    assert_eq!(
        (ids.len(), ids[0], ids[23], ids[24]),
        (25, "big0", "big23", "first"),
        "oldest start first"
    );
    // Printed one at a time, the array is exactly what one pretty-printed array of them is.
    assert_eq!(
        status.stdout,
        format!("{}\n", serde_json::to_string_pretty(&listed).unwrap())
    );
    let recovered = with_data_limit(limit, as_root(&f, &["recover"]).expect_success());
    let changed: Vec<Value> = serde_json::from_str(&recovered.stdout).unwrap();
    assert_eq!(
        changed.len(),
        24,
        "every entry of a jobenv that is gone is marked interrupted"
    );
    assert!(changed.iter().all(|e| e["reason"] == "interrupted"));
    with_data_limit(limit, as_root(&f, &["drain", "--wait", "0"]).expect_success());
    // Positive control: the limit lets a program hold one entry, not all of them.
    let hold = |files: &str| {
        let script = format!(
            "import json, os, sys\nd = '{}'\nheld = [json.load(open(os.path.join(d, n))) for n in {files}]",
            jobs.display()
        );
        with_data_limit(
            limit,
            JobRun::new(std::process::Command::new("/usr/bin/python3")).args(["-c", &script]),
        )
        .code
    };
    assert_eq!(hold("['big0.json']"), Some(0), "one entry does not fit in the limit");
    assert_ne!(
        hold("os.listdir(d)"),
        Some(0),
        "the whole journal fits in the limit: the test proves nothing"
    );
}

#[test]
fn names_planted_in_the_state_directory_cannot_forge_a_log_line() {
    let f = node();
    plant(
        &f,
        "touch 'jobs/x\njobenv: web-apply succeeded with exit code 0.json'\necho '{}' > jobs/-bad.json\necho 'not json' > jobs/corrupt-1.json\n\
               echo '{}' > 'locks/namespace-x\njobenv: forged.tree.json'\nln -s /nowhere 'jobs/y\njobenv: forged.json'",
    );
    for args in [&["status"][..], &["recover"], &["drain", "--wait", "0"], &["recover"]] {
        let done = as_root(&f, args).expect_success().run();
        let forged: Vec<&str> = done
            .stderr
            .lines()
            .filter(|line| line.starts_with("jobenv: web-apply") || line.starts_with("jobenv: forged"))
            .collect();
        assert!(forged.is_empty(), "{args:?} printed a forged line: {done:?}");
        if args == ["status"] {
            assert!(done.stderr.contains(r"jobs/x\njobenv: web-apply succeeded with exit code 0.json: its name is not that of a journal entry"), "{done:?}");
            assert!(
                done.stderr
                    .contains("jobs/-bad.json: its name is not that of a journal entry"),
                "{done:?}"
            );
            assert!(
                done.stderr
                    .contains(r"jobs/y\njobenv: forged.json: its name is not that of a journal entry"),
                "{done:?}"
            );
            // Positive control: a corrupt entry under a job id's name is reported, by its path.
            assert!(
                done.stderr.contains("jobs/corrupt-1.json is corrupt: expected ident"),
                "{done:?}"
            );
        }
        if args == ["recover"] {
            assert!(
                done.stderr.contains(
                    r"locks/namespace-x\njobenv: forged.tree.json: its name is not that of a program tree's record"
                ),
                "{done:?}"
            );
        }
    }
}

#[test]
fn a_recover_that_fails_still_ends_the_drain() {
    let f = node();
    as_root(&f, &["drain", "--wait", "0"]).expect_success().run();
    assert!(f.state_dir().join("draining").exists(), "not vacuous: the node drains");
    // A recover whose work fails (the worker's user made its journal unusable) still ends the
    // drain: the worker starts again either way.
    plant(&f, "mv locks locks.real\ntouch locks");
    as_root(&f, &["recover"])
        .expect_code(2)
        .expect_stderr_contains("locks is refused: it is not a directory")
        .run();
    assert!(
        !f.state_dir().join("draining").exists(),
        "a failed recover left the node draining"
    );
    // Positive control: with the journal whole again, jobs run.
    plant(&f, "rm locks\nmv locks.real locks");
    as_root(&f, &["run", "--verb", "apply", "--job-id", "after"])
        .payload(&payload("ns"))
        .expect_success()
        .run();
    assert_eq!(runs(&f), 2);
}

#[test]
fn status_through_an_entry_linked_to_a_file_of_roots_never_shows_it() {
    let f = node();
    let entry = as_root(&f, &["status", "first"]).expect_success().run().stdout;
    let mut secret: Value = serde_json::from_str(&entry).unwrap();
    (secret["job_id"], secret["namespace"]) = (json!("leak"), json!("roots-only-namespace"));
    let file = roots_file(&f, "roots-entry.json", &secret.to_string());
    plant(&f, &format!("ln -s {} jobs/leak.json", file.display()));
    let done = as_root(&f, &["status", "leak"])
        .expect_code(2)
        .expect_stderr_contains("jobs/leak.json is refused: it is a symbolic link")
        .run();
    assert!(
        !done.stdout.contains("roots-only") && !done.stderr.contains("roots-only"),
        "{done:?}"
    );
    let all = as_root(&f, &["status"]).expect_success().run();
    assert!(!all.stdout.contains("roots-only"), "{all:?}");
    // Positive control: an entry of the journal's own is shown, by job id and in the list.
    assert!(entry.contains("\"job_id\": \"first\""), "{entry}");
    assert!(all.stdout.contains("\"job_id\": \"first\""), "{all:?}");
}

/// A cgroup named as a deploy of namespace `ns` is (`jobenv-ns-<pid>-<start>`), below this
/// test's own, holding a `sleep` of root's; removed (its process killed) when dropped.
struct Victim {
    dir: PathBuf,
    sleeper: std::process::Child,
}

impl Victim {
    fn new(tag: u32) -> Victim {
        let own = fediversity_testkit::cgroup::dir_of(std::process::id() as i32).expect("this test's cgroup");
        let dir = own.join(format!("jobenv-ns-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let sleeper = fediversity_testkit::cgroup::spawn_in(&dir, &["/bin/sleep", "60"]);
        assert!(fediversity_testkit::cgroup::populated(&dir));
        Victim { dir, sleeper }
    }

    /// What a deploy of the state directory's makes: a cgroup of the worker's user (its kill
    /// file too), holding a process of that user's.
    fn of_worker(tag: u32) -> Victim {
        use std::os::fd::AsRawFd;
        let own = fediversity_testkit::cgroup::dir_of(std::process::id() as i32).expect("this test's cgroup");
        let dir = own.join(format!("jobenv-ns-{}-{tag}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        for path in [dir.clone(), dir.join("cgroup.kill"), dir.join("cgroup.procs")] {
            std::os::unix::fs::chown(&path, Some(WORKER_UID), Some(WORKER_UID)).unwrap();
        }
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .unwrap();
        let fd = procs.as_raw_fd();
        let mut command = std::process::Command::new("/bin/sleep");
        command.arg("60");
        // SAFETY: only system calls between fork and exec: into the cgroup as root, then the
        // worker's user.
        unsafe {
            command.pre_exec(move || {
                let id = WORKER_UID;
                if nix::libc::write(fd, b"0".as_ptr().cast(), 1) != 1
                    || nix::libc::setgroups(0, std::ptr::null()) != 0
                    || nix::libc::setgid(id) != 0
                    || nix::libc::setuid(id) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let sleeper = command.spawn().unwrap();
        drop(procs);
        assert!(fediversity_testkit::cgroup::populated(&dir));
        Victim { dir, sleeper }
    }

    fn alive(&mut self) -> bool {
        self.sleeper.try_wait().unwrap().is_none()
    }

    /// What the worker's user plants: the namespace's tree record, naming this cgroup.
    fn plant_record(&self, f: &Fixture) {
        let record = json!({"cgroup": self.dir, "job_id": "first", "attempt": 1, "jobenv_pid": 1, "grace_ms": 100});
        plant(f, &format!("echo '{record}' > locks/namespace-ns.tree.json"));
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.sleeper.kill();
        let _ = self.sleeper.wait();
        let _ =
            fediversity_testkit::process::wait_until(Duration::from_secs(2), || std::fs::remove_dir(&self.dir).is_ok());
    }
}

/// A tree record names its cgroup by path, and the worker's user writes it: a record naming a
/// cgroup that is no deploy of this state directory (another service's, another node's, another
/// state directory's, whatever it is named) never makes root's `recover` or run stop what runs
/// there. A deploy cgroup of the state directory belongs to its owner.
#[test]
fn a_tree_record_naming_a_cgroup_of_someone_elses_never_stops_its_processes() {
    let f = node();
    let mut victim = Victim::new(1);
    victim.plant_record(&f);
    let done = as_root(&f, &["recover"]).expect_success().run();
    let said = format!(
        "belongs to uid 0, not to the state directory's owner (uid {WORKER_UID}): it is no deploy of this state directory"
    );
    assert!(done.stderr.contains(&said), "{done:?}");
    assert_eq!(done.stdout.trim(), "[]", "{done:?}");
    assert!(victim.alive(), "recover stopped a process of another cgroup");
    assert!(victim.dir.exists(), "recover removed another cgroup");
    // A run of the namespace, which stops what an earlier deploy left before it starts, neither.
    victim.plant_record(&f);
    as_root(&f, &["run", "--verb", "apply", "--job-id", "second"])
        .payload(&payload("ns"))
        .expect_success()
        .expect_stderr_contains(&said)
        .run();
    assert!(victim.alive(), "a run stopped a process of another cgroup");
    assert_eq!(runs(&f), 2);
    // Positive control: a cgroup of the worker's (as a deploy of this state directory's is: the
    // worker's jobenv made it, the worker's program runs there) is stopped by recover and
    // recorded in the entry the record names.
    let mut victim = Victim::of_worker(2);
    victim.plant_record(&f);
    let done = as_root(&f, &["recover"]).expect_success().run();
    assert!(
        done.stderr.contains(
            "process(es) of the program tree of job first (attempt 1, jobenv pid 1) still running without their jobenv"
        ),
        "{done:?}"
    );
    assert!(
        fediversity_testkit::process::wait_until(Duration::from_secs(5), || !victim.alive()),
        "the worker's own deploy cgroup was not stopped"
    );
    let entry: Value = serde_json::from_str(&as_root(&f, &["status", "first"]).expect_success().run().stdout).unwrap();
    assert_eq!(entry["orphans"]["stopped_by"], "recover", "{entry}");
}

/// One record the worker's user made unusable (a directory under a tree record's name) costs
/// `recover` that record, not the rest of its work: the entries of dead jobenvs are still
/// marked. Nor does stdout that is gone (a full disk, a closed pipe): every entry is marked, and
/// the exit code says the list was not printed.
#[test]
fn recover_goes_on_past_a_planted_record_and_past_a_stdout_that_is_gone() {
    let f = node();
    let dead = |id: &str| {
        json!({"format": 2, "job_id": id, "attempt": 1, "verb": "apply", "attribute": "web", "namespace": "ns", "pid": 999_999, "pid_start": 0,
               "started_at": "2026-01-01T00:00:00.000Z", "status": "running"})
        .to_string()
    };
    plant(
        &f,
        &format!(
            "mkdir -p locks/namespace-zz.tree.json/x\necho '{}' > jobs/dead1.json",
            dead("dead1")
        ),
    );
    let done = as_root(&f, &["recover"])
        .expect_success()
        .expect_stderr_contains("locks/namespace-zz.tree.json")
        .run();
    let changed: Vec<Value> = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(
        changed
            .iter()
            .map(|e| e["job_id"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["dead1"],
        "{done:?}"
    );
    plant(
        &f,
        &format!(
            "echo '{}' > jobs/dead2.json\necho '{}' > jobs/dead3.json",
            dead("dead2"),
            dead("dead3")
        ),
    );
    let full = std::process::Command::new(jobenv_bin!())
        .args(["recover", "--state-dir", f.state_dir().to_str().unwrap()])
        .stdout(std::fs::File::options().write(true).open("/dev/full").unwrap())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        full.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    for id in ["dead2", "dead3"] {
        let entry: Value = serde_json::from_str(&as_root(&f, &["status", id]).expect_success().run().stdout).unwrap();
        assert_eq!(entry["reason"], "interrupted", "{id} was not marked: {entry}");
    }
}

/// The lines of a `/proc/<pid>/status` that say who a process is: its user and group ids (real,
/// effective, saved, file system), its groups and its capabilities.
fn identity(status: &str) -> Vec<String> {
    status
        .lines()
        .filter(|l| {
            ["Uid:", "Gid:", "Groups:", "CapPrm:", "CapEff:", "CapAmb:"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A run by hand as root of a program that records who it is, then waits for the test: who
/// jobenv itself is while it waits (and whether its `/proc` entry is still sealed: its
/// `environ` root's, as for a process that is not dumpable), and who its program was.
fn who_runs(f: &Fixture) -> (Vec<String>, Vec<String>) {
    who_runs_started(f, |_| {})
}

/// [`who_runs`], with jobenv's command prepared by `prepare` first.
fn who_runs_started(f: &Fixture, prepare: impl FnOnce(&mut JobRun)) -> (Vec<String>, Vec<String>) {
    let mut run = as_root(f, &["run", "--verb", "apply", "--job-id", "who"])
        .payload(&json!({"ATTRIBUTE": "who", "NAMESPACE": "who"}));
    prepare(&mut run);
    let mut running = run.spawn();
    let (ids, go) = (f.job_dir().join("ids"), f.job_dir().join("go"));
    let recorded = fediversity_testkit::process::wait_until(Duration::from_secs(20), || {
        std::fs::read_to_string(&ids).is_ok_and(|t| t.ends_with("end\n"))
    });
    let jobenv = std::fs::read_to_string(format!("/proc/{}/status", running.id())).unwrap_or_default();
    let sealed = std::fs::metadata(format!("/proc/{}/environ", running.id())).map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid()
    });
    std::fs::write(&go, "").unwrap();
    let status = wait_exit(&mut running, Duration::from_secs(20));
    assert!(recorded, "the program did not record who it is");
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert_eq!(sealed.ok(), Some(0), "jobenv's /proc entry is not sealed");
    (identity(&jobenv), identity(&std::fs::read_to_string(&ids).unwrap()))
}

/// A node whose program `who` writes its own identity to `ids` in the job directory, then waits
/// for `go` there.
fn who_node() -> Fixture {
    node_running("who", |job| {
        format!(
            "cat /proc/self/status > {0}/ids.new; echo end >> {0}/ids.new; mv {0}/ids.new {0}/ids\nwhile [ ! -e {0}/go ]; do sleep 0.05; done",
            job.display()
        )
    })
}

/// A node whose one attribute's `apply` runs `script` (given the job directory), written out.
fn node_running(attribute: &str, script: impl FnOnce(&Path) -> String) -> Fixture {
    let mut f = Fixture::new();
    let script = script(&f.job_dir());
    f.program(attribute, "apply", &script);
    f.write();
    f
}

/// jobenv started as root on the worker's state directory is the worker, all the way: its real,
/// effective, saved and file-system ids, its groups (the worker's own, none of root's), no
/// capability left (so nothing can take root back), and so is its program; what it creates in
/// the directory is the worker's. On a state directory of root's, root stays root.
#[test]
fn jobenv_started_as_root_on_the_workers_state_directory_is_the_worker() {
    let f = who_node();
    f.hand_to(WORKER_UID);
    let (jobenv, program) = who_runs(&f);
    let worker = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(WORKER_UID))
        .unwrap()
        .expect("the worker's user has a name");
    let name = std::ffi::CString::new(worker.name).unwrap();
    let groups: Vec<String> = nix::unistd::getgrouplist(&name, worker.gid)
        .unwrap()
        .iter()
        .map(|g| g.to_string())
        .collect();
    let gid = worker.gid.as_raw();
    let expected = [
        format!("Uid: {WORKER_UID} {WORKER_UID} {WORKER_UID} {WORKER_UID}"),
        format!("Gid: {gid} {gid} {gid} {gid}"),
        format!("Groups: {}", groups.join(" ")).trim_end().to_owned(),
        "CapPrm: 0000000000000000".to_owned(),
        "CapEff: 0000000000000000".to_owned(),
        "CapAmb: 0000000000000000".to_owned(),
    ];
    assert_eq!(jobenv, expected, "jobenv while its program runs");
    assert_eq!(program, expected, "its program");
    // What a root-run command creates there is the worker's: the drain mark, say.
    as_root(&f, &["drain", "--wait", "0"]).expect_success().run();
    let mark = std::fs::metadata(f.state_dir().join("draining")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((mark.uid(), mark.gid()), (WORKER_UID, gid));
    as_root(&f, &["recover"]).expect_success().run();

    // Positive control: on a state directory of root's, root stays root (and what it makes
    // there is root's), so the lines above do tell who a process is.
    let f = who_node();
    let (jobenv, program) = who_runs(&f);
    assert!(
        jobenv[0].starts_with("Uid: 0 0 0 0") && program[0] == jobenv[0],
        "{jobenv:?} {program:?}"
    );
    assert_ne!(jobenv[3], "CapPrm: 0000000000000000", "{jobenv:?}");
    as_root(&f, &["drain", "--wait", "0"]).expect_success().run();
    assert_eq!(std::fs::metadata(f.state_dir().join("draining")).unwrap().uid(), 0);
}

/// A root that cannot become the worker (no `CAP_SETUID` and `CAP_SETGID`: a unit that keeps
/// them from root, a user namespace) does nothing in the worker's state directory: every command
/// is refused, naming the user to run it as.
#[test]
fn root_that_cannot_become_the_owner_is_refused_and_touches_nothing() {
    let without_setid = |mut run: JobRun| {
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            run.command().pre_exec(|| {
                // CAP_SETGID and CAP_SETUID (linux/capability.h).
                for cap in [6 as nix::libc::c_ulong, 7] {
                    if nix::libc::prctl(nix::libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        run
    };
    let f = node();
    let said = format!(
        "jobenv runs as root, and the state directory {} belongs to nobody (uid {WORKER_UID}), whom it cannot become (Operation not permitted): run it as that user",
        f.state_dir().display()
    );
    for args in [&["status"][..], &["drain", "--wait", "0"], &["recover"], &["prune"]] {
        let done = without_setid(as_root(&f, args))
            .expect_code(2)
            .expect_stderr_contains(&said)
            .run();
        assert_eq!(done.stdout, "", "{args:?}: {done:?}");
    }
    without_setid(as_root(&f, &["run", "--verb", "apply", "--job-id", "refused"]).payload(&payload("ns")))
        .expect_code(2)
        .expect_stderr_contains(&said)
        .run();
    assert!(!f.state_dir().join("draining").exists(), "a refused drain drained");
    assert!(!f.state_dir().join("jobs/refused.json").exists(), "a refused run ran");
    assert_eq!(runs(&f), 1);
    // Positive control: the same root, on a state directory of its own, goes on.
    let own = Fixture::new();
    let done = without_setid(own.jobenv(jobenv_bin!()).args(["status"]))
        .expect_success()
        .run();
    assert_eq!(done.stdout, "[]\n");
}

/// A new pseudo-terminal: its master (what a terminal emulator reads) and its slave (a shell's
/// terminal), both close-on-exec.
fn pty() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    use nix::libc;
    use std::os::fd::FromRawFd;
    // SAFETY: plain system calls; each descriptor is checked and owned once.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt");
        assert!(libc::grantpt(master) == 0 && libc::unlockpt(master) == 0);
        let mut name = [0 as libc::c_char; 64];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(slave >= 0, "open the pty's slave");
        (
            std::os::fd::OwnedFd::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    }
}

/// `command` starts in a session of its own whose controlling terminal is `slave`: as a command
/// typed in an operator's root shell does.
fn in_terminal(command: &mut std::process::Command, slave: &std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    let slave = slave.as_raw_fd();
    // SAFETY: only system calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::setsid() < 0 || nix::libc::ioctl(slave, nix::libc::TIOCSCTTY, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// What the terminal shows so far (the master's pending output), without waiting.
fn shown(master: &std::os::fd::OwnedFd) -> String {
    use std::io::Read;
    let file = std::fs::File::from(master.try_clone().unwrap());
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
    let mut bytes = Vec::new();
    let _ = (&file).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A job run by hand in a root shell runs its program as the worker's user: that program must
/// not reach the root shell's terminal, which a process of the worker's (the program itself, or
/// one that attaches to it: it is the worker's) could read keystrokes from, write to, or, where
/// `TIOCSTI` is allowed, type commands into for root's shell to run once jobenv exits.
#[test]
fn a_program_run_by_hand_as_the_worker_never_reaches_roots_terminal() {
    let f = node_running("tty", |job| {
        format!(
            "if (echo HIJACKED > /dev/tty) 2>/dev/null; then echo opened > {0}/tty; else echo refused > {0}/tty; fi",
            job.display()
        )
    });
    let job = f.job_dir();
    f.hand_to(WORKER_UID);
    let (master, slave) = pty();
    let mut run = as_root(&f, &["run", "--verb", "apply", "--job-id", "tty"])
        .payload(&json!({"ATTRIBUTE": "tty", "NAMESPACE": "tty"}))
        .expect_success();
    in_terminal(run.command(), &slave);
    run.run();
    let tty = std::fs::read_to_string(job.join("tty")).expect("the program ran");
    assert_eq!(tty, "refused\n", "the worker's program opened root's terminal");
    assert!(
        !shown(&master).contains("HIJACKED"),
        "the worker's program wrote on root's terminal"
    );

    // Positive control: a process of the worker's in a session of that terminal does reach it.
    let mut control = std::process::Command::new("/bin/sh");
    control
        .args(["-c", "echo HIJACKED > /dev/tty"])
        .uid(WORKER_UID)
        .gid(WORKER_UID);
    in_terminal(&mut control, &slave);
    assert!(control.status().unwrap().success());
    assert!(
        shown(&master).contains("HIJACKED"),
        "the control did not reach the terminal"
    );
}

/// A root whose change of user keeps its capabilities (the securebits `no-setuid-fixup` and
/// `keep-caps`, which a unit's `SecureBits=` or a container's runtime may set) still becomes the
/// worker with none: with `CAP_DAC_OVERRIDE` and the like, what the worker plants in the state
/// directory would steer root's rights again, in a process of the worker's.
#[test]
fn root_whose_change_of_user_keeps_its_capabilities_still_becomes_the_worker_without_any() {
    let f = who_node();
    f.hand_to(WORKER_UID);
    let keeping = |run: &mut JobRun| {
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            run.command().pre_exec(|| {
                let bits = nix::libc::SECBIT_NO_SETUID_FIXUP | nix::libc::SECBIT_KEEP_CAPS;
                if nix::libc::prctl(nix::libc::PR_SET_SECUREBITS, bits as nix::libc::c_ulong, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    let (jobenv, program) = who_runs_started(&f, keeping);
    let none = |ids: &[String]| {
        ids.iter()
            .filter(|l| l.starts_with("Cap"))
            .all(|l| l.ends_with(" 0000000000000000"))
    };
    assert!(jobenv[0].starts_with(&format!("Uid: {WORKER_UID} ")), "{jobenv:?}");
    assert!(none(&jobenv), "jobenv kept capabilities as the worker: {jobenv:?}");
    assert!(none(&program), "its program has capabilities: {program:?}");

    // Positive control: with these securebits, a change of user as jobenv makes it (all three
    // ids) does keep root's capabilities: what the child says of itself right after it.
    let (read, write) = nix::unistd::pipe().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&write);
    let mut control = std::process::Command::new("/bin/true");
    // SAFETY: only system calls between fork and exec, on a buffer of the child's stack.
    unsafe {
        control.pre_exec(move || {
            use nix::libc;
            let bits = libc::SECBIT_NO_SETUID_FIXUP | libc::SECBIT_KEEP_CAPS;
            let id = WORKER_UID;
            if libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) != 0
                || libc::setresgid(id, id, id) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setresuid(id, id, id) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            let status = libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY);
            let mut buffer = [0u8; 4096];
            let n = libc::read(status, buffer.as_mut_ptr().cast(), buffer.len());
            if n > 0 {
                libc::write(fd, buffer.as_ptr().cast(), n as usize);
            }
            Ok(())
        });
    }
    assert!(control.status().unwrap().success());
    drop(write);
    let said = std::io::read_to_string(std::fs::File::from(read)).unwrap();
    let control = identity(&said);
    assert!(control[0].starts_with(&format!("Uid: {WORKER_UID} ")), "{control:?}");
    assert!(!none(&control), "the securebits kept no capability: {control:?}");
}

/// systemd's `StateDirectory=` with `DynamicUser=` keeps the state directory in
/// `/var/lib/private/` (root's alone, mode 0700) and links it from `/var/lib/`: the worker's user
/// never passes through `private/` (its unit sees the directory mounted in place). Root's
/// `status`, `recover`, `drain` and `prune` by hand become that user all the same, and use the
/// directory root opened before it switched, rather than a path the worker cannot follow.
#[test]
fn root_by_hand_on_a_state_directory_behind_a_directory_of_roots_alone_still_works() {
    let f = node();
    let private = roots_dir(&f, "private");
    std::fs::rename(f.state_dir(), private.join("state")).unwrap();
    let linked = f.path().join("linked");
    std::os::unix::fs::symlink("private/state", &linked).unwrap();
    let state = linked.to_str().unwrap();
    let done = as_root(&f, &["status", "--state-dir", state]).expect_success().run();
    let listed: Vec<Value> = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{done:?}");
    assert_eq!(listed[0]["job_id"], "first");
    as_root(&f, &["drain", "--wait", "0", "--state-dir", state])
        .expect_success()
        .run();
    use std::os::unix::fs::MetadataExt;
    let mark = std::fs::metadata(linked.join("draining")).expect("drain made its mark");
    assert_eq!(mark.uid(), WORKER_UID, "the mark is the worker's");
    as_root(&f, &["recover", "--state-dir", state]).expect_success().run();
    assert!(!linked.join("draining").exists(), "recover ended the drain");
    as_root(&f, &["prune", "--state-dir", state]).expect_success().run();

    // Positive control: the worker's user itself cannot follow that path.
    let status = std::process::Command::new("/bin/ls")
        .arg(&linked)
        .uid(WORKER_UID)
        .gid(WORKER_UID)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the worker's user passes through private/");
}

/// A uid without a name (no entry in the user database: a container's, a `DynamicUser=` unit's
/// that is stopped) has no group of its own, and takes the state directory's group. A directory
/// root made and gave to that uid alone (`chown 4242 dir`) is still of root's group: jobenv
/// never becomes that uid with root's group, and says so.
#[test]
fn root_never_becomes_a_nameless_owner_with_roots_group() {
    const NAMELESS: u32 = 4242;
    let nobody = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(NAMELESS)).unwrap();
    assert!(nobody.is_none(), "uid {NAMELESS} has a name here");
    let f = who_node();
    f.hand_to(NAMELESS);
    std::os::unix::fs::chown(f.state_dir(), None, Some(0)).unwrap();
    let said = format!(
        "jobenv runs as root, and the state directory {} belongs to uid {NAMELESS}, whom it cannot become (it has no name, so no group of its own, and the directory's group is root's: give the directory that user's group): run it as that user",
        f.state_dir().display()
    );
    as_root(&f, &["status"])
        .expect_code(2)
        .expect_stderr_contains(&said)
        .run();
    as_root(&f, &["run", "--verb", "apply", "--job-id", "who"])
        .payload(&json!({"ATTRIBUTE": "who", "NAMESPACE": "who"}))
        .expect_code(2)
        .expect_stderr_contains(&said)
        .run();
    assert!(!f.job_dir().join("ids").exists(), "the program ran");

    // Positive control: the directory of that uid's group, jobenv and its program are that uid
    // and group, with no other group.
    std::os::unix::fs::chown(f.state_dir(), None, Some(NAMELESS)).unwrap();
    let (jobenv, program) = who_runs(&f);
    let expected = [
        format!("Uid: {NAMELESS} {NAMELESS} {NAMELESS} {NAMELESS}"),
        format!("Gid: {NAMELESS} {NAMELESS} {NAMELESS} {NAMELESS}"),
        "Groups:".to_owned(),
    ];
    assert_eq!(jobenv[..3], expected, "{jobenv:?}");
    assert_eq!(program[..3], expected, "{program:?}");
}

/// A state directory of root's that another user can change is not root's alone: jobenv stays
/// root there (it becomes no one), so whatever that user renames, plants or links in it would
/// meet root again. Refused: one that a group other than root's, or everyone, may write, and one
/// whose `jobs/` or `locks/` belongs to another user.
#[test]
fn root_refuses_a_state_directory_of_roots_that_another_user_can_change() {
    use std::os::unix::fs::chown;
    let f = node();
    let state = f.state_dir();
    chown(&state, Some(0), Some(WORKER_UID)).unwrap();
    let commands: [&[&str]; 4] = [&["status"], &["recover"], &["drain", "--wait", "0"], &["prune"]];
    for (mode, who) in [
        (0o770, format!("group {WORKER_UID} may")),
        (0o757, "everyone may".to_owned()),
    ] {
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(mode)).unwrap();
        let said = format!("{} belongs to root, and {who} write it", state.display());
        for args in commands {
            let done = as_root(&f, args).expect_code(2).expect_stderr_contains(&said).run();
            assert!(!done.stdout.contains("first"), "{args:?}: {done:?}");
        }
        as_root(&f, &["run", "--verb", "apply", "--job-id", "refused"])
            .payload(&payload("ns"))
            .expect_code(2)
            .expect_stderr_contains(&said)
            .run();
    }
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o750)).unwrap();
    let said = format!(
        "{}/jobs belongs to uid {WORKER_UID}, not to the state directory's owner (uid 0)",
        state.display()
    );
    as_root(&f, &["status"])
        .expect_code(2)
        .expect_stderr_contains(&said)
        .run();
    as_root(&f, &["recover"])
        .expect_code(2)
        .expect_stderr_contains(&said)
        .run();
    assert!(!state.join("draining").exists() && !state.join("jobs/refused.json").exists());
    assert_eq!(runs(&f), 1);

    // Positive control: the same directory, root's alone (its journal too), is root's to use.
    for dir in [state.join("jobs"), state.join("locks")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            chown(entry.unwrap().path(), Some(0), Some(0)).unwrap();
        }
        chown(&dir, Some(0), Some(0)).unwrap();
    }
    let done = as_root(&f, &["status"]).expect_success().run();
    assert!(done.stdout.contains("\"first\""), "{done:?}");
    as_root(&f, &["recover"]).expect_success().run();
}

/// Runs `script` with `sh` in `dir` as the worker's user.
fn as_worker_in(dir: &Path, script: &str) {
    let status = std::process::Command::new("/bin/sh")
        .args(["-c", &format!("set -e\n{script}")])
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .uid(WORKER_UID)
        .gid(WORKER_UID)
        .status()
        .unwrap();
    assert!(status.success(), "failed as the worker: {script}");
}

/// A state directory at a path another user can change (a directory of the worker's on the way:
/// its home, Windmill's own state directory) can be swapped by that user, between two commands
/// or within one, for a link to any directory: root would then work in a directory of root's it
/// was never given (its `draining`, `jobs/` and `locks/` made there), or become whoever owns the
/// directory linked. jobenv as root takes a state directory only at a path of root's alone, and
/// says which part of the path is not.
#[test]
fn root_refuses_a_state_directory_at_a_path_another_user_can_change() {
    use std::os::unix::fs::chown;
    let f = node();
    let home = f.path().join("home");
    std::fs::create_dir(&home).unwrap();
    chown(&home, Some(WORKER_UID), Some(WORKER_UID)).unwrap();
    std::fs::rename(f.state_dir(), home.join("state")).unwrap();
    let roots = f.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    let state = home.join("state");
    let said = format!(
        "jobenv runs as root, and the state directory {} is reached through {}, which belongs to uid {WORKER_UID}: as root, jobenv uses a state directory only at a path no other user can change (keep it in directories of root's, or run the command as that user)",
        state.display(),
        home.display()
    );
    let commands: [&[&str]; 4] = [&["status"], &["drain", "--wait", "0"], &["recover"], &["prune"]];
    let with_state = |args: &[&str]| {
        let mut args: Vec<&str> = args.to_vec();
        args.extend(["--state-dir", state.to_str().unwrap()]);
        args.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    // The worker's own directory there: refused as it is, since it could be swapped...
    for args in commands {
        let args = with_state(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let done = as_root(&f, &args).expect_code(2).expect_stderr_contains(&said).run();
        assert!(!done.stdout.contains("first"), "{done:?}");
    }
    // ...for a link to a directory of root's, say.
    as_worker_in(&home, &format!("mv state real\nln -s {} state", roots.display()));
    for args in commands {
        let args = with_state(args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        as_root(&f, &args).expect_code(2).expect_stderr_contains(&said).run();
    }
    let args = with_state(&["run", "--verb", "apply", "--job-id", "swapped"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    as_root(&f, &args)
        .payload(&payload("ns"))
        .expect_code(2)
        .expect_stderr_contains(&said)
        .run();
    assert_eq!(
        names(&roots),
        Vec::<String>::new(),
        "root worked in a directory it was never given"
    );
    assert_eq!(runs(&f), 1);

    // Positive control: the same directory at a path of root's is the worker's, and used.
    std::fs::rename(home.join("real"), f.state_dir()).unwrap();
    let done = as_root(&f, &["status"]).expect_success().run();
    assert!(done.stdout.contains("\"first\""), "{done:?}");
    as_root(&f, &["drain", "--wait", "0"]).expect_success().run();
    as_root(&f, &["recover"]).expect_success().run();
}
