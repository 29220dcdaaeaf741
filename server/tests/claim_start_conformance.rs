//! The claim that starts its runs (`RunClaim::start`) on Postgres, MySQL/MariaDB and SQLite:
//! a run that is one attempt is inserted `running` with that attempt in the claim's
//! transaction; the other claims stay `pending` for the start pass, and an instant a manual
//! run held keeps that run, which gets no attempt from the claim.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

#[macro_use]
mod support;

use carillon_server::store::{ClaimOutcome, RunClaim, run_state};
use support::db::TestDb;
use support::records::{claim, job_write};

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
        for_engine!(sqlite, Sqlite, [$($test),*]);
    };
}

conformance!(a_starting_claim_inserts_its_run_running_with_one_attempt_of_the_jobs_args);

fn starting(job_id: i64, at: i64) -> RunClaim {
    RunClaim {
        start: true,
        ..claim(job_id, at, run_state::PENDING)
    }
}

async fn a_starting_claim_inserts_its_run_running_with_one_attempt_of_the_jobs_args(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    let mut plain = job_write("plain");
    plain.args_json = r#"{"region":"eu"}"#.into();
    store.job_insert(1, 0, &plain, true).await.unwrap();
    store
        .job_insert(2, 0, &job_write("sharded"), true)
        .await
        .unwrap();
    let held = store
        .job_insert(3, 0, &job_write("held"), true)
        .await
        .unwrap();
    let manual = store
        .run_insert_manual(&held, "n1", run_state::PENDING, None)
        .await
        .unwrap();
    let at = store.now_ms().await.unwrap() + 60_000;
    let outcomes = store
        .runs_claim(
            "n1",
            &[
                starting(1, at),
                starting(1, at + 1_000),
                claim(2, at, run_state::PENDING),
                starting(3, manual.scheduled_at_ms),
            ],
        )
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Claimed; 4]);

    let runs = store.runs_of_job(1, None, 10).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in &runs {
        assert_eq!(run.state, run_state::RUNNING, "{run:?}");
        assert!(run.started_at_ms.is_some(), "{run:?}");
        let attempts = store.attempts_of_run(run.run_id).await.unwrap();
        assert_eq!(attempts.len(), 1, "exactly one attempt: {attempts:?}");
        let attempt = &attempts[0];
        assert_eq!(attempt.state, "pending");
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
    assert_eq!(waiting[0].state, run_state::PENDING);
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
    assert_eq!(kept[0].state, run_state::PENDING);
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
