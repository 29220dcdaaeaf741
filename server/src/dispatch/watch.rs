//! The watch over attempts in flight, at the start of every delivery pass: an attempt whose
//! executor stopped heartbeating (or heartbeats without listing it) fails over to another
//! executor; one past its job's timeout ends `timed_out` and its executor is told to cancel
//! (an XXL-JOB executor: `/kill`). HTTP jobs' calls in flight are not executors' and are left
//! to their answer or deadline.

use tracing::info;

use super::finish::{Ending, finish_attempt};
use super::fleet::Fleet;
use super::http_jobs::HTTP_EXECUTOR_PREFIX;
use super::{Dispatcher, millis};
use crate::store;

impl Dispatcher {
    /// Fails over the attempts of lost executors, then times out the overdue.
    pub(super) async fn watch(
        &self,
        partitions: &[i64],
        fleet: &Fleet,
    ) -> Result<(), store::Error> {
        let lease_ms = millis(self.settings.executor_lease);
        for attempt in self
            .store
            .attempts_orphaned(partitions, lease_ms, self.settings.batch)
            .await?
        {
            if self.making_http_call(attempt.executor_id.as_deref(), attempt.attempt_id) {
                continue;
            }
            let trace_id = self.observer.traces.trace_id(attempt.run_id);
            info!(run_id = attempt.run_id, attempt_id = attempt.attempt_id, trace_id, executor = ?attempt.executor_id, "executor lost the attempt; failing it over");
            let error = Some(
                "the executor stopped heartbeating, or heartbeats without listing it".to_owned(),
            );
            finish_attempt(
                &*self.store,
                &self.observer,
                &attempt,
                Ending::Lost,
                None,
                error,
            )
            .await?;
        }
        for attempt in self
            .store
            .attempts_expired(partitions, self.settings.batch)
            .await?
        {
            info!(
                run_id = attempt.run_id,
                attempt_id = attempt.attempt_id,
                "attempt timed out"
            );
            // Record the timeout first: the executor's "cancelled" report then finds the attempt
            // ended and changes nothing.
            let error = Some("the job's timeout passed".to_owned());
            finish_attempt(
                &*self.store,
                &self.observer,
                &attempt,
                Ending::TimedOut,
                None,
                error,
            )
            .await?;
            if let Some(executor) = fleet.healthy(attempt.executor_id.as_deref()) {
                self.client
                    .stop(executor, attempt.attempt_id, attempt.job_id)
                    .await;
            }
        }
        Ok(())
    }

    /// Whether an attempt recorded by an HTTP job's call (executor `http@<node>`) may still be
    /// answered: another node's ends by its answer or its deadline (the node may live on after
    /// the partition moved); this node's only while this process is calling it (one recorded
    /// by an earlier process of the node lost its call).
    fn making_http_call(&self, executor_id: Option<&str>, attempt_id: i64) -> bool {
        let Some(node) = executor_id.and_then(|e| e.strip_prefix(HTTP_EXECUTOR_PREFIX)) else {
            return false;
        };
        if node != self.view.node_id() {
            return true;
        }
        self.http_jobs
            .as_ref()
            .is_some_and(|h| h.is_calling(attempt_id))
    }
}
