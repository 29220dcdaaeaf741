//! Run-history retention on a real node with a real executor, on each backend: the node
//! deletes finished runs past `retention.runs` with their attempts, keeps dead letters for
//! `retention.dead_letters`, follows a job's own `history` rule (`keep: forever`,
//! `max_runs`), counts what it deleted in `/metrics`; and an operator purges by hand with
//! `carillon runs purge` (dry run first).
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::executor::{self, Executor};
use support::node::{NodeProcess, NodeSpec, TOKEN};

for_engine!(
    postgres,
    Postgres,
    [retention_deletes_what_the_rules_no_longer_keep]
);
for_engine!(
    mysql,
    Mysql,
    [retention_deletes_what_the_rules_no_longer_keep]
);
for_engine!(
    sqlite,
    Sqlite,
    [retention_deletes_what_the_rules_no_longer_keep]
);

async fn create_job(node: &NodeProcess, name: &str, handler: &str, history: Value) -> i64 {
    let mut job = json!({"name": name, "app": "py", "handler": handler,
        "schedule": {"every": "1s"}, "start": true});
    if !history.is_null() {
        job["history"] = history;
    }
    let (status, body) = node.call(Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

/// The job's runs, newest first (at most 500).
async fn runs_of(node: &NodeProcess, job: i64) -> Vec<Value> {
    let (status, body) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs?job_id={job}&limit=500"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["runs"].as_array().unwrap().clone()
}

fn finished(runs: &[Value]) -> usize {
    runs.iter().filter(|r| r["finished_at"].is_string()).count()
}

/// The value of a counter or gauge line in `/metrics`, if present.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Runs `carillon <args>` against the node: (success, stdout, stderr).
fn cli_run(node: &NodeProcess, home: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_carillon"))
        .args(args)
        .env("CARILLON_URL", node.url(""))
        .env("CARILLON_TOKEN", TOKEN)
        .env("XDG_DATA_HOME", home)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn cli(node: &NodeProcess, home: &std::path::Path, args: &[&str]) -> String {
    let (ok, stdout, stderr) = cli_run(node, home, args);
    assert!(ok, "carillon {args:?}: {stdout}{stderr}");
    stdout
}

async fn retention_deletes_what_the_rules_no_longer_keep(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("r1", &db.url, dir.path());
    spec.extra_env = executor::node_env();
    spec.extra_env.extend([
        ("CARILLON_RETENTION_RUNS", "3s".to_owned()),
        ("CARILLON_RETENTION_DEAD_LETTERS", "forever".to_owned()),
        ("CARILLON_RETENTION_INTERVAL_MS", "300".to_owned()),
        // Small batches: a pass goes through many of them.
        ("CARILLON_RETENTION_BATCH", "2".to_owned()),
    ]);
    let node = NodeProcess::start(spec).await;
    let _py = Executor::start_registered(&node, "py", "py-1").await;

    // A bad rule is refused naming its field, and nothing is created.
    for (history, field) in [
        (json!({"keep": "7x"}), "history.keep"),
        (json!({"max_runs": 0}), "history.max_runs"),
    ] {
        let (status, body) = node
            .call(
                Method::POST,
                "/api/v1/jobs",
                Some(json!({"name": "bad", "app": "py", "handler": "echo",
                    "schedule": {"every": "1s"}, "history": history})),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["field"], field, "{body}");
    }

    let plain = create_job(&node, "plain", "echo", Value::Null).await;
    let capped = create_job(
        &node,
        "capped",
        "echo",
        json!({"keep": "forever", "max_runs": 2}),
    )
    .await;
    let kept = create_job(&node, "kept", "echo", json!({"keep": "forever"})).await;
    let failing = create_job(&node, "failing", "fail", Value::Null).await;
    let (_, job) = node
        .call(Method::GET, &format!("/api/v1/jobs/{capped}"), None)
        .await;
    assert_eq!(
        job["history"],
        json!({"keep": "forever", "max_runs": 2}),
        "{job}"
    );

    // Let them fire for a while, then stop them all.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for job in [plain, capped, kept, failing] {
        let (status, body) = node
            .call(Method::POST, &format!("/api/v1/jobs/{job}/stop"), None)
            .await;
        assert_eq!(status, 200, "{body}");
    }

    // Past `retention.runs` (3 s) every run of the plain job goes; the capped job keeps its
    // two newest; the kept job and the dead letters keep everything.
    support::wait_for(
        Duration::from_secs(20),
        "the plain job's runs deleted",
        || {
            let node = &node;
            async move { runs_of(node, plain).await.is_empty().then_some(()) }
        },
    )
    .await;
    let capped_runs = support::wait_for(Duration::from_secs(10), "two capped runs", || {
        let node = &node;
        async move {
            let runs = runs_of(node, capped).await;
            (runs.len() == 2 && finished(&runs) == 2).then_some(runs)
        }
    })
    .await;
    // The two kept are the newest: all others were scheduled before them.
    let kept_runs = runs_of(&node, kept).await;
    assert!(
        kept_runs.len() >= 4,
        "the kept job keeps its runs: {kept_runs:?}"
    );
    let dead = runs_of(&node, failing).await;
    assert!(dead.len() >= 4, "dead letters kept: {dead:?}");
    assert!(dead.iter().all(|r| r["state"] == "failed"), "{dead:?}");
    assert!(capped_runs.iter().all(|r| r["state"] == "succeeded"));

    let metrics = node.metrics().await;
    let deleted_runs = metric(&metrics, "carillon_history_deleted_total{table=\"runs\"}").unwrap();
    let deleted_attempts = metric(
        &metrics,
        "carillon_history_deleted_total{table=\"attempts\"}",
    )
    .unwrap();
    assert!(deleted_runs >= 6.0, "{metrics}");
    assert!(
        deleted_attempts >= deleted_runs,
        "each run had an attempt: {metrics}"
    );
    assert!(
        metric(&metrics, "carillon_history_oldest_run_timestamp_seconds").is_some(),
        "{metrics}"
    );

    // By hand: a dry run counts and deletes nothing; then the purge deletes the kept job's
    // runs, and only those.
    let home = tempfile::tempdir().unwrap();
    let before = "2999-01-01T00:00:00Z";
    let job = kept.to_string();
    let said = cli(
        &node,
        home.path(),
        &[
            "runs",
            "purge",
            "--before",
            before,
            "--job",
            &job,
            "--dry-run",
        ],
    );
    let expected = format!(
        "would delete {} runs and {} attempts of job {kept}",
        kept_runs.len(),
        kept_runs.len()
    );
    assert!(said.contains(&expected), "{said}");
    assert_eq!(runs_of(&node, kept).await.len(), kept_runs.len());
    let said = cli(
        &node,
        home.path(),
        &["runs", "purge", "--before", before, "--job", &job],
    );
    assert!(
        said.contains(&format!("deleted {} runs", kept_runs.len())),
        "{said}"
    );
    assert!(runs_of(&node, kept).await.is_empty());
    assert_eq!(runs_of(&node, failing).await.len(), dead.len());
    let (ok, _, stderr) = cli_run(
        &node,
        home.path(),
        &["runs", "purge", "--before", "nonsense"],
    );
    assert!(!ok && stderr.contains("--before"), "{stderr}");
}
