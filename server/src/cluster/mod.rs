//! The admin-node cluster: membership, leader election through the lease row, and partition
//! assignment with failover.
//!
//! One [`Coordinator`] per node renews everything once per heartbeat; the [`LocalView`] tells
//! the rest of the node what it may act on at this instant.

pub mod assignment;
mod coordinator;
mod view;

use std::time::Duration;

pub use coordinator::{Coordinator, CoordinatorError};
pub use view::{LocalView, OwnedPartition};

/// The cluster's timing settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterTimings {
    /// How often a node heartbeats, renews or contends for the lease, and rebalances.
    pub heartbeat: Duration,
    /// A node whose heartbeat is older than this (by the database clock) is dead.
    pub node_lease: Duration,
    /// How long a leader's lease lasts without renewal.
    pub leader_lease: Duration,
}

impl ClusterTimings {
    /// How much earlier than a lease's end this node stops acting on it: room for the request's
    /// own latency and for clocks that tick at slightly different rates.
    pub fn safety_margin(lease: Duration) -> Duration {
        lease / 5
    }
}

impl Default for ClusterTimings {
    fn default() -> Self {
        Self {
            // A dead leader's role and partitions move within about a lease plus a heartbeat
            // (the failover target is 6 s); a live node renews seven times before its rights
            // lapse at four fifths of the lease, so a database pause under ~3 s costs nothing.
            heartbeat: Duration::from_millis(500),
            node_lease: Duration::from_secs(4),
            leader_lease: Duration::from_secs(4),
        }
    }
}
