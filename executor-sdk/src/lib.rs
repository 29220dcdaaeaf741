//! The SDK an executor app links: registration with the admin nodes, heartbeats, the HTTP
//! endpoint that receives dispatches, running `#[job]` handlers and reporting their results.
//!
//! Nothing is implemented yet: the SDK arrives with the executors issue. What exists is the
//! protocol version it will speak.

/// The wire protocol version this SDK speaks.
pub use carillon_protocol::PROTOCOL_VERSION;
