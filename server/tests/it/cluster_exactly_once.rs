//! The promise itself: a three-node cluster with jobs firing every second, its leader and then a
//! follower killed with `kill -9` and restarted mid-run; every scheduled instant of the window
//! has exactly one run, none missing. On Postgres and on MariaDB.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use support::db::TestDb;
use support::node::{ClusterSnapshot, NodeProcess, NodeSpec};
use support::wait_for;

/// Jobs firing every second (2,000 fires a second across the cluster).
const JOBS: usize = 2_000;
const WINDOW_S: i64 = 24;

for_engine!(
    postgres,
    Postgres,
    [every_instant_runs_exactly_once_through_kills_and_restarts]
);
for_engine!(
    mysql,
    Mysql,
    [every_instant_runs_exactly_once_through_kills_and_restarts]
);

/// Nodes are started as n1, n2, n3, in that order.
fn index(id: &str) -> usize {
    id[1..].parse::<usize>().unwrap() - 1
}

async fn db_now(db: &TestDb) -> i64 {
    let clock = db
        .fetch_pairs("SELECT COUNT(*), MAX(heartbeat_at_ms) FROM nodes", &[])
        .await;
    clock[0].1
}

async fn settled(node: &NodeProcess, live: &[&str]) -> ClusterSnapshot {
    wait_for(Duration::from_secs(30), "a settled cluster", || async {
        node.cluster().await.filter(|s| s.is_settled_on(live))
    })
    .await
}

/// One such cluster at a time: two (Postgres and MariaDB) firing 2,000 jobs a second each on
/// the same 2 cores measure the machine, not the promise.
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn every_instant_runs_exactly_once_through_kills_and_restarts(db: TestDb) {
    let _alone = ONE_CLUSTER_AT_A_TIME.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        let mut spec = NodeSpec::fast(id, &db.url, dir.path());
        spec.partitions = 64;
        nodes.push(NodeProcess::start(spec).await);
    }
    let before = settled(&nodes[0], &["n1", "n2", "n3"]).await;

    // Create the jobs through all three nodes, eight at a time.
    let started = std::time::Instant::now();
    let mut created = 0;
    for chunk in (0..JOBS).collect::<Vec<_>>().chunks(8) {
        let calls = chunk.iter().map(|i| {
            let node = &nodes[i % 3];
            node.call(
                Method::POST,
                "/api/v1/jobs",
                Some(
                    json!({"name": format!("tick-{i}"), "app": "billing", "handler": "tick",
                            "schedule": {"cron": "* * * * * *"}, "start": true}),
                ),
            )
        });
        for (status, body) in futures_join(calls).await {
            assert_eq!(status, 201, "{body}");
            created += 1;
        }
    }
    eprintln!("created {created} jobs in {:?}", started.elapsed());

    // The window starts once every job is loaded and firing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let window_start = (db_now(&db).await / 1_000 + 1) * 1_000;
    let leader = before.leader.as_ref().unwrap().node_id.clone();

    tokio::time::sleep(Duration::from_secs(4)).await;
    let spec = nodes[index(&leader)].spec.clone();
    nodes[index(&leader)].kill9();
    eprintln!("killed the leader {leader}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let i = index(&leader);
    nodes[i] = NodeProcess::start(spec).await;

    tokio::time::sleep(Duration::from_secs(3)).await;
    let follower = ["n1", "n2", "n3"]
        .into_iter()
        .find(|id| *id != leader)
        .unwrap()
        .to_owned();
    let spec = nodes[index(&follower)].spec.clone();
    nodes[index(&follower)].kill9();
    eprintln!("killed the follower {follower}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let i = index(&follower);
    nodes[i] = NodeProcess::start(spec).await;

    let window_end = window_start + WINDOW_S * 1_000;
    let instants = WINDOW_S + 1;
    db.wait_fired_past(window_end).await;
    let per_job = db.runs_per_job(window_start, window_end).await;
    let total: i64 = per_job.iter().map(|(_, n)| n).sum();
    let wrong: Vec<_> = per_job.iter().filter(|(_, n)| *n != instants).collect();
    let distinct = db
        .fetch_pairs(
            "SELECT COUNT(*), COUNT(DISTINCT scheduled_at_ms) FROM runs WHERE scheduled_at_ms BETWEEN ? AND ? AND job_id = (SELECT MIN(job_id) FROM jobs)",
            &[window_start, window_end],
        )
        .await[0];
    let lateness = db
        .fetch_pairs(
            "SELECT MAX(created_at_ms - scheduled_at_ms), COUNT(CASE WHEN trigger_kind <> 'schedule' THEN 1 END) FROM runs WHERE scheduled_at_ms BETWEEN ? AND ?",
            &[window_start, window_end],
        )
        .await[0];
    eprintln!(
        "{:?}: {} jobs x {instants} instants = {total} runs expected {}; jobs with a wrong count: {}; \
         max lateness {} ms; runs not on schedule trigger: {}",
        db.engine,
        per_job.len(),
        JOBS as i64 * instants,
        wrong.len(),
        lateness.0,
        lateness.1
    );
    assert_eq!(per_job.len(), JOBS, "every job ran in the window");
    assert!(
        wrong.is_empty(),
        "jobs with missing or extra runs: {:?}",
        &wrong[..wrong.len().min(10)]
    );
    assert_eq!(total, JOBS as i64 * instants);
    assert_eq!(distinct.0, distinct.1, "no instant twice");
}

/// Runs the futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.collect();
    let mut outputs = Vec::with_capacity(handles.len());
    // Poll them together: join all in one select-free loop.
    let mut pinned: Vec<_> = handles.into_iter().map(Box::pin).collect();
    let mut done: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, fut) in done.iter_mut().zip(pinned.iter_mut()) {
            if slot.is_none() {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.extend(done.into_iter().flatten());
    outputs
}
