//! Claiming due instants: a batch per transaction, in lanes of disjoint partitions, and what
//! each claim's outcome does to the scheduler (counters, skips told, jobs loaded again).

use std::sync::Arc;
use std::time::SystemTime;

use tracing::{debug, warn};

use super::{LoadReason, Scheduler};
use crate::observe::{SkipReason, SkippedInstants};
use crate::states::{JobState, RunState};
use crate::store::{self, ClaimOutcome, JobStore, RunClaim};

impl Scheduler {
    /// Claims every instant due by `horizon` (and pending catch-ups), a batch per transaction.
    pub(super) async fn fire_due(&mut self, horizon: i64) -> Result<(), store::Error> {
        loop {
            let mut batch = std::mem::take(&mut self.pending);
            while batch.len() < self.settings.claim_batch {
                let Some(entry) = self.timer.pop_due(horizon) else {
                    break;
                };
                if let Some(claim) = self.due_claim(entry) {
                    batch.push(claim);
                }
            }
            if batch.is_empty() {
                return Ok(());
            }
            let node_id = self.view.node_id().to_owned();
            let mut failure = None;
            let mut claimed = Vec::with_capacity(batch.len());
            let mut outcomes = Vec::with_capacity(batch.len());
            for (lane, result, took) in claim_in_lanes(&self.store.jobs, &node_id, batch).await {
                match result {
                    Ok(lane_outcomes) => {
                        let runs = lane.iter().zip(&lane_outcomes);
                        self.traces.claimed(
                            runs.filter(|(_, o)| **o == ClaimOutcome::Claimed)
                                .map(|(c, _)| (c.job_id, c.scheduled_at_ms)),
                            took,
                        );
                        claimed.extend(lane);
                        outcomes.extend(lane_outcomes);
                    }
                    Err(err) => {
                        // Nothing of this lane was claimed: try it again.
                        self.pending.extend(lane);
                        failure.get_or_insert(err);
                    }
                }
            }
            self.settle(claimed, outcomes).await?;
            if let Some(err) = failure {
                return Err(err);
            }
        }
    }

    async fn settle(
        &mut self,
        batch: Vec<RunClaim>,
        outcomes: Vec<ClaimOutcome>,
    ) -> Result<(), store::Error> {
        if outcomes.contains(&ClaimOutcome::Claimed) {
            self.dispatcher.notify_one();
        }
        let now = self.clock.now_ms();
        let mut reload = Vec::new();
        for (claim, outcome) in batch.iter().zip(outcomes) {
            match outcome {
                ClaimOutcome::Claimed => {
                    self.metrics.claims.add("claimed", 1);
                    self.metrics
                        .fires
                        .add(claim.namespace_id.0, claim.trigger_kind.as_str(), 1);
                }
                ClaimOutcome::Skipped => {
                    // A skipped run is a claimed run, as it always counted.
                    self.metrics.claims.add("claimed", 1);
                    self.metrics
                        .fires
                        .add(claim.namespace_id.0, claim.trigger_kind.as_str(), 1);
                    // The claim's own skip is a calendar's; else the overlap rule's.
                    let (reason, detail) = match claim.state {
                        RunState::Skipped => (SkipReason::Calendar, claim.message.clone()),
                        _ => (SkipReason::Overlap, None),
                    };
                    let skipped = SkippedInstants::one(reason, claim.scheduled_at_ms, detail);
                    self.skips
                        .note(claim.job_id, claim.namespace_id, skipped, now);
                }
                ClaimOutcome::Fenced => {
                    self.metrics.claims.add("fenced", 1);
                    warn!(
                        partition = claim.partition_id,
                        "partition moved; its claims refused"
                    );
                    self.forget_partition(claim.partition_id);
                }
                ClaimOutcome::Stale => {
                    self.metrics.claims.add("stale", 1);
                    reload.push(claim.job_id);
                }
            }
        }
        reload.sort_unstable();
        reload.dedup();
        for job_id in reload {
            self.jobs.remove(&job_id);
            match self.store.jobs.job_get(job_id).await? {
                Some(job)
                    if job.state == JobState::Running
                        && self.partitions.contains_key(&job.partition_id) =>
                {
                    self.load(job.into(), now, LoadReason::Edit);
                }
                _ => debug!(job_id, "job stopped, changed hands or was deleted"),
            }
        }
        Ok(())
    }
}

/// Claim transactions of one batch in flight at once. A claim locks its partitions' rows, so
/// lanes take disjoint partitions and never wait for each other; together they keep both the
/// node and the database busy instead of one transaction's round trips.
const CLAIM_LANES: i64 = 4;

/// A lane's claims, what became of them, and when its transaction began and ended.
type LaneClaimed = (
    Vec<RunClaim>,
    Result<Vec<ClaimOutcome>, store::Error>,
    (SystemTime, SystemTime),
);

/// Claims `batch` in up to [`CLAIM_LANES`] concurrent transactions, by partition; returns each
/// lane's claims with what became of them.
async fn claim_in_lanes(
    store: &Arc<dyn JobStore>,
    node_id: &str,
    batch: Vec<RunClaim>,
) -> Vec<LaneClaimed> {
    let mut lanes: Vec<Vec<RunClaim>> = (0..CLAIM_LANES).map(|_| Vec::new()).collect();
    for claim in batch {
        let lane = usize::try_from(claim.partition_id.rem_euclid(CLAIM_LANES)).unwrap_or(0);
        lanes[lane].push(claim);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for lane in lanes.into_iter().filter(|l| !l.is_empty()) {
        let store = Arc::clone(store);
        let node_id = node_id.to_owned();
        tasks.spawn(async move {
            let began = SystemTime::now();
            let result = store.runs_claim(&node_id, &lane).await;
            (lane, result, (began, SystemTime::now()))
        });
    }
    let mut done = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(lane) => done.push(lane),
            // Only a bug panics here; the lane's instants are then not claimed until its jobs
            // are loaded again (a change, a takeover, a restart: the misfire policy applies).
            Err(err) => warn!(error = %err, "a claim task panicked"),
        }
    }
    done
}
