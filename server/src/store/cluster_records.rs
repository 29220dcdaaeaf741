//! Rows and parameters of the cluster tables: nodes, the leader lease, partitions.

/// What the cluster was initialised with.
/// A partition and the epoch a node owns it at: the fence of what it writes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionEpoch {
    pub partition_id: i64,
    pub epoch: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMeta {
    pub partition_count: i64,
    pub created_at_ms: i64,
}

/// A node announcing itself.
#[derive(Debug, Clone)]
pub struct NodeRegistration {
    pub node_id: String,
    /// Random per process start: tells two processes that use the same node id apart.
    pub incarnation: String,
    pub address: String,
    pub version: String,
}

/// A row of `nodes`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct NodeRecord {
    pub node_id: String,
    pub address: String,
    pub version: String,
    pub started_at_ms: i64,
    pub heartbeat_at_ms: i64,
    pub left_at_ms: Option<i64>,
}

impl NodeRecord {
    /// Alive means: not left, and heartbeated within `lease_ms` of the database clock `now_ms`.
    pub fn is_alive(&self, now_ms: i64, lease_ms: i64) -> bool {
        self.left_at_ms.is_none() && self.heartbeat_at_ms + lease_ms > now_ms
    }
}

/// All nodes, and the database clock when they were read.
#[derive(Debug, Clone)]
pub struct NodeList {
    pub nodes: Vec<NodeRecord>,
    pub now_ms: i64,
}

impl NodeList {
    /// Ids of the nodes alive at `now_ms`, sorted.
    pub fn alive_ids(&self, lease_ms: i64) -> Vec<String> {
        let mut ids: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.is_alive(self.now_ms, lease_ms))
            .map(|n| n.node_id.clone())
            .collect();
        ids.sort();
        ids
    }
}

/// The leader lease row, with the database clock when it was read.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LeaderRecord {
    pub node_id: Option<String>,
    pub term: i64,
    pub lease_until_ms: i64,
    pub acquired_at_ms: i64,
    pub now_ms: i64,
}

impl LeaderRecord {
    /// The node whose lease is unexpired at the time of reading, if any.
    pub fn holder(&self) -> Option<&str> {
        match &self.node_id {
            Some(id) if self.lease_until_ms > self.now_ms => Some(id),
            _ => None,
        }
    }
}

/// Proof of leadership a fenced write carries: the leader's node id and the term it won.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderFence {
    pub node_id: String,
    pub term: i64,
}

/// A row of `partitions`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PartitionRecord {
    pub partition_id: i64,
    pub owner_node_id: Option<String>,
    /// Set by the leader to move a partition away from a live owner; the owner completes the
    /// move itself once it has stopped acting on the partition.
    pub pending_owner_node_id: Option<String>,
    pub epoch: i64,
    pub updated_at_ms: i64,
}

/// One decision of the leader about one partition. Each is applied only if the partition's
/// epoch is still `expected_epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionChange {
    /// Give the partition to `owner` directly (it had no live owner); bumps the epoch.
    Assign {
        partition_id: i64,
        expected_epoch: i64,
        owner: String,
    },
    /// Ask the live owner to hand the partition to `to`.
    RequestHandOff {
        partition_id: i64,
        expected_epoch: i64,
        to: String,
    },
    /// Withdraw a hand-off request (its target died).
    CancelHandOff {
        partition_id: i64,
        expected_epoch: i64,
    },
}
