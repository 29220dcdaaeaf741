//! Stage two of a fire (after the scheduler's claim): a pending run gets its first attempts,
//! one per shard, in one transaction with the run's move to `running`. A run that cannot
//! start ends here: its job was deleted, or no executor of its handler appeared in time.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use tracing::{debug, warn};

use super::Dispatcher;
use super::fleet::Fleet;
use super::flow::FlowPlace;
use super::sharding::first_attempts;
use crate::jobs::jitter_delay_ms;
use crate::observe::traces::StartedRun;
use crate::states::RunState;
use crate::store::{self, JobRecord, NewAttempt, RunRecord};

/// A start pass slower than this is logged with where its time went.
const SLOW_PASS: std::time::Duration = std::time::Duration::from_millis(1_000);

impl Dispatcher {
    /// Starts a slice of pending runs: one attempt per shard, all in one transaction.
    /// Returns how many started.
    pub(super) async fn start_pass(&self) -> Result<usize, store::Error> {
        let partitions = self.owned_partitions();
        if partitions.is_empty() {
            return Ok(0);
        }
        let began = std::time::Instant::now();
        let began_at = std::time::SystemTime::now();
        let cursor = self.runs_cursor.load(Ordering::Relaxed);
        let pending = self
            .store
            .runs_pending(&partitions, cursor, self.settings.batch)
            .await?;
        self.runs_cursor.store(
            next_cursor(&pending, self.settings.batch, |r| r.run_id),
            Ordering::Relaxed,
        );
        if pending.is_empty() {
            return Ok(0);
        }
        let read = began.elapsed();
        let fleet = self.fleet(false).await?;
        let mut jobs: HashMap<i64, Option<JobRecord>> = HashMap::new();
        self.prefetch_jobs(&mut jobs, pending.iter().map(|r| r.job_id))
            .await?;
        let prepared = began.elapsed();
        let pending_count = pending.len();
        let pending = self.flow_gate(pending, &jobs).await?;
        let mut starting = Vec::new();
        let mut workflows = Vec::new();
        for run in pending {
            let job = jobs.get(&run.job_id).and_then(Option::as_ref);
            // A workflow's run starts its steps, each a run of its own.
            if let Some(workflow) = job.filter(|j| j.is_workflow()) {
                workflows.push((run, workflow.args_json.clone()));
                continue;
            }
            if let Some(attempts) = self.start_run(&run, job, &fleet).await? {
                starting.push((run, attempts));
            }
        }
        let workflows_started = if workflows.is_empty() {
            0
        } else {
            self.store.workflow_runs_start(&workflows).await?
        };
        if starting.is_empty() {
            return Ok(workflows_started);
        }
        let planned = began.elapsed();
        let started = self.store.runs_start(&starting).await?;
        let took = began.elapsed();
        if self.observer.traces.exporting() {
            let runs: Vec<StartedRun> = starting
                .iter()
                .map(|(run, attempts)| StartedRun {
                    run_id: run.run_id,
                    job_id: run.job_id,
                    shards: attempts.len(),
                })
                .collect();
            self.observer
                .traces
                .started(&runs, (began_at, std::time::SystemTime::now()));
        }
        if took > SLOW_PASS {
            warn!(
                ?took,
                ?read,
                ?prepared,
                ?planned,
                pending = pending_count,
                started,
                "slow start pass"
            );
        }
        debug!(started, workflows_started, "runs started");
        Ok(started + workflows_started)
    }

    /// The runs of `pending` free to start: those without flow control, those already
    /// admitted under their key, and those put in line now that their key admits at once.
    /// A run whose key its arguments do not give fails, saying why.
    async fn flow_gate(
        &self,
        pending: Vec<RunRecord>,
        jobs: &HashMap<i64, Option<JobRecord>>,
    ) -> Result<Vec<RunRecord>, store::Error> {
        let mut free = Vec::with_capacity(pending.len());
        let mut lining = Vec::new();
        for run in pending {
            let Some(job) = jobs.get(&run.job_id).and_then(Option::as_ref) else {
                free.push(run);
                continue;
            };
            match Self::flow_place(&run, job) {
                Ok(FlowPlace::Free) => free.push(run),
                Ok(FlowPlace::InLine(line)) => lining.push((run, line)),
                Err(why) => self.end_unstartable(&run, &why).await?,
            }
        }
        free.extend(self.put_in_line(lining).await?);
        Ok(free)
    }

    /// Fails a run that cannot start, naming why.
    async fn end_unstartable(&self, run: &RunRecord, message: &str) -> Result<(), store::Error> {
        if self
            .store
            .run_end(run.run_id, RunState::Failed, Some(message))
            .await?
        {
            self.observer.run_ended(
                run.run_id,
                run.job_id,
                Some(run.namespace_id),
                RunState::Failed,
                Some(message),
            );
        }
        Ok(())
    }

    /// The first attempts of a pending run (one per shard), to be stored; `None` when the run
    /// cannot start now (it waits for an executor, or was ended here).
    async fn start_run(
        &self,
        run: &RunRecord,
        job: Option<&JobRecord>,
        fleet: &Fleet,
    ) -> Result<Option<Vec<NewAttempt>>, store::Error> {
        let Some(job) = job else {
            let message = "the job was deleted";
            if self
                .store
                .run_end(run.run_id, RunState::Cancelled, Some(message))
                .await?
            {
                self.observer.run_ended(
                    run.run_id,
                    run.job_id,
                    Some(run.namespace_id),
                    RunState::Cancelled,
                    Some(message),
                );
            }
            return Ok(None);
        };
        let executors = fleet.offering(job);
        // An HTTP job's call is made by this node: it needs no executor.
        let calls_url = job.policy().is_ok_and(|p| p.http.is_some());
        if executors.is_empty() && !calls_url {
            let waited = fleet.now_ms - run.created_at_ms;
            if let Some(message) = fleet.nowhere_to_go(job, waited, self.grace_ms())
                && self
                    .store
                    .run_end(run.run_id, RunState::NoExecutor, Some(&message))
                    .await?
            {
                self.observer.run_ended(
                    run.run_id,
                    run.job_id,
                    Some(run.namespace_id),
                    RunState::NoExecutor,
                    Some(&message),
                );
            }
            return Ok(None);
        }
        let (policy, args) = match job.policy().and_then(|p| Ok((p, job.args()?))) {
            Ok(work) => work,
            Err(unreadable) => {
                // Never started under a policy or with arguments the job does not have: the
                // run fails, naming what does not read.
                self.end_unstartable(run, &unreadable.to_string()).await?;
                return Ok(None);
            }
        };
        let mut attempts = first_attempts(&policy.sharding, &args, &executors);
        // Jitter delays the scheduled runs only; a manual run or a backfill goes at once.
        if let Some(max) = policy.jitter_ms
            && run.trigger_kind.is_scheduled()
        {
            let delay = jitter_delay_ms(run.job_id, run.scheduled_at_ms, max);
            attempts.iter_mut().for_each(|a| a.delay_ms = delay);
        }
        Ok(Some(attempts))
    }
}

/// After a full slice, resume after its last id; after a short one, start over.
fn next_cursor<T>(slice: &[T], batch: i64, id: impl Fn(&T) -> i64) -> i64 {
    if (slice.len() as i64) < batch {
        0
    } else {
        slice.last().map_or(0, id)
    }
}

#[cfg(test)]
mod tests {
    use super::next_cursor;

    #[test]
    fn the_cursor_walks_full_slices_and_wraps_after_a_short_one() {
        let full: Vec<i64> = vec![3, 8, 9];
        assert_eq!(
            next_cursor(&full, 3, |x| *x),
            9,
            "a full slice: more may follow"
        );
        assert_eq!(
            next_cursor(&full[..2], 3, |x| *x),
            0,
            "a short slice: start over"
        );
        assert_eq!(next_cursor(&Vec::<i64>::new(), 3, |x| *x), 0);
    }
}
