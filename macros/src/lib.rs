//! The `#[job]` attribute of the Carillon executor SDK. Use it through `carillon-executor`,
//! which re-exports it; this crate is an implementation detail pinned to the SDK's version.
//!
//! The attribute arrives with the executors issue; until then this crate exports nothing.
