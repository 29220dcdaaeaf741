//! Backfills in the in-memory driver.

use async_trait::async_trait;

use super::{MemoryDb, MemoryRun};
use crate::states::TriggerKind;
use crate::store::error::Error;
use crate::store::policy_records::BackfillStep;
use crate::store::rules::backfill::{BackfillRun, BackfillTx};

/// A row of `backfills`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryBackfill {
    pub(crate) job_id: i64,
    pub(crate) cursor_ms: i64,
    pub(crate) fired: u64,
    /// `running`, `done` or `cancelled`.
    pub(crate) state: String,
    pub(crate) message: Option<String>,
}

#[async_trait]
impl BackfillTx for MemoryDb {
    async fn backfill_job(&mut self, backfill_id: i64) -> Result<Option<i64>, Error> {
        Ok(self.backfills.get(&backfill_id).map(|b| b.job_id))
    }

    async fn insert_backfill_run(
        &mut self,
        node_id: &str,
        run: &BackfillRun<'_>,
    ) -> Result<bool, Error> {
        let now = self.now_ms;
        Ok(self
            .insert_unique(MemoryRun {
                run_id: 0,
                job_id: run.job_id,
                scheduled_at_ms: run.scheduled_at_ms,
                partition_id: run.step.partition_id,
                epoch: run.step.epoch,
                node_id: node_id.to_owned(),
                trigger_kind: TriggerKind::Backfill,
                state: run.state.to_owned(),
                priority: run.step.priority,
                message: run.message.map(str::to_owned),
                namespace_id: run.step.namespace_id,
                started: false,
                finished_at_ms: run.finished().then_some(now),
                input: None,
            })
            .is_some())
    }

    async fn advance_backfill(
        &mut self,
        step: &BackfillStep,
        fired: u64,
        done: bool,
    ) -> Result<bool, Error> {
        let Some(backfill) = self
            .backfills
            .get_mut(&step.backfill_id)
            .filter(|b| b.state == "running" && b.cursor_ms == step.expected_cursor_ms)
        else {
            return Ok(false);
        };
        backfill.cursor_ms = step.cursor_ms;
        backfill.fired += fired;
        if done {
            backfill.state = "done".to_owned();
        }
        backfill.message.clone_from(&step.message);
        Ok(true)
    }
}
