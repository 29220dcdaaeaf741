//! The cluster tables (nodes, the leader lease, partitions): their rows and parameters, and
//! the store's interface to them and to the standbys.

use async_trait::async_trait;

use super::{Backend, Error, SchemaVersion};

/// A partition and the epoch a node owns it at: the fence of what it writes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionEpoch {
    pub partition_id: i64,
    pub epoch: i64,
}

/// What the cluster was initialised with.
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

/// Nodes, the leader lease and partitions.
#[async_trait]
pub trait ClusterStore: Send + Sync + std::fmt::Debug + 'static {
    fn backend(&self) -> Backend;

    /// Applies the embedded migrations of this backend.
    async fn migrate(&self) -> Result<(), Error>;

    /// The last migration applied to the database (none on a database without the schema)
    /// and the last one this build embeds.
    async fn schema_version(&self) -> Result<SchemaVersion, Error>;

    /// The database's clock, in epoch milliseconds.
    async fn now_ms(&self) -> Result<i64, Error>;

    /// Creates the cluster's partitions on first use; afterwards returns what exists. The
    /// partition count is fixed at init: a different count later is reported, not applied.
    async fn cluster_init(&self, partition_count: i64) -> Result<ClusterMeta, Error>;

    /// The nodes' key `name` (64 hex digits): the one stored, else `candidate`, stored now.
    /// Every node gets the same, whichever started first.
    async fn node_key(&self, name: &str, candidate: &str) -> Result<String, Error>;

    /// Registers (or re-registers) a node under a fresh incarnation. Partitions still owned by
    /// an earlier incarnation of the same node id are released with their epoch bumped, and a
    /// leadership it held is given up, so nothing the old process claimed stays valid.
    async fn node_register(&self, node: &NodeRegistration) -> Result<(), Error>;

    /// Records a heartbeat. Fails with [`Error::IncarnationLost`] when another process has
    /// registered the same node id since, or the node has left.
    async fn node_heartbeat(&self, node_id: &str, incarnation: &str) -> Result<(), Error>;

    /// Leaves the cluster at once: releases the node's partitions and its leadership and marks it
    /// left, so the others take over without waiting for a lease to run out.
    async fn node_leave(&self, node_id: &str, incarnation: &str) -> Result<(), Error>;

    /// Every node ever registered, with the database's clock at the time of reading.
    async fn nodes_list(&self) -> Result<NodeList, Error>;

    /// The leader lease row as it is now.
    async fn leader_get(&self) -> Result<LeaderRecord, Error>;

    /// Takes or renews the leader lease in one short transaction: the row is locked, then taken
    /// only if its lease has expired (incrementing `term`) or renewed if `node_id` already holds
    /// it. Returns the row as it stands after the attempt; the caller compares `node_id`.
    async fn leader_try_acquire(&self, node_id: &str, lease_ms: i64)
    -> Result<LeaderRecord, Error>;

    /// Every partition with its owner, pending owner and epoch.
    async fn partitions_list(&self) -> Result<Vec<PartitionRecord>, Error>;

    /// The partitions a node owns (including those it has been asked to hand off).
    async fn partitions_owned(&self, node_id: &str) -> Result<Vec<PartitionRecord>, Error>;

    /// Applies a leader's partition decisions, fenced: the transaction locks the leader row and
    /// fails with [`Error::Fenced`] unless `fence` still holds an unexpired lease with the same
    /// term. Each change is a compare-and-set on the partition's epoch; returns how many applied.
    async fn partitions_apply(
        &self,
        fence: &LeaderFence,
        changes: &[PartitionChange],
    ) -> Result<u64, Error>;

    /// The owner hands a partition to the pending owner the leader chose, bumping its epoch.
    /// Returns false when the partition changed since it was read.
    async fn partition_hand_off(
        &self,
        node_id: &str,
        partition: &PartitionRecord,
    ) -> Result<bool, Error>;
}

/// The standbys a failover could promote (PostgreSQL streaming replication), so that nothing
/// is delivered before they have it: an asynchronous standby promoted without a run it was
/// never sent would fire that run's instant again.
#[async_trait]
pub trait StandbyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Where the database's log ends now (PostgreSQL: `pg_current_wal_lsn()`), or `None` where
    /// there are no standbys to wait for (MySQL, where Galera is synchronous, and SQLite).
    async fn log_position(&self) -> Result<Option<String>, Error>;

    /// The standbys that have not yet flushed the log up to `position`: those streaming, and
    /// those with a physical replication slot, streaming or not. Empty when all have it.
    async fn standbys_behind(&self, position: &str) -> Result<Vec<String>, Error>;

    /// The timeline the database writes on (PostgreSQL; a promoted standby starts a new one),
    /// or `None` where failovers are not seen this way (MySQL, SQLite).
    async fn timeline(&self) -> Result<Option<String>, Error>;
}
