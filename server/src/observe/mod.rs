//! What a node tells its operators about its work: counters for `/metrics`
//! ([`NodeMetrics`]), alerts to webhooks ([`alerts`]) and OTLP traces ([`traces`]). The
//! [`Observer`] is the one handle
//! the dispatcher, `finish_attempt` and the API report run endings and dispatches to (the
//! scheduler counts its claims into [`NodeMetrics`] directly); reporting never waits on I/O.

pub mod alerts;
pub mod failure_pause;
pub mod metrics;
pub mod prometheus;
pub mod skips;
pub mod traces;

use std::sync::Arc;

pub use alerts::{AlertEvent, AlertSettings, AlertWorker, Alerter, SkipReason, SkippedInstants};
pub use failure_pause::{FailedJobs, FailurePauser};
pub use metrics::NodeMetrics;
pub use skips::SkipNotices;
pub use traces::Traces;

use crate::jobs::JobPolicy;
use crate::states::RunState;
use crate::store::{AttemptEnded, NamespaceId};

/// What a run is counted under when its namespace is not known (its job was deleted).
pub const UNKNOWN_NAMESPACE: NamespaceId = NamespaceId(0);

/// Where the node's work is reported.
#[derive(Debug, Clone)]
pub struct Observer {
    pub metrics: Arc<NodeMetrics>,
    alerter: Alerter,
    /// The node's late-fire threshold; 0: none (a job's own still applies).
    late_after_ms: u64,
    /// Jobs with a run that failed for good, for `pause_after_failures`.
    failed_jobs: Arc<FailedJobs>,
    /// The fire path's spans, and the ids dispatches and logs carry.
    pub traces: Traces,
}

impl Observer {
    pub fn new(
        metrics: Arc<NodeMetrics>,
        alerter: Alerter,
        late_after_ms: u64,
        failed_jobs: Arc<FailedJobs>,
        traces: Traces,
    ) -> Self {
        Self {
            metrics,
            alerter,
            late_after_ms,
            failed_jobs,
            traces,
        }
    }

    /// What ending an attempt did to its run (of `job_id`, in `namespace` when known): a retry
    /// queued, or the run ended.
    pub fn attempt_ended(
        &self,
        ended: &AttemptEnded,
        run_id: i64,
        job_id: i64,
        namespace: Option<NamespaceId>,
        error: Option<&str>,
    ) {
        match ended {
            AttemptEnded::Retrying => self.metrics.retries.add(1),
            AttemptEnded::RunEnded(state) => {
                self.run_ended(run_id, job_id, namespace, *state, error);
            }
            AttemptEnded::AlreadyEnded | AttemptEnded::RunContinues => {}
        }
    }

    /// A run of `job_id` (in `namespace` when known) ended in `state`; one that failed for
    /// good is a dead letter and an alert.
    pub fn run_ended(
        &self,
        run_id: i64,
        job_id: i64,
        namespace: Option<NamespaceId>,
        state: RunState,
        error: Option<&str>,
    ) {
        let namespace = namespace.unwrap_or(UNKNOWN_NAMESPACE).0;
        self.metrics.runs_finished.add(namespace, state.as_str(), 1);
        if state == RunState::Failed || state == RunState::NoExecutor {
            self.metrics.dead_letters.add(namespace, "", 1);
            self.failed_jobs.note(job_id);
            tracing::info!(
                run_id,
                job_id,
                state = state.as_str(),
                error,
                trace_id = self.traces.trace_id(run_id),
                "run failed for good"
            );
            self.alerter.raise(AlertEvent::RunFailed {
                run_id,
                job_id,
                state: state.as_str().to_owned(),
                error: error.map(str::to_owned),
            });
        }
    }

    /// A workflow run ended in `state`: counted as a workflow run and as a run (alerts, and
    /// pausing after failures, as for a job's run).
    pub fn workflow_run_ended(
        &self,
        run_id: i64,
        workflow_id: i64,
        namespace: Option<NamespaceId>,
        state: RunState,
    ) {
        self.metrics.workflow_runs_finished.add(state.as_str(), 1);
        let message = (state != RunState::Succeeded).then_some("a step failed or was cancelled");
        self.run_ended(run_id, workflow_id, namespace, state, message);
    }

    /// `count` runs of `namespace` ended `succeeded` at once.
    pub fn runs_succeeded(&self, namespace: NamespaceId, count: u64) {
        self.metrics
            .runs_finished
            .add(namespace.0, RunState::Succeeded.as_str(), count);
    }

    /// A run's first attempt was sent at `sent_ms` (cluster clock) and taken: its lateness,
    /// and an alert when that passes the job's threshold (or the node's).
    pub fn first_dispatch(
        &self,
        run_id: i64,
        job_id: i64,
        scheduled_at_ms: i64,
        sent_ms: i64,
        policy: &JobPolicy,
    ) {
        let lateness_ms = (sent_ms - scheduled_at_ms).max(0);
        self.metrics.lateness.observe_ms(lateness_ms);
        // Late for the job's webhook (its threshold, or else the node's) or for the node's;
        // the worker sends it only to the webhooks whose threshold it passed.
        let job_threshold = policy
            .alerts
            .as_ref()
            .and_then(|a| a.late_after_ms)
            .unwrap_or(self.late_after_ms);
        let late = u64::try_from(lateness_ms).unwrap_or(0);
        let past = |threshold: u64| threshold > 0 && late > threshold;
        if past(job_threshold) || past(self.late_after_ms) {
            tracing::info!(
                run_id,
                job_id,
                lateness_ms,
                trace_id = self.traces.trace_id(run_id),
                "run fired late"
            );
            self.alerter.raise(AlertEvent::FiredLate {
                run_id,
                job_id,
                scheduled_at_ms,
                lateness_ms,
            });
        }
    }
}
