//! The cluster's writes: the leader lease (renewed by its holder, taken when it expired with a
//! new term, even by the same node), the leader's partition changes fenced by its term, and a
//! node's registration and leave, which give up its leadership and partitions. Every
//! transaction that writes partitions locks the leader row first, then partitions: two of them
//! cannot deadlock.

use async_trait::async_trait;

use super::super::cluster_records::{LeaderFence, LeaderRecord, NodeRegistration, PartitionChange};
use super::super::error::Error;

/// What the cluster's writes need of a write transaction: statements with their binds.
#[async_trait]
pub(crate) trait ClusterTx: Send {
    /// The leader row, locked, with the database's clock.
    async fn lock_leader(&mut self) -> Result<LeaderRecord, Error>;

    /// The leader row as this transaction now sees it.
    async fn leader(&mut self) -> Result<LeaderRecord, Error>;

    /// Extends `node_id`'s lease to `lease_ms` from now.
    async fn renew_lease(&mut self, node_id: &str, lease_ms: i64) -> Result<(), Error>;

    /// Gives the lease to `node_id` under `term`, for `lease_ms` from now.
    async fn take_lease(&mut self, node_id: &str, term: i64, lease_ms: i64) -> Result<(), Error>;

    /// Ends `node_id`'s lease, if it holds it.
    async fn release_lease(&mut self, node_id: &str) -> Result<(), Error>;

    /// Frees every partition `node_id` owns (each epoch moves on, fencing its old work).
    async fn release_partitions(&mut self, node_id: &str) -> Result<(), Error>;

    /// Withdraws the hand-offs asked of other owners towards `node_id`.
    async fn cancel_hand_offs_to(&mut self, node_id: &str) -> Result<(), Error>;

    /// Records the node's new incarnation (it starts again, or comes back after leaving);
    /// whether it was known.
    async fn update_node(&mut self, node: &NodeRegistration) -> Result<bool, Error>;

    async fn insert_node(&mut self, node: &NodeRegistration) -> Result<(), Error>;

    /// Marks the node left if `incarnation` is still its own and it has not left; whether it
    /// did.
    async fn mark_node_left(&mut self, node_id: &str, incarnation: &str) -> Result<bool, Error>;

    /// Applies `change` if its partition's epoch is still the one it expects; rows changed.
    async fn apply_partition_change(&mut self, change: &PartitionChange) -> Result<u64, Error>;
}

/// `node_id` tries for the lease: its holder renews it, an unexpired one held by another stays
/// theirs, an expired or free one is taken under the next term. The lease after.
pub(crate) async fn acquire_lease<T: ClusterTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    lease_ms: i64,
) -> Result<LeaderRecord, Error> {
    let current = tx.lock_leader().await?;
    match current.holder() {
        Some(holder) if holder == node_id => tx.renew_lease(node_id, lease_ms).await?,
        Some(_) => return Ok(current),
        None => tx.take_lease(node_id, current.term + 1, lease_ms).await?,
    }
    tx.leader().await
}

/// Applies the leader's partition `changes`, each only at the epoch it expects; refused whole
/// unless `fence` is still the leader at its term. How many partitions changed.
pub(crate) async fn apply_partition_changes<T: ClusterTx + ?Sized>(
    tx: &mut T,
    fence: &LeaderFence,
    changes: &[PartitionChange],
) -> Result<u64, Error> {
    let leader = tx.lock_leader().await?;
    if leader.holder() != Some(fence.node_id.as_str()) || leader.term != fence.term {
        return Err(Error::Fenced { term: fence.term });
    }
    let mut applied = 0;
    for change in changes {
        applied += tx.apply_partition_change(change).await?;
    }
    Ok(applied)
}

/// Registers `node` (a new process under its id): whatever the id held before, leadership and
/// partitions, is given up, since the process that held it is gone.
pub(crate) async fn register_node<T: ClusterTx + ?Sized>(
    tx: &mut T,
    node: &NodeRegistration,
) -> Result<(), Error> {
    if !tx.update_node(node).await? {
        tx.insert_node(node).await?;
    }
    release_everything(tx, &node.node_id).await
}

/// The node leaves: marked left, its leadership and partitions given up, and the hand-offs
/// asked towards it withdrawn. Refused (nothing written) when another process took its id.
pub(crate) async fn leave<T: ClusterTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    incarnation: &str,
) -> Result<(), Error> {
    if !tx.mark_node_left(node_id, incarnation).await? {
        return Err(Error::IncarnationLost {
            node_id: node_id.to_owned(),
        });
    }
    release_everything(tx, node_id).await?;
    tx.cancel_hand_offs_to(node_id).await
}

async fn release_everything<T: ClusterTx + ?Sized>(tx: &mut T, node_id: &str) -> Result<(), Error> {
    tx.lock_leader().await?;
    tx.release_lease(node_id).await?;
    tx.release_partitions(node_id).await
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::*;

    const LEASE: i64 = 10_000;

    fn node(id: &str, incarnation: &str) -> NodeRegistration {
        NodeRegistration {
            node_id: id.to_owned(),
            incarnation: incarnation.to_owned(),
            address: format!("http://{id}"),
            version: "test".to_owned(),
        }
    }

    fn held(record: &LeaderRecord) -> (Option<&str>, i64) {
        (record.holder(), record.term)
    }

    #[tokio::test]
    async fn a_lease_is_renewed_by_its_holder_kept_from_others_and_taken_under_a_new_term() {
        let mut db = MemoryDb {
            now_ms: 1_000,
            ..MemoryDb::default()
        };
        assert_eq!(
            held(&acquire_lease(&mut db, "n1", LEASE).await.unwrap()),
            (Some("n1"), 1)
        );
        db.now_ms = 5_000;
        let renewed = acquire_lease(&mut db, "n1", LEASE).await.unwrap();
        assert_eq!(
            (held(&renewed), renewed.lease_until_ms),
            ((Some("n1"), 1), 15_000)
        );
        assert_eq!(
            held(&acquire_lease(&mut db, "n2", LEASE).await.unwrap()),
            (Some("n1"), 1),
            "an unexpired lease stays its holder's"
        );
        db.now_ms = 15_000;
        assert_eq!(
            held(&acquire_lease(&mut db, "n2", LEASE).await.unwrap()),
            (Some("n2"), 2)
        );
        db.now_ms = 40_000;
        assert_eq!(
            held(&acquire_lease(&mut db, "n2", LEASE).await.unwrap()),
            (Some("n2"), 3),
            "an expired lease taken again, even by its last holder, is a new term"
        );
    }

    #[tokio::test]
    async fn partition_changes_need_the_leaders_term_and_each_its_expected_epoch() {
        let mut db = MemoryDb::default();
        acquire_lease(&mut db, "n1", LEASE).await.unwrap();
        db.partitions.insert(0, (None, 4));
        db.partitions.insert(1, (Some("n1".to_owned()), 2));
        let changes = [
            PartitionChange::Assign {
                partition_id: 0,
                expected_epoch: 4,
                owner: "n2".to_owned(),
            },
            PartitionChange::RequestHandOff {
                partition_id: 1,
                expected_epoch: 1,
                to: "n2".to_owned(),
            },
        ];
        let stale = LeaderFence {
            node_id: "n1".to_owned(),
            term: 7,
        };
        let refused = apply_partition_changes(&mut db, &stale, &changes).await;
        assert!(
            matches!(refused, Err(Error::Fenced { term: 7 })),
            "{refused:?}"
        );
        assert_eq!(db.partitions[&0], (None, 4), "nothing applied");
        let fence = LeaderFence {
            node_id: "n1".to_owned(),
            term: 1,
        };
        assert_eq!(
            apply_partition_changes(&mut db, &fence, &changes)
                .await
                .unwrap(),
            1
        );
        assert_eq!(db.partitions[&0], (Some("n2".to_owned()), 5));
        assert!(
            db.pending_owners.is_empty(),
            "partition 1 moved on: its change was stale"
        );
    }

    #[tokio::test]
    async fn a_node_that_registers_again_gives_up_what_its_id_held() {
        let mut db = MemoryDb::default();
        register_node(&mut db, &node("n1", "a")).await.unwrap();
        acquire_lease(&mut db, "n1", LEASE).await.unwrap();
        db.partitions.insert(0, (Some("n1".to_owned()), 1));
        db.partitions.insert(1, (Some("n2".to_owned()), 1));
        register_node(&mut db, &node("n1", "b")).await.unwrap();
        assert_eq!(db.leader().await.unwrap().holder(), None);
        assert_eq!(
            db.partitions[&0],
            (None, 2),
            "its epoch moved on: its old work is fenced"
        );
        assert_eq!(db.partitions[&1], (Some("n2".to_owned()), 1));
        assert_eq!(db.nodes["n1"].incarnation, "b");
    }

    #[tokio::test]
    async fn a_node_leaves_only_as_the_process_that_registered_and_takes_its_hand_offs_back() {
        let mut db = MemoryDb::default();
        register_node(&mut db, &node("n1", "a")).await.unwrap();
        db.partitions.insert(0, (Some("n1".to_owned()), 1));
        db.partitions.insert(1, (Some("n2".to_owned()), 1));
        db.pending_owners.insert(1, "n1".to_owned());
        let lost = leave(&mut db, "n1", "old").await;
        assert!(
            matches!(lost, Err(Error::IncarnationLost { .. })),
            "{lost:?}"
        );
        leave(&mut db, "n1", "a").await.unwrap();
        assert!(db.nodes["n1"].left);
        assert_eq!(db.partitions[&0], (None, 2));
        assert!(
            db.pending_owners.is_empty(),
            "the hand-off to it is withdrawn"
        );
        assert!(matches!(
            leave(&mut db, "n1", "a").await,
            Err(Error::IncarnationLost { .. })
        ));
    }
}
