//! jobenv's integration tests: one test binary (built and linked once), one module per behaviour
//! area. Each runs the real `fediversity-jobenv` against real `nix-shell` and a node the test
//! kit writes ([`fediversity_testkit`]).

mod bad_input;
mod contract;
mod cancellation;
mod crash_sweep;
mod dd0012;
mod env_and_keys;
mod events;
mod exec_limits;
mod exit_status;
mod front_end;
mod fuzz_regressions;
mod generated;
mod isolation;
mod journal;
mod lifecycle;
mod load;
mod log_reader_gone;
mod namespace_lock;
mod options;
mod priority;
mod readiness;
mod redaction;
mod redactor_property;
mod secrets_env_file;
mod windmill_scripts;
