//! Storage: the one interface every other module uses to reach the database.
//!
//! Architecture invariant: this module is the only place that knows SQL and `sqlx`. Every lease
//! and liveness comparison is made with the database's clock (`now_ms` columns computed in SQL),
//! never with a node's clock.

mod cluster_records;
mod dialect;
mod error;
mod sql_store;
mod url;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use cluster_records::{
    ClusterMeta, LeaderFence, LeaderRecord, NodeList, NodeRecord, NodeRegistration,
    PartitionChange, PartitionRecord,
};
pub use error::Error;
pub use url::{Backend, DatabaseUrl};

/// Connection settings for one pool.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    pub max_connections: u32,
    /// How long a caller waits for a free connection. Short for the pool that renews leases, so
    /// a lost database is noticed well inside a lease (sqlx waits 30 s by default).
    pub acquire_timeout: Duration,
    /// Server-side limit on one statement (and on lock waits), where the backend supports it.
    pub statement_timeout: Duration,
}

/// The storage interface. One implementation per backend; the same conformance suite runs
/// against all of them.
///
/// Method names are noun first (`leader_try_acquire`, `partitions_apply`) so related calls sort
/// together.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    fn backend(&self) -> Backend;

    /// Applies the embedded migrations of this backend.
    async fn migrate(&self) -> Result<(), Error>;

    /// The database's clock, in epoch milliseconds.
    async fn now_ms(&self) -> Result<i64, Error>;

    /// Creates the cluster's partitions on first use; afterwards returns what exists. The
    /// partition count is fixed at init: a different count later is reported, not applied.
    async fn cluster_init(&self, partition_count: i64) -> Result<ClusterMeta, Error>;

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

/// Opens a pool for the database `url` names and returns its store.
pub async fn connect(url: &DatabaseUrl, options: &PoolOptions) -> Result<Arc<dyn Store>, Error> {
    let store: Arc<dyn Store> = match url.backend() {
        Backend::Postgres => Arc::new(sql_store::PostgresStore::connect(url, options).await?),
        Backend::Mysql => Arc::new(sql_store::MysqlStore::connect(url, options).await?),
        Backend::Sqlite => Arc::new(sql_store::SqliteStore::connect(url, options).await?),
    };
    Ok(store)
}
