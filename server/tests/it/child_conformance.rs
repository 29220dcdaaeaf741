//! Child jobs in the store on PostgreSQL, MySQL/MariaDB and SQLite: the runs a run's ending
//! triggers are created in the transaction that ends it, once per (parent run, child job),
//! with the parent's run, state and output as input, whichever way the run ends.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::sync::Arc;

use carillon_server::states::{AttemptState, RunState};
use carillon_server::store::{
    AttemptEnd, AttemptEnded, ClaimOutcome, JobWrite, NewAttempt, RunRecord, Store,
};
use serde_json::{Value, json};
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

conformance!(
    a_run_that_ends_creates_each_child_once_with_its_output,
    shards_ending_at_once_create_the_children_once,
    a_run_without_an_executor_triggers_its_failure_children_and_a_cancelled_one_none,
    children_of_one_job_due_in_one_millisecond_take_distinct_instants,
);

const PARENT: i64 = 1;
const ON_SUCCESS: i64 = 2;
const ON_SUCCESS_TOO: i64 = 3;
const ON_FAILURE: i64 = 4;
const ALWAYS: i64 = 5;

/// Job 1 with children 2 and 3 on success, 4 on failure and 5 always; job 3 in partition 1.
async fn family(store: &Arc<dyn Store>) {
    let policy = json!({"children": {
        "on_success": [ON_SUCCESS, ON_SUCCESS_TOO],
        "on_failure": [ON_FAILURE],
        "always": [ALWAYS],
    }});
    store
        .job_insert(PARENT, 0, &with_policy("parent", &policy), true, None)
        .await
        .unwrap();
    for (id, partition) in [
        (ON_SUCCESS, 0),
        (ON_SUCCESS_TOO, 1),
        (ON_FAILURE, 0),
        (ALWAYS, 2),
    ] {
        store
            .job_insert(
                id,
                partition,
                &job_write(&format!("child-{id}")),
                false,
                None,
            )
            .await
            .unwrap();
    }
}

fn with_policy(name: &str, policy: &Value) -> JobWrite {
    JobWrite {
        policy_json: policy.to_string(),
        ..job_write(name)
    }
}

/// A run of `job_id` at `at`, started with `shards` attempts; the attempts' ids by shard.
async fn started_run(store: &Arc<dyn Store>, job_id: i64, at: i64, shards: i64) -> (i64, Vec<i64>) {
    assert_eq!(
        store
            .runs_claim("n1", &[claim(job_id, at, RunState::Pending)])
            .await
            .unwrap(),
        vec![ClaimOutcome::Claimed]
    );
    let run = store
        .runs_pending(&[0], 0, 100)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.job_id == job_id && r.scheduled_at_ms == at)
        .unwrap();
    let attempts: Vec<NewAttempt> = (0..shards)
        .map(|i| NewAttempt {
            shard_index: i,
            shard_total: shards,
            args_json: "null".into(),
            prefer_executor_id: None,
            delay_ms: 0,
        })
        .collect();
    assert!(store.run_start(&run, &attempts).await.unwrap());
    let mut ids: Vec<(i64, i64)> = store
        .attempts_of_run(run.run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.shard_index, a.attempt_id))
        .collect();
    ids.sort_unstable();
    (run.run_id, ids.into_iter().map(|(_, id)| id).collect())
}

fn ended(state: AttemptState, output: Option<&str>) -> AttemptEnd {
    AttemptEnd {
        state,
        output: output.map(str::to_owned),
        error: (state != AttemptState::Succeeded).then(|| "it broke".to_owned()),
        executor_id: Some("e1".into()),
        retry_after_ms: None,
        retry_to_same_executor: false,
        job_has_children: true,
    }
}

/// The runs of `job_id`, oldest first.
async fn runs_of(store: &Arc<dyn Store>, job_id: i64) -> Vec<RunRecord> {
    let mut runs = store.runs_of_job(job_id, None, 100).await.unwrap();
    runs.reverse();
    runs
}

async fn input_of(store: &Arc<dyn Store>, run_id: i64) -> Value {
    serde_json::from_str(&store.run_input(run_id).await.unwrap().unwrap()).unwrap()
}

async fn a_run_that_ends_creates_each_child_once_with_its_output(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    family(&store).await;
    let at = store.now_ms().await.unwrap() - 1_000;
    let (run_id, attempts) = started_run(&store, PARENT, at, 2).await;

    // One shard ending leaves the run going: no children yet.
    let first = store
        .attempt_end(
            attempts[0],
            &ended(AttemptState::Succeeded, Some(r#"{"rows":12}"#)),
        )
        .await
        .unwrap();
    assert_eq!(first, AttemptEnded::RunContinues);
    assert!(runs_of(&store, ON_SUCCESS).await.is_empty());

    let last = store
        .attempt_end(
            attempts[1],
            &ended(AttemptState::Succeeded, Some("plain text")),
        )
        .await
        .unwrap();
    assert_eq!(last, AttemptEnded::RunEnded(RunState::Succeeded));
    for (child, partition) in [(ON_SUCCESS, 0), (ON_SUCCESS_TOO, 1), (ALWAYS, 2)] {
        let runs = runs_of(&store, child).await;
        assert_eq!(runs.len(), 1, "one run of child {child}");
        let run = &runs[0];
        // One attempt with the child's arguments: it starts with its creation.
        assert_eq!(
            (run.trigger_kind.as_str(), run.state.as_str()),
            ("child", "running")
        );
        let attempts = store.attempts_of_run(run.run_id).await.unwrap();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(
            (attempts[0].state.as_str(), attempts[0].args_json.as_str()),
            ("pending", "null")
        );
        assert_eq!(run.partition_id, partition, "in the child's own partition");
        assert_eq!(run.epoch, 0);
        assert_eq!(
            input_of(&store, run.run_id).await,
            json!({"parent": {
                "run_id": run_id, "job_id": PARENT, "job": "parent", "state": "succeeded",
                "output": [{"rows": 12}, "plain text"],
            }})
        );
    }
    assert!(
        runs_of(&store, ON_FAILURE).await.is_empty(),
        "a success does not run the failure children"
    );
    let recorded = store.child_runs_of_run(run_id).await.unwrap();
    let children: Vec<i64> = recorded.iter().map(|c| c.child_job_id).collect();
    assert_eq!(children, vec![ON_SUCCESS, ON_SUCCESS_TOO, ALWAYS]);

    // The same report again changes nothing and creates nothing.
    assert_eq!(
        store
            .attempt_end(
                attempts[1],
                &ended(AttemptState::Succeeded, Some("plain text"))
            )
            .await
            .unwrap(),
        AttemptEnded::AlreadyEnded
    );
    assert_eq!(runs_of(&store, ON_SUCCESS).await.len(), 1);

    // A failed run of the parent runs the failure and the `always` children, and a child's
    // run of its own has no input.
    let (failed_run, attempts) = started_run(&store, PARENT, at + 1_000, 1).await;
    assert_eq!(
        store
            .attempt_end(attempts[0], &ended(AttemptState::Failed, None))
            .await
            .unwrap(),
        AttemptEnded::RunEnded(RunState::Failed)
    );
    let failure = runs_of(&store, ON_FAILURE).await;
    assert_eq!(failure.len(), 1);
    assert_eq!(
        input_of(&store, failure[0].run_id).await["parent"]["run_id"],
        json!(failed_run)
    );
    assert_eq!(runs_of(&store, ALWAYS).await.len(), 2);
    assert_eq!(runs_of(&store, ON_SUCCESS).await.len(), 1);
    assert_eq!(store.run_input(run_id).await.unwrap(), None);
}

async fn shards_ending_at_once_create_the_children_once(db: TestDb) {
    const SHARDS: i64 = 8;
    let store = db.store_owning_partition_0().await;
    family(&store).await;
    let at = store.now_ms().await.unwrap() - 1_000;
    let (run_id, attempts) = started_run(&store, PARENT, at, SHARDS).await;
    let endings = attempts.iter().map(|id| {
        let store = Arc::clone(&store);
        let id = *id;
        tokio::spawn(async move {
            store
                .attempt_end(id, &ended(AttemptState::Succeeded, None))
                .await
        })
    });
    let results: Vec<AttemptEnded> = futures_join(endings).await;
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(r, AttemptEnded::RunEnded(_)))
            .count(),
        1,
        "exactly one ending ends the run: {results:?}"
    );
    assert_eq!(runs_of(&store, ON_SUCCESS).await.len(), 1);
    assert_eq!(store.child_runs_of_run(run_id).await.unwrap().len(), 3);
}

async fn futures_join<T: Send + 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<Result<T, carillon_server::store::Error>>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        out.push(task.await.unwrap().unwrap());
    }
    out
}

async fn a_run_without_an_executor_triggers_its_failure_children_and_a_cancelled_one_none(
    db: TestDb,
) {
    let store = db.store_owning_partition_0().await;
    family(&store).await;
    let at = store.now_ms().await.unwrap() - 1_000;
    for (i, how) in ["no_executor", "no_executor_with_attempts", "cancelled"]
        .into_iter()
        .enumerate()
    {
        let at = at + i as i64 * 1_000;
        assert_eq!(
            store
                .runs_claim("n1", &[claim(PARENT, at, RunState::Pending)])
                .await
                .unwrap(),
            vec![ClaimOutcome::Claimed]
        );
        let run = store.runs_of_job(PARENT, None, 1).await.unwrap().remove(0);
        let ended = match how {
            "no_executor" => store
                .run_end(run.run_id, RunState::NoExecutor, Some("nowhere"))
                .await
                .unwrap(),
            "no_executor_with_attempts" => store
                .run_end_with_attempts(run.run_id, RunState::NoExecutor, "nowhere", None)
                .await
                .unwrap()
                .is_some(),
            _ => store.run_cancel(run.run_id, None).await.unwrap().is_some(),
        };
        assert!(ended, "{how}");
        let expected = if how == "cancelled" { 0 } else { 2 };
        assert_eq!(
            store.child_runs_of_run(run.run_id).await.unwrap().len(),
            expected,
            "children of a run ended {how}"
        );
    }
    assert_eq!(runs_of(&store, ON_FAILURE).await.len(), 2);
    assert_eq!(runs_of(&store, ALWAYS).await.len(), 2);
    assert!(runs_of(&store, ON_SUCCESS).await.is_empty());
    let input = input_of(&store, runs_of(&store, ON_FAILURE).await[0].run_id).await;
    assert_eq!(input["parent"]["state"], json!("no_executor"));
}

async fn children_of_one_job_due_in_one_millisecond_take_distinct_instants(db: TestDb) {
    let store = db.store_owning_partition_0().await;
    family(&store).await;
    // A second parent with the same child, and both parents' runs end in one transaction.
    let policy = json!({"children": {"on_success": [ON_SUCCESS]}});
    store
        .job_insert(6, 0, &with_policy("other parent", &policy), true, None)
        .await
        .unwrap();
    let at = store.now_ms().await.unwrap() - 1_000;
    let (first_run, first) = started_run(&store, PARENT, at, 1).await;
    let (second_run, second) = started_run(&store, 6, at, 1).await;
    let ends = store
        .attempts_end(&[
            (first[0], ended(AttemptState::Succeeded, None)),
            (second[0], ended(AttemptState::Succeeded, None)),
        ])
        .await
        .unwrap();
    assert!(ends.iter().all(|e| matches!(e, AttemptEnded::RunEnded(_))));
    let runs = runs_of(&store, ON_SUCCESS).await;
    assert_eq!(runs.len(), 2, "one child run per parent run");
    assert_ne!(runs[0].scheduled_at_ms, runs[1].scheduled_at_ms);
    let mut parents = Vec::new();
    for run in &runs {
        parents.push(input_of(&store, run.run_id).await["parent"]["run_id"].clone());
    }
    parents.sort_by_key(|p| p.as_i64());
    assert_eq!(parents, vec![json!(first_run), json!(second_run)]);
}
