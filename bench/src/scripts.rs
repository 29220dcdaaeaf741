//! The script executor: jobs firing every second, each running a tiny shell script through
//! one `carillon executor --scripts` process. Fires a second end to end, the time from each
//! instant to its script's exit, and the executor's CPU: what a process per run costs.

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;

use crate::cluster::{Cluster, cpu_ticks, now_ms};
use crate::scenarios::{Common, new_cluster};
use crate::stats::{Report, quantile};

/// What the scenario offers.
#[derive(Debug, Clone)]
pub(crate) struct ScriptLoad {
    pub(crate) nodes: usize,
    /// Jobs, each firing every second.
    pub(crate) jobs: usize,
    /// Scripts the executor runs at once.
    pub(crate) capacity: u32,
    pub(crate) warmup_s: u64,
    pub(crate) duration_s: u64,
}

/// The script every job runs: it reads nothing and says its run.
const NOOP: &str = "#!/bin/sh\necho \"$CARILLON_RUN_ID\"\n";

/// The executor process, killed when dropped.
struct ScriptExecutor(Child);

impl Drop for ScriptExecutor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_executor(cluster: &Cluster, capacity: u32) -> anyhow::Result<ScriptExecutor> {
    let dir = cluster.dir().join("scripts");
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("noop.sh");
    std::fs::write(&script, NOOP)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    let log = cluster.dir().join("script-executor.log");
    let mut command = Command::new(cluster.carillon());
    for (key, _) in std::env::vars() {
        if key.starts_with("CARILLON_") {
            command.env_remove(key);
        }
    }
    let child = command
        .args(["executor", "--scripts"])
        .arg(&dir)
        .args(["--admin", &cluster.urls().join(",")])
        .args(["--listen", "127.0.0.1:0", "--executor-id", "bench-scripts"])
        .args(["--capacity", &capacity.to_string()])
        .env("CARILLON_EXECUTOR_TOKEN", &cluster.executor_token)
        .env("CARILLON_DISPATCH_SECRET", &cluster.dispatch_secret)
        .env("CARILLON_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("starting the script executor")?;
    Ok(ScriptExecutor(child))
}

async fn wait_registered(cluster: &Cluster) -> anyhow::Result<()> {
    for _ in 0..200 {
        let listed = cluster
            .api_get(0, "/api/v1/executors")
            .await
            .and_then(|list| list["executors"].as_array().cloned())
            .is_some_and(|all| all.iter().any(|e| e["id"] == "bench-scripts"));
        if listed {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the script executor did not register in 20 s")
}

pub(crate) async fn scripts(common: &Common, load: &ScriptLoad) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(load.nodes).await?;
    let executor = start_executor(&cluster, load.capacity)?;
    wait_registered(&cluster).await?;
    let mut report = Report::new("scripts");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", load.nodes);
    report.add("executor_capacity", load.capacity);
    let docs = (0..load.jobs)
        .map(|i| {
            json!({"name": format!("bench-script-{i}"), "app": "scripts", "handler": "noop",
                "schedule": {"cron": "* * * * * *"}, "misfire": "fire_once", "start": true})
        })
        .collect();
    cluster.create_jobs(docs).await?;
    report.add("jobs_every_second", load.jobs);
    tokio::time::sleep(Duration::from_secs(load.warmup_s)).await;
    let t0 = (now_ms() / 1_000 + 1) * 1_000;
    let t1 = t0 + i64::try_from(load.duration_s).unwrap_or(30) * 1_000;
    let pid = executor.0.id();
    let ticks_before = cpu_ticks(pid).unwrap_or(0);
    let wait = t1 - now_ms();
    tokio::time::sleep(Duration::from_millis(u64::try_from(wait).unwrap_or(0))).await;
    let ticks_after = cpu_ticks(pid).unwrap_or(0);
    // The window's instants end late when the executor falls behind: wait for them (60 s).
    let window = format!("scheduled_at_ms >= {t0} AND scheduled_at_ms < {t1}");
    let expected = i64::try_from(load.jobs).unwrap_or(0) * (t1 - t0) / 1_000;
    for _ in 0..120 {
        let ended = cluster
            .count(&format!(
                "SELECT COUNT(*) FROM runs WHERE {window} AND finished_at_ms IS NOT NULL"
            ))
            .await?;
        if ended >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let succeeded = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM runs WHERE {window} AND state = 'succeeded'"
        ))
        .await?;
    let completed = cluster
        .count(&format!(
            "SELECT COUNT(*) FROM runs WHERE finished_at_ms >= {t0} AND finished_at_ms < {t1} \
             AND state = 'succeeded'"
        ))
        .await?;
    let mut to_exit = cluster
        .values(&format!(
            "SELECT finished_at_ms - scheduled_at_ms FROM runs WHERE {window} \
             AND state = 'succeeded'"
        ))
        .await?;
    to_exit.sort_unstable();
    report.add("window_s", load.duration_s);
    report.add("window_runs_expected", expected);
    report.add("window_runs_succeeded", succeeded);
    report.add(
        "fires_per_s",
        (completed as f64 / load.duration_s as f64).round(),
    );
    report.add("instant_to_exit_p50_ms", quantile(&to_exit, 0.5));
    report.add("instant_to_exit_p99_ms", quantile(&to_exit, 0.99));
    report.add(
        "executor_cpu",
        format!(
            "{:.0}%",
            (ticks_after - ticks_before) as f64 / load.duration_s as f64
        ),
    );
    drop(executor);
    Ok(report)
}
