//! The claim half of the storage conformance suite, the same bodies on Postgres,
//! MySQL/MariaDB and SQLite: a claim inserts one run per instant and advances its job, fenced
//! by the partition's epoch and the job's version; overlap rules and calendars decide a
//! claimed run's state; a run that is one attempt starts in its claim (not on MySQL); a backfill step fires
//! each instant once.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use carillon_server::states::{AttemptState, BackfillState, JobState, RunState, TriggerKind};
use carillon_server::store::{
    AttemptEnd, BackfillStep, ClaimOutcome, NamespaceId, OverlapRule, RunClaim,
};
use support::db::{Engine, TestDb};
use support::records::{claim, ended_claim, job_write, shard};

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        behind_pgbouncer!([$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
        for_engine!(sqlite, Sqlite, [$($test),*]);
    };
}

conformance!(
    a_claim_inserts_one_run_per_instant_and_advances_the_job,
    a_claim_on_a_moved_partition_is_fenced,
    a_claim_for_a_changed_or_stopped_job_is_stale,
    overlap_rules_decide_the_state_of_a_claimed_run,
    an_overlap_rule_waits_for_a_run_ending_at_that_moment,
    a_one_shot_claim_marks_the_job_done,
    a_claim_of_an_instant_a_manual_run_holds_advances_the_job_only,
    runs_claimed_ahead_start_at_once_and_fall_due_at_their_instant,
    claims_count_fired_instants_but_not_calendar_skips,
    a_backfill_step_is_fenced_by_epoch_and_cursor_and_fires_each_instant_once,
    a_starting_claim_inserts_its_run_running_with_one_attempt_of_the_jobs_args,
);

async fn a_claim_inserts_one_run_per_instant_and_advances_the_job(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let outcomes = store
        .runs_claim("n1", &[ended_claim(1, 1, 1_000), ended_claim(1, 1, 2_000)])
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Claimed, ClaimOutcome::Claimed]);
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().last_fired_at_ms,
        Some(2_000)
    );
    // The same instants again (a second owner, a retry): nothing new.
    let again = store
        .runs_claim("n1", &[ended_claim(1, 1, 2_000), ended_claim(1, 1, 1_000)])
        .await
        .unwrap();
    assert_eq!(again, vec![ClaimOutcome::Stale, ClaimOutcome::Stale]);
    let runs = store.runs_of_job(1, None, 10).await.unwrap();
    assert_eq!(
        runs.iter().map(|r| r.scheduled_at_ms).collect::<Vec<_>>(),
        vec![2_000, 1_000]
    );
    let run = &runs[0];
    assert_eq!(
        (run.state.as_str(), run.node_id.as_str(), run.epoch),
        ("no_executor", "n1", 1)
    );
    assert!(
        run.finished_at_ms.is_some(),
        "a run with nowhere to go is finished, visibly"
    );
    assert_eq!(run.message.as_deref(), Some("nowhere to go"));
    assert_eq!(
        store
            .runs_of_job(1, Some(run.run_id), 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn a_claim_on_a_moved_partition_is_fenced(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let stale_epoch = RunClaim {
        epoch: 0,
        ..ended_claim(1, 1, 1_000)
    };
    assert_eq!(
        store.runs_claim("n1", &[stale_epoch]).await.unwrap(),
        vec![ClaimOutcome::Fenced]
    );
    assert_eq!(
        store
            .runs_claim("n2", &[ended_claim(1, 1, 1_000)])
            .await
            .unwrap(),
        vec![ClaimOutcome::Fenced]
    );
    assert!(store.runs_of_job(1, None, 10).await.unwrap().is_empty());
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().last_fired_at_ms,
        None
    );
}

async fn a_claim_for_a_changed_or_stopped_job_is_stale(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    store.job_update(1, 1, &job_write("a"), None).await.unwrap();
    assert_eq!(
        store
            .runs_claim("n1", &[ended_claim(1, 1, 1_000)])
            .await
            .unwrap(),
        vec![ClaimOutcome::Stale]
    );
    assert_eq!(
        store
            .runs_claim("n1", &[ended_claim(1, 2, 1_000)])
            .await
            .unwrap(),
        vec![ClaimOutcome::Claimed]
    );
    store.job_stop(1, None).await.unwrap();
    assert_eq!(
        store
            .runs_claim("n1", &[ended_claim(1, 3, 2_000)])
            .await
            .unwrap(),
        vec![ClaimOutcome::Stale]
    );
    assert_eq!(store.runs_of_job(1, None, 10).await.unwrap().len(), 1);
}

async fn overlap_rules_decide_the_state_of_a_claimed_run(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let unfinished = RunClaim {
        state: RunState::Pending,
        ..ended_claim(1, 1, 1_000)
    };
    store.runs_claim("n1", &[unfinished]).await.unwrap();
    let with = |at, overlap| RunClaim {
        overlap,
        ..ended_claim(1, 1, at)
    };
    let outcomes = store
        .runs_claim(
            "n1",
            &[
                with(2_000, OverlapRule::Skip),
                with(3_000, OverlapRule::Queue),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [ClaimOutcome::Skipped, ClaimOutcome::Claimed],
        "a run skipped by the overlap rule says so (to be told)"
    );
    let states = |runs: Vec<carillon_server::store::RunRecord>| {
        runs.into_iter()
            .map(|r| (r.scheduled_at_ms, r.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        states(store.runs_of_job(1, None, 10).await.unwrap()),
        vec![
            (3_000, RunState::Queued),
            (2_000, RunState::Skipped),
            (1_000, RunState::Pending)
        ]
    );
    // The unfinished run has started: its attempt is under way.
    let pending = store.runs_pending(&[0], 0, 10).await.unwrap();
    assert_eq!(pending.len(), 1);
    let first = shard(0, 1);
    assert_eq!(
        store
            .runs_start(&[(pending[0].clone(), vec![first])])
            .await
            .unwrap(),
        1
    );
    let attempt = store.attempts_of_run(pending[0].run_id).await.unwrap()[0].attempt_id;
    assert!(store.attempt_dispatched(attempt, "e1", 0).await.unwrap());
    store
        .runs_claim("n1", &[with(4_000, OverlapRule::Replace)])
        .await
        .unwrap();
    let replaced = store.attempt_get(attempt).await.unwrap().unwrap();
    assert_eq!(
        replaced.state,
        AttemptState::Cancelled,
        "a replaced run's attempt stops too"
    );
    // Its executor's report comes too late to change anything.
    let failed = AttemptEnd {
        state: AttemptState::Failed,
        output: None,
        error: Some("late".into()),
        executor_id: Some("e1".into()),
        retry_after_ms: Some(0),
        retry_to_same_executor: false,
        job_has_children: false,
    };
    assert_eq!(
        store.attempt_end(attempt, &failed).await.unwrap(),
        carillon_server::store::AttemptEnded::AlreadyEnded
    );
    assert_eq!(
        states(store.runs_of_job(1, None, 10).await.unwrap()),
        vec![
            (4_000, RunState::NoExecutor),
            (3_000, RunState::Cancelled),
            (2_000, RunState::Skipped),
            (1_000, RunState::Cancelled)
        ]
    );
    store
        .runs_claim("n1", &[with(5_000, OverlapRule::Skip)])
        .await
        .unwrap();
    assert_eq!(
        store.runs_of_job(1, None, 1).await.unwrap()[0].state,
        RunState::NoExecutor,
        "nothing unfinished"
    );
}

/// A run ends while a claim under `overlap: queue` decides: the claim must see it ended. Were
/// it to read the run as it was before (not waiting for the ending transaction), it would
/// queue its run, and the ending transaction, not seeing that run yet, would release nothing:
/// the job's queue would never move again.
async fn an_overlap_rule_waits_for_a_run_ending_at_that_moment(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let claim_at = |at| RunClaim {
        state: RunState::Pending,
        overlap: OverlapRule::Queue,
        ..ended_claim(1, 1, at)
    };
    store.runs_claim("n1", &[claim_at(1_000)]).await.unwrap();
    let first = store.runs_of_job(1, None, 1).await.unwrap()[0].run_id;
    // The run's end, written but not yet committed.
    let ending = db
        .open_transaction(&format!(
            "UPDATE runs SET state = 'succeeded', finished_at_ms = 5 WHERE run_id = {first}"
        ))
        .await;
    let claiming = {
        let store = std::sync::Arc::clone(&store);
        tokio::spawn(async move { store.runs_claim("n1", &[claim_at(2_000)]).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    ending.commit().await;
    assert_eq!(claiming.await.unwrap().unwrap(), [ClaimOutcome::Claimed]);
    let runs = store.runs_of_job(1, None, 10).await.unwrap();
    let second = runs.iter().find(|r| r.scheduled_at_ms == 2_000).unwrap();
    assert_eq!(
        second.state,
        RunState::Pending,
        "the claim saw the ended run and queued nothing"
    );
}

async fn a_one_shot_claim_marks_the_job_done(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("once"), true, None)
        .await
        .unwrap();
    let last = RunClaim {
        job_done: true,
        ..ended_claim(1, 1, 1_000)
    };
    store.runs_claim("n1", &[last]).await.unwrap();
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().state,
        JobState::Done
    );
    assert!(store.jobs_in_partition(0).await.unwrap().is_empty());
}

async fn a_claim_of_an_instant_a_manual_run_holds_advances_the_job_only(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    let record = store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let manual = store
        .run_insert_manual(
            &record,
            "n1",
            RunState::NoExecutor,
            Some("by hand"),
            None,
            None,
        )
        .await
        .unwrap();
    let at = manual.scheduled_at_ms;
    let outcomes = store
        .runs_claim(
            "n1",
            &[ended_claim(1, 1, at), ended_claim(1, 1, at + 1_000)],
        )
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Claimed, ClaimOutcome::Claimed]);
    let runs = store.runs_of_job(1, None, 10).await.unwrap();
    assert_eq!(
        runs.len(),
        2,
        "the manual run keeps its instant; no second run there"
    );
    let held = runs.iter().find(|r| r.scheduled_at_ms == at).unwrap();
    assert_eq!(held.trigger_kind, TriggerKind::Manual);
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().last_fired_at_ms,
        Some(at + 1_000)
    );
}

async fn runs_claimed_ahead_start_at_once_and_fall_due_at_their_instant(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let now = store.now_ms().await.unwrap();
    let soon = now + 60_000;
    let mut ahead = ended_claim(1, 1, soon);
    ahead.state = RunState::Pending;
    ahead.message = None;
    assert_eq!(
        store.runs_claim("n1", &[ahead]).await.unwrap(),
        vec![ClaimOutcome::Claimed]
    );
    let pending = store.runs_pending(&[0], 0, 10).await.unwrap();
    assert_eq!(pending.len(), 1, "a run claimed ahead is pending at once");
    let first = shard(0, 1);
    let started = store
        .runs_start(&[(pending[0].clone(), vec![first])])
        .await
        .unwrap();
    assert_eq!(started, 1);
    assert!(
        store
            .attempts_due(&[0], 0, None, 10)
            .await
            .unwrap()
            .is_empty(),
        "its attempt is not due before its instant"
    );
    let due = store.attempts_due(&[0], 120_000, None, 10).await.unwrap();
    assert_eq!(due.len(), 1, "but it is within a look-ahead");
    assert_eq!(due[0].attempt.not_before_ms, soon);
    let after = Some((due[0].attempt.not_before_ms, due[0].attempt.attempt_id));
    assert!(
        store
            .attempts_due(&[0], 120_000, after, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // Accepted in a batch: recorded running together, with the job's deadline.
    let id = due[0].attempt.attempt_id;
    assert_eq!(
        store.attempts_dispatched(&[id], "e1", 5_000).await.unwrap(),
        1
    );
    let running = store.attempt_get(id).await.unwrap().unwrap();
    assert_eq!(running.state, AttemptState::Running);
    assert_eq!(running.executor_id.as_deref(), Some("e1"));
    assert!(running.deadline_ms.is_some());
    assert_eq!(
        store.attempts_dispatched(&[id], "e2", 0).await.unwrap(),
        0,
        "only a pending attempt is marked"
    );
    assert_eq!(store.attempts_dispatched(&[], "e2", 0).await.unwrap(), 0);
}

async fn claims_count_fired_instants_but_not_calendar_skips(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    let pending = |at| RunClaim {
        state: RunState::Pending,
        message: None,
        ..ended_claim(1, 1, at)
    };
    let skipped = |at| RunClaim {
        state: RunState::Skipped,
        message: Some("in calendar \"holidays\"".into()),
        overlap: OverlapRule::Queue,
        ..ended_claim(1, 1, at)
    };
    // Set-based (overlap allow) and one by one (an overlap rule), in one batch and apart.
    let outcomes = store
        .runs_claim("n1", &[pending(1_000), pending(2_000), skipped(3_000)])
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        [
            ClaimOutcome::Claimed,
            ClaimOutcome::Claimed,
            ClaimOutcome::Skipped
        ]
    );
    store
        .runs_claim(
            "n1",
            &[RunClaim {
                overlap: OverlapRule::Skip,
                ..pending(4_000)
            }],
        )
        .await
        .unwrap();
    let job = store.job_get(1).await.unwrap().unwrap();
    assert_eq!(job.fired_count, 3);
    assert_eq!(job.last_fired_at_ms, Some(4_000));
    // A calendar's skip stands under an overlap rule, though a run is unfinished.
    let runs = store.runs_of_job(1, None, 10).await.unwrap();
    let third = runs.iter().find(|r| r.scheduled_at_ms == 3_000).unwrap();
    assert_eq!(third.state, RunState::Skipped);
    assert!(third.finished_at_ms.is_some());
    // A job past its bounds is finished only at the version it was loaded at.
    assert!(!store.job_finish(1, 7).await.unwrap());
    assert!(store.job_finish(1, 1).await.unwrap());
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().state,
        JobState::Done
    );
}

async fn a_backfill_step_is_fenced_by_epoch_and_cursor_and_fires_each_instant_once(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    store
        .job_insert(1, 0, &job_write("a"), true, None)
        .await
        .unwrap();
    // The instant 2_000 fired on schedule already.
    let fired = store
        .runs_claim(
            "n1",
            &[RunClaim {
                state: RunState::Pending,
                ..ended_claim(1, 1, 2_000)
            }],
        )
        .await
        .unwrap();
    assert_eq!(fired, [ClaimOutcome::Claimed]);
    let backfill = store
        .backfill_insert(1, 0, 1_000, 3_000, 2, None)
        .await
        .unwrap();
    assert_eq!(backfill.cursor_ms, 999);
    assert_eq!(backfill.state, BackfillState::Running);
    let step = |epoch, expected, instants: Vec<i64>, done| BackfillStep {
        backfill_id: backfill.backfill_id,
        partition_id: 0,
        epoch,
        expected_cursor_ms: expected,
        cursor_ms: *instants.last().unwrap(),
        instants: instants
            .into_iter()
            .map(|at| (at, RunState::Pending, None))
            .collect(),
        priority: 5,
        namespace_id: NamespaceId::DEFAULT,
        done,
        message: None,
    };
    // Under an old epoch, or from a cursor that moved, nothing is written.
    assert_eq!(
        store
            .backfill_step("n1", &step(0, 999, vec![1_000], false))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .backfill_step("n2", &step(1, 999, vec![1_000], false))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .backfill_step("n1", &step(1, 500, vec![1_000], false))
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .runs_of_job(1, None, 10)
            .await
            .unwrap()
            .iter()
            .all(|r| r.trigger_kind != TriggerKind::Backfill)
    );
    // The instant that has a run keeps it.
    assert_eq!(
        store
            .backfill_step("n1", &step(1, 999, vec![1_000, 2_000], false))
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .runs_unfinished_count(1, Some((1_000, 3_000)))
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .backfill_step("n1", &step(1, 2_000, vec![3_000], true))
            .await
            .unwrap(),
        Some(1)
    );
    let done = store
        .backfill_get(backfill.backfill_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (done.state, done.fired, done.cursor_ms),
        (BackfillState::Done, 2, 3_000)
    );
    let mut triggers: Vec<(i64, String)> = store
        .runs_of_job(1, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.scheduled_at_ms, r.trigger_kind.as_str().to_owned()))
        .collect();
    triggers.sort();
    assert_eq!(
        triggers,
        [
            (1_000, "backfill".into()),
            (2_000, "schedule".into()),
            (3_000, "backfill".into())
        ]
    );
    // A done backfill takes no step, and cannot be cancelled.
    assert_eq!(
        store
            .backfill_step("n1", &step(1, 3_000, vec![4_000], true))
            .await
            .unwrap(),
        None
    );
    assert!(
        !store
            .backfill_cancel(backfill.backfill_id, None)
            .await
            .unwrap()
    );
}

fn starting(job_id: i64, at: i64) -> RunClaim {
    RunClaim {
        start: true,
        ..claim(job_id, at, RunState::Pending)
    }
}

async fn a_starting_claim_inserts_its_run_running_with_one_attempt_of_the_jobs_args(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    let mut plain = job_write("plain");
    plain.args_json = r#"{"region":"eu"}"#.into();
    store.job_insert(1, 0, &plain, true, None).await.unwrap();
    store
        .job_insert(2, 0, &job_write("sharded"), true, None)
        .await
        .unwrap();
    let held = store
        .job_insert(3, 0, &job_write("held"), true, None)
        .await
        .unwrap();
    let manual = store
        .run_insert_manual(&held, "n1", RunState::Pending, None, None, None)
        .await
        .unwrap();
    let at = store.now_ms().await.unwrap() + 60_000;
    let outcomes = store
        .runs_claim(
            "n1",
            &[
                starting(1, at),
                starting(1, at + 1_000),
                claim(2, at, RunState::Pending),
                starting(3, manual.scheduled_at_ms),
            ],
        )
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Claimed; 4]);

    let runs = store.runs_of_job(1, None, 10).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    if db.engine == Engine::Mysql {
        // MySQL leaves every claimed run to the start pass (it is faster there).
        for run in &runs {
            assert_eq!(run.state, RunState::Pending, "{run:?}");
            assert!(store.attempts_of_run(run.run_id).await.unwrap().is_empty());
        }
        assert_eq!(store.runs_pending(&[0], 0, 10).await.unwrap().len(), 4);
        return;
    }
    for run in &runs {
        assert_eq!(run.state, RunState::Running, "{run:?}");
        assert!(run.started_at_ms.is_some(), "{run:?}");
        let attempts = store.attempts_of_run(run.run_id).await.unwrap();
        assert_eq!(attempts.len(), 1, "exactly one attempt: {attempts:?}");
        let attempt = &attempts[0];
        assert_eq!(attempt.state, AttemptState::Pending);
        assert_eq!((attempt.shard_index, attempt.shard_total), (0, 1));
        assert_eq!(attempt.attempt_no, 1);
        assert_eq!(attempt.args_json, r#"{"region":"eu"}"#);
        assert_eq!(attempt.priority, run.priority);
        assert_eq!(
            attempt.not_before_ms, run.scheduled_at_ms,
            "a run claimed ahead waits for its instant"
        );
    }

    // A claim that does not start leaves its run to the start pass.
    let waiting = store.runs_of_job(2, None, 10).await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].state, RunState::Pending);
    assert!(
        store
            .attempts_of_run(waiting[0].run_id)
            .await
            .unwrap()
            .is_empty()
    );

    // The manual run keeps its instant and its state, and the claim gave it no attempt.
    let kept = store.runs_of_job(3, None, 10).await.unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].run_id, manual.run_id);
    assert_eq!(kept[0].state, RunState::Pending);
    assert!(
        store
            .attempts_of_run(manual.run_id)
            .await
            .unwrap()
            .is_empty()
    );

    let pending: Vec<i64> = store
        .runs_pending(&[0], 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(
        pending.len(),
        2,
        "the started runs are no start pass's work"
    );
    assert!(pending.contains(&waiting[0].run_id) && pending.contains(&manual.run_id));
    let due = store.attempts_due(&[0], 120_000, None, 10).await.unwrap();
    assert_eq!(
        due.len(),
        2,
        "both started attempts are due within a look-ahead"
    );
}
