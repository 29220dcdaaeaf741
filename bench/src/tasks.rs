//! The `tasks` scenario: how fast tasks go in (single requests, and batches of 10,000), how
//! long a crowd of tasks due at one instant takes to drain, and, with `--pending`, whether
//! tasks due now stay on time while millions wait (with each node's memory).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::cluster::{ADMIN_TOKEN, Cluster, now_ms, rss_bytes};
use crate::executor::{FastExecutor, Receipt};
use crate::scenarios::{Common, new_cluster, rfc3339, secs};
use crate::stats::{Report, quantile};

/// Tasks per request of the batch API.
const BATCH: usize = 10_000;

/// What the scenario does.
#[derive(Debug, Clone)]
pub(crate) struct TaskLoad {
    pub(crate) nodes: usize,
    /// Single-task requests timed first.
    pub(crate) single: usize,
    /// Tasks enqueued in batches, all due at one instant, then drained.
    pub(crate) at_once: usize,
    /// Batch requests in flight at once.
    pub(crate) concurrency: usize,
    /// Tasks left pending, spread over the next week, before the paced phase.
    pub(crate) pending: usize,
    /// Tasks due each second in the paced phase (0: no paced phase).
    pub(crate) rate: usize,
    pub(crate) duration_s: u64,
}

/// Enqueues `tasks` in batches over the nodes, `concurrency` requests at a time; returns each
/// task's id in order.
async fn enqueue(
    cluster: &Cluster,
    tasks: Vec<Value>,
    batch: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<i64>> {
    let urls = cluster.urls();
    let client = carillon_tls::http_client()?;
    let mut ids = vec![0; tasks.len()];
    let mut running = tokio::task::JoinSet::new();
    let mut chunks = tasks.chunks(batch).map(<[Value]>::to_vec).enumerate();
    loop {
        while running.len() < concurrency {
            let Some((n, chunk)) = chunks.next() else {
                break;
            };
            let url = format!("{}/api/v1/tasks", urls[n % urls.len()]);
            let client = client.clone();
            running.spawn(async move {
                let body = if chunk.len() == 1 {
                    chunk[0].clone()
                } else {
                    json!({ "tasks": chunk })
                };
                let response = client
                    .post(&url)
                    .bearer_auth(ADMIN_TOKEN)
                    .json(&body)
                    .send()
                    .await?;
                let status = response.status();
                let answer: Value = response.json().await?;
                if !status.is_success() {
                    bail!("enqueueing: {status} {answer}");
                }
                let got: Vec<i64> = answer["tasks"]
                    .as_array()
                    .context("an enqueue answers its tasks")?
                    .iter()
                    .filter_map(|t| t["id"].as_i64())
                    .collect();
                Ok((n, got))
            });
        }
        match running.join_next().await {
            Some(done) => {
                let (n, got) = done??;
                for (i, id) in got.into_iter().enumerate() {
                    ids[n * batch + i] = id;
                }
            }
            None => break,
        }
    }
    Ok(ids)
}

fn task_due(at_ms: i64) -> Value {
    json!({"app": "bench", "handler": "noop", "at": rfc3339(at_ms)})
}

/// Receipts of the tasks `ids` (run job id `-id`): delivered, duplicates, missed, lateness.
fn check(report: &mut Report, receipts: &[Receipt], ids: &[i64], prefix: &str) {
    let wanted: std::collections::HashSet<i64> = ids.iter().map(|id| -id).collect();
    let mut seen: HashMap<i64, u32> = HashMap::new();
    let mut lateness = Vec::new();
    for r in receipts.iter().filter(|r| wanted.contains(&r.job_id)) {
        *seen.entry(r.job_id).or_default() += 1;
        lateness.push(r.received_ms - r.scheduled_ms);
    }
    lateness.sort_unstable();
    let duplicates: u64 = seen.values().map(|n| u64::from(n - 1)).sum();
    report.add(&format!("{prefix}delivered"), seen.len());
    report.add(&format!("{prefix}duplicates"), duplicates);
    report.add(&format!("{prefix}missed"), ids.len() - seen.len());
    report.add(
        &format!("{prefix}lateness_p50_ms"),
        quantile(&lateness, 0.50),
    );
    report.add(
        &format!("{prefix}lateness_p99_ms"),
        quantile(&lateness, 0.99),
    );
    report.add(
        &format!("{prefix}lateness_max_ms"),
        lateness.last().copied().unwrap_or(0),
    );
}

/// Waits until `count` receipts of `ids` arrived or `deadline_ms` passed; the last one's time.
async fn drained(executor: &FastExecutor, ids: &[i64], deadline_ms: i64) -> i64 {
    let wanted: std::collections::HashSet<i64> = ids.iter().map(|id| -id).collect();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let receipts = executor.receipts();
        let mut got: Vec<&Receipt> = receipts
            .iter()
            .filter(|r| wanted.contains(&r.job_id))
            .collect();
        got.sort_unstable_by_key(|r| r.job_id);
        got.dedup_by_key(|r| r.job_id);
        if got.len() >= ids.len() || now_ms() > deadline_ms {
            return got.iter().map(|r| r.received_ms).max().unwrap_or(0);
        }
    }
}

pub(crate) async fn tasks(common: &Common, load: &TaskLoad) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(load.nodes).await?;
    let executor = FastExecutor::start(&cluster, common.batch, common.log_lines).await?;
    let mut report = Report::new("tasks");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", load.nodes);

    // Single requests, 16 at a time, due in two days (they stay pending).
    if load.single > 0 {
        let later = now_ms() + 2 * 86_400_000;
        let singles = (0..load.single).map(|_| task_due(later)).collect();
        let began = Instant::now();
        enqueue(&cluster, singles, 1, 16).await?;
        let took = began.elapsed();
        report.add("single_requests", load.single);
        report.add(
            "single_enqueue_per_s",
            (load.single as f64 / took.as_secs_f64()).round(),
        );
    }

    // A crowd due at one instant, far enough ahead to be in before it (at 25,000/s).
    if load.at_once > 0 {
        let lead_ms = 10_000 + i64::try_from(load.at_once / 25).unwrap_or(0);
        let at_ms = (now_ms() + lead_ms) / 1_000 * 1_000;
        let crowd = (0..load.at_once).map(|_| task_due(at_ms)).collect();
        let began = Instant::now();
        let ids = enqueue(&cluster, crowd, BATCH, load.concurrency).await?;
        let took = began.elapsed();
        let enqueued_ms = now_ms();
        report.add("batch_tasks", load.at_once);
        report.add("batch_enqueue_s", secs(took));
        report.add(
            "batch_enqueue_per_s",
            (load.at_once as f64 / took.as_secs_f64()).round(),
        );
        // Drained from the instant, or from the last enqueue when that came after it.
        let from_ms = at_ms.max(enqueued_ms);
        if enqueued_ms > at_ms {
            report.add("enqueue_ended_after_instant_ms", enqueued_ms - at_ms);
        }
        let last = drained(&executor, &ids, from_ms + 600_000).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        report.add("drained_after_s", (last - from_ms).max(0) as f64 / 1_000.0);
        check(&mut report, &executor.receipts(), &ids, "crowd_");
    }

    if load.rate > 0 {
        paced(&cluster, &executor, load, &mut report).await?;
    }
    Ok(report)
}

/// `pending` tasks spread over a week, then `rate` tasks due every second for `duration_s`:
/// their lateness, and each node's memory.
async fn paced(
    cluster: &Cluster,
    executor: &FastExecutor,
    load: &TaskLoad,
    report: &mut Report,
) -> anyhow::Result<()> {
    let began = Instant::now();
    let week_ms = 7 * 86_400_000_i64;
    let start_ms = now_ms() + 3_600_000;
    let mut left = load.pending;
    // In slices, so the bench never holds ten million documents at once.
    while left > 0 {
        let n = left.min(200_000);
        let slice = (0..n)
            .map(|i| task_due(start_ms + (i as i64 * 7_919 % week_ms)))
            .collect();
        enqueue(cluster, slice, BATCH, load.concurrency).await?;
        left -= n;
    }
    report.add("pending_tasks", load.pending);
    report.add("pending_enqueue_s", secs(began.elapsed()));
    let rss_idle: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| rss_bytes(n.pid()).unwrap_or(0) >> 20)
        .collect();
    report.add("rss_mb_after_pending", format!("{rss_idle:?}"));
    let t0 = (now_ms() / 1_000 + 4) * 1_000;
    let seconds = i64::try_from(load.duration_s).unwrap_or(30);
    let mut ids = Vec::new();
    let mut rss_max = vec![0_u64; cluster.nodes.len()];
    for s in 0..seconds {
        // Each second's tasks go in three seconds ahead of their instant.
        let due = t0 + s * 1_000;
        let wait = due - 3_000 - now_ms();
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
        }
        let tasks = (0..load.rate).map(|_| task_due(due)).collect();
        ids.extend(enqueue(cluster, tasks, BATCH, load.concurrency).await?);
        for (max, node) in rss_max.iter_mut().zip(&cluster.nodes) {
            *max = (*max).max(rss_bytes(node.pid()).unwrap_or(0) >> 20);
        }
    }
    let end_ms = t0 + seconds * 1_000;
    drained(executor, &ids, end_ms + 30_000).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    report.add("paced_rate_per_s", load.rate);
    report.add("paced_seconds", seconds);
    check(report, &executor.receipts(), &ids, "paced_");
    report.add("rss_mb_max_while_paced", format!("{rss_max:?}"));
    Ok(())
}
