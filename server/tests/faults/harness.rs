//! What every fault scenario sets up: a cluster of real nodes on one database, Python executors,
//! jobs created through the API, and the database's clock.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::{Mutex, MutexGuard};

use crate::support::db::{AnyRow, Engine, fetch_rows};
use crate::support::executor::{Executor, node_env};
use crate::support::node::{ClusterSnapshot, NodeProcess, NodeSpec};
use crate::support::wait_for;

/// Scenarios take turns: several clusters at once on two cores would measure the machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A scenario's turn; when it ends, how long it took is among the figures (what CI's length
/// is made of).
pub struct Turn {
    _guard: MutexGuard<'static, ()>,
    began: Instant,
}

pub async fn one_at_a_time() -> Turn {
    Turn {
        _guard: ONE_AT_A_TIME.lock().await,
        began: Instant::now(),
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let scenario = std::thread::current()
            .name()
            .unwrap_or("a scenario")
            .to_owned();
        let took = self.began.elapsed().as_secs_f64();
        record_figures(&format!("turn taken: {scenario} {took:.1} s"));
    }
}

/// Where the scenarios' figures are collected.
pub const FIGURES_FILE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/fault-figures.txt");

/// See the `figures!` macro.
pub fn record_figures(line: &str) {
    use std::io::Write;
    eprintln!("figures: {line}");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(FIGURES_FILE);
    if let Ok(mut file) = file {
        let _ = writeln!(file, "{line}");
    }
}

/// A database the nodes use, and how the test reads it.
#[derive(Debug, Clone)]
pub struct Database {
    pub engine: Engine,
    /// What the nodes connect to (possibly through a proxy).
    pub node_url: String,
    /// What the test reads through (never through the proxy).
    pub test_url: String,
}

impl Database {
    pub fn direct(engine: Engine, url: &str) -> Database {
        Database {
            engine,
            node_url: url.to_owned(),
            test_url: url.to_owned(),
        }
    }

    pub async fn rows<T: AnyRow>(&self, query: &str, binds: &[i64]) -> Vec<T> {
        fetch_rows(self.engine, &self.test_url, query, binds).await
    }

    /// One integer from `query`.
    pub async fn scalar(&self, query: &str, binds: &[i64]) -> i64 {
        let rows: Vec<(i64,)> = self.rows(query, binds).await;
        rows.first().map_or(0, |r| r.0)
    }

    /// Now, by the database's clock, in epoch milliseconds: the clock every node fires by.
    pub async fn now_ms(&self) -> i64 {
        let query = match self.engine {
            Engine::Postgres => {
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
            }
            Engine::Mysql => "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
            Engine::Sqlite => "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        };
        self.scalar(query, &[]).await
    }

    /// Sleeps until the database clock reads at least `at_ms`.
    pub async fn sleep_until(&self, at_ms: i64) {
        loop {
            let now = self.now_ms().await;
            if now >= at_ms {
                return;
            }
            let left = u64::try_from(at_ms - now).unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(left.min(200))).await;
        }
    }
}

/// A row lock the test holds on one partition, in an open transaction: a claim of that
/// partition waits behind it while claims of the others go through.
#[derive(Debug)]
pub enum PartitionLock {
    Postgres(sqlx::PgConnection),
    Mysql(sqlx::MySqlConnection),
}

impl Database {
    pub async fn lock_partition(&self, partition: i64) -> PartitionLock {
        use sqlx::{Connection, Executor};
        match self.engine {
            Engine::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.test_url).await.unwrap();
                c.execute("BEGIN").await.unwrap();
                sqlx::query(
                    "SELECT partition_id FROM partitions WHERE partition_id = $1 FOR UPDATE",
                )
                .bind(partition)
                .execute(&mut c)
                .await
                .unwrap();
                PartitionLock::Postgres(c)
            }
            Engine::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.test_url)
                    .await
                    .unwrap();
                c.execute("BEGIN").await.unwrap();
                sqlx::query(
                    "SELECT partition_id FROM partitions WHERE partition_id = ? FOR UPDATE",
                )
                .bind(partition)
                .execute(&mut c)
                .await
                .unwrap();
                PartitionLock::Mysql(c)
            }
            Engine::Sqlite => panic!("SQLite locks the whole database"),
        }
    }
}

impl PartitionLock {
    pub async fn release(self) {
        use sqlx::Executor;
        match self {
            PartitionLock::Postgres(mut c) => drop(c.execute("ROLLBACK").await.unwrap()),
            PartitionLock::Mysql(mut c) => drop(c.execute("ROLLBACK").await.unwrap()),
        }
    }
}

/// Nodes named `n1`, `n2`, … on one database, with the executor settings of the tests.
#[derive(Debug)]
pub struct Cluster {
    pub db: Database,
    pub nodes: Vec<NodeProcess>,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `count` nodes with fast timings (heartbeat 200 ms, leases 1 s), `tune` applied.
    pub async fn start(db: &Database, count: usize, tune: impl Fn(&mut NodeSpec)) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for i in 1..=count {
            nodes.push(NodeProcess::start(Self::spec(db, &dir, i, &tune)).await);
        }
        let cluster = Cluster {
            db: db.clone(),
            nodes,
            dir,
        };
        let ids = cluster.ids();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        cluster.settled(0, &ids).await;
        cluster
    }

    pub fn spec(
        db: &Database,
        dir: &tempfile::TempDir,
        i: usize,
        tune: &impl Fn(&mut NodeSpec),
    ) -> NodeSpec {
        let mut spec = NodeSpec::fast(&format!("n{i}"), &db.node_url, dir.path());
        spec.extra_env = node_env();
        spec.extra_env
            .push(("CARILLON_NO_EXECUTOR_GRACE_MS", "3000".to_owned()));
        tune(&mut spec);
        spec
    }

    /// Starts node `n<len+1>` and adds it to the cluster.
    pub async fn join(&mut self, tune: impl Fn(&mut NodeSpec)) {
        let spec = Self::spec(&self.db, &self.dir, self.nodes.len() + 1, &tune);
        self.nodes.push(NodeProcess::start(spec).await);
    }

    /// Restarts node `i` (after a kill) with the settings and the port it had, so executors
    /// that know its address find it again.
    pub async fn restart(&mut self, i: usize) {
        let mut spec = self.nodes[i].spec.clone();
        let listen = self.nodes[i].addr.to_string();
        spec.extra_env.retain(|(key, _)| *key != "CARILLON_LISTEN");
        spec.extra_env.push(("CARILLON_LISTEN", listen));
        self.nodes[i].kill9();
        self.nodes[i] = NodeProcess::start(spec).await;
    }

    /// Every partition as `(partition_id, epoch, owner)`, from the database.
    pub async fn partitions(&self) -> Vec<(i64, i64, Option<String>)> {
        self.db
            .rows(
                "SELECT partition_id, epoch, owner_node_id FROM partitions ORDER BY partition_id",
                &[],
            )
            .await
    }

    /// The partitions `node_id` owns, from the database.
    pub async fn partitions_of(&self, node_id: &str) -> Vec<i64> {
        self.partitions()
            .await
            .into_iter()
            .filter(|(_, _, owner)| owner.as_deref() == Some(node_id))
            .map(|(p, _, _)| p)
            .collect()
    }

    pub fn ids(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.node_id().to_owned()).collect()
    }

    /// The index of node `id` (`n3` is 2).
    pub fn index(id: &str) -> usize {
        id[1..].parse::<usize>().unwrap() - 1
    }

    /// Waits until the cluster, as node `via` sees it, has exactly `live` alive and settled.
    pub async fn settled(&self, via: usize, live: &[&str]) -> ClusterSnapshot {
        wait_for(Duration::from_secs(60), "a settled cluster", || async {
            self.nodes[via]
                .cluster()
                .await
                .filter(|s| s.is_settled_on(live))
        })
        .await
    }

    pub async fn leader(&self) -> String {
        let ids = self.ids();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let snapshot = self.settled(0, &ids).await;
        snapshot.leader.unwrap().node_id
    }

    /// Creates jobs through node `via`; returns their ids in order.
    pub async fn create_jobs(&self, via: usize, bodies: Vec<Value>) -> Vec<i64> {
        let mut ids = Vec::new();
        for body in bodies {
            let (status, reply) = self.nodes[via]
                .call(Method::POST, "/api/v1/jobs", Some(body))
                .await;
            assert_eq!(status, 201, "{reply}");
            ids.push(reply["id"].as_i64().unwrap());
        }
        ids
    }

    /// Starts a Python executor of app `py` registered with node `via`.
    pub fn executor(&self, via: usize, id: &str, extra: &[&str]) -> Executor {
        Executor::start(&self.nodes[via], "py", id, 1, extra)
    }

    /// Creates `count` jobs named `tick-<i>` firing every second (see `every_second`) through
    /// node `via`; returns them and the first instant from which all of them fire.
    pub async fn ticking(&self, via: usize, count: usize) -> (Vec<i64>, i64) {
        let bodies = (0..count)
            .map(|i| every_second(&format!("tick-{i}")))
            .collect();
        let jobs = self.create_jobs(via, bodies).await;
        let from = self.firing_from(&jobs).await;
        (jobs, from)
    }

    /// The first instant (a whole second) after every job of `jobs` fired at least once: from
    /// there on every instant is expected.
    pub async fn firing_from(&self, jobs: &[i64]) -> i64 {
        let listed = id_list(jobs);
        wait_for(Duration::from_secs(30), "every job to fire", || async {
            let firing = self
                .db
                .scalar(
                    &format!(
                        "SELECT COUNT(*) FROM jobs WHERE job_id IN ({listed}) \
                         AND last_fired_at_ms IS NOT NULL"
                    ),
                    &[],
                )
                .await;
            (firing == jobs.len() as i64).then_some(())
        })
        .await;
        (self.db.now_ms().await / 1_000 + 2) * 1_000
    }
}

/// Waits until every job has fired an instant after `after`; returns when, by the database.
pub async fn firing_again(db: &Database, jobs: &[i64], after: i64) -> i64 {
    let listed = id_list(jobs);
    wait_for(
        Duration::from_secs(60),
        "every job to fire again",
        || async {
            let behind = db
                .scalar(
                    &format!(
                        "SELECT COUNT(DISTINCT job_id) FROM runs WHERE job_id IN ({listed}) \
                     AND scheduled_at_ms > ? AND state = 'succeeded'"
                    ),
                    &[after],
                )
                .await;
            (behind >= jobs.len() as i64).then_some(())
        },
    )
    .await;
    db.now_ms().await
}

/// A job firing every second with the echo handler (answers at once), retried up to 3 times.
pub fn every_second(name: &str) -> Value {
    json!({"name": name, "app": "py", "handler": "echo",
           "schedule": {"cron": "* * * * * *"}, "start": true,
           "retry": {"max_attempts": 3, "initial_delay_ms": 100}})
}

/// `1,2,3` for SQL `IN (…)` (integers only, never text).
pub fn id_list(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// Instants every `step_ms` in `[from, to]`.
pub fn instants(from: i64, to: i64, step_ms: i64) -> Vec<i64> {
    (0..)
        .map(|k| from + k * step_ms)
        .take_while(|t| *t <= to)
        .collect()
}
