//! Runs survive the node that claimed them: three nodes with a real executor, jobs firing every
//! second, the leader killed with `kill -9` and restarted. Every instant of the window has
//! exactly one run, and every run ends `succeeded`, including those claimed or dispatched by the
//! node that died. On Postgres and MariaDB. And an executor that takes a dispatch and never
//! answers holds up only its own runs, on every backend.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use support::db::TestDb;
use support::executor::{EXECUTOR_TOKEN, Executor, SilentExecutor, node_env};
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
for_engine!(
    postgres_silent,
    Postgres,
    [an_executor_that_never_answers_holds_up_only_its_own_runs]
);
for_engine!(
    sqlite_silent,
    Sqlite,
    [an_executor_that_never_answers_holds_up_only_its_own_runs]
);

/// A dispatch to an executor that takes it and never answers waits for the dispatch timeout
/// (a minute here); the runs due meanwhile go to a live executor at once, not after it.
async fn an_executor_that_never_answers_holds_up_only_its_own_runs(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("carillon.toml");
    std::fs::write(&config, "[dispatch]\nrequest_timeout_ms = 60000\n").unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env = node_env();
    spec.extra_env
        .push(("CARILLON_CONFIG", config.display().to_string()));
    let node = NodeProcess::start(spec).await;
    let _live = Executor::start_registered(&node, "py", "py-1").await;
    let mute = SilentExecutor::start().await;
    let register = |path: &'static str, body: serde_json::Value| {
        let node = &node;
        async move {
            let (status, answer) = node
                .call_as(EXECUTOR_TOKEN, Method::POST, path, Some(body))
                .await;
            assert_eq!(status, 200, "{path}: {answer}");
        }
    };
    register(
        "/api/v1/executors/register",
        mute.registration("mute", "mute-1"),
    )
    .await;
    // Its heartbeats go on (it is alive, only slow to answer).
    let beat = || {
        register(
            "/api/v1/executors/heartbeat",
            json!({"executor_id": "mute-1", "in_flight": []}),
        )
    };
    let mut jobs = Vec::new();
    for (name, app, handler) in [("stuck", "mute", "work"), ("echo", "py", "echo")] {
        let (status, job) = node
            .call(
                Method::POST,
                "/api/v1/jobs",
                Some(json!({"name": name, "app": app, "handler": handler,
                    "schedule": {"manual": true}})),
            )
            .await;
        assert_eq!(status, 201, "{job}");
        jobs.push(job["id"].clone());
    }
    let trigger = |job: &serde_json::Value| {
        let path = format!("/api/v1/jobs/{job}/trigger");
        let node = &node;
        async move {
            let (status, run) = node.call(Method::POST, &path, None).await;
            assert_eq!(status, 202, "{run}");
            run["id"].clone()
        }
    };
    let stuck = trigger(&jobs[0]).await;
    wait_for(
        Duration::from_secs(10),
        "the silent executor's offer",
        || async {
            beat().await;
            mute.heard_run(&stuck).then_some(())
        },
    )
    .await;
    for _ in 0..3 {
        let run = trigger(&jobs[1]).await;
        let path = format!("/api/v1/runs/{run}");
        wait_for(
            Duration::from_secs(20),
            "the live executor's run",
            || async {
                beat().await;
                let (_, detail) = node.call(Method::GET, &path, None).await;
                (detail["state"] == "succeeded").then_some(())
            },
        )
        .await;
    }
    let (_, detail) = node
        .call(Method::GET, &format!("/api/v1/runs/{stuck}"), None)
        .await;
    // Its offer is still unanswered, and was never sent again.
    assert_eq!(detail["attempts"][0]["state"], "pending", "{detail}");
    assert_eq!(mute.offers_of(&stuck), 1, "{}", mute.text());
}

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
