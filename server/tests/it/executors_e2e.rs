//! Dispatch end to end: a real node and real executor processes over HTTP. The executors are
//! `executors/python_executor.py`, written from `protocol/README.md` alone.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::executor::{EXECUTOR_TOKEN, Executor};
use support::node::{NodeProcess, Solo};
use support::wait_for;

async fn node() -> Solo {
    Solo::start(|spec| spec.extra_env = support::executor::node_env()).await
}

async fn create(node: &NodeProcess, doc: Value) -> Value {
    let (status, job) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
    assert_eq!(status, 201, "{job}");
    job["id"].clone()
}

async fn trigger(node: &NodeProcess, job: &Value) -> Value {
    let (status, run) = node
        .call(Method::POST, &format!("/api/v1/jobs/{job}/trigger"), None)
        .await;
    assert_eq!(status, 202, "{run}");
    run["id"].clone()
}

/// Waits until the run ends and returns its detail with attempts.
async fn ended(node: &NodeProcess, run: &Value) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("run {run} to end"),
        || async {
            let (_, detail) = node
                .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
                .await;
            ["succeeded", "failed", "cancelled", "no_executor"]
                .contains(&detail["state"].as_str().unwrap_or(""))
                .then_some(detail)
        },
    )
    .await
}

fn job(name: &str, app: &str, handler: &str, extra: Value) -> Value {
    let mut doc =
        json!({"name": name, "app": app, "handler": handler, "schedule": {"every": "1d"}});
    for (k, v) in extra.as_object().unwrap() {
        doc[k] = v.clone();
    }
    doc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balancers_spread_runs_as_configured() {
    let node = node().await;
    // Room for a whole burst on each: the weights decide, not capacity. (A burst beyond an
    // executor's capacity spills to executors with room: dispatches in flight count as load.)
    let _a = Executor::start(&node, "bal", "exec-a", 1, &["--capacity", "64"]);
    let _b = Executor::start(&node, "bal", "exec-b", 2, &["--capacity", "64"]);
    for balance in ["weighted", "round_robin", "random", "consistent_hash"] {
        let id = create(
            &node,
            job(balance, "bal", "echo", json!({"balance": balance})),
        )
        .await;
        let mut runs = Vec::new();
        for _ in 0..30 {
            runs.push(trigger(&node, &id).await);
        }
        let mut by: HashMap<String, usize> = HashMap::new();
        for run in &runs {
            let detail = ended(&node, run).await;
            assert_eq!(detail["state"], "succeeded", "{detail}");
            let attempt = &detail["attempts"][0];
            assert_eq!(attempt["output"]["args"], Value::Null);
            assert_eq!(
                attempt["output"]["scheduled_at"], detail["scheduled_at"],
                "the dispatch carries its run's instant"
            );
            *by.entry(attempt["executor_id"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
        let got = (
            by.get("exec-a").copied().unwrap_or(0),
            by.get("exec-b").copied().unwrap_or(0),
        );
        eprintln!(
            "{balance}: exec-a (weight 1) {} runs, exec-b (weight 2) {} runs",
            got.0, got.1
        );
        match balance {
            "weighted" => assert_eq!(got, (10, 20), "weights 1:2 give 1:2"),
            "round_robin" => assert_eq!(got, (15, 15)),
            // 30 fair coin flips land within 5..=25 with probability above 0.999.
            "random" => assert!((5..=25).contains(&got.0), "{got:?}"),
            // One job, one shard: one key, so one executor while both are there.
            _ => assert!(got.0 == 30 || got.1 == 30, "{got:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_sharding_covers_every_element_once_in_proportion_to_weight() {
    let node = node().await;
    let items: Vec<i64> = (1..=20).collect();
    let mut executors = Vec::new();
    for (n, weights) in [
        (1, vec![1]),
        (2, vec![1, 2]),
        (3, vec![3, 1, 2]),
        (5, vec![1, 2, 3, 1, 1]),
    ] {
        let app = format!("split{n}");
        for (i, w) in weights.iter().enumerate() {
            executors.push(Executor::start(&node, &app, &format!("{app}-{i}"), *w, &[]));
        }
        let id = create(
            &node,
            job(
                &app,
                &app,
                "echo",
                json!({"args": items, "sharding": {"split": true}}),
            ),
        )
        .await;
        let detail = ended(&node, &trigger(&node, &id).await).await;
        assert_eq!(detail["state"], "succeeded", "{detail}");
        let attempts = detail["attempts"].as_array().unwrap();
        let total: u32 = weights.iter().sum();
        let mut covered = Vec::new();
        for a in attempts {
            let part: Vec<i64> = serde_json::from_value(a["args"].clone()).unwrap();
            let executor = a["executor_id"].as_str().unwrap();
            let index: usize = executor.rsplit('-').next().unwrap().parse().unwrap();
            let ideal = 20.0 * weights[index] as f64 / total as f64;
            assert!(
                (part.len() as f64 - ideal).abs() < 1.0,
                "{executor} got {part:?} for weight {}",
                weights[index]
            );
            assert_eq!(a["shards"], json!(attempts.len()));
            covered.extend(part);
        }
        assert_eq!(
            covered, items,
            "{n} executors: every element exactly once, in order"
        );
        eprintln!(
            "split over {n} executors with weights {weights:?}: {} shards",
            attempts.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_retried_on_another_executor() {
    let node = node().await;
    let _bad = Executor::start(&node, "retry", "always-fails", 1, &["--fail"]);
    let _good = Executor::start(&node, "retry", "works", 1, &[]);
    let id = create(&node, job("flaky", "retry", "flaky", json!({
        "retry": {"max_attempts": 3, "backoff": "exponential", "initial_delay_ms": 100, "max_delay_ms": 1000}}))).await;
    let mut retried = 0;
    for _ in 0..6 {
        let detail = ended(&node, &trigger(&node, &id).await).await;
        assert_eq!(detail["state"], "succeeded", "{detail}");
        let attempts = detail["attempts"].as_array().unwrap();
        if attempts.len() > 1 {
            retried += 1;
            assert_eq!(attempts[0]["executor_id"], "always-fails");
            assert_eq!(attempts[0]["error"], "failed on always-fails");
            assert_eq!(
                attempts[1]["executor_id"], "works",
                "the retry prefers another executor"
            );
        }
    }
    assert!(
        retried > 0,
        "round robin sent some first attempts to the failing executor"
    );

    // Without a good executor, the run fails after its last attempt and is a dead letter.
    let doomed = create(
        &node,
        job(
            "doomed",
            "retry",
            "fail",
            json!({"retry": {"max_attempts": 2, "initial_delay_ms": 50}}),
        ),
    )
    .await;
    let detail = ended(&node, &trigger(&node, &doomed).await).await;
    assert_eq!(detail["state"], "failed");
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 2);
    let (_, dead) = node.call(Method::GET, "/api/v1/dead-letters", None).await;
    assert!(
        dead["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == detail["id"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_jobs_report_through_the_callback_and_fail_over_when_their_executor_dies() {
    let node = node().await;
    let mut a = Executor::start(&node, "long", "long-a", 1, &[]);
    let mut b = Executor::start(&node, "long", "long-b", 1, &[]);

    let quick = create(
        &node,
        job("slow2", "long", "slow", json!({"args": {"seconds": 2}})),
    )
    .await;
    let detail = ended(&node, &trigger(&node, &quick).await).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(
        detail["attempts"][0]["output"]["slept"], 2,
        "the result came by callback"
    );

    let slow = create(
        &node,
        job("slow5", "long", "slow", json!({"args": {"seconds": 5}})),
    )
    .await;
    let run = trigger(&node, &slow).await;
    let running_on = wait_for(Duration::from_secs(10), "the attempt to run", || async {
        let (_, d) = node
            .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
            .await;
        d["attempts"][0]["executor_id"]
            .as_str()
            .filter(|_| d["attempts"][0]["state"] == "running")
            .map(str::to_owned)
    })
    .await;
    let killed_at = std::time::Instant::now();
    if running_on == a.id {
        a.kill9()
    } else {
        b.kill9()
    }
    let detail = ended(&node, &run).await;
    let attempts = detail["attempts"].as_array().unwrap();
    eprintln!(
        "kill -9 of {running_on}: run ended {:?} later; attempts {}",
        killed_at.elapsed(),
        attempts.len()
    );
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(attempts[0]["state"], "lost");
    assert_ne!(
        attempts[1]["executor_id"].as_str(),
        Some(running_on.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_timeouts_and_signatures() {
    let node = node().await;
    let executor = Executor::start(&node, "ctl", "ctl-a", 1, &[]);

    let long = create(
        &node,
        job("long", "ctl", "slow", json!({"args": {"seconds": 60}})),
    )
    .await;
    let run = trigger(&node, &long).await;
    wait_for(Duration::from_secs(10), "the attempt to run", || async {
        let (_, d) = node
            .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
            .await;
        (d["attempts"][0]["state"] == "running").then_some(())
    })
    .await;
    let (status, cancelled) = node
        .call(Method::POST, &format!("/api/v1/runs/{run}/cancel"), None)
        .await;
    assert_eq!(
        (status, &cancelled["state"]),
        (200, &json!("cancelled")),
        "{cancelled}"
    );
    assert_eq!(cancelled["attempts"][0]["state"], "cancelled");
    wait_for(
        Duration::from_secs(5),
        "the executor to stop the attempt",
        || async {
            executor
                .log()
                .await
                .iter()
                .any(|e| e.get("cancelled").is_some())
                .then_some(())
        },
    )
    .await;
    let (status, _) = node
        .call(Method::POST, &format!("/api/v1/runs/{run}/cancel"), None)
        .await;
    assert_eq!(status, 409, "an ended run cannot be cancelled");

    let timed = create(
        &node,
        job(
            "timed",
            "ctl",
            "slow",
            json!({"args": {"seconds": 10}, "timeout_ms": 1000}),
        ),
    )
    .await;
    let detail = ended(&node, &trigger(&node, &timed).await).await;
    assert_eq!(detail["state"], "failed", "{detail}");
    assert_eq!(detail["attempts"][0]["state"], "timed_out");

    // A dispatch whose signature does not verify is refused by the executor.
    let response = carillon_tls::http_client()
        .unwrap()
        .post(format!(
            "http://127.0.0.1:{}/carillon/v1/dispatch",
            executor.port
        ))
        .header(
            "X-Carillon-Timestamp",
            chrono::Utc::now().timestamp_millis().to_string(),
        )
        .header("X-Carillon-Signature", format!("v1={}", "0".repeat(64)))
        .body(r#"{"attempt_id": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    // An executor holding the wrong secret refuses the node's dispatches: the run fails.
    let _wrong = Executor::start_with_secret(
        &node,
        "wrong",
        "wrong-secret",
        1,
        &[],
        "not-the-dispatch-secret",
    );
    let refused = create(&node, job("refused", "wrong", "echo", json!({}))).await;
    let detail = ended(&node, &trigger(&node, &refused).await).await;
    assert_eq!(detail["state"], "failed");
    assert!(
        detail["attempts"][0]["error"]
            .as_str()
            .unwrap()
            .contains("401"),
        "{detail}"
    );

    // The executor token opens only the executor endpoints.
    let response = carillon_tls::http_client()
        .unwrap()
        .get(node.url("/api/v1/jobs"))
        .bearer_auth(EXECUTOR_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_drain_and_resume_executors_and_rerun_dead_letters() {
    let node = node().await;
    let _a = Executor::start(&node, "ops", "ops-a", 1, &[]);
    let _b = Executor::start(&node, "ops", "ops-b", 1, &[]);
    let id = create(&node, job("ops", "ops", "echo", json!({}))).await;

    let (status, _) = node
        .call(Method::POST, "/api/v1/executors/ops-a/drain", None)
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(700)).await; // a heartbeat must not undo it
    for _ in 0..6 {
        let detail = ended(&node, &trigger(&node, &id).await).await;
        assert_eq!(
            detail["attempts"][0]["executor_id"], "ops-b",
            "a drained executor gets nothing"
        );
    }
    let (_, list) = node.call(Method::GET, "/api/v1/executors", None).await;
    let a = list["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "ops-a")
        .unwrap()
        .clone();
    assert_eq!(
        (&a["state"], &a["healthy"]),
        (&json!("drained"), &json!(false))
    );

    let (status, _) = node
        .call(Method::POST, "/api/v1/executors/ops-a/resume", None)
        .await;
    assert_eq!(status, 200);
    let mut used = std::collections::HashSet::new();
    for _ in 0..6 {
        let detail = ended(&node, &trigger(&node, &id).await).await;
        used.insert(
            detail["attempts"][0]["executor_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(used.len(), 2, "resumed: both executors take work again");
    let (status, _) = node
        .call(Method::POST, "/api/v1/executors/nobody/drain", None)
        .await;
    assert_eq!(status, 404);
    let (status, one) = node
        .call(Method::GET, "/api/v1/executors/ops-b", None)
        .await;
    assert_eq!(
        (status, &one["app"], &one["healthy"]),
        (200, &json!("ops"), &json!(true))
    );
    let (_, apps) = node.call(Method::GET, "/api/v1/apps", None).await;
    let ops = apps["apps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "ops")
        .unwrap()
        .clone();
    assert_eq!(
        (&ops["executors"], &ops["healthy_executors"]),
        (&json!(2), &json!(2))
    );
    assert!(ops["handlers"].as_array().unwrap().contains(&json!("echo")));

    // A dead letter is re-run as a new run of the same job.
    let doomed = create(&node, job("doomed-ops", "ops", "fail", json!({}))).await;
    let dead = ended(&node, &trigger(&node, &doomed).await).await;
    assert_eq!(dead["state"], "failed");
    let (status, again) = node
        .call(
            Method::POST,
            &format!("/api/v1/runs/{}/rerun", dead["id"]),
            None,
        )
        .await;
    assert_eq!(status, 202, "{again}");
    assert_ne!(again["id"], dead["id"]);
    assert_eq!(again["message"], format!("re-run of run {}", dead["id"]));
    assert_eq!(ended(&node, &again["id"]).await["job_id"], dead["job_id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_with_nowhere_to_go_ends_visibly_instead_of_waiting_forever() {
    let node = Solo::start(|spec| {
        spec.extra_env = support::executor::node_env();
        spec.extra_env
            .push(("CARILLON_NO_EXECUTOR_GRACE_MS", "300".to_owned()));
    })
    .await;

    // Nobody ever registered this handler: the run ends after the grace.
    let orphan = create(&node, job("orphan", "nobody", "echo", json!({}))).await;
    let detail = ended(&node, &trigger(&node, &orphan).await).await;
    assert_eq!(detail["state"], "no_executor", "{detail}");
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("no executor is registered")
    );

    // Its only executor died: the run waits ten graces, then ends, saying why.
    let mut gone = Executor::start(&node, "gone", "gone-1", 1, &[]);
    gone.kill9();
    tokio::time::sleep(Duration::from_millis(2_000)).await; // past the executor lease
    let stranded = create(&node, job("stranded", "gone", "echo", json!({}))).await;
    let started = std::time::Instant::now();
    let detail = ended(&node, &trigger(&node, &stranded).await).await;
    assert_eq!(detail["state"], "no_executor", "{detail}");
    assert!(
        detail["message"]
            .as_str()
            .unwrap()
            .contains("no healthy executor"),
        "{detail}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(3_000),
        "waited ten graces first"
    );
    let (_, dead) = node.call(Method::GET, "/api/v1/dead-letters", None).await;
    assert!(
        dead["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == detail["id"])
    );
}

/// A node that dies between an executor's `202` and its record of it leaves the attempt
/// pending; the partition's next owner offers the same attempt again, and the executor answers
/// `409` (already accepted). That attempt is running there, so it must be recorded as
/// running, not failed and run again. Here the test plays the dead node: it delivers attempt 1
/// itself, signed, before the node does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_offered_again_to_the_executor_running_it_is_not_run_twice() {
    let node = node().await;
    let executor = Executor::start(&node, "py", "py-1", 1, &[]);
    let handle = node.db.attempt_handle(1).await;
    let body = serde_json::to_vec(&json!({
        "protocol": 1, "run_id": 1, "attempt_id": 1, "handle": handle, "attempt": 1, "job_id": 1, "job": "slow",
        "handler": "slow", "args": {"seconds": 2}, "shard": {"index": 0, "total": 1},
        "scheduled_at": "2026-01-01T00:00:00Z", "report_to": [node.url("")]}))
    .unwrap();
    let now = carillon_server::clock::system_now_ms();
    let response = carillon_tls::http_client()
        .unwrap()
        .post(format!(
            "http://127.0.0.1:{}/carillon/v1/dispatch",
            executor.port
        ))
        .header("content-type", "application/json")
        .header(carillon_protocol::TIMESTAMP_HEADER, now.to_string())
        .header(
            carillon_protocol::SIGNATURE_HEADER,
            carillon_protocol::sign(support::executor::SECRET.as_bytes(), now, &body),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);

    // The node's first run gets attempt 1: a fresh database numbers from 1.
    let job = create(
        &node,
        job(
            "replayed",
            "py",
            "slow",
            json!({"args": {"seconds": 2}, "start": true}),
        ),
    )
    .await;
    let run = trigger(&node, &job).await;
    let detail = ended(&node, &run).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "one attempt, not retried: {detail}");
    assert_eq!(attempts[0]["id"], 1, "{detail}");
    let started = executor
        .log()
        .await
        .iter()
        .filter(|e| e["attempt_id"].is_i64())
        .count();
    assert_eq!(started, 1, "the handler ran once");
}

/// A node calls only the address an executor registered: an executor that answers with a
/// redirect (to an internal service, say) gets no request followed there, and the attempt fails
/// naming the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_never_follows_a_redirect() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let node = node().await;
    // The target a redirect points at counts every connection it gets.
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_port = target.local_addr().unwrap().port();
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&reached);
    tokio::spawn(async move {
        while let Ok((_socket, _)) = target.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = format!("http://{}", redirector.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = redirector.accept().await {
            let mut request = vec![0u8; 65_536];
            let _ = socket.read(&mut request).await;
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{target_port}\
                 /carillon/v1/dispatch\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    let client = carillon_tls::http_client().unwrap();
    let executor_call = |path: &'static str, body: Value| {
        client
            .post(node.url(path))
            .bearer_auth(EXECUTOR_TOKEN)
            .json(&body)
            .send()
    };
    let registered = executor_call(
        "/api/v1/executors/register",
        json!({"protocol": 1, "executor_id": "redirector", "app": "py", "address": address,
               "weight": 1, "capacity": 8, "handlers": [{"name": "echo", "description": ""}]}),
    )
    .await
    .unwrap();
    assert_eq!(registered.status(), 200);
    // It stays healthy: it heartbeats like any executor.
    let heartbeats = {
        let client = client.clone();
        let url = node.url("/api/v1/executors/heartbeat");
        tokio::spawn(async move {
            loop {
                let _ = client
                    .post(&url)
                    .bearer_auth(EXECUTOR_TOKEN)
                    .json(&json!({"executor_id": "redirector", "in_flight": []}))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let job = create(
        &node,
        job("redirected", "py", "echo", json!({"start": true})),
    )
    .await;
    let run = trigger(&node, &job).await;
    let detail = ended(&node, &run).await;
    heartbeats.abort();
    assert_eq!(detail["state"], "failed", "{detail}");
    let error = detail["attempts"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("307"),
        "the attempt names the answer: {detail}"
    );
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the redirect was not followed"
    );
}
