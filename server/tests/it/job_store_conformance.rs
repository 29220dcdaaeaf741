//! The job and run half of the storage conformance suite: the same bodies on Postgres,
//! MySQL/MariaDB and SQLite.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::sync::Arc;

use carillon_server::states::{AttemptState, JobKind, JobState, RunState};
use carillon_server::store::{
    AttemptEnd, ClaimOutcome, Error, JobFilter, JobInsert, JobKey, JobOrder, JobWrite, NamespaceId,
    Store,
};
use support::db::TestDb;
use support::records::{ended_claim, shard};

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        behind_pgbouncer!([$($test),*]);
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
    manual_runs_take_a_free_millisecond,
    jobs_are_found_by_any_part_of_their_name_ignoring_case,
    finished_runs_are_counted_by_minute_and_late_first_dispatches_found,
    shards_ending_at_once_end_their_run,
    a_state_this_version_does_not_know_is_an_error_naming_it,
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
        kind: JobKind::Job,
        namespace_id: NamespaceId::DEFAULT,
    }
}

/// A store whose partition 0 is owned by `n1` at epoch 1.
async fn owned(db: &TestDb) -> Arc<dyn Store> {
    db.store_owning_partition_0().await
}

async fn jobs_are_created_read_listed_and_paged(db: TestDb) {
    let store = db.migrated_store().await;
    for i in 1..=5 {
        store
            .job_insert(i, 0, &job(&format!("report_{i}")), i % 2 == 0, None)
            .await
            .unwrap();
    }
    store
        .job_insert(6, 1, &job("100%_done!"), false, None)
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
        .job_insert(1, 0, &job("nightly"), false, None)
        .await
        .unwrap();
    let err = store
        .job_insert(2, 0, &job("nightly"), true, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Conflict { what } if what.contains("nightly")),
        "{err}"
    );
    let err = store
        .job_insert(1, 0, &job("other"), true, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Conflict { what } if what.contains("id")),
        "{err}"
    );
    assert_eq!(
        store.job_get(1).await.unwrap().unwrap().state,
        JobState::Stopped
    );
    assert!(store.job_get(2).await.unwrap().is_none());
}

async fn an_import_stores_every_job_or_none(db: TestDb) {
    let store = db.migrated_store().await;
    let row = |id: i64, partition: i64, name: &str, start: bool| JobInsert {
        job_id: id,
        partition_id: partition,
        write: job(name),
        start,
    };
    // More rows than one statement carries, so the import spans several; every other one
    // started.
    let rows: Vec<JobInsert> = (1..=3_100)
        .map(|i| row(i, i % 4, &format!("imported-{i}"), i % 2 == 0))
        .collect();
    store.jobs_insert_many(&rows, None).await.unwrap();
    let some = store.jobs_get_many(&[1, 600, 1_200, 5_000]).await.unwrap();
    let mut ids: Vec<i64> = some.iter().map(|j| j.job_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 600, 1_200], "the absent id is left out");
    let j600 = some.iter().find(|j| j.job_id == 600).unwrap();
    assert_eq!(j600.name, "imported-600");
    assert_eq!(j600.partition_id, 0);
    assert_eq!(j600.state, JobState::Running);
    assert_eq!(j600.kind, JobKind::Job);
    assert!(
        j600.started_at_ms.is_some(),
        "a started job is anchored at its start"
    );
    let j1 = some.iter().find(|j| j.job_id == 1).unwrap();
    assert_eq!(j1.state, JobState::Stopped);
    assert!(j1.started_at_ms.is_none());
    assert_eq!(
        store.jobs_in_partition(0).await.unwrap().len(),
        775,
        "the started jobs of partition 0 (ids 4, 8, … 3,100)"
    );
    assert_eq!(
        store.job_id_max().await.unwrap(),
        Some(3_100),
        "the largest id, for a bulk create's next ids"
    );
    let mut named = store
        .jobs_named(
            NamespaceId::DEFAULT,
            &[
                "imported-3".to_owned(),
                "imported-1200".to_owned(),
                "nobody".to_owned(),
            ],
        )
        .await
        .unwrap();
    named.sort();
    assert_eq!(
        named,
        [
            ("imported-1200".to_owned(), 1_200),
            ("imported-3".to_owned(), 3)
        ]
    );
    let many: Vec<String> = (1..=1_100).map(|i| format!("imported-{i}")).collect();
    assert_eq!(
        store
            .jobs_named(NamespaceId::DEFAULT, &many)
            .await
            .unwrap()
            .len(),
        1_100
    );

    // One taken name fails the whole import: none of its other jobs is stored.
    let clash = vec![
        row(9_001, 0, "fresh-a", false),
        row(9_002, 0, "imported-7", false),
        row(9_003, 0, "fresh-b", false),
    ];
    let err = store.jobs_insert_many(&clash, None).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert!(
        store
            .jobs_get_many(&[9_001, 9_003])
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.job_get(7).await.unwrap().unwrap().name, "imported-7");
    assert!(store.jobs_get_many(&[]).await.unwrap().is_empty());
}

async fn an_update_applies_only_at_the_expected_version(db: TestDb) {
    let store = db.migrated_store().await;
    store
        .job_insert(1, 0, &job("a"), false, None)
        .await
        .unwrap();
    let mut changed = job("a");
    changed.schedule_json = r#"{"every":"5m"}"#.into();
    let updated = store
        .job_update(1, 1, &changed, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (updated.version, updated.schedule_json.as_str()),
        (2, r#"{"every":"5m"}"#)
    );
    assert!(
        store
            .job_update(1, 1, &job("a"), None)
            .await
            .unwrap()
            .is_none(),
        "stale version"
    );
    assert_eq!(store.job_get(1).await.unwrap().unwrap().version, 2);
    store
        .job_insert(2, 0, &job("b"), false, None)
        .await
        .unwrap();
    let clash = store.job_update(2, 1, &job("a"), None).await.unwrap_err();
    assert!(matches!(clash, Error::Conflict { .. }));
    let started = store.job_start(1, None).await.unwrap().unwrap();
    assert_eq!((started.state.as_str(), started.version), ("running", 3));
    let stopped = store.job_stop(1, None).await.unwrap().unwrap();
    assert_eq!((stopped.state.as_str(), stopped.version), ("stopped", 4));
    assert!(store.job_start(99, None).await.unwrap().is_none());
}

async fn changes_and_deletions_are_seen_by_polling(db: TestDb) {
    let store = db.migrated_store().await;
    let before = store.now_ms().await.unwrap() - 1;
    store.job_insert(1, 0, &job("a"), true, None).await.unwrap();
    store.job_insert(2, 0, &job("b"), true, None).await.unwrap();
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
    assert!(store.job_delete(1, None).await.unwrap());
    assert!(!store.job_delete(1, None).await.unwrap());
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
    let burst: Vec<JobInsert> = (10..17)
        .map(|i| JobInsert {
            job_id: i,
            partition_id: 0,
            write: job(&format!("burst-{i}")),
            start: true,
        })
        .collect();
    store.jobs_insert_many(&burst, None).await.unwrap();
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

async fn manual_runs_take_a_free_millisecond(db: TestDb) {
    let store = db.migrated_store().await;
    let record = store
        .job_insert(1, 0, &job("a"), false, None)
        .await
        .unwrap();
    let first = store
        .run_insert_manual(&record, "n1", RunState::NoExecutor, Some("m"), None, None)
        .await
        .unwrap();
    let second = store
        .run_insert_manual(&record, "n1", RunState::NoExecutor, None, None, None)
        .await
        .unwrap();
    assert_ne!(first.scheduled_at_ms, second.scheduled_at_ms);
    assert_eq!((first.trigger_kind.as_str(), first.priority), ("manual", 7));
    assert_eq!(store.runs_of_job(1, None, 10).await.unwrap().len(), 2);
}

/// A row written by a newer version (or by hand) with a state this one does not know reads as
/// an error naming the column's kind and the text, never as some default state; the row is
/// left as it was.
async fn a_state_this_version_does_not_know_is_an_error_naming_it(db: TestDb) {
    let store = db.migrated_store().await;
    let record = store
        .job_insert(1, 0, &job("a"), false, None)
        .await
        .unwrap();
    let run = store
        .run_insert_manual(&record, "n1", RunState::NoExecutor, None, None, None)
        .await
        .unwrap();
    db.execute_script(&format!(
        "UPDATE runs SET state = 'paused' WHERE run_id = {}; \
         UPDATE jobs SET state = 'sleeping' WHERE job_id = 1",
        run.run_id
    ))
    .await;
    let run_error = store.run_get(run.run_id).await.unwrap_err();
    assert!(
        matches!(run_error, Error::Unreadable { .. }),
        "{run_error:?}"
    );
    let run_error = run_error.to_string();
    assert!(
        run_error.contains(
            "column \"state\" is unreadable: `paused` is not a run state (expected one of: pending,"
        ),
        "{run_error}"
    );
    let job_error = store.job_get(1).await.unwrap_err().to_string();
    assert!(
        job_error
            .contains("`sleeping` is not a job state (expected one of: stopped, running, done)"),
        "{job_error}"
    );
    db.execute_script(&format!(
        "UPDATE runs SET state = 'failed' WHERE run_id = {}",
        run.run_id
    ))
    .await;
    let read = store.run_get(run.run_id).await.unwrap().unwrap();
    assert_eq!(read.state, RunState::Failed);
}

async fn jobs_are_found_by_any_part_of_their_name_ignoring_case(db: TestDb) {
    let store = db.migrated_store().await;
    for (id, name) in [
        (1, "Nightly-ETL-eu"),
        (2, "nightly-etl-us"),
        (3, "weekly_etl%"),
        (4, "report"),
    ] {
        store
            .job_insert(id, 0, &job(name), false, None)
            .await
            .unwrap();
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
    store.job_insert(1, 0, &job("a"), true, None).await.unwrap();
    let now = store.now_ms().await.unwrap();
    // Three instants: one two minutes ago (its dispatch now is late), two just past.
    let mut claims = Vec::new();
    for at in [now - 120_000, now - 2, now - 1] {
        let mut c = ended_claim(1, 1, at);
        c.state = RunState::Pending;
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
        let state = if i == 2 {
            AttemptState::Failed
        } else {
            AttemptState::Succeeded
        };
        let end = AttemptEnd {
            state,
            output: None,
            error: None,
            executor_id: Some("e1".into()),
            retry_after_ms: None,
            retry_to_same_executor: false,
            job_has_children: false,
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
            .filter(|c| c.state.as_str() == state)
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
    store.job_insert(1, 0, &job("a"), true, None).await.unwrap();
    let now = store.now_ms().await.unwrap();
    for round in 0..20_i64 {
        let mut c = ended_claim(1, 1, now - 100_000 + round);
        c.state = RunState::Pending;
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
                    state: AttemptState::Succeeded,
                    output: None,
                    error: None,
                    executor_id: Some("e1".into()),
                    retry_after_ms: None,
                    retry_to_same_executor: false,
                    job_has_children: false,
                };
                store.attempt_end(id, &end).await.unwrap()
            })
        });
        let ended: Vec<_> = futures_join(ends.collect()).await;
        let run = store.run_get(run_id).await.unwrap().unwrap();
        assert_eq!(run.state, RunState::Succeeded, "round {round}: {ended:?}");
        assert_eq!(
            ended
                .iter()
                .filter(
                    |e| **e == carillon_server::store::AttemptEnded::RunEnded(RunState::Succeeded)
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
