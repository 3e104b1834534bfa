//! jobenv's integration tests: one test binary (built and linked once), one module per behaviour
//! area. Each runs the real `fediversity-jobenv` against real `nix-shell` and a node the test
//! kit writes ([`fediversity_testkit`]).

/// Instantiates each named test, a function of the containment (`JOBENV_CONTAINMENT`), once
/// per kind of program tree: `cgroup::<test>` (the deploy's own cgroup) and `proc_walk::<test>`
/// (jobenv's descendants in /proc, the fallback where there is no writable cgroup v2).
macro_rules! with_each_tree {
    ($($test:ident),* $(,)?) => {
        mod cgroup {
            $(#[test]
            fn $test() {
                super::$test("cgroup")
            })*
        }
        mod proc_walk {
            $(#[test]
            fn $test() {
                super::$test("proc")
            })*
        }
    };
}

mod bad_input;
mod cancellation;
mod cluster;
mod containment;
mod contract;
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
mod journal_format;
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
mod shell_cache;
mod state_dir_attacks;
mod telemetry;
mod windmill_scripts;
