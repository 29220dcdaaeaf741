//! One step of a backfill, in one transaction: under the partition's fence, the step's instants
//! become runs (an instant a run holds already keeps it), and the backfill's cursor moves on
//! from the one the step was planned from. A step that lost the fence, or raced another step or
//! a cancel, stands for nothing: the caller rolls it back whole.

use async_trait::async_trait;

use super::super::error::Error;
use super::super::policy_records::BackfillStep;
use super::fence::{FenceTx, owned};
use crate::states::RunState;

/// A backfilled instant's run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BackfillRun<'a> {
    pub(crate) job_id: i64,
    pub(crate) step: &'a BackfillStep,
    pub(crate) scheduled_at_ms: i64,
    /// `pending`, or `skipped` (finished at once) with the calendar that holds it.
    pub(crate) state: RunState,
    pub(crate) message: Option<&'a str>,
}

impl BackfillRun<'_> {
    pub(crate) fn finished(&self) -> bool {
        !RunState::UNFINISHED.contains(&self.state)
    }
}

/// What a backfill step needs of a write transaction: statements with their binds.
#[async_trait]
pub(crate) trait BackfillTx: FenceTx {
    /// The job the backfill fills, if the backfill is still there.
    async fn backfill_job(&mut self, backfill_id: i64) -> Result<Option<i64>, Error>;

    /// Inserts the run unless its job has one at that instant; whether it did.
    async fn insert_backfill_run(
        &mut self,
        node_id: &str,
        run: &BackfillRun<'_>,
    ) -> Result<bool, Error>;

    /// Moves the running backfill's cursor from `step.expected_cursor_ms` to `step.cursor_ms`,
    /// counting `fired` more runs and ending it when `done`; whether it moved.
    async fn advance_backfill(
        &mut self,
        step: &BackfillStep,
        fired: u64,
        done: bool,
    ) -> Result<bool, Error>;
}

/// Runs `step` for `node_id`: how many runs it inserted, or `None` when nothing of it may
/// stand (the caller rolls back).
pub(crate) async fn backfill_step<T: BackfillTx + ?Sized>(
    tx: &mut T,
    node_id: &str,
    step: &BackfillStep,
) -> Result<Option<u64>, Error> {
    // The fence first (lock order: partitions, then the rest).
    let held = owned(tx, node_id, &[(step.partition_id, step.epoch)]).await?;
    if held.is_empty() {
        return Ok(None);
    }
    let job_id = tx.backfill_job(step.backfill_id).await?;
    let mut fired = 0_u64;
    if let Some(job_id) = job_id {
        for (at, state, message) in &step.instants {
            let run = BackfillRun {
                job_id,
                step,
                scheduled_at_ms: *at,
                state: *state,
                message: message.as_deref(),
            };
            fired += u64::from(tx.insert_backfill_run(node_id, &run).await?);
        }
    }
    // A backfill deleted (with its job) meanwhile moves no cursor: the step stands for nothing.
    if !tx
        .advance_backfill(step, fired, step.done || job_id.is_none())
        .await?
    {
        return Ok(None);
    }
    Ok(Some(fired))
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::super::memory::backfill::MemoryBackfill;
    use super::*;

    const JOB: i64 = 3;

    fn db() -> MemoryDb {
        let mut db = MemoryDb::default();
        db.partitions.insert(1, (Some("n1".to_owned()), 4));
        db.backfills.insert(
            9,
            MemoryBackfill {
                job_id: JOB,
                cursor_ms: 0,
                fired: 0,
                state: "running".to_owned(),
                message: None,
            },
        );
        db
    }

    fn step(expected_cursor_ms: i64, instants: &[i64], done: bool) -> BackfillStep {
        BackfillStep {
            backfill_id: 9,
            partition_id: 1,
            epoch: 4,
            expected_cursor_ms,
            cursor_ms: instants.last().copied().unwrap_or(expected_cursor_ms),
            instants: instants
                .iter()
                .map(|at| (*at, RunState::Pending, None))
                .collect(),
            priority: 5,
            namespace_id: crate::store::NamespaceId::DEFAULT,
            done,
            message: None,
        }
    }

    /// The step in a transaction: what it wrote is undone when it stands for nothing.
    async fn run(db: &mut MemoryDb, node_id: &str, step: &BackfillStep) -> Option<u64> {
        let before = db.clone();
        let fired = backfill_step(db, node_id, step).await.unwrap();
        if fired.is_none() {
            *db = before;
        }
        fired
    }

    #[tokio::test]
    async fn a_step_inserts_its_instants_runs_and_moves_the_cursor_keeping_runs_already_there() {
        let mut db = db();
        super::super::memory::workflows::add_pending_run(&mut db, JOB, 2_000, None);
        assert_eq!(
            run(&mut db, "n1", &step(0, &[1_000, 2_000, 3_000], false)).await,
            Some(2)
        );
        let instants: Vec<(i64, &str)> = db
            .runs
            .iter()
            .map(|r| (r.scheduled_at_ms, r.trigger_kind.as_str()))
            .collect();
        assert_eq!(
            instants,
            [(2_000, "manual"), (1_000, "backfill"), (3_000, "backfill")]
        );
        let backfill = &db.backfills[&9];
        assert_eq!(
            (backfill.cursor_ms, backfill.fired, backfill.state.as_str()),
            (3_000, 2, "running")
        );
        assert_eq!(
            run(&mut db, "n1", &step(3_000, &[4_000], true)).await,
            Some(1)
        );
        assert_eq!(db.backfills[&9].state, "done");
    }

    #[tokio::test]
    async fn a_step_under_a_lost_fence_or_from_a_stale_cursor_leaves_nothing() {
        let mut db = db();
        assert_eq!(
            run(&mut db, "n2", &step(0, &[1_000], false)).await,
            None,
            "not its partition"
        );
        db.partitions.insert(1, (Some("n1".to_owned()), 5));
        assert_eq!(
            run(&mut db, "n1", &step(0, &[1_000], false)).await,
            None,
            "an old epoch"
        );
        db.partitions.insert(1, (Some("n1".to_owned()), 4));
        db.backfills.get_mut(&9).unwrap().cursor_ms = 500;
        assert_eq!(
            run(&mut db, "n1", &step(0, &[1_000], false)).await,
            None,
            "another step went first"
        );
        assert!(db.runs.is_empty());
        db.backfills.get_mut(&9).unwrap().state = "cancelled".to_owned();
        assert_eq!(
            run(&mut db, "n1", &step(500, &[1_000], false)).await,
            None,
            "cancelled"
        );
        assert!(db.runs.is_empty());
    }

    #[tokio::test]
    async fn a_step_of_a_backfill_deleted_meanwhile_leaves_nothing() {
        let mut db = db();
        db.backfills.clear();
        assert_eq!(run(&mut db, "n1", &step(0, &[1_000], false)).await, None);
        assert!(db.runs.is_empty());
    }
}
