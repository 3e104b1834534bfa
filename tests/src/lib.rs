//! Shared test harness of the workspace: the real parts the tests run against, set up the same
//! way for every crate. See ../shared/spec/testing.md for which parts are real and which fake.
//!
//! - [`nix_fixture`]: a node (deploy-env.json, keys, attributes, secrets) and a deployment
//!   repository whose dev shells real `nix-shell` instantiates offline.
//! - [`process`]: liveness of pids, waiting with deadlines, watching output as it comes.
//! - [`events_receiver`]: an HTTP receiver of jobenv's progress events (checks the secret by
//!   its SHA-256, can be slow or dead).

pub mod events_receiver;
pub mod nix_fixture;
pub mod process;

/// The jobenv binary of the calling crate's build (expands `env!` in the caller, where Cargo
/// sets `CARGO_BIN_EXE_fediversity-jobenv` for integration tests of the jobenv crate).
#[macro_export]
macro_rules! jobenv_bin {
    () => {
        ::std::path::Path::new(env!("CARGO_BIN_EXE_fediversity-jobenv"))
    };
}
