//! The engine's rules, written once as plain Rust over the narrow transaction traits each
//! database's driver implements (`sql_store`), and an in-memory implementation that lets a
//! rule be tested without a database. A rule decides; the driver only runs statements with
//! their binds and reports what they found or changed.

pub(super) mod attempt_end;
pub(super) mod backfill;
pub(super) mod claim;
pub(super) mod cluster;
pub(super) mod fence;
pub(super) mod flow;
pub(super) mod follow_ups;
pub(super) mod history;
pub(super) mod logs;
pub(super) mod manual_run;
#[cfg(test)]
mod memory;
pub(super) mod namespaces;
pub(super) mod run_end;
pub(super) mod run_start;
pub(super) mod tasks;
pub(super) mod workflow_start;
pub(super) mod workflows;
