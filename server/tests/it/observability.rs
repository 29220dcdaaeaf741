//! What operators see of a node's work, end to end: `/metrics` scraped while real executors
//! run jobs, the dashboard's statistics, alert webhooks received by a test server, and JSON
//! logs that carry the run id.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::executor::{EXECUTOR_TOKEN, Executor};
use support::node::{NodeProcess, Solo, TOKEN};
use support::wait_for;
use support::webhook::Receiver;

async fn node_with(extra: Vec<(&'static str, String)>) -> Solo {
    Solo::start(|spec| {
        spec.extra_env = support::executor::node_env();
        spec.extra_env.extend(extra);
    })
    .await
}

async fn create(node: &NodeProcess, doc: Value) -> Value {
    let (status, job) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
    assert_eq!(status, 201, "{job}");
    job
}

/// The runs of a job in `state`.
async fn runs_in(node: &NodeProcess, job: &Value, state: &str) -> Vec<Value> {
    let (status, page) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs/{}/runs?state={state}&limit=1000", job["id"]),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    page["runs"].as_array().cloned().unwrap_or_default()
}

async fn scrape(node: &NodeProcess, token: &str) -> (u16, String) {
    let response = carillon_tls::http_client()
        .unwrap()
        .get(node.url("/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The value of the series `series` (name with its labels, as the text format writes it).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn metrics_move_with_the_work_done() {
    let node = node_with(Vec::new()).await;
    let _py = Executor::start_registered(&node, "py", "py-1").await;

    let (status, before) = scrape(&node, TOKEN).await;
    assert_eq!(status, 200, "{before}");
    assert!(before.contains("# TYPE carillon_fire_lateness_seconds histogram"));
    assert_eq!(sample(&before, "carillon_node_leader"), 1.0);
    assert_eq!(sample(&before, "carillon_partitions_owned"), 24.0);
    assert_eq!(
        sample(&before, "carillon_executors_healthy{app=\"py\"}"),
        1.0
    );
    assert_eq!(sample(&before, "carillon_leader_term"), 1.0);
    assert_eq!(sample(&before, "carillon_database_up"), 1.0);
    assert!(sample(&before, "carillon_database_round_trip_seconds") > 0.0);
    let fires_before = sample(
        &before,
        "carillon_fires_total{namespace=\"default\",trigger=\"schedule\"}",
    );

    let echo = create(
        &node,
        json!({"name": "metrics-echo", "app": "py", "handler": "echo",
               "schedule": {"cron": "* * * * * ?"}, "start": true}),
    )
    .await;
    let fail = create(
        &node,
        json!({"name": "metrics-fail", "app": "py", "handler": "fail",
               "schedule": {"every": "1d"}, "retry": {"max_attempts": 2, "initial_delay_ms": 10}}),
    )
    .await;
    let (status, _) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", fail["id"]),
            None,
        )
        .await;
    assert_eq!(status, 202);
    wait_for(
        Duration::from_secs(30),
        "3 echo runs and a failed run",
        || async {
            let ok = runs_in(&node, &echo, "succeeded").await.len() >= 3
                && runs_in(&node, &fail, "failed").await.len() == 1;
            ok.then_some(())
        },
    )
    .await;
    let succeeded = runs_in(&node, &echo, "succeeded").await.len() as f64;

    let (_, after) = scrape(&node, TOKEN).await;
    let moved = |series: &str| sample(&after, series) - sample(&before, series);
    let fired = sample(
        &after,
        "carillon_fires_total{namespace=\"default\",trigger=\"schedule\"}",
    ) - fires_before;
    assert!(fired >= succeeded, "fires {fired} < {succeeded} runs");
    assert!(
        sample(&after, "carillon_claims_total{outcome=\"claimed\"}") >= fired,
        "{after}"
    );
    // Every echo run and both attempts of the failing one were answered by the executor.
    assert!(
        moved("carillon_dispatches_total{outcome=\"answered\"}") >= succeeded + 2.0,
        "{after}"
    );
    assert!(
        moved("carillon_runs_finished_total{namespace=\"default\",state=\"succeeded\"}")
            >= succeeded,
        "{after}"
    );
    assert_eq!(
        moved("carillon_runs_finished_total{namespace=\"default\",state=\"failed\"}"),
        1.0,
        "{after}"
    );
    assert_eq!(
        moved("carillon_dead_letters_total{namespace=\"default\"}"),
        1.0,
        "{after}"
    );
    assert_eq!(moved("carillon_retries_total"), 1.0, "{after}");
    // One lateness per run first dispatched: the echo runs and the failing run.
    assert!(
        moved("carillon_fire_lateness_seconds_count") >= succeeded + 1.0,
        "{after}"
    );

    // The executor gone, the gauge follows once its lease lapses.
    drop(_py);
    wait_for(
        Duration::from_secs(10),
        "the executor to be unhealthy",
        || async {
            let (_, text) = scrape(&node, TOKEN).await;
            (sample(&text, "carillon_executors_healthy{app=\"py\"}") == 0.0).then_some(())
        },
    )
    .await;

    // A token is needed, and an executor's does not open it.
    assert_eq!(scrape(&node, "not-a-token-at-all").await.0, 401);
    assert_eq!(scrape(&node, EXECUTOR_TOKEN).await.0, 403);
}

#[tokio::test]
async fn alerts_reach_webhooks_when_a_run_fails_for_good_and_an_app_loses_its_executors() {
    let receiver = Receiver::start().await;
    let node = node_with(vec![
        ("CARILLON_ALERTS_WEBHOOK", receiver.url("/flaky/global")),
        ("CARILLON_ALERTS_CHECK_MS", "200".to_owned()),
        ("CARILLON_LOG_FORMAT", "json".to_owned()),
    ])
    .await;
    let mut py = Executor::start(&node, "py", "py-1", 1, &[]);
    let job = create(
        &node,
        json!({"name": "nightly-billing", "app": "py", "handler": "fail",
               "schedule": {"every": "1d"}, "retry": {"max_attempts": 1},
               "alerts": {"webhook": receiver.url("/job/billing"), "format": "slack"}}),
    )
    .await;
    // A job that succeeds raises no alert.
    let fine = create(
        &node,
        json!({"name": "fine", "app": "py", "handler": "echo", "schedule": {"every": "1d"}}),
    )
    .await;
    for id in [&job["id"], &fine["id"]] {
        let (status, _) = node
            .call(Method::POST, &format!("/api/v1/jobs/{id}/trigger"), None)
            .await;
        assert_eq!(status, 202);
    }

    // The node's own webhook gets the generic JSON document, after a retry (it answered
    // 500 the first time).
    let global = receiver
        .wait("/flaky/global", "the failed run's alert", |b| {
            b["event"] == "run_failed"
        })
        .await;
    assert_eq!(global["job"]["name"], "nightly-billing", "{global}");
    assert_eq!(global["job"]["app"], "py");
    assert_eq!(global["job"]["handler"], "fail");
    assert_eq!(global["run"]["state"], "failed");
    assert_eq!(global["run"]["error"], "failed on py-1", "{global}");
    assert!(global["run"]["scheduled_at"].is_string(), "{global}");
    let run_id = global["run"]["id"].clone();
    let (_, run) = node
        .call(Method::GET, &format!("/api/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(run["job_id"], job["id"], "{run}");
    assert_eq!(run["state"], "failed");
    wait_for(
        Duration::from_secs(10),
        "the alert to be sent again",
        || async {
            let tries = receiver.bodies("/flaky/global");
            let failed: Vec<_> = tries
                .iter()
                .filter(|b| b["event"] == "run_failed")
                .collect();
            (failed.len() == 2 && failed[0] == failed[1]).then_some(())
        },
    )
    .await;

    // The job's own webhook gets chat text.
    let chat = receiver
        .wait("/job/billing", "the job's own alert", |_| true)
        .await;
    let text = chat["text"].as_str().unwrap();
    assert!(
        text.contains("nightly-billing") && text.contains("failed for good"),
        "{text}"
    );
    assert!(text.contains("failed on py-1"), "{text}");

    // The app's only executor dies: the leader tells the node's webhook.
    py.kill9();
    let unhealthy = receiver
        .wait("/flaky/global", "the app health alert", |b| {
            b["event"] == "app_unhealthy"
        })
        .await;
    assert_eq!(unhealthy["app"], "py", "{unhealthy}");
    let _py = Executor::start(&node, "py", "py-1", 1, &[]);
    receiver
        .wait("/flaky/global", "the app recovery alert", |b| {
            b["event"] == "app_recovered" && b["app"] == "py"
        })
        .await;

    let failures: Vec<Value> = receiver
        .bodies("/flaky/global")
        .into_iter()
        .filter(|b| b["event"] == "run_failed")
        .collect();
    assert!(
        failures
            .iter()
            .all(|b| b["job"]["name"] == "nightly-billing"),
        "only the failing job alerts: {failures:?}"
    );

    // JSON logs, and the line about the failed run carries its id.
    let log = node.log_text();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let about_run = lines
        .iter()
        .find(|l| l["fields"]["message"] == "run failed for good")
        .unwrap_or_else(|| panic!("no line about the failed run in:\n{log}"));
    assert_eq!(about_run["fields"]["run_id"], run_id, "{about_run}");
}

#[tokio::test]
async fn a_namespace_webhook_gets_the_alerts_of_its_jobs_that_name_none() {
    let receiver = Receiver::start().await;
    let node = node_with(vec![]).await;
    let (status, team) = node
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": "team-a", "alert_webhook": receiver.url("/team-a/old")})),
        )
        .await;
    assert_eq!(status, 201, "{team}");
    let (status, team) = node
        .call(
            Method::PATCH,
            "/api/v1/namespaces/team-a",
            Some(json!({"alert_webhook": receiver.url("/team-a")})),
        )
        .await;
    assert_eq!(
        (status, &team["alert_webhook"]),
        (200, &json!(receiver.url("/team-a")))
    );
    let (status, bad) = node
        .call(
            Method::PATCH,
            "/api/v1/namespaces/team-a",
            Some(json!({"alert_webhook": "ftp://example.com"})),
        )
        .await;
    assert_eq!(
        (status, &bad["field"]),
        (400, &json!("alert_webhook")),
        "{bad}"
    );
    let _py = Executor::start(&node, "py", "py-1", 1, &[]);
    let failing = |name: &str, own: Option<String>| {
        let mut job = json!({"name": name, "app": "py", "handler": "fail",
            "schedule": {"every": "1d"}, "retry": {"max_attempts": 1}});
        if let Some(url) = own {
            job["alerts"] = json!({"webhook": url});
        }
        job
    };
    let mut ids = Vec::new();
    for job in [
        failing("team-report", None),
        failing("own-hook", Some(receiver.url("/own"))),
    ] {
        let (status, made) = node
            .call(Method::POST, "/api/v1/jobs?namespace=team-a", Some(job))
            .await;
        assert_eq!(status, 201, "{made}");
        ids.push(made["id"].clone());
    }
    // The same job in `default`, which has no webhook: its failure goes nowhere.
    let other = create(&node, failing("team-report", None)).await;
    ids.push(other["id"].clone());
    for id in &ids {
        let (status, _) = node
            .call(Method::POST, &format!("/api/v1/jobs/{id}/trigger"), None)
            .await;
        assert_eq!(status, 202);
    }
    let alert = receiver
        .wait("/team-a", "team-a's job's alert", |b| {
            b["event"] == "run_failed"
        })
        .await;
    assert_eq!(alert["job"]["name"], "team-report", "{alert}");
    assert_eq!(alert["job"]["namespace"], "team-a", "{alert}");
    assert_eq!(alert["job"]["id"], ids[0], "{alert}");
    let own = receiver
        .wait("/own", "the job's own alert", |b| {
            b["event"] == "run_failed"
        })
        .await;
    assert_eq!(own["job"]["name"], "own-hook", "{own}");
    wait_for(
        Duration::from_secs(10),
        "the default job's run to fail",
        || async { (!runs_in(&node, &other, "failed").await.is_empty()).then_some(()) },
    )
    .await;
    let to_team: Vec<Value> = receiver.bodies("/team-a");
    assert!(
        to_team.iter().all(|b| b["job"]["id"] == ids[0]),
        "only team-report's alert goes to team-a: {to_team:?}"
    );
    assert!(receiver.bodies("/team-a/old").is_empty());
}

#[tokio::test]
async fn a_late_fire_is_alerted_and_shown_in_the_statistics() {
    let receiver = Receiver::start().await;
    let node = node_with(vec![
        ("CARILLON_ALERTS_WEBHOOK", receiver.url("/global")),
        ("CARILLON_ALERTS_LATE_AFTER_MS", "1500".to_owned()),
    ])
    .await;
    // The job's app has no executor yet: its first runs wait, then go late.
    let job = create(
        &node,
        json!({"name": "late-report", "app": "late", "handler": "echo",
               "schedule": {"cron": "* * * * * ?"}, "start": true}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let _late = Executor::start(&node, "late", "late-1", 1, &[]);

    let alert = receiver
        .wait("/global", "a late fire's alert", |b| {
            b["event"] == "run_late"
        })
        .await;
    assert_eq!(alert["job"]["name"], "late-report", "{alert}");
    let lateness = alert["lateness_ms"].as_i64().unwrap();
    assert!(lateness > 1_500, "{alert}");

    wait_for(
        Duration::from_secs(20),
        "on-time runs after the late ones",
        || async { (runs_in(&node, &job, "succeeded").await.len() >= 8).then_some(()) },
    )
    .await;
    let (status, stats) = node
        .call(Method::GET, "/api/v1/stats?minutes=5", None)
        .await;
    assert_eq!(status, 200, "{stats}");
    assert_eq!(stats["window_minutes"], 5);
    assert_eq!(stats["late_after_ms"], 1_500);
    let minutes = stats["per_minute"].as_array().unwrap();
    assert_eq!(minutes.len(), 5, "{stats}");
    let per_minute: i64 = minutes
        .iter()
        .map(|m| m["succeeded"].as_i64().unwrap())
        .sum();
    assert_eq!(per_minute, stats["succeeded"].as_i64().unwrap(), "{stats}");
    assert!(stats["succeeded"].as_i64().unwrap() >= 8, "{stats}");
    assert_eq!(stats["success_rate"], 1.0, "{stats}");
    let late = stats["late_fires"].as_array().unwrap();
    assert!(!late.is_empty(), "{stats}");
    assert!(
        late.iter()
            .all(|l| l["lateness_ms"].as_i64().unwrap() > 1_500)
    );
    assert!(late.iter().all(|l| l["run"]["job_id"] == job["id"]));
    assert!(late.iter().all(|l| l["run"]["job_name"] == "late-report"));
    assert!(
        stats["late"].as_i64().unwrap() >= late.len() as i64,
        "{stats}"
    );
    // Runs name their job wherever they are listed; a deleted job's runs say null.
    let (_, runs) = node.call(Method::GET, "/api/v1/runs?limit=5", None).await;
    assert_eq!(runs["runs"][0]["job_name"], "late-report", "{runs}");
    let run_id = &runs["runs"][0]["id"];
    let (status, _) = node
        .call(Method::DELETE, &format!("/api/v1/jobs/{}", job["id"]), None)
        .await;
    assert_eq!(status, 204);
    let (_, run) = node
        .call(Method::GET, &format!("/api/v1/runs/{run_id}"), None)
        .await;
    assert_eq!(run["job_name"], Value::Null, "{run}");
    assert_eq!(run["job_id"], job["id"], "{run}");
    let (status, bad) = node
        .call(Method::GET, "/api/v1/stats?minutes=0", None)
        .await;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["field"], "minutes");
    // One minute is this minute alone: nothing settled to read (schemathesis found it
    // panicking on an empty range).
    let (status, one) = node
        .call(Method::GET, "/api/v1/stats?minutes=1", None)
        .await;
    assert_eq!(status, 200, "{one}");
}

#[tokio::test]
async fn a_bad_alert_webhook_is_refused_naming_the_field_and_the_job_is_kept() {
    let node = node_with(Vec::new()).await;
    let job = create(
        &node,
        json!({"name": "kept", "app": "py", "handler": "echo", "schedule": {"every": "1h"},
               "alerts": {"webhook": "http://127.0.0.1:9/hook", "late_after_ms": 5000}}),
    )
    .await;
    assert_eq!(job["alerts"]["late_after_ms"], 5000, "{job}");
    assert_eq!(job["alerts"]["format"], "json", "{job}");
    let path = format!("/api/v1/jobs/{}", job["id"]);
    let (status, problem) = node
        .call(
            Method::PATCH,
            &path,
            Some(json!({"alerts": {"webhook": "ftp://example.com/x"}})),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["field"], "alerts.webhook", "{problem}");
    let (_, still) = node.call(Method::GET, &path, None).await;
    assert_eq!(still["alerts"], job["alerts"], "{still}");
    let (status, cleared) = node
        .call(Method::PATCH, &path, Some(json!({"alerts": null})))
        .await;
    assert_eq!(status, 200, "{cleared}");
    assert!(cleared.get("alerts").is_none(), "{cleared}");

    // The listing's search finds names by any part of them, ignoring case.
    for name in ["Nightly-ETL-eu", "nightly-etl-us", "weekly_report"] {
        create(
            &node,
            json!({"name": name, "app": "py", "handler": "echo", "schedule": {"every": "1h"}}),
        )
        .await;
    }
    let (status, found) = node
        .call(Method::GET, "/api/v1/jobs?search=ETL&sort=name", None)
        .await;
    assert_eq!(status, 200, "{found}");
    let names: Vec<&str> = found["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Nightly-ETL-eu", "nightly-etl-us"]);
    let (_, none) = node
        .call(Method::GET, "/api/v1/jobs?search=%25", None)
        .await;
    assert_eq!(
        none["jobs"],
        json!([]),
        "a % is searched for, not a wildcard"
    );
}

/// Inserts `count` runs of job 1 finished `minutes_ago` minutes before `now_ms`, straight into
/// the node's SQLite database.
async fn finished_runs(url: &str, now_ms: i64, minutes_ago: i64, count: i64) {
    use sqlx::{Connection, Executor};
    // Instants of job 1 are unique: each inserted run takes the next one.
    static INSTANT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    let at = now_ms - minutes_ago * 60_000;
    let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
    for _ in 0..count {
        let sql = format!(
            "INSERT INTO runs (job_id, scheduled_at_ms, partition_id, epoch, node_id, \
             trigger_kind, state, priority, created_at_ms, started_at_ms, finished_at_ms) \
             VALUES (1, {}, 0, 1, 'solo', 'schedule', 'succeeded', 5, {at}, {at}, {at})",
            INSTANT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        c.execute(sqlx::AssertSqlSafe(sql)).await.unwrap();
    }
}

#[tokio::test]
async fn the_statistics_read_each_settled_minute_once_and_the_recent_ones_every_time() {
    let node = node_with(Vec::new()).await;
    let url = &node.spec.database_url;
    let stats = |minutes: i64| {
        let node = &node;
        async move {
            let (status, stats) = node
                .call(
                    Method::GET,
                    &format!("/api/v1/stats?minutes={minutes}"),
                    None,
                )
                .await;
            assert_eq!(status, 200, "{stats}");
            stats["succeeded"].as_i64().unwrap()
        }
    };
    let (_, cluster) = node.call(Method::GET, "/api/v1/cluster", None).await;
    let now = support::node::epoch_ms(
        &cluster["nodes"][0]["last_heartbeat_at"]
            .as_str()
            .map(str::to_owned),
    );
    finished_runs(url, now, 5, 3).await;
    finished_runs(url, now, 20, 4).await;
    assert_eq!(stats(10).await, 3, "the runs of 5 minutes ago");
    // A minute that ended long ago cannot change: it is not read again. (Runs inserted into
    // it behind the node's back show that.)
    finished_runs(url, now, 5, 2).await;
    assert_eq!(stats(10).await, 3);
    // The current minute is read every time.
    finished_runs(url, now, 0, 1).await;
    assert_eq!(stats(10).await, 4);
    // A longer window reads only the older minutes it adds.
    assert_eq!(stats(30).await, 8, "4 of 20 minutes ago, 3 cached, 1 now");
    assert_eq!(stats(10).await, 4);
}
