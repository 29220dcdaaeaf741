//! Flow control end to end, on every backend, with a real executor: runs of jobs sharing a
//! key (per the value of an argument) never run more than `max_in_flight` at once, wait in
//! line and start oldest first, while another value's key runs beside them; a key that drops
//! ends the extra runs `skipped`, saying why; a rate limit starts so many runs per window and
//! the rest in the next; a bad `flow` document is refused naming its field. Tasks under a
//! `fifo` key run one at a time in the order they were due, and one that failed holds its key
//! until it is released, while other keys' tasks go on. A workflow's key counts its runs as
//! a whole, from their start to their last step's end, and a re-run of one that failed under
//! a `fifo` key takes the key ahead of the line.

use std::time::Duration;

use chrono::DateTime;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::TestDb;
use support::executor::{Executor, node_env};
use support::node::{NodeProcess, NodeSpec};
use support::runs::{ENDED, create_job, trigger};
use support::wait_for;

for_engine!(
    postgres,
    Postgres,
    [
        flow_keys_cap_runs_in_flight_and_per_window,
        fifo_task_keys_run_in_order_and_a_failure_holds_its_key,
        a_workflow_run_counts_under_its_key_until_its_last_step_ends
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        flow_keys_cap_runs_in_flight_and_per_window,
        fifo_task_keys_run_in_order_and_a_failure_holds_its_key,
        a_workflow_run_counts_under_its_key_until_its_last_step_ends
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        flow_keys_cap_runs_in_flight_and_per_window,
        fifo_task_keys_run_in_order_and_a_failure_holds_its_key,
        a_workflow_run_counts_under_its_key_until_its_last_step_ends
    ]
);

fn job(name: &str, handler: &str, args: Value, flow: Value) -> Value {
    json!({"name": name, "app": "flow-app", "handler": handler, "schedule": {"manual": true},
           "args": args, "flow": flow})
}

/// The run once it has ended (`skipped` included), after at most 60 s.
async fn finished(node: &NodeProcess, run: i64) -> Value {
    wait_for(
        Duration::from_secs(60),
        &format!("run {run} to end"),
        || async {
            let (_, detail) = node
                .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
                .await;
            let state = detail["state"].as_str().unwrap_or("");
            (ENDED.contains(&state) || state == "skipped").then_some(detail)
        },
    )
    .await
}

fn ms(run: &Value, field: &str) -> i64 {
    let text = run[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} of {run}"));
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|err| panic!("{field} {text}: {err}"))
        .timestamp_millis()
}

/// `(started, finished)` of each run, in the order given.
fn spans(runs: &[Value]) -> Vec<(i64, i64)> {
    runs.iter()
        .map(|r| (ms(r, "started_at"), ms(r, "finished_at")))
        .collect()
}

fn overlap(a: (i64, i64), b: (i64, i64)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

async fn flow_keys_cap_runs_in_flight_and_per_window(db: TestDb) {
    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, home.path());
    spec.extra_env = node_env();
    let node = NodeProcess::start(spec).await;
    let _executor = Executor::start_registered(&node, "flow-app", "flow-e1").await;

    // A bad document names its field, and nothing is created.
    let (status, body) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(job(
                "bad",
                "echo",
                json!({}),
                json!({"key": "sync", "max_in_flight": 0}),
            )),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("flow.max_in_flight"), "{body}");
    let (status, body) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(job(
                "bad-arg",
                "echo",
                json!({"region": "eu"}),
                json!({"key": "sync", "key_arg": "/customer", "max_in_flight": 1}),
            )),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("/customer is not in"), "{body}");

    // One run per customer at a time, across jobs; two customers side by side.
    let per_customer = json!({"key": "sync", "key_arg": "/customer", "max_in_flight": 1});
    let slow = |customer: &str| json!({"customer": customer, "seconds": 1});
    let acme_a = create_job(
        &node,
        job("acme-a", "slow", slow("acme"), per_customer.clone()),
    )
    .await;
    let acme_b = create_job(
        &node,
        job("acme-b", "slow", slow("acme"), per_customer.clone()),
    )
    .await;
    let globex = create_job(&node, job("globex", "slow", slow("globex"), per_customer)).await;
    let mut acme_runs = Vec::new();
    let mut globex_runs = Vec::new();
    for job in [acme_a, acme_b, acme_a] {
        acme_runs.push(trigger(&node, job).await);
    }
    for _ in 0..2 {
        globex_runs.push(trigger(&node, globex).await);
    }
    let waiting = wait_for(
        Duration::from_secs(20),
        "a run in line for its key",
        || async {
            let (_, run) = node
                .call(Method::GET, &format!("/api/v1/runs/{}", acme_runs[2]), None)
                .await;
            (run["state"] == "queued").then_some(run)
        },
    )
    .await;
    assert!(
        waiting["message"]
            .as_str()
            .is_some_and(|m| m.contains("in line for flow key sync/acme")),
        "{waiting}"
    );
    let mut acme = Vec::new();
    for run in &acme_runs {
        acme.push(finished(&node, *run).await);
    }
    let mut globex_done = Vec::new();
    for run in &globex_runs {
        globex_done.push(finished(&node, *run).await);
    }
    for run in acme.iter().chain(&globex_done) {
        assert_eq!(run["state"], "succeeded", "{run}");
    }
    let acme_spans = spans(&acme);
    for (i, a) in acme_spans.iter().enumerate() {
        for b in &acme_spans[i + 1..] {
            assert!(!overlap(*a, *b), "acme's runs overlap: {acme_spans:?}");
        }
    }
    assert!(
        acme_spans.windows(2).all(|w| w[0].0 < w[1].0),
        "acme's runs start in the order they came: {acme_spans:?}"
    );
    let globex_spans = spans(&globex_done);
    assert!(
        !overlap(globex_spans[0], globex_spans[1]),
        "{globex_spans:?}"
    );
    assert!(
        acme_spans
            .iter()
            .any(|a| globex_spans.iter().any(|g| overlap(*a, *g))),
        "another customer's key runs beside: {acme_spans:?} {globex_spans:?}"
    );

    // A key that drops: the runs that find it full end skipped, saying why.
    let exclusive = create_job(
        &node,
        job(
            "exclusive",
            "slow",
            json!({"seconds": 2}),
            json!({"key": "exclusive", "max_in_flight": 1, "on_full": "drop"}),
        ),
    )
    .await;
    let first = trigger(&node, exclusive).await;
    wait_for(
        Duration::from_secs(20),
        "the first run to start",
        || async {
            let (_, run) = node
                .call(Method::GET, &format!("/api/v1/runs/{first}"), None)
                .await;
            (run["state"] == "running").then_some(())
        },
    )
    .await;
    let second = trigger(&node, exclusive).await;
    let dropped = finished(&node, second).await;
    assert_eq!(dropped["state"], "skipped", "{dropped}");
    assert!(
        dropped["message"]
            .as_str()
            .is_some_and(|m| m.contains("flow key exclusive has 1 of its 1 runs in flight")),
        "{dropped}"
    );
    assert_eq!(finished(&node, first).await["state"], "succeeded");

    // Two starts per two-second window: five runs take three windows.
    let rated = create_job(
        &node,
        job(
            "rated",
            "echo",
            json!({}),
            json!({"key": "partner-api", "rate": {"limit": 2, "per_ms": 2000}}),
        ),
    )
    .await;
    let mut rated_runs = Vec::new();
    for _ in 0..5 {
        rated_runs.push(trigger(&node, rated).await);
    }
    let mut starts = Vec::new();
    for run in &rated_runs {
        let run = finished(&node, *run).await;
        assert_eq!(run["state"], "succeeded", "{run}");
        starts.push(ms(&run, "started_at"));
    }
    starts.sort_unstable();
    // The window opens at the first admission, just before the first start.
    let slack = 300;
    assert!(starts[2] - starts[0] >= 2_000 - slack, "{starts:?}");
    assert!(starts[4] - starts[0] >= 4_000 - slack, "{starts:?}");
    assert!(starts[4] - starts[0] < 9_000, "{starts:?}");

    // The policy reads back as written, and `null` removes it.
    let (_, read) = node
        .call(Method::GET, &format!("/api/v1/jobs/{rated}"), None)
        .await;
    assert_eq!(read["flow"]["rate"]["limit"], 2, "{read}");
    let (status, patched) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{rated}"),
            Some(json!({"flow": null})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert!(patched["flow"].is_null(), "{patched}");
}

/// Enqueues `tasks`; their ids, in order.
async fn enqueue(node: &NodeProcess, tasks: Value) -> Vec<i64> {
    let (status, body) = node
        .call(Method::POST, "/api/v1/tasks", Some(json!({"tasks": tasks})))
        .await;
    assert_eq!(status, 201, "{body}");
    body["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_i64().unwrap())
        .collect()
}

/// The task once its run is in one of `states`.
async fn task_in(node: &NodeProcess, task: i64, states: &[&str]) -> Value {
    wait_for(
        Duration::from_secs(60),
        &format!("task {task} to be {states:?}"),
        || async {
            let (_, view) = node
                .call(Method::GET, &format!("/api/v1/tasks/{task}"), None)
                .await;
            states
                .contains(&view["state"].as_str().unwrap_or(""))
                .then_some(view)
        },
    )
    .await
}

async fn run_of(node: &NodeProcess, task: &Value) -> Value {
    let run = task["run_id"].as_i64().expect("a fired task's run");
    let (status, detail) = node
        .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
        .await;
    assert_eq!(status, 200, "{detail}");
    detail
}

async fn fifo_task_keys_run_in_order_and_a_failure_holds_its_key(db: TestDb) {
    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, home.path());
    spec.extra_env = node_env();
    let node = NodeProcess::start(spec).await;
    let _executor = Executor::start_registered(&node, "flow-app", "flow-e1").await;
    let fifo = json!({"key": "orders", "key_arg": "/customer", "fifo": true});
    let task = |handler: &str, customer: &str, step: u32| {
        json!({"app": "flow-app", "handler": handler, "flow": fifo,
               "args": {"customer": customer, "step": step, "seconds": 0.5}})
    };

    // One customer's failure holds its key; the others' tasks go on, each in order.
    let ids = enqueue(
        &node,
        json!([
            task("fail", "initech", 1),
            task("slow", "acme", 1),
            task("echo", "initech", 2),
            task("slow", "acme", 2),
            task("slow", "acme", 3),
            task("echo", "globex", 1),
        ]),
    )
    .await;
    let failed = task_in(&node, ids[0], &["failed"]).await;
    let mut acme = Vec::new();
    for id in [ids[1], ids[3], ids[4]] {
        acme.push(run_of(&node, &task_in(&node, id, &["succeeded"]).await).await);
    }
    let acme_spans = spans(&acme);
    assert!(
        acme_spans.windows(2).all(|w| w[0].1 <= w[1].0),
        "acme's tasks run one after the other, in order: {acme_spans:?}"
    );
    task_in(&node, ids[5], &["succeeded"]).await;
    let held = task_in(&node, ids[2], &["queued"]).await;
    let waiting = run_of(&node, &held).await;
    assert!(
        waiting["message"]
            .as_str()
            .is_some_and(|m| m.contains("in line for flow key orders/initech")),
        "{waiting}"
    );

    // A run that holds nothing cannot be released; the failed one can, once.
    let acme_run = acme[0]["id"].as_i64().unwrap();
    let (status, body) = node
        .call(
            Method::POST,
            &format!("/api/v1/runs/{acme_run}/release"),
            None,
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("holds no flow key"), "{body}");
    assert_eq!(run_of(&node, &failed).await["flow_key"], "orders/initech");
    let failed_run = failed["run_id"].as_i64().unwrap();
    let (status, body) = node
        .call(
            Method::POST,
            &format!("/api/v1/runs/{failed_run}/release"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["state"], "failed",
        "the released run stays as it ended"
    );
    task_in(&node, ids[2], &["succeeded"]).await;
    let (status, _) = node
        .call(
            Method::POST,
            &format!("/api/v1/runs/{failed_run}/release"),
            None,
        )
        .await;
    assert_eq!(status, 409, "released once");
}

/// The workflow run `id` once its state is one of `states`, after at most 60 s.
async fn workflow_run_in(node: &NodeProcess, id: &Value, states: &[&str]) -> Value {
    wait_for(
        Duration::from_secs(60),
        &format!("workflow run {id} to be {states:?}"),
        || async {
            let (status, run) = node
                .call(Method::GET, &format!("/api/v1/workflow-runs/{id}"), None)
                .await;
            (status == 200 && states.contains(&run["state"].as_str()?)).then_some(run)
        },
    )
    .await
}

async fn post_ok(node: &NodeProcess, path: &str, body: Value) -> Value {
    let (status, answer) = node.call(Method::POST, path, Some(body)).await;
    assert!((200..300).contains(&status), "{path}: {status} {answer}");
    answer
}

async fn a_workflow_run_counts_under_its_key_until_its_last_step_ends(db: TestDb) {
    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, home.path());
    spec.extra_env = node_env();
    let node = NodeProcess::start(spec).await;
    let _executor = Executor::start_registered(&node, "flow-app", "flow-e1").await;
    let manual = json!({"manual": true});

    // One nightly workflow run at a time: the next starts once the last step of the one
    // before has ended, in the order they were triggered.
    let nightly = post_ok(
        &node,
        "/api/v1/workflows",
        json!({"name": "nightly", "schedule": manual,
        "flow": {"key": "nightly", "max_in_flight": 1},
        "steps": [
          {"name": "extract", "app": "flow-app", "handler": "slow",
           "args": {"seconds": 0.5}},
          {"name": "load", "app": "flow-app", "handler": "echo", "needs": ["extract"]}
        ]}),
    )
    .await;
    assert_eq!(nightly["flow"]["key"], "nightly", "{nightly}");
    let trigger_path = format!("/api/v1/workflows/{}/trigger", nightly["id"]);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(post_ok(&node, &trigger_path, json!({})).await["id"].clone());
    }
    let waiting = workflow_run_in(&node, &runs[2], &["queued"]).await;
    assert!(
        waiting["message"]
            .as_str()
            .is_some_and(|m| m.contains("in line for flow key nightly")),
        "{waiting}"
    );
    let mut done = Vec::new();
    for run in &runs {
        done.push(workflow_run_in(&node, run, &["succeeded", "failed", "cancelled"]).await);
    }
    for run in &done {
        assert_eq!(run["state"], "succeeded", "{run}");
    }
    let nightly_spans = spans(&done);
    assert!(
        nightly_spans.windows(2).all(|w| w[0].1 <= w[1].0),
        "the workflow's runs one after the other, in order: {nightly_spans:?}"
    );

    // Under `fifo`, a failed workflow run holds the key; its re-run takes it ahead of the
    // runs in line, and a release lets the next one go.
    let ordered = post_ok(
        &node,
        "/api/v1/workflows",
        json!({"name": "ordered", "schedule": manual,
               "flow": {"key": "ordered", "max_in_flight": 1, "fifo": true},
               "steps": [{"name": "only", "app": "flow-app", "handler": "fail"}]}),
    )
    .await;
    let trigger_path = format!("/api/v1/workflows/{}/trigger", ordered["id"]);
    let first = post_ok(&node, &trigger_path, json!({})).await["id"].clone();
    workflow_run_in(&node, &first, &["failed"]).await;
    let second = post_ok(&node, &trigger_path, json!({})).await["id"].clone();
    workflow_run_in(&node, &second, &["queued"]).await;
    let again = post_ok(
        &node,
        &format!("/api/v1/workflow-runs/{first}/rerun"),
        json!({}),
    )
    .await;
    let again_done = workflow_run_in(&node, &again["id"], &["failed"]).await;
    assert_eq!(again_done["rerun_of"], first, "{again_done}");
    let still = workflow_run_in(&node, &second, &["queued"]).await;
    assert_eq!(
        still["state"], "queued",
        "held by the failed re-run: {still}"
    );
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/runs/{first}/release"), None)
        .await;
    assert_eq!(status, 409, "the key went to the re-run: {body}");
    let (status, body) = node
        .call(
            Method::POST,
            &format!("/api/v1/runs/{}/release", again["id"]),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    workflow_run_in(&node, &second, &["failed"]).await;
}
