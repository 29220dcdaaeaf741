//! Runs survive the node that claimed them: three nodes with a real executor, jobs firing every
//! second, the leader killed with `kill -9` and restarted. Every instant of the window has
//! exactly one run, and every run ends `succeeded`, including those claimed or dispatched by the
//! node that died. On Postgres and MariaDB.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use support::db::TestDb;
use support::executor::{Executor, node_env};
use support::node::{NodeProcess, NodeSpec};
use support::wait_for;

const JOBS: i64 = 40;
const WINDOW_S: i64 = 14;

for_engine!(
    postgres,
    Postgres,
    [claimed_runs_finish_after_their_node_dies]
);
for_engine!(mysql, Mysql, [claimed_runs_finish_after_their_node_dies]);

async fn claimed_runs_finish_after_their_node_dies(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = Vec::new();
    for id in ["n1", "n2", "n3"] {
        let mut spec = NodeSpec::fast(id, &db.url, dir.path());
        spec.extra_env = node_env();
        nodes.push(NodeProcess::start(spec).await);
    }
    let settled = wait_for(Duration::from_secs(30), "a settled cluster", || async {
        nodes[0]
            .cluster()
            .await
            .filter(|s| s.is_settled_on(&["n1", "n2", "n3"]))
    })
    .await;
    let leader = settled.leader.unwrap().node_id;
    let victim: usize = leader[1..].parse::<usize>().unwrap() - 1;
    // The executor talks to a node that stays up.
    let steady = (victim + 1) % 3;
    let _executor = Executor::start(&nodes[steady], "py", "py-1", 1, &["--capacity", "64"]);
    for i in 0..JOBS {
        let (status, body) = nodes[steady]
            .call(
                Method::POST,
                "/api/v1/jobs",
                Some(json!({"name": format!("echo-{i}"), "app": "py",
                "handler": "echo", "schedule": {"cron": "* * * * * *"}, "start": true,
                "retry": {"max_attempts": 3, "initial_delay_ms": 100}})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let start = db
        .fetch_pairs("SELECT COUNT(*), MAX(heartbeat_at_ms) FROM nodes", &[])
        .await[0]
        .1;
    let window_start = (start / 1_000 + 1) * 1_000;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let spec = nodes[victim].spec.clone();
    nodes[victim].kill9();
    tokio::time::sleep(Duration::from_secs(4)).await;
    nodes[victim] = NodeProcess::start(spec).await;

    let window_end = window_start + WINDOW_S * 1_000;
    wait_for(Duration::from_secs(90), "every run of the window to end", || async {
        let open = db
            .fetch_pairs(
                "SELECT COUNT(*), COUNT(*) FROM runs WHERE scheduled_at_ms BETWEEN ? AND ? \
                 AND state IN ('pending', 'queued', 'running')",
                &[window_start, window_end],
            )
            .await[0]
            .0;
        let behind = db
            .fetch_pairs(
                "SELECT COUNT(*), COUNT(*) FROM jobs WHERE last_fired_at_ms IS NULL OR last_fired_at_ms < ?",
                &[window_end],
            )
            .await[0]
            .0;
        (open == 0 && behind == 0).then_some(())
    })
    .await;
    let per_job = db
        .fetch_pairs(
            "SELECT job_id, COUNT(*) FROM runs WHERE scheduled_at_ms BETWEEN ? AND ? \
             AND state = 'succeeded' GROUP BY job_id",
            &[window_start, window_end],
        )
        .await;
    let not_succeeded = db
        .fetch_pairs(
            "SELECT COUNT(*), COUNT(*) FROM runs WHERE scheduled_at_ms BETWEEN ? AND ? AND state <> 'succeeded'",
            &[window_start, window_end],
        )
        .await[0]
        .0;
    let instants = WINDOW_S + 1;
    let total: i64 = per_job.iter().map(|(_, n)| n).sum();
    eprintln!(
        "{:?}: {} jobs x {instants} instants: {total} runs succeeded (expected {}), {not_succeeded} not; killed {leader}",
        db.engine,
        per_job.len(),
        JOBS * instants
    );
    assert_eq!(not_succeeded, 0, "every run of the window succeeded");
    assert_eq!(per_job.len() as i64, JOBS);
    assert!(per_job.iter().all(|(_, n)| *n == instants), "{per_job:?}");
}
