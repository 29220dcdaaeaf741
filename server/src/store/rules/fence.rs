//! The fence every write of a partition's work passes: the partitions locked in id order, and
//! only those still this node's at the epoch it acts on count. A partition handed off since
//! (its epoch moved) keeps its work for the next owner, and a hand-off waits for the lock.

use std::collections::HashSet;

use async_trait::async_trait;

use super::super::error::Error;

/// A partition as a fenced write locked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionLease {
    pub(crate) partition_id: i64,
    pub(crate) owner_node_id: Option<String>,
    pub(crate) epoch: i64,
}

#[async_trait]
pub(crate) trait FenceTx: Send {
    /// Locks `partition_ids` (sorted, distinct, not empty).
    async fn lock_partitions(
        &mut self,
        partition_ids: &[i64],
    ) -> Result<Vec<PartitionLease>, Error>;
}

/// Locks the partitions of `wanted` (partition, epoch) pairs and answers those `node_id` still
/// owns at that epoch.
pub(crate) async fn owned<T: FenceTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    wanted: &[(i64, i64)],
) -> Result<HashSet<(i64, i64)>, Error> {
    let wanted: HashSet<(i64, i64)> = wanted.iter().copied().collect();
    let mut partition_ids: Vec<i64> = wanted.iter().map(|(p, _)| *p).collect();
    partition_ids.sort_unstable();
    partition_ids.dedup();
    if partition_ids.is_empty() {
        return Ok(HashSet::new());
    }
    Ok(tx
        .lock_partitions(&partition_ids)
        .await?
        .into_iter()
        .filter(|lease| lease.owner_node_id.as_deref() == Some(node_id))
        .map(|lease| (lease.partition_id, lease.epoch))
        .filter(|held| wanted.contains(held))
        .collect())
}
