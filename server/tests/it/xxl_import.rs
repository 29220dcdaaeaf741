//! `carillon import xxl-job` against a real MariaDB holding XXL-JOB 2.4's schema and fixture
//! rows: the dry run changes nothing, the import brings every BEAN job across exactly, lists
//! the GLUE job and the orphan with their reasons, a second run changes nothing, and a change
//! in XXL-JOB updates the same Carillon job.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::cli::carillon;
use support::db::{Engine, TestDb};
use support::node::Solo;

const SCHEMA: &str = include_str!("../xxl/schema_2_4.sql");
const FIXTURE: &str = include_str!("../xxl/fixture.sql");

/// Runs `carillon import xxl-job --from URL <extra>`; returns success, stdout, stderr.
fn import(node: &Solo, from: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "import",
        "xxl-job",
        "--from",
        from,
        "--app-map",
        "xxl-job-executor-sample=sample",
        "--timezone",
        "Asia/Shanghai",
    ];
    args.extend(extra);
    carillon(&node.url(""), &args)
}

fn import_json(node: &Solo, from: &str, extra: &[&str]) -> Value {
    let mut all = extra.to_vec();
    all.extend(["-o", "json"]);
    let (ok, stdout, stderr) = import(node, from, &all);
    assert!(ok, "import failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// XXL-JOB id → action of a report.
fn actions(report: &Value) -> Vec<(i64, String)> {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["xxl_id"].as_i64().unwrap(),
                j["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn jobs(node: &Solo) -> Vec<Value> {
    let (status, body) = node
        .call(Method::GET, "/api/v1/jobs?limit=1000", None)
        .await;
    assert_eq!(status, 200, "{body}");
    let mut jobs = body["jobs"].as_array().unwrap().clone();
    jobs.sort_by_key(|j| j["name"].as_str().unwrap_or_default().to_owned());
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xxl_job_jobs_come_across_exactly_and_idempotently() {
    let Some(xxl) = TestDb::create(Engine::Mysql).await else {
        return; // MySQL left out by CARILLON_TEST_BACKENDS (refused under CI=true)
    };
    xxl.execute_script(SCHEMA).await;
    xxl.execute_script(FIXTURE).await;
    let node = Solo::start(|_| {}).await;

    // The dry run: the plan, and nothing written.
    let plan = import_json(&node, &xxl.url, &["--dry-run"]);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(
        actions(&plan),
        [
            (1, "created".to_owned()),
            (2, "created".to_owned()),
            (3, "created".to_owned()),
            (4, "not importable".to_owned()),
            (5, "created".to_owned()),
            (6, "not importable".to_owned()),
        ]
    );
    let reasons: Vec<&str> = plan["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["action"] == "not importable")
        .map(|j| j["notes"].as_str().unwrap())
        .collect();
    assert!(reasons[0].contains("GLUE_SHELL"), "{reasons:?}");
    assert!(reasons[1].contains("executor group 9"), "{reasons:?}");
    assert!(jobs(&node).await.is_empty(), "a dry run writes nothing");
    let (ok, table, stderr) = import(&node, &xxl.url, &["--dry-run"]);
    assert!(ok, "{stderr}");
    assert!(
        table.starts_with("XXL")
            && table.contains("xxl-4: Clean tmp")
            && table.contains("GLUE_SHELL"),
        "{table}"
    );
    assert!(
        table.contains("dry run, nothing changed: 6 XXL-JOB jobs: 4 created"),
        "{table}"
    );

    // The import.
    let done = import_json(&node, &xxl.url, &[]);
    assert_eq!(
        actions(&done)
            .iter()
            .filter(|(_, a)| a == "created")
            .count(),
        4
    );
    let all = jobs(&node).await;
    let names: Vec<&str> = all.iter().map(|j| j["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "xxl-1: Nightly invoices",
            "xxl-2: Sync ledger",
            "xxl-3: Send report",
            "xxl-5: Warm caches"
        ]
    );
    let [invoices, ledger, report, warm] = [&all[0], &all[1], &all[2], &all[3]];
    assert_eq!(invoices["app"], "billing-executor");
    assert_eq!(invoices["handler"], "invoiceJob");
    assert_eq!(invoices["schedule"], json!({ "cron": "0 30 2 * * ?" }));
    assert_eq!(invoices["timezone"], "Asia/Shanghai");
    assert_eq!(invoices["args"], "region=eu");
    assert_eq!(invoices["balance"], "round_robin");
    assert_eq!(invoices["overlap"], "queue");
    assert_eq!(invoices["misfire"], "skip");
    assert_eq!(invoices["timeout_ms"], 600_000);
    assert_eq!(invoices["retry"]["max_attempts"], 3);
    assert_eq!(invoices["state"], "running");
    let description = invoices["description"].as_str().unwrap();
    for part in [
        "Nightly invoices",
        "Author: ana",
        "Alarm e-mail: ops@example.com",
        "Imported from XXL-JOB job 1 (Billing)",
    ] {
        assert!(
            description.contains(part),
            "{part:?} missing from {description:?}"
        );
    }
    // XXL-JOB's child job 3 runs after each success of job 1, named by its Carillon id.
    assert_eq!(
        invoices["children"],
        json!({ "on_success": [report["id"]] }),
        "{invoices}"
    );
    assert_eq!(ledger["schedule"], json!({ "every": "30s" }));
    assert_eq!(ledger["sharding"]["broadcast"], true);
    assert_eq!(ledger["overlap"], "skip");
    assert_eq!(ledger["misfire"], "fire_once");
    assert_eq!(ledger["args"], Value::Null);
    assert_eq!(ledger["state"], "running");
    assert_eq!(report["app"], "sample", "--app-map renames the app");
    assert_eq!(report["schedule"], json!({ "manual": true }));
    assert_eq!(
        report["args"], r#"{"to":"ops"}"#,
        "XXL-JOB's param stays a string"
    );
    assert_eq!(report["balance"], "failover");
    assert_eq!(report["overlap"], "replace");
    assert_eq!(report["state"], "stopped");
    assert_eq!(warm["balance"], "busyover");
    assert_eq!(warm["timeout_ms"], 30_000);
    assert_eq!(warm["retry"]["max_attempts"], 2);
    assert_eq!(warm["state"], "stopped");

    // A job without a schedule is triggered, never started.
    let report_id = report["id"].as_i64().unwrap();
    let (status, body) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{report_id}/start"),
            None,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("schedule.manual"), "{body}");
    let (status, body) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{report_id}/trigger"),
            None,
        )
        .await;
    assert_eq!(status, 202, "{body}");

    // Again: nothing changes.
    let again = import_json(&node, &xxl.url, &[]);
    assert!(
        actions(&again)
            .iter()
            .all(|(_, a)| a == "unchanged" || a == "not importable"),
        "{again}"
    );
    assert_eq!(jobs(&node).await, all, "a second import changed nothing");

    // A change in XXL-JOB updates the same jobs.
    xxl.execute_script(
        "UPDATE xxl_job_info SET job_desc = 'Nightly invoices v2', schedule_conf = '0 45 2 * * ?' \
         WHERE id = 1; UPDATE xxl_job_info SET trigger_status = 0 WHERE id = 2;",
    )
    .await;
    let changed = import_json(&node, &xxl.url, &[]);
    assert_eq!(
        actions(&changed),
        [
            (1, "updated".to_owned()),
            (2, "updated".to_owned()),
            (3, "unchanged".to_owned()),
            (4, "not importable".to_owned()),
            (5, "unchanged".to_owned()),
            (6, "not importable".to_owned()),
        ]
    );
    let after = jobs(&node).await;
    assert_eq!(after.len(), 4);
    assert_eq!(after[0]["id"], invoices["id"]);
    assert_eq!(after[0]["name"], "xxl-1: Nightly invoices v2");
    assert_eq!(after[0]["schedule"], json!({ "cron": "0 45 2 * * ?" }));
    assert_eq!(after[1]["id"], ledger["id"]);
    assert_eq!(after[1]["state"], "stopped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_source_is_named_and_nothing_is_written() {
    let node = Solo::start(|_| {}).await;
    let (ok, _, stderr) = import(&node, "postgres://postgres@127.0.0.1:5432/test", &[]);
    assert!(!ok);
    assert!(
        stderr.contains("--from") && stderr.contains("mysql://"),
        "{stderr}"
    );
    let (ok, _, stderr) = import(&node, "mysql://root@127.0.0.1:1/xxl_job", &[]);
    assert!(!ok);
    assert!(
        stderr.contains("cannot connect to XXL-JOB's database"),
        "{stderr}"
    );
    let Some(empty) = TestDb::create(Engine::Mysql).await else {
        return; // MySQL left out by CARILLON_TEST_BACKENDS (refused under CI=true)
    };
    let (ok, _, stderr) = import(&node, &empty.url, &[]);
    assert!(!ok);
    assert!(stderr.contains("cannot read xxl_job_group"), "{stderr}");
    assert!(jobs(&node).await.is_empty());
}
