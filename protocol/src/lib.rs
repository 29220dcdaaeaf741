//! The wire contract between Carillon admin nodes and executors: registration, heartbeats,
//! dispatches and result callbacks, as versioned JSON types.
//!
//! Only the version exists so far; the message types arrive with the executors issue, together
//! with `protocol/README.md`, which documents them for executors written in other languages.

/// The protocol version admin nodes and executors announce to each other. Bumped on any change
/// that an older peer could misread.
pub const PROTOCOL_VERSION: u32 = 1;
