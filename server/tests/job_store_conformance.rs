//! The job and run half of the storage conformance suite: the same bodies on Postgres,
//! MySQL/MariaDB and SQLite.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

#[macro_use]
mod support;

use std::sync::Arc;

use carillon_server::store::{
    AttemptEnd, BackfillStep, ClaimOutcome, Error, JobFilter, JobKey, JobOrder, JobWrite,
    NewAttempt, OverlapRule, RunClaim, Store, backfill_state, job_state, run_state,
};
use support::db::TestDb;

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
        for_engine!(sqlite, Sqlite, [$($test),*]);
    };
}

conformance!(
    jobs_are_created_read_listed_and_paged,
    a_duplicate_job_name_is_a_conflict_and_nothing_is_overwritten,
    an_import_stores_every_job_or_none,
    an_update_applies_only_at_the_expected_version,
    changes_and_deletions_are_seen_by_polling,
    a_claim_inserts_one_run_per_instant_and_advances_the_job,
    a_claim_on_a_moved_partition_is_fenced,
    a_claim_for_a_changed_or_stopped_job_is_stale,
    overlap_rules_decide_the_state_of_a_claimed_run,
    a_one_shot_claim_marks_the_job_done,
    manual_runs_take_a_free_millisecond,
    a_claim_of_an_instant_a_manual_run_holds_advances_the_job_only,
    runs_claimed_ahead_start_at_once_and_fall_due_at_their_instant,
    jobs_are_found_by_any_part_of_their_name_ignoring_case,
    finished_runs_are_counted_by_minute_and_late_first_dispatches_found,
    shards_ending_at_once_end_their_run,
    claims_count_fired_instants_but_not_calendar_skips,
    a_backfill_step_is_fenced_by_epoch_and_cursor_and_fires_each_instant_once,
);

fn job(name: &str) -> JobWrite {
    JobWrite {
        name: name.into(),
        app_name: "billing".into(),
        handler_name: "report".into(),
        schedule_json: r#"{"cron":"* * * * * *"}"#.into(),
        timezone: "UTC".into(),
        args_json: "null".into(),
        policy_json: r#"{"priority":7}"#.into(),
        history_keep_ms: None,
        history_max_runs: None,
    }
}

/// A store whose partition 0 is owned by `n1` at epoch 1.
async fn owned(db: &TestDb) -> Arc<dyn Store> {
    db.store_owning_partition_0().await
}

/// The first attempt of shard `index` of `total`, for no executor in particular.
fn shard(index: i64, total: i64) -> NewAttempt {
    NewAttempt {
        shard_index: index,
        shard_total: total,
        args_json: "null".into(),
        prefer_executor_id: None,
        delay_ms: 0,
    }
}

fn claim(job_id: i64, version: i64, at: i64) -> RunClaim {
    RunClaim {
        job_id,
        job_version: version,
        partition_id: 0,
        epoch: 1,
        scheduled_at_ms: at,
        trigger_kind: "schedule",
        priority: 5,
        state: run_state::NO_EXECUTOR,
        message: Some("nowhere to go".into()),
        overlap: OverlapRule::Allow,
        job_done: false,
        start: false,
    }
}

async fn jobs_are_created_read_listed_and_paged(db: TestDb) {
    let store = db.migrated_store().await;
    for i in 1..=5 {
        store
            .job_insert(i, 0, &job(&format!("report_{i}")), i % 2 == 0)
            .await
            .unwrap();
    }
    store
        .job_insert(6, 1, &job("100%_done!"), false)
        .await
        .unwrap();
    let one = store.job_get(2).await.unwrap().unwrap();
    assert_eq!(
        (one.name.as_str(), one.state.as_str(), one.version),
        ("report_2", "running", 1)
    );
    assert!(one.started_at_ms.is_some());
    assert!(
        store
            .job_get(1)
            .await
            .unwrap()
            .unwrap()
            .started_at_ms
            .is_none()
    );

    let page = |filter: JobFilter| {
        let store = Arc::clone(&store);
        async move {
            store
                .jobs_list(&filter)
                .await
                .unwrap()
                .iter()
                .map(|j| j.job_id)
                .collect::<Vec<_>>()
        }
    };
    let base = JobFilter {
        limit: 100,
        ..JobFilter::default()
    };
    assert_eq!(page(base.clone()).await, vec![6, 5, 4, 3, 2, 1]);
    assert_eq!(
        page(JobFilter {
            limit: 2,
            ..base.clone()
        })
        .await,
        vec![6, 5]
    );
    assert_eq!(
        page(JobFilter {
            after: Some(JobKey::Id(5)),
            limit: 2,
            ..base.clone()
        })
        .await,
        vec![4, 3]
    );
    assert_eq!(
        page(JobFilter {
            order: JobOrder::OldestFirst,
            after: Some(JobKey::Id(2)),
            limit: 3,
            ..base.clone()
        })
        .await,
        vec![3, 4, 5]
    );
    // By name: the page after a name, both ways (names here: report_1.. and 100%_x).
    let by_name = |order, after: Option<&str>| JobFilter {
        order,
        after: after.map(|n| JobKey::Name(n.to_owned())),
        ..base.clone()
    };
    assert_eq!(
        page(by_name(JobOrder::NameAscending, None)).await,
        vec![6, 1, 2, 3, 4, 5]
    );
    assert_eq!(
        page(by_name(JobOrder::NameAscending, Some("report_2"))).await,
        vec![3, 4, 5]
    );
    assert_eq!(
        page(by_name(JobOrder::NameDescending, Some("report_2"))).await,
        vec![1, 6]
    );
    assert_eq!(
        page(JobFilter {
            state: Some("running".into()),
            ..base.clone()
        })
        .await,
        vec![4, 2]
    );
    // LIKE wildcards in a name are literal.
    assert_eq!(
        page(JobFilter {
            name_prefix: Some("report_".into()),
            ..base.clone()
        })
        .await
        .len(),
        5
    );
    assert_eq!(
        page(JobFilter {
            name_prefix: Some("100%_".into()),
            ..base.clone()
        })
        .await,
        vec![6]
    );
    assert_eq!(
        page(JobFilter {
            name_prefix: Some("1%".into()),
            ..base.clone()
        })
        .await,
        Vec::<i64>::new()
    );
    assert_eq!(
        page(JobFilter {
            app: Some("other".into()),
            ..base
        })
        .await,
        Vec::<i64>::new()
    );
    assert_eq!(
        store.jobs_in_partition(0).await.unwrap().len(),
        2,
        "running jobs only"
    );
}

async fn a_duplicate_job_name_is_a_conflict_and_nothing_is_overwritten(db: TestDb) {
    let store = db.migrated_store().await;
    store
        .job_insert(1, 0, &job("nightly"), false)
        .await
        .unwrap();
    let err = store
        .job_insert(2, 0, &job("nightly"), true)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Conflict { what } if what.contains("nightly")),
        "{err}"
    );
    let err = store
        .job_insert(1, 0, &job("other"), true)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Conflict { what } if what.contains("id")),
        "{err}"
    );
    assert_eq!(store.job_get(1).await.unwrap().unwrap().state, "stopped");
    assert!(store.job_get(2).await.unwrap().is_none());
}

async fn an_import_stores_every_job_or_none(db: TestDb) {
    let store = db.migrated_store().await;
    // More rows than one statement carries, so the import spans several.
    let rows: Vec<(i64, i64, JobWrite)> = (1..=1_200)
        .map(|i| (i, i % 4, job(&format!("imported-{i}"))))
        .collect();
    store.jobs_import(&rows, true).await.unwrap();
    let some = store.jobs_get_many(&[1, 600, 1_200, 5_000]).await.unwrap();
    let mut ids: Vec<i64> = some.iter().map(|j| j.job_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 600, 1_200], "the absent id is left out");
    let j600 = some.iter().find(|j| j.job_id == 600).unwrap();
    assert_eq!(j600.name, "imported-600");
    assert_eq!(j600.partition_id, 0);
    assert_eq!(j600.state, job_state::RUNNING);
    assert!(
        j600.started_at_ms.is_some(),
        "an import with start anchors the job"
    );
    assert_eq!(store.jobs_in_partition(0).await.unwrap().len(), 300);

    // One taken name fails the whole import: none of its other jobs is stored.
    let clash = vec![
        (2_001, 0, job("fresh-a")),
        (2_002, 0, job("imported-7")),
        (2_003, 0, job("fresh-b")),
    ];
    let err = store.jobs_import(&clash, false).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert!(
        store
            .jobs_get_many(&[2_001, 2_003])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.job_get(7).await.unwrap().unwrap().name, "imported-7");
    assert!(store.jobs_get_many(&[]).await.unwrap().is_empty());
}

async fn an_update_applies_only_at_the_expected_version(db: TestDb) {
    let store = db.migrated_store().await;
    store.job_insert(1, 0, &job("a"), false).await.unwrap();
    let mut changed = job("a");
    changed.schedule_json = r#"{"every":"5m"}"#.into();
    let updated = store.job_update(1, 1, &changed).await.unwrap().unwrap();
    assert_eq!(
        (updated.version, updated.schedule_json.as_str()),
        (2, r#"{"every":"5m"}"#)
    );
    assert!(
        store.job_update(1, 1, &job("a")).await.unwrap().is_none(),
        "stale version"
    );
    assert_eq!(store.job_get(1).await.unwrap().unwrap().version, 2);
    store.job_insert(2, 0, &job("b"), false).await.unwrap();
    let clash = store.job_update(2, 1, &job("a")).await.unwrap_err();
    assert!(matches!(clash, Error::Conflict { .. }));
    let started = store.job_start(1).await.unwrap().unwrap();
    assert_eq!((started.state.as_str(), started.version), ("running", 3));
    let stopped = store.job_stop(1).await.unwrap().unwrap();
    assert_eq!((stopped.state.as_str(), stopped.version), ("stopped", 4));
    assert!(store.job_start(99).await.unwrap().is_none());
}

async fn changes_and_deletions_are_seen_by_polling(db: TestDb) {
    let store = db.migrated_store().await;
    let before = store.now_ms().await.unwrap() - 1;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    store.job_insert(2, 0, &job("b"), true).await.unwrap();
    let changes = store
        .jobs_changed_since(before, i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(
        changes
            .changed
            .iter()
            .map(|j| j.job_id)
            .collect::<Vec<_>>()
            .len(),
        2
    );
    assert!(changes.deleted.is_empty());
    assert!(store.job_delete(1).await.unwrap());
    assert!(!store.job_delete(1).await.unwrap());
    let changes = store
        .jobs_changed_since(before, i64::MAX, 100)
        .await
        .unwrap();
    assert_eq!(changes.deleted, vec![1]);
    assert_eq!(
        changes.changed.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![2]
    );
    let later = store
        .jobs_changed_since(changes.now_ms + 1, i64::MAX, 100)
        .await
        .unwrap();
    assert!(later.changed.is_empty() && later.deleted.is_empty());

    // A burst larger than a page is read page after page, each job once, even when many
    // share one millisecond.
    let burst: Vec<(i64, i64, JobWrite)> = (10..17)
        .map(|i| (i, 0, job(&format!("burst-{i}"))))
        .collect();
    store.jobs_import(&burst, true).await.unwrap();
    let (mut since, mut after) = (changes.now_ms - 1, i64::MAX);
    let mut seen = Vec::new();
    for _ in 0..10 {
        let page = store.jobs_changed_since(since, after, 3).await.unwrap();
        seen.extend(page.changed.iter().map(|j| j.job_id));
        match page.changed.last() {
            Some(last) if page.changed.len() == 3 => {
                (since, after) = (last.updated_at_ms, last.job_id)
            }
            _ => break,
        }
    }
    assert_eq!(seen, (10..17).collect::<Vec<_>>());
}

async fn a_claim_inserts_one_run_per_instant_and_advances_the_job(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let outcomes = store
        .runs_claim("n1", &[claim(1, 1, 1_000), claim(1, 1, 2_000)])
        .await
        .unwrap();
    assert_eq!(outcomes, vec![ClaimOutcome::Claimed, ClaimOutcome::Claimed]);
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().last_fired_at_ms,
        Some(2_000)
    );
    // The same instants again (a second owner, a retry): nothing new.
    let again = store
        .runs_claim("n1", &[claim(1, 1, 2_000), claim(1, 1, 1_000)])
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
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let stale_epoch = RunClaim {
        epoch: 0,
        ..claim(1, 1, 1_000)
    };
    assert_eq!(
        store.runs_claim("n1", &[stale_epoch]).await.unwrap(),
        vec![ClaimOutcome::Fenced]
    );
    assert_eq!(
        store.runs_claim("n2", &[claim(1, 1, 1_000)]).await.unwrap(),
        vec![ClaimOutcome::Fenced]
    );
    assert!(store.runs_of_job(1, None, 10).await.unwrap().is_empty());
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().last_fired_at_ms,
        None
    );
}

async fn a_claim_for_a_changed_or_stopped_job_is_stale(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    store.job_update(1, 1, &job("a")).await.unwrap();
    assert_eq!(
        store.runs_claim("n1", &[claim(1, 1, 1_000)]).await.unwrap(),
        vec![ClaimOutcome::Stale]
    );
    assert_eq!(
        store.runs_claim("n1", &[claim(1, 2, 1_000)]).await.unwrap(),
        vec![ClaimOutcome::Claimed]
    );
    store.job_stop(1).await.unwrap();
    assert_eq!(
        store.runs_claim("n1", &[claim(1, 3, 2_000)]).await.unwrap(),
        vec![ClaimOutcome::Stale]
    );
    assert_eq!(store.runs_of_job(1, None, 10).await.unwrap().len(), 1);
}

async fn overlap_rules_decide_the_state_of_a_claimed_run(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let unfinished = RunClaim {
        state: run_state::PENDING,
        ..claim(1, 1, 1_000)
    };
    store.runs_claim("n1", &[unfinished]).await.unwrap();
    let with = |at, overlap| RunClaim {
        overlap,
        ..claim(1, 1, at)
    };
    store
        .runs_claim(
            "n1",
            &[
                with(2_000, OverlapRule::Skip),
                with(3_000, OverlapRule::Queue),
            ],
        )
        .await
        .unwrap();
    let states = |runs: Vec<carillon_server::store::RunRecord>| {
        runs.into_iter()
            .map(|r| (r.scheduled_at_ms, r.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        states(store.runs_of_job(1, None, 10).await.unwrap()),
        vec![
            (3_000, "queued".into()),
            (2_000, "skipped".into()),
            (1_000, "pending".into())
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
        replaced.state, "cancelled",
        "a replaced run's attempt stops too"
    );
    // Its executor's report comes too late to change anything.
    let failed = AttemptEnd {
        state: "failed",
        output: None,
        error: Some("late".into()),
        executor_id: Some("e1".into()),
        retry_after_ms: Some(0),
    };
    assert_eq!(
        store.attempt_end(attempt, &failed).await.unwrap(),
        carillon_server::store::AttemptEnded::AlreadyEnded
    );
    assert_eq!(
        states(store.runs_of_job(1, None, 10).await.unwrap()),
        vec![
            (4_000, "no_executor".into()),
            (3_000, "cancelled".into()),
            (2_000, "skipped".into()),
            (1_000, "cancelled".into())
        ]
    );
    store
        .runs_claim("n1", &[with(5_000, OverlapRule::Skip)])
        .await
        .unwrap();
    assert_eq!(
        store.runs_of_job(1, None, 1).await.unwrap()[0].state,
        "no_executor",
        "nothing unfinished"
    );
}

async fn a_one_shot_claim_marks_the_job_done(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("once"), true).await.unwrap();
    let last = RunClaim {
        job_done: true,
        ..claim(1, 1, 1_000)
    };
    store.runs_claim("n1", &[last]).await.unwrap();
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().state,
        job_state::DONE
    );
    assert!(store.jobs_in_partition(0).await.unwrap().is_empty());
}

async fn manual_runs_take_a_free_millisecond(db: TestDb) {
    let store = db.migrated_store().await;
    let record = store.job_insert(1, 0, &job("a"), false).await.unwrap();
    let first = store
        .run_insert_manual(&record, "n1", "no_executor", Some("m"))
        .await
        .unwrap();
    let second = store
        .run_insert_manual(&record, "n1", "no_executor", None)
        .await
        .unwrap();
    assert_ne!(first.scheduled_at_ms, second.scheduled_at_ms);
    assert_eq!((first.trigger_kind.as_str(), first.priority), ("manual", 7));
    assert_eq!(store.runs_of_job(1, None, 10).await.unwrap().len(), 2);
}

async fn a_claim_of_an_instant_a_manual_run_holds_advances_the_job_only(db: TestDb) {
    let store = owned(&db).await;
    let record = store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let manual = store
        .run_insert_manual(&record, "n1", "no_executor", Some("by hand"))
        .await
        .unwrap();
    let at = manual.scheduled_at_ms;
    let outcomes = store
        .runs_claim("n1", &[claim(1, 1, at), claim(1, 1, at + 1_000)])
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
    assert_eq!(held.trigger_kind, "manual");
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().last_fired_at_ms,
        Some(at + 1_000)
    );
}

async fn runs_claimed_ahead_start_at_once_and_fall_due_at_their_instant(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let now = store.now_ms().await.unwrap();
    let soon = now + 60_000;
    let mut ahead = claim(1, 1, soon);
    ahead.state = run_state::PENDING;
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
    assert_eq!(running.state, "running");
    assert_eq!(running.executor_id.as_deref(), Some("e1"));
    assert!(running.deadline_ms.is_some());
    assert_eq!(
        store.attempts_dispatched(&[id], "e2", 0).await.unwrap(),
        0,
        "only a pending attempt is marked"
    );
    assert_eq!(store.attempts_dispatched(&[], "e2", 0).await.unwrap(), 0);
}

async fn jobs_are_found_by_any_part_of_their_name_ignoring_case(db: TestDb) {
    let store = db.migrated_store().await;
    for (id, name) in [
        (1, "Nightly-ETL-eu"),
        (2, "nightly-etl-us"),
        (3, "weekly_etl%"),
        (4, "report"),
    ] {
        store.job_insert(id, 0, &job(name), false).await.unwrap();
    }
    let found = |text: &str| {
        let filter = JobFilter {
            name_contains: Some(text.to_owned()),
            order: JobOrder::NameAscending,
            limit: 10,
            ..JobFilter::default()
        };
        let store = Arc::clone(&store);
        async move {
            store
                .jobs_list(&filter)
                .await
                .unwrap()
                .into_iter()
                .map(|j| j.name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        found("etl").await,
        ["Nightly-ETL-eu", "nightly-etl-us", "weekly_etl%"]
    );
    assert_eq!(found("ETL-").await, ["Nightly-ETL-eu", "nightly-etl-us"]);
    assert_eq!(
        found("%").await,
        ["weekly_etl%"],
        "% is a character, not a wildcard"
    );
    assert_eq!(found("_etl").await, ["weekly_etl%"], "_ likewise");
    assert!(found("monthly").await.is_empty());
}

async fn finished_runs_are_counted_by_minute_and_late_first_dispatches_found(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let now = store.now_ms().await.unwrap();
    // Three instants: one two minutes ago (its dispatch now is late), two just past.
    let mut claims = Vec::new();
    for at in [now - 120_000, now - 2, now - 1] {
        let mut c = claim(1, 1, at);
        c.state = run_state::PENDING;
        c.message = None;
        claims.push(c);
    }
    let outcomes = store.runs_claim("n1", &claims).await.unwrap();
    assert!(outcomes.iter().all(|o| *o == ClaimOutcome::Claimed));
    let pending = store.runs_pending(&[0], 0, 10).await.unwrap();
    assert_eq!(pending.len(), 3);
    let starts: Vec<_> = pending
        .iter()
        .map(|r| (r.clone(), vec![shard(0, 1)]))
        .collect();
    assert_eq!(store.runs_start(&starts).await.unwrap(), 3);
    let due = store.attempts_due(&[0], 0, None, 10).await.unwrap();
    assert_eq!(due.len(), 3);
    for (i, d) in due.iter().enumerate() {
        let id = d.attempt.attempt_id;
        assert!(store.attempt_dispatched(id, "e1", 0).await.unwrap());
        let state = if i == 2 { "failed" } else { "succeeded" };
        let end = AttemptEnd {
            state,
            output: None,
            error: None,
            executor_id: Some("e1".into()),
            retry_after_ms: None,
        };
        store.attempt_end(id, &end).await.unwrap();
    }
    let late_run = due
        .iter()
        .find(|d| d.scheduled_at_ms == now - 120_000)
        .unwrap()
        .attempt
        .run_id;

    let counts = store
        .runs_finished_by_minute(now - 3_600_000, i64::MAX, 60_000)
        .await
        .unwrap();
    assert!(
        counts.iter().all(|c| c.minute_ms % 60_000 == 0),
        "{counts:?}"
    );
    let total = |state: &str| -> i64 {
        counts
            .iter()
            .filter(|c| c.state == state)
            .map(|c| c.runs)
            .sum()
    };
    assert_eq!((total("succeeded"), total("failed")), (2, 1), "{counts:?}");
    let late_total: i64 = counts.iter().map(|c| c.late).sum();
    assert_eq!(
        late_total, 1,
        "only the first dispatch 2 minutes late: {counts:?}"
    );
    let nobody_late: i64 = store
        .runs_finished_by_minute(now - 3_600_000, i64::MAX, i64::MAX)
        .await
        .unwrap()
        .iter()
        .map(|c| c.late)
        .sum();
    assert_eq!(nobody_late, 0);
    for (since, until) in [
        (now + 3_600_000, i64::MAX),
        (now - 3_600_000, now - 3_000_000),
    ] {
        assert!(
            store
                .runs_finished_by_minute(since, until, 60_000)
                .await
                .unwrap()
                .is_empty(),
            "nothing finished in [{since}, {until})"
        );
    }

    let late = store
        .runs_late(now - 3_600_000, i64::MAX, 60_000, 10)
        .await
        .unwrap();
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!(late[0].run.run_id, late_run);
    assert!(late[0].lateness_ms >= 120_000, "{late:?}");
    assert!(
        store
            .runs_late(now - 3_600_000, i64::MAX, 600_000, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

async fn shards_ending_at_once_end_their_run(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let now = store.now_ms().await.unwrap();
    for round in 0..20_i64 {
        let mut c = claim(1, 1, now - 100_000 + round);
        c.state = run_state::PENDING;
        c.message = None;
        store.runs_claim("n1", &[c]).await.unwrap();
        let pending = store.runs_pending(&[0], 0, 10).await.unwrap();
        store
            .runs_start(&[(pending[0].clone(), vec![shard(0, 2), shard(1, 2)])])
            .await
            .unwrap();
        let run_id = pending[0].run_id;
        let attempts = store.attempts_of_run(run_id).await.unwrap();
        let ends = attempts.iter().map(|a| {
            let store = Arc::clone(&store);
            let id = a.attempt_id;
            tokio::spawn(async move {
                let end = AttemptEnd {
                    state: "succeeded",
                    output: None,
                    error: None,
                    executor_id: Some("e1".into()),
                    retry_after_ms: None,
                };
                store.attempt_end(id, &end).await.unwrap()
            })
        });
        let ended: Vec<_> = futures_join(ends.collect()).await;
        let run = store.run_get(run_id).await.unwrap().unwrap();
        assert_eq!(run.state, "succeeded", "round {round}: {ended:?}");
        assert_eq!(
            ended
                .iter()
                .filter(
                    |e| **e == carillon_server::store::AttemptEnded::RunEnded("succeeded".into())
                )
                .count(),
            1,
            "round {round}: exactly one end ends the run: {ended:?}"
        );
    }
}

async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await.unwrap());
    }
    out
}

async fn claims_count_fired_instants_but_not_calendar_skips(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    let pending = |at| RunClaim {
        state: run_state::PENDING,
        message: None,
        ..claim(1, 1, at)
    };
    let skipped = |at| RunClaim {
        state: run_state::SKIPPED,
        message: Some("in calendar \"holidays\"".into()),
        overlap: OverlapRule::Queue,
        ..claim(1, 1, at)
    };
    // Set-based (overlap allow) and one by one (an overlap rule), in one batch and apart.
    store
        .runs_claim("n1", &[pending(1_000), pending(2_000), skipped(3_000)])
        .await
        .unwrap();
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
    assert_eq!(third.state, "skipped");
    assert!(third.finished_at_ms.is_some());
    // A job past its bounds is finished only at the version it was loaded at.
    assert!(!store.job_finish(1, 7).await.unwrap());
    assert!(store.job_finish(1, 1).await.unwrap());
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().state,
        job_state::DONE
    );
}

async fn a_backfill_step_is_fenced_by_epoch_and_cursor_and_fires_each_instant_once(db: TestDb) {
    let store = owned(&db).await;
    store.job_insert(1, 0, &job("a"), true).await.unwrap();
    // The instant 2_000 fired on schedule already.
    let fired = store
        .runs_claim(
            "n1",
            &[RunClaim {
                state: run_state::PENDING,
                ..claim(1, 1, 2_000)
            }],
        )
        .await
        .unwrap();
    assert_eq!(fired, [ClaimOutcome::Claimed]);
    let backfill = store.backfill_insert(1, 0, 1_000, 3_000, 2).await.unwrap();
    assert_eq!(backfill.cursor_ms, 999);
    assert_eq!(backfill.state, backfill_state::RUNNING);
    let step = |epoch, expected, instants: Vec<i64>, done| BackfillStep {
        backfill_id: backfill.backfill_id,
        partition_id: 0,
        epoch,
        expected_cursor_ms: expected,
        cursor_ms: *instants.last().unwrap(),
        instants: instants
            .into_iter()
            .map(|at| (at, run_state::PENDING, None))
            .collect(),
        priority: 5,
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
            .all(|r| r.trigger_kind != "backfill")
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
        (done.state.as_str(), done.fired, done.cursor_ms),
        (backfill_state::DONE, 2, 3_000)
    );
    let mut triggers: Vec<(i64, String)> = store
        .runs_of_job(1, None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.scheduled_at_ms, r.trigger_kind))
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
    assert!(!store.backfill_cancel(backfill.backfill_id).await.unwrap());
}
