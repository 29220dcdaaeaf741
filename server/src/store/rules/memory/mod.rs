//! The rules' transaction traits over plain maps, for unit tests of the rules without a
//! database. It keeps what the SQL drivers' constraints keep: one run per (job, instant), and
//! guarded updates that change only rows in the states they name. A test is one transaction.

pub(super) mod backfill;
pub(super) mod cluster;
mod dispatch;
pub(super) mod flow;
mod history;
mod logs;
mod namespaces;
pub(super) mod tasks;
pub(super) mod workflows;

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;

use crate::states::{AttemptState, JobState, RunState, TriggerKind};
use crate::store::dispatch_records::{AttemptEnd, AttemptRecord};
use crate::store::error::Error;
use crate::store::job_records::RunClaim;
use crate::store::namespace_records::NamespaceId;
use crate::store::rules::attempt_end::{EndingTx, RetryAttempt, RunEnding};
use crate::store::rules::claim::{
    ClaimJob, ClaimTx, ClaimedRun, FirstAttempt, FirstAttemptTx, JobAdvance, StartedRun,
};
use crate::store::rules::fence::{FenceTx, PartitionLease};
use crate::store::rules::follow_ups::{
    ChildRunLink, FollowUpJob, FollowUpRow, FollowUpTx, ParentJob,
};
use crate::store::task_records::TaskRecord;
use crate::store::workflow_records::{StepRunRecord, WorkflowRunRecord};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryJob {
    pub(crate) name: String,
    pub(crate) partition_id: i64,
    pub(crate) namespace_id: NamespaceId,
    pub(crate) policy_json: String,
    pub(crate) version: i64,
    pub(crate) state: JobState,
    pub(crate) last_fired_at_ms: Option<i64>,
    pub(crate) fired_count: i64,
    pub(crate) args_json: String,
    /// It is a workflow (`JobKind::Workflow`).
    pub(crate) workflow: bool,
    /// It keeps its history for a time of its own (`history_keep_ms`).
    pub(crate) history_keep_ms: Option<i64>,
}

impl Default for MemoryJob {
    fn default() -> Self {
        MemoryJob {
            name: String::new(),
            partition_id: 0,
            namespace_id: NamespaceId::DEFAULT,
            policy_json: String::new(),
            version: 0,
            state: JobState::Stopped,
            last_fired_at_ms: None,
            fired_count: 0,
            args_json: String::new(),
            workflow: false,
            history_keep_ms: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryRun {
    pub(crate) run_id: i64,
    pub(crate) job_id: i64,
    pub(crate) scheduled_at_ms: i64,
    pub(crate) partition_id: i64,
    pub(crate) epoch: i64,
    pub(crate) node_id: String,
    pub(crate) trigger_kind: TriggerKind,
    pub(crate) state: RunState,
    pub(crate) priority: i64,
    pub(crate) message: Option<String>,
    pub(crate) namespace_id: NamespaceId,
    pub(crate) started: bool,
    /// When it ended (the database's clock).
    pub(crate) finished_at_ms: Option<i64>,
    pub(crate) input: Option<String>,
}

/// A new attempt's row, as the SQL drivers insert it (`pending`).
pub(crate) fn attempt_row(
    attempt_id: i64,
    run_id: i64,
    job_id: i64,
    shard: (i64, i64),
    attempt_no: i64,
) -> AttemptRecord {
    AttemptRecord {
        attempt_id,
        run_id,
        job_id,
        partition_id: 0,
        shard_index: shard.0,
        shard_total: shard.1,
        attempt_no,
        priority: 5,
        args_json: "null".to_owned(),
        state: AttemptState::Pending,
        created_at_ms: 0,
        not_before_ms: 0,
        avoid_executor_id: None,
        executor_id: None,
        dispatched_at_ms: None,
        deadline_ms: None,
        finished_at_ms: None,
        output: None,
        error: None,
        lost_before: 0,
    }
}

/// The tables the rules touch.
#[derive(Debug, Clone, Default)]
pub(crate) struct MemoryDb {
    /// What `ClaimTx::starts_in_claim` answers (false: as on MySQL).
    pub(crate) starts_in_claim: bool,
    /// Owner and epoch by partition.
    pub(crate) partitions: BTreeMap<i64, (Option<String>, i64)>,
    /// The node a partition is to be handed to, by partition.
    pub(crate) pending_owners: BTreeMap<i64, String>,
    pub(crate) leader: cluster::MemoryLeader,
    pub(crate) nodes: BTreeMap<String, cluster::MemoryNode>,
    pub(crate) jobs: BTreeMap<i64, MemoryJob>,
    pub(crate) runs: Vec<MemoryRun>,
    pub(crate) attempts: Vec<AttemptRecord>,
    pub(crate) child_runs: Vec<ChildRunLink>,
    /// Stored definitions, by workflow.
    pub(crate) workflow_definitions: BTreeMap<i64, String>,
    pub(crate) workflow_runs: Vec<WorkflowRunRecord>,
    pub(crate) step_runs: Vec<StepRunRecord>,
    pub(crate) tasks: Vec<TaskRecord>,
    pub(crate) backfills: BTreeMap<i64, backfill::MemoryBackfill>,
    pub(crate) logs: Vec<crate::store::rules::logs::LogRow>,
    pub(crate) namespaces: BTreeSet<NamespaceId>,
    pub(crate) flow: flow::MemoryFlow,
    /// The database's clock.
    pub(crate) now_ms: i64,
}

impl MemoryDb {
    pub(crate) fn job(&self, job_id: i64) -> &MemoryJob {
        &self.jobs[&job_id]
    }

    pub(crate) fn runs_of(&self, job_id: i64) -> Vec<&MemoryRun> {
        self.runs.iter().filter(|r| r.job_id == job_id).collect()
    }

    fn next_attempt_id(&self) -> i64 {
        self.attempts
            .iter()
            .map(|a| a.attempt_id)
            .max()
            .unwrap_or(0)
            + 1
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
        state: RunState,
        message: Option<&str>,
        started: bool,
    ) -> Option<i64> {
        self.insert_unique(MemoryRun {
            run_id: 0,
            job_id: claim.job_id,
            scheduled_at_ms: claim.scheduled_at_ms,
            partition_id: claim.partition_id,
            epoch: claim.epoch,
            node_id: node_id.to_owned(),
            trigger_kind: claim.trigger_kind,
            state,
            priority: claim.priority,
            message: message.map(str::to_owned),
            namespace_id: claim.namespace_id,
            started,
            finished_at_ms: (!RunState::UNFINISHED.contains(&state)).then_some(self.now_ms),
            input: None,
        })
    }

    /// Inserts `run` under a new id unless its job has a run at its instant (the runs' unique
    /// key, which every SQL insert of a run respects); its id if inserted.
    fn insert_unique(&mut self, mut run: MemoryRun) -> Option<i64> {
        if self.holds_instant(run.job_id, run.scheduled_at_ms) {
            return None;
        }
        run.run_id = self.runs.iter().map(|r| r.run_id).max().unwrap_or(0) + 1;
        let run_id = run.run_id;
        self.runs.push(run);
        Some(run_id)
    }
}

#[async_trait]
impl FenceTx for MemoryDb {
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
}

#[async_trait]
impl FirstAttemptTx for MemoryDb {
    async fn insert_first_attempts(&mut self, attempts: &[FirstAttempt<'_>]) -> Result<(), Error> {
        for a in attempts {
            let id = self.next_attempt_id();
            self.attempts.push(AttemptRecord {
                partition_id: a.partition_id,
                priority: a.priority,
                args_json: a.args_json.to_owned(),
                not_before_ms: a.not_before_ms,
                executor_id: a.executor_id.map(str::to_owned),
                ..attempt_row(id, a.run_id, a.job_id, (a.shard_index, a.shard_total), 1)
            });
        }
        Ok(())
    }
}

#[async_trait]
impl ClaimTx for MemoryDb {
    fn starts_in_claim(&self) -> bool {
        self.starts_in_claim
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
                    state: job.state,
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
                    job.state = JobState::Done;
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

    async fn advance_job_if_current(&mut self, claim: &RunClaim) -> Result<bool, Error> {
        let Some(job) = self.jobs.get_mut(&claim.job_id) else {
            return Ok(false);
        };
        let current = job.version == claim.job_version
            && job.state == JobState::Running
            && job
                .last_fired_at_ms
                .is_none_or(|l| l < claim.scheduled_at_ms);
        if current {
            job.last_fired_at_ms = Some(claim.scheduled_at_ms);
            job.fired_count += i64::from(claim.counts_as_fired());
            if claim.job_done {
                job.state = JobState::Done;
            }
        }
        Ok(current)
    }

    async fn unfinished_run_of_job(&mut self, job_id: i64) -> Result<Option<i64>, Error> {
        Ok(self
            .runs
            .iter()
            .filter(|r| r.job_id == job_id && RunState::UNFINISHED.contains(&r.state))
            .map(|r| r.run_id)
            .min())
    }

    async fn cancel_unfinished_of_job(
        &mut self,
        job_id: i64,
        partition_id: i64,
        why: &str,
    ) -> Result<(), Error> {
        let now = self.now_ms;
        for run in &mut self.runs {
            if run.job_id == job_id && RunState::UNFINISHED.contains(&run.state) {
                run.state = RunState::Cancelled;
                run.finished_at_ms = Some(now);
                run.message = Some(why.to_owned());
            }
        }
        for attempt in &mut self.attempts {
            if attempt.job_id == job_id
                && attempt.partition_id == partition_id
                && matches!(attempt.state.as_str(), "pending" | "running")
            {
                attempt.state = AttemptState::Cancelled;
                attempt.error = Some(why.to_owned());
            }
        }
        Ok(())
    }

    async fn insert_run(
        &mut self,
        node_id: &str,
        claim: &RunClaim,
        state: RunState,
        message: Option<&str>,
    ) -> Result<(), Error> {
        self.insert_run_row(node_id, claim, state, message, false);
        Ok(())
    }
}

/// Whether an attempt or a run in `state` is still live (a guarded update may end it).
#[async_trait]
impl EndingTx for MemoryDb {
    async fn lock_attempt(&mut self, attempt_id: i64) -> Result<Option<AttemptRecord>, Error> {
        Ok(self
            .attempts
            .iter()
            .find(|a| a.attempt_id == attempt_id)
            .cloned())
    }

    async fn end_attempt(&mut self, attempt_id: i64, end: &AttemptEnd) -> Result<bool, Error> {
        let Some(attempt) = self
            .attempts
            .iter_mut()
            .find(|a| a.attempt_id == attempt_id && a.state.is_live())
        else {
            return Ok(false);
        };
        attempt.state = end.state.to_owned();
        attempt.output.clone_from(&end.output);
        attempt.error.clone_from(&end.error);
        if end.executor_id.is_some() {
            attempt.executor_id.clone_from(&end.executor_id);
        }
        Ok(true)
    }

    async fn insert_retry(&mut self, retry: &RetryAttempt<'_>) -> Result<(), Error> {
        let after = retry.after;
        let id = self.next_attempt_id();
        self.attempts.push(AttemptRecord {
            partition_id: after.partition_id,
            priority: after.priority,
            args_json: after.args_json.clone(),
            not_before_ms: retry.delay_ms,
            avoid_executor_id: retry.avoid_executor_id.map(str::to_owned),
            executor_id: retry.executor_id.map(str::to_owned),
            lost_before: retry.lost_before,
            ..attempt_row(
                id,
                after.run_id,
                after.job_id,
                (after.shard_index, after.shard_total),
                after.attempt_no + 1,
            )
        });
        Ok(())
    }

    async fn lock_run_for_ending(&mut self, run_id: i64) -> Result<Option<RunEnding>, Error> {
        Ok(self
            .runs
            .iter()
            .find(|r| r.run_id == run_id)
            .map(|r| RunEnding {
                node_id: r.node_id.clone(),
                has_input: r.input.is_some(),
                flow_key: self.flow.run_keys.get(&r.run_id).cloned(),
            }))
    }

    async fn attempts_of_run(&mut self, run_id: i64) -> Result<Vec<AttemptRecord>, Error> {
        let mut attempts: Vec<AttemptRecord> = self
            .attempts
            .iter()
            .filter(|a| a.run_id == run_id)
            .cloned()
            .collect();
        attempts.sort_by_key(|a| (a.shard_index, a.attempt_no));
        Ok(attempts)
    }

    async fn end_run(
        &mut self,
        run_id: i64,
        state: RunState,
        message: Option<&str>,
    ) -> Result<bool, Error> {
        let now = self.now_ms;
        let Some(run) = self
            .runs
            .iter_mut()
            .find(|r| r.run_id == run_id && RunState::UNFINISHED.contains(&r.state))
        else {
            return Ok(false);
        };
        run.state = state;
        run.message = message.map(str::to_owned);
        run.finished_at_ms = Some(now);
        Ok(true)
    }

    async fn release_next_queued(&mut self, job_id: i64) -> Result<(), Error> {
        if let Some(next) = self
            .runs
            .iter_mut()
            .filter(|r| r.job_id == job_id && r.state == RunState::Queued)
            .min_by_key(|r| r.run_id)
        {
            next.state = RunState::Pending;
        }
        Ok(())
    }
}

#[async_trait]
impl FollowUpTx for MemoryDb {
    async fn parents_with_children(&mut self, job_ids: &[i64]) -> Result<Vec<ParentJob>, Error> {
        Ok(job_ids
            .iter()
            .filter_map(|id| {
                let job = self.jobs.get(id)?;
                job.policy_json.contains("\"children\"").then(|| ParentJob {
                    job_id: *id,
                    name: job.name.clone(),
                    policy_json: job.policy_json.clone(),
                })
            })
            .collect())
    }

    async fn lock_follow_up_jobs(&mut self, job_ids: &[i64]) -> Result<Vec<FollowUpJob>, Error> {
        Ok(job_ids
            .iter()
            .filter_map(|id| {
                self.jobs.get(id).map(|job| FollowUpJob {
                    job_id: *id,
                    partition_id: job.partition_id,
                    namespace_id: job.namespace_id,
                    policy_json: job.policy_json.clone(),
                    args_json: job.args_json.clone(),
                })
            })
            .collect())
    }

    async fn now_ms(&mut self) -> Result<i64, Error> {
        Ok(self.now_ms)
    }

    async fn insert_follow_up_run(&mut self, row: &FollowUpRow<'_>) -> Result<Option<i64>, Error> {
        let run = row.run;
        Ok(self.insert_unique(MemoryRun {
            run_id: 0,
            job_id: run.job_id,
            scheduled_at_ms: row.scheduled_at_ms,
            partition_id: run.partition_id,
            epoch: 0,
            node_id: run.node_id.to_owned(),
            trigger_kind: run.trigger_kind,
            state: row.state,
            priority: row.priority,
            message: None,
            namespace_id: run.namespace_id,
            started: row.state == RunState::Running,
            finished_at_ms: None,
            input: Some(run.input.to_owned()),
        }))
    }

    async fn record_child_runs(&mut self, links: &[ChildRunLink]) -> Result<(), Error> {
        self.child_runs.extend_from_slice(links);
        Ok(())
    }
}
