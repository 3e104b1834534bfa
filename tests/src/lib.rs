//! Shared test harness of the workspace: the real parts the tests run against, set up the same
//! way for every crate. See ../shared/spec/testing.md for which parts are real and which fake.
//!
//! - [`nix_fixture`]: a node (deploy-env.json, keys, attributes, secrets) and a deployment
//!   repository whose dev shells real `nix-shell` instantiates offline.

pub mod nix_fixture;
