//! The cluster's tables in the in-memory driver: the leader row, nodes, and the partitions'
//! pending owners (their owners and epochs are `MemoryDb::partitions`).

use async_trait::async_trait;

use super::MemoryDb;
use crate::store::cluster_records::{LeaderRecord, NodeRegistration, PartitionChange};
use crate::store::error::Error;
use crate::store::rules::cluster::ClusterTx;

/// The leader row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MemoryLeader {
    pub(crate) node_id: Option<String>,
    pub(crate) term: i64,
    pub(crate) lease_until_ms: i64,
    pub(crate) acquired_at_ms: i64,
}

/// A row of `nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryNode {
    pub(crate) incarnation: String,
    pub(crate) left: bool,
}

impl MemoryDb {
    /// Applies a change to partition `id` if its epoch is `expected`: `write` sets its owner,
    /// pending owner and whether the epoch moves on.
    fn change_partition(
        &mut self,
        id: i64,
        expected: i64,
        write: impl FnOnce(&mut Option<String>, &mut Option<String>) -> bool,
    ) -> u64 {
        let Some((owner, epoch)) = self.partitions.get_mut(&id) else {
            return 0;
        };
        if *epoch != expected {
            return 0;
        }
        let mut pending = self.pending_owners.get(&id).cloned();
        if write(owner, &mut pending) {
            *epoch += 1;
        }
        match pending {
            Some(to) => self.pending_owners.insert(id, to),
            None => self.pending_owners.remove(&id),
        };
        1
    }
}

#[async_trait]
impl ClusterTx for MemoryDb {
    async fn lock_leader(&mut self) -> Result<LeaderRecord, Error> {
        self.leader().await
    }

    async fn leader(&mut self) -> Result<LeaderRecord, Error> {
        let l = &self.leader;
        Ok(LeaderRecord {
            node_id: l.node_id.clone(),
            term: l.term,
            lease_until_ms: l.lease_until_ms,
            acquired_at_ms: l.acquired_at_ms,
            now_ms: self.now_ms,
        })
    }

    async fn renew_lease(&mut self, node_id: &str, lease_ms: i64) -> Result<(), Error> {
        if self.leader.node_id.as_deref() == Some(node_id) {
            self.leader.lease_until_ms = self.now_ms + lease_ms;
        }
        Ok(())
    }

    async fn take_lease(&mut self, node_id: &str, term: i64, lease_ms: i64) -> Result<(), Error> {
        self.leader = MemoryLeader {
            node_id: Some(node_id.to_owned()),
            term,
            lease_until_ms: self.now_ms + lease_ms,
            acquired_at_ms: self.now_ms,
        };
        Ok(())
    }

    async fn release_lease(&mut self, node_id: &str) -> Result<(), Error> {
        if self.leader.node_id.as_deref() == Some(node_id) {
            self.leader.node_id = None;
            self.leader.lease_until_ms = 0;
        }
        Ok(())
    }

    async fn release_partitions(&mut self, node_id: &str) -> Result<(), Error> {
        for (id, (owner, epoch)) in &mut self.partitions {
            if owner.as_deref() == Some(node_id) {
                *owner = None;
                *epoch += 1;
                self.pending_owners.remove(id);
            }
        }
        Ok(())
    }

    async fn cancel_hand_offs_to(&mut self, node_id: &str) -> Result<(), Error> {
        self.pending_owners.retain(|_, to| to != node_id);
        Ok(())
    }

    async fn update_node(&mut self, node: &NodeRegistration) -> Result<bool, Error> {
        let Some(known) = self.nodes.get_mut(&node.node_id) else {
            return Ok(false);
        };
        known.incarnation.clone_from(&node.incarnation);
        known.left = false;
        Ok(true)
    }

    async fn insert_node(&mut self, node: &NodeRegistration) -> Result<(), Error> {
        let row = MemoryNode {
            incarnation: node.incarnation.clone(),
            left: false,
        };
        self.nodes.insert(node.node_id.clone(), row);
        Ok(())
    }

    async fn mark_node_left(&mut self, node_id: &str, incarnation: &str) -> Result<bool, Error> {
        match self.nodes.get_mut(node_id) {
            Some(node) if node.incarnation == incarnation && !node.left => {
                node.left = true;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn apply_partition_change(&mut self, change: &PartitionChange) -> Result<u64, Error> {
        Ok(match change {
            PartitionChange::Assign {
                partition_id,
                expected_epoch,
                owner,
            } => self.change_partition(*partition_id, *expected_epoch, |o, pending| {
                *o = Some(owner.clone());
                *pending = None;
                true
            }),
            PartitionChange::RequestHandOff {
                partition_id,
                expected_epoch,
                to,
            } => self.change_partition(*partition_id, *expected_epoch, |_, pending| {
                *pending = Some(to.clone());
                false
            }),
            PartitionChange::CancelHandOff {
                partition_id,
                expected_epoch,
            } => self.change_partition(*partition_id, *expected_epoch, |_, pending| {
                *pending = None;
                false
            }),
        })
    }
}
