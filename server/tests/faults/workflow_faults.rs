//! Workflows through `kill -9`: workflows firing every two seconds, each a fan-out of slow
//! steps and a fan-in, while the node that owns them dies between steps and during a fan-in,
//! and then another. Every instant has exactly one workflow run, every workflow run ends
//! `succeeded` with each of its steps run exactly once, and no step run exists that its
//! workflow run does not know.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{Cluster, Database, instants, one_at_a_time};
use crate::invariants::{Verdict, each_at, runs, settle};
use crate::support::db::TestDb;

for_engine!(
    postgres,
    Postgres,
    [each_step_runs_once_through_kills_between_steps_and_in_a_fan_in]
);
for_engine!(
    mysql,
    Mysql,
    [each_step_runs_once_through_kills_between_steps_and_in_a_fan_in]
);

const WORKFLOWS: usize = 4;
const PARTS: usize = 6;

fn fan(name: &str) -> Value {
    let mut steps = vec![json!({"name": "begin", "app": "py", "handler": "echo"})];
    for i in 0..PARTS {
        steps.push(
            json!({"name": format!("part-{i}"), "app": "py", "handler": "slow",
                          "args": {"seconds": 0.4}, "needs": ["begin"],
                          "retry": {"max_attempts": 3, "initial_delay_ms": 100}}),
        );
    }
    steps.push(json!({"name": "join", "app": "py", "handler": "echo",
                      "needs": (0..PARTS).map(|i| format!("part-{i}")).collect::<Vec<_>>()}));
    steps.push(json!({"name": "end", "app": "py", "handler": "echo", "needs": ["join"]}));
    json!({"name": name, "schedule": {"cron": "*/2 * * * * *"}, "start": true, "steps": steps})
}

async fn each_step_runs_once_through_kills_between_steps_and_in_a_fan_in(test_db: TestDb) {
    let _turn = one_at_a_time().await;
    let scenario = format!("workflows through node kills ({:?})", test_db.engine);
    let db = Database::direct(test_db.engine, &test_db.url);
    let mut cluster = Cluster::start(&db, 3, |_| {}).await;
    let leader = Cluster::index(&cluster.leader().await);
    let steady = (leader + 2) % 3;
    let _executor = cluster.executor(steady, "py-1", &["--capacity", "256"]);
    let mut workflows = Vec::new();
    for i in 0..WORKFLOWS {
        let (status, created) = cluster.nodes[steady]
            .call(
                Method::POST,
                "/api/v1/workflows",
                Some(fan(&format!("fan-{i}"))),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        workflows.push(created["id"].as_i64().unwrap());
    }
    let from = cluster.firing_from(&workflows).await;
    // An even second: the workflows' instants.
    let from = from + (from / 1_000) % 2 * 1_000;

    // The owner of the first workflow's partition dies while its runs are in their fan-out
    // (the parts take 0.4 s); then, back, the leader dies too.
    let partition: i64 = db
        .scalar(
            "SELECT partition_id FROM jobs WHERE job_id = ?",
            &[workflows[0]],
        )
        .await;
    let owner = cluster
        .partitions()
        .await
        .into_iter()
        .find(|(p, _, _)| *p == partition)
        .and_then(|(_, _, owner)| owner)
        .unwrap();
    let victim = Cluster::index(&owner);
    db.sleep_until(from + 4_300).await;
    cluster.nodes[victim].kill9();
    db.sleep_until(from + 7_000).await;
    cluster.restart(victim).await;
    let leader = Cluster::index(&cluster.leader().await);
    db.sleep_until(from + 10_500).await;
    cluster.nodes[leader].kill9();
    db.sleep_until(from + 13_000).await;
    cluster.restart(leader).await;
    let to = from + 16_000;
    db.sleep_until(to + 500).await;
    let via = (leader + 1) % 3;
    for id in &workflows {
        let (status, answer) = cluster.nodes[via]
            .call(Method::POST, &format!("/api/v1/workflows/{id}/stop"), None)
            .await;
        assert_eq!(status, 200, "{answer}");
    }

    settle(&db, &workflows, from, to, Duration::from_secs(120)).await;
    let workflow_runs = runs(&db, &workflows, from, to).await;
    let verdict = Verdict::of(
        &workflow_runs,
        &each_at(&workflows, &instants(from, to, 2_000)),
    );
    let steps_per_run = (PARTS + 3) as i64;
    let mut wrong_steps = Vec::new();
    for run in &workflow_runs {
        let recorded = db
            .scalar(
                "SELECT COUNT(*) FROM step_runs s JOIN runs r ON r.run_id = s.run_id \
                 WHERE s.workflow_run_id = ? AND s.state = 'succeeded' AND r.state = 'succeeded'",
                &[run.run_id],
            )
            .await;
        if recorded != steps_per_run {
            wrong_steps.push((run.run_id, recorded));
        }
    }
    let step_runs_total = db
        .scalar("SELECT COUNT(*) FROM runs WHERE trigger_kind = 'step'", &[])
        .await;
    let step_runs_known = db
        .scalar(
            "SELECT COUNT(*) FROM step_runs WHERE run_id IS NOT NULL",
            &[],
        )
        .await;
    figures!(
        "{scenario}: {}; steps per run {steps_per_run}, workflow runs with other than that \
         many succeeded steps {}, step runs {step_runs_total} for {step_runs_known} recorded",
        verdict.figures(),
        wrong_steps.len()
    );
    verdict.assert_exactly_once(&scenario, true);
    assert!(
        wrong_steps.is_empty(),
        "{scenario}: workflow runs whose steps did not each succeed once: {:?}",
        &wrong_steps[..wrong_steps.len().min(5)]
    );
    assert_eq!(
        step_runs_total, step_runs_known,
        "{scenario}: step runs no workflow run knows (a step created twice)"
    );
}
