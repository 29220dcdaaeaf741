//! Workflows end to end, on a real node with the Python executor, on each database: a DAG
//! with a fan-out, a fan-in, an existing job as a step and a step that runs only on failure;
//! the parameters and upstream outputs each step is given; failures that skip and fail;
//! cancellation; an edit that leaves a run in flight alone; a schedule firing each instant
//! once; and the graphs that are refused, naming their steps.
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
use support::node::{NodeProcess, NodeSpec};
use support::wait_for;
use support::webhook::Receiver;

for_engine!(
    postgres,
    Postgres,
    [workflows_run_their_steps_in_order_once_each]
);
for_engine!(mysql, Mysql, [workflows_run_their_steps_in_order_once_each]);
for_engine!(
    sqlite,
    Sqlite,
    [workflows_run_their_steps_in_order_once_each]
);

async fn post(node: &NodeProcess, path: &str, body: Value) -> Value {
    let (status, answer) = node.call(Method::POST, path, Some(body)).await;
    assert!(
        status == 201 || status == 202 || status == 200,
        "{path}: {status} {answer}"
    );
    answer
}

/// Cancels through `path`, which must answer 200; the answer.
async fn cancel(node: &NodeProcess, path: &str) -> Value {
    let (status, answer) = node.call(Method::POST, path, None).await;
    assert_eq!(status, 200, "{path}: {answer}");
    answer
}

/// The workflow run `id` once it has ended.
async fn ended(node: &NodeProcess, id: &Value) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("workflow run {id} to end"),
        || async {
            let (status, run) = node
                .call(Method::GET, &format!("/api/v1/workflow-runs/{id}"), None)
                .await;
            (status == 200 && !["pending", "queued", "running"].contains(&run["state"].as_str()?))
                .then_some(run)
        },
    )
    .await
}

/// Waits until the first step of workflow run `id` is running.
async fn first_step_running(node: &NodeProcess, id: &Value) {
    wait_for(
        Duration::from_secs(10),
        &format!("workflow run {id}'s first step to run"),
        || async {
            let (_, run) = node
                .call(Method::GET, &format!("/api/v1/workflow-runs/{id}"), None)
                .await;
            (run["steps"][0]["state"] == "running").then_some(())
        },
    )
    .await;
}

/// The run of workflow run `outer`'s first step, itself a workflow run, once its own first
/// step runs.
async fn inner_first_step_running(node: &NodeProcess, outer: &Value) -> Value {
    wait_for(
        Duration::from_secs(10),
        &format!("the first step of workflow run {outer}'s first step to run"),
        || async {
            let (_, run) = node
                .call(Method::GET, &format!("/api/v1/workflow-runs/{outer}"), None)
                .await;
            let inner = run["steps"][0]["run_id"].clone();
            let (_, inner_run) = node
                .call(Method::GET, &format!("/api/v1/workflow-runs/{inner}"), None)
                .await;
            (inner_run["steps"][0]["state"] == "running").then_some(inner)
        },
    )
    .await
}

fn step_states(run: &Value) -> HashMap<String, String> {
    run["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn states(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn workflows_run_their_steps_in_order_once_each(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let alerts = Receiver::start().await;
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env = executor::node_env();
    spec.extra_env
        .push(("CARILLON_ALERTS_CHECK_MS", "200".to_owned()));
    let node = NodeProcess::start(spec).await;
    let e1 = Executor::start_registered(&node, "py", "e1").await;
    let manual = json!({"manual": true});
    let publish = post(
        &node,
        "/api/v1/jobs",
        json!({"name": "publish", "app": "py", "handler": "echo", "schedule": manual,
               "args": {"to": "web"}}),
    )
    .await["id"]
        .clone();

    // A fan-out of two extracts, their fan-in, an existing job, and a step for failures.
    let etl = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "etl", "schedule": manual, "params": {"date": "default"},
        "steps": [
          {"name": "extract-eu", "app": "py", "handler": "echo", "args": {"region": "eu"}},
          {"name": "extract-us", "app": "py", "handler": "echo", "args": {"region": "us"}},
          {"name": "load", "app": "py", "handler": "echo",
           "needs": ["extract-eu", "extract-us"]},
          {"name": "report", "job": publish, "needs": ["load"]},
          {"name": "alert", "app": "py", "handler": "echo",
           "needs": [{"step": "load", "on": "failure"}]}
        ]}),
    )
    .await;
    assert_eq!(etl["steps"][3]["job"], publish, "{etl}");
    assert_eq!(etl["steps"][0]["args"], json!({"region": "eu"}), "{etl}");
    let (status, listed) = node.call(Method::GET, "/api/v1/jobs", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        listed["jobs"].as_array().unwrap().len(),
        1,
        "the jobs list holds publish only, not the workflow or its steps: {listed}"
    );
    let run = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", etl["id"]),
        json!({"params": {"date": "2026-11-25"}}),
    )
    .await;
    let done = ended(&node, &run["id"]).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(
        step_states(&done),
        states(&[
            ("extract-eu", "succeeded"),
            ("extract-us", "succeeded"),
            ("load", "succeeded"),
            ("report", "succeeded"),
            ("alert", "skipped"),
        ])
    );
    assert_eq!(done["params"], json!({"date": "2026-11-25"}));
    // What each step was given: the parameters, and its upstream steps' runs and outputs.
    let log = e1.log().await;
    let step_runs: HashMap<String, i64> = done["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| Some((s["name"].as_str()?.to_owned(), s["run_id"].as_i64()?)))
        .collect();
    let delivered = |step: &str| -> Vec<Value> {
        log.iter()
            .filter(|e| e["run_id"] == json!(step_runs[step]))
            .cloned()
            .collect()
    };
    for step in ["extract-eu", "extract-us", "load", "report"] {
        assert_eq!(delivered(step).len(), 1, "{step} delivered once");
    }
    let load = &delivered("load")[0]["input"];
    assert_eq!(load["params"], json!({"date": "2026-11-25"}), "{load}");
    assert_eq!(load["workflow"]["run_id"], run["id"], "{load}");
    assert_eq!(
        load["upstream"]["extract-eu"]["output"]["args"],
        json!({"region": "eu"}),
        "{load}"
    );
    assert_eq!(
        load["upstream"]["extract-us"]["output"]["args"],
        json!({"region": "us"}),
        "{load}"
    );
    let report = &delivered("report")[0];
    assert_eq!(report["job_id"], publish, "the existing job's run");
    assert_eq!(report["args"], json!({"to": "web"}));
    assert_eq!(
        report["input"]["upstream"]["load"]["run_id"],
        json!(step_runs["load"])
    );
    let (_, step_run) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{}", step_runs["load"]),
            None,
        )
        .await;
    assert_eq!(step_run["trigger"], "step", "{step_run}");

    // A failure skips what needed success, runs what takes failure, and fails the run when
    // nothing takes it.
    let failing = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "failing", "schedule": manual,
        "steps": [
          {"name": "a", "app": "py", "handler": "fail"},
          {"name": "b", "app": "py", "handler": "echo", "needs": ["a"]},
          {"name": "c", "app": "py", "handler": "echo", "needs": [{"step": "a", "on": "always"}]},
          {"name": "d", "app": "py", "handler": "echo", "needs": ["b", "c"]}
        ]}),
    )
    .await;
    let run = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", failing["id"]),
        json!({}),
    )
    .await;
    let done = ended(&node, &run["id"]).await;
    assert_eq!(
        step_states(&done),
        states(&[
            ("a", "failed"),
            ("b", "skipped"),
            ("c", "succeeded"),
            ("d", "skipped")
        ])
    );
    assert_eq!(
        done["state"], "succeeded",
        "c takes a's failure in hand: {done}"
    );
    let unhandled = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "unhandled", "schedule": manual,
        "alerts": {"webhook": alerts.url("/unhandled")},
        "steps": [
          {"name": "x", "app": "py", "handler": "fail"},
          {"name": "y", "app": "py", "handler": "echo", "needs": ["x"]}
        ]}),
    )
    .await;
    let run = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", unhandled["id"]),
        json!({}),
    )
    .await;
    let done = ended(&node, &run["id"]).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(
        step_states(&done),
        states(&[("x", "failed"), ("y", "skipped")])
    );
    // The workflow's own webhook hears of its failed run, as a job's does of a job's.
    let alert = alerts
        .wait("/unhandled", "the failed workflow run's alert", |b| {
            b["event"] == "run_failed"
        })
        .await;
    assert_eq!(alert["run"]["id"], run["id"], "{alert}");
    let metrics = node.metrics().await;
    assert!(
        metrics.contains("carillon_workflow_runs_finished_total{state=\"failed\"} 1"),
        "{metrics}"
    );

    // A re-run of a failed run runs its failed and skipped steps again, not its succeeded ones.
    let partial = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "partial", "schedule": manual, "params": {"n": 1},
        "steps": [
          {"name": "s1", "app": "py", "handler": "echo"},
          {"name": "s2", "app": "py", "handler": "fail", "needs": ["s1"]},
          {"name": "s3", "app": "py", "handler": "echo", "needs": ["s2"]}
        ]}),
    )
    .await;
    let run = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", partial["id"]),
        json!({"params": {"n": 2}}),
    )
    .await;
    let first = ended(&node, &run["id"]).await;
    assert_eq!(first["state"], "failed", "{first}");
    let again = post(
        &node,
        &format!("/api/v1/workflow-runs/{}/rerun", run["id"]),
        json!({}),
    )
    .await;
    assert_eq!(again["rerun_of"], run["id"], "{again}");
    let second = ended(&node, &again["id"]).await;
    assert_eq!(
        step_states(&second),
        states(&[("s1", "succeeded"), ("s2", "failed"), ("s3", "skipped")])
    );
    assert_eq!(second["params"], json!({"n": 2}), "the parameters it had");
    assert_eq!(
        second["steps"][0]["run_id"], first["steps"][0]["run_id"],
        "s1 kept its run"
    );
    assert_ne!(
        second["steps"][1]["run_id"], first["steps"][1]["run_id"],
        "s2 ran again"
    );
    let (status, problem) = node
        .call(
            Method::POST,
            &format!(
                "/api/v1/workflow-runs/{}/rerun",
                first["steps"][0]["run_id"]
            ),
            None,
        )
        .await;
    assert_eq!(status, 404, "a step's run is no workflow run: {problem}");

    // A run in flight keeps the definition it started with; a cancel stops it.
    let slow = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "slow", "schedule": manual,
        "steps": [
          {"name": "wait", "app": "py", "handler": "slow", "args": {"seconds": 3}},
          {"name": "after", "app": "py", "handler": "echo", "needs": ["wait"]}
        ]}),
    )
    .await;
    let first = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", slow["id"]),
        json!({}),
    )
    .await;
    wait_for(Duration::from_secs(10), "the slow step to run", || async {
        let (_, run) = node
            .call(
                Method::GET,
                &format!("/api/v1/workflow-runs/{}", first["id"]),
                None,
            )
            .await;
        (run["steps"][0]["state"] == "running").then_some(())
    })
    .await;
    let (status, edited) = node
        .call(
            Method::PUT,
            &format!("/api/v1/workflows/{}", slow["id"]),
            Some(json!({"name": "slow", "schedule": manual,
            "steps": [
              {"name": "wait", "app": "py", "handler": "slow", "args": {"seconds": 3}},
              {"name": "renamed", "app": "py", "handler": "echo", "needs": ["wait"]}
            ]})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    let done = ended(&node, &first["id"]).await;
    assert_eq!(
        step_states(&done),
        states(&[("wait", "succeeded"), ("after", "succeeded")]),
        "the edit left the run in flight alone"
    );
    let second = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", slow["id"]),
        json!({}),
    )
    .await;
    wait_for(
        Duration::from_secs(10),
        "the edited workflow's slow step to run",
        || async {
            let (_, run) = node
                .call(
                    Method::GET,
                    &format!("/api/v1/workflow-runs/{}", second["id"]),
                    None,
                )
                .await;
            (run["steps"][0]["state"] == "running").then_some(())
        },
    )
    .await;
    let cancelled = cancel(
        &node,
        &format!("/api/v1/workflow-runs/{}/cancel", second["id"]),
    )
    .await;
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(
        step_states(&cancelled),
        states(&[("wait", "cancelled"), ("renamed", "cancelled")])
    );
    let (status, _) = node
        .call(
            Method::POST,
            &format!("/api/v1/workflow-runs/{}/cancel", second["id"]),
            None,
        )
        .await;
    assert_eq!(status, 409, "a second cancel");

    // A workflow run that is another's step, cancelled: the outer run moves on and ends.
    let outer = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "outer", "schedule": manual,
        "steps": [
          {"name": "inner", "job": slow["id"]},
          {"name": "after", "app": "py", "handler": "echo", "needs": ["inner"]}
        ]}),
    )
    .await;
    let outer_run = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", outer["id"]),
        json!({}),
    )
    .await;
    let inner_run = inner_first_step_running(&node, &outer_run["id"]).await;
    cancel(&node, &format!("/api/v1/workflow-runs/{inner_run}/cancel")).await;
    let outer_done = ended(&node, &outer_run["id"]).await;
    assert_eq!(outer_done["state"], "failed", "{outer_done}");
    assert_eq!(
        step_states(&outer_done),
        states(&[("inner", "cancelled"), ("after", "skipped")])
    );
    // The outer run cancelled: the inner run's own steps are cancelled with it.
    let outer_run = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", outer["id"]),
        json!({}),
    )
    .await;
    let inner_run = inner_first_step_running(&node, &outer_run["id"]).await;
    cancel(
        &node,
        &format!("/api/v1/workflow-runs/{}/cancel", outer_run["id"]),
    )
    .await;
    let inner_done = ended(&node, &inner_run).await;
    assert_eq!(inner_done["state"], "cancelled", "{inner_done}");
    assert_eq!(
        step_states(&inner_done),
        states(&[("wait", "cancelled"), ("renamed", "cancelled")])
    );
    // Cancelled as any run (`/runs/{id}/cancel`), a workflow's run takes its steps with it.
    let third = post(
        &node,
        &format!("/api/v1/workflows/{}/trigger", slow["id"]),
        json!({}),
    )
    .await;
    first_step_running(&node, &third["id"]).await;
    cancel(&node, &format!("/api/v1/runs/{}/cancel", third["id"])).await;
    let third_done = ended(&node, &third["id"]).await;
    assert_eq!(
        step_states(&third_done),
        states(&[("wait", "cancelled"), ("renamed", "cancelled")])
    );

    // On a schedule: one workflow run per instant, each running its step.
    let ticking = post(
        &node,
        "/api/v1/workflows",
        json!({"name": "ticking", "schedule": {"cron": "* * * * * *"}, "start": true,
               "steps": [{"name": "only", "app": "py", "handler": "quiet"}]}),
    )
    .await;
    let runs = wait_for(
        Duration::from_secs(30),
        "three scheduled workflow runs",
        || async {
            let (_, page) = node
                .call(
                    Method::GET,
                    &format!("/api/v1/workflows/{}/runs?state=succeeded", ticking["id"]),
                    None,
                )
                .await;
            let runs = page["runs"].as_array()?.clone();
            (runs.len() >= 3).then_some(runs)
        },
    )
    .await;
    post(
        &node,
        &format!("/api/v1/workflows/{}/stop", ticking["id"]),
        json!({}),
    )
    .await;
    let instants: BTreeSet<&str> = runs
        .iter()
        .map(|r| r["scheduled_at"].as_str().unwrap())
        .collect();
    assert_eq!(instants.len(), runs.len(), "one workflow run per instant");
    for run in &runs {
        assert_eq!(run["trigger"], "schedule");
        let done = ended(&node, &run["id"]).await;
        assert_eq!(step_states(&done), states(&[("only", "succeeded")]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_with_cycles_unknown_or_self_needs_are_refused_naming_the_steps() {
    let node = support::node::Solo::start(|_| {}).await;
    let manual = json!({"manual": true});
    let refused = |body: Value| {
        let node = &node;
        async move {
            let (status, problem) = node
                .call(Method::POST, "/api/v1/workflows", Some(body))
                .await;
            assert_eq!(status, 400, "{problem}");
            (
                problem["field"].as_str().unwrap().to_owned(),
                problem["detail"].as_str().unwrap().to_owned(),
            )
        }
    };
    let step = |name: &str, needs: Value| json!({"name": name, "app": "py", "handler": "echo", "needs": needs});
    let (field, detail) = refused(json!({"name": "w", "schedule": manual, "steps": [
        step("a", json!([])), step("b", json!(["a", "c"])), step("c", json!(["b"]))
    ]}))
    .await;
    assert_eq!(field, "steps");
    assert!(
        detail.contains("b → c → b") || detail.contains("c → b → c"),
        "{detail}"
    );
    let (field, detail) = refused(json!({"name": "w", "schedule": manual, "steps": [
        step("a", json!(["a"]))
    ]}))
    .await;
    assert_eq!(
        (field.as_str(), detail.contains("itself")),
        ("steps[0].needs[0]", true)
    );
    let (field, detail) = refused(json!({"name": "w", "schedule": manual, "steps": [
        step("a", json!(["ghost"]))
    ]}))
    .await;
    assert_eq!(field, "steps[0].needs[0]");
    assert!(detail.contains("\"ghost\""), "{detail}");
    let (field, _) = refused(json!({"name": "w", "schedule": manual, "steps": [
        {"name": "a", "job": 1, "app": "py", "handler": "echo"}
    ]}))
    .await;
    assert_eq!(field, "steps[0].job");
    let (field, detail) = refused(json!({"name": "w", "schedule": manual, "steps": [
        {"name": "a", "job": 424242}
    ]}))
    .await;
    assert_eq!(field, "steps[0].job");
    assert!(detail.contains("no job 424242"), "{detail}");
    // A job named by a name no job has, or of the wrong type: the field, in plain words.
    let (field, detail) = refused(json!({"name": "w", "schedule": manual, "steps": [
        {"name": "a", "job": "no-such-job"}
    ]}))
    .await;
    assert_eq!(field, "steps[0].job");
    assert_eq!(
        detail,
        r#"steps[0].job: there is no job named "no-such-job""#
    );
    let (field, detail) = refused(json!({"name": "w", "schedule": manual, "steps": [
        {"name": "a", "app": "py", "handler": "echo", "timeout_ms": "soon"}
    ]}))
    .await;
    assert_eq!(field, "steps[0].timeout_ms");
    assert_eq!(
        detail, r#"steps[0].timeout_ms: must be an integer of 0 or more, not the string "soon""#,
        "never serde's own words"
    );
    let (_, list) = node.call(Method::GET, "/api/v1/workflows", None).await;
    assert_eq!(list["workflows"], json!([]), "nothing refused was stored");

    // A step names its job by name over REST, as `apply` files do; it is stored by id.
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": "nightly-report", "app": "py", "handler": "echo",
                        "schedule": manual}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let (status, workflow) = node
        .call(
            Method::POST,
            "/api/v1/workflows",
            Some(json!({"name": "by-name", "schedule": manual, "steps": [
                {"name": "report", "job": "nightly-report"},
                {"name": "after", "app": "py", "handler": "echo", "needs": ["report"]}
            ]})),
        )
        .await;
    assert_eq!(status, 201, "{workflow}");
    assert_eq!(workflow["steps"][0]["job"], job["id"], "{workflow}");
    // A workflow's own step (a hidden job) is not a job to name, by name as by id.
    let hidden = format!("workflow {} v1 after", workflow["id"]);
    let (field, detail) = refused(json!({"name": "w2", "schedule": manual, "steps": [
        {"name": "a", "job": hidden}
    ]}))
    .await;
    assert_eq!(field, "steps[0].job");
    assert!(detail.contains("another workflow's step"), "{detail}");
}
