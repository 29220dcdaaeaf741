//! Stage five: what executors answered. An accepted offer is recorded as running; a result
//! given at once is ended with the others of its pass: plain successes in two statements per
//! executor, the rest together in one transaction (`finish` ends results reported later).

use std::collections::HashMap;

use tracing::debug;

use super::Dispatcher;
use super::client::Delivery;
use super::finish::{Ending, end_of};
use super::plan::Offer;
use crate::jobs::Overlap;
use crate::observe::Observer;
use crate::store::{self, AttemptEnd, Store, attempt_state};

/// An attempt an executor answered at once, to end with the others of its pass.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) attempt_id: i64,
    pub(super) run_id: i64,
    pub(super) job_id: i64,
    pub(super) end: AttemptEnd,
    /// The executor, when this is a plain success: the run's only shard, no output, and a
    /// job that queues nothing behind it (so nothing else changes when it ends).
    pub(super) simple_success: Option<String>,
}

/// What a delivery produced: an attempt to end (answered at once), or nothing more to do.
pub(super) type Delivered = Result<Option<Ended>, store::Error>;

/// A run's first attempt (of shard 0) was taken by an executor, sent at `sent_ms`: the run's
/// lateness. Called once per attempt: after its `202` was recorded, or with its result.
pub(super) fn first_taken(observer: &Observer, offer: &Offer, sent_ms: i64) {
    let a = &offer.attempt;
    if a.attempt_no == 1 && a.shard_index == 0 {
        // Late from when it was due: its instant plus the job's jitter.
        observer.first_dispatch(
            a.run_id,
            a.job_id,
            offer.scheduled_at_ms.max(a.not_before_ms),
            sent_ms,
            &offer.policy,
        );
    }
}

/// What an executor's answer to an offer means: `None` to offer it to the next executor.
pub(super) async fn settle(
    store: &dyn Store,
    observer: &Observer,
    offer: &Offer,
    executor_id: &str,
    sent_ms: i64,
    delivery: Delivery,
) -> Option<Delivered> {
    observer.metrics.dispatches.add(delivery.outcome(), 1);
    let attempt = &offer.attempt;
    let (ending, output, error) = match delivery {
        Delivery::Accepted => {
            let recorded = store
                .attempt_dispatched(attempt.attempt_id, executor_id, offer.timeout_ms)
                .await;
            if matches!(recorded, Ok(true)) {
                first_taken(observer, offer, sent_ms);
            }
            return Some(recorded.map(|_| None));
        }
        Delivery::Finished(result) => {
            first_taken(observer, offer, sent_ms);
            (
                Ending::Reported(result.outcome),
                result.output,
                result.error,
            )
        }
        Delivery::TryAnother(_, why) => {
            debug!(run_id = attempt.run_id, attempt_id = attempt.attempt_id, executor = %executor_id, why, "offering to the next executor");
            return None;
        }
        Delivery::Refused(why) => (Ending::Refused, None, Some(why)),
    };
    let end = end_of(
        &offer.policy,
        attempt,
        Some(executor_id),
        ending,
        output.as_ref(),
        error,
    );
    let simple = end.state == attempt_state::SUCCEEDED
        && end.output.is_none()
        && end.error.is_none()
        && end.retry_after_ms.is_none()
        && attempt.shard_total == 1
        && offer.policy.overlap != Overlap::Queue;
    Some(Ok(Some(Ended {
        attempt_id: attempt.attempt_id,
        run_id: attempt.run_id,
        job_id: attempt.job_id,
        end,
        simple_success: simple.then(|| executor_id.to_owned()),
    })))
}

impl Dispatcher {
    /// Ends the attempts answered at once during a pass; returns how many.
    pub(super) async fn end_together(
        &self,
        ended: Vec<Option<Ended>>,
    ) -> Result<usize, store::Error> {
        // Plain successes end in two statements per executor; the rest one by one, together.
        let mut simple: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        // The others end together; `runs_of_rest` names each one's run and job, in order.
        let mut rest = Vec::new();
        let mut runs_of_rest = Vec::new();
        for done in ended.into_iter().flatten() {
            match done.simple_success {
                Some(executor) => simple
                    .entry(executor)
                    .or_default()
                    .push((done.attempt_id, done.run_id)),
                None => {
                    runs_of_rest.push((done.run_id, done.job_id));
                    rest.push((done.attempt_id, done.end));
                }
            }
        }
        let mut count = 0;
        for (executor, attempts) in simple {
            let runs = self.store.attempts_succeed(&executor, &attempts).await?;
            self.observer.runs_succeeded(runs);
            count += attempts.len();
        }
        if !rest.is_empty() {
            let outcomes = self.store.attempts_end(&rest).await?;
            for (((run_id, job_id), (_, end)), outcome) in
                runs_of_rest.iter().zip(&rest).zip(&outcomes)
            {
                self.observer
                    .attempt_ended(outcome, *run_id, *job_id, end.error.as_deref());
            }
            count += rest.len();
        }
        Ok(count)
    }
}
