//! The spine driven in-process: its decisions, each in a few lines over a [`Node`]. The node's
//! files, journal and locks are real, in a temporary directory; the store of the job's record is
//! a memory one ([`MemStore`]) and the program a fake one ([`Fake`]). No process is started,
//! nothing sleeps, and no cancel signal is caught ([`Cancel::unsignalled`]).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::program::{Program, Ran};
use super::{Parts, Run};
use crate::cancel::Cancel;
use crate::error::{EXIT_INTERNAL, EXIT_NOT_READY, EXIT_REJECTED, Error, Refusal};
use crate::plan::Plan;
use crate::record::store::{Claim, Store};
use crate::record::{self, Ending, Entry, InterruptedBy, Journal, Known, Lock, Reason, Request, Status};
use crate::run::tree::Tree;
use crate::run::{LeaseWatch, Renewal};
use crate::run::{Outcome, RunOptions};
use crate::settings::{Containment, JobSettings, NodeFiles, RunSettings, Runner};

/// What the shared journal of a [`MemStore`] holds, and how it behaves; it outlives each run.
#[derive(Default)]
struct Mem {
    entries: RefCell<BTreeMap<String, Entry>>,
    /// Another run holds the job id (a live attempt), or the namespace: who.
    job_holder: RefCell<Option<String>>,
    namespace_holder: RefCell<Option<String>>,
    /// The run's leases, when the store has them.
    lease: Cell<Option<Renewal>>,
    /// Step 8 finds the shared journal unreachable.
    unreachable: Cell<bool>,
    /// Step 10 cannot write the end.
    end_fails: Cell<bool>,
}

/// A [`Store`] in memory, beside the node's real journal (its locks, its drain mark).
struct MemStore {
    local: Journal,
    mem: Rc<Mem>,
}

/// What a [`MemStore`] redacts: its own secret.
const STORE_SECRET: &[u8] = b"the memory store's own secret";

impl Store for MemStore {
    fn local(&self) -> &Journal {
        &self.local
    }

    fn claim_job(&self, job_id: &str, _asked: &Request<'_>, _cancel: &mut Cancel) -> Result<Known, Refusal> {
        Ok(Known {
            entry: self.mem.entries.borrow().get(job_id).cloned(),
            live: self.mem.job_holder.borrow().clone(),
            gone: InterruptedBy::JobenvGone,
        })
    }

    fn claim_namespace(
        &self,
        namespace: &str,
        _job_id: Option<&str>,
        _wait: Duration,
        _cancel: &mut Cancel,
    ) -> Result<Claim, Refusal> {
        match self.mem.namespace_holder.borrow().clone() {
            Some(holder) => Err(Refusal::NamespaceLocked {
                namespace: namespace.to_owned(),
                holder,
            }),
            None => Ok(Claim::local()),
        }
    }

    fn write_running(&self, entry: &Entry) -> Result<(), Refusal> {
        if self.mem.unreachable.get() {
            return Err(Refusal::Unreachable("the memory store is switched off".into()));
        }
        self.mem
            .entries
            .borrow_mut()
            .insert(entry.job_id.clone(), entry.clone());
        Ok(())
    }

    fn write_end(&self, entry: &Entry) -> std::io::Result<()> {
        if self.mem.end_fails.get() {
            return Err(std::io::Error::other("no space left in the memory store"));
        }
        self.mem
            .entries
            .borrow_mut()
            .insert(entry.job_id.clone(), entry.clone());
        Ok(())
    }

    fn leases(&self) -> Option<LeaseWatch> {
        let renewal = self.mem.lease.get()?;
        Some(LeaseWatch {
            renewals: tokio::sync::watch::channel(renewal).1,
            renew_deadline: Duration::from_secs(10),
            lease: Duration::from_secs(15),
        })
    }

    fn redactions(&self) -> Vec<Vec<u8>> {
        vec![STORE_SECRET.to_vec()]
    }
}

/// A program that runs nothing: it counts its runs and ends as told.
#[derive(Default)]
struct Fake {
    runs: Cell<usize>,
    /// How it ends (exit 0 unless told).
    ends: Cell<Option<Outcome>>,
    /// What the last run was given: the plan's secrets, and whether it watched leases.
    secrets: RefCell<Vec<Vec<u8>>>,
    watched_leases: Cell<bool>,
}

impl Program for Fake {
    fn run(&self, plan: &Plan, options: RunOptions<'_>, _cancel: Cancel, _tree: Tree) -> Result<Ran, Error> {
        self.runs.set(self.runs.get() + 1);
        *self.secrets.borrow_mut() = plan.secrets.0.clone();
        self.watched_leases.set(options.lease.is_some());
        Ok(Ran::Ended(self.ends.get().unwrap_or(Outcome::Exited(0))))
    }
}

/// A node: its files (a payload for attribute `web` in namespace `ns1`, verb `apply`) and state
/// directory in a temporary directory, a memory store and a fake program.
struct Node {
    dir: tempfile::TempDir,
    verb: Cell<&'static str>,
    store: Rc<Mem>,
    program: Fake,
}

/// How a run ended: its ending, the exit code, and whether it was a replay.
struct Done {
    ending: Ending,
    code: i32,
    replayed: bool,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = |name: &str| dir.path().join(name);
        std::fs::create_dir_all(path("nix")).unwrap();
        let root = dir.path().display().to_string();
        let files = [
            (
                "deploy-env.json",
                json!({"DEPLOYMENT_ROOT": root, "NIXPKGS": root, "NIX_BUILD_SHELL": "/bin/bash"}),
            ),
            ("deploy-keys.json", json!({})),
            ("deployment-attributes.json", json!(["web"])),
        ];
        for (name, value) in files {
            std::fs::write(path(name), value.to_string()).unwrap();
        }
        // Nix's programs are never run: they only have to be there.
        for tool in ["nix-shell", "nix-instantiate", "nix-store"] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::write(path("nix").join(tool), "#!/bin/sh\nexit 1\n").unwrap();
            std::fs::set_permissions(path("nix").join(tool), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let node = Node {
            dir,
            verb: Cell::new("apply"),
            store: Rc::default(),
            program: Fake::default(),
        };
        node.payload("ns1");
        node
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The next runs' payload: `web` in `namespace`.
    fn payload(&self, namespace: &str) {
        let payload = json!({"ATTRIBUTE": "web", "NAMESPACE": namespace});
        std::fs::write(self.path("payload.json"), payload.to_string()).unwrap();
    }

    /// The node's own journal, as another jobenv of it opens it.
    fn journal(&self) -> Journal {
        Journal::open(&self.path("state")).expect("the journal")
    }

    /// The namespace's node-local lock, held as another deploy of this node holds it.
    fn hold_namespace(&self, namespace: &str, holder: &str) -> record::Held {
        let held = self
            .journal()
            .acquire(Lock::Namespace(namespace), Duration::ZERO, holder, None);
        match held {
            Ok(held) => held,
            Err(refusal) => panic!("the namespace is not free: {refusal}"),
        }
    }

    fn settings(&self, job_id: &str) -> RunSettings {
        RunSettings {
            job: JobSettings {
                verb: self.verb.get().into(),
                payload: self.path("payload.json"),
                node: NodeFiles {
                    deploy_env: self.path("deploy-env.json"),
                    secrets_dirs: Vec::new(),
                    secrets_env_files: Vec::new(),
                    keys: self.path("deploy-keys.json"),
                    attributes: self.path("deployment-attributes.json"),
                    nix_shell: self.path("nix/nix-shell").display().to_string(),
                    required_secrets: None,
                },
            },
            runner: Runner::Standalone,
            job_id: Some(job_id.into()),
            state_dir: self.path("state"),
            grace: Duration::from_secs(1),
            timeout: None,
            lock_timeout: Duration::ZERO,
            containment: Containment::Proc,
            cluster: None,
            telemetry: Default::default(),
        }
    }

    /// Job `job_id` run once without its end written: its entry stays `running`, as a jobenv
    /// that died under its program leaves it.
    fn interrupted(&self, job_id: &str) {
        self.store.end_fails.set(true);
        self.run(job_id);
        self.store.end_fails.set(false);
    }

    /// Job `job_id`, from step 1 to step 11, as [`super::run`] runs it.
    fn run(&self, job_id: &str) -> Done {
        let settings = self.settings(job_id);
        let mem = Rc::clone(&self.store);
        let parts = Parts {
            cancel: Some(Cancel::unsignalled()),
            store: Box::new(move |local, _: &RunSettings, _: &str| {
                Ok(Box::new(MemStore { local, mem }) as Box<dyn Store>)
            }),
            program: &self.program,
        };
        let mut run = Run::with(&settings, parts);
        let ending = run.end();
        let replayed = run.replayed;
        let code = run.conclude(ending.clone());
        Done { ending, code, replayed }
    }

    fn runs(&self) -> usize {
        self.program.runs.get()
    }

    fn entry(&self, job_id: &str) -> Entry {
        self.store.entries.borrow()[job_id].clone()
    }
}

impl Done {
    /// One of its error lines says `text`.
    fn says(&self, text: &str) {
        let errors = &self.ending.errors;
        assert!(
            errors.iter().any(|line| line.contains(text)),
            "{text:?} not in {errors:?}"
        );
    }
}

#[test]
fn a_job_runs_its_program_once_and_records_its_end() {
    let node = Node::new();
    node.program.ends.set(Some(Outcome::Exited(3)));
    let done = node.run("j");
    assert_eq!((done.code, done.ending.status, node.runs()), (3, Status::Failed, 1));
    let entry = node.entry("j");
    assert_eq!(
        (entry.status, entry.exit_code, entry.attempt),
        (Status::Failed, Some(3), 1)
    );
}

#[test]
fn a_finished_job_is_replayed_and_its_program_not_run_again() {
    let node = Node::new();
    node.program.ends.set(Some(Outcome::Exited(3)));
    assert_eq!(node.run("j").code, 3);
    node.program.ends.set(Some(Outcome::Exited(0)));
    let again = node.run("j");
    assert!(again.replayed);
    // The recorded result, and the program not run again.
    assert_eq!((again.code, node.runs()), (3, 1));
}

#[test]
fn a_job_id_asked_for_another_request_is_refused_and_its_program_not_run() {
    let node = Node::new();
    assert_eq!(node.run("j").code, 0);
    node.payload("ns2");
    let other = node.run("j");
    assert_eq!(
        (other.code, other.ending.status, node.runs()),
        (EXIT_REJECTED, Status::Rejected, 1)
    );
    let asked = "job j was already run for apply of web in namespace ns1; this run asks for";
    other.says(&format!(
        "{asked} apply of web in namespace ns2: a job id names one request"
    ));
    node.payload("ns1");
    node.verb.set("destroy");
    node.run("j").says(&format!("{asked} destroy of web in namespace ns1"));
    // Positive control: the same request is replayed.
    node.verb.set("apply");
    assert!(node.run("j").replayed);
    assert_eq!(node.runs(), 1);
}

#[test]
fn an_interrupted_job_id_is_not_reused_for_another_request() {
    let node = Node::new();
    node.interrupted("j");
    node.payload("ns2");
    assert_eq!((node.run("j").code, node.runs()), (EXIT_REJECTED, 1));
    // Positive control: the same request runs again, as the next attempt.
    node.payload("ns1");
    assert_eq!((node.run("j").code, node.runs(), node.entry("j").attempt), (0, 2, 2));
}

#[test]
fn a_job_running_under_a_live_holder_is_refused_naming_it() {
    let node = Node::new();
    node.interrupted("j");
    // Its holder is alive.
    *node.store.job_holder.borrow_mut() = Some("jobenv pid 4242 on node b".into());
    let refused = node.run("j");
    assert_eq!((refused.code, node.runs()), (EXIT_REJECTED, 1));
    refused.says("job j is already running (jobenv pid 4242 on node b)");
}

#[test]
fn an_interrupted_attempt_runs_again_as_the_next_one() {
    let node = Node::new();
    node.interrupted("j");
    // No one holds it any more.
    assert_eq!(node.run("j").code, 0);
    let entry = node.entry("j");
    assert_eq!((entry.attempt, entry.status, node.runs()), (2, Status::Succeeded, 2));
    assert_eq!(entry.earlier[0].interrupted_by, Some(InterruptedBy::JobenvGone));
}

#[test]
fn on_a_draining_node_the_program_is_not_started_and_the_job_is_interrupted_by_the_node() {
    let node = Node::new();
    record::drain(&node.journal(), Duration::ZERO, |_| Ok(())).unwrap();
    let drained = node.run("j");
    assert_eq!(
        (drained.code, drained.ending.interrupted_by),
        (143, Some(InterruptedBy::NodeStopped))
    );
    assert_eq!(
        drained.ending.errors,
        ["the node stopped: the program was not started; a retry is safe"]
    );
    assert_eq!(node.runs(), 0);
    // Recorded as interrupted: a retry is safe.
    assert_eq!(node.entry("j").reason, Some(Reason::Interrupted));
}

#[test]
fn a_lease_lost_before_the_start_means_the_program_is_not_started() {
    let node = Node::new();
    node.store.lease.set(Some(Renewal::Lost));
    let lost = node.run("j");
    assert_eq!(
        (lost.code, lost.ending.interrupted_by),
        (EXIT_NOT_READY, Some(InterruptedBy::LeaseLost))
    );
    assert_eq!(node.runs(), 0);
    // Not renewed within the renew deadline is lost as well; renewed just now is not.
    node.store
        .lease
        .set(Some(Renewal::At(Instant::now() - Duration::from_secs(10))));
    assert_eq!((node.run("k").code, node.runs()), (EXIT_NOT_READY, 0));
    node.store.lease.set(Some(Renewal::At(Instant::now())));
    assert_eq!((node.run("l").code, node.runs()), (0, 1));
    assert!(node.program.watched_leases.get(), "the supervisor watches the leases");
}

#[test]
fn an_end_that_cannot_be_written_is_jobenvs_failure_and_the_result_is_unknown() {
    let node = Node::new();
    node.store.end_fails.set(true);
    let done = node.run("j");
    assert_eq!(
        (done.code, done.ending.status, node.runs()),
        (EXIT_INTERNAL, Status::Failed, 1)
    );
    done.says("the end of job j could not be recorded in the journal (no space left in the memory store)");
    done.says("the program ended succeeded with exit code 0; the result is unknown");
}

#[test]
fn a_running_entry_that_cannot_be_written_runs_nothing() {
    let node = Node::new();
    node.store.unreachable.set(true);
    let refused = node.run("j");
    assert_eq!((refused.code, node.runs()), (EXIT_NOT_READY, 0));
    refused.says("node not ready: the cluster journal cannot be reached: the memory store is switched off");
}

#[test]
fn a_namespace_another_node_holds_is_refused_naming_the_holder() {
    let node = Node::new();
    *node.store.namespace_holder.borrow_mut() = Some("job k on node b".into());
    let refused = node.run("j");
    assert_eq!((refused.code, node.runs()), (EXIT_REJECTED, 0));
    refused.says("namespace ns1 is locked by another deploy: job k on node b");
}

#[test]
fn a_namespace_a_deploy_of_this_node_holds_is_refused_naming_the_holder_and_another_runs() {
    let node = Node::new();
    let _held = node.hold_namespace("ns1", "job k, jobenv pid 42");
    let refused = node.run("j");
    assert_eq!((refused.code, node.runs()), (EXIT_REJECTED, 0));
    refused.says("namespace ns1 is locked by another deploy: job k, jobenv pid 42");
    // Positive control: another namespace is free.
    node.payload("ns2");
    assert_eq!((node.run("k").code, node.runs()), (0, 1));
}

#[test]
fn the_stores_own_secrets_are_redacted_like_the_nodes() {
    let node = Node::new();
    node.run("j");
    assert!(node.program.secrets.borrow().iter().any(|s| s == STORE_SECRET));
}
