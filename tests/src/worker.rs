//! A stand-in for a Windmill worker, for jobenv's lifecycle tests: it starts a job the way a real
//! CE worker does (the job process leads a process group of its own in the worker's session,
//! `WM_JOB_ID` set, its stdout and stderr piped to the worker, which copies them to the job log),
//! and then it can die (SIGKILL) like a worker that is OOM-killed or crashes. The job process is
//! jobenv itself, as after the deploy script's `exec`.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::nix_fixture::Fixture;
use crate::process::{Running, StreamWatch, is_alive, read_pids};

/// The worker: Python's `subprocess.Popen(..., process_group=0)`, as Windmill's process-wrap
/// `ProcessGroup` does; it copies the job's output to its own stdout (the job log).
const WORKER: &str = r#"
import os, subprocess, sys
pid_file, payload = sys.argv[1], sys.argv[2]
with open(payload, "rb") as stdin:
    job = subprocess.Popen(sys.argv[3:], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0)
with open(pid_file + ".tmp", "w") as f:
    f.write(str(job.pid))
os.rename(pid_file + ".tmp", pid_file)
for line in job.stdout:
    sys.stdout.buffer.write(line)
    sys.stdout.flush()
sys.exit(job.wait())
"#;

pub struct Worker {
    process: Running,
    /// The job process (jobenv).
    pub job: i32,
    /// What the worker copied to its job log so far, and more as it comes.
    pub log: StreamWatch,
}

impl Worker {
    /// Starts `jobenv run --verb <verb> <args>` for job `job_id` with `payload`, under a new
    /// worker, in the fixture's job directory and environment.
    pub fn start(f: &Fixture, jobenv: &Path, job_id: &str, verb: &str, payload: &Value, args: &[&str]) -> Worker {
        let tag = crate::servers::random_string(8);
        let payload_file = f.path().join(format!("payload-{tag}.json"));
        std::fs::write(&payload_file, payload.to_string()).expect("payload file");
        let pid_file: PathBuf = f.path().join(format!("job-{tag}.pid"));
        let mut command = f.command(Path::new("/usr/bin/python3"), &["-c", WORKER]);
        command
            .arg(&pid_file)
            .arg(&payload_file)
            .arg(jobenv)
            .args(["run", "--verb", verb, "--payload", "-"])
            .args(args);
        command
            .env("WM_JOB_ID", job_id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child: Child = command.spawn().expect("start the worker stand-in");
        let log = StreamWatch::new(child.stdout.take().expect("piped"));
        let job = read_pids(&pid_file, 1, Duration::from_secs(20))[0];
        Worker {
            process: Running(child),
            job,
            log,
        }
    }

    /// The worker dies at once (OOM, crash); the job process is left to itself.
    pub fn kill(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.process.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.process.wait();
    }

    /// Waits for the worker to end (it ends when the job does); its exit code is the job's.
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        crate::process::wait_exit(&mut self.process, limit).map(|status| status.code().unwrap_or(-1))
    }

    pub fn job_alive(&self) -> bool {
        is_alive(self.job)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // A failed test must not leave its job behind.
        if is_alive(self.job) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.job), nix::sys::signal::Signal::SIGKILL);
        }
    }
}
