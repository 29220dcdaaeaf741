//! `carillon-bench`: starts a real cluster on a chosen backend and a fast executor, loads it,
//! and prints figures (a table, or one JSON object with `--json`). See `bench/README.md`.

mod baseline;
mod cluster;
mod executor;
mod external;
mod history;
mod scenarios;
mod soak;
mod stats;
mod tasks;
mod workflows;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use cluster::Db;
use scenarios::Common;

#[derive(Debug, Parser)]
#[command(name = "carillon-bench", about = "Measure a real Carillon cluster")]
struct Cli {
    /// The database the nodes share (a fresh `carillon_bench` database on the machine's
    /// server, or a new SQLite file). Durable settings: the servers' defaults, fsync on.
    #[arg(long, value_enum, default_value = "postgres", global = true)]
    db: Db,
    /// Use this database URL instead (it must be empty).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// The `carillon` binary (default: beside this one).
    #[arg(long, global = true)]
    carillon: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// The executor does not offer `dispatch-batch`: one request per attempt.
    #[arg(long, global = true)]
    no_batch: bool,
    /// Every handler logs this many lines per attempt, shipped to the nodes as the SDK ships
    /// them (every 300 ms, in one request).
    #[arg(long, global = true, default_value_t = 0)]
    log_lines: usize,
    /// The nodes keep finished runs this long (`10m`, `1d`, `forever`), looking every second;
    /// default: the server's default (30 days).
    #[arg(long, global = true)]
    retention: Option<String>,
    /// The nodes reach the database (PostgreSQL) through a pooler in transaction mode that
    /// listens on 127.0.0.1 at this port (pgbouncer in front of the server the bench uses),
    /// with `database.pooler = "transaction"`; the bench itself reads the database directly.
    #[arg(long, global = true)]
    pooler_port: Option<u16>,
    /// Also set this in the nodes' environment (`KEY=VALUE`, repeatable), e.g.
    /// `CARILLON_CONFIG=tuned.toml` to measure a setting without a rebuild.
    #[arg(long, global = true, value_parser = parse_node_env)]
    node_env: Vec<(String, String)>,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Jobs firing every second (or one-shot jobs due at one instant): fires/s end to end,
    /// lateness, duplicates, missed.
    Throughput {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Jobs, each firing every second.
        #[arg(long, default_value_t = 1_000)]
        jobs: usize,
        /// Instead: this many one-shot jobs due at the same instant.
        #[arg(long)]
        one_shot: Option<usize>,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
        /// Seconds measured.
        #[arg(long, default_value_t = 30)]
        duration: u64,
        /// Insert this many runs that finished two days ago before the jobs start
        /// (PostgreSQL), for `--retention` to delete while they fire.
        #[arg(long)]
        history_backlog: Option<u64>,
        /// Print the database's size and runs kept every this many seconds of the window.
        #[arg(long)]
        size_every: Option<u64>,
        /// Spread the jobs over this many flow keys (flow control), each capped at
        /// `--max-in-flight`.
        #[arg(long)]
        flow_keys: Option<usize>,
        /// Runs of a flow key pending or running at once (the default never binds: the cost
        /// of flow control alone).
        #[arg(long, default_value_t = 100_000)]
        max_in_flight: u32,
    },
    /// HTTP jobs firing every second, each calling a fast local HTTP server: fires/s end to
    /// end, lateness (from the instant to the server's receipt), duplicates, missed.
    Http {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        #[arg(long, default_value_t = 10_000)]
        jobs: usize,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
        #[arg(long, default_value_t = 30)]
        duration: u64,
    },
    /// Jobs firing every second, each running a tiny shell script through one
    /// `carillon executor --scripts` process: fires/s end to end, instant to the script's
    /// exit, the executor's CPU.
    Scripts {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        #[arg(long, default_value_t = 200)]
        jobs: usize,
        /// Scripts the executor runs at once.
        #[arg(long, default_value_t = 32)]
        capacity: u32,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
        #[arg(long, default_value_t = 30)]
        duration: u64,
    },
    /// Jobs firing every second, each run by one Python executor process (`python -m
    /// carillon_executor`, an `async` handler that returns at once): fires/s end to end,
    /// instant to the run's end, the executor's CPU in all and per dispatch.
    Python {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        #[arg(long, default_value_t = 5_000)]
        jobs: usize,
        /// Attempts the executor runs at once.
        #[arg(long, default_value_t = 1_000)]
        capacity: u32,
        /// The interpreter, with `carillon-executor` installed (`pip install sdk/python`).
        #[arg(long, default_value = "python3")]
        python: std::path::PathBuf,
        #[arg(long, default_value_t = 10)]
        warmup: u64,
        #[arg(long, default_value_t = 30)]
        duration: u64,
    },
    /// `kill -9` of the leader, then of a follower, under load (3 nodes, default timings,
    /// `catch_up`): seconds until a new leader, until the dead node's jobs fire again;
    /// duplicates and missed instants.
    Failover {
        #[arg(long, default_value_t = 1_000)]
        jobs: usize,
        /// Each run starts up to this many ms after its second (the job's `jitter_ms`), so
        /// the fires spread over the second as unrelated jobs' do; `duplicates` then counts
        /// the answered work a kill left to be done again.
        #[arg(long, default_value_t = 0)]
        jitter_ms: u64,
    },
    /// Tasks: enqueues per second (single requests, batches of 10,000), a crowd due at one
    /// instant drained end to end; with `--rate`, tasks due every second while `--pending`
    /// others wait (lateness, each node's memory).
    Tasks {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// Single-task requests timed (16 at a time).
        #[arg(long, default_value_t = 2_000)]
        single: usize,
        /// Tasks enqueued in batches, all due at one instant, then drained.
        #[arg(long, default_value_t = 100_000)]
        at_once: usize,
        /// Batch requests in flight at once.
        #[arg(long, default_value_t = 4)]
        concurrency: usize,
        /// Tasks left pending over the next week before the paced phase.
        #[arg(long, default_value_t = 0)]
        pending: usize,
        /// Tasks due every second in the paced phase (0: none).
        #[arg(long, default_value_t = 0)]
        rate: usize,
        /// Seconds of the paced phase.
        #[arg(long, default_value_t = 30)]
        duration: u64,
    },
    /// Workflows: the wait of each step after the steps it needs, in a 100-step workflow
    /// (fan-out of 50, fan-in, a chain) run `--dag` times; and `--workflows` of 5 steps each
    /// firing every minute for `--minutes`: duplicates and missed steps.
    Workflows {
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        #[arg(long, default_value_t = 10)]
        dag: usize,
        #[arg(long, default_value_t = 0)]
        workflows: usize,
        #[arg(long, default_value_t = 2)]
        minutes: u64,
    },
    /// Hours of load compressed: jobs firing every second, history kept `--retention` (10
    /// minutes unless given), a node restarted and an executor (of two) restarted in turn;
    /// each minute the database's size, each node's memory and the lateness, charted.
    Soak {
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        #[arg(long, default_value_t = 1_000)]
        jobs: usize,
        #[arg(long, default_value_t = 120)]
        minutes: u64,
        /// Minutes between node restarts (each node in turn).
        #[arg(long, default_value_t = 20)]
        node_restart_every: u64,
        /// Minutes between executor restarts (each of the two in turn).
        #[arg(long, default_value_t = 10)]
        executor_restart_every: u64,
        /// Write the samples' chart here (SVG).
        #[arg(long)]
        chart: Option<PathBuf>,
        /// Exit with an error if any instant was delivered twice or missed (for CI's short
        /// run; the figures are printed either way).
        #[arg(long)]
        check: bool,
    },
    /// Creating jobs: one request each (16 at a time), then in bulk; jobs per second.
    Create {
        #[arg(long, default_value_t = 5_000)]
        single: usize,
        #[arg(long, default_value_t = 100_000)]
        bulk: usize,
    },
    /// Many active jobs with a realistic mix of schedules: load time, memory per job, idle CPU.
    Capacity {
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        #[arg(long, default_value_t = 3)]
        nodes: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let carillon = match cli.carillon {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .context("this binary's directory")?
            .join("carillon"),
    };
    anyhow::ensure!(
        carillon.exists(),
        "no carillon binary at {}: build it (cargo build --release -p carillon-server) or pass --carillon",
        carillon.display()
    );
    let retention = match (&cli.scenario, cli.retention) {
        (Scenario::Soak { .. }, None) => Some("10m".to_owned()),
        (_, retention) => retention,
    };
    let common = Common {
        db: cli.db,
        database_url: cli.database_url,
        pooler_port: cli.pooler_port,
        carillon,
        batch: !cli.no_batch,
        log_lines: cli.log_lines,
        extra_env: retention
            .as_deref()
            .map(history::retention_env)
            .unwrap_or_default()
            .into_iter()
            .chain(cli.node_env)
            .collect(),
    };
    // Before the scenario, while the machine is otherwise idle.
    let baseline = baseline::measure(cli.db).await?;
    let mut report = match cli.scenario {
        Scenario::Throughput {
            nodes,
            jobs,
            one_shot,
            warmup,
            duration,
            history_backlog,
            size_every,
            flow_keys,
            max_in_flight,
        } => {
            let load = scenarios::Load {
                nodes,
                jobs,
                one_shot,
                warmup_s: warmup,
                duration_s: duration,
                history_backlog,
                size_every_s: size_every,
                http: false,
                flow: flow_keys.map(|keys| scenarios::FlowLoad {
                    keys,
                    max_in_flight,
                }),
            };
            scenarios::throughput(&common, &load).await?
        }
        Scenario::Http {
            nodes,
            jobs,
            warmup,
            duration,
        } => {
            let load = scenarios::Load {
                nodes,
                jobs,
                one_shot: None,
                warmup_s: warmup,
                duration_s: duration,
                history_backlog: None,
                size_every_s: None,
                http: true,
                flow: None,
            };
            scenarios::throughput(&common, &load).await?
        }
        Scenario::Scripts {
            nodes,
            jobs,
            capacity,
            warmup,
            duration,
        } => {
            let load = external::ExternalLoad::new(nodes, jobs, capacity, warmup, duration);
            external::external(&common, &load, &external::ExternalExecutor::Scripts).await?
        }
        Scenario::Python {
            nodes,
            jobs,
            capacity,
            python,
            warmup,
            duration,
        } => {
            let load = external::ExternalLoad::new(nodes, jobs, capacity, warmup, duration);
            let kind = external::ExternalExecutor::Python {
                interpreter: python,
            };
            external::external(&common, &load, &kind).await?
        }
        Scenario::Failover { jobs, jitter_ms } => {
            scenarios::failover(&common, jobs, jitter_ms).await?
        }
        Scenario::Soak {
            nodes,
            jobs,
            minutes,
            node_restart_every,
            executor_restart_every,
            chart,
            check,
        } => {
            let load = soak::SoakLoad {
                nodes,
                jobs,
                minutes: minutes.max(1),
                node_restart_every,
                executor_restart_every,
                chart,
            };
            let report = soak::soak(&common, &load).await?;
            if check {
                let wrong = report.count("duplicates") + report.count("missed");
                if wrong > 0 {
                    report.print(cli.json);
                    anyhow::bail!("the soak delivered {wrong} instants twice or not at all");
                }
            }
            report
        }
        Scenario::Create { single, bulk } => scenarios::create(&common, single, bulk).await?,
        Scenario::Capacity { jobs, nodes } => scenarios::capacity(&common, jobs, nodes).await?,
        Scenario::Workflows {
            nodes,
            dag,
            workflows,
            minutes,
        } => {
            let load = workflows::WorkflowLoad {
                nodes,
                dag_runs: dag,
                workflows,
                minutes: minutes.max(1),
            };
            workflows::workflows(&common, &load).await?
        }
        Scenario::Tasks {
            nodes,
            single,
            at_once,
            concurrency,
            pending,
            rate,
            duration,
        } => {
            let load = tasks::TaskLoad {
                nodes,
                single,
                at_once,
                concurrency,
                pending,
                rate,
                duration_s: duration,
            };
            tasks::tasks(&common, &load).await?
        }
    };
    report.add_all(baseline);
    report.print(cli.json);
    Ok(())
}

/// `KEY=VALUE`, for `--node-env`.
fn parse_node_env(pair: &str) -> Result<(String, String), String> {
    match pair.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("`{pair}` is not KEY=VALUE")),
    }
}
