//! Delivery guarantees end to end, on a real node with real executors:
//! - `at_most_once` is never retried, and a delivery whose executor died is recorded lost and
//!   never sent again, where `at_least_once` fails over to the next executor;
//! - `exactly_once_effect` with the Rust SDK: a delivery of work the executor did (or is
//!   doing) under the same effect key is answered from its record, and the handler runs once.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::collections::HashMap;
use std::time::Duration;

use carillon_executor::{JobContext, JobError, job};
use reqwest::Method;
use serde_json::{Value, json};
use support::executor::{self, Executor};
use support::node::{NodeProcess, Solo};
use support::wait_for;
use tokio_util::sync::CancellationToken;

/// How often `effect` ran, per run.
static EFFECTS: std::sync::Mutex<Vec<i64>> = std::sync::Mutex::new(Vec::new());

#[job(name = "effect")]
async fn effect(ctx: JobContext) -> Result<Value, JobError> {
    EFFECTS.lock().unwrap().push(ctx.run_id());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    Ok(json!({"done_for": ctx.run_id()}))
}

async fn enqueue(node: &NodeProcess, task: Value) -> Value {
    let (status, answer) = node.call(Method::POST, "/api/v1/tasks", Some(task)).await;
    assert_eq!(status, 201, "{answer}");
    answer["tasks"][0]["id"].clone()
}

/// The run of a task once it has ended, with its attempts.
async fn ended_run(node: &NodeProcess, task: &Value) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("task {task} to end"),
        || async {
            let (_, t) = node
                .call(Method::GET, &format!("/api/v1/tasks/{task}"), None)
                .await;
            if !["succeeded", "failed", "cancelled"].contains(&t["state"].as_str()?) {
                return None;
            }
            let (_, run) = node
                .call(Method::GET, &format!("/api/v1/runs/{}", t["run_id"]), None)
                .await;
            Some(run)
        },
    )
    .await
}

/// The state of each attempt of a run, in order.
fn attempt_states(run: &Value) -> Vec<String> {
    run["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["state"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_once_is_never_sent_twice_where_at_least_once_fails_over() {
    let node = Solo::start(|spec| spec.extra_env = executor::node_env()).await;
    let mut first = Executor::start_registered(&node, "py", "first").await;

    // Never tried again: a retry policy that says otherwise is refused, naming it.
    let (status, problem) = node
        .call(
            Method::POST,
            "/api/v1/tasks",
            Some(
                json!({"app": "py", "handler": "fail", "delivery": "at_most_once",
                        "retry": {"max_attempts": 3}}),
            ),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(
        problem["errors"][0]["field"], "retry.max_attempts",
        "{problem}"
    );
    let failing = enqueue(
        &node,
        json!({"app": "py", "handler": "fail", "delivery": "at_most_once"}),
    )
    .await;
    let run = ended_run(&node, &failing).await;
    assert_eq!(
        (&run["state"], attempt_states(&run)),
        (&json!("failed"), vec!["failed".to_owned()])
    );

    // Two slow tasks running on `first` when it dies: the at-most-once one is recorded lost
    // and never sent again; the at-least-once one goes to `second`.
    let at_most = enqueue(
        &node,
        json!({"app": "py", "handler": "slow", "args": {"seconds": 30}, "delivery": "at_most_once"}),
    )
    .await;
    let at_least = enqueue(
        &node,
        json!({"app": "py", "handler": "slow", "args": {"seconds": 4}}),
    )
    .await;
    wait_for(
        Duration::from_secs(10),
        "both to run on `first`",
        || async {
            let log = first.log().await;
            (log.iter().filter(|e| e["handler"] == "slow").count() == 2).then_some(())
        },
    )
    .await;
    first.kill9();
    let second = Executor::start_registered(&node, "py", "second").await;

    let run = ended_run(&node, &at_least).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(attempt_states(&run), ["lost", "succeeded"], "{run}");
    let run = ended_run(&node, &at_most).await;
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(attempt_states(&run), ["lost"], "{run}");
    let error = run["attempts"][0]["error"].as_str().unwrap();
    assert!(
        error.contains("at_most_once: not delivered again"),
        "{error}"
    );
    let to_second: Vec<Value> = second
        .log()
        .await
        .into_iter()
        .filter(|e| e["handler"] == "slow")
        .collect();
    assert_eq!(
        to_second.len(),
        1,
        "only the at-least-once task: {to_second:?}"
    );
    assert_eq!(to_second[0]["args"]["seconds"], 4);
}

/// Posts a signed dispatch to the SDK executor at `port`, as a node would.
async fn dispatch(port: u16, body: &Value) -> (u16, Value) {
    let bytes = serde_json::to_vec(body).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let signature = carillon_protocol::sign(executor::SECRET.as_bytes(), now, &bytes);
    let response = carillon_tls::http_client()
        .unwrap()
        .post(format!("http://127.0.0.1:{port}/carillon/v1/dispatch"))
        .header("x-carillon-timestamp", now.to_string())
        .header("x-carillon-signature", signature)
        .body(bytes)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_effect_answers_a_second_delivery_from_the_executors_record() {
    let node = Solo::start(|spec| spec.extra_env = executor::node_env()).await;
    let worker = carillon_executor::Executor::builder()
        .app("sdk")
        .admin_urls([node.url("")])
        .executor_token(executor::EXECUTOR_TOKEN)
        .dispatch_secret(executor::SECRET)
        .executor_id("sdk-effect")
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let running =
        tokio::spawn(worker.run_with_listener(listener, async move { stopped.cancelled().await }));
    wait_for(
        Duration::from_secs(10),
        "the executor to register",
        || async {
            let (_, list) = node.call(Method::GET, "/api/v1/executors", None).await;
            (list["executors"].as_array()?.len() == 1).then_some(())
        },
    )
    .await;

    // Through the node: the dispatch carries an effect key, and the task's run succeeds once.
    let task = enqueue(
        &node,
        json!({"app": "sdk", "handler": "effect", "delivery": "exactly_once_effect"}),
    )
    .await;
    let run = ended_run(&node, &task).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    let run_id = run["id"].as_i64().unwrap();

    // The same work delivered again under other attempts (a failover after a lost answer):
    // while it runs, the second delivery joins it; once done, a third is answered with its
    // result. The handler runs once.
    let work = |attempt_id: i64, key: &str| {
        json!({"protocol": 1, "run_id": 900_001, "attempt_id": attempt_id, "attempt": 2,
               "job_id": -1, "job": "task 1", "handler": "effect", "args": null,
               "shard": {"index": 0, "total": 1}, "scheduled_at": "", "report_to": [],
               "effect_key": key})
    };
    let (status, _) = dispatch(port, &work(800_001, "900001:0:1")).await;
    assert_eq!(status, 202);
    let (status, _) = dispatch(port, &work(800_002, "900001:0:1")).await;
    assert_eq!(status, 202, "joined the running work");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let (status, answer) = dispatch(port, &work(800_003, "900001:0:1")).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["outcome"], "succeeded");
    assert_eq!(answer["output"], json!({"done_for": 900_001}));
    // Another try (a retry after a failure) is new work: it runs.
    let (status, _) = dispatch(port, &work(800_004, "900001:0:2")).await;
    assert_eq!(status, 202);
    tokio::time::sleep(Duration::from_millis(2_000)).await;

    let mut counts: HashMap<i64, usize> = HashMap::new();
    for run in EFFECTS.lock().unwrap().iter() {
        *counts.entry(*run).or_default() += 1;
    }
    assert_eq!(counts.get(&run_id), Some(&1), "{counts:?}");
    assert_eq!(counts.get(&900_001), Some(&2), "one per try: {counts:?}");
    stop.cancel();
    running.await.unwrap().unwrap();
}

/// The runs of job `id`, newest first, each with its attempts.
async fn runs_of(node: &NodeProcess, id: &Value) -> Vec<Value> {
    let (status, page) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs/{id}/runs?limit=1000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let mut runs = Vec::new();
    for run in page["runs"].as_array().unwrap() {
        let (status, run) = node
            .call(Method::GET, &format!("/api/v1/runs/{}", run["id"]), None)
            .await;
        assert_eq!(status, 200, "{run}");
        runs.push(run);
    }
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_stored_policy_no_longer_reads_is_never_delivered_under_the_defaults() {
    let node = Solo::start(|spec| spec.extra_env = executor::node_env()).await;
    let executor = Executor::start_registered(&node, "py", "only").await;
    // One job whose runs start in their claim (one attempt each), one whose runs the start
    // pass splits into shards: the two places a run's policy is read before a delivery.
    let mut ids = Vec::new();
    for (name, extra) in [
        ("claimed", json!({"delivery": "at_most_once"})),
        ("sharded", json!({"sharding": {"count": 2}})),
    ] {
        let mut job = json!({"name": name, "app": "py", "handler": "quiet",
                             "schedule": {"every": "1s"}, "start": true});
        job.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, job) = node.call(Method::POST, "/api/v1/jobs", Some(job)).await;
        assert_eq!(status, 201, "{job}");
        ids.push(job["id"].clone());
    }
    for id in &ids {
        wait_for(Duration::from_secs(20), "a run delivered", || async {
            runs_of(&node, id)
                .await
                .iter()
                .any(|r| r["state"] == "succeeded")
                .then_some(())
        })
        .await;
    }

    // A hand edit (or a downgrade) leaves a policy this version cannot read.
    let list = ids
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join(",");
    node.db
        .execute_script(&format!(
            "UPDATE jobs SET policy_json = '{{\"delivery\": 7}}' WHERE job_id IN ({list})"
        ))
        .await;
    for id in &ids {
        let named = format!("the stored policy of job {id}");
        let failed = wait_for(
            Duration::from_secs(20),
            "a run failed naming the policy",
            || async {
                runs_of(&node, id)
                    .await
                    .into_iter()
                    .find(|r| r["state"] == "failed" && r.to_string().contains(named.as_str()))
            },
        )
        .await;
        let delivered = executor.log().await;
        assert!(
            !delivered.iter().any(|d| d["run_id"] == failed["id"]),
            "never delivered: {failed:#}"
        );
        let (status, problem) = node
            .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, 500, "{problem}");
        assert!(problem.to_string().contains(&named), "{problem}");
    }

    // Readable again, the job runs again: nothing of it was lost or rewritten. As a newer
    // version may write it in a rolling upgrade, with fields this one does not know (at any
    // depth): they are left out, not a reason to fail the job.
    node.db
        .execute_script(&format!(
            "UPDATE jobs SET policy_json = '{{\"delivery\": \"at_most_once\", \
             \"a_new_knob\": 1, \"retry\": {{\"max_attempts\": 1, \"jitter_seed\": 3}}}}' \
             WHERE job_id IN ({list})"
        ))
        .await;
    for id in &ids {
        let (status, job) = node
            .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
            .await;
        assert_eq!(status, 200, "{job}");
    }
    for id in &ids {
        let before = runs_of(&node, id).await.len();
        wait_for(Duration::from_secs(20), "a run delivered again", || async {
            let runs = runs_of(&node, id).await;
            (runs.len() > before
                && runs[..runs.len() - before]
                    .iter()
                    .any(|r| r["state"] == "succeeded"))
            .then_some(())
        })
        .await;
    }
}
