//! The wire contract between Carillon admin nodes and executors, version 1: registration,
//! heartbeat, dispatch, cancellation and result reports as JSON types, and the dispatch
//! signature. Small and free of I/O, so any executor can depend on it; `protocol/README.md`
//! documents the same contract for executors written in other languages.

mod messages;
mod policy;
mod signature;

pub use messages::*;
pub use policy::{Balance, Delivery};
pub use signature::{
    REPLAY_WINDOW_MS, SIGNATURE_HEADER, SignatureError, TIMESTAMP_HEADER, sign, verify,
};

/// The protocol version admin nodes and executors announce to each other. Bumped on any change
/// that an older peer could misread.
pub const PROTOCOL_VERSION: u32 = 1;

/// Paths on an executor, relative to its advertised address.
pub mod executor_paths {
    pub const DISPATCH: &str = "/carillon/v1/dispatch";
    pub const DISPATCH_BATCH: &str = "/carillon/v1/dispatch-batch";
    pub const CANCEL: &str = "/carillon/v1/cancel";
}

/// Paths on an admin node.
pub mod admin_paths {
    pub const REGISTER: &str = "/api/v1/executors/register";
    pub const HEARTBEAT: &str = "/api/v1/executors/heartbeat";
    pub const RESULTS: &str = "/api/v1/executors/results";
    pub const DEREGISTER: &str = "/api/v1/executors/deregister";
    pub const LOGS: &str = "/api/v1/executors/logs";
}
