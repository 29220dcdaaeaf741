//! One step of a history purge: walk the oldest finished runs from where the previous step
//! stopped, a window at a time, delete those in scope (with their attempts, logs and links),
//! and say where the next step starts. Runs finished in one millisecond may straddle two
//! windows, so the next step starts at that millisecond again unless this one moved nothing.

use async_trait::async_trait;

use super::super::error::Error;
use super::super::history_records::{PurgeScope, PurgeStep, Purged};

/// A finished run a purge looks at, in the order of its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PurgeCandidate {
    pub(crate) run_id: i64,
    pub(crate) finished_at_ms: i64,
    pub(crate) state: String,
    pub(crate) partition_id: i64,
    /// Its job keeps its history for a time of its own.
    pub(crate) job_keeps_own: bool,
}

/// What a purge needs of the database: the walk, and the delete (in a transaction of its own).
#[async_trait]
pub(crate) trait PurgeDriver: Send {
    /// The runs that finished in `[scope.finished_from_ms, scope.finished_before_ms)` (of
    /// `scope.job_id`, scheduled by `scope.scheduled_until_ms`, when set), oldest end first, at
    /// most `window`.
    async fn purge_candidates(
        &mut self,
        scope: &PurgeScope,
        window: i64,
    ) -> Result<Vec<PurgeCandidate>, Error>;

    /// Deletes these runs if they are still finished, their attempts and logs, and the records
    /// of their child runs and workflow steps (the children's and steps' own runs stay).
    async fn delete_finished_runs(&mut self, run_ids: &[i64]) -> Result<Purged, Error>;
}

/// One step of the purge `scope`, looking at `window` runs at most.
pub(crate) async fn purge_step<D: PurgeDriver + ?Sized>(
    db: &mut D,
    scope: &PurgeScope,
    window: i64,
) -> Result<PurgeStep, Error> {
    if scope.partitions.as_ref().is_some_and(Vec::is_empty) || window <= 0 {
        return Ok(PurgeStep::default());
    }
    // The state, partition and job-rule filters are applied here, not in the walk: in the same
    // statement they let PostgreSQL bitmap-AND two indexes and sort far more rows than a window.
    let candidates = db.purge_candidates(scope, window).await?;
    let states = scope.states.states();
    let ids: Vec<i64> = candidates
        .iter()
        .filter(|c| {
            states.iter().any(|s| s.as_str() == c.state)
                && scope
                    .partitions
                    .as_ref()
                    .is_none_or(|owned| owned.contains(&c.partition_id))
                && !(scope.skip_jobs_with_own_keep && c.job_keeps_own)
        })
        .map(|c| c.run_id)
        .collect();
    let last = candidates.iter().map(|c| c.finished_at_ms).max();
    let purged = if ids.is_empty() {
        Purged::default()
    } else {
        db.delete_finished_runs(&ids).await?
    };
    let full = i64::try_from(candidates.len()).unwrap_or(i64::MAX) >= window;
    let next_from_ms = match last {
        Some(last) if full && (last > scope.finished_from_ms || purged.runs > 0) => Some(last),
        Some(last) if full => Some(last + 1),
        _ => None,
    };
    Ok(PurgeStep {
        purged,
        next_from_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::super::memory::workflows::add_pending_run;
    use super::super::memory::{MemoryDb, MemoryJob, attempt_row};
    use super::*;
    use crate::store::history_records::PurgeStates;

    /// Runs of job 1 (partition 1) and job 2 (partition 2, keeping its own history), each with an
    /// attempt, ended at the instants given, in that state.
    fn ended_runs(ends: &[(i64, i64, &str)]) -> MemoryDb {
        let mut db = MemoryDb::default();
        db.jobs.insert(1, MemoryJob::default());
        db.jobs.insert(
            2,
            MemoryJob {
                history_keep_ms: Some(0),
                ..MemoryJob::default()
            },
        );
        for (i, (job, at, state)) in ends.iter().enumerate() {
            let run = add_pending_run(&mut db, *job, i as i64, None).run_id;
            let row = db.runs.iter_mut().find(|r| r.run_id == run).unwrap();
            row.state = state.parse().unwrap();
            row.finished_at_ms = (*state != "running").then_some(*at);
            let attempt = attempt_row(i as i64 + 1, run, *job, (0, 1), 1);
            db.attempts.push(attempt);
        }
        db
    }

    fn scope(from: i64) -> PurgeScope {
        PurgeScope {
            finished_before_ms: 1_000,
            finished_from_ms: from,
            ..PurgeScope::default()
        }
    }

    fn left(db: &MemoryDb) -> Vec<i64> {
        db.runs.iter().map(|r| r.run_id).collect()
    }

    #[tokio::test]
    async fn a_purge_walks_its_window_in_end_order_and_starts_the_next_step_where_it_stopped() {
        let mut db = ended_runs(&[
            (1, 30, "succeeded"),
            (1, 10, "failed"),
            (1, 20, "succeeded"),
            (1, 2_000, "succeeded"),
            (1, 0, "running"),
        ]);
        let step = purge_step(&mut db, &scope(0), 2).await.unwrap();
        assert_eq!(
            (step.purged, step.next_from_ms),
            (
                Purged {
                    runs: 2,
                    attempts: 2
                },
                Some(20)
            )
        );
        assert_eq!(left(&db), [1, 4, 5], "the two oldest ends went");
        let step = purge_step(&mut db, &scope(20), 2).await.unwrap();
        assert_eq!(
            (step.purged.runs, step.next_from_ms),
            (1, None),
            "the end of the scope"
        );
        assert_eq!(left(&db), [4, 5], "a later end and a running run stay");
        assert_eq!(db.attempts.len(), 2);
    }

    #[tokio::test]
    async fn a_window_of_one_millisecond_that_deletes_nothing_moves_past_it() {
        let mut db = ended_runs(&[(1, 10, "failed"), (1, 10, "failed"), (1, 10, "succeeded")]);
        let only_settled = PurgeScope {
            states: PurgeStates::NotDeadLetters,
            ..scope(10)
        };
        let step = purge_step(&mut db, &only_settled, 2).await.unwrap();
        assert_eq!(
            (step.purged.runs, step.next_from_ms),
            (0, Some(11)),
            "the window saw two dead letters at 10 and deleted nothing: past it"
        );
        // Starting at 10 again after a deletion revisits the same millisecond.
        let mut db = ended_runs(&[(1, 10, "failed"), (1, 10, "failed"), (1, 10, "succeeded")]);
        let step = purge_step(&mut db, &scope(10), 2).await.unwrap();
        assert_eq!((step.purged.runs, step.next_from_ms), (2, Some(10)));
        let step = purge_step(&mut db, &scope(10), 2).await.unwrap();
        assert_eq!((step.purged.runs, step.next_from_ms), (1, None));
        assert!(db.runs.is_empty());
    }

    #[tokio::test]
    async fn a_purge_keeps_to_its_partitions_states_and_the_jobs_own_rules() {
        let mut db = ended_runs(&[
            (1, 10, "succeeded"),
            (2, 11, "succeeded"),
            (1, 12, "no_executor"),
        ]);
        let mut partitions = PurgeScope {
            partitions: Some(vec![2]),
            ..scope(0)
        };
        assert_eq!(
            purge_step(&mut db, &partitions, 10)
                .await
                .unwrap()
                .purged
                .runs,
            1
        );
        assert_eq!(left(&db), [1, 3], "only partition 2's run");
        partitions.partitions = Some(Vec::new());
        assert_eq!(
            purge_step(&mut db, &partitions, 10).await.unwrap(),
            PurgeStep::default(),
            "no partition: nothing looked at"
        );
        let mut db = ended_runs(&[
            (1, 10, "succeeded"),
            (2, 11, "failed"),
            (1, 12, "no_executor"),
        ]);
        let general = PurgeScope {
            skip_jobs_with_own_keep: true,
            states: PurgeStates::DeadLetters,
            ..scope(0)
        };
        purge_step(&mut db, &general, 10).await.unwrap();
        assert_eq!(
            left(&db),
            [1, 2],
            "job 2 keeps its own; only the dead letter went"
        );
    }
}
