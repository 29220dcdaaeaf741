//! Jobs created, runs triggered and followed to their end through a node's API.

use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::node::NodeProcess;
use super::wait_for;

/// The states a run ends in.
pub const ENDED: [&str; 5] = [
    "succeeded",
    "failed",
    "cancelled",
    "no_executor",
    "timed_out",
];

/// Creates the job of `doc`; its id.
pub async fn create_job(node: &NodeProcess, doc: Value) -> i64 {
    let (status, created) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
    assert_eq!(status, 201, "{created}");
    created["id"].as_i64().expect("a job id")
}

/// Triggers a run of `job` now; its id.
pub async fn trigger(node: &NodeProcess, job: i64) -> i64 {
    let (status, run) = node
        .call(Method::POST, &format!("/api/v1/jobs/{job}/trigger"), None)
        .await;
    assert_eq!(status, 202, "{run}");
    run["id"].as_i64().expect("a run id")
}

/// The run's detail (with its attempts) once it has ended; the test fails after 30 s.
pub async fn ended(node: &NodeProcess, run: i64) -> Value {
    wait_for(
        Duration::from_secs(30),
        &format!("run {run} to end"),
        || async {
            let (_, detail) = node
                .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
                .await;
            ENDED
                .contains(&detail["state"].as_str().unwrap_or(""))
                .then_some(detail)
        },
    )
    .await
}

/// The messages of the run's live log, in order.
pub async fn log_messages(node: &NodeProcess, run: i64) -> Vec<String> {
    let (status, page) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{run}/logs?limit=1000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    page["lines"]
        .as_array()
        .map(|lines| {
            lines
                .iter()
                .filter_map(|l| l["message"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}
