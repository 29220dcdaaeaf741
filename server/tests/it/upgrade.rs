//! Upgrades carry data, on every backend: a database an earlier build filled through its own
//! API (jobs of every kind, runs fired, failed and sharded, a workflow run, tasks done and due,
//! a calendar, a run's logs; `tests/fixtures/upgrade/`, made by `make_fixture.py`) is loaded
//! into a fresh database; this version migrates it at start and shows every record as the
//! earlier build did, by id, and its jobs, workflows and due tasks fire.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::TestDb;
use support::executor::{Executor, node_env};
use support::node::{NodeProcess, NodeSpec};

for_engine!(
    postgres,
    Postgres,
    [an_earlier_builds_data_survives_the_upgrade]
);
for_engine!(mysql, Mysql, [an_earlier_builds_data_survives_the_upgrade]);
for_engine!(
    sqlite,
    Sqlite,
    [an_earlier_builds_data_survives_the_upgrade]
);

async fn an_earlier_builds_data_survives_the_upgrade(db: TestDb) {
    let dir = format!("{}/tests/fixtures/upgrade", env!("CARGO_MANIFEST_DIR"));
    let engine = db.engine.key();
    let dump = std::fs::read_to_string(format!("{dir}/{engine}.sql")).unwrap();
    let before: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{engine}.json")).unwrap())
            .unwrap();
    db.execute_script(&dump).await;

    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("upgraded", &db.url, home.path());
    spec.extra_env = node_env();
    let started = chrono::Utc::now();
    let node = NodeProcess::start(spec).await;

    the_records_read_as_before(&node, &before, started).await;
    they_still_fire(&node, &before).await;
}

async fn get(node: &NodeProcess, path: &str) -> Value {
    let (status, body) = node.call(Method::GET, path, None).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

async fn the_records_read_as_before(node: &NodeProcess, before: &Value, started: DateTime<Utc>) {
    let mut differences = Vec::new();
    let jobs = by_id(&get(node, "/api/v1/jobs?limit=100").await["jobs"]);
    for job in before["jobs"].as_array().unwrap() {
        let id = &job["id"];
        let now = jobs.get(&id.to_string()).unwrap_or(&Value::Null);
        let mut job = job.clone();
        if let Some(due) = passed_instant(&job, started) {
            // The instant passed while no node ran: this node fired it at start, as the
            // misfire policy says, and moved on (a one-shot is done).
            let next = now["next_fire_at"].as_str().map(instant);
            assert!(
                next.is_none_or(|next| next > due),
                "job {id} still due at {due}: {now}"
            );
            let job = job.as_object_mut().unwrap();
            job.remove("next_fire_at");
            job.remove("state");
        }
        compare(&job, now, &format!("job {id}"), &mut differences);
        assert_eq!(now["namespace"], "default", "{now}");
        let runs = by_id(&get(node, &format!("/api/v1/jobs/{id}/runs?limit=100")).await["runs"]);
        for run in before["runs"][id.to_string()].as_array().unwrap() {
            let now = runs.get(&run["id"].to_string()).unwrap_or(&Value::Null);
            compare(run, now, &format!("run {}", run["id"]), &mut differences);
        }
    }
    let workflows = by_id(&get(node, "/api/v1/workflows").await["workflows"]);
    for workflow in before["workflows"].as_array().unwrap() {
        let now = workflows
            .get(&workflow["id"].to_string())
            .unwrap_or(&Value::Null);
        let at = format!("workflow {}", workflow["id"]);
        compare(workflow, now, &at, &mut differences);
    }
    for run in before["workflow_runs"].as_array().unwrap() {
        let now = get(node, &format!("/api/v1/workflow-runs/{}", run["id"])).await;
        let at = format!("workflow run {}", run["id"]);
        compare(run, &now, &at, &mut differences);
    }
    let tasks = by_id(&get(node, "/api/v1/tasks?limit=100").await["items"]);
    for task in before["tasks"].as_array().unwrap() {
        let now = tasks.get(&task["id"].to_string()).unwrap_or(&Value::Null);
        let mut task = task.clone();
        let due = task["due_at"].as_str().map(instant);
        if task["state"] == "pending" && due.is_some_and(|due| due < started) {
            // Due while no node ran: this node may have fired it already.
            let task = task.as_object_mut().unwrap();
            for fired in ["state", "run_id", "ended_at"] {
                task.remove(fired);
            }
        }
        let at = format!("task {}", task["id"]);
        compare(&task, now, &at, &mut differences);
    }
    let calendars = get(node, "/api/v1/calendars").await;
    compare(
        &before["calendars"],
        &calendars["calendars"],
        "calendars",
        &mut differences,
    );
    for (run, detail) in before["run_details"].as_object().unwrap() {
        let now = get(node, &format!("/api/v1/runs/{run}")).await;
        compare(detail, &now, &format!("run {run}"), &mut differences);
    }
    for (run, logs) in before["logs"].as_object().unwrap() {
        let now = get(node, &format!("/api/v1/runs/{run}/logs")).await;
        compare(logs, &now, &format!("logs of run {run}"), &mut differences);
    }
    assert!(
        differences.is_empty(),
        "what the earlier build showed reads differently now:\n{}",
        differences.join("\n")
    );
}

async fn they_still_fire(node: &NodeProcess, before: &Value) {
    let _executor = Executor::start_registered(node, "py", "py-upgraded").await;
    let job = |name: &str| {
        before["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap_or_else(|| panic!("the fixture has no job {name}"))["id"]
            .clone()
    };
    let known = |id: &Value| before["runs"][id.to_string()].as_array().unwrap().len();

    // A one-shot instant that passed while no node ran fires once, as its misfire policy says.
    let catch_up = job("catch-up");
    let runs = succeeded_runs(node, &catch_up, 1).await;
    assert_eq!(runs.len(), 1, "{runs:?}");

    // A job stopped before the upgrade starts and fires again.
    let ticking = job("ticking");
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/jobs/{ticking}/start"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    succeeded_runs(node, &ticking, known(&ticking) + 1).await;

    // A manual sharded job: a new run has its three shards.
    let sharded = job("sharded");
    let (status, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{sharded}/trigger"),
            Some(json!({})),
        )
        .await;
    assert!(status == 201 || status == 202, "{run}");
    succeeded_runs(node, &sharded, known(&sharded) + 1).await;
    let run = get(node, &format!("/api/v1/runs/{}", run["id"])).await;
    assert_eq!(run["attempts"].as_array().unwrap().len(), 3, "{run}");

    // The workflow runs again, its steps resolved from the migrated definition.
    let etl = &before["workflows"][0]["id"];
    let (status, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/workflows/{etl}/trigger"),
            Some(json!({"params": {"date": "2026-12-01"}})),
        )
        .await;
    assert!(status == 201 || status == 202, "{run}");
    support::wait_for(
        Duration::from_secs(30),
        "the workflow run to succeed",
        || async {
            let run = get(node, &format!("/api/v1/workflow-runs/{}", run["id"])).await;
            (run["state"] == "succeeded").then_some(())
        },
    )
    .await;

    // The task that was due an hour later is due now, and runs once.
    support::wait_for(
        Duration::from_secs(30),
        "the task due-later to succeed",
        || async {
            let task = get(node, "/api/v1/tasks?key=due-later").await;
            (task["items"][0]["state"] == "succeeded").then_some(())
        },
    )
    .await;
}

/// Waits until `job` has `count` succeeded runs and returns them.
async fn succeeded_runs(node: &NodeProcess, job: &Value, count: usize) -> Vec<Value> {
    support::wait_for(
        Duration::from_secs(30),
        &format!("{count} succeeded runs of job {job}"),
        || async {
            let runs = get(node, &format!("/api/v1/jobs/{job}/runs?limit=100")).await;
            let done: Vec<Value> = runs["runs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["state"] == "succeeded")
                .cloned()
                .collect();
            (done.len() >= count).then_some(done)
        },
    )
    .await
}

/// The job's next instant as the earlier build showed it, when it is before `started`.
fn passed_instant(job: &Value, started: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let due = instant(job["next_fire_at"].as_str()?);
    (due < started).then_some(due)
}

fn instant(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn by_id(list: &Value) -> HashMap<String, Value> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|v| (v["id"].to_string(), v.clone()))
        .collect()
}

/// Lists where `now` differs from `before` in a field `before` has (fields added since are
/// not compared).
fn compare(before: &Value, now: &Value, at: &str, differences: &mut Vec<String>) {
    match (before, now) {
        (Value::Object(old), Value::Object(new)) => {
            for (field, value) in old {
                let next = new.get(field).unwrap_or(&Value::Null);
                compare(value, next, &format!("{at}.{field}"), differences);
            }
        }
        (Value::Array(old), Value::Array(new)) if old.len() == new.len() => {
            for (i, (a, b)) in old.iter().zip(new).enumerate() {
                compare(a, b, &format!("{at}[{i}]"), differences);
            }
        }
        _ if before == now => {}
        _ => differences.push(format!("{at}: was {before}, now {now}")),
    }
}
