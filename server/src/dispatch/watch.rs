//! The watch over attempts in flight, at the start of every delivery pass: an attempt whose
//! executor stopped heartbeating (or heartbeats without listing it) fails over to another
//! executor; one past its job's timeout ends `timed_out` and its executor is told to cancel
//! (an XXL-JOB executor: `/kill`).

use tracing::info;

use super::finish::{Ending, finish_attempt};
use super::fleet::Fleet;
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
}
