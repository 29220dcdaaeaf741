//! The soak: hours of jobs firing every second, with the run history kept for minutes
//! (`--retention`), each node restarted in turn and each of two executors restarted in turn,
//! the way an operator's week goes, compressed. Every minute it samples the database's size,
//! each node's resident memory and the minute's lateness; at the end it checks every instant
//! of the whole run (none twice, none missed) and draws the samples (`--chart`, SVG).

use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::{now_ms, rss_bytes};
use crate::executor::{FastExecutor, Receipt};
use crate::history::database_bytes;
use crate::scenarios::{Common, every_second, new_cluster, sleep_until_ms};
use crate::stats::{Report, delivery, quantile};

#[derive(Debug, Clone)]
pub(crate) struct SoakLoad {
    pub(crate) nodes: usize,
    pub(crate) jobs: usize,
    pub(crate) minutes: u64,
    /// A node restarted (SIGTERM, started again) every this many minutes, each in turn.
    pub(crate) node_restart_every: u64,
    /// One of the two executors drained and started again every this many minutes.
    pub(crate) executor_restart_every: u64,
    pub(crate) chart: Option<PathBuf>,
}

/// What a minute's sample saw.
#[derive(Debug, Clone, Default)]
struct Sample {
    minute: u64,
    database_mb: f64,
    runs_kept: i64,
    /// Each node's resident memory, MiB.
    node_mb: Vec<f64>,
}

/// What the minute restarted, for the chart.
#[derive(Debug, Clone, Copy)]
enum Restart {
    Node(u64),
    Executor(u64),
}

const EXECUTORS: [&str; 2] = ["bench-soak-a", "bench-soak-b"];

pub(crate) async fn soak(common: &Common, load: &SoakLoad) -> anyhow::Result<Report> {
    let mut cluster = new_cluster(common).await?;
    cluster.start_nodes(load.nodes).await?;
    let mut executors = Vec::new();
    for id in EXECUTORS {
        executors.push(FastExecutor::start_as(&cluster, id, common.batch, 0).await?);
    }
    let docs = (0..load.jobs)
        .map(|i| every_second(i, "fire_once"))
        .collect();
    let jobs = cluster.create_jobs(docs).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;

    let t0 = (now_ms() / 1_000 + 1) * 1_000;
    let mut gone: Vec<Receipt> = Vec::new();
    let mut samples = Vec::new();
    let mut restarts = Vec::new();
    let (mut node_turn, mut executor_turn) = (0usize, 0usize);
    for minute in 1..=load.minutes {
        sleep_until_ms(t0 + i64::try_from(minute * 60_000)?).await;
        samples.push(sample(&cluster, minute).await);
        eprintln!("{}", describe(samples.last().unwrap_or(&Sample::default())));
        if minute == load.minutes {
            break;
        }
        if minute % load.executor_restart_every.max(1) == 0 {
            let turn = executor_turn % EXECUTORS.len();
            executor_turn += 1;
            let leaving = executors.remove(turn);
            gone.extend(leaving.stop(Duration::from_secs(3)).await);
            let back = FastExecutor::start_as(&cluster, EXECUTORS[turn], common.batch, 0).await?;
            executors.insert(turn, back);
            restarts.push(Restart::Executor(minute));
        }
        if minute % load.node_restart_every.max(1) == 0 {
            let turn = node_turn % cluster.nodes.len();
            node_turn += 1;
            cluster.restart(turn).await?;
            restarts.push(Restart::Node(minute));
        }
    }
    let t1 = t0 + i64::try_from(load.minutes * 60_000)?;
    // Late fires still count: wait until every instant arrived (or two minutes).
    let expected = jobs.len() * usize::try_from(load.minutes * 60)?;
    let deadline = now_ms() + 120_000;
    let mut receipts = gone.clone();
    while now_ms() < deadline {
        receipts = gone.clone();
        for executor in &executors {
            receipts.extend(executor.receipts());
        }
        let arrived = receipts
            .iter()
            .filter(|r| r.scheduled_ms >= t0 && r.scheduled_ms < t1)
            .count();
        if arrived >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let instants: Vec<i64> = (t0..t1).step_by(1_000).collect();
    let whole = delivery(&receipts, &jobs, &instants);
    let lateness = lateness_by_minute(&receipts, t0, load.minutes);

    let mut report = Report::new("soak");
    report.add("db", format!("{:?}", common.db).to_lowercase());
    report.add("nodes", load.nodes);
    report.add("jobs_every_second", load.jobs);
    report.add("minutes", load.minutes);
    report.add("node_restarts", node_turn);
    report.add("executor_restarts", executor_turn);
    let first = samples.first().cloned().unwrap_or_default();
    let last = samples.last().cloned().unwrap_or_default();
    let most = |pick: fn(&Sample) -> f64| samples.iter().map(pick).fold(0.0, f64::max);
    report.add(
        "database_mb_first_last_max",
        format!(
            "{:.0} {:.0} {:.0}",
            first.database_mb,
            last.database_mb,
            most(|s| s.database_mb)
        ),
    );
    report.add("runs_kept_last", last.runs_kept);
    let node_max = |s: &Sample| s.node_mb.iter().copied().fold(0.0, f64::max);
    report.add(
        "node_mb_first_last_max",
        format!(
            "{:.0} {:.0} {:.0}",
            node_max(&first),
            node_max(&last),
            samples.iter().map(node_max).fold(0.0, f64::max)
        ),
    );
    let worst_p99 = lateness.iter().map(|l| l.1).max().unwrap_or(0);
    report.add("lateness_p99_worst_minute_ms", worst_p99);
    report.add_delivery(&whole);
    if let Some(path) = &load.chart {
        std::fs::write(path, chart(&samples, &lateness, &restarts, load))?;
        report.add("chart", path.display().to_string());
    }
    cluster.stop_all().await;
    Ok(report)
}

async fn sample(cluster: &crate::cluster::Cluster, minute: u64) -> Sample {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    Sample {
        minute,
        database_mb: database_bytes(cluster)
            .await
            .map_or(-1.0, |b| b as f64 / 1e6),
        runs_kept: cluster
            .count("SELECT COUNT(*) FROM runs")
            .await
            .unwrap_or(-1),
        node_mb: cluster
            .nodes
            .iter()
            .map(|n| rss_bytes(n.pid()).map_or(0.0, mib))
            .collect(),
    }
}

fn describe(s: &Sample) -> String {
    let nodes: Vec<String> = s.node_mb.iter().map(|m| format!("{m:.0}")).collect();
    format!(
        "soak minute={} database_mb={:.1} runs_kept={} node_mb={}",
        s.minute,
        s.database_mb,
        s.runs_kept,
        nodes.join(",")
    )
}

/// Per minute of the run: its instants' lateness p50, p99 and maximum (ms).
fn lateness_by_minute(receipts: &[Receipt], t0: i64, minutes: u64) -> Vec<(i64, i64, i64)> {
    let mut by_minute: Vec<Vec<i64>> = vec![Vec::new(); usize::try_from(minutes).unwrap_or(0)];
    for r in receipts {
        if let Ok(minute) = usize::try_from((r.scheduled_ms - t0).div_euclid(60_000))
            && let Some(late) = by_minute.get_mut(minute)
            && r.scheduled_ms >= t0
        {
            late.push(r.received_ms - r.scheduled_ms);
        }
    }
    by_minute
        .into_iter()
        .map(|mut late| {
            late.sort_unstable();
            (
                quantile(&late, 0.5),
                quantile(&late, 0.99),
                late.last().copied().unwrap_or(0),
            )
        })
        .collect()
}

/// A line of a chart: its colour and its (minute, value) points.
type Series<'a> = (&'a str, Vec<(f64, f64)>);
/// A panel of a chart: its title and its lines.
type Panel<'a> = (&'a str, Vec<Series<'a>>);

/// Three panels over the minutes: the database's size, each node's memory, and lateness
/// (p99 and maximum), with the restarts marked.
fn chart(
    samples: &[Sample],
    lateness: &[(i64, i64, i64)],
    restarts: &[Restart],
    load: &SoakLoad,
) -> String {
    const W: f64 = 900.0;
    const PANEL: f64 = 200.0;
    const LEFT: f64 = 70.0;
    const TOP: f64 = 40.0;
    let minutes = load.minutes.max(1) as f64;
    let x = |minute: f64| LEFT + (W - LEFT - 20.0) * minute / minutes;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"{LEFT}\" y=\"22\" font-size=\"14\">carillon soak: {} jobs \
         firing every second, {} nodes, {} minutes (node restarts red, executor restarts \
         grey)</text>\n",
        TOP + 3.0 * (PANEL + 40.0),
        load.jobs,
        load.nodes,
        load.minutes
    );
    let panels: [Panel<'_>; 3] = [
        (
            "database size (MB)",
            vec![(
                "#1f77b4",
                samples
                    .iter()
                    .map(|s| (s.minute as f64, s.database_mb))
                    .collect(),
            )],
        ),
        (
            "node resident memory (MiB)",
            (0..load.nodes)
                .map(|n| {
                    (
                        ["#2ca02c", "#9467bd", "#8c564b", "#17becf"][n % 4],
                        samples
                            .iter()
                            .map(|s| (s.minute as f64, s.node_mb.get(n).copied().unwrap_or(0.0)))
                            .collect(),
                    )
                })
                .collect(),
        ),
        (
            "lateness per minute, p99 and max (ms)",
            vec![
                (
                    "#ff7f0e",
                    lateness
                        .iter()
                        .enumerate()
                        .map(|(m, l)| (m as f64 + 1.0, l.1 as f64))
                        .collect(),
                ),
                (
                    "#d62728",
                    lateness
                        .iter()
                        .enumerate()
                        .map(|(m, l)| (m as f64 + 1.0, l.2 as f64))
                        .collect(),
                ),
            ],
        ),
    ];
    for (i, (title, series)) in panels.iter().enumerate() {
        let top = TOP + i as f64 * (PANEL + 40.0);
        let high = series
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.1;
        let y = |value: f64| top + PANEL - PANEL * value.max(0.0) / high;
        svg.push_str(&format!(
            "<text x=\"{LEFT}\" y=\"{}\">{title}</text>\n<line x1=\"{LEFT}\" y1=\"{}\" \
             x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{LEFT}\" y1=\"{top}\" \
             x2=\"{LEFT}\" y2=\"{}\" stroke=\"black\"/>\n<text x=\"{}\" y=\"{}\" \
             text-anchor=\"end\">{:.0}</text>\n<text x=\"{}\" y=\"{}\" \
             text-anchor=\"end\">0</text>\n<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{} \
             min</text>\n",
            top - 6.0,
            top + PANEL,
            W - 20.0,
            top + PANEL,
            top + PANEL,
            LEFT - 4.0,
            top + 10.0,
            high,
            LEFT - 4.0,
            top + PANEL,
            W - 20.0,
            top + PANEL + 14.0,
            load.minutes
        ));
        for restart in restarts {
            let (minute, colour) = match restart {
                Restart::Node(m) => (*m, "#d62728"),
                Restart::Executor(m) => (*m, "#999999"),
            };
            svg.push_str(&format!(
                "<line x1=\"{0:.1}\" y1=\"{top}\" x2=\"{0:.1}\" y2=\"{1}\" stroke=\"{colour}\" \
                 stroke-dasharray=\"3,3\" stroke-width=\"0.8\"/>\n",
                x(minute as f64),
                top + PANEL
            ));
        }
        for (colour, points) in series {
            let path: Vec<String> = points
                .iter()
                .map(|(m, v)| format!("{:.1},{:.1}", x(*m), y(*v)))
                .collect();
            svg.push_str(&format!(
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" \
                 points=\"{}\"/>\n",
                path.join(" ")
            ));
        }
    }
    svg.push_str("</svg>\n");
    svg
}
