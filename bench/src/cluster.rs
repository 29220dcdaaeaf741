//! A real cluster for the benchmark: a fresh database on the chosen backend and `carillon
//! server` processes on loopback, with the default timings unless a scenario says otherwise.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::Value;
use sqlx::Connection;

pub(crate) const ADMIN_TOKEN: &str = "bench-admin-token-0123456789abcdef";
const EXECUTOR_TOKEN: &str = "bench-executor-token-0123456789abcd";
const DISPATCH_SECRET: &str = "bench-dispatch-secret-0123456789abc";
const DATABASE: &str = "carillon_bench";

/// Which database the cluster shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Db {
    Sqlite,
    Postgres,
    Mysql,
}

/// Wall-clock epoch milliseconds (the bench runs on the nodes' machine, so this is their clock).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` (what nodes send) to epoch milliseconds.
pub(crate) fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[b.len() - 1] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let ms = if b.len() >= 24 && b[19] == b'.' {
        num(20..23)?
    } else {
        0
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi) * 60_000 + s * 1_000 + ms)
}

/// One `carillon server` process.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: String,
    pub(crate) url: String,
    child: Child,
    pub(crate) log: PathBuf,
}

impl Node {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -9`.
    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The cluster: its database and nodes.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) db: Db,
    pub(crate) database_url: String,
    /// What the nodes connect to: `database_url`, or it through a pooler.
    nodes_url: String,
    pub(crate) executor_token: String,
    pub(crate) dispatch_secret: String,
    pub(crate) nodes: Vec<Node>,
    carillon: PathBuf,
    dir: PathBuf,
    client: reqwest::Client,
    extra_env: Vec<(String, String)>,
}

impl Cluster {
    /// A fresh database; no node yet.
    pub(crate) async fn create(
        db: Db,
        carillon: PathBuf,
        database_url: Option<String>,
        pooler_port: Option<u16>,
        mut extra_env: Vec<(String, String)>,
    ) -> anyhow::Result<Cluster> {
        let dir = std::env::temp_dir().join(format!("carillon-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let database_url = match database_url {
            Some(url) => url,
            None => fresh_database(db, &dir).await?,
        };
        let nodes_url = match pooler_port {
            None => database_url.clone(),
            Some(port) => {
                anyhow::ensure!(db == Db::Postgres, "--pooler-port is for PostgreSQL");
                extra_env.push(("CARILLON_DATABASE_POOLER".into(), "transaction".into()));
                through_port(&database_url, port)?
            }
        };
        Ok(Cluster {
            db,
            database_url,
            nodes_url,
            executor_token: EXECUTOR_TOKEN.to_owned(),
            dispatch_secret: DISPATCH_SECRET.to_owned(),
            nodes: Vec::new(),
            carillon,
            dir,
            client: carillon_tls::http_client()?,
            extra_env,
        })
    }

    /// Starts `count` more nodes and waits until each is a ready member.
    pub(crate) async fn start_nodes(&mut self, count: usize) -> anyhow::Result<()> {
        let first = self.nodes.len();
        for i in first..first + count {
            let node = self.spawn(&format!("node-{i}"), free_port()?)?;
            self.nodes.push(node);
        }
        for i in first..first + count {
            self.wait_ready(i).await?;
        }
        Ok(())
    }

    /// Stops node `index` gracefully (SIGTERM: it hands its partitions back) and starts it
    /// again on its port and data, as a rolling restart does; waits until it is ready.
    pub(crate) async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[index];
        let _ = Command::new("kill")
            .args(["-TERM", &node.pid().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while node.is_running() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        node.kill9();
        let port = node
            .url
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .context("a node's port")?;
        let id = node.id.clone();
        self.nodes[index] = self.spawn(&id, port)?;
        self.wait_ready(index).await
    }

    /// Starts `carillon server` as node `id` on `port`.
    fn spawn(&self, id: &str, port: u16) -> anyhow::Result<Node> {
        let data_dir = self.dir.join(id);
        std::fs::create_dir_all(&data_dir)?;
        let log = self.dir.join(format!("{id}.log"));
        let mut command = Command::new(&self.carillon);
        for (key, _) in std::env::vars() {
            if key.starts_with("CARILLON_") {
                command.env_remove(key);
            }
        }
        command
            .arg("server")
            .env("CARILLON_DATABASE_URL", &self.nodes_url)
            .env("CARILLON_LISTEN", format!("127.0.0.1:{port}"))
            .env("CARILLON_NODE_ID", id)
            .env("CARILLON_DATA_DIR", &data_dir)
            .env("CARILLON_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN)
            .env("CARILLON_DISPATCH_SECRET", DISPATCH_SECRET)
            .env("CARILLON_LOG", "warn")
            // The bench's executors listen on this machine.
            .env("CARILLON_EGRESS_ALLOWED_NETWORKS", "public,loopback")
            .envs(self.extra_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)?,
            );
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", self.carillon.display()))?;
        Ok(Node {
            id: id.to_owned(),
            url: format!("http://127.0.0.1:{port}"),
            child,
            log,
        })
    }

    async fn wait_ready(&mut self, index: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let url = format!("{}/readyz", self.nodes[index].url);
            if self
                .client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(());
            }
            if !self.nodes[index].is_running() || Instant::now() > deadline {
                let log = std::fs::read_to_string(&self.nodes[index].log).unwrap_or_default();
                bail!(
                    "{} did not become ready; its log:\n{log}",
                    self.nodes[index].id
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops every node gracefully (SIGTERM): they hand their partitions back at once.
    pub(crate) async fn stop_all(&mut self) {
        for node in &self.nodes {
            let _ = Command::new("kill")
                .args(["-TERM", &node.pid().to_string()])
                .status();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.nodes.iter_mut().any(Node::is_running) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.nodes.clear();
    }

    /// The bench's directory: the nodes' data and logs.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The `carillon` binary the nodes run.
    pub(crate) fn carillon(&self) -> &std::path::Path {
        &self.carillon
    }

    /// `GET path` of the API of the node at `index`, as the admin.
    pub(crate) async fn api_get(&self, index: usize, path: &str) -> Option<Value> {
        let response = self
            .client
            .get(format!("{}{path}", self.nodes[index].url))
            .bearer_auth(ADMIN_TOKEN)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        response.json().await.ok()
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url.clone()).collect()
    }

    /// The cluster view of the node at `index`.
    pub(crate) async fn view_of(&self, index: usize) -> Option<Value> {
        self.api_get(index, "/api/v1/cluster").await
    }

    /// The index of the node holding the leadership, and its term.
    pub(crate) async fn leader(&self) -> Option<(usize, i64)> {
        for i in 0..self.nodes.len() {
            if let Some(view) = self.view_of(i).await {
                let id = view["leader"]["node_id"].as_str()?;
                let term = view["leader"]["term"].as_i64()?;
                let index = self.nodes.iter().position(|n| n.id == id)?;
                return Some((index, term));
            }
        }
        None
    }

    /// Creates jobs from `documents` one request each, `concurrency` requests at a time;
    /// returns their ids. A job is asked for up to [`CREATE_TRIES`] times while the node
    /// answers `503`.
    pub(crate) async fn create_jobs_one_by_one(
        &self,
        documents: Vec<Value>,
        concurrency: usize,
    ) -> anyhow::Result<Vec<i64>> {
        self.create_at("/api/v1/jobs", documents, concurrency).await
    }

    /// Creates jobs from `documents` through `POST /api/v1/jobs/bulk`, [`BULK_JOBS`] a
    /// request, two requests at a time on the nodes in turn; returns their ids in order.
    pub(crate) async fn create_jobs(&self, documents: Vec<Value>) -> anyhow::Result<Vec<i64>> {
        let urls = self.urls();
        // A build before bulk create (to compare builds in one sitting): one by one.
        let probe = self
            .client
            .post(format!("{}/api/v1/jobs/bulk", urls[0]))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({}))
            .send()
            .await?;
        if matches!(probe.status().as_u16(), 404 | 405) {
            return self.create_jobs_one_by_one(documents, 16).await;
        }
        let mut tasks = tokio::task::JoinSet::new();
        let mut chunks = Vec::new();
        let mut rest = documents;
        while !rest.is_empty() {
            let tail = rest.split_off(rest.len().min(BULK_JOBS));
            chunks.push(std::mem::replace(&mut rest, tail));
        }
        let mut ids: Vec<Vec<i64>> = vec![Vec::new(); chunks.len()];
        let mut pending = chunks.into_iter().enumerate();
        loop {
            while tasks.len() < 2 {
                let Some((i, chunk)) = pending.next() else {
                    break;
                };
                let url = format!("{}/api/v1/jobs/bulk", urls[i % urls.len()]);
                let client = self.client.clone();
                tasks.spawn(async move {
                    let response = client
                        .post(&url)
                        .bearer_auth(ADMIN_TOKEN)
                        .json(&serde_json::json!({ "jobs": chunk }))
                        .send()
                        .await?;
                    let status = response.status();
                    let body: Value = response.json().await?;
                    if status.as_u16() != 201 {
                        bail!("creating at {url}: {status} {:.500}", body.to_string());
                    }
                    let made = body["jobs"]
                        .as_array()
                        .context("a bulk create answers its jobs")?
                        .iter()
                        .map(|j| j["id"].as_i64().context("a created job has an id"))
                        .collect::<anyhow::Result<Vec<i64>>>()?;
                    anyhow::Ok((i, made))
                });
            }
            match tasks.join_next().await {
                Some(done) => {
                    let (i, made) = done??;
                    ids[i] = made;
                }
                None => break,
            }
        }
        Ok(ids.into_iter().flatten().collect())
    }

    /// Creates what `documents` describe by `POST` to `path` on the nodes in turn,
    /// `concurrency` at a time; their ids.
    pub(crate) async fn create_at(
        &self,
        path: &str,
        documents: Vec<Value>,
        concurrency: usize,
    ) -> anyhow::Result<Vec<i64>> {
        let urls = self.urls();
        let client = self.client.clone();
        let mut ids = Vec::with_capacity(documents.len());
        let mut tasks = tokio::task::JoinSet::new();
        let mut iter = documents.into_iter().enumerate();
        loop {
            while tasks.len() < concurrency {
                let Some((i, doc)) = iter.next() else { break };
                let url = format!("{}{path}", urls[i % urls.len()]);
                let client = client.clone();
                tasks.spawn(async move {
                    // A `503` says the database could not serve the request and to try again
                    // (SQLite busy while the node fires): a client does, after a pause.
                    let mut tries = 0;
                    loop {
                        tries += 1;
                        let response = client
                            .post(&url)
                            .bearer_auth(ADMIN_TOKEN)
                            .json(&doc)
                            .send()
                            .await?;
                        let status = response.status();
                        let body: Value = response.json().await?;
                        if status.as_u16() == 503 && tries < CREATE_TRIES {
                            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                            continue;
                        }
                        if status.as_u16() != 201 {
                            bail!("creating at {url}: {status} {body}");
                        }
                        return body["id"].as_i64().context("a created job has an id");
                    }
                });
            }
            match tasks.join_next().await {
                Some(done) => ids.push(done??),
                None => break,
            }
        }
        Ok(ids)
    }

    /// Counts rows in the shared database.
    /// The one integer column of `sql`'s rows.
    pub(crate) async fn values(&self, sql: &str) -> anyhow::Result<Vec<i64>> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        Ok(match self.db {
            Db::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.database_url).await?;
                sqlx::query_scalar::<_, i64>(sql).fetch_all(&mut c).await?
            }
            Db::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.database_url).await?;
                sqlx::query_scalar::<_, i64>(sql).fetch_all(&mut c).await?
            }
            Db::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.database_url).await?;
                sqlx::query_scalar::<_, i64>(sql).fetch_all(&mut c).await?
            }
        })
    }

    pub(crate) async fn count(&self, sql: &str) -> anyhow::Result<i64> {
        Ok(match self.db {
            Db::Postgres => {
                let mut c = sqlx::PgConnection::connect(&self.database_url).await?;
                sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(&mut c)
                    .await?
            }
            Db::Mysql => {
                let mut c = sqlx::MySqlConnection::connect(&self.database_url).await?;
                sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(&mut c)
                    .await?
            }
            Db::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&self.database_url).await?;
                sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(&mut c)
                    .await?
            }
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.nodes.clear();
        // Kept on request, for the nodes' logs.
        if std::env::var_os("CARILLON_BENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// How often the bench asks for one job before it gives up on `503`s.
const CREATE_TRIES: u32 = 10;

/// Jobs per bulk create request.
const BULK_JOBS: usize = 10_000;

/// A loopback port nobody listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Drops and creates the bench database on the machine's server (or a new SQLite file).
/// `url` with its port replaced by `port`: the same server's database, through a pooler on
/// the same host.
fn through_port(url: &str, port: u16) -> anyhow::Result<String> {
    let (scheme, rest) = url.split_once("://").context("a database URL")?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    Ok(format!("{scheme}://{host}:{port}/{path}"))
}

async fn fresh_database(db: Db, dir: &Path) -> anyhow::Result<String> {
    match db {
        Db::Sqlite => Ok(format!("sqlite://{}", dir.join("bench.db").display())),
        Db::Postgres => {
            let admin = "postgres://postgres@127.0.0.1:5432/postgres";
            let mut c = sqlx::PgConnection::connect(admin)
                .await
                .with_context(|| format!("connecting to {admin}"))?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"
            )))
            .execute(&mut c)
            .await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
                .execute(&mut c)
                .await?;
            Ok(format!("postgres://postgres@127.0.0.1:5432/{DATABASE}"))
        }
        Db::Mysql => {
            let admin = "mysql://root@127.0.0.1:3306/test";
            let mut c = sqlx::MySqlConnection::connect(admin)
                .await
                .with_context(|| format!("connecting to {admin}"))?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {DATABASE}"
            )))
            .execute(&mut c)
            .await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
                .execute(&mut c)
                .await?;
            Ok(format!("mysql://root@127.0.0.1:3306/{DATABASE}"))
        }
    }
}

/// Resident memory of a process, in bytes.
pub(crate) fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// CPU time a process has used (user + system), in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::parse_rfc3339_ms;

    #[test]
    fn the_instants_nodes_send_parse_back_to_their_milliseconds() {
        for ms in [0, 951_782_400_123, 1_795_000_000_999, 4_102_444_800_000] {
            let text = carillon_server::api::rfc3339(ms).unwrap_or_default();
            assert_eq!(parse_rfc3339_ms(&text), Some(ms), "{text}");
        }
        assert_eq!(parse_rfc3339_ms("2026-11-22T07:00:00+01:00"), None);
    }
}
