//! Child jobs end to end, on a real node with the Python executor, on each database: a
//! parent's runs trigger their children per outcome, each child run once with the parent's
//! run, state and output as the dispatch's `input`, plain successes included (they skip the
//! settle's fast path); and children that do not exist, are the job itself or lead back to it
//! are refused naming the jobs.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::executor::{self, Executor};
use support::node::{NodeProcess, NodeSpec, Solo};
use support::wait_for;

for_engine!(
    postgres,
    Postgres,
    [each_run_of_a_parent_triggers_its_children_once_with_its_output]
);
for_engine!(
    mysql,
    Mysql,
    [each_run_of_a_parent_triggers_its_children_once_with_its_output]
);
for_engine!(
    sqlite,
    Sqlite,
    [each_run_of_a_parent_triggers_its_children_once_with_its_output]
);

async fn create(node: &NodeProcess, job: Value) -> i64 {
    let (status, created) = node.call(Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_i64().unwrap()
}

/// Every run of job `id`, oldest first.
async fn runs_of(node: &NodeProcess, id: i64) -> Vec<Value> {
    let (status, page) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs/{id}/runs?limit=1000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let mut runs = page["runs"].as_array().unwrap().clone();
    runs.reverse();
    runs
}

fn finished(runs: &[Value]) -> bool {
    runs.iter()
        .all(|r| !["pending", "queued", "running"].contains(&r["state"].as_str().unwrap_or("")))
}

async fn each_run_of_a_parent_triggers_its_children_once_with_its_output(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env = executor::node_env();
    let node = NodeProcess::start(spec).await;
    let _executor = Executor::start_registered(&node, "py", "e1").await;
    let manual = json!({"manual": true});
    let load = create(
        &node,
        json!({"name": "load", "app": "py", "handler": "echo", "schedule": manual}),
    )
    .await;
    let alert = create(
        &node,
        json!({"name": "alert", "app": "py", "handler": "echo", "schedule": manual}),
    )
    .await;
    // `quiet` succeeds with no output: a plain success, which the settle otherwise ends in
    // its fast path.
    let tick = create(
        &node,
        json!({"name": "tick", "app": "py", "handler": "quiet",
               "schedule": {"cron": "* * * * * *"}, "children": {"on_success": [load]},
               "start": true}),
    )
    .await;
    let broken = create(
        &node,
        json!({"name": "broken", "app": "py", "handler": "fail", "schedule": manual,
               "children": {"on_success": [load], "on_failure": [alert]}}),
    )
    .await;
    let echoer = create(
        &node,
        json!({"name": "echoer", "app": "py", "handler": "echo", "schedule": manual,
               "args": {"region": "eu"}, "children": {"always": [alert]}}),
    )
    .await;
    let (status, job) = node
        .call(Method::GET, &format!("/api/v1/jobs/{tick}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(job["children"], json!({"on_success": [load]}), "{job}");

    let mut parent_runs = HashMap::new();
    for id in [broken, echoer] {
        let (status, run) = node
            .call(Method::POST, &format!("/api/v1/jobs/{id}/trigger"), None)
            .await;
        assert_eq!(status, 202, "{run}");
        parent_runs.insert(id, run["id"].as_i64().unwrap());
    }
    wait_for(Duration::from_secs(30), "three runs of tick", || async {
        let runs = runs_of(&node, tick).await;
        (runs.iter().filter(|r| r["state"] == "succeeded").count() >= 3).then_some(())
    })
    .await;
    let (status, _) = node
        .call(Method::POST, &format!("/api/v1/jobs/{tick}/stop"), None)
        .await;
    assert_eq!(status, 200);

    // Every run of tick ended, and then every child it triggered.
    let ticks: Vec<i64> = wait_for(Duration::from_secs(30), "tick's runs to end", || async {
        let runs = runs_of(&node, tick).await;
        finished(&runs).then(|| {
            runs.iter()
                .filter(|r| r["state"] == "succeeded")
                .map(|r| r["id"].as_i64().unwrap())
                .collect()
        })
    })
    .await;
    let (loads, alerts) = wait_for(Duration::from_secs(30), "the children to end", || async {
        let loads = runs_of(&node, load).await;
        let alerts = runs_of(&node, alert).await;
        (loads.len() == ticks.len() && alerts.len() == 2 && finished(&loads) && finished(&alerts))
            .then_some((loads, alerts))
    })
    .await;
    for run in loads.iter().chain(&alerts) {
        assert_eq!(run["trigger"], "child", "{run}");
        assert_eq!(run["state"], "succeeded", "{run}");
    }

    // What the executor was given: each load run names a distinct run of tick, and nothing
    // was delivered twice.
    let log = _executor.log().await;
    let delivered = |job: i64| -> Vec<Value> {
        log.iter()
            .filter(|e| e["job_id"] == job)
            .map(|e| e["input"].clone())
            .collect()
    };
    let load_parents: BTreeSet<i64> = delivered(load)
        .iter()
        .map(|input| {
            assert_eq!(input["parent"]["job"], "tick", "{input}");
            assert_eq!(input["parent"]["state"], "succeeded", "{input}");
            assert_eq!(input["parent"]["output"], Value::Null, "{input}");
            input["parent"]["run_id"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(
        delivered(load).len(),
        ticks.len(),
        "one delivery per child run"
    );
    assert_eq!(load_parents, ticks.iter().copied().collect::<BTreeSet<_>>());
    let mut alert_inputs = delivered(alert);
    alert_inputs.sort_by_key(|i| i["parent"]["job"].as_str().map(str::to_owned));
    assert_eq!(alert_inputs.len(), 2, "{alert_inputs:?}");
    let from_broken = &alert_inputs[0]["parent"];
    assert_eq!(
        (
            &from_broken["job"],
            &from_broken["state"],
            &from_broken["run_id"]
        ),
        (
            &json!("broken"),
            &json!("failed"),
            &json!(parent_runs[&broken])
        )
    );
    let from_echoer = &alert_inputs[1]["parent"];
    assert_eq!(from_echoer["state"], "succeeded");
    assert_eq!(from_echoer["output"]["args"], json!({"region": "eu"}));

    // The parent's run names its child's, and the child's run its input.
    let (_, parent) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{}", parent_runs[&broken]),
            None,
        )
        .await;
    let child_run = parent["children"][0]["run_id"].clone();
    assert_eq!(
        parent["children"],
        json!([{"job_id": alert, "run_id": child_run}]),
        "{parent}"
    );
    let (_, child) = node
        .call(Method::GET, &format!("/api/v1/runs/{child_run}"), None)
        .await;
    assert_eq!(
        child["input"]["parent"]["run_id"],
        json!(parent_runs[&broken]),
        "{child}"
    );

    // Its re-run is given the same input.
    let (status, again) = node
        .call(
            Method::POST,
            &format!("/api/v1/runs/{child_run}/rerun"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{again}");
    let (_, again) = node
        .call(Method::GET, &format!("/api/v1/runs/{}", again["id"]), None)
        .await;
    assert_eq!(again["input"], child["input"], "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_unknown_circular_or_the_job_itself_are_refused_naming_them() {
    let node = Solo::start(|_| {}).await;
    let manual = json!({"manual": true});
    let a = create(
        &node,
        json!({"name": "a", "app": "py", "handler": "echo", "schedule": manual}),
    )
    .await;
    let b = create(
        &node,
        json!({"name": "b", "app": "py", "handler": "echo", "schedule": manual,
               "children": {"on_success": [a]}}),
    )
    .await;
    let c = create(
        &node,
        json!({"name": "c", "app": "py", "handler": "echo", "schedule": manual,
               "children": {"always": [b]}}),
    )
    .await;
    let refused = |status: u16, problem: &Value, field: &str, words: &[&str]| {
        assert_eq!(status, 400, "{problem}");
        assert_eq!(problem["field"], field, "{problem}");
        let message = problem["detail"].as_str().unwrap();
        for word in words {
            assert!(message.contains(word), "{word:?} in {message:?}");
        }
    };

    // a → c → b → a
    let (status, problem) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{a}"),
            Some(json!({"children": {"on_failure": [c]}})),
        )
        .await;
    refused(
        status,
        &problem,
        "children",
        &[
            &format!("{a} (a)"),
            &format!("{c} (c)"),
            &format!("{b} (b)"),
        ],
    );
    let (status, problem) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{a}"),
            Some(json!({"children": {"on_success": [b, a]}})),
        )
        .await;
    refused(status, &problem, "children.on_success[1]", &["own child"]);
    let (status, problem) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": "d", "app": "py", "handler": "echo", "schedule": manual,
                        "children": {"on_success": [a, 999]}}),
            ),
        )
        .await;
    refused(status, &problem, "children.on_success[1]", &["no job 999"]);

    // Nothing refused was stored: a still has no children.
    let (_, stored) = node
        .call(Method::GET, &format!("/api/v1/jobs/{a}"), None)
        .await;
    assert_eq!(stored.get("children"), None, "{stored}");

    // A child is not deleted from under its parent.
    let (status, problem) = node
        .call(Method::DELETE, &format!("/api/v1/jobs/{a}"), None)
        .await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("{b} (b)")),
        "{problem}"
    );
    for id in [c, b, a] {
        let (status, problem) = node
            .call(Method::DELETE, &format!("/api/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, 204, "{problem}");
    }
}
