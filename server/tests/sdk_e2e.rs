//! The Rust executor SDK against a real node: handlers collected from `#[job]`, a job declared
//! in code, sharding, cancellation, signature and replay checks, and a drain on shutdown.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use carillon_executor::{Executor, JobContext, JobError, job};
use reqwest::Method;
use serde_json::{Value, json};
use support::node::{NodeProcess, Solo};
use support::wait_for;
use tokio_util::sync::CancellationToken;

const EXECUTOR_TOKEN: &str = "sdk-executor-token-0123456789";
const SECRET: &str = "sdk-dispatch-secret-0123456789";

static SLOW_FINISHED: AtomicUsize = AtomicUsize::new(0);

#[job(name = "tick", description = "declared in code", cron = "* * * * * *")]
async fn tick(ctx: JobContext) -> Result<Value, JobError> {
    Ok(json!({ "run": ctx.run_id(), "traceparent": ctx.traceparent() }))
}

#[job(name = "shard")]
async fn shard(ctx: JobContext) -> Result<Value, JobError> {
    let s = ctx.shard();
    Ok(json!({ "index": s.index, "total": s.total }))
}

#[job(name = "wait")]
async fn wait(ctx: JobContext) -> Result<String, JobError> {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs(60)) => Ok("waited".into()),
        _ = ctx.cancelled() => Err(JobError::new("stopped")),
    }
}

#[job(name = "slow")]
async fn slow(_ctx: JobContext) -> Result<&'static str, JobError> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    SLOW_FINISHED.fetch_add(1, Ordering::SeqCst);
    Ok("finished")
}

#[job(name = "chatty")]
async fn chatty(_ctx: JobContext) -> Result<&'static str, JobError> {
    tracing::info!("handler at work");
    Ok("said")
}

/// What this process logged, as JSON lines.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap().clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// Creates a job of app `sdk` for `handler` (with `extra` fields) and triggers one run.
async fn trigger_new(node: &NodeProcess, name: &str, handler: &str, extra: Value) -> Value {
    let mut doc =
        json!({"name": name, "app": "sdk", "handler": handler, "schedule": {"every": "1d"}});
    for (k, v) in extra.as_object().into_iter().flatten() {
        doc[k] = v.clone();
    }
    let (_, job) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
    let (_, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", job["id"]),
            None,
        )
        .await;
    run["id"].clone()
}

async fn run_detail(node: &NodeProcess, run: &Value) -> Value {
    node.call(Method::GET, &format!("/api/v1/runs/{run}"), None)
        .await
        .1
}

async fn ended(node: &NodeProcess, run: &Value) -> Value {
    wait_for(Duration::from_secs(30), "the run to end", || async {
        let d = run_detail(node, run).await;
        ["succeeded", "failed", "cancelled"]
            .contains(&d["state"].as_str().unwrap_or(""))
            .then_some(d)
    })
    .await
}

/// The job declared in code (`tick`, every second) and a run of it that succeeded.
async fn a_succeeded_tick(node: &NodeProcess) -> (Value, Value) {
    wait_for(
        Duration::from_secs(30),
        "the declared job to fire",
        || async {
            let (_, jobs) = node
                .call(Method::GET, "/api/v1/jobs?name=sdk.tick", None)
                .await;
            let job = jobs["jobs"].get(0)?.clone();
            let (_, runs) = node
                .call(
                    Method::GET,
                    &format!("/api/v1/jobs/{}/runs", job["id"]),
                    None,
                )
                .await;
            let run = runs["runs"]
                .as_array()?
                .iter()
                .find(|r| r["state"] == "succeeded")?
                .clone();
            Some((job, run["id"].clone()))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_registers_runs_handlers_and_drains() {
    let logs = Captured::default();
    tracing_subscriber::fmt()
        .json()
        .with_writer(logs.clone())
        .with_env_filter("info")
        .try_init()
        .unwrap();
    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
            ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
            ("CARILLON_EXECUTOR_HEARTBEAT_MS", "200".to_owned()),
        ];
    })
    .await;

    let executor = Executor::builder()
        .app("sdk")
        .admin_urls(["http://127.0.0.1:1", &node.url("")]) // the first is down: failover
        .executor_token(EXECUTOR_TOKEN)
        .dispatch_secret(SECRET)
        .capacity(4)
        .executor_id("sdk-1")
        .drain_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let running = tokio::spawn(
        executor.run_with_listener(listener, async move { stopped.cancelled().await }),
    );

    // The job declared in code exists and fires through the SDK.
    let (declared, _) = a_succeeded_tick(&node).await;
    assert_eq!(declared["state"], "running");
    assert_eq!(declared["schedule"]["cron"], "* * * * * *");

    let (_, executors) = node.call(Method::GET, "/api/v1/executors", None).await;
    let me = &executors["executors"][0];
    assert_eq!((&me["id"], &me["healthy"]), (&json!("sdk-1"), &json!(true)));
    let mut handlers: Vec<String> = serde_json::from_value(me["handlers"].clone()).unwrap();
    handlers.sort();
    assert_eq!(handlers, ["chatty", "shard", "slow", "tick", "wait"]);

    // A handler's log lines carry the run and attempt they are about.
    let run = trigger_new(&node, "chatty", "chatty", json!({})).await;
    let detail = ended(&node, &run).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    let said = logs
        .lines()
        .into_iter()
        .find(|l| l["fields"]["message"] == "handler at work")
        .expect("the handler's line");
    assert_eq!(said["span"]["run_id"], run, "{said}");
    assert_eq!(
        said["span"]["attempt_id"], detail["attempts"][0]["id"],
        "{said}"
    );
    assert_eq!(said["span"]["job"], "chatty", "{said}");
    // And the run's trace, from the dispatch's traceparent, sent even with no collector.
    let trace_id = said["span"]["trace_id"].as_str().unwrap_or_default();
    assert!(
        trace_id.len() == 32 && trace_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{said}"
    );

    // Sharding: count 3 gives three attempts with their index and total.
    let run = trigger_new(&node, "sharded", "shard", json!({"sharding": {"count": 3}})).await;
    let detail = ended(&node, &run).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    let mut shards: Vec<(u64, u64)> = detail["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["output"]["index"].as_u64().unwrap(),
                a["output"]["total"].as_u64().unwrap(),
            )
        })
        .collect();
    shards.sort();
    assert_eq!(shards, [(0, 3), (1, 3), (2, 3)]);

    // Cancellation reaches the handler.
    let run = trigger_new(&node, "waiting", "wait", json!({})).await;
    wait_for(Duration::from_secs(10), "the attempt to run", || async {
        (run_detail(&node, &run).await["attempts"][0]["state"] == "running").then_some(())
    })
    .await;
    let (status, _) = node
        .call(Method::POST, &format!("/api/v1/runs/{}/cancel", run), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(ended(&node, &run).await["state"], "cancelled");

    // The endpoint refuses a bad signature, and a replayed attempt.
    let one = |attempt_id: i64, handler: &str| {
        json!({"protocol": 1, "run_id": 1, "attempt_id": attempt_id, "attempt": 1, "job_id": 1,
            "job": "x", "handler": handler, "args": null, "shard": {"index": 0, "total": 1},
            "scheduled_at": "", "report_to": []})
    };
    let now = chrono::Utc::now().timestamp_millis();
    let signed_post = |path: &'static str, body: Vec<u8>, signature: String| {
        carillon_tls::http_client()
            .unwrap()
            .post(format!("http://127.0.0.1:{port}{path}"))
            .header("x-carillon-timestamp", now.to_string())
            .header("x-carillon-signature", signature)
            .body(body)
            .send()
    };
    let body = serde_json::to_vec(&one(424242, "shard")).unwrap();
    let post = |signature: String| signed_post("/carillon/v1/dispatch", body.clone(), signature);
    assert_eq!(
        post(format!("v1={}", "a".repeat(64)))
            .await
            .unwrap()
            .status(),
        401
    );
    let good = carillon_protocol::sign(SECRET.as_bytes(), now, &body);
    assert_eq!(post(good.clone()).await.unwrap().status(), 202);
    assert_eq!(
        post(good).await.unwrap().status(),
        409,
        "a replay is refused"
    );

    // The batch endpoint answers each attempt as the single one would: a new attempt is
    // accepted, an unknown handler refused, the replayed attempt refused; one signature for
    // the whole body.
    let batch = serde_json::to_vec(&json!({"dispatches": [
        one(434343, "shard"), one(434344, "nowhere"), one(424242, "shard")]}))
    .unwrap();
    let post_batch =
        |signature: String| signed_post("/carillon/v1/dispatch-batch", batch.clone(), signature);
    let forged = post_batch(format!("v1={}", "b".repeat(64))).await.unwrap();
    assert_eq!(forged.status(), 401, "a batch is signed as a whole");
    let signed = carillon_protocol::sign(SECRET.as_bytes(), now, &batch);
    let reply: carillon_protocol::DispatchBatchReply =
        post_batch(signed).await.unwrap().json().await.unwrap();
    let mut statuses: Vec<(i64, u16)> = reply
        .replies
        .iter()
        .map(|r| (r.attempt_id, r.status))
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [(424242, 409), (434343, 202), (434344, 404)]);

    // Shutdown drains: the slow attempt finishes and is reported, then the executor leaves.
    let run = trigger_new(&node, "slowly", "slow", json!({})).await;
    wait_for(
        Duration::from_secs(10),
        "the slow attempt to run",
        || async {
            (run_detail(&node, &run).await["attempts"][0]["state"] == "running").then_some(())
        },
    )
    .await;
    let slow_attempt = run_detail(&node, &run).await["attempts"][0]["id"]
        .as_i64()
        .unwrap();
    stop.cancel();
    // While it drains it still answers: the attempt it runs, offered again (a node died
    // before recording its 202), is its own, 409, never sent on to another executor; new
    // work is refused, 503.
    let dispatch_while_draining = |attempt_id: i64, handler: &str| {
        let body = serde_json::to_vec(&one(attempt_id, handler)).unwrap();
        let signature = carillon_protocol::sign(SECRET.as_bytes(), now, &body);
        signed_post("/carillon/v1/dispatch", body, signature)
    };
    let fresh = std::sync::atomic::AtomicI64::new(454_545);
    wait_for(Duration::from_secs(5), "the executor to drain", || async {
        let attempt_id = fresh.fetch_add(1, Ordering::SeqCst);
        let new = dispatch_while_draining(attempt_id, "tick").await.unwrap();
        (new.status() == 503).then_some(())
    })
    .await;
    assert_eq!(
        dispatch_while_draining(slow_attempt, "slow")
            .await
            .unwrap()
            .status(),
        409,
        "an attempt running here, offered again while draining"
    );
    running.await.unwrap().unwrap();
    assert_eq!(
        SLOW_FINISHED.load(Ordering::SeqCst),
        1,
        "in-flight work finished before the stop"
    );
    assert_eq!(ended(&node, &run).await["state"], "succeeded");
    let (_, executors) = node.call(Method::GET, "/api/v1/executors", None).await;
    assert_eq!(
        executors["executors"][0]["state"], "left",
        "deregistered after draining"
    );
}

/// Spans an OTLP receiver got (`tests/otlp/receiver.py`, decoding with opentelemetry-proto).
struct Receiver {
    port: u16,
    child: std::process::Child,
}

impl Receiver {
    fn start() -> Receiver {
        use std::io::BufRead;
        let script = format!("{}/tests/otlp/receiver.py", env!("CARGO_MANIFEST_DIR"));
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 runs the OTLP receiver");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| {
                panic!("the receiver said {line:?} (is opentelemetry-proto installed?)")
            })
            .parse()
            .unwrap();
        Receiver { port, child }
    }

    async fn spans(&self) -> Vec<Value> {
        let got: Value = reqwest::get(format!("http://127.0.0.1:{}/spans", self.port))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["refused"], json!([]), "bodies that are not OTLP");
        got["spans"].as_array().unwrap().clone()
    }

    /// Waits until the spans received satisfy `enough`, and returns them all.
    async fn wait_spans(&self, what: &str, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        wait_for(Duration::from_secs(30), what, || async {
            let spans = self.spans().await;
            enough(&spans).then_some(spans)
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn named<'a>(spans: &'a [Value], name: &str, run: &Value) -> Option<&'a Value> {
    spans
        .iter()
        .find(|s| s["name"] == name && s["attributes"]["carillon.run_id"] == *run)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs opentelemetry-proto (pip install opentelemetry-proto==1.45.2; .ci/run installs it)"]
async fn a_runs_stages_and_api_requests_reach_an_otlp_collector_as_one_trace() {
    let receiver = Receiver::start();
    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
            ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
            ("CARILLON_EXECUTOR_HEARTBEAT_MS", "200".to_owned()),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", receiver.port),
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=tests".to_owned()),
        ];
    })
    .await;
    let executor = support::sdk::serve(&node, "sdk", "sdk-traced", (EXECUTOR_TOKEN, SECRET)).await;

    // A run of the declared job's schedule (every second): claimed, delivered to the executor
    // (it starts in its claim: one attempt) and settled, one trace under its claim.
    let (_, run) = a_succeeded_tick(&node).await;
    let stages = ["carillon.claim", "carillon.deliver", "carillon.settle"];
    let spans = receiver
        .wait_spans(&format!("the stages of run {run}"), |spans| {
            stages.iter().all(|name| named(spans, name, &run).is_some())
        })
        .await;
    let [claim, deliver, settle] = stages.map(|name| named(&spans, name, &run).unwrap().clone());
    let trace = claim["trace_id"].as_str().unwrap().to_owned();
    for span in [&claim, &deliver, &settle] {
        assert_eq!(span["trace_id"], trace, "one trace: {span}");
        assert_eq!(span["resource"]["service.name"], "carillon", "{span}");
        assert_eq!(span["resource"]["service.instance.id"], "solo", "{span}");
        assert_eq!(span["scope"], "carillon");
        assert_eq!(
            span["headers"]["x-tenant"], "tests",
            "the configured header"
        );
        assert!(
            span["end_ns"].as_u64() >= span["start_ns"].as_u64(),
            "{span}"
        );
    }
    assert_eq!(claim["parent_span_id"], "", "the claim is the root");
    assert_eq!(deliver["parent_span_id"], claim["span_id"]);
    assert_eq!(settle["parent_span_id"], claim["span_id"]);
    assert!(claim["end_ns"].as_u64() <= deliver["start_ns"].as_u64());
    assert_eq!(deliver["kind"], 3, "a delivery is a client span");
    assert_eq!(deliver["attributes"]["carillon.executor_id"], "sdk-traced");
    assert_eq!(
        deliver["attributes"]["carillon.outcome"], "accepted",
        "the SDK answers later"
    );
    assert_eq!(settle["attributes"]["carillon.run_state"], "succeeded");
    // The handler was given the trace, with the delivery as its parent.
    let detail = run_detail(&node, &run).await;
    assert_eq!(
        detail["attempts"][0]["output"]["traceparent"],
        format!("00-{trace}-{}-01", deliver["span_id"].as_str().unwrap()),
        "{detail}"
    );

    // A run of three shards is started by a start pass: its span, and a delivery per shard.
    let sharded = trigger_new(&node, "sharded", "shard", json!({"sharding": {"count": 3}})).await;
    let spans = receiver
        .wait_spans("the sharded run's deliveries", |spans| {
            spans
                .iter()
                .filter(|s| {
                    s["name"] == "carillon.settle" && s["attributes"]["carillon.run_id"] == sharded
                })
                .count()
                == 3
        })
        .await;
    let root = named(&spans, "carillon.run", &sharded).expect("a manual run's root");
    assert_eq!(root["parent_span_id"], "");
    let start = named(&spans, "carillon.start", &sharded).expect("its start");
    assert_eq!(start["parent_span_id"], root["span_id"]);
    assert_eq!(start["attributes"]["carillon.shards"], 3);
    let deliveries: Vec<&Value> = spans
        .iter()
        .filter(|s| {
            s["name"] == "carillon.deliver" && s["attributes"]["carillon.run_id"] == sharded
        })
        .collect();
    assert_eq!(deliveries.len(), 3);
    assert!(
        deliveries
            .iter()
            .all(|d| d["parent_span_id"] == root["span_id"])
    );
    assert!(
        named(&spans, "carillon.claim", &sharded).is_none(),
        "a manual run has no claim"
    );

    // An API request bringing a traceparent joins the caller's trace.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let (_, job) = node
        .call(Method::GET, "/api/v1/jobs?name=sdk.tick", None)
        .await;
    let job_id = job["jobs"][0]["id"].clone();
    let answer = carillon_tls::http_client()
        .unwrap()
        .post(node.url(&format!("/api/v1/jobs/{job_id}/trigger")))
        .bearer_auth(support::node::TOKEN)
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let spans = receiver
        .wait_spans("the request's span", |spans| {
            spans.iter().any(|s| s["trace_id"] == caller_trace)
        })
        .await;
    let request = spans
        .iter()
        .find(|s| s["trace_id"] == caller_trace)
        .unwrap();
    assert_eq!(
        request["name"], "POST /api/v1/jobs/{id}/trigger",
        "{request}"
    );
    assert_eq!(request["parent_span_id"], caller_span);
    assert_eq!(request["kind"], 2, "a server span");
    assert_eq!(
        request["attributes"]["http.route"],
        "/api/v1/jobs/{id}/trigger"
    );
    assert_eq!(
        request["attributes"]["http.response.status_code"], status,
        "{request}"
    );
    // The collector kept up: nothing dropped.
    let metrics = node.metrics().await;
    assert!(
        metrics.contains("\ncarillon_trace_spans_dropped_total 0\n"),
        "{metrics}"
    );

    executor.stop().await;
}
