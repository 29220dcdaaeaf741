//! The scenarios: throughput, failover and capacity. Each builds its cluster, loads it, and
//! returns its figures.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use carillon_server::jobs::{JobInput, new_job_id, partition_of};
use carillon_server::store::{self, DatabaseUrl, JobInsert, JobWrite, PoolOptions};
use serde_json::{Value, json};

use crate::cluster::{Cluster, Db, cpu_ticks, now_ms, rss_bytes};
use crate::executor::FastExecutor;
use crate::stats::{Report, delivery};

/// What every scenario is given.
#[derive(Debug, Clone)]
pub(crate) struct Common {
    pub(crate) db: Db,
    pub(crate) database_url: Option<String>,
    /// The nodes connect through a transaction pooler on this port (`--pooler-port`).
    pub(crate) pooler_port: Option<u16>,
    pub(crate) carillon: PathBuf,
    /// The fast executor offers `dispatch-batch`.
    pub(crate) batch: bool,
    /// Lines each attempt's handler logs (`--log-lines`).
    pub(crate) log_lines: usize,
    /// More settings for every node (`--retention`).
    pub(crate) extra_env: Vec<(String, String)>,
}

/// What `throughput` offers the cluster.
#[derive(Debug, Clone)]
pub(crate) struct Load {
    pub(crate) nodes: usize,
    /// Jobs firing every second.
    pub(crate) jobs: usize,
    /// Instead: this many one-shot jobs due at the same instant.
    pub(crate) one_shot: Option<usize>,
    pub(crate) warmup_s: u64,
    pub(crate) duration_s: u64,
    /// Old finished runs inserted first, for retention to delete during the window.
    pub(crate) history_backlog: Option<u64>,
    /// Print the database's size this often during the window.
    pub(crate) size_every_s: Option<u64>,
    /// The jobs are HTTP jobs calling the fast executor's server, not dispatches to it.
    pub(crate) http: bool,
    /// The jobs share this many flow keys (`key_arg` over their arguments), each capped at
    /// `max_in_flight`.
    pub(crate) flow: Option<FlowLoad>,
}

/// Flow keys over the jobs of a throughput load.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowLoad {
    pub(crate) keys: usize,
    pub(crate) max_in_flight: u32,
}

impl FlowLoad {
    /// Job `i`'s document with its key (`i` modulo the keys) and the keys' limit.
    fn over(&self, i: usize, mut doc: Value) -> Value {
        doc["args"] = json!({"key": i % self.keys.max(1)});
        doc["flow"] =
            json!({"key": "bench", "key_arg": "/key", "max_in_flight": self.max_in_flight});
        doc
    }
}

pub(crate) fn every_second(i: usize, misfire: &str) -> Value {
    json!({"name": format!("bench-{i}"), "app": "bench", "handler": "noop",
        "schedule": {"cron": "* * * * * *"}, "misfire": misfire, "start": true})
}

/// An HTTP job firing every second that calls `address` (the fast executor's server).
fn http_every_second(i: usize, address: &str) -> Value {
    json!({"name": format!("bench-http-{i}"), "schedule": {"cron": "* * * * * *"},
        "misfire": "fire_once", "start": true,
        "http": {"method": "POST", "url": format!("{address}{}", crate::executor::HTTP_JOB_PATH),
                 "body": "{\"job_id\": {{job_id}}, \"run_id\": {{run_id}}, \"at\": {{instant_ms}}}"}})
}

/// A cluster on a fresh database of the scenario's backend; no node yet.
pub(crate) async fn new_cluster(common: &Common) -> anyhow::Result<Cluster> {
    Cluster::create(
        common.db,
        common.carillon.clone(),
        common.database_url.clone(),
        common.pooler_port,
        common.extra_env.clone(),
    )
    .await
}

/// Sleeps until the wall clock reads `at_ms`.
pub(crate) async fn sleep_until_ms(at_ms: i64) {
    let wait = at_ms - now_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
    }
}

/// Whole seconds in `[from_ms, to_ms)`.
fn seconds(from_ms: i64, to_ms: i64) -> Vec<i64> {
    let first = (from_ms + 999) / 1_000 * 1_000;
    (first..to_ms).step_by(1_000).collect()
}

/// `N` jobs firing every second (or `M` one-shot jobs due at one instant), end to end.
pub(crate) async fn throughput(common: &Common, load: &Load) -> anyhow::Result<Report> {
    let Load {
        nodes,
        jobs,
        one_shot,
        warmup_s,
        duration_s,
        history_backlog,
        ..
    } = load.clone();
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(nodes).await?;
    if let Some(backlog) = history_backlog {
        let partitions = cluster
            .view_of(0)
            .await
            .and_then(|v| v["partition_count"].as_i64())
            .context("the cluster's partition count")?;
        let inserted_at = Instant::now();
        crate::history::insert_backlog(&cluster, backlog, partitions).await?;
        report_backlog_insert(backlog, inserted_at.elapsed());
    }
    let executor = FastExecutor::start(&cluster, common.batch, common.log_lines).await?;
    let mut report = Report::new(if load.http { "http" } else { "throughput" });
    report.add("log_lines_per_attempt", common.log_lines);
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", nodes);
    if let Some(count) = one_shot {
        // Far enough ahead that every job exists before the instant.
        let lead_ms = 10_000 + i64::try_from(count).unwrap_or(0) / 2;
        let at_ms = (now_ms() + lead_ms) / 1_000 * 1_000;
        let at = rfc3339(at_ms);
        let docs = (0..count)
            .map(|i| {
                json!({"name": format!("once-{i}"), "app": "bench", "handler": "noop",
                    "schedule": {"at": at}, "start": true})
            })
            .collect();
        let created_at = Instant::now();
        let ids = cluster.create_jobs(docs).await?;
        report.add("one_shot_jobs", count);
        report.add("create_s", secs(created_at.elapsed()));
        report.add(
            "create_jobs_per_s",
            (count as f64 / created_at.elapsed().as_secs_f64()).round(),
        );
        if now_ms() >= at_ms {
            bail!("creating the jobs took past their instant; ask for fewer");
        }
        let deadline = at_ms + 300_000;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let done = executor.receipts().len();
            if done >= count || now_ms() > deadline {
                break;
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let receipts = executor.receipts();
        let d = delivery(&receipts, &ids, &[at_ms]);
        let last = receipts
            .iter()
            .map(|r| r.received_ms)
            .max()
            .unwrap_or(at_ms);
        let succeeded = cluster
            .count("SELECT COUNT(*) FROM runs WHERE state = 'succeeded'")
            .await?;
        report.add("succeeded_runs", succeeded);
        report.add("all_done_after_s", (last - at_ms) as f64 / 1_000.0);
        report.add(
            "fires_per_s",
            (d.delivered as f64 / ((last - at_ms).max(1) as f64 / 1_000.0)).round(),
        );
        report.add_delivery(&d);
        return Ok(report);
    }
    let docs = (0..jobs)
        .map(|i| {
            let doc = match load.http {
                true => http_every_second(i, &executor.address),
                false => every_second(i, "fire_once"),
            };
            match load.flow {
                Some(flow) => flow.over(i, doc),
                None => doc,
            }
        })
        .collect();
    if let Some(flow) = load.flow {
        report.add("flow_keys", flow.keys);
        report.add("flow_max_in_flight", flow.max_in_flight);
    }
    let created_at = Instant::now();
    let ids = cluster.create_jobs(docs).await?;
    report.add("jobs_every_second", jobs);
    report.add("create_s", secs(created_at.elapsed()));
    tokio::time::sleep(Duration::from_secs(warmup_s)).await;
    let t0 = (now_ms() / 1_000 + 1) * 1_000;
    let t1 = t0 + i64::try_from(duration_s).unwrap_or(30) * 1_000;
    let backlog_at_t0 = match history_backlog {
        Some(_) => Some(crate::history::backlog_left(&cluster).await?),
        None => None,
    };
    let ticks_before: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| cpu_ticks(n.pid()).unwrap_or(0))
        .collect();
    match load.size_every_s {
        Some(every) => {
            crate::history::sample_size(&cluster, Duration::from_secs(every.max(1)), t1).await;
        }
        None => sleep_until_ms(t1).await,
    }
    let ticks_after: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| cpu_ticks(n.pid()).unwrap_or(0))
        .collect();
    // Late fires still count: wait until every instant of the window arrived (or 120 s).
    let instants = seconds(t0, t1);
    let give_up = now_ms() + 120_000;
    let d = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let d = delivery(&executor.receipts(), &ids, &instants);
        if d.missed == 0 || now_ms() > give_up {
            break d;
        }
    };
    let succeeded = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM runs WHERE scheduled_at_ms >= {t0} AND scheduled_at_ms < {t1} \
             AND state = 'succeeded'"
        ))
        .await?;
    // What the cluster completed while the window lasted, whichever instants: below the
    // offered rate, it fell behind (the window's instants then succeeded late).
    let completed = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM runs WHERE finished_at_ms >= {t0} AND finished_at_ms < {t1} \
             AND state = 'succeeded'"
        ))
        .await?;
    report.add("window_s", duration_s);
    report.add("offered_fires_per_s", jobs);
    report.add(
        "fires_per_s",
        (completed as f64 / duration_s as f64).round(),
    );
    report.add("window_runs_succeeded", succeeded);
    let cpu: Vec<String> = ticks_before
        .iter()
        .zip(&ticks_after)
        .map(|(b, a)| format!("{:.0}%", (a - b) as f64 / duration_s as f64))
        .collect();
    report.add("node_cpu", cpu.join(" "));
    if common.log_lines > 0 {
        let shipped = executor.log_figures();
        report.add("log_lines_shipped", shipped.lines);
        report.add("log_lines_stored", shipped.stored);
        report.add("log_lines_dropped", shipped.dropped);
        report.add("log_requests_failed", shipped.failed_requests);
        report.add(
            "log_lines_in_db",
            cluster.count("SELECT COUNT(*) FROM attempt_logs").await?,
        );
    }
    report.add_delivery(&d);
    if let Some(at_t0) = backlog_at_t0 {
        let left = crate::history::backlog_left(&cluster).await?;
        report.add("backlog_at_window_start", at_t0);
        report.add("backlog_left", left);
        report.add(
            "backlog_deleted_per_s",
            ((at_t0 - left) as f64 / (now_ms() - t0).max(1) as f64 * 1_000.0).round(),
        );
    } else {
        report.add(
            "db_bytes_per_fire",
            crate::history::bytes_per_fire(&cluster).await?,
        );
    }
    report.add("db_bytes", crate::history::database_bytes(&cluster).await?);
    Ok(report)
}

/// The backlog insert is set-up, not a figure: said on standard error.
fn report_backlog_insert(runs: u64, took: Duration) {
    eprintln!(
        "inserted a backlog of {runs} finished runs in {:.0} s",
        took.as_secs_f64()
    );
}

/// `kill -9` of the leader, then of a follower, under load, with default timings.
pub(crate) async fn failover(
    common: &Common,
    jobs: usize,
    jitter_ms: u64,
) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(3).await?;
    let executor = FastExecutor::start(&cluster, common.batch, common.log_lines).await?;
    let docs = (0..jobs)
        .map(|i| {
            let mut job = every_second(i, "catch_up");
            if jitter_ms > 0 {
                job["jitter_ms"] = json!(jitter_ms);
            }
            job
        })
        .collect();
    let ids = cluster.create_jobs(docs).await?;
    let partitions = cluster
        .view_of(0)
        .await
        .and_then(|v| v["partition_count"].as_i64())
        .context("the cluster's partition count")?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let t_start = now_ms();
    let mut report = Report::new("failover");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("jobs_every_second", jobs);
    report.add("jitter_ms", jitter_ms);

    let (leader, term) = cluster.leader().await.context("no leader")?;
    let (took_over, refired) =
        kill_and_watch(&mut cluster, &executor, &ids, partitions, leader).await?;
    report.add("leader_killed", cluster.nodes[leader].id.clone());
    report.add(
        "new_leader_after_s",
        took_over.map_or(Value::Null, Value::from),
    );
    report.add("leader_jobs_fire_again_after_s", refired);
    let (_, new_term) = cluster.leader().await.context("no leader after the kill")?;
    report.add("terms", format!("{term} -> {new_term}"));

    tokio::time::sleep(Duration::from_secs(15)).await;
    let (leader, _) = cluster.leader().await.context("no leader")?;
    let follower = (0..cluster.nodes.len())
        .find(|&i| i != leader && cluster.nodes[i].is_running())
        .context("no follower left")?;
    let (_, refired) = kill_and_watch(&mut cluster, &executor, &ids, partitions, follower).await?;
    report.add("follower_killed", cluster.nodes[follower].id.clone());
    report.add("follower_jobs_fire_again_after_s", refired);

    tokio::time::sleep(Duration::from_secs(15)).await;
    let t_end = now_ms();
    // `catch_up` fires every missed instant: wait for them (or 180 s) before counting.
    let instants = seconds(t_start, t_end);
    let give_up = now_ms() + 180_000;
    let d = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let d = delivery(&executor.receipts(), &ids, &instants);
        if d.missed == 0 || now_ms() > give_up {
            break d;
        }
    };
    report.add("caught_up_after_end_s", (now_ms() - t_end) / 1_000);
    report.add("window_s", (t_end - t_start) / 1_000);
    report.add_delivery(&d);
    Ok(report)
}

/// Kills node `victim`; returns seconds until another node leads (when the victim led) and
/// until a job of the victim's partitions fired again.
async fn kill_and_watch(
    cluster: &mut Cluster,
    executor: &FastExecutor,
    ids: &[i64],
    partitions: i64,
    victim: usize,
) -> anyhow::Result<(Option<f64>, f64)> {
    let before = cluster.leader().await.context("no leader")?;
    let view = cluster.view_of(victim).await.context("the victim's view")?;
    let owned: HashSet<i64> = view["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["node_id"] == cluster.nodes[victim].id.as_str())
        .and_then(|n| n["partitions"].as_array())
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    let victims_jobs: HashSet<i64> = ids
        .iter()
        .copied()
        .filter(|id| owned.contains(&partition_of(*id, partitions)))
        .collect();
    if victims_jobs.is_empty() {
        bail!("the victim owned no job");
    }
    let killed_at = now_ms();
    cluster.nodes[victim].kill9();
    let mut took_over = None;
    let deadline = killed_at + 120_000;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if before.0 == victim
            && took_over.is_none()
            && let Some((leader, term)) = cluster.leader().await
            && leader != victim
            && term > before.1
        {
            took_over = Some((now_ms() - killed_at) as f64 / 1_000.0);
        }
        // In-flight requests of the dead node may land within a few ms of the kill.
        let refired = executor
            .receipts()
            .iter()
            .filter(|r| r.received_ms > killed_at + 100 && victims_jobs.contains(&r.job_id))
            .map(|r| r.received_ms)
            .min();
        if let Some(at) = refired
            && (before.0 != victim || took_over.is_some())
        {
            return Ok((took_over, (at - killed_at) as f64 / 1_000.0));
        }
        if now_ms() > deadline {
            bail!("the victim's jobs did not fire again within 120 s");
        }
    }
}

/// Many active jobs with a realistic mix of schedules: load time, memory, idle CPU.
pub(crate) async fn capacity(common: &Common, jobs: usize, nodes: usize) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    let mut report = Report::new("capacity");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", nodes);
    report.add("jobs", jobs);

    // The memory of nodes holding nothing, to subtract.
    cluster.start_nodes(nodes).await?;
    let partitions = cluster
        .view_of(0)
        .await
        .and_then(|v| v["partition_count"].as_i64())
        .context("the cluster's partition count")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let empty_rss: u64 = cluster
        .nodes
        .iter()
        .filter_map(|n| rss_bytes(n.pid()))
        .sum();
    cluster.stop_all().await;

    let (inserted_in, distinct) = insert_jobs(&cluster, jobs, partitions).await?;
    report.add("distinct_schedules", distinct);
    report.add("insert_s", secs(inserted_in));

    let started = Instant::now();
    cluster.start_nodes(nodes).await?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mut held = 0;
        for i in 0..cluster.nodes.len() {
            if let Some(view) = cluster.view_of(i).await {
                held += view["this_node"]["jobs_held"].as_u64().unwrap_or(0);
            }
        }
        if held >= jobs as u64 {
            break;
        }
        if Instant::now() > deadline {
            bail!("the nodes hold {held} of {jobs} jobs after 600 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report.add("load_s", secs(started.elapsed()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss: Vec<u64> = cluster
        .nodes
        .iter()
        .filter_map(|n| rss_bytes(n.pid()))
        .collect();
    let total: u64 = rss.iter().sum();
    report.add(
        "rss_per_node_mib",
        rss.iter()
            .map(|b| format!("{:.1}", *b as f64 / 1_048_576.0))
            .collect::<Vec<_>>()
            .join(" "),
    );
    report.add(
        "bytes_per_job",
        (total.saturating_sub(empty_rss) as f64 / jobs as f64).round(),
    );
    let ticks: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| cpu_ticks(n.pid()).unwrap_or(0))
        .collect();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle: Vec<String> = cluster
        .nodes
        .iter()
        .zip(&ticks)
        .map(|(n, before)| {
            let after = cpu_ticks(n.pid()).unwrap_or(*before);
            // Clock ticks are 1/100 s: ticks per 10 s is the percentage of one core / 10.
            format!("{:.1}%", (after - before) as f64 / 10.0)
        })
        .collect();
    report.add("idle_cpu_per_node", idle.join(" "));
    Ok(report)
}

/// Inserts `count` started jobs through the store, with at least 10,000 distinct (schedule,
/// zone) pairs of cron and RRULE rules that fire rarely (so the nodes hold them, idle).
async fn insert_jobs(
    cluster: &Cluster,
    count: usize,
    partitions: i64,
) -> anyhow::Result<(Duration, usize)> {
    let url = DatabaseUrl::parse(&cluster.database_url)?;
    let options = PoolOptions {
        max_connections: 16,
        acquire_timeout: Duration::from_secs(30),
        statement_timeout: Duration::from_secs(30),
        transaction_pooler: false,
    };
    let store = store::connect(&url, &options).await?;
    const ZONES: [&str; 6] = [
        "UTC",
        "America/New_York",
        "Europe/London",
        "Asia/Shanghai",
        "Australia/Lord_Howe",
        "America/Santiago",
    ];
    let mut distinct = HashSet::new();
    let mut writes = Vec::with_capacity(count);
    for i in 0..count {
        let zone = ZONES[i % ZONES.len()];
        let minute = (i / ZONES.len()) % 60;
        let hour = (i / (ZONES.len() * 60)) % 24;
        let schedule = if i % 3 == 2 {
            let day = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"][(i / 8_640) % 7];
            json!({"rrule": format!(
                "DTSTART;TZID={zone}:20260101T000000\nRRULE:FREQ=WEEKLY;BYDAY={day};BYHOUR={hour};BYMINUTE={minute}"
            )})
        } else {
            json!({"cron": format!("{minute} {hour} * * *")})
        };
        distinct.insert((schedule.to_string(), zone));
        let input: JobInput = serde_json::from_value(json!({"name": format!("cap-{i}"),
            "app": "bench", "handler": "noop", "schedule": schedule, "timezone": zone}))?;
        let d = input.into_definition()?;
        writes.push(JobWrite {
            name: d.name,
            app_name: d.app,
            handler_name: d.handler,
            schedule_json: serde_json::to_string(&d.schedule)?,
            timezone: d.timezone,
            args_json: serde_json::to_string(&d.args)?,
            policy_json: serde_json::to_string(&d.policy)?,
            history_keep_ms: None,
            history_max_runs: None,
            kind: carillon_server::states::JobKind::Job,
            namespace_id: store::NamespaceId::DEFAULT,
        });
    }
    // Ids below the current millisecond's, counting down: unique among themselves, and never
    // those of a job created later through the API.
    let base = (new_job_id(now_ms()) & !0xfff) - 1;
    let rows: Vec<JobInsert> = writes
        .into_iter()
        .enumerate()
        .map(|(i, write)| {
            let id = base - i as i64;
            JobInsert {
                job_id: id,
                partition_id: partition_of(id, partitions),
                write,
                start: true,
            }
        })
        .collect();
    let started = Instant::now();
    let rows = Arc::new(rows);
    // A few transactions of many multi-row inserts at once, as an import would.
    const PER_TRANSACTION: usize = 20_000;
    let workers = 4;
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let store = Arc::clone(&store);
        let rows = Arc::clone(&rows);
        tasks.spawn(async move {
            for chunk in rows.chunks(PER_TRANSACTION).skip(w).step_by(workers) {
                store.jobs_insert_many(chunk, None).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok((started.elapsed(), distinct.len()))
}

pub(crate) fn rfc3339(ms: i64) -> String {
    carillon_server::api::rfc3339(ms).unwrap_or_default()
}

pub(crate) fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 100.0).round() / 100.0
}

/// Job creation: `single` jobs created one request each (16 at a time), then `bulk` jobs
/// through `POST /api/v1/jobs/bulk`; jobs created per second each way. The jobs are stopped
/// (an hourly schedule), so nothing fires meanwhile.
pub(crate) async fn create(common: &Common, single: usize, bulk: usize) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(1).await?;
    let mut report = Report::new("create");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    let doc = |prefix: &str, i: usize| {
        json!({"name": format!("{prefix}-{i}"), "app": "bench", "handler": "noop",
               "schedule": {"cron": "0 0 * * * ?"}})
    };
    let docs: Vec<Value> = (0..single).map(|i| doc("single", i)).collect();
    let started = Instant::now();
    cluster.create_jobs_one_by_one(docs, 16).await?;
    report.add("single_jobs", single);
    report.add(
        "single_create_per_s",
        (single as f64 / started.elapsed().as_secs_f64()).round(),
    );
    let docs: Vec<Value> = (0..bulk).map(|i| doc("bulk", i)).collect();
    let started = Instant::now();
    cluster.create_jobs(docs).await?;
    report.add("bulk_jobs", bulk);
    report.add("bulk_create_s", secs(started.elapsed()));
    report.add(
        "bulk_create_per_s",
        (bulk as f64 / started.elapsed().as_secs_f64()).round(),
    );
    Ok(report)
}
