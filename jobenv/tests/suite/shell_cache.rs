//! A job's shell is evaluated apart from its run, in an environment of the node's alone, and a
//! tree in the Nix store is evaluated once: the next jobs of the same key run its derivation
//! without evaluating. With the real nix-instantiate, nix-store and nix-shell; the trees' Nix
//! code says on stderr when it is evaluated (`builtins.trace`) and what it saw of the
//! environment.

use std::path::Path;
use std::time::{Duration, Instant};

use fediversity_testkit::job_run::Done;
use fediversity_testkit::jobenv_bin;
use fediversity_testkit::nix_fixture::{Fixture, WORKER_UID};
use serde_json::{Value, json};

const ATTR: &str = "devShells.x86_64-linux.web";

/// A tree whose evaluation traces `EVALUATED <mark>` with what it saw (a payload key, a node
/// key, the system), whose shell needs an input derivation (`dep`, built by a builder that
/// sleeps `build_seconds` and says `dep-built <mark>`), and whose shell puts the fixture's
/// programs on PATH and records what evaluation saw of the payload (`EVAL_PAYLOAD`). `shell`
/// replaces the shell's attribute set (a `throw`, say). `mark` makes its outputs its own.
fn tree_text(f: &Fixture, mark: &str, build_seconds: u32, dep_exit: u32, shell: Option<&str>) -> String {
    let template = r#"{ ... }:
let
  system = builtins.currentSystem;
  seen = builtins.trace "EVALUATED MARK payload=[${builtins.getEnv "PAYLOAD_VAR"}] node=[${builtins.getEnv "NODE_VAR"}] system=[${system}]" null;
  dep = builtins.derivation {
    name = "dep"; inherit system; builder = "/bin/sh";
    args = [ "-c" "echo dep-built MARK >&2; /bin/sleep SECONDS; echo MARK > $out; exit EXIT" ];
  };
  shell = name: builtins.seq seen (SHELL);
in { devShells.${system} = { web = shell "web-shell"; }; }
"#;
    let default_shell = r#"builtins.derivation {
    inherit name system; builder = "/bin/sh"; args = [ "-c" "echo > $out" ];
    PATH = "BIN:/usr/bin:/bin";
    DEP = dep;
    EVAL_PAYLOAD = builtins.getEnv "PAYLOAD_VAR";
  }"#;
    template
        .replace("SHELL", shell.unwrap_or(default_shell))
        .replace("MARK", &format!("{mark}-{}", f.path().display()))
        .replace("SECONDS", &build_seconds.to_string())
        .replace("EXIT", &dep_exit.to_string())
        .replace("BIN", &f.bin().display().to_string())
}

/// A node whose program `web-apply` prints what it got (from the payload, and what evaluation
/// saw of it), with a payload key and a node-only key declared, and Nix offline (no
/// substituter: nothing is downloaded, and Nix does not wait for one).
fn node() -> Fixture {
    let mut f = Fixture::new();
    f.program(
        "web",
        "apply",
        r#"echo "ran PAYLOAD_VAR=[$PAYLOAD_VAR] EVAL_PAYLOAD=[$EVAL_PAYLOAD]""#,
    )
    .declare("PAYLOAD_VAR", None)
    .declare_node_only("NODE_VAR", None)
    .node("NODE_VAR", "node-value")
    .node("NIX_CONFIG", "substituters =");
    f
}

fn payload(namespace: &str) -> Value {
    json!({"ATTRIBUTE": "web", "NAMESPACE": namespace, "PAYLOAD_VAR": "payload-value"})
}

fn run(f: &Fixture, namespace: &str) -> Done {
    f.jobenv(jobenv_bin!()).verb("apply").payload(&payload(namespace)).run()
}

fn run_ok(f: &Fixture, namespace: &str) -> Done {
    let done = run(f, namespace);
    assert!(done.success() && done.stdout.contains("ran "), "{done:?}");
    done
}

fn evaluations(done: &Done) -> usize {
    done.stderr.matches("trace: EVALUATED").count()
}

/// The cache's entries (`<key>.json`) in the state directory.
fn entries(f: &Fixture) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(f.state_dir().join("shells")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = dir
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter_map(|n| n.strip_suffix(".json").map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn entry(f: &Fixture, key: &str) -> Value {
    serde_json::from_slice(&std::fs::read(f.state_dir().join("shells").join(format!("{key}.json"))).unwrap()).unwrap()
}

#[test]
fn the_second_job_of_a_tree_runs_its_shell_without_evaluating_it() {
    let mut f = node();
    let tree = f.store_tree("tree", &tree_text(&f, "one", 0, 0, None));
    let first = run_ok(&f, "ns1");
    assert_eq!(evaluations(&first), 1, "{first:?}");
    assert!(
        first
            .stderr
            .contains(&format!("jobenv: evaluating {ATTR} (not cached yet)")),
        "{first:?}"
    );
    assert!(first.stderr.contains("dep-built one"), "the input was built: {first:?}");
    let keys = entries(&f);
    assert_eq!(keys.len(), 1);
    let cached = entry(&f, &keys[0]);
    assert_eq!(cached["root"], tree);
    assert_eq!(cached["attr_path"], ATTR);

    let second = run_ok(&f, "ns2");
    assert_eq!(evaluations(&second), 0, "a hit evaluated: {second:?}");
    assert!(!second.stderr.contains("dep-built"), "{second:?}");
    assert!(
        second.stderr.contains(&format!(
            "jobenv: the shell {ATTR} of this tree is cached: it is not evaluated"
        )),
        "{second:?}"
    );
    assert_eq!(entries(&f), keys);
}

/// `env --format json` of an apply in namespace `ns` on node `f`.
fn env(f: &Fixture) -> Value {
    let done = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply", "--format", "json"])
        .payload(&payload("ns"))
        .expect_success()
        .run();
    serde_json::from_str(&done.stdout).unwrap()
}

#[test]
fn env_says_whether_the_shell_is_cached_and_shows_both_steps() {
    let mut f = node();
    let tree = f.store_tree("tree", &tree_text(&f, "env", 0, 0, None));
    let before = env(&f);
    assert_eq!(before["evaluation"]["cache"], "miss");
    assert_eq!(before["evaluation"]["argv"][1], tree);
    let root = before["evaluation"]["argv"][10].as_str().unwrap().to_owned();
    assert!(
        root.starts_with(&format!("{}/shells/", f.state_dir().display())) && root.ends_with("/shell.drv"),
        "{root}"
    );
    assert_eq!(before["argv"][1], "<the derivation the evaluation makes>");
    assert_eq!(before["evaluation"]["env"]["NODE_VAR"]["value"], "node-value");
    assert!(before["evaluation"]["env"].get("PAYLOAD_VAR").is_none());
    assert!(entries(&f).is_empty(), "env cached something");

    run_ok(&f, "ns");
    let after = env(&f);
    let drv = entry(&f, &entries(&f)[0])["drv"].clone();
    assert_eq!(after["evaluation"]["cache"], "hit");
    assert_eq!(after["evaluation"]["drv"], drv);
    assert_eq!(after["argv"][1], drv);
    let text = f
        .jobenv(jobenv_bin!())
        .args(["env", "--verb", "apply"])
        .payload(&payload("ns"))
        .expect_success()
        .run()
        .stdout;
    assert!(
        text.starts_with(&format!(
            "# cache: hit, the evaluation does not run: {}\n",
            drv.as_str().unwrap()
        )),
        "{text}"
    );
}

/// The evaluation of a tree in the store and of one outside it: the payload's variable is
/// empty there, the node's (a node-only key) is seen; the program gets the payload's.
#[test]
fn evaluation_sees_the_nodes_values_and_never_the_payloads() {
    let mut f = node();
    let plain = f.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("default.nix"), tree_text(&f, "plain", 0, 0, None)).unwrap();
    f.node("DEPLOYMENT_ROOT", plain.display().to_string());
    let outside = run_ok(&f, "ns");
    f.store_tree("tree", &tree_text(&f, "stored", 0, 0, None));
    let stored = run_ok(&f, "ns");
    for done in [&outside, &stored] {
        assert_eq!(evaluations(done), 1, "{done:?}");
        // The positive control: evaluation reads the environment (the node's value), and the
        // program does get the payload's.
        assert!(done.stderr.contains("payload=[] node=[node-value]"), "{done:?}");
        assert!(
            done.stdout.contains("ran PAYLOAD_VAR=[payload-value] EVAL_PAYLOAD=[]"),
            "{done:?}"
        );
    }
    assert!(stored.stderr.contains("not cached yet"));
    assert!(!outside.stderr.contains("not cached yet"));
}

/// A program can write the worker's home (the job's `HOME`): a `nix.conf` there would steer
/// every later evaluation (`system`, `nix-path`). Evaluation reads none.
#[test]
fn the_workers_home_does_not_steer_evaluation() {
    let mut f = node();
    let conf = f.path().join(".config/nix");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("nix.conf"), "system = evil-linux\n").unwrap();
    // The positive control: Nix run with that home reads it.
    let out = f
        .nix("nix-instantiate")
        .args(["--eval", "-E", "builtins.currentSystem"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "\"evil-linux\"");
    f.store_tree("tree", &tree_text(&f, "home", 0, 0, None));
    let done = run_ok(&f, "ns");
    assert!(done.stderr.contains("system=[x86_64-linux]"), "{done:?}");
}

#[test]
fn a_new_store_path_is_evaluated_anew_and_an_old_one_is_still_cached() {
    let mut f = node();
    let first = f.store_tree("tree-a", &tree_text(&f, "a", 0, 0, None));
    assert_eq!(evaluations(&run_ok(&f, "ns")), 1);
    assert_eq!(evaluations(&run_ok(&f, "ns")), 0);
    let second = f.store_tree("tree-b", &tree_text(&f, "b", 0, 0, None));
    assert_ne!(first, second);
    let changed = run_ok(&f, "ns");
    assert_eq!(evaluations(&changed), 1, "{changed:?}");
    assert!(changed.stderr.contains("EVALUATED b-"), "{changed:?}");
    assert_eq!(evaluations(&run_ok(&f, "ns")), 0);
    assert_eq!(entries(&f).len(), 2);
    f.node("DEPLOYMENT_ROOT", first.clone()).node("NIXPKGS", first);
    assert_eq!(evaluations(&run_ok(&f, "ns")), 0, "the first tree's entry is gone");
}

/// An evaluation error is the job's error, as it was when nix-shell evaluated (message, exit
/// code, result.json), and nothing is cached: the next job evaluates again.
#[test]
fn a_failed_evaluation_is_the_jobs_failure_and_is_not_cached() {
    let mut f = node();
    let tree = f.store_tree(
        "tree",
        &tree_text(&f, "broken", 0, 0, Some(r#"throw "deployment is broken""#)),
    );
    // What nix-shell itself says of that tree.
    let out = f
        .nix("nix-shell")
        .args([tree.as_str(), "-A", ATTR, "--run", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: deployment is broken"));
    for attempt in ["1", "2"] {
        let done = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .env("WM_JOB_ID", format!("broken-{attempt}"))
            .payload(&payload("ns"))
            .expect_code(1)
            .expect_stderr_contains("error: deployment is broken")
            .expect_stderr_contains("jobenv: web-apply failed with exit code 1")
            .run();
        assert_eq!(evaluations(&done), 1, "attempt {attempt} did not evaluate: {done:?}");
        let result = f.result_json();
        assert_eq!(
            (result["status"].as_str(), result["exit_code"].as_i64()),
            (Some("failed"), Some(1))
        );
        assert!(entries(&f).is_empty(), "a failed evaluation was cached");
    }
    let keys: Vec<_> = std::fs::read_dir(f.state_dir().join("shells"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    for dir in keys {
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "roots left in {}",
            dir.display()
        );
    }
}

/// An input that fails to build fails the job as nix-shell's build did (exit 100), and is not
/// cached.
#[test]
fn an_input_that_fails_to_build_is_the_jobs_failure_and_is_not_cached() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "unbuildable", 0, 3, None));
    for _ in 0..2 {
        let done = f
            .jobenv(jobenv_bin!())
            .verb("apply")
            .payload(&payload("ns"))
            .expect_code(100)
            .expect_stderr_contains("failed with exit code 3")
            .run();
        assert_eq!(evaluations(&done), 1, "{done:?}");
        assert!(entries(&f).is_empty());
    }
}

/// A store of the test's own (`NIX_REMOTE=local?store=...`): its garbage collection touches no
/// one else's paths.
fn isolated_store(f: &mut Fixture) {
    let store = f.path().join("nix");
    let d = store.display();
    f.node("NIX_REMOTE", format!("local?store={d}/store&state={d}/var&log={d}/log"));
}

/// A garbage collection between two jobs takes nothing the cached shell needs: the second job
/// neither evaluates nor builds. Without the cache's roots the same collection takes the
/// derivation: the entry cannot be used, is dropped, and the job evaluates and builds again.
#[test]
fn garbage_collection_between_two_jobs_does_not_break_the_second() {
    let mut f = node();
    isolated_store(&mut f);
    let tree = f.store_tree("tree", &tree_text(&f, "gc", 0, 0, None));
    // The tree itself stays (on a node the system's closure holds it).
    let held = f.path().join("held-tree");
    let out = f
        .nix("nix-store")
        .args(["--realise", "--add-root"])
        .arg(&held)
        .arg(&tree)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let gc = |f: &Fixture| {
        let out = f.nix("nix-store").arg("--gc").output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run_ok(&f, "ns");
    assert!(first.stderr.contains("dep-built gc"), "{first:?}");
    gc(&f);
    let second = run_ok(&f, "ns");
    assert_eq!(evaluations(&second), 0, "{second:?}");
    assert!(
        !second.stderr.contains("dep-built"),
        "the input was built again: {second:?}"
    );

    // The positive control: the entry's roots gone, the collection takes its derivation.
    let key = entries(&f).remove(0);
    let drv = entry(&f, &key)["drv"].as_str().unwrap().to_owned();
    for root in std::fs::read_dir(f.state_dir().join("shells").join(&key)).unwrap() {
        std::fs::remove_file(root.unwrap().path()).unwrap();
    }
    gc(&f);
    assert!(!Path::new(&drv).exists(), "the collection kept {drv}");
    let third = run_ok(&f, "ns");
    assert!(
        third
            .stderr
            .contains(&format!("the cached shell {ATTR} cannot be used")),
        "{third:?}"
    );
    assert_eq!(evaluations(&third), 1, "{third:?}");
    assert!(third.stderr.contains("dep-built gc"), "{third:?}");
    gc(&f);
    assert_eq!(evaluations(&run_ok(&f, "ns")), 0);
}

/// Jobs of one key that start together evaluate once: the others wait for it, then run what
/// it cached. Outside the store (the control), each evaluates.
#[test]
fn the_evaluation_is_a_stage_of_the_jobs_trace_with_what_nix_instantiate_printed() {
    let mut f = node();
    f.store_tree(
        "tree",
        &tree_text(&f, "traced", 0, 0, Some(r#"throw "deployment is broken""#)),
    );
    let receiver = fediversity_testkit::otlp_receiver::Receiver::start();
    f.jobenv(jobenv_bin!())
        .verb("apply")
        .env("WM_JOB_ID", "traced-1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .payload(&payload("ns"))
        .expect_code(1)
        .expect_stderr_contains("error: deployment is broken")
        .run();
    let recorded = receiver.recorded();
    let span = |name: &str| {
        recorded
            .spans
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no span {name}: {:#?}", recorded.spans))
    };
    let (evaluation, program) = (span("evaluation"), span("program"));
    assert_eq!(evaluation.parent_span_id, program.span_id);
    assert_eq!((evaluation.status.0, program.status.0), (2, 2), "{evaluation:#?}");
    // What nix-instantiate printed is the evaluation's, and what jobenv said before it the
    // program stage's (the positive control: not every record is the evaluation's).
    let record = |text: &str| {
        recorded
            .records
            .iter()
            .find(|r| r.body.contains(text))
            .unwrap_or_else(|| panic!("no record {text:?}: {:#?}", recorded.records))
    };
    assert_eq!(record("error: deployment is broken").span_id, evaluation.span_id);
    assert_eq!(record("trace: EVALUATED traced").span_id, evaluation.span_id);
    assert_eq!(record("jobenv: running web-apply").span_id, program.span_id);
}

#[test]
fn concurrent_first_jobs_evaluate_once() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "together", 2, 0, None));
    let together = |f: &Fixture| -> Vec<Done> {
        let jobs: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|ns| f.jobenv(jobenv_bin!()).verb("apply").payload(&payload(ns)).spawn())
            .collect();
        jobs.into_iter().map(|job| job.finish()).collect()
    };
    let done = together(&f);
    for job in &done {
        assert!(job.success() && job.stdout.contains("ran "), "{job:?}");
    }
    assert_eq!(done.iter().map(evaluations).sum::<usize>(), 1, "{done:?}");
    let waited = done
        .iter()
        .filter(|job| {
            job.stderr
                .contains(&format!("another job is evaluating {ATTR}: waiting for it"))
        })
        .count();
    assert!(waited >= 1, "{done:?}");

    let plain = f.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    std::fs::write(plain.join("default.nix"), tree_text(&f, "apart", 0, 0, None)).unwrap();
    f.node("DEPLOYMENT_ROOT", plain.display().to_string());
    let done = together(&f);
    assert_eq!(done.iter().map(evaluations).sum::<usize>(), 3, "{done:?}");
}

/// A job waits for another's evaluation only within its own limits: its timeout ends it (124),
/// without evaluating.
#[test]
fn waiting_for_another_evaluation_counts_against_the_timeout() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "slow", 4, 0, None));
    let first = f.jobenv(jobenv_bin!()).verb("apply").payload(&payload("a")).spawn();
    std::thread::sleep(Duration::from_millis(700));
    let started = Instant::now();
    let second = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_TIMEOUT", "1")
        .payload(&payload("b"))
        .expect_code(124)
        .expect_stderr_contains(format!("another job is evaluating {ATTR}: waiting for it"))
        .expect_stderr_contains("web-apply timed_out with exit code 124")
        .run();
    assert!(started.elapsed() < Duration::from_secs(4), "{second:?}");
    assert_eq!(evaluations(&second), 0, "{second:?}");
    let first = first.finish();
    assert!(first.success(), "{first:?}");
}

/// A cancel while a job waits for another's evaluation ends it at once, as a cancel before its
/// program started, having evaluated nothing.
#[test]
fn a_cancel_ends_the_wait_for_another_evaluation() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "cancelled", 4, 0, None));
    let first = f.jobenv(jobenv_bin!()).verb("apply").payload(&payload("a")).spawn();
    std::thread::sleep(Duration::from_millis(700));
    let second = f.jobenv(jobenv_bin!()).verb("apply").payload(&payload("b")).spawn();
    std::thread::sleep(Duration::from_millis(700));
    let started = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(second.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let second = second.finish();
    assert!(started.elapsed() < Duration::from_secs(2), "{second:?}");
    assert_eq!(second.code, Some(143), "{second:?}");
    assert!(second.stderr.contains("waiting for it"), "{second:?}");
    assert!(
        second
            .stderr
            .contains("received SIGTERM: the job is canceled before its program started"),
        "{second:?}"
    );
    assert_eq!(evaluations(&second), 0, "{second:?}");
    assert!(first.finish().success());
}

/// What a job waited for another's evaluation is taken from its timeout: here the cached
/// shell's program, which would end in time on its own, is stopped by what is left of it.
#[test]
fn the_program_after_a_wait_gets_what_is_left_of_the_timeout() {
    let mut f = node();
    f.program("web", "apply", "/bin/sleep 2; echo ran");
    f.store_tree("tree", &tree_text(&f, "rest", 2, 0, None));
    let first = f.jobenv(jobenv_bin!()).verb("apply").payload(&payload("a")).spawn();
    std::thread::sleep(Duration::from_millis(700));
    let second = f
        .jobenv(jobenv_bin!())
        .verb("apply")
        .env("JOBENV_TIMEOUT", "3")
        .payload(&payload("b"))
        .expect_code(124)
        .expect_stderr_contains(format!("another job is evaluating {ATTR}: waiting for it"))
        .expect_stderr_contains("is cached: it is not evaluated")
        .expect_stderr_contains("timeout of 3s reached")
        .run();
    assert_eq!(evaluations(&second), 0, "{second:?}");
    assert!(first.finish().success());
}

/// `prune` drops the shells of trees no longer deployed, never one a job runs, and the roots
/// of jobs whose jobenv is gone.
#[test]
fn prune_drops_the_shells_of_trees_no_longer_deployed() {
    let mut f = node();
    let first = f.store_tree("tree-a", &tree_text(&f, "a", 0, 0, None));
    run_ok(&f, "ns");
    let [old] = entries(&f).try_into().unwrap();
    f.store_tree("tree-b", &tree_text(&f, "b", 0, 0, None));
    run_ok(&f, "ns");
    let stale = f.state_dir().join("shells/job-999999-1");
    std::fs::create_dir(&stale).unwrap();
    std::os::unix::fs::symlink(
        "/nix/store/00000000000000000000000000000000-x.drv",
        stale.join("shell.drv"),
    )
    .unwrap();
    let prune = |f: &Fixture, expected: &str| {
        f.jobenv(jobenv_bin!())
            .args(["prune"])
            .expect_success()
            .expect_stdout(expected)
            .run()
    };
    prune(&f, "{\"pruned\":0,\"shells_pruned\":1}\n");
    let [kept] = entries(&f).try_into().unwrap();
    assert_ne!(kept, old);
    let shells = f.state_dir().join("shells");
    for gone in [
        format!("{old}.json"),
        old.clone(),
        format!("{old}.lock"),
        format!("{old}.eval.lock"),
    ] {
        assert!(!shells.join(&gone).exists(), "{gone} was kept");
    }
    assert!(!stale.exists(), "the root of a jobenv that is gone was kept");
    assert_eq!(
        evaluations(&run_ok(&f, "ns")),
        0,
        "the deployed tree's shell was dropped"
    );

    // An entry in use is kept, whatever it deploys, until its job ended.
    let release = f.path().join("release");
    f.program(
        "web",
        "apply",
        &format!("while [ ! -e {} ]; do sleep 0.05; done; echo ran", release.display()),
    );
    let running = f.jobenv(jobenv_bin!()).verb("apply").payload(&payload("ns")).spawn();
    std::thread::sleep(Duration::from_millis(700));
    f.node("DEPLOYMENT_ROOT", first.clone()).node("NIXPKGS", first);
    prune(&f, "{\"pruned\":0,\"shells_pruned\":0}\n");
    assert_eq!(entries(&f), std::slice::from_ref(&kept));
    std::fs::write(&release, "").unwrap();
    assert!(running.finish().success());
    prune(&f, "{\"pruned\":0,\"shells_pruned\":1}\n");
    assert!(entries(&f).is_empty());
}

/// Without a readable deploy-env.json, `prune` cannot tell which tree is deployed: it drops
/// none for that (and says so).
#[test]
fn prune_keeps_every_tree_when_it_cannot_tell_which_is_deployed() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "kept", 0, 0, None));
    run_ok(&f, "ns");
    f.jobenv(jobenv_bin!())
        .args(["prune", "--deploy-env", "/nonexistent/deploy-env.json"])
        .expect_success()
        .expect_stdout("{\"pruned\":0,\"shells_pruned\":0}\n")
        .expect_stderr_contains("/nonexistent/deploy-env.json cannot be read")
        .run();
    assert_eq!(entries(&f).len(), 1);
}

/// A change to the cache's files, as a program of the worker's user could make.
type Tamper<'a> = Box<dyn Fn() + 'a>;

/// What a program could plant in the cache that is cheap to refuse: an entry or a root that is
/// not the owner's, a link in an entry's place, a root that leads elsewhere, a derivation that
/// is not one. Each is dropped and the job evaluates.
#[test]
fn an_entry_that_cannot_be_trusted_is_dropped_and_the_job_evaluates() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "planted", 0, 0, None));
    run_ok(&f, "ns");
    let key = entries(&f).remove(0);
    let shells = f.state_dir().join("shells");
    let file = shells.join(format!("{key}.json"));
    let good = std::fs::read(&file).unwrap();
    let elsewhere = f.path().join("elsewhere.json");
    let mut tampered: Vec<(&str, Tamper)> = Vec::new();
    tampered.push((
        "belongs to uid 65534",
        Box::new(|| std::os::unix::fs::chown(&file, Some(WORKER_UID), None).unwrap()),
    ));
    tampered.push((
        "is a symbolic link",
        Box::new(|| {
            std::fs::write(&elsewhere, &good).unwrap();
            std::fs::remove_file(&file).unwrap();
            std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        }),
    ));
    tampered.push((
        "its root in leads elsewhere",
        Box::new(|| {
            let link = shells.join(&key).join("in");
            std::fs::remove_file(&link).unwrap();
            std::os::unix::fs::symlink("/nix/store", &link).unwrap();
        }),
    ));
    tampered.push((
        "not a derivation of the store",
        Box::new(|| {
            let mut e: Value = serde_json::from_slice(&good).unwrap();
            e["drv"] = json!("/etc/passwd");
            std::fs::write(&file, e.to_string()).unwrap();
        }),
    ));
    for (why, tamper) in tampered {
        tamper();
        let done = run_ok(&f, "ns");
        assert!(
            done.stderr.contains(&format!("the cached shell {ATTR} cannot be used")) && done.stderr.contains(why),
            "{why}: {done:?}"
        );
        assert_eq!(evaluations(&done), 1, "{why}: {done:?}");
        assert_eq!(evaluations(&run_ok(&f, "ns")), 0, "{why}: the new entry is used");
    }
}

/// jobenv run as root in a state directory of another user (an operator's `run` or `env` by
/// hand on a node whose worker has its own user) never runs as root a shell that user's
/// programs could have cached: it becomes that user first, and then uses the cache as that
/// user's own jobs do (where it once turned the cache off for root).
#[test]
fn root_in_another_users_state_directory_uses_the_cache_as_that_user() {
    let mut f = node();
    f.store_tree("tree", &tree_text(&f, "foreign", 0, 0, None));
    run_ok(&f, "ns");
    let before = entries(&f);
    assert_eq!(before.len(), 1);
    // Positive control: root's own state directory, root's own cache.
    assert_eq!(env(&f)["evaluation"]["cache"], "hit");
    // The worker's, as a program of the worker's could have left it: root looks it up as the
    // worker, whose entry it is (as root it would be refused: not the directory's owner's,
    // or not used at all).
    for entry in walkdir::WalkDir::new(f.state_dir()) {
        let entry = entry.unwrap();
        std::os::unix::fs::lchown(entry.path(), Some(WORKER_UID), Some(WORKER_UID)).unwrap();
    }
    f.hand_to(WORKER_UID);
    let shown = env(&f);
    assert_eq!(shown["evaluation"]["cache"], "hit", "{shown}");
    let shells = f.state_dir().join("shells");
    assert!(
        shown["evaluation"]["argv"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().is_some_and(|a| a.starts_with(shells.to_str().unwrap()))),
        "{shown}"
    );
    assert_eq!(entries(&f), before);
}
