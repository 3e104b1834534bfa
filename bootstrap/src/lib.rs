//! `fediversity-windmill-bootstrap`: converges a Windmill CE node to its desired state. See
//! ../shared/spec/bootstrap.md and the README section of the same name.
//!
//! - [`config`]: the JSON configuration, defaults and validation;
//! - [`windmill`] and [`openbao`]: the two HTTP APIs, over [`http`] (one client, retries);
//! - [`password`]: the argon2 hash and the `password` table;
//! - [`scripts`]: the local tree and its upload;
//! - [`atomic`]: the nginx include, written atomically with owner and mode;
//! - [`lock`]: one run at a time;
//! - [`steps`] and [`report`]: the nine steps and their log lines.

pub mod atomic;
pub mod cli;
pub mod config;
pub mod error;
pub mod http;
pub mod lock;
pub mod logging;
pub mod openbao;
pub mod password;
pub mod report;
pub mod scripts;
pub mod secret;
pub mod steps;
pub mod windmill;
