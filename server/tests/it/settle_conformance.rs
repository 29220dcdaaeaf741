//! The settle stage's batch ending of plain successes (`Store::attempts_succeed`) on
//! Postgres, MySQL/MariaDB and SQLite: each attempt it ends ends its run, and an attempt that
//! had already ended elsewhere leaves its run alone.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use carillon_server::states::{AttemptState, RunState};
use carillon_server::store::{AttemptEnd, AttemptEnded, ClaimOutcome, NewAttempt};
use support::db::TestDb;
use support::records::{claim, job_write};

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        behind_pgbouncer!([$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
        for_engine!(sqlite, Sqlite, [$($test),*]);
    };
}

conformance!(plain_successes_end_their_runs_but_not_a_run_whose_attempt_ended_elsewhere);

async fn plain_successes_end_their_runs_but_not_a_run_whose_attempt_ended_elsewhere(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    let at = store.now_ms().await.unwrap() - 1_000;
    let mut ids = Vec::new();
    for job_id in 1..=3 {
        store
            .job_insert(job_id, 0, &job_write(&format!("j{job_id}")), true, None)
            .await
            .unwrap();
        assert_eq!(
            store
                .runs_claim("n1", &[claim(job_id, at, RunState::Pending)])
                .await
                .unwrap(),
            vec![ClaimOutcome::Claimed]
        );
    }
    let pending = store.runs_pending(&[0], 0, 10).await.unwrap();
    let starting: Vec<_> = pending
        .iter()
        .map(|run| {
            let first = NewAttempt {
                shard_index: 0,
                shard_total: 1,
                args_json: "null".into(),
                prefer_executor_id: None,
                delay_ms: 0,
            };
            (run.clone(), vec![first])
        })
        .collect();
    assert_eq!(store.runs_start(&starting).await.unwrap(), 3);
    for due in store.attempts_due(&[0], 0, None, 10).await.unwrap() {
        ids.push((due.attempt.attempt_id, due.attempt.run_id));
    }
    ids.sort_unstable();
    assert_eq!(ids.len(), 3);
    // The third timed out here first, and its retry is queued: the executor's late success
    // must not end that run.
    let timed_out = AttemptEnd {
        state: AttemptState::TimedOut,
        output: None,
        error: Some("the job's timeout passed".into()),
        executor_id: None,
        retry_after_ms: Some(60_000),
        retry_to_same_executor: false,
        job_has_children: false,
    };
    assert_eq!(
        store.attempt_end(ids[2].0, &timed_out).await.unwrap(),
        AttemptEnded::Retrying
    );

    assert_eq!(
        store
            .attempts_succeed(
                "e1",
                &attempt_ids(&ids),
                &[
                    (ids[0].0, "{\"status\":200}".to_owned()),
                    (ids[2].0, "{\"late\":true}".to_owned())
                ],
                &[]
            )
            .await
            .unwrap(),
        2,
        "two runs end: the third's attempt had ended already"
    );
    let output_of = |attempt: &carillon_server::store::AttemptRecord| attempt.output.clone();
    for &(attempt_id, run_id) in &ids[..2] {
        let attempt = store.attempt_get(attempt_id).await.unwrap().unwrap();
        let expected = (attempt_id == ids[0].0).then(|| "{\"status\":200}".to_owned());
        assert_eq!(output_of(&attempt), expected, "stored with its success");
        assert_eq!(attempt.state, AttemptState::Succeeded);
        assert_eq!(attempt.executor_id.as_deref(), Some("e1"));
        let run = store.run_get(run_id).await.unwrap().unwrap();
        assert_eq!(run.state, RunState::Succeeded);
        assert!(run.finished_at_ms.is_some());
    }
    let (attempt_id, run_id) = ids[2];
    let timed_out = store.attempt_get(attempt_id).await.unwrap().unwrap();
    assert_eq!(timed_out.state, AttemptState::TimedOut);
    assert_eq!(
        output_of(&timed_out),
        None,
        "a late success's output is not stored"
    );
    assert_eq!(
        store.run_get(run_id).await.unwrap().unwrap().state,
        RunState::Running,
        "its retry is still to come"
    );
    let attempts = store.attempts_of_run(run_id).await.unwrap();
    assert_eq!(attempts.len(), 2);
    assert!(attempts.iter().any(|a| a.state == AttemptState::Pending));

    // Again, nothing changes: every attempt named has ended.
    assert_eq!(
        store
            .attempts_succeed("e1", &attempt_ids(&ids), &[], &[])
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store.attempts_succeed("e1", &[], &[], &[]).await.unwrap(),
        0
    );
}

/// The attempt ids of `(attempt, run)` pairs.
fn attempt_ids(pairs: &[(i64, i64)]) -> Vec<i64> {
    pairs.iter().map(|(attempt_id, _)| *attempt_id).collect()
}
