//! The start pass's and the plain-success path's guarded updates, and manual runs, over the
//! in-memory tables.

use async_trait::async_trait;

use super::{MemoryDb, MemoryRun};
use crate::states::{AttemptState, RunState, TriggerKind};
use crate::store::error::Error;
use crate::store::job_records::RunRecord;
use crate::store::rules::attempt_end::PlainSuccessTx;
use crate::store::rules::manual_run::{ManualRun, ManualRunDriver};
use crate::store::rules::run_start::RunStartTx;

#[async_trait]
impl RunStartTx for MemoryDb {
    async fn start_pending_runs(&mut self, run_ids: &[i64]) -> Result<Vec<i64>, Error> {
        let mut moved = Vec::new();
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && run.state == RunState::Pending {
                run.state = RunState::Running;
                run.started = true;
                moved.push(run.run_id);
            }
        }
        Ok(moved)
    }
}

#[async_trait]
impl PlainSuccessTx for MemoryDb {
    async fn succeed_live_attempts(
        &mut self,
        executor_id: &str,
        attempt_ids: &[i64],
    ) -> Result<Vec<i64>, Error> {
        let mut runs = Vec::new();
        for attempt in &mut self.attempts {
            let live = attempt.state.is_live();
            if live && attempt_ids.contains(&attempt.attempt_id) {
                attempt.state = AttemptState::Succeeded;
                attempt.executor_id = Some(executor_id.to_owned());
                runs.push(attempt.run_id);
            }
        }
        Ok(runs)
    }

    async fn set_outputs(
        &mut self,
        executor_id: &str,
        outputs: &[(i64, String)],
    ) -> Result<(), Error> {
        for attempt in &mut self.attempts {
            let stored = outputs.iter().find(|(id, _)| *id == attempt.attempt_id);
            if let Some((_, output)) = stored
                && attempt.state == AttemptState::Succeeded
                && attempt.executor_id.as_deref() == Some(executor_id)
                && attempt.output.is_none()
            {
                attempt.output = Some(output.clone());
            }
        }
        Ok(())
    }

    async fn succeed_runs(&mut self, run_ids: &[i64]) -> Result<u64, Error> {
        let now = self.now_ms;
        let mut ended = 0;
        for run in &mut self.runs {
            if run_ids.contains(&run.run_id) && RunState::UNFINISHED.contains(&run.state) {
                run.state = RunState::Succeeded;
                run.finished_at_ms = Some(now);
                ended += 1;
            }
        }
        Ok(ended)
    }
}

#[async_trait]
impl ManualRunDriver for MemoryDb {
    async fn clock_ms(&mut self) -> Result<i64, Error> {
        Ok(self.now_ms)
    }

    async fn insert_manual_run(
        &mut self,
        run: &ManualRun<'_>,
        at_ms: i64,
    ) -> Result<Option<RunRecord>, Error> {
        let now = self.now_ms;
        let inserted = self.insert_unique(MemoryRun {
            run_id: 0,
            job_id: run.job.job_id,
            scheduled_at_ms: at_ms,
            partition_id: run.job.partition_id,
            epoch: 0,
            node_id: run.node_id.to_owned(),
            trigger_kind: TriggerKind::Manual,
            state: run.state.to_owned(),
            priority: i64::from(run.job.policy_priority()),
            message: run.message.map(str::to_owned),
            namespace_id: run.job.namespace_id,
            started: false,
            finished_at_ms: run.finished().then_some(now),
            input: run.input.map(str::to_owned),
        });
        Ok(inserted.map(|run_id| super::workflows::run_record(self, run_id)))
    }
}
