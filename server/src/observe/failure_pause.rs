//! `pause_after_failures`: a job whose last N runs failed is stopped, and its operators are
//! told (`job_paused`). Run endings only note the job here (a set insert, no I/O); the
//! [`FailurePauser`] task reads the job's latest runs and stops it. Each failure looks again,
//! so a check lost to a crash is made at the next failure.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{AlertEvent, Alerter};
use crate::states::{JobState, RunState};
use crate::store::{self, DEAD_LETTER_STATES, JobStore};

/// The jobs with a failed run to look at; shared by the [`Observer`](super::Observer) and the
/// [`FailurePauser`].
#[derive(Debug, Default)]
pub struct FailedJobs {
    jobs: Mutex<HashSet<i64>>,
    wake: Notify,
}

impl FailedJobs {
    /// A run of `job_id` failed for good.
    pub fn note(&self, job_id: i64) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(job_id);
        self.wake.notify_one();
    }

    fn take(&self) -> Vec<i64> {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain()
            .collect()
    }
}

/// The task that stops jobs past their `pause_after_failures`.
#[derive(Debug)]
pub struct FailurePauser {
    store: Arc<dyn JobStore>,
    failed: Arc<FailedJobs>,
    alerter: Alerter,
}

impl FailurePauser {
    pub fn new(store: Arc<dyn JobStore>, failed: Arc<FailedJobs>, alerter: Alerter) -> Self {
        Self {
            store,
            failed,
            alerter,
        }
    }

    pub async fn run(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.failed.wake.notified() => {}
            }
            for job_id in self.failed.take() {
                if let Err(err) = self.check(job_id).await {
                    warn!(job_id, error = %err, "cannot check the job's failures; looked at again at its next failure");
                }
            }
        }
    }

    async fn check(&self, job_id: i64) -> Result<(), store::Error> {
        let Some(job) = self.store.job_get(job_id).await? else {
            return Ok(());
        };
        let limit = job.policy()?.pause_after_failures;
        let Some(limit) = limit.filter(|_| job.state == JobState::Running) else {
            return Ok(());
        };
        // Runs still unfinished, skipped or cancelled neither break nor extend the streak.
        let window = i64::from(limit) * 2 + 20;
        let mut settled: Vec<_> = self
            .store
            .runs_of_job(job_id, None, window)
            .await?
            .into_iter()
            .filter(|r| {
                !RunState::UNFINISHED.contains(&r.state)
                    && r.state != RunState::Skipped
                    && r.state != RunState::Cancelled
            })
            .collect();
        settled.sort_by_key(|r| std::cmp::Reverse(r.scheduled_at_ms));
        let streak = settled
            .iter()
            .take_while(|r| DEAD_LETTER_STATES.contains(&r.state))
            .count();
        if streak < limit as usize {
            return Ok(());
        }
        let stopped = self.store.job_stop(job_id, None).await?;
        if stopped.is_some_and(|j| j.state == JobState::Stopped && j.version > job.version) {
            info!(
                job_id,
                failures = limit,
                "job stopped after failed runs in a row (pause_after_failures)"
            );
            self.alerter.raise(AlertEvent::JobPaused {
                job_id,
                failures: limit,
            });
        }
        Ok(())
    }
}
