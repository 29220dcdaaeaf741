//! The rules' transaction traits over plain maps, for unit tests of the rules without a
//! database. It keeps what the SQL drivers' constraints keep: one run per (job, instant), and
//! guarded updates that change only rows in the states they name. A test is one transaction.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::super::error::Error;
use super::super::job_records::{RunClaim, job_state, run_state};
use super::claim::{
    ClaimJob, ClaimTx, ClaimedRun, FirstAttempt, JobAdvance, PartitionLease, StartedRun,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryJob {
    pub(crate) version: i64,
    pub(crate) state: String,
    pub(crate) last_fired_at_ms: Option<i64>,
    pub(crate) fired_count: i64,
    pub(crate) args_json: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryRun {
    pub(crate) run_id: i64,
    pub(crate) job_id: i64,
    pub(crate) scheduled_at_ms: i64,
    pub(crate) partition_id: i64,
    pub(crate) epoch: i64,
    pub(crate) node_id: String,
    pub(crate) trigger_kind: String,
    pub(crate) state: String,
    pub(crate) priority: i64,
    pub(crate) message: Option<String>,
    pub(crate) started: bool,
    pub(crate) finished: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryAttempt {
    pub(crate) run_id: i64,
    pub(crate) job_id: i64,
    pub(crate) partition_id: i64,
    pub(crate) shard_index: i64,
    pub(crate) shard_total: i64,
    pub(crate) args_json: String,
    pub(crate) state: String,
    pub(crate) not_before_ms: i64,
    pub(crate) error: Option<String>,
}

/// The tables the rules touch.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryDb {
    /// What `ClaimTx::starts_in_claim` answers (false: as on MySQL).
    pub(crate) starts_in_claim: bool,
    /// Owner and epoch by partition.
    pub(crate) partitions: BTreeMap<i64, (Option<String>, i64)>,
    pub(crate) jobs: BTreeMap<i64, MemoryJob>,
    pub(crate) runs: Vec<MemoryRun>,
    pub(crate) attempts: Vec<MemoryAttempt>,
}

impl MemoryDb {
    pub(crate) fn job(&self, job_id: i64) -> &MemoryJob {
        &self.jobs[&job_id]
    }

    pub(crate) fn runs_of(&self, job_id: i64) -> Vec<&MemoryRun> {
        self.runs.iter().filter(|r| r.job_id == job_id).collect()
    }

    fn holds_instant(&self, job_id: i64, at_ms: i64) -> bool {
        self.runs
            .iter()
            .any(|r| r.job_id == job_id && r.scheduled_at_ms == at_ms)
    }

    /// Inserts a run unless one holds its instant (the unique key); its id if inserted.
    fn insert_run_row(
        &mut self,
        node_id: &str,
        claim: &RunClaim,
        state: &str,
        message: Option<&str>,
        started: bool,
    ) -> Option<i64> {
        if self.holds_instant(claim.job_id, claim.scheduled_at_ms) {
            return None;
        }
        let run_id = self.runs.iter().map(|r| r.run_id).max().unwrap_or(0) + 1;
        self.runs.push(MemoryRun {
            run_id,
            job_id: claim.job_id,
            scheduled_at_ms: claim.scheduled_at_ms,
            partition_id: claim.partition_id,
            epoch: claim.epoch,
            node_id: node_id.to_owned(),
            trigger_kind: claim.trigger_kind.to_owned(),
            state: state.to_owned(),
            priority: claim.priority,
            message: message.map(str::to_owned),
            started,
            finished: !run_state::UNFINISHED.contains(&state),
        });
        Some(run_id)
    }
}

#[async_trait]
impl ClaimTx for MemoryDb {
    fn starts_in_claim(&self) -> bool {
        self.starts_in_claim
    }

    async fn lock_partitions(
        &mut self,
        partition_ids: &[i64],
    ) -> Result<Vec<PartitionLease>, Error> {
        Ok(partition_ids
            .iter()
            .filter_map(|id| {
                self.partitions
                    .get(id)
                    .map(|(owner, epoch)| PartitionLease {
                        partition_id: *id,
                        owner_node_id: owner.clone(),
                        epoch: *epoch,
                    })
            })
            .collect())
    }

    async fn lock_jobs(
        &mut self,
        job_ids: &[i64],
        with_args: bool,
    ) -> Result<Vec<ClaimJob>, Error> {
        Ok(job_ids
            .iter()
            .filter_map(|id| {
                self.jobs.get(id).map(|job| ClaimJob {
                    job_id: *id,
                    version: job.version,
                    state: job.state.clone(),
                    last_fired_at_ms: job.last_fired_at_ms,
                    args_json: with_args.then(|| job.args_json.clone()),
                })
            })
            .collect())
    }

    async fn advance_jobs(&mut self, rows: &[JobAdvance]) -> Result<(), Error> {
        for row in rows {
            if let Some(job) = self.jobs.get_mut(&row.job_id) {
                job.last_fired_at_ms = Some(row.at_ms);
                job.fired_count += row.fired;
                if row.done {
                    job.state = job_state::DONE.to_owned();
                }
            }
        }
        Ok(())
    }

    async fn insert_claimed_runs(
        &mut self,
        node_id: &str,
        runs: &[ClaimedRun<'_>],
    ) -> Result<Vec<StartedRun>, Error> {
        let mut started = Vec::new();
        for run in runs {
            let inserted = self.insert_run_row(
                node_id,
                run.claim,
                run.state(),
                run.claim.message.as_deref(),
                run.starts,
            );
            if let Some(run_id) = inserted.filter(|_| run.starts) {
                started.push(StartedRun {
                    run_id,
                    job_id: run.claim.job_id,
                    partition_id: run.claim.partition_id,
                    priority: run.claim.priority,
                    scheduled_at_ms: run.claim.scheduled_at_ms,
                });
            }
        }
        Ok(started)
    }

    async fn insert_first_attempts(&mut self, attempts: &[FirstAttempt<'_>]) -> Result<(), Error> {
        self.attempts.extend(attempts.iter().map(|a| MemoryAttempt {
            run_id: a.run_id,
            job_id: a.job_id,
            partition_id: a.partition_id,
            shard_index: a.shard_index,
            shard_total: a.shard_total,
            args_json: a.args_json.to_owned(),
            state: "pending".to_owned(),
            not_before_ms: a.not_before_ms,
            error: None,
        }));
        Ok(())
    }

    async fn advance_job_if_current(&mut self, claim: &RunClaim) -> Result<bool, Error> {
        let Some(job) = self.jobs.get_mut(&claim.job_id) else {
            return Ok(false);
        };
        let current = job.version == claim.job_version
            && job.state == job_state::RUNNING
            && job
                .last_fired_at_ms
                .is_none_or(|l| l < claim.scheduled_at_ms);
        if current {
            job.last_fired_at_ms = Some(claim.scheduled_at_ms);
            job.fired_count += i64::from(claim.counts_as_fired());
            if claim.job_done {
                job.state = job_state::DONE.to_owned();
            }
        }
        Ok(current)
    }

    async fn unfinished_run_of_job(&mut self, job_id: i64) -> Result<Option<i64>, Error> {
        Ok(self
            .runs
            .iter()
            .filter(|r| r.job_id == job_id && run_state::UNFINISHED.contains(&r.state.as_str()))
            .map(|r| r.run_id)
            .min())
    }

    async fn cancel_unfinished_of_job(
        &mut self,
        job_id: i64,
        partition_id: i64,
        why: &str,
    ) -> Result<(), Error> {
        for run in &mut self.runs {
            if run.job_id == job_id && run_state::UNFINISHED.contains(&run.state.as_str()) {
                run.state = run_state::CANCELLED.to_owned();
                run.finished = true;
                run.message = Some(why.to_owned());
            }
        }
        for attempt in &mut self.attempts {
            if attempt.job_id == job_id
                && attempt.partition_id == partition_id
                && matches!(attempt.state.as_str(), "pending" | "running")
            {
                attempt.state = "cancelled".to_owned();
                attempt.error = Some(why.to_owned());
            }
        }
        Ok(())
    }

    async fn insert_run(
        &mut self,
        node_id: &str,
        claim: &RunClaim,
        state: &'static str,
        message: Option<&str>,
    ) -> Result<(), Error> {
        self.insert_run_row(node_id, claim, state, message, false);
        Ok(())
    }
}
