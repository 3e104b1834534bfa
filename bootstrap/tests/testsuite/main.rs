//! The bootstrap's integration tests, one binary (cargo's own `tests/testsuite` layout): one
//! PostgreSQL cluster and one OpenBao dev server for all of them, one module per behaviour area.
//! Each test runs the real binary against a node of its own (a database in the shared cluster,
//! its own Windmill fake, its own KV path), so tests run in parallel without seeing each other.

mod capabilities;
mod check;
mod concurrency;
mod config;
mod converge;
mod faults;
mod idempotence;
mod local_database;
mod lost_answer;
mod nixos_module_config;
mod openbao;
mod password;
mod proxy;
mod revoke;
mod scripts;
mod secrets_never_logged;
mod support;
mod tokens;
mod versions;
