//! Namespaces in storage, on every backend: what existed before them moves to `default`;
//! names and keys are unique within a namespace, not across; a run carries its job's or
//! task's namespace, written with the run (no read on the fire path).
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use carillon_server::states::RunState;
use carillon_server::store::{
    Enqueued, Error, JobFilter, JobWrite, NamespaceId, PartitionEpoch, RunClaim, TaskWrite,
};
use support::db::TestDb;
use support::records::{claim, job_write};

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        for_engine!(postgres, Postgres, [$($test),*]);
        for_engine!(mysql, Mysql, [$($test),*]);
        for_engine!(sqlite, Sqlite, [$($test),*]);
    };
}

conformance!(
    rows_stored_before_namespaces_are_in_the_default_one,
    names_and_keys_are_unique_within_a_namespace_not_across,
);

const DEFAULT: NamespaceId = NamespaceId::DEFAULT;

/// What a node of the release before namespaces (schema 14) stored: an app, a job with a run,
/// a task and a calendar.
const BEFORE_NAMESPACES: &str = r#"
INSERT INTO apps (app_name, description, created_at_ms) VALUES ('billing', '', 1);
INSERT INTO jobs (job_id, partition_id, name, app_name, handler_name, schedule_json, timezone,
    args_json, policy_json, state, version, created_at_ms, updated_at_ms)
    VALUES (7, 3, 'nightly-report', 'billing', 'report', '{"cron":"0 0 2 * * *"}', 'UTC',
    'null', '{}', 'running', 1, 1, 1);
INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, trigger_kind, state,
    priority, created_at_ms) VALUES (7, 1000, 3, 1, 'n1', 'schedule', 'succeeded', 5, 1);
INSERT INTO tasks (task_id, partition_id, task_key, app_name, handler_name, args_json,
    policy_json, priority, due_at_ms, state, created_at_ms)
    VALUES (5, 1, 'order-9', 'billing', 'invoice', 'null', '{}', 5, 2000, 'pending', 1);
INSERT INTO calendars (name, definition_json, version, created_at_ms, updated_at_ms)
    VALUES ('holidays', '{"dates":["2026-12-25"]}', 1, 1, 1);
"#;

async fn rows_stored_before_namespaces_are_in_the_default_one(db: TestDb) {
    db.migrate_to(14).await;
    db.execute_script(BEFORE_NAMESPACES).await;
    let store = db.migrated_store().await;

    assert_eq!(
        db.fetch_pairs(
            "SELECT namespace_id, COUNT(*) FROM namespaces WHERE name = 'default' \
             GROUP BY namespace_id",
            &[],
        )
        .await,
        [(1, 1)],
        "the migration creates `default` as namespace 1"
    );
    let job = store.job_get(7).await.unwrap().unwrap();
    assert_eq!(
        (job.name.as_str(), job.namespace_id),
        ("nightly-report", DEFAULT)
    );
    let runs = store.runs_of_job(7, None, 10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].scheduled_at_ms, runs[0].state, runs[0].namespace_id),
        (1_000, RunState::Succeeded, DEFAULT)
    );
    let task = store
        .task_by_key(DEFAULT, "order-9")
        .await
        .unwrap()
        .unwrap();
    assert_eq!((task.task_id, task.namespace_id), (5, DEFAULT));
    let calendar = store
        .calendar_get(DEFAULT, "holidays")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(calendar.definition_json, r#"{"dates":["2026-12-25"]}"#);
    assert_eq!(
        db.fetch_pairs(
            "SELECT namespace_id, COUNT(*) FROM apps GROUP BY namespace_id",
            &[]
        )
        .await,
        [(1, 1)]
    );
    // The old unique name is gone, the per-namespace one holds.
    let again = store
        .job_insert(8, 0, &job_write("nightly-report"), false, None)
        .await
        .unwrap_err();
    assert!(matches!(again, Error::Conflict { .. }), "{again}");
}

fn task(task_id: i64, namespace_id: NamespaceId, key: &str) -> TaskWrite {
    TaskWrite {
        task_id,
        partition_id: 0,
        namespace_id,
        key: Some(key.to_owned()),
        app_name: "billing".to_owned(),
        handler_name: "invoice".to_owned(),
        args_json: "null".to_owned(),
        policy_json: "{}".to_owned(),
        priority: 5,
        due_at_ms: 1_000,
    }
}

async fn names_and_keys_are_unique_within_a_namespace_not_across(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    db.execute_script(
        "INSERT INTO namespaces (name, description, created_at_ms) VALUES ('team-b', '', 0);",
    )
    .await;
    assert_eq!(
        db.fetch_pairs(
            "SELECT namespace_id, COUNT(*) FROM namespaces GROUP BY namespace_id \
             ORDER BY namespace_id",
            &[]
        )
        .await,
        [(1, 1), (2, 1)],
        "a new namespace's id follows default's"
    );
    let b = NamespaceId(2);
    let in_b = |name: &str| JobWrite {
        namespace_id: b,
        ..job_write(name)
    };

    // Jobs: the same name once per namespace.
    let ours = store
        .job_insert(4, 0, &job_write("nightly-report"), true, None)
        .await
        .unwrap();
    let theirs = store
        .job_insert(8, 0, &in_b("nightly-report"), true, None)
        .await
        .unwrap();
    assert_eq!((ours.namespace_id, theirs.namespace_id), (DEFAULT, b));
    let taken = store
        .job_insert(12, 0, &in_b("nightly-report"), false, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&taken, Error::Conflict { what } if what.contains("nightly-report")),
        "{taken}"
    );
    let named = |ns| {
        let store = store.clone();
        async move {
            store
                .jobs_named(ns, &["nightly-report".to_owned()])
                .await
                .unwrap()
        }
    };
    assert_eq!(named(DEFAULT).await, [("nightly-report".to_owned(), 4)]);
    assert_eq!(named(b).await, [("nightly-report".to_owned(), 8)]);
    let listed = store
        .jobs_list(&JobFilter {
            namespace: Some(b),
            limit: 10,
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.iter().map(|j| j.job_id).collect::<Vec<_>>(), [8]);

    // Calendars: one `holidays` per namespace, each its own.
    let ours_json = r#"{"dates":["2026-12-25"]}"#;
    let theirs_json = r#"{"dates":["2026-07-04"]}"#;
    store
        .calendar_insert(DEFAULT, "holidays", ours_json, None)
        .await
        .unwrap();
    store
        .calendar_insert(b, "holidays", theirs_json, None)
        .await
        .unwrap();
    let taken = store
        .calendar_insert(b, "holidays", ours_json, None)
        .await
        .unwrap_err();
    assert!(matches!(taken, Error::Conflict { .. }), "{taken}");
    let read = |ns| {
        let store = store.clone();
        async move {
            store
                .calendar_get(ns, "holidays")
                .await
                .unwrap()
                .map(|c| c.definition_json)
        }
    };
    assert_eq!(read(b).await.as_deref(), Some(theirs_json));
    assert!(store.calendar_delete(b, "holidays", None).await.unwrap());
    assert_eq!(read(b).await, None);
    assert_eq!(read(DEFAULT).await.as_deref(), Some(ours_json));

    // Runs carry their job's namespace, claimed or manual.
    store
        .runs_claim(
            "n1",
            &[
                claim(4, 1_000, RunState::Pending),
                RunClaim {
                    namespace_id: b,
                    ..claim(8, 1_000, RunState::Pending)
                },
            ],
        )
        .await
        .unwrap();
    store
        .run_insert_manual(&theirs, "n1", RunState::Pending, None, None, None)
        .await
        .unwrap();
    let namespaces_of = |job_id| {
        let store = store.clone();
        async move {
            store
                .runs_of_job(job_id, None, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.namespace_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(namespaces_of(4).await, [DEFAULT]);
    assert_eq!(namespaces_of(8).await, [b, b]);

    // Task keys: one unfinished holder per namespace; a fired task's run is its namespace's.
    let enqueued = store
        .tasks_enqueue(
            &[task(21, DEFAULT, "order-9"), task(22, b, "order-9")],
            None,
        )
        .await
        .unwrap();
    assert_eq!(enqueued, [Enqueued::Created(21), Enqueued::Created(22)]);
    let again = store
        .tasks_enqueue(&[task(23, b, "order-9")], None)
        .await
        .unwrap();
    assert_eq!(again, [Enqueued::Existing(22)]);
    let fired = store
        .tasks_fire(
            "n1",
            &[PartitionEpoch {
                partition_id: 0,
                epoch: 1,
            }],
            5_000,
            10,
        )
        .await
        .unwrap();
    assert_eq!(fired.fired, 2);
    for (task_id, namespace) in [(21, DEFAULT), (22, b)] {
        let task = store.task_get(task_id).await.unwrap().unwrap();
        assert_eq!(task.namespace_id, namespace);
        let run = store.run_get(task.run_id.unwrap()).await.unwrap().unwrap();
        assert_eq!(run.namespace_id, namespace, "the run of task {task_id}");
    }
}
