//! The start pass: runs still pending move to `running` with their attempts (one per shard,
//! each due at the run's instant plus its jitter). A run cancelled meanwhile stays cancelled,
//! and of two nodes starting the same run only the one whose statement moved it adds its
//! attempts.

use std::collections::HashSet;

use async_trait::async_trait;

use super::super::dispatch_records::NewAttempt;
use super::super::error::Error;
use super::super::job_records::RunRecord;
use super::claim::{FirstAttempt, FirstAttemptTx};

/// What the start pass needs of a write transaction.
#[async_trait]
pub(crate) trait RunStartTx: FirstAttemptTx {
    /// Moves those of `run_ids` still pending to `running`; exactly the ids it moved.
    async fn start_pending_runs(&mut self, run_ids: &[i64]) -> Result<Vec<i64>, Error>;
}

/// Starts `runs`, each with its attempts; how many it started (0: the caller writes nothing).
pub(crate) async fn start_runs<T: RunStartTx + ?Sized>(
    tx: &mut T,
    runs: &[(RunRecord, Vec<NewAttempt>)],
) -> Result<usize, Error> {
    let ids: Vec<i64> = runs.iter().map(|(r, _)| r.run_id).collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let moved: HashSet<i64> = tx.start_pending_runs(&ids).await?.into_iter().collect();
    if moved.is_empty() {
        return Ok(0);
    }
    let starting: Vec<&(RunRecord, Vec<NewAttempt>)> = runs
        .iter()
        .filter(|(run, _)| moved.contains(&run.run_id))
        .collect();
    let attempts: Vec<FirstAttempt<'_>> = starting
        .iter()
        .flat_map(|(run, attempts)| {
            attempts.iter().map(move |a| FirstAttempt {
                run_id: run.run_id,
                job_id: run.job_id,
                partition_id: run.partition_id,
                priority: run.priority,
                shard_index: a.shard_index,
                shard_total: a.shard_total,
                args_json: &a.args_json,
                not_before_ms: run.scheduled_at_ms.saturating_add(a.delay_ms),
                executor_id: a.prefer_executor_id.as_deref(),
            })
        })
        .collect();
    if !attempts.is_empty() {
        tx.insert_first_attempts(&attempts).await?;
    }
    Ok(starting.len())
}

#[cfg(test)]
mod tests {
    use super::super::memory::MemoryDb;
    use super::super::memory::workflows::{add_pending_run, run_record};
    use super::*;
    use crate::states::RunState;

    fn shard(index: i64, total: i64, delay_ms: i64, prefer: Option<&str>) -> NewAttempt {
        NewAttempt {
            shard_index: index,
            shard_total: total,
            args_json: format!(r#"{{"shard":{index}}}"#),
            prefer_executor_id: prefer.map(str::to_owned),
            delay_ms,
        }
    }

    #[tokio::test]
    async fn a_pending_run_starts_with_an_attempt_per_shard_due_at_its_instant_plus_jitter() {
        let mut db = MemoryDb::default();
        let run = add_pending_run(&mut db, 7, 10_000, None);
        let started = start_runs(
            &mut db,
            &[(
                run.clone(),
                vec![shard(0, 2, 0, Some("e1")), shard(1, 2, 250, None)],
            )],
        )
        .await
        .unwrap();
        assert_eq!(started, 1);
        assert_eq!(run_record(&db, run.run_id).state, RunState::Running);
        let attempts: Vec<(i64, i64, Option<&str>)> = db
            .attempts
            .iter()
            .map(|a| (a.shard_index, a.not_before_ms, a.executor_id.as_deref()))
            .collect();
        assert_eq!(attempts, [(0, 10_000, Some("e1")), (1, 10_250, None)]);
    }

    #[tokio::test]
    async fn a_run_cancelled_or_started_elsewhere_gets_no_attempts() {
        let mut db = MemoryDb::default();
        let cancelled = add_pending_run(&mut db, 7, 10_000, None);
        let pending = add_pending_run(&mut db, 7, 11_000, None);
        db.runs[0].state = RunState::Cancelled;
        let batch = [
            (cancelled.clone(), vec![shard(0, 1, 0, None)]),
            (pending.clone(), vec![shard(0, 1, 0, None)]),
        ];
        assert_eq!(start_runs(&mut db, &batch).await.unwrap(), 1);
        assert_eq!(db.attempts.len(), 1);
        assert_eq!(db.attempts[0].run_id, pending.run_id);
        assert_eq!(run_record(&db, cancelled.run_id).state, RunState::Cancelled);
        // A second starter of the same batch moves nothing and adds nothing.
        assert_eq!(start_runs(&mut db, &batch).await.unwrap(), 0);
        assert_eq!(db.attempts.len(), 1);
    }
}
