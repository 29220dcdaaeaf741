//! The `workflows` scenario: how long a workflow's steps wait after the steps they need
//! (`--dag`: one workflow of 100 steps, a fan-out of 50 and their fan-in, then a chain,
//! triggered again and again), and whether many small workflows firing every minute run each
//! step once (`--workflows`: workflows of 5 steps, fan-out of 2 and fan-in, every minute).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use crate::cluster::{ADMIN_TOKEN, Cluster, now_ms};
use crate::executor::{FastExecutor, Receipt, StepReceipt};
use crate::scenarios::{Common, new_cluster, secs};
use crate::stats::{Report, quantile};

#[derive(Debug, Clone)]
pub(crate) struct WorkflowLoad {
    pub(crate) nodes: usize,
    /// Runs of the 100-step workflow, one after the other (0: none).
    pub(crate) dag_runs: usize,
    /// Workflows of 5 steps firing every minute (0: none).
    pub(crate) workflows: usize,
    /// Minutes of their instants measured.
    pub(crate) minutes: u64,
}

fn step(name: &str, needs: &[String]) -> Value {
    json!({"name": name, "app": "bench", "handler": "noop", "needs": needs})
}

/// 100 steps: `root`, 50 parts needing it, `join` needing all parts, then a chain of 48.
fn hundred_steps() -> Value {
    let mut steps = vec![step("root", &[])];
    let parts: Vec<String> = (0..50).map(|i| format!("part-{i}")).collect();
    for part in &parts {
        steps.push(step(part, &["root".to_owned()]));
    }
    steps.push(step("join", &parts));
    let mut previous = "join".to_owned();
    for i in 0..48 {
        let name = format!("chain-{i}");
        steps.push(step(&name, &[previous]));
        previous = name;
    }
    json!({"name": "dag-100", "schedule": {"manual": true}, "steps": steps})
}

/// 5 steps: `a`, then `b` and `c`, then `d` needing both, then `e`.
fn five_steps(i: usize) -> Value {
    let s = |x: &str| x.to_owned();
    json!({"name": format!("small-{i}"), "schedule": {"cron": "0 * * * * *"}, "start": true,
        "steps": [step("a", &[]), step("b", &[s("a")]), step("c", &[s("a")]),
                  step("d", &[s("b"), s("c")]), step("e", &[s("d")])]})
}

/// Each step's wait: its receipt minus the latest receipt among the runs it needed (the fast
/// executor answers as it receives, so that is when the needed step ended). Steps that need
/// nothing are left out.
fn step_waits(receipts: &[Receipt], steps: &[StepReceipt]) -> Vec<i64> {
    let received: HashMap<i64, i64> = receipts.iter().map(|r| (r.run_id, r.received_ms)).collect();
    let mut waits: Vec<i64> = steps
        .iter()
        .filter(|s| !s.upstream_runs.is_empty())
        .filter_map(|s| {
            let ended = s
                .upstream_runs
                .iter()
                .filter_map(|u| received.get(u))
                .max()?;
            Some(received.get(&s.run_id)? - ended)
        })
        .collect();
    waits.sort_unstable();
    waits
}

/// Receipts beyond the first of one run.
fn duplicate_runs(receipts: &[Receipt]) -> usize {
    let mut seen = HashSet::new();
    receipts.iter().filter(|r| !seen.insert(r.run_id)).count()
}

async fn api(
    cluster: &Cluster,
    method: reqwest::Method,
    path: &str,
    body: Value,
) -> anyhow::Result<Value> {
    let response = carillon_tls::http_client()?
        .request(method, format!("{}{path}", cluster.urls()[0]))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await?;
    let status = response.status();
    let answer: Value = response.json().await?;
    anyhow::ensure!(status.is_success(), "{path}: {status} {answer}");
    Ok(answer)
}

/// Waits until workflow run `id` ended; its state.
async fn ended(cluster: &Cluster, id: i64, limit: Duration) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let run = api(
            cluster,
            reqwest::Method::GET,
            &format!("/api/v1/workflow-runs/{id}"),
            Value::Null,
        )
        .await?;
        let state = run["state"].as_str().unwrap_or("").to_owned();
        if !["pending", "queued", "running"].contains(&state.as_str()) {
            return Ok(state);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "workflow run {id} did not end"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn workflows(common: &Common, load: &WorkflowLoad) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(load.nodes).await?;
    let executor = FastExecutor::start(&cluster, common.batch, common.log_lines).await?;
    let mut report = Report::new("workflows");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", load.nodes);
    if load.dag_runs > 0 {
        dag(&cluster, &executor, load.dag_runs, &mut report).await?;
    }
    if load.workflows > 0 {
        many(&cluster, &executor, load, &mut report).await?;
    }
    Ok(report)
}

/// The 100-step workflow, run `runs` times one after the other.
async fn dag(
    cluster: &Cluster,
    executor: &FastExecutor,
    runs: usize,
    report: &mut Report,
) -> anyhow::Result<()> {
    let id = cluster
        .create_at("/api/v1/workflows", vec![hundred_steps()], 1)
        .await?[0];
    let mut durations = Vec::new();
    let mut failed = 0;
    for _ in 0..runs {
        let began = now_ms();
        let run = api(
            cluster,
            reqwest::Method::POST,
            &format!("/api/v1/workflows/{id}/trigger"),
            json!({}),
        )
        .await?;
        let run_id = run["id"].as_i64().context("a workflow run's id")?;
        if ended(cluster, run_id, Duration::from_secs(300)).await? != "succeeded" {
            failed += 1;
        }
        durations.push(now_ms() - began);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let receipts = executor.receipts();
    let steps = executor.step_receipts();
    let waits = step_waits(&receipts, &steps);
    let seen: HashSet<i64> = steps.iter().map(|s| s.workflow_run_id).collect();
    durations.sort_unstable();
    report.add("dag_workflow_runs_seen", seen.len());
    report.add("dag_steps", 100);
    report.add("dag_runs", runs);
    report.add("dag_runs_not_succeeded", failed);
    report.add("dag_run_p50_ms", quantile(&durations, 0.50));
    report.add("dag_steps_received", receipts.len());
    report.add("dag_duplicates", duplicate_runs(&receipts));
    report.add("dag_step_wait_p50_ms", quantile(&waits, 0.50));
    report.add("dag_step_wait_p99_ms", quantile(&waits, 0.99));
    report.add("dag_step_wait_max_ms", waits.last().copied().unwrap_or(0));
    Ok(())
}

/// `load.workflows` workflows of 5 steps firing every minute, for `load.minutes` minutes.
async fn many(
    cluster: &Cluster,
    executor: &FastExecutor,
    load: &WorkflowLoad,
    report: &mut Report,
) -> anyhow::Result<()> {
    let began = std::time::Instant::now();
    let docs = (0..load.workflows).map(five_steps).collect();
    let ids = cluster.create_at("/api/v1/workflows", docs, 16).await?;
    report.add("workflows", ids.len());
    report.add("workflows_create_s", secs(began.elapsed()));
    // The window: the next whole minutes, once every workflow exists.
    let first = (now_ms() / 60_000 + 1) * 60_000;
    let last = first + (i64::try_from(load.minutes).unwrap_or(1) - 1) * 60_000;
    let wait = last + 60_000 - now_ms();
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
    let listed = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let window = format!("job_id IN ({listed}) AND scheduled_at_ms BETWEEN {first} AND {last}");
    let expected = i64::try_from(ids.len()).unwrap_or(0) * i64::try_from(load.minutes).unwrap_or(1);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let open = cluster
            .count(&format!(
                "SELECT COUNT(*) FROM runs WHERE {window} AND state IN ('pending', 'queued', 'running')"
            ))
            .await?;
        if open == 0 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let workflow_runs = cluster
        .count(&format!("SELECT COUNT(*) FROM runs WHERE {window}"))
        .await?;
    let instants = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM (SELECT DISTINCT job_id, scheduled_at_ms FROM runs WHERE {window}) i"
        ))
        .await?;
    let succeeded = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM runs WHERE {window} AND state = 'succeeded'"
        ))
        .await?;
    let steps_done = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM step_runs s JOIN runs r ON r.run_id = s.run_id \
             WHERE s.workflow_run_id IN (SELECT run_id FROM runs WHERE {window}) \
             AND s.state = 'succeeded' AND r.state = 'succeeded'"
        ))
        .await?;
    let receipts = executor.receipts();
    let steps = executor.step_receipts();
    let waits = step_waits(&receipts, &steps);
    report.add("minutes", load.minutes);
    report.add("workflow_runs_expected", expected);
    report.add("workflow_runs", workflow_runs);
    report.add("workflow_runs_duplicates", workflow_runs - instants);
    report.add("workflow_runs_missed", expected - instants);
    report.add("workflow_runs_succeeded", succeeded);
    report.add("steps_expected", expected * 5);
    report.add("steps_succeeded", steps_done);
    report.add("steps_missed", expected * 5 - steps_done);
    report.add("step_duplicates", duplicate_runs(&receipts));
    report.add("step_wait_p50_ms", quantile(&waits, 0.50));
    report.add("step_wait_p99_ms", quantile(&waits, 0.99));
    report.add("step_wait_max_ms", waits.last().copied().unwrap_or(0));
    Ok(())
}
