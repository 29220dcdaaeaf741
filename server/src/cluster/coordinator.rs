//! The per-node loop: heartbeat, contend for or renew the leader lease, rebalance partitions when
//! leading, and refresh which partitions this node owns (completing hand-offs asked of it).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::view::{LocalView, OwnedPartition};
use super::{ClusterTimings, assignment};
use crate::clock::{ClusterClock, system_now_ms};
use crate::store::{self, ClusterStore};

/// Why the coordinator stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("node id {node_id} was registered by another process; this process stops")]
    IdentityTaken { node_id: String },
}

/// Keeps this node's membership, leadership and partitions current.
#[derive(Debug)]
pub struct Coordinator {
    store: Arc<dyn ClusterStore>,
    view: Arc<LocalView>,
    clock: Arc<ClusterClock>,
    incarnation: String,
    timings: ClusterTimings,
}

impl Coordinator {
    pub fn new(
        store: Arc<dyn ClusterStore>,
        view: Arc<LocalView>,
        clock: Arc<ClusterClock>,
        incarnation: String,
        timings: ClusterTimings,
    ) -> Self {
        Self {
            store,
            view,
            clock,
            incarnation,
            timings,
        }
    }

    /// Runs until `stop` is cancelled, then leaves the cluster: releases leadership and
    /// partitions at once so the other nodes need not wait for the leases to run out.
    pub async fn run(self, stop: CancellationToken) -> Result<(), CoordinatorError> {
        let mut ticks = tokio::time::interval(self.timings.heartbeat);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // A tick that hangs on an unreachable database must not hold up the next attempt long.
        let tick_budget = self.timings.node_lease / 2;
        let outcome = loop {
            tokio::select! {
                _ = stop.cancelled() => break Ok(()),
                _ = ticks.tick() => {}
            }
            match tokio::time::timeout(tick_budget, self.tick()).await {
                Ok(Ok(())) => {}
                Ok(Err(store::Error::IncarnationLost { node_id })) => {
                    break Err(CoordinatorError::IdentityTaken { node_id });
                }
                Ok(Err(err)) => warn!(error = %err, "cluster heartbeat failed"),
                Err(_) => warn!(budget = ?tick_budget, "cluster heartbeat timed out"),
            }
        };
        self.view.revoke_all();
        if outcome.is_ok() {
            self.leave().await;
        }
        outcome
    }

    async fn tick(&self) -> Result<(), store::Error> {
        let node_id = self.view.node_id();

        let sent = Instant::now();
        self.store
            .node_heartbeat(node_id, &self.incarnation)
            .await?;
        self.view
            .renew_membership(deadline(sent, self.timings.node_lease));

        // Keep this node's scheduling clock on the database's.
        let asked = system_now_ms();
        let database_ms = self.store.now_ms().await?;
        self.clock.observe(asked, database_ms, system_now_ms());

        let was_leader = self.view.leader_term();
        let sent = Instant::now();
        let lease = self
            .store
            .leader_try_acquire(node_id, millis(self.timings.leader_lease))
            .await?;
        if lease.holder() == Some(node_id) {
            self.view.set_leader(Some((
                lease.term,
                deadline(sent, self.timings.leader_lease),
            )));
            if was_leader != Some(lease.term) {
                info!(term = lease.term, "this node is now the leader");
            }
        } else {
            self.view.set_leader(None);
            if was_leader.is_some() {
                warn!(holder = ?lease.node_id, term = lease.term, "this node lost the leadership");
            }
        }

        if let Some(fence) = self.view.leader_fence() {
            match self.rebalance(&fence).await {
                Err(store::Error::Fenced { term }) => {
                    warn!(term, "leader write refused: a newer leader exists");
                    self.view.set_leader(None);
                }
                other => other?,
            }
        }
        self.refresh_partitions().await
    }

    async fn rebalance(&self, fence: &store::LeaderFence) -> Result<(), store::Error> {
        let nodes = self.store.nodes_list().await?;
        let live = nodes.alive_ids(millis(self.timings.node_lease));
        let partitions = self.store.partitions_list().await?;
        let changes = assignment::plan(&partitions, &live);
        if changes.is_empty() {
            return Ok(());
        }
        let applied = self.store.partitions_apply(fence, &changes).await?;
        info!(
            planned = changes.len(),
            applied,
            live_nodes = live.len(),
            "partitions rebalanced"
        );
        Ok(())
    }

    async fn refresh_partitions(&self) -> Result<(), store::Error> {
        let node_id = self.view.node_id();
        let owned = self.store.partitions_owned(node_id).await?;
        let (to_hand_off, keep): (Vec<_>, Vec<_>) = owned
            .into_iter()
            .partition(|p| p.pending_owner_node_id.is_some());
        // Stop acting on a partition before giving it away: the new owner may start as soon as
        // the hand-off commits.
        self.view.set_partitions(
            keep.iter()
                .map(|p| OwnedPartition {
                    partition_id: p.partition_id,
                    epoch: p.epoch,
                })
                .collect(),
        );
        for partition in &to_hand_off {
            let moved = self.store.partition_hand_off(node_id, partition).await?;
            debug!(
                partition = partition.partition_id,
                to = ?partition.pending_owner_node_id,
                moved,
                "partition handed off"
            );
        }
        Ok(())
    }

    async fn leave(&self) {
        let node_id = self.view.node_id();
        match self.store.node_leave(node_id, &self.incarnation).await {
            Ok(()) => info!("left the cluster; partitions and leadership released"),
            Err(err) => warn!(
                error = %err,
                "could not leave the cluster cleanly; others take over when the lease expires"
            ),
        }
    }
}

fn deadline(sent: Instant, lease: Duration) -> Instant {
    sent + lease - ClusterTimings::safety_margin(lease)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
