//! Run-history retention: every node deletes, for the partitions it owns, the finished runs
//! (with their attempts) that the rules no longer keep, in bounded batches with a pause
//! between them, so deleting a large backlog never holds locks for long or starves firing.
//!
//! The rules, checked on every pass (`retention.interval_ms`):
//! - finished runs that are not dead letters are kept for `retention.runs` (30 days);
//! - dead letters (`failed`, `no_executor`) for `retention.dead_letters` (90 days);
//! - a job's own `history.keep` replaces `retention.runs` for its runs, and its dead letters
//!   are kept for the longer of the two; `history.max_runs` keeps at most that many of its
//!   newest runs (dead letters included);
//! - `forever` (or `0`) turns a rule off. Pending, queued and running runs are never deleted;
//! - a task that fired or was cancelled before `retention.runs` is deleted once its run is
//!   gone (a cancelled one has none): a task is kept as long as its run.
//!
//! Why the owners and not the leader: deletion then spreads over the cluster with the firing
//! work, and a node scans only its own partitions' runs. Two nodes deleting the same run
//! during a hand-off is harmless: a delete of what is gone deletes nothing.
//!
//! The audit trail has no partitions: the leader deletes its events older than
//! `retention.audit` (a year), on the same passes and in the same batches.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::ClusterClock;
use crate::cluster::LocalView;
use crate::jobs::RetentionConfig;
use crate::observe::NodeMetrics;
use crate::store::{
    self, AuditStore, HistoryStore, JobHistoryRule, PurgeScope, PurgeStates, Purged, TaskStore,
};

/// The task that applies the retention rules on one node.
#[derive(Debug)]
pub struct HistoryPurger {
    history: Arc<dyn HistoryStore>,
    /// Ended tasks go with their runs.
    tasks: Arc<dyn TaskStore>,
    audit: Arc<dyn AuditStore>,
    view: Arc<LocalView>,
    clock: Arc<ClusterClock>,
    settings: RetentionConfig,
    metrics: Arc<NodeMetrics>,
    cursors: std::sync::Mutex<Cursors>,
}

/// Where the global passes stopped: the next pass starts there instead of at the oldest run,
/// so it neither rescans the runs it keeps (dead letters, other partitions, jobs with their
/// own rule) nor walks the index entries of rows deleted but not yet vacuumed. Started over
/// when the partitions change, and every `CURSOR_RESET` (a job's own rule may have gone).
#[derive(Debug, Default)]
struct Cursors {
    partitions: Vec<i64>,
    settled_from_ms: i64,
    dead_letters_from_ms: i64,
    since: Option<tokio::time::Instant>,
}

const CURSOR_RESET: Duration = Duration::from_secs(3_600);

impl HistoryPurger {
    pub fn new(
        history: Arc<dyn HistoryStore>,
        tasks: Arc<dyn TaskStore>,
        audit: Arc<dyn AuditStore>,
        view: Arc<LocalView>,
        clock: Arc<ClusterClock>,
        settings: RetentionConfig,
        metrics: Arc<NodeMetrics>,
    ) -> Self {
        Self {
            history,
            tasks,
            audit,
            view,
            clock,
            settings,
            metrics,
            cursors: std::sync::Mutex::default(),
        }
    }

    /// The passes' starting points for these partitions.
    fn cursors_for(&self, partitions: &[i64]) -> (i64, i64) {
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        let stale = cursors
            .since
            .is_none_or(|since| since.elapsed() >= CURSOR_RESET);
        if cursors.partitions != partitions || stale {
            *cursors = Cursors {
                partitions: partitions.to_vec(),
                since: Some(tokio::time::Instant::now()),
                ..Cursors::default()
            };
        }
        (cursors.settled_from_ms, cursors.dead_letters_from_ms)
    }

    fn cursors_keep(&self, settled_from_ms: i64, dead_letters_from_ms: i64) {
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.settled_from_ms = settled_from_ms;
        cursors.dead_letters_from_ms = dead_letters_from_ms;
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let interval = Duration::from_millis(self.settings.interval_ms);
        // Ages are measured on the database's clock, never on this machine's.
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = self.clock.synced() => {}
        }
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            if let Err(err) = self.purge_audit(&shutdown).await {
                tracing::warn!(error = %err, "audit trail retention pass failed");
            }
            match self.pass(&shutdown).await {
                Ok(purged) if purged.runs > 0 => tracing::info!(
                    runs = purged.runs,
                    attempts = purged.attempts,
                    "run history deleted by the retention rules"
                ),
                Ok(_) => {}
                Err(err) => tracing::warn!(error = %err, "run history retention pass failed"),
            }
        }
    }

    /// One look at the owned partitions: every rule applied until nothing more is due.
    pub async fn pass(&self, shutdown: &CancellationToken) -> Result<Purged, store::Error> {
        let partitions: Vec<i64> = self
            .view
            .owned_partitions()
            .iter()
            .map(|p| p.partition_id)
            .collect();
        if partitions.is_empty() {
            return Ok(Purged::default());
        }
        let now = self.clock.now_ms();
        let before = |keep: Option<u64>| keep.map(|ms| now - i64::try_from(ms).unwrap_or(now));
        let mut total = Purged::default();
        let everyone = PurgeScope {
            partitions: Some(partitions.clone()),
            skip_jobs_with_own_keep: true,
            ..PurgeScope::default()
        };
        let (mut settled_from, mut dead_from) = self.cursors_for(&partitions);
        if let Some(finished_before_ms) = before(self.settings.runs.millis()) {
            let scope = PurgeScope {
                finished_before_ms,
                finished_from_ms: settled_from,
                states: PurgeStates::NotDeadLetters,
                ..everyone.clone()
            };
            let (purged, reached) = self.drain(&scope, shutdown).await?;
            total += purged;
            settled_from = reached;
        }
        if let Some(finished_before_ms) = before(self.settings.dead_letters.millis()) {
            let scope = PurgeScope {
                finished_before_ms,
                finished_from_ms: dead_from,
                states: PurgeStates::DeadLetters,
                ..everyone
            };
            let (purged, reached) = self.drain(&scope, shutdown).await?;
            total += purged;
            dead_from = reached;
        }
        self.cursors_keep(settled_from, dead_from);
        for rule in self.history.history_rules(&partitions).await? {
            if shutdown.is_cancelled() {
                break;
            }
            total += self.apply_job_rule(&rule, now, shutdown).await?;
        }
        if let Some(ended_before_ms) = before(self.settings.runs.millis()) {
            self.purge_tasks(&partitions, ended_before_ms, shutdown)
                .await?;
        }
        Ok(total)
    }

    /// On the leader only: deletes the audit events older than `retention.audit`, a batch at
    /// a time.
    async fn purge_audit(&self, shutdown: &CancellationToken) -> Result<(), store::Error> {
        let Some(keep) = self.settings.audit.millis() else {
            return Ok(());
        };
        if self.view.leader_term().is_none() {
            return Ok(());
        }
        let before_ms = self
            .clock
            .now_ms()
            .saturating_sub(i64::try_from(keep).unwrap_or(i64::MAX));
        let batch = i64::from(self.settings.batch);
        let mut total = 0;
        loop {
            let deleted = self.audit.audit_purge(before_ms, batch).await?;
            total += deleted;
            if i64::try_from(deleted).unwrap_or(i64::MAX) < batch || shutdown.is_cancelled() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(self.settings.pause_ms)).await;
        }
        if total > 0 {
            tracing::info!(events = total, "audit events deleted by the retention rule");
        }
        Ok(())
    }

    /// Deletes the tasks that left `pending` before `ended_before_ms` and whose runs the
    /// rules above have deleted (a cancelled task has none), a batch at a time.
    async fn purge_tasks(
        &self,
        partitions: &[i64],
        ended_before_ms: i64,
        shutdown: &CancellationToken,
    ) -> Result<(), store::Error> {
        let batch = i64::from(self.settings.batch);
        loop {
            let deleted = self
                .tasks
                .tasks_purge(partitions, ended_before_ms, batch)
                .await?;
            if deleted > 0 {
                tracing::debug!(deleted, "tasks deleted after their runs");
            }
            if i64::try_from(deleted).unwrap_or(i64::MAX) < batch || shutdown.is_cancelled() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(self.settings.pause_ms)).await;
        }
    }

    async fn apply_job_rule(
        &self,
        rule: &JobHistoryRule,
        now: i64,
        shutdown: &CancellationToken,
    ) -> Result<Purged, store::Error> {
        let mut total = Purged::default();
        let job = PurgeScope {
            job_id: Some(rule.job_id),
            ..PurgeScope::default()
        };
        // 0 keeps the job's runs for ever.
        if let Some(keep) = rule.history_keep_ms.filter(|ms| *ms > 0) {
            let scope = PurgeScope {
                finished_before_ms: now.saturating_sub(keep),
                states: PurgeStates::NotDeadLetters,
                ..job.clone()
            };
            total += self.drain(&scope, shutdown).await?.0;
            if let Some(dead_keep) = self.settings.dead_letters.millis() {
                let dead_keep = i64::try_from(dead_keep).unwrap_or(i64::MAX).max(keep);
                let scope = PurgeScope {
                    finished_before_ms: now.saturating_sub(dead_keep),
                    states: PurgeStates::DeadLetters,
                    ..job.clone()
                };
                total += self.drain(&scope, shutdown).await?.0;
            }
        }
        if let Some(max_runs) = rule.history_max_runs
            && let Some(beyond) = self
                .history
                .history_beyond_newest(rule.job_id, max_runs)
                .await?
        {
            let scope = PurgeScope {
                finished_before_ms: i64::MAX,
                scheduled_until_ms: Some(beyond),
                states: PurgeStates::Finished,
                ..job
            };
            total += self.drain(&scope, shutdown).await?.0;
        }
        Ok(total)
    }

    /// Deletes what `scope` names, a step of `retention.batch` runs looked at after another,
    /// with a pause between steps; what it deleted, and where its last step started (the
    /// runs before it are deleted or kept by the scope).
    async fn drain(
        &self,
        scope: &PurgeScope,
        shutdown: &CancellationToken,
    ) -> Result<(Purged, i64), store::Error> {
        let batch = i64::from(self.settings.batch);
        let mut scope = scope.clone();
        let mut total = Purged::default();
        loop {
            let step = self.history.history_delete(&scope, batch).await?;
            self.metrics.count_history_deleted(step.purged);
            total += step.purged;
            match step.next_from_ms {
                Some(next) if !shutdown.is_cancelled() => scope.finished_from_ms = next,
                _ => return Ok((total, scope.finished_from_ms)),
            }
            tokio::time::sleep(Duration::from_millis(self.settings.pause_ms)).await;
        }
    }
}
