//! Stage three: each due attempt is planned, highest effective priority first (waiting raises
//! it, so nothing starves): the executors to offer it to, in the order its balancer gives,
//! counted against the first one's capacity. Work that cannot go anywhere ends here.

use std::time::Duration;

use carillon_protocol::{Dispatch, PROTOCOL_VERSION, Shard};
use serde_json::Value;

use super::Dispatcher;
use super::balancer::Candidate;
use super::finish::{Ending, finish_attempt};
use super::fleet::Fleet;
use super::fleet::carries_secrets;
use super::http_jobs::HttpOffer;
use crate::jobs::{Delivery, HttpCall, JobPolicy};
use crate::observe::traces::Offering;
use crate::states::RunState;
use crate::store::{self, AttemptRecord, DueAttempt, ExecutorRecord, JobRecord, NamespaceId};

/// Waiting this long raises an attempt's priority by one, so low priorities are not starved.
const AGEING_STEP_MS: i64 = 10_000;

/// Orders due attempts for planning: highest effective priority first, then oldest.
pub(super) fn by_priority(due: &mut [DueAttempt], now_ms: i64) {
    due.sort_by_key(|d| {
        let a = &d.attempt;
        let aged = a.priority + (now_ms - a.created_at_ms).max(0) / AGEING_STEP_MS;
        (std::cmp::Reverse(aged), a.attempt_id)
    });
}

/// Where the next delivery pass resumes in the queue of due attempts, ordered by when they
/// are due. It starts over after a short slice (the queue is drained) and at least every
/// [`DUE_CURSOR_RESTART`], so an attempt that became due behind the cursor (claimed ahead, or
/// a retry) waits at most that long while the queue stays full.
#[derive(Debug)]
pub(super) struct DueCursor {
    after: Option<(i64, i64)>,
    since: std::time::Instant,
}

const DUE_CURSOR_RESTART: Duration = Duration::from_secs(1);

impl DueCursor {
    pub(super) fn new() -> Self {
        Self {
            after: None,
            since: std::time::Instant::now(),
        }
    }

    pub(super) fn current(&mut self) -> Option<(i64, i64)> {
        if self.since.elapsed() >= DUE_CURSOR_RESTART {
            *self = Self::new();
        }
        self.after
    }

    pub(super) fn advance(&mut self, slice: &[DueAttempt], batch: i64) {
        match slice.last() {
            Some(last) if slice.len() as i64 >= batch => {
                self.after = Some((last.attempt.not_before_ms, last.attempt.attempt_id));
            }
            _ => *self = Self::new(),
        }
    }
}

/// An executor an offer may go to.
#[derive(Debug, Clone)]
pub(super) struct Target {
    pub(super) executor_id: String,
    pub(super) address: String,
    /// It speaks XXL-JOB's executor protocol (`dispatch/xxl.rs`).
    pub(super) xxl: bool,
}

/// An attempt ready to offer: the request, the executors to try in order, and the job's
/// policy (for its timeout and retries).
#[derive(Debug)]
pub(super) struct Offer {
    pub(super) attempt: AttemptRecord,
    /// The job's namespace, for the counters of the run's end.
    pub(super) namespace: NamespaceId,
    pub(super) scheduled_at_ms: i64,
    pub(super) request: Dispatch,
    /// The executors to offer it to, in order.
    pub(super) targets: Vec<Target>,
    /// The first target serves `dispatch-batch`: the offer may go with others due with it.
    pub(super) first_takes_batches: bool,
    pub(super) policy: JobPolicy,
    pub(super) timeout_ms: i64,
    /// An HTTP job's call, made by this node instead of an executor.
    pub(super) http: Option<Box<HttpOffer>>,
    /// Why it may not go (a secret it names does not open): it fails, saying so.
    pub(super) refused: Option<String>,
}

impl Offer {
    /// The offer to its `index`th target, as traces name it.
    pub(super) fn offering(&self, index: usize) -> Offering {
        let a = &self.attempt;
        Offering {
            run_id: a.run_id,
            attempt_id: a.attempt_id,
            attempt_no: a.attempt_no,
            shard_index: a.shard_index,
            created_at_ms: a.created_at_ms,
            lost_before: a.lost_before,
            job_id: a.job_id,
            namespace_id: self.namespace.0,
            scheduled_at_ms: self.scheduled_at_ms,
            target: u32::try_from(index).unwrap_or(u32::MAX),
        }
    }
}

impl Dispatcher {
    /// Fails `attempt` for good reason `error` (its retry policy decides what follows).
    async fn refuse(
        &self,
        attempt: &AttemptRecord,
        error: Option<String>,
    ) -> Result<(), store::Error> {
        finish_attempt(
            &*self.store,
            &self.observer,
            attempt,
            Ending::Refused,
            None,
            error,
        )
        .await
        .map(|_| ())
    }

    /// Ends the run of `attempt` (of a job of `namespace`) and its attempts `no_executor`.
    async fn end_run_nowhere(
        &self,
        attempt: &AttemptRecord,
        namespace: NamespaceId,
        message: &str,
    ) -> Result<(), store::Error> {
        let ended = self
            .store
            .run_end_with_attempts(attempt.run_id, RunState::NoExecutor, message, None)
            .await?;
        if ended.is_some() {
            self.observer.run_ended(
                attempt.run_id,
                attempt.job_id,
                Some(namespace),
                RunState::NoExecutor,
                Some(message),
            );
        }
        Ok(())
    }

    /// Plans the offer of one attempt to the executors that can take it, in balancer order,
    /// counting it against the first one's capacity; ends it here when it cannot go anywhere.
    pub(super) async fn plan(
        &self,
        attempt: &AttemptRecord,
        scheduled_at_ms: i64,
        input_json: Option<&str>,
        job: Option<&JobRecord>,
        fleet: &mut Fleet,
    ) -> Result<Option<Offer>, store::Error> {
        let Some(job) = job else {
            let error = Some("the job was deleted".to_owned());
            finish_attempt(
                &*self.store,
                &self.observer,
                attempt,
                Ending::Reported(carillon_protocol::Outcome::Cancelled),
                None,
                error,
            )
            .await?;
            return Ok(None);
        };
        let (policy, args, input) = match work_of(job, attempt, input_json) {
            Ok(work) => work,
            Err(unreadable) => {
                // Never delivered under a policy or with arguments it does not have. The
                // ending reads the policy again and names it; other records are named here.
                let error = job.policy().is_ok().then(|| unreadable.to_string());
                self.refuse(attempt, error).await?;
                return Ok(None);
            }
        };
        if let Some(call) = &policy.http {
            let request = self.request_of(job, attempt, policy, (args, input), scheduled_at_ms);
            return Ok(Some(self.http_offer(
                attempt,
                job,
                scheduled_at_ms,
                request,
                policy,
                call,
            )));
        }
        let offering = fleet.offering(job);
        if offering.is_empty() {
            let waited = fleet.now_ms - attempt.not_before_ms.max(attempt.created_at_ms);
            if let Some(message) = fleet.nowhere_to_go(job, waited, self.grace_ms()) {
                if attempt.attempt_no == 1 && attempt.shard_total == 1 && attempt.lost_before == 0 {
                    // A run that is one attempt (most start in their claim) and never found an
                    // executor ends as the start pass ends one: `no_executor`, a dead letter,
                    // not a failure to retry.
                    self.end_run_nowhere(attempt, job.namespace_id, &message)
                        .await?;
                } else {
                    self.refuse(attempt, Some(message)).await?;
                }
            }
            return Ok(None);
        }
        // Secrets go only where they travel safely.
        let offering: Vec<&ExecutorRecord> = if policy.secrets.is_empty() {
            offering
        } else {
            let safe: Vec<&ExecutorRecord> = offering
                .into_iter()
                .filter(|e| carries_secrets(e))
                .collect();
            if safe.is_empty() {
                let error = format!(
                    "the job names secrets, which go only to https:// or loopback executors; \
                     no executor of app {} is one",
                    job.app_name
                );
                self.refuse(attempt, Some(error)).await?;
                return Ok(None);
            }
            safe
        };
        let executors: Vec<&ExecutorRecord> = offering
            .into_iter()
            .filter(|e| fleet.has_room(e) && fleet.free_for(e, job.job_id))
            .collect();
        if executors.is_empty() {
            // Capacity is short, or the XXL-JOB executors are busy with this job: the attempt
            // waits (its timeout counts from its delivery), its priority ageing.
            return Ok(None);
        }
        let candidates: Vec<Candidate<'_>> = executors
            .iter()
            .map(|e| Candidate {
                executor_id: &e.executor_id,
                address: &e.address,
                weight: u32::try_from(e.weight).unwrap_or(1),
                load: u32::try_from(fleet.load.get(&e.executor_id).copied().unwrap_or(0))
                    .unwrap_or(u32::MAX),
                capacity: u32::try_from(e.capacity).unwrap_or(1),
            })
            .collect();
        let group = format!("{}/{}", job.app_name, job.handler_name);
        let key = (job.job_id as u64) ^ (attempt.shard_index as u64).rotate_left(32);
        let mut order = match self.balancers.lock() {
            Ok(mut balancers) => balancers.order(
                policy.balance,
                &group,
                &candidates,
                key,
                attempt.avoid_executor_id.as_deref(),
            ),
            // A panic while planning left it poisoned; its state is only rotation counters.
            Err(poisoned) => poisoned.into_inner().order(
                policy.balance,
                &group,
                &candidates,
                key,
                attempt.avoid_executor_id.as_deref(),
            ),
        };
        // A shard meant for one executor goes there first.
        if let Some(preferred) = attempt.executor_id.as_deref()
            && let Some(pos) = order
                .iter()
                .position(|&i| candidates[i].executor_id == preferred)
        {
            let first = order.remove(pos);
            order.insert(0, first);
        }
        let request = self.request_of(job, attempt, policy, (args, input), scheduled_at_ms);
        let targets: Vec<Target> = order
            .iter()
            .map(|&i| Target {
                executor_id: executors[i].executor_id.clone(),
                address: executors[i].address.clone(),
                xxl: executors[i].is_xxl(),
            })
            .collect();
        let first_takes_batches = order.first().is_some_and(|&i| executors[i].takes_batches());
        if let Some(first) = targets.first() {
            *fleet.load.entry(first.executor_id.clone()).or_default() += 1;
        }
        // The first target is meant to run it: no other attempt of the job is planned there
        // in this pass (should it go on to another, `/idleBeat` asks that one first).
        if let Some(first) = targets.first().filter(|t| t.xxl) {
            fleet
                .xxl_busy
                .insert((first.executor_id.clone(), job.job_id));
        }
        Ok(Some(Offer {
            attempt: attempt.clone(),
            namespace: job.namespace_id,
            scheduled_at_ms,
            request,
            targets,
            first_takes_batches,
            timeout_ms: policy
                .timeout_ms
                .map_or(0, |t| i64::try_from(t).unwrap_or(i64::MAX)),
            policy: policy.clone(),
            http: None,
            refused: None,
        }))
    }

    /// The offer of an HTTP job's attempt: its one target is the job's URL, called by this
    /// node (its secrets are read with the pass's others, `deliver`).
    fn http_offer(
        &self,
        attempt: &AttemptRecord,
        job: &JobRecord,
        scheduled_at_ms: i64,
        request: Dispatch,
        policy: &JobPolicy,
        call: &HttpCall,
    ) -> Offer {
        let executor_id = self
            .http_jobs
            .as_ref()
            .map_or_else(String::new, |h| h.executor_id.clone());
        let timeout = self
            .http_jobs
            .as_ref()
            .map_or(0, |h| super::millis(h.timeout(policy.timeout_ms)));
        Offer {
            attempt: attempt.clone(),
            namespace: job.namespace_id,
            scheduled_at_ms,
            request,
            targets: vec![Target {
                executor_id,
                address: call.url.clone(),
                xxl: false,
            }],
            first_takes_batches: false,
            policy: policy.clone(),
            timeout_ms: timeout,
            http: Some(Box::new(HttpOffer::new(call.clone()))),
            refused: None,
        }
    }

    /// The dispatch of `attempt` (the request an executor is sent, and what an HTTP job's
    /// templates are filled from).
    fn request_of(
        &self,
        job: &JobRecord,
        attempt: &AttemptRecord,
        policy: &JobPolicy,
        (args, input): (Value, Option<Value>),
        scheduled_at_ms: i64,
    ) -> Dispatch {
        Dispatch {
            protocol: PROTOCOL_VERSION,
            run_id: attempt.run_id,
            attempt_id: attempt.attempt_id,
            handle: Some(self.client.handles().of(attempt.attempt_id)),
            attempt: u32::try_from(attempt.attempt_no).unwrap_or(u32::MAX),
            job_id: job.job_id,
            job: job.name.clone(),
            handler: job.handler_name.clone(),
            args,
            shard: Shard {
                index: u32::try_from(attempt.shard_index).unwrap_or(0),
                total: u32::try_from(attempt.shard_total).unwrap_or(1),
            },
            scheduled_at: crate::clock::rfc3339(scheduled_at_ms).unwrap_or_default(),
            timeout_ms: policy.timeout_ms,
            report_to: self.report_to.clone(),
            input,
            effect_key: (policy.delivery == Delivery::ExactlyOnceEffect).then(|| {
                let tries = attempt.attempt_no - attempt.lost_before;
                format!("{}:{}:{tries}", attempt.run_id, attempt.shard_index)
            }),
            traceparent: Some(self.observer.traces.traceparent((
                attempt.run_id,
                attempt.attempt_id,
                0,
            ))),
            // Opened with the pass's other secrets (`open_executor_secrets`).
            secrets: Default::default(),
        }
    }
}

/// What a delivery of `attempt` carries, read from its rows: the job's policy, the attempt's
/// arguments and the run's input; the error names the first that does not read.
fn work_of<'a>(
    job: &'a JobRecord,
    attempt: &AttemptRecord,
    input_json: Option<&str>,
) -> Result<(&'a JobPolicy, Value, Option<Value>), store::Error> {
    let policy = job.policy()?;
    let args = attempt.args()?;
    let input = input_json
        .map(|text| {
            serde_json::from_str(text).map_err(|e| store::Error::Unreadable {
                what: format!("the stored input of run {}", attempt.run_id),
                reason: e.to_string(),
            })
        })
        .transpose()?;
    Ok((policy, args, input))
}
