//! Live handler logs end to end: a Rust SDK executor's handler logs, the lines reach the node
//! while it runs and before its result, pages of them come back by line, a flood stops at the
//! caps with the truncation marked, and `carillon runs logs` prints and follows them.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::time::Duration;

use carillon_executor::{Executor, JobContext, JobError, job};
use reqwest::Method;
use serde_json::{Value, json};
use support::cli::carillon;
use support::node::Solo;
use support::wait_for;
use tokio_util::sync::CancellationToken;

const EXECUTOR_TOKEN: &str = "logs-executor-token-0123456789";
const SECRET: &str = "logs-dispatch-secret-0123456789";
const MAX_LINES: u64 = 50;

/// Logs `args` lines (a count), one with markup in it.
#[job(name = "talk")]
async fn talk(ctx: JobContext) -> Result<&'static str, JobError> {
    let count: u64 = ctx.args()?;
    for i in 1..=count {
        tracing::info!(step = i, "line {i} of {count}");
    }
    tracing::warn!("<script>alert('not html')</script>");
    tracing::debug!("not captured: below INFO");
    Ok("talked")
}

/// Logs a line every 200 ms for `args` seconds, one from a task it spawns.
#[job(name = "drip")]
async fn drip(ctx: JobContext) -> Result<&'static str, JobError> {
    let seconds: u64 = ctx.args()?;
    tokio::spawn(ctx.in_attempt(async { tracing::info!("from a spawned task") }))
        .await
        .map_err(|e| JobError::new(e.to_string()))?;
    for i in 0..seconds * 5 {
        tracing::info!("drip {i}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok("dripped")
}

async fn start_executor(node: &Solo, app: &str, capture: bool) -> CancellationToken {
    let executor = Executor::builder()
        .app(app)
        .admin_urls([node.url("")])
        .executor_token(EXECUTOR_TOKEN)
        .dispatch_secret(SECRET)
        .executor_id(format!("{app}-1"))
        .capture_handler_logs(capture)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(executor.run_with_listener(listener, async move { stopped.cancelled().await }));
    // This one, by its id: a second executor of the test joins a first that is still there.
    let id = format!("{app}-1");
    wait_for(
        Duration::from_secs(20),
        "the executor to register",
        || async {
            let (_, body) = node.call(Method::GET, "/api/v1/executors", None).await;
            let listed = body["executors"].as_array()?;
            listed.iter().any(|e| e["id"] == id.as_str()).then_some(())
        },
    )
    .await;
    stop
}

async fn trigger(node: &Solo, name: &str, handler: &str, args: Value) -> i64 {
    trigger_in(node, "logs", name, handler, args).await
}

async fn trigger_in(node: &Solo, app: &str, name: &str, handler: &str, args: Value) -> i64 {
    let job = json!({ "name": name, "app": app, "handler": handler, "schedule": { "manual": true }, "args": args });
    let (status, job) = node.call(Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 201, "{job}");
    let (_, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", job["id"]),
            None,
        )
        .await;
    run["id"].as_i64().unwrap()
}

async fn ended(node: &Solo, run: i64) -> Value {
    wait_for(Duration::from_secs(30), "the run to end", || async {
        let (_, body) = node
            .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
            .await;
        (!["pending", "queued", "running"].contains(&body["state"].as_str()?)).then_some(body)
    })
    .await
}

async fn logs(node: &Solo, run: i64, query: &str) -> Value {
    let (status, body) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{run}/logs{query}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

fn messages(page: &Value) -> Vec<String> {
    page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["message"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_logs_are_kept_paged_capped_and_followed() {
    tracing_subscriber::fmt()
        .with_env_filter("info")
        .try_init()
        .unwrap();
    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
            ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
            ("CARILLON_EXECUTOR_HEARTBEAT_MS", "200".to_owned()),
            ("CARILLON_HANDLER_LOGS_MAX_LINES", MAX_LINES.to_string()),
        ];
    })
    .await;
    let stop = start_executor(&node, "logs", true).await;

    // Every line, in order, with its fields, complete once the run has ended.
    let run = trigger(&node, "talk", "talk", json!(3)).await;
    assert_eq!(ended(&node, run).await["state"], "succeeded");
    let page = logs(&node, run, "").await;
    assert_eq!(
        messages(&page),
        [
            "line 1 of 3 step=1",
            "line 2 of 3 step=2",
            "line 3 of 3 step=3",
            "<script>alert('not html')</script>"
        ],
        "{page}"
    );
    assert_eq!(page["lines"][3]["level"], "WARN");
    assert_eq!(page["done"], true);
    assert_eq!(page["truncated"], false);
    assert_eq!(page["source"], "node");
    let lines: Vec<i64> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_i64().unwrap())
        .collect();
    assert_eq!(lines, [1, 2, 3, 4]);
    // Paged by line.
    let second = logs(&node, run, "?after=1&limit=2").await;
    assert_eq!(
        messages(&second),
        ["line 2 of 3 step=2", "line 3 of 3 step=3"]
    );
    assert_eq!(
        (second["next_after"].clone(), second["done"].clone()),
        (json!(3), json!(false))
    );
    let (status, body) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{run}/logs?limit=0"),
            None,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{run}/logs?attempt=999999"),
            None,
        )
        .await;
    assert_eq!(status, 404, "no such attempt of this run");

    // A flood stops at the cap; the log says it was cut.
    let run = trigger(&node, "flood", "talk", json!(500)).await;
    assert_eq!(ended(&node, run).await["state"], "succeeded");
    let page = logs(&node, run, "?limit=1000").await;
    let got = messages(&page);
    assert_eq!(got.len() as u64, MAX_LINES + 1, "{page}");
    assert!(got.last().unwrap().contains("log truncated"), "{got:?}");
    assert_eq!(page["truncated"], true);
    assert_eq!(page["done"], true);

    // Lines arrive while the handler runs, and a follower sees all of them.
    let run = trigger(&node, "drip", "drip", json!(3)).await;
    let live = wait_for(
        Duration::from_secs(10),
        "lines while the run is running",
        || async {
            let page = logs(&node, run, "").await;
            (page["attempt_state"] == "running" && page["lines"].as_array()?.len() >= 3)
                .then_some(page)
        },
    )
    .await;
    assert_eq!(live["done"], false);
    assert_eq!(
        messages(&live)[0],
        "from a spawned task",
        "work spawned in the attempt is kept"
    );
    let (ok, followed, stderr) = tokio::task::spawn_blocking({
        let url = node.url("");
        move || carillon(&url, &["runs", "logs", &run.to_string(), "-f"])
    })
    .await
    .unwrap();
    assert!(ok, "{stderr}");
    let followed: Vec<&str> = followed.lines().collect();
    assert_eq!(
        followed.len(),
        16,
        "the spawned line and 15 drips, once each: {followed:?}"
    );
    assert!(followed[15].ends_with("INFO  drip 14"), "{followed:?}");
    assert_eq!(
        ended(&node, run).await["state"],
        "succeeded",
        "-f returned once the run ended"
    );

    // Without -f: what there is, as JSON lines with -o json.
    let (ok, json_lines, stderr) = carillon(
        &node.url(""),
        &["runs", "logs", &run.to_string(), "-o", "json"],
    );
    assert!(ok, "{stderr}");
    let first: Value = serde_json::from_str(json_lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["message"], "from a spawned task");
    assert_eq!(first["line"], 1);

    // An executor built with capture off ships nothing.
    let quiet = start_executor(&node, "quiet", false).await;
    let run = trigger_in(&node, "quiet", "quiet-talk", "talk", json!(3)).await;
    assert_eq!(ended(&node, run).await["state"], "succeeded");
    let page = logs(&node, run, "").await;
    assert!(page["lines"].as_array().unwrap().is_empty(), "{page}");
    assert_eq!(page["done"], true);
    quiet.cancel();
    stop.cancel();
}
