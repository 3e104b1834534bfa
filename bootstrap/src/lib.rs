//! `fediversity-windmill-bootstrap`: converges a Windmill CE node to its desired state. See
//! docs/operators/bootstrap.md for what each step does and every field of the configuration.
//!
//! - [`config`]: the JSON configuration, defaults and validation;
//! - [`windmill`] and [`openbao`]: the two HTTP APIs, over [`http`] (one client, retries);
//! - [`password`]: the argon2 hash and the `password` table;
//! - [`scripts`]: the local tree and its upload;
//! - [`state`]: what a run remembers for the next (labels minted under, script versions created);
//! - [`token`], [`proof`] and [`scope`]: the two API tokens (the UI's, the front-end's scoped
//!   one), their life from mint to revoke, what each is shown to do, and Windmill's scopes;
//! - [`operator`]: the front-end's identity, a workspace operator, and its tokens;
//! - [`ui_auth_include`]: the nginx include that holds the token;
//! - [`steps`] and [`report`]: the nine steps and their log lines;
//! - [`error`]: the one error type and its exit codes.
//!
//! The log formatter, the lock file, the atomic write and secrets come from [`safe_io`], shared
//! with jobenv.

pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod openbao;
pub mod operator;
pub mod password;
pub mod proof;
pub mod report;
pub mod scope;
pub mod scripts;
pub mod state;
pub mod steps;
pub mod token;
pub mod ui_auth_include;
pub mod windmill;
