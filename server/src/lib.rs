//! Carillon admin node: everything `carillon server` does, as a library so tests can start
//! real nodes in-process or as processes.
//!
//! See `ARCHITECTURE.md` at the repository root for the map.

pub mod access;
pub mod api;
pub mod app;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod data_dir;
pub mod dispatch;
pub mod egress;
pub mod import;
pub mod input_text;
pub mod jobs;
pub mod namespaces;
pub mod observe;
pub mod retention;
pub mod schedule;
pub mod scheduler;
pub mod scripts;
pub mod secret;
pub mod secrets;
pub mod states;
pub mod store;
pub mod tasks;
pub mod telemetry;
pub mod workflows;

/// This build: the package's version and the commit it was built from (`0.1.0 (3fa1c2e9b7d0)`),
/// as `carillon --version` says and each node registers in the cluster.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("CARILLON_COMMIT"),
    ")"
);
