//! Delivery guarantees through `kill -9` of nodes under load:
//! - `exactly_once_effect` with the Rust SDK: jobs (two shards each) and tasks, while a
//!   follower and then the leader die and come back; every run succeeds once and the handler
//!   runs once per run and shard;
//! - `at_most_once` with an outside executor: a node and an executor die mid-window; no run
//!   and shard reaches an executor twice, every run ends, and what was lost is recorded lost.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use carillon_executor::{JobContext, JobError, job};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::{Cluster, Database, id_list, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, runs, settle};
use crate::support::db::TestDb;
use crate::support::executor;

for_engine!(
    postgres,
    Postgres,
    [
        exactly_once_effect_runs_each_handler_once_through_node_kills,
        at_most_once_reaches_no_executor_twice_through_node_and_executor_kills,
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        exactly_once_effect_runs_each_handler_once_through_node_kills,
        at_most_once_reaches_no_executor_twice_through_node_and_executor_kills,
    ]
);

/// How often the `effect_once` handler ran, per (run, shard).
static RAN: Mutex<Vec<(i64, u32, i64)>> = Mutex::new(Vec::new());

#[job(name = "effect_once")]
async fn effect_once(ctx: JobContext) -> Result<Value, JobError> {
    RAN.lock()
        .unwrap()
        .push((ctx.run_id(), ctx.shard().index, ctx.attempt_id()));
    // Long enough that deliveries are in flight when a node dies.
    tokio::time::sleep(Duration::from_millis(400)).await;
    Ok(json!({"ok": true}))
}

/// An SDK executor of app `sdk` talking to every node; stops with the token.
fn sdk_executor(cluster: &Cluster, stop: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let urls: Vec<String> = cluster.nodes.iter().map(|n| n.url("")).collect();
    let worker = carillon_executor::Executor::builder()
        .app("sdk")
        .admin_urls(urls)
        .executor_token(executor::EXECUTOR_TOKEN)
        .dispatch_secret(executor::SECRET)
        .executor_id("sdk-effect")
        .capacity(512)
        .build()
        .unwrap();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _ = worker
            .run_with_listener(listener, async move { stopped.cancelled().await })
            .await;
    })
}

/// Enqueues `per_second` tasks due at each instant of `at`, through node `via`; their run job
/// ids (`-task_id`) with each one's instant.
async fn tasks_at(
    cluster: &Cluster,
    via: usize,
    at: &[i64],
    per_second: usize,
    extra: Value,
) -> BTreeMap<i64, BTreeSet<i64>> {
    let mut batch = Vec::new();
    for instant in at {
        for _ in 0..per_second {
            let mut task = json!({"at": carillon_server::api::rfc3339(*instant).unwrap()});
            for (k, v) in extra.as_object().unwrap() {
                task[k] = v.clone();
            }
            batch.push((task, *instant));
        }
    }
    let body = json!({"tasks": batch.iter().map(|(t, _)| t.clone()).collect::<Vec<_>>()});
    let (status, answer) = cluster.nodes[via]
        .call(Method::POST, "/api/v1/tasks", Some(body))
        .await;
    assert_eq!(status, 201, "{answer}");
    answer["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&batch)
        .map(|(t, (_, instant))| (-t["id"].as_i64().unwrap(), BTreeSet::from([*instant])))
        .collect()
}

async fn exactly_once_effect_runs_each_handler_once_through_node_kills(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!(
        "exactly_once_effect through node kills ({:?})",
        test_db.engine
    );
    // The record of the scenario on the other backend (run ids start at 1 on each).
    RAN.lock().unwrap().clear();
    let db = Database::direct(test_db.engine, &test_db.url);
    let mut cluster = Cluster::start(&db, 3, |_| {}).await;
    let stop = CancellationToken::new();
    let worker = sdk_executor(&cluster, &stop);
    let bodies = (0..20)
        .map(|i| {
            json!({"name": format!("effect-{i}"), "app": "sdk", "handler": "effect_once",
                   "schedule": {"cron": "* * * * * *"}, "start": true,
                   "delivery": "exactly_once_effect", "sharding": {"count": 2},
                   "retry": {"max_attempts": 3, "initial_delay_ms": 100}})
        })
        .collect();
    let jobs = cluster.create_jobs(0, bodies).await;
    let from = cluster.firing_from(&jobs).await;
    let to = from + 12_000;
    let mut expected = each_at(&jobs, &instants(from, to, 1_000));
    let task_runs = tasks_at(
        &cluster,
        0,
        &instants(from, to, 1_000),
        10,
        json!({"app": "sdk", "handler": "effect_once", "delivery": "exactly_once_effect"}),
    )
    .await;
    expected.extend(task_runs.clone());

    // A follower dies 3 s in, the leader 7 s in; each comes back 2 s later.
    let leader = Cluster::index(&cluster.leader().await);
    let follower = (leader + 1) % 3;
    db.sleep_until(from + 3_000).await;
    cluster.nodes[follower].kill9();
    db.sleep_until(from + 5_000).await;
    cluster.restart(follower).await;
    db.sleep_until(from + 7_000).await;
    cluster.nodes[leader].kill9();
    db.sleep_until(from + 9_000).await;
    cluster.restart(leader).await;

    db.sleep_until(to).await;
    let watched: Vec<i64> = expected.keys().copied().collect();
    settle(&db, &watched, from, to, Duration::from_secs(90)).await;
    // Reports of the last runs reach a node; then the record is complete.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let runs = runs(&db, &watched, from, to).await;
    let verdict = Verdict::of(&runs, &expected);
    let mut ran: HashMap<(i64, u32), usize> = HashMap::new();
    let record = RAN.lock().unwrap().clone();
    for (run, shard, _) in &record {
        *ran.entry((*run, *shard)).or_default() += 1;
    }
    let run_ids: BTreeSet<i64> = runs.iter().map(|r| r.run_id).collect();
    let twice: Vec<_> = ran
        .iter()
        .filter(|((run, _), n)| run_ids.contains(run) && **n > 1)
        .collect();
    let shards_of = |job: i64| if job < 0 { 1 } else { 2 };
    let not_run: Vec<_> = runs
        .iter()
        .flat_map(|r| (0..shards_of(r.job_id)).map(move |s| (r.run_id, s)))
        .filter(|key| !ran.contains_key(key))
        .collect();
    let redelivered = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM attempts WHERE job_id IN ({}) AND (attempt_no > 1 \
                 OR state = 'lost')",
                id_list(&watched)
            ),
            &[],
        )
        .await;
    figures!(
        "{scenario}: {} jobs x 2 shards and {} tasks; {}; attempts delivered again or lost \
         {redelivered}; handler runs twice {}; never run {}",
        jobs.len(),
        task_runs.len(),
        verdict.figures(),
        twice.len(),
        not_run.len()
    );
    stop.cancel();
    let _ = worker.await;
    verdict.assert_exactly_once(&scenario, true);
    let first_twice: Vec<_> = twice
        .iter()
        .take(3)
        .map(|((run, shard), _)| {
            record
                .iter()
                .filter(|(r, s, _)| r == run && s == shard)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        twice.is_empty(),
        "{scenario}: {} handlers run twice, first (run, shard, attempt): {first_twice:?}",
        twice.len()
    );
    assert!(
        not_run.is_empty(),
        "{scenario}: shards never run: {not_run:?}"
    );
}

async fn at_most_once_reaches_no_executor_twice_through_node_and_executor_kills(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!(
        "at_most_once through node and executor kills ({:?})",
        test_db.engine
    );
    let db = Database::direct(test_db.engine, &test_db.url);
    let mut cluster = Cluster::start(&db, 3, |_| {}).await;
    let mut doomed = cluster.executor(0, "doomed", &["--capacity", "64"]);
    let steady = cluster.executor(1, "steady", &["--capacity", "64"]);
    // Half-second handlers, so the kills find deliveries in flight.
    let bodies = (0..20)
        .map(|i| {
            json!({"name": format!("once-{i}"), "app": "py", "handler": "slow",
                   "args": {"seconds": 0.5}, "schedule": {"cron": "* * * * * *"},
                   "start": true, "delivery": "at_most_once", "balance": "round_robin"})
        })
        .collect();
    let jobs = cluster.create_jobs(0, bodies).await;
    let from = cluster.firing_from(&jobs).await;
    let to = from + 10_000;

    let victim = (Cluster::index(&cluster.leader().await) + 1) % 3;
    db.sleep_until(from + 3_000).await;
    cluster.nodes[victim].kill9();
    db.sleep_until(from + 5_300).await;
    let doomed_log = doomed.log().await;
    doomed.kill9();
    db.sleep_until(from + 6_000).await;
    cluster.restart(victim).await;

    db.sleep_until(to).await;
    settle(&db, &jobs, from, to, Duration::from_secs(60)).await;
    let runs = runs(&db, &jobs, from, to).await;
    // A run of an at-most-once job may fail (lost), never run twice, never stay unfinished.
    let verdict = Verdict::of(&runs, &each_at(&jobs, &instants(from, to, 1_000)));
    let mut deliveries: HashMap<(i64, i64), usize> = HashMap::new();
    for entry in doomed_log.iter().chain(steady.log().await.iter()) {
        if let (Some(run), Some(shard)) =
            (entry["run_id"].as_i64(), entry["shard"]["index"].as_i64())
        {
            *deliveries.entry((run, shard)).or_default() += 1;
        }
    }
    let twice: Vec<_> = deliveries.iter().filter(|(_, n)| **n > 1).collect();
    let attempts_per_run = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM attempts a JOIN runs r ON r.run_id = a.run_id \
                 WHERE r.job_id IN ({}) AND a.attempt_no > 1",
                id_list(&jobs)
            ),
            &[],
        )
        .await;
    let lost = db
        .scalar(
            &format!(
                "SELECT COUNT(*) FROM attempts WHERE job_id IN ({}) AND state = 'lost'",
                id_list(&jobs)
            ),
            &[],
        )
        .await;
    figures!(
        "{scenario}: {}; deliveries {}, twice {}; second attempts {attempts_per_run}; \
         recorded lost {lost}",
        verdict.figures(),
        deliveries.len(),
        twice.len()
    );
    verdict.assert_exactly_once(&scenario, false);
    assert!(twice.is_empty(), "{scenario}: delivered twice: {twice:?}");
    assert_eq!(
        attempts_per_run, 0,
        "{scenario}: an at-most-once run was tried again"
    );
    assert!(
        lost > 0,
        "{scenario}: the executor's kill lost deliveries, recorded lost"
    );
}
