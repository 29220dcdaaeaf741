//! A namespace's quotas through the REST API of a real node, on every backend: the jobs and
//! workflows it may hold, its pending tasks and its enqueue rate, each refused past its quota
//! with a problem document naming it (and nothing stored), set only by the cluster's admins.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::node::{NodeProcess, NodeSpec, TOKEN};

for_engine!(
    postgres,
    Postgres,
    [quotas_refuse_work_past_them_and_only_cluster_admins_set_them]
);
for_engine!(
    mysql,
    Mysql,
    [quotas_refuse_work_past_them_and_only_cluster_admins_set_them]
);
for_engine!(
    sqlite,
    Sqlite,
    [quotas_refuse_work_past_them_and_only_cluster_admins_set_them]
);

async fn expect(
    node: &NodeProcess,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    let (got, answer) = node.call(method.clone(), path, body).await;
    assert_eq!(got, status, "{method} {path}: {answer}");
    answer
}

fn job(name: &str) -> Value {
    json!({"name": name, "app": "billing", "handler": "report",
        "schedule": {"cron": "0 0 2 * * ?"}})
}

fn tasks(count: usize) -> Value {
    let one = json!({"app": "billing", "handler": "report", "delay": "1h"});
    json!({"tasks": vec![one; count]})
}

/// A refusal of a quota: `409`, its problem type, and a detail naming `needle`.
fn assert_over_quota(answer: &Value, needle: &str) {
    assert_eq!(
        answer["type"], "urn:carillon:problem:quota-exceeded",
        "{answer}"
    );
    let detail = answer["detail"].as_str().unwrap();
    assert!(detail.contains(needle), "{detail}");
}

async fn quotas_refuse_work_past_them_and_only_cluster_admins_set_them(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("n1", &db.url, dir.path())).await;
    let made = expect(
        &node,
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"name": "team-q", "quotas": {"jobs": 2, "pending_tasks": 3}})),
        201,
    )
    .await;
    assert_eq!(
        made["quotas"],
        json!({"jobs": 2, "pending_tasks": 3}),
        "{made}"
    );

    // Jobs and workflows count together; a workflow's steps do not.
    expect(
        &node,
        Method::POST,
        "/api/v1/jobs?namespace=team-q",
        Some(job("one")),
        201,
    )
    .await;
    let flow = json!({"name": "flow", "schedule": {"cron": "0 0 4 * * *"},
        "steps": [{"name": "a", "app": "billing", "handler": "work"},
                  {"name": "b", "app": "billing", "handler": "work", "needs": ["a"]}]});
    expect(
        &node,
        Method::POST,
        "/api/v1/workflows?namespace=team-q",
        Some(flow),
        201,
    )
    .await;
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/jobs?namespace=team-q",
            Some(job("three")),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    assert_over_quota(&answer, "may hold 2 jobs and workflows and holds 2");
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/jobs/bulk?namespace=team-q",
            Some(json!({"jobs": [job("four")]})),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    let listed = expect(
        &node,
        Method::GET,
        "/api/v1/jobs?namespace=team-q",
        None,
        200,
    )
    .await;
    assert_eq!(listed["jobs"].as_array().unwrap().len(), 1, "{listed}");
    // Other namespaces are not bound by it.
    expect(&node, Method::POST, "/api/v1/jobs", Some(job("three")), 201).await;

    // Pending tasks: a batch that would pass the quota is refused whole.
    let enqueue = "/api/v1/tasks?namespace=team-q";
    expect(&node, Method::POST, enqueue, Some(tasks(2)), 201).await;
    let (status, answer) = node.call(Method::POST, enqueue, Some(tasks(2))).await;
    assert_eq!(status, 409, "{answer}");
    assert_over_quota(&answer, "may hold 3 pending tasks and holds 2");
    expect(&node, Method::POST, enqueue, Some(tasks(1)), 201).await;
    let pending = expect(&node, Method::GET, enqueue, None, 200).await;
    assert_eq!(pending["items"].as_array().unwrap().len(), 3, "{pending}");

    // A namespace's own admin may change its description, not lift its quotas.
    let admin = expect(
        &node,
        Method::POST,
        "/api/v1/tokens?namespace=team-q",
        Some(json!({"name": "team-admin", "role": "admin"})),
        201,
    )
    .await;
    let admin = admin["token"].as_str().unwrap().to_owned();
    let path = "/api/v1/namespaces/team-q";
    let (status, answer) = node
        .call_as(&admin, Method::PATCH, path, Some(json!({"quotas": {}})))
        .await;
    assert_eq!(status, 403, "{answer}");
    let (status, answer) = node
        .call_as(
            &admin,
            Method::PATCH,
            path,
            Some(json!({"description": "ours"})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["quotas"]["jobs"], 2, "{answer}");
    let bad = expect(
        &node,
        Method::PATCH,
        path,
        Some(json!({"quotas": {"enqueue_per_second": 0}})),
        400,
    )
    .await;
    assert_eq!(bad["field"], "quotas.enqueue_per_second", "{bad}");

    // The cluster's admin replaces them: jobs unbound, and a rate of 2 tasks a second.
    let changed = expect(
        &node,
        Method::PATCH,
        path,
        Some(json!({"quotas": {"enqueue_per_second": 2}})),
        200,
    )
    .await;
    assert_eq!(
        changed["quotas"],
        json!({"enqueue_per_second": 2}),
        "{changed}"
    );
    // Every node reads quotas within 5 s; this one reads them again at once after its PATCH.
    expect(
        &node,
        Method::POST,
        "/api/v1/jobs?namespace=team-q",
        Some(job("three")),
        201,
    )
    .await;
    expect(&node, Method::POST, enqueue, Some(tasks(2)), 201).await;
    let over = carillon_tls::http_client()
        .unwrap()
        .post(node.url(enqueue))
        .bearer_auth(TOKEN)
        .json(&tasks(1))
        .send()
        .await
        .unwrap();
    assert_eq!(over.status(), 429);
    let wait: u64 = over.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&wait), "Retry-After: {wait}");
    let problem: Value = over.json().await.unwrap();
    assert_eq!(
        problem["type"], "urn:carillon:problem:rate-limited",
        "{problem}"
    );
    tokio::time::sleep(Duration::from_secs(wait)).await;
    expect(&node, Method::POST, enqueue, Some(tasks(1)), 201).await;

    // /metrics says what each namespace holds against its quotas.
    let scrape = node.metrics().await;
    for line in [
        "carillon_namespace_jobs{namespace=\"team-q\"} 3",
        "carillon_namespace_jobs{namespace=\"default\"} 1",
        "carillon_namespace_pending_tasks{namespace=\"team-q\"} 6",
        "carillon_namespace_pending_tasks{namespace=\"default\"} 0",
    ] {
        assert!(
            scrape.lines().any(|l| l == line),
            "{line} not in:\n{scrape}"
        );
    }
    assert!(
        !scrape.contains("carillon_namespace_quota_jobs{"),
        "team-q's job quota was lifted:\n{scrape}"
    );

    // The CLI sets them too, and lists them.
    let cli = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_carillon"))
            .args(args)
            .env("CARILLON_URL", node.url(""))
            .env("CARILLON_TOKEN", TOKEN)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "carillon {args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    cli(&[
        "namespaces",
        "quotas",
        "team-q",
        "--max-jobs",
        "7",
        "--max-pending-tasks",
        "9",
    ]);
    let shown = expect(&node, Method::GET, path, None, 200).await;
    assert_eq!(
        shown["quotas"],
        json!({"jobs": 7, "pending_tasks": 9}),
        "{shown}"
    );
    let listed = cli(&["namespaces", "ls"]);
    let scrape = node.metrics().await;
    assert!(
        scrape
            .lines()
            .any(|l| l == "carillon_namespace_quota_jobs{namespace=\"team-q\"} 7"),
        "{scrape}"
    );
    let row = listed.lines().find(|l| l.starts_with("team-q")).unwrap();
    assert!(row.contains(" 7 ") && row.contains(" 9 "), "{listed}");
}
