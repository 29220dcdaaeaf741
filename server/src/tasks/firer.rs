//! The per-node `TaskFirer`: fires the tasks of the node's partitions as they come due.
//!
//! Tasks are never held in memory: every pass reads one window from the database, the
//! pending tasks of the owned partitions due within `ahead`, at most `batch` of them, earliest
//! first, and fires them in one transaction fenced by the partitions' epochs (`tasks_fire`).
//! A node's memory is one window, whatever the number of pending tasks. A window that came
//! back full is followed at once by the next, so a million tasks due together drain at the
//! speed of the database; otherwise the firer looks again after `tick`. When a partition moves
//! (hand-off or failover), its pending tasks are simply read by the next owner's passes.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::ClusterClock;
use crate::cluster::LocalView;
use crate::observe::NodeMetrics;
use crate::states::TriggerKind;
use crate::store::{self, PartitionEpoch, TaskStore, TasksFired};

/// How the firer reads its windows.
#[derive(Debug, Clone, Copy)]
pub struct FireSettings {
    /// How often the window is read when the last one was not full.
    pub tick: Duration,
    /// Tasks due this soon are fired now: their attempts wait for their instant in the
    /// dispatch queue, so a delivery is on time however long the fire took, and a crowd due
    /// at one instant is mostly fired before it. A million tasks due at once drained in 84 s
    /// with one second ahead and windows of 5,000, in 52 s with ten seconds and 10,000
    /// (PostgreSQL, `bench/README.md`): from then on the delivery is the limit.
    pub ahead: Duration,
    /// Most tasks one pass fires (one transaction).
    pub batch: i64,
}

impl Default for FireSettings {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(100),
            ahead: Duration::from_secs(10),
            batch: 10_000,
        }
    }
}

/// Fires due tasks of the node's partitions.
#[derive(Debug)]
pub struct TaskFirer {
    store: Arc<dyn TaskStore>,
    view: Arc<LocalView>,
    clock: Arc<ClusterClock>,
    settings: FireSettings,
    /// The dispatcher: woken when a pass fired tasks, so their attempts go out at once.
    dispatcher: Arc<Notify>,
    metrics: Arc<NodeMetrics>,
}

impl TaskFirer {
    pub fn new(
        store: Arc<dyn TaskStore>,
        view: Arc<LocalView>,
        clock: Arc<ClusterClock>,
        settings: FireSettings,
        dispatcher: Arc<Notify>,
        metrics: Arc<NodeMetrics>,
    ) -> Self {
        Self {
            store,
            view,
            clock,
            settings,
            dispatcher,
            metrics,
        }
    }

    pub async fn run(self, stop: CancellationToken) {
        loop {
            let full = match self.pass().await {
                Ok(fired) => fired.read as i64 >= self.settings.batch && fired.fired > 0,
                Err(err) => {
                    warn!(error = %err, "firing due tasks failed; trying again");
                    false
                }
            };
            if full {
                if stop.is_cancelled() {
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.settings.tick) => {}
            }
        }
    }

    /// Fires one window.
    async fn pass(&self) -> Result<TasksFired, store::Error> {
        let partitions: Vec<PartitionEpoch> = self
            .view
            .owned_partitions()
            .iter()
            .map(|p| PartitionEpoch {
                partition_id: p.partition_id,
                epoch: p.epoch,
            })
            .collect();
        if partitions.is_empty() {
            return Ok(TasksFired::default());
        }
        let ahead = i64::try_from(self.settings.ahead.as_millis()).unwrap_or(i64::MAX);
        let due_by = self.clock.now_ms().saturating_add(ahead);
        let fired = self
            .store
            .tasks_fire(
                self.view.node_id(),
                &partitions,
                due_by,
                self.settings.batch,
            )
            .await?;
        if fired.fired > 0 {
            for (namespace, count) in &fired.fired_by_namespace {
                self.metrics
                    .fires
                    .add(namespace.0, TriggerKind::Task.as_str(), *count);
            }
            self.dispatcher.notify_one();
        }
        if fired.fenced > 0 {
            debug!(
                fenced = fired.fenced,
                "tasks of partitions handed off since the window was read were left to their next owner"
            );
        }
        Ok(fired)
    }
}
