//! The Rust SDK's `opentelemetry` feature against a real node: an app exporting its `tracing`
//! spans with tracing-opentelemetry sees its handler's spans in the run's trace, under the
//! node's delivery, as the dispatch's `traceparent` names it. A test binary of its own: it
//! installs the process's global subscriber.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::time::Duration;

use carillon_executor::{JobContext, JobError, job};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use reqwest::Method;
use serde_json::{Value, json};
use support::node::Solo;
use support::wait_for;
use tracing_subscriber::layer::SubscriberExt as _;

const EXECUTOR_TOKEN: &str = "otel-executor-token-0123456789";
const SECRET: &str = "otel-dispatch-secret-0123456789";

#[job(name = "traced")]
async fn traced(ctx: JobContext) -> Result<Value, JobError> {
    // The handler's own work, a span of the app's.
    let work = tracing::info_span!("reconcile");
    let _entered = work.enter();
    Ok(json!({ "traceparent": ctx.traceparent() }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_spans_continue_the_runs_trace() {
    let exported = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exported.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
            ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
            ("CARILLON_EXECUTOR_HEARTBEAT_MS", "200".to_owned()),
        ];
    })
    .await;
    let executor = support::sdk::serve(&node, "otel", "otel-1", (EXECUTOR_TOKEN, SECRET)).await;
    let (_, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "traced", "app": "otel", "handler": "traced", "schedule": {"every": "1d"}})),
        )
        .await;
    wait_for(
        Duration::from_secs(20),
        "the executor to register",
        || async {
            let (_, list) = node.call(Method::GET, "/api/v1/executors", None).await;
            (list["executors"][0]["id"] == "otel-1").then_some(())
        },
    )
    .await;
    let (status, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", job["id"]),
            None,
        )
        .await;
    assert_eq!(status, 202, "{run}");
    let detail = wait_for(Duration::from_secs(30), "the run to succeed", || async {
        let (_, d) = node
            .call(Method::GET, &format!("/api/v1/runs/{}", run["id"]), None)
            .await;
        (d["state"] == "succeeded").then_some(d)
    })
    .await;
    let traceparent = detail["attempts"][0]["output"]["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (trace, delivery) = (parts[1], parts[2]);

    let spans = wait_for(Duration::from_secs(10), "the app's spans", || async {
        let spans = exported.get_finished_spans().unwrap();
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
        (names.contains(&"attempt") && names.contains(&"reconcile")).then_some(spans)
    })
    .await;
    let attempt = spans.iter().find(|s| s.name == "attempt").unwrap();
    let work = spans.iter().find(|s| s.name == "reconcile").unwrap();
    assert_eq!(
        attempt.span_context.trace_id().to_string(),
        trace,
        "the run's trace"
    );
    assert_eq!(
        attempt.parent_span_id.to_string(),
        delivery,
        "under the node's delivery"
    );
    assert!(attempt.parent_span_is_remote);
    assert!(
        traceparent.ends_with("-01"),
        "a node that exports nothing leaves sampling to the app"
    );
    assert_eq!(work.span_context.trace_id().to_string(), trace);
    assert_eq!(work.parent_span_id, attempt.span_context.span_id());

    executor.stop().await;
}
