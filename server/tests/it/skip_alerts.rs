//! Instants a schedule did not fire are told, on every backend: a calendar's exclusion, the
//! overlap rule `skip`, instants due while a job was stopped, and instants no node fired in
//! time (the node was down) each reach the alert webhook naming the job, the reason and the
//! instants, and are counted in `carillon_instants_skipped_total`; a job that skips every
//! second is told at once, then at most once per `alerts.skipped_every_ms` with everything
//! since.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::TestDb;
use support::executor::{self, Executor};
use support::node::{NodeProcess, NodeSpec};
use support::runs::create_job;
use support::wait_for;
use support::webhook::Receiver;

for_engine!(postgres, Postgres, [skipped_instants_are_told]);
for_engine!(mysql, Mysql, [skipped_instants_are_told]);
for_engine!(sqlite, Sqlite, [skipped_instants_are_told]);

const EVERY_MS: i64 = 3_000;

fn spec(db: &TestDb, dir: &std::path::Path, receiver: &Receiver) -> NodeSpec {
    let mut spec = NodeSpec::fast("s1", &db.url, dir);
    // Instants later than this are missed, not late.
    spec.misfire_threshold_ms = 1_000;
    spec.extra_env = executor::node_env();
    spec.extra_env.extend([
        ("CARILLON_ALERTS_WEBHOOK", receiver.url("/node")),
        ("CARILLON_ALERTS_SKIPPED_EVERY_MS", EVERY_MS.to_string()),
    ]);
    spec
}

/// The skip alerts of job `name`: for each, its reasons with their counts.
fn told(receiver: &Receiver, name: &str) -> Vec<Vec<(String, u64)>> {
    receiver
        .bodies("/node")
        .into_iter()
        .filter(|b| b["event"] == "instants_skipped" && b["job"]["name"] == name)
        .map(|b| {
            b["skipped"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    (
                        s["reason"].as_str().unwrap().to_owned(),
                        s["count"].as_u64().unwrap(),
                    )
                })
                .collect()
        })
        .collect()
}

async fn wait_told(receiver: &Receiver, name: &str, reason: &str) -> Value {
    receiver
        .wait(
            "/node",
            &format!("{name} to be told of a {reason} skip"),
            |b| {
                b["event"] == "instants_skipped"
                    && b["job"]["name"] == name
                    && b["skipped"]
                        .as_array()
                        .is_some_and(|s| s.iter().any(|s| s["reason"] == reason))
            },
        )
        .await
}

fn wall(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S").to_string()
}

async fn skipped_instants_are_told(db: TestDb) {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(spec(&db, dir.path(), &receiver)).await;
    let _py = Executor::start_registered(&node, "py", "py-1").await;

    // A calendar excluding the next hour: a job firing every second skips each instant.
    let now = Utc::now();
    let (status, body) = node
        .call(
            Method::PUT,
            "/api/v1/calendars/closed",
            Some(json!({"timezone": "UTC",
                        "ranges": [{"from": wall(now), "to": wall(now + chrono::Duration::hours(1))}]})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let calendared_since = std::time::Instant::now();
    create_job(
        &node,
        json!({"name": "calendared", "app": "py", "handler": "echo",
               "schedule": {"cron": "* * * * * ?"}, "calendars": ["closed"], "start": true}),
    )
    .await;
    // A run of three seconds every second, under `overlap: skip`.
    create_job(
        &node,
        json!({"name": "overlapping", "app": "py", "handler": "slow", "args": {"seconds": 3},
               "schedule": {"every": "1s"}, "overlap": "skip", "start": true}),
    )
    .await;
    // A job stopped for a few seconds, then started again, with misfire `skip` (on cron: an
    // `every` schedule counts from its start again).
    let paused = create_job(
        &node,
        json!({"name": "paused", "app": "py", "handler": "echo",
               "schedule": {"cron": "* * * * * ?"}, "misfire": "skip", "start": true}),
    )
    .await;
    wait_for(
        Duration::from_secs(20),
        "the paused job to fire",
        || async {
            let (_, runs) = node
                .call(Method::GET, &format!("/api/v1/runs?job_id={paused}"), None)
                .await;
            runs["runs"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
                .then_some(())
        },
    )
    .await;
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/jobs/{paused}/stop"), None)
        .await;
    assert!(status < 300, "{status} {body}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/jobs/{paused}/start"), None)
        .await;
    assert!(status < 300, "{status} {body}");

    let calendar = wait_told(&receiver, "calendared", "calendar").await;
    assert_eq!(
        calendar["skipped"][0]["detail"]
            .as_str()
            .map(|d| d.contains("closed")),
        Some(true),
        "{calendar}"
    );
    let overlap = wait_told(&receiver, "overlapping", "overlap").await;
    assert!(
        overlap["summary"]
            .as_str()
            .unwrap()
            .contains("overlap: skip"),
        "{overlap}"
    );
    let paused_alert = wait_told(&receiver, "paused", "paused").await;
    let skipped = &paused_alert["skipped"][0];
    assert!(skipped["count"].as_u64().unwrap() >= 2, "{paused_alert}");
    assert!(skipped["first"].is_string() && skipped["last"].is_string());

    // Held between tellings: skips every second, told once per interval with their count.
    tokio::time::sleep(Duration::from_millis(2 * EVERY_MS as u64 + 1_500)).await;
    let tellings = told(&receiver, "calendared");
    let intervals = calendared_since.elapsed().as_millis() as usize / EVERY_MS as usize;
    assert!(
        tellings.len() >= 2 && tellings.len() <= intervals + 2,
        "told at once, then at most once per {EVERY_MS} ms ({intervals} intervals): {tellings:?}"
    );
    // Every telling after the first holds the skips of its interval together.
    assert!(
        tellings[1..]
            .iter()
            .all(|t| t.iter().map(|(_, n)| n).sum::<u64>() >= 2),
        "several skips told in one alert: {tellings:?}"
    );
    let metrics = node.metrics().await;
    for reason in ["calendar", "overlap", "paused"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("carillon_instants_skipped_total{")
                    && l.contains(&format!("reason=\"{reason}\""))
            })
            .unwrap_or_else(|| panic!("no {reason} series:\n{metrics}"));
        let count: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(count >= 1.0, "{line}");
    }

    // A node down past the misfire threshold: the instants no node fired are told when it
    // is back.
    let mut node = node;
    node.kill9();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let node = NodeProcess::start(spec(&db, dir.path(), &receiver)).await;
    let misfire = wait_told(&receiver, "paused", "misfire").await;
    let skipped = misfire["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["reason"] == "misfire")
        .unwrap();
    assert!(skipped["count"].as_u64().unwrap() >= 2, "{misfire}");
    drop(node);
}
