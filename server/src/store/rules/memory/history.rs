//! The purge's walk and delete over the in-memory tables.

use async_trait::async_trait;

use super::MemoryDb;
use crate::states::RunState;
use crate::store::error::Error;
use crate::store::history_records::{PurgeScope, Purged};
use crate::store::rules::history::{PurgeCandidate, PurgeDriver};

#[async_trait]
impl PurgeDriver for MemoryDb {
    async fn purge_candidates(
        &mut self,
        scope: &PurgeScope,
        window: i64,
    ) -> Result<Vec<PurgeCandidate>, Error> {
        let mut walk: Vec<PurgeCandidate> = self
            .runs
            .iter()
            .filter(|r| {
                r.finished_at_ms
                    .is_some_and(|at| at >= scope.finished_from_ms && at < scope.finished_before_ms)
                    && scope.job_id.is_none_or(|j| r.job_id == j)
                    && scope
                        .scheduled_until_ms
                        .is_none_or(|until| r.scheduled_at_ms <= until)
            })
            .map(|r| PurgeCandidate {
                run_id: r.run_id,
                finished_at_ms: r.finished_at_ms.unwrap_or_default(),
                state: r.state.as_str().to_owned(),
                partition_id: r.partition_id,
                job_keeps_own: self
                    .jobs
                    .get(&r.job_id)
                    .is_some_and(|j| j.history_keep_ms.is_some()),
            })
            .collect();
        walk.sort_by_key(|c| (c.finished_at_ms, c.run_id));
        walk.truncate(usize::try_from(window).unwrap_or(usize::MAX));
        Ok(walk)
    }

    async fn delete_finished_runs(&mut self, run_ids: &[i64]) -> Result<Purged, Error> {
        let gone = |r: &super::MemoryRun| {
            run_ids.contains(&r.run_id)
                && RunState::FINISHED.contains(&r.state)
                && r.finished_at_ms.is_some()
        };
        let deleted: Vec<i64> = self
            .runs
            .iter()
            .filter(|r| gone(r))
            .map(|r| r.run_id)
            .collect();
        self.runs.retain(|r| !deleted.contains(&r.run_id));
        let attempts_before = self.attempts.len();
        self.attempts.retain(|a| !deleted.contains(&a.run_id));
        self.child_runs
            .retain(|l| !deleted.contains(&l.parent_run_id));
        self.workflow_runs.retain(|w| !deleted.contains(&w.run_id));
        self.step_runs
            .retain(|s| !deleted.contains(&s.workflow_run_id));
        Ok(Purged {
            runs: deleted.len() as u64,
            attempts: (attempts_before - self.attempts.len()) as u64,
        })
    }
}
