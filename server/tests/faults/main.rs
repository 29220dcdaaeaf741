//! The fault-injection suite: real `carillon` nodes, Python executors and databases on
//! loopback, each scenario breaking one thing a production cluster loses sooner or later, then
//! checking the promise: every scheduled instant has exactly one run (none missed beyond the
//! job's misfire policy), no run is left unfinished, failover stays within its bound, and a
//! node that lost its rights writes nothing.
//!
//! Each scenario prints one `figures:` line with what it observed. Scenarios run one at a time
//! (`harness::one_at_a_time`): each is a cluster of its own on two shared cores.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]
#![allow(
    unreachable_pub,
    reason = "the scenarios share the harness within this one test crate"
)]

/// Prints a scenario's figures and appends them to `fault-figures.txt` in cargo's temporary
/// directory for tests, which `.ci/run` prints after the tests (cargo hides a passing test's
/// output).
macro_rules! figures {
    ($($arg:tt)*) => {
        $crate::harness::record_figures(&format!($($arg)*))
    };
}

#[path = "../support/mod.rs"]
#[macro_use]
mod support;

mod harness;
mod invariants;

mod child_job_faults;
mod clock_skew;
mod cluster_restart;
mod database_outage;
mod delivery_faults;
mod executor_faults;
mod flow_faults;
mod galera_faults;
mod job_races;
mod leader_faults;
mod network_faults;
mod pooler_faults;
mod primary_failover;
mod workflow_faults;
