//! Ending one attempt, in the caller's transaction: the guarded end from a live state, then
//! the shard's retry or, once every shard's latest attempt has ended, the run's end (its state
//! from its shards') and the release of its job's next queued run.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::super::child_records::{EndedRun, run_output};
use super::super::dispatch_records::{AttemptEnd, AttemptEnded, AttemptRecord};
use super::super::error::Error;
use crate::states::{AttemptState, RunState};

/// The next attempt of a shard whose attempt failed, timed out or was lost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryAttempt<'a> {
    /// The attempt it follows (its run, job, shard, priority and arguments).
    pub(crate) after: &'a AttemptRecord,
    /// Attempts of its shard lost with their executor before it: they do not count against
    /// the retry budget.
    pub(crate) lost_before: i64,
    /// Due this many milliseconds from now (database clock).
    pub(crate) delay_ms: i64,
    /// The executor it avoids, or the one it goes back to.
    pub(crate) avoid_executor_id: Option<&'a str>,
    pub(crate) executor_id: Option<&'a str>,
}

/// What the ending rule reads of a run it may end, its row locked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunEnding {
    /// The node that created it.
    pub(crate) node_id: String,
    /// It has an input: it follows another run (a child's, a step's).
    pub(crate) has_input: bool,
    /// The flow-control key it was put in line under, if any: its end admits the key again.
    pub(crate) flow_key: Option<String>,
}

/// What ending an attempt needs of a write transaction: statements with their binds.
#[async_trait]
pub(crate) trait EndingTx: Send {
    /// The attempt, its row locked.
    async fn lock_attempt(&mut self, attempt_id: i64) -> Result<Option<AttemptRecord>, Error>;

    /// Ends the attempt as `end` says if it is still pending or running; whether it did.
    async fn end_attempt(&mut self, attempt_id: i64, end: &AttemptEnd) -> Result<bool, Error>;

    async fn insert_retry(&mut self, retry: &RetryAttempt<'_>) -> Result<(), Error>;

    /// The run, its row locked: two shards ending at once would otherwise each see the other
    /// still running (neither committed), and the run would never end.
    async fn lock_run_for_ending(&mut self, run_id: i64) -> Result<Option<RunEnding>, Error>;

    /// Every attempt of the run, by shard and attempt number.
    async fn attempts_of_run(&mut self, run_id: i64) -> Result<Vec<AttemptRecord>, Error>;

    /// Ends the run if it is unfinished; whether it did.
    async fn end_run(
        &mut self,
        run_id: i64,
        state: RunState,
        message: Option<&str>,
    ) -> Result<bool, Error>;

    /// Lets the oldest queued run of the job start (overlap `queue`).
    async fn release_next_queued(&mut self, job_id: i64) -> Result<(), Error>;
}

/// Ends attempt `attempt_id` as `end` says. A run that ends with it is added to `runs_ended`,
/// and its flow key, if it has one, to `flow_keys` (admitted once per key by the caller:
/// `flow::admit_all`),
/// for its follow-ups in the same transaction.
pub(crate) async fn end_attempt<T: EndingTx + ?Sized>(
    tx: &mut T,
    attempt_id: i64,
    end: &AttemptEnd,
    runs_ended: &mut Vec<EndedRun>,
    flow_keys: &mut Vec<String>,
) -> Result<AttemptEnded, Error> {
    let Some(attempt) = tx.lock_attempt(attempt_id).await? else {
        return Ok(AttemptEnded::AlreadyEnded);
    };
    if !tx.end_attempt(attempt_id, end).await? {
        return Ok(AttemptEnded::AlreadyEnded);
    }
    if let Some(delay) = end.retry_after_ms {
        // The executor that had it: the retry avoids it, or goes back to it.
        let last = end
            .executor_id
            .as_deref()
            .or(attempt.executor_id.as_deref());
        tx.insert_retry(&RetryAttempt {
            after: &attempt,
            // Failover does not use up the retry budget: the next attempt knows how many of
            // those before it were lost.
            lost_before: attempt.lost_before + i64::from(end.state == AttemptState::Lost),
            delay_ms: delay.max(0),
            avoid_executor_id: last.filter(|_| !end.retry_to_same_executor),
            executor_id: last.filter(|_| end.retry_to_same_executor),
        })
        .await?;
        return Ok(AttemptEnded::Retrying);
    }
    let Some(run) = tx.lock_run_for_ending(attempt.run_id).await? else {
        return Ok(AttemptEnded::AlreadyEnded);
    };
    let attempts = tx.attempts_of_run(attempt.run_id).await?;
    let Some((state, message, latest)) = run_end_of(&attempts) else {
        return Ok(AttemptEnded::RunContinues);
    };
    if !tx
        .end_run(attempt.run_id, state, message.as_deref())
        .await?
    {
        // The run had ended already (cancelled, or replaced): this attempt's end changes
        // nothing more.
        return Ok(AttemptEnded::AlreadyEnded);
    }
    runs_ended.push(EndedRun {
        run_id: attempt.run_id,
        job_id: attempt.job_id,
        node_id: run.node_id,
        may_be_step: run.has_input,
        may_have_children: end.job_has_children,
        state,
        output: run_output(
            &latest
                .iter()
                .map(|(shard, a)| (*shard, a.output.as_deref()))
                .collect::<Vec<_>>(),
        ),
    });
    tx.release_next_queued(attempt.job_id).await?;
    flow_keys.extend(run.flow_key);
    Ok(AttemptEnded::RunEnded(state))
}

/// What the plain-success path needs of a write transaction.
#[async_trait]
pub(crate) trait PlainSuccessTx: Send {
    /// Ends those of `attempt_ids` (sorted) still pending or running as succeeded by
    /// `executor_id`; the runs of exactly the attempts it ended.
    async fn succeed_live_attempts(
        &mut self,
        executor_id: &str,
        attempt_ids: &[i64],
    ) -> Result<Vec<i64>, Error>;

    /// Ends those of `run_ids` (sorted) still unfinished as succeeded; how many.
    async fn succeed_runs(&mut self, run_ids: &[i64]) -> Result<u64, Error>;

    /// Stores the outputs of attempts this transaction ended succeeded by `executor_id`, where
    /// none is stored.
    async fn set_outputs(
        &mut self,
        executor_id: &str,
        outputs: &[(i64, String)],
    ) -> Result<(), Error>;
}

/// What decides whether an attempt's end may take the plain-success path.
#[derive(Debug, Clone, Copy)]
pub struct PlainSuccessCheck<'a> {
    pub end: &'a AttemptEnd,
    /// Shards of its run.
    pub shard_total: i64,
    /// Its job's overlap rule is `queue`: its run's end passes a turn on.
    pub job_queues: bool,
    /// Its run has an input: a child's or a workflow step's, whose end moves a workflow on.
    pub run_has_input: bool,
}

impl PlainSuccessCheck<'_> {
    /// Whether [`succeed_plainly`] may end it: it succeeded with nothing to record but its
    /// output (no error, no retry), it is its run's only shard, and its run's end has nothing
    /// to follow (no children, no queue, no workflow). Anything else goes through
    /// [`end_attempt`], which does all of that.
    pub fn holds(&self) -> bool {
        let end = self.end;
        end.state == AttemptState::Succeeded
            && end.error.is_none()
            && end.retry_after_ms.is_none()
            && !end.job_has_children
            && self.shard_total == 1
            && !self.job_queues
            && !self.run_has_input
    }
}

/// Ends plain successes answered by `executor_id` in two statements, whatever their number
/// (and a third per [`OUTPUTS_PER_STATEMENT`] of `outputs`, the outputs of those that have
/// one): each attempt is one that [`PlainSuccessCheck::holds`] for (the caller's promise), so
/// ending the attempt ends its run and nothing follows. An attempt already ended (timed out,
/// lost, cancelled) leaves its run and its output alone. How many runs it ended.
pub(crate) async fn succeed_plainly<T: PlainSuccessTx + ?Sized>(
    tx: &mut T,
    executor_id: &str,
    attempt_ids: &[i64],
    outputs: &[(i64, String)],
) -> Result<u64, Error> {
    let mut attempt_ids = attempt_ids.to_vec();
    attempt_ids.sort_unstable();
    if attempt_ids.is_empty() {
        return Ok(0);
    }
    let mut runs = tx.succeed_live_attempts(executor_id, &attempt_ids).await?;
    if runs.is_empty() {
        return Ok(0);
    }
    runs.sort_unstable();
    let ended = tx.succeed_runs(&runs).await?;
    let mut rest = outputs;
    while !rest.is_empty() {
        // Up to OUTPUTS_PER_STATEMENT, and OUTPUT_BYTES_PER_STATEMENT of text (MariaDB's
        // packet), but at least one.
        let mut bytes = 0;
        let take = rest
            .iter()
            .take(OUTPUTS_PER_STATEMENT)
            .take_while(|(_, output)| {
                bytes += output.len();
                bytes <= OUTPUT_BYTES_PER_STATEMENT
            })
            .count()
            .max(1);
        let (chunk, tail) = rest.split_at(take);
        tx.set_outputs(executor_id, chunk).await?;
        rest = tail;
    }
    Ok(ended)
}

/// Most outputs stored by one statement (a parameter each; the backends' limits are far
/// above).
pub(crate) const OUTPUTS_PER_STATEMENT: usize = 500;
/// Most bytes of outputs in one statement: MariaDB refuses a statement past its
/// `max_allowed_packet` (16 MiB by default).
const OUTPUT_BYTES_PER_STATEMENT: usize = 4 * 1024 * 1024;

/// How a run ends once every shard's latest attempt has ended: `succeeded` when all
/// succeeded, `cancelled` when one was cancelled, else `failed` naming each shard that did
/// not succeed; with the latest attempt of each shard. `None` while a shard is unfinished.
fn run_end_of(
    attempts: &[AttemptRecord],
) -> Option<(RunState, Option<String>, BTreeMap<i64, &AttemptRecord>)> {
    let mut latest: BTreeMap<i64, &AttemptRecord> = BTreeMap::new();
    for a in attempts {
        let newer = latest
            .get(&a.shard_index)
            .is_none_or(|b| (b.attempt_no, b.attempt_id) < (a.attempt_no, a.attempt_id));
        if newer {
            latest.insert(a.shard_index, a);
        }
    }
    fn state_of(a: &&AttemptRecord) -> AttemptState {
        a.state
    }
    if latest.values().map(state_of).any(AttemptState::is_live) {
        return None;
    }
    let (state, message) = if latest
        .values()
        .map(state_of)
        .all(|s| s == AttemptState::Succeeded)
    {
        (RunState::Succeeded, None)
    } else if latest
        .values()
        .map(state_of)
        .any(|s| s == AttemptState::Cancelled)
    {
        (
            RunState::Cancelled,
            Some("a shard was cancelled".to_owned()),
        )
    } else {
        let failed = latest
            .iter()
            .filter(|(_, a)| a.state != AttemptState::Succeeded)
            .map(|(shard, a)| format!("shard {shard}: {}", a.state))
            .collect::<Vec<_>>()
            .join(", ");
        (
            RunState::Failed,
            Some(format!("failed after its last attempt ({failed})")),
        )
    };
    Some((state, message, latest))
}

#[cfg(test)]
mod tests {
    use super::super::memory::{MemoryDb, MemoryRun, attempt_row};
    use super::*;
    use crate::states::TriggerKind;

    const JOB: i64 = 7;
    const RUN: i64 = 1;

    /// Run `RUN` of `JOB`, running, with one running attempt per shard (ids 1, 2, …).
    fn db(shards: i64) -> MemoryDb {
        let mut db = MemoryDb::default();
        db.runs.push(run(RUN, RunState::Running));
        for shard in 0..shards {
            db.attempts.push(AttemptRecord {
                state: AttemptState::Running,
                executor_id: Some("e1".to_owned()),
                ..attempt_row(shard + 1, RUN, JOB, (shard, shards), 1)
            });
        }
        db
    }

    fn run(run_id: i64, state: RunState) -> MemoryRun {
        MemoryRun {
            run_id,
            job_id: JOB,
            scheduled_at_ms: run_id * 1_000,
            partition_id: 0,
            epoch: 1,
            node_id: "n1".to_owned(),
            trigger_kind: TriggerKind::Schedule,
            state,
            priority: 5,
            message: None,
            namespace_id: crate::store::NamespaceId::DEFAULT,
            started: true,
            finished_at_ms: None,
            input: None,
        }
    }

    fn ending(state: AttemptState, output: Option<&str>) -> AttemptEnd {
        AttemptEnd {
            state,
            output: output.map(str::to_owned),
            error: None,
            executor_id: None,
            retry_after_ms: None,
            retry_to_same_executor: false,
            job_has_children: false,
        }
    }

    async fn end(
        db: &mut MemoryDb,
        attempt_id: i64,
        end: &AttemptEnd,
    ) -> (AttemptEnded, Vec<EndedRun>) {
        let mut runs_ended = Vec::new();
        let ended = end_attempt(db, attempt_id, end, &mut runs_ended, &mut Vec::new())
            .await
            .unwrap();
        (ended, runs_ended)
    }

    fn run_state_of(db: &MemoryDb, run_id: i64) -> (String, Option<String>) {
        let run = db.runs.iter().find(|r| r.run_id == run_id).unwrap();
        (run.state.as_str().to_owned(), run.message.clone())
    }

    #[tokio::test]
    async fn a_retry_is_the_shards_next_attempt_and_a_lost_one_does_not_use_the_budget() {
        let mut db = db(1);
        let failed = AttemptEnd {
            retry_after_ms: Some(2_000),
            ..ending(AttemptState::Failed, None)
        };
        assert_eq!(end(&mut db, 1, &failed).await.0, AttemptEnded::Retrying);
        let retry = db.attempts[1].clone();
        assert_eq!(
            (retry.attempt_no, retry.lost_before, retry.state.as_str()),
            (2, 0, "pending")
        );
        assert_eq!(
            retry.avoid_executor_id.as_deref(),
            Some("e1"),
            "avoids the executor"
        );
        assert_eq!(retry.executor_id, None);

        db.attempts[1].state = AttemptState::Running;
        db.attempts[1].executor_id = Some("e2".to_owned());
        let lost_effect_once = AttemptEnd {
            retry_after_ms: Some(0),
            retry_to_same_executor: true,
            ..ending(AttemptState::Lost, None)
        };
        assert_eq!(
            end(&mut db, 2, &lost_effect_once).await.0,
            AttemptEnded::Retrying
        );
        let third = db.attempts[2].clone();
        assert_eq!((third.attempt_no, third.lost_before), (3, 1));
        assert_eq!(
            (third.executor_id.as_deref(), third.avoid_executor_id),
            (Some("e2"), None),
            "goes back to the executor holding its effect's record"
        );
        assert_eq!(run_state_of(&db, RUN).0, "running");
    }

    #[tokio::test]
    async fn an_attempt_ends_once() {
        let mut db = db(1);
        let done = ending(AttemptState::Succeeded, Some("1"));
        assert!(matches!(
            end(&mut db, 1, &done).await.0,
            AttemptEnded::RunEnded(_)
        ));
        let (again, runs) = end(&mut db, 1, &done).await;
        assert_eq!((again, runs.len()), (AttemptEnded::AlreadyEnded, 0));
        assert_eq!(end(&mut db, 99, &done).await.0, AttemptEnded::AlreadyEnded);
    }

    #[tokio::test]
    async fn a_run_ends_when_its_last_shard_does_with_every_shards_output() {
        let mut db = db(2);
        let (first, none) = end(&mut db, 1, &ending(AttemptState::Succeeded, Some("1"))).await;
        assert_eq!((first, none.len()), (AttemptEnded::RunContinues, 0));
        let (last, ended) = end(&mut db, 2, &ending(AttemptState::Succeeded, Some("2"))).await;
        assert_eq!(last, AttemptEnded::RunEnded(RunState::Succeeded));
        assert_eq!(run_state_of(&db, RUN), ("succeeded".to_owned(), None));
        let ended = &ended[0];
        assert_eq!(
            (ended.run_id, ended.job_id, ended.node_id.as_str()),
            (RUN, JOB, "n1")
        );
        assert_eq!(ended.output, Some(serde_json::json!([1, 2])));
    }

    #[tokio::test]
    async fn a_cancelled_shard_beats_a_failed_one_and_a_failure_names_its_shards() {
        let mut db1 = db(2);
        end(&mut db1, 1, &ending(AttemptState::Failed, None)).await;
        end(&mut db1, 2, &ending(AttemptState::Cancelled, None)).await;
        assert_eq!(
            run_state_of(&db1, RUN),
            (
                "cancelled".to_owned(),
                Some("a shard was cancelled".to_owned())
            )
        );
        let mut db2 = db(2);
        end(&mut db2, 1, &ending(AttemptState::TimedOut, None)).await;
        let (ended, _) = end(&mut db2, 2, &ending(AttemptState::Succeeded, None)).await;
        assert_eq!(ended, AttemptEnded::RunEnded(RunState::Failed));
        assert_eq!(
            run_state_of(&db2, RUN).1.as_deref(),
            Some("failed after its last attempt (shard 0: timed_out)")
        );
    }

    #[tokio::test]
    async fn only_each_shards_latest_attempt_decides() {
        let mut db = db(1);
        db.attempts[0].state = AttemptState::Failed;
        db.attempts.push(AttemptRecord {
            state: AttemptState::Running,
            ..attempt_row(2, RUN, JOB, (0, 1), 2)
        });
        let (ended, _) = end(&mut db, 2, &ending(AttemptState::Succeeded, None)).await;
        assert_eq!(ended, AttemptEnded::RunEnded(RunState::Succeeded));
    }

    #[tokio::test]
    async fn a_run_ended_already_stays_as_it_is_and_releases_nothing() {
        let mut db = db(1);
        db.runs[0].state = RunState::Cancelled;
        db.runs.push(run(2, RunState::Queued));
        let (ended, runs) = end(&mut db, 1, &ending(AttemptState::Succeeded, None)).await;
        assert_eq!((ended, runs.len()), (AttemptEnded::AlreadyEnded, 0));
        assert_eq!(run_state_of(&db, RUN).0, "cancelled");
        assert_eq!(run_state_of(&db, 2).0, "queued");
    }

    #[tokio::test]
    async fn a_runs_end_passes_its_jobs_turn_to_the_oldest_queued_run() {
        let mut db = db(1);
        db.runs.push(run(3, RunState::Queued));
        db.runs.push(run(2, RunState::Queued));
        let (_, ended) = end(&mut db, 1, &ending(AttemptState::Failed, None)).await;
        assert_eq!(ended[0].state, RunState::Failed);
        assert_eq!(run_state_of(&db, 2).0, "pending");
        assert_eq!(run_state_of(&db, 3).0, "queued");
    }

    #[tokio::test]
    async fn plain_successes_end_their_runs_and_an_attempt_ended_elsewhere_leaves_its_run() {
        let mut db = db(1);
        db.runs.push(run(2, RunState::Running));
        db.attempts.push(AttemptRecord {
            state: AttemptState::TimedOut,
            ..attempt_row(2, 2, JOB, (0, 1), 1)
        });
        let ended = succeed_plainly(&mut db, "e9", &[2, 1], &[(1, "{\"n\":1}".to_owned())])
            .await
            .unwrap();
        assert_eq!(ended, 1);
        assert_eq!(run_state_of(&db, RUN).0, "succeeded");
        assert_eq!(
            run_state_of(&db, 2).0,
            "running",
            "its attempt timed out: the run goes on to its retry"
        );
        assert_eq!(db.attempts[0].executor_id.as_deref(), Some("e9"));
        assert_eq!(db.attempts[0].output.as_deref(), Some("{\"n\":1}"));
        assert_eq!(
            succeed_plainly(&mut db, "e9", &[1], &[]).await.unwrap(),
            0,
            "once"
        );
    }

    #[test]
    fn only_a_bare_success_of_a_runs_only_shard_with_nothing_to_follow_takes_the_plain_path() {
        let plain = ending(AttemptState::Succeeded, None);
        let check = |end: &AttemptEnd, shards: i64, queues: bool, input: bool| {
            PlainSuccessCheck {
                end,
                shard_total: shards,
                job_queues: queues,
                run_has_input: input,
            }
            .holds()
        };
        assert!(check(&plain, 1, false, false));
        assert!(
            !check(&plain, 2, false, false),
            "another shard may still run"
        );
        assert!(
            !check(&plain, 1, true, false),
            "its end passes a queue's turn on"
        );
        assert!(
            !check(&plain, 1, false, true),
            "a step's end moves its workflow on"
        );
        let with_output = ending(AttemptState::Succeeded, Some("{}"));
        assert!(
            check(&with_output, 1, false, false),
            "its output is stored with it"
        );
        let mut with_children = plain.clone();
        with_children.job_has_children = true;
        assert!(!check(&with_children, 1, false, false), "its children run");
        let failed = ending(AttemptState::Failed, None);
        assert!(!check(&failed, 1, false, false));
    }
}
