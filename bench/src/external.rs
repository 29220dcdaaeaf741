//! Executors that are processes of their own: jobs firing every second, each run by one
//! `carillon executor --scripts` process (a tiny shell script per run) or one Python executor
//! (`python -m carillon_executor`, an `async` handler that returns at once). Fires a second end
//! to end, the time from each instant to its run's end, and the executor's CPU, in all and per
//! dispatch.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;

use crate::cluster::{Cluster, cpu_ticks, now_ms};
use crate::scenarios::{Common, new_cluster};
use crate::stats::{Report, quantile};

/// What the scenario offers.
#[derive(Debug, Clone)]
pub(crate) struct ExternalLoad {
    pub(crate) nodes: usize,
    /// Jobs, each firing every second.
    pub(crate) jobs: usize,
    /// Attempts the executor runs at once.
    pub(crate) capacity: u32,
    pub(crate) warmup_s: u64,
    pub(crate) duration_s: u64,
}

impl ExternalLoad {
    pub(crate) fn new(
        nodes: usize,
        jobs: usize,
        capacity: u32,
        warmup_s: u64,
        duration_s: u64,
    ) -> Self {
        Self {
            nodes,
            jobs,
            capacity,
            warmup_s,
            duration_s,
        }
    }
}

/// Which executor runs the jobs.
#[derive(Debug, Clone)]
pub(crate) enum ExternalExecutor {
    /// `carillon executor --scripts`, one process per run.
    Scripts,
    /// The Python SDK, run by this interpreter (which must have `carillon-executor`).
    Python { interpreter: PathBuf },
}

impl ExternalExecutor {
    fn name(&self) -> &'static str {
        match self {
            Self::Scripts => "scripts",
            Self::Python { .. } => "python",
        }
    }

    fn executor_id(&self) -> &'static str {
        match self {
            Self::Scripts => "bench-scripts",
            Self::Python { .. } => "bench-python",
        }
    }

    /// The app and handler the jobs name.
    fn handler(&self) -> (&'static str, &'static str) {
        match self {
            Self::Scripts => ("scripts", "noop"),
            Self::Python { .. } => ("bench-python", "noop"),
        }
    }
}

/// The script every job runs: it reads nothing and says its run.
const NOOP_SCRIPT: &str = "#!/bin/sh\necho \"$CARILLON_RUN_ID\"\n";

/// The Python module every job runs: a handler that returns at once.
const NOOP_PYTHON: &str = "from carillon_executor import JobContext, job\n\n\n\
    @job\nasync def noop(ctx: JobContext) -> None:\n    return None\n";

/// The executor process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_executor(
    cluster: &Cluster,
    kind: &ExternalExecutor,
    capacity: u32,
) -> anyhow::Result<Running> {
    let dir = cluster.dir().join(kind.name());
    std::fs::create_dir_all(&dir)?;
    let mut command = match kind {
        ExternalExecutor::Scripts => {
            let script = dir.join("noop.sh");
            std::fs::write(&script, NOOP_SCRIPT)?;
            std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
            let mut command = Command::new(cluster.carillon());
            command.args(["executor", "--scripts"]).arg(&dir);
            command
        }
        ExternalExecutor::Python { interpreter } => {
            std::fs::write(dir.join("bench_noop.py"), NOOP_PYTHON)?;
            // It runs in its own directory: a relative path is read from here, a bare name on PATH.
            let interpreter = if interpreter.components().count() > 1 {
                std::path::absolute(interpreter)?
            } else {
                interpreter.clone()
            };
            let mut command = Command::new(interpreter);
            command
                .args([
                    "-m",
                    "carillon_executor",
                    "bench_noop",
                    "--app",
                    "bench-python",
                ])
                .args(["--log-level", "warning"])
                .current_dir(&dir);
            command
        }
    };
    for (key, _) in std::env::vars() {
        if key.starts_with("CARILLON_") {
            command.env_remove(key);
        }
    }
    let log = cluster.dir().join(format!("{}-executor.log", kind.name()));
    let child = command
        .args(["--admin", &cluster.urls().join(",")])
        .args([
            "--listen",
            "127.0.0.1:0",
            "--executor-id",
            kind.executor_id(),
        ])
        .args(["--capacity", &capacity.to_string()])
        .env("CARILLON_EXECUTOR_TOKEN", &cluster.executor_token)
        .env("CARILLON_DISPATCH_SECRET", &cluster.dispatch_secret)
        .env("CARILLON_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("starting the {} executor", kind.name()))?;
    Ok(Running(child))
}

async fn wait_registered(cluster: &Cluster, executor_id: &str) -> anyhow::Result<()> {
    for _ in 0..200 {
        let listed = cluster
            .api_get(0, "/api/v1/executors")
            .await
            .and_then(|list| list["executors"].as_array().cloned())
            .is_some_and(|all| all.iter().any(|e| e["id"] == executor_id));
        if listed {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the executor {executor_id} did not register in 20 s")
}

pub(crate) async fn external(
    common: &Common,
    load: &ExternalLoad,
    kind: &ExternalExecutor,
) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(load.nodes).await?;
    let executor = start_executor(&cluster, kind, load.capacity)?;
    wait_registered(&cluster, kind.executor_id()).await?;
    let mut report = Report::new(kind.name());
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", load.nodes);
    report.add("executor_capacity", load.capacity);
    let (app, handler) = kind.handler();
    let docs = (0..load.jobs)
        .map(|i| {
            json!({"name": format!("bench-{}-{i}", kind.name()), "app": app, "handler": handler,
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
    let mut to_end = cluster
        .values(&format!(
            "SELECT finished_at_ms - scheduled_at_ms FROM runs WHERE {window} \
             AND state = 'succeeded'"
        ))
        .await?;
    to_end.sort_unstable();
    report.add("window_s", load.duration_s);
    report.add("window_runs_expected", expected);
    report.add("window_runs_succeeded", succeeded);
    report.add(
        "fires_per_s",
        (completed as f64 / load.duration_s as f64).round(),
    );
    report.add("instant_to_end_p50_ms", quantile(&to_end, 0.5));
    report.add("instant_to_end_p99_ms", quantile(&to_end, 0.99));
    // Ticks are hundredths of a second: per second of the window, a share of one core.
    let ticks = ticks_after.saturating_sub(ticks_before);
    report.add(
        "executor_cpu",
        format!("{:.0}%", ticks as f64 / load.duration_s as f64),
    );
    report.add(
        "executor_cpu_per_dispatch_us",
        (ticks as f64 * 10_000.0 / completed.max(1) as f64).round(),
    );
    drop(executor);
    Ok(report)
}
