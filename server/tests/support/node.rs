//! `carillon server` processes on loopback ports, and a client for their API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde::Deserialize;

use super::netns::NetHost;
use tokio::time::Instant;

pub const TOKEN: &str = "test-admin-token-0123456789";

/// How a test node is started.
#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub node_id: String,
    pub database_url: String,
    pub data_dir: PathBuf,
    pub partitions: u32,
    pub heartbeat_ms: u64,
    pub node_lease_ms: u64,
    pub leader_lease_ms: u64,
    pub misfire_threshold_ms: u64,
    /// More `CARILLON_*` settings.
    pub extra_env: Vec<(&'static str, String)>,
    /// The node serves HTTPS (with `CARILLON_HTTP_TLS_*` in `extra_env`), and the test's
    /// client trusts this CA.
    pub https_ca: Option<PathBuf>,
    /// Runs on this test host (`super::netns`), listening on its address.
    pub host: Option<NetHost>,
}

impl NodeSpec {
    /// Fast timings so failover tests take seconds: heartbeat 200 ms, leases 1 s.
    pub fn fast(node_id: &str, database_url: &str, data_dir: &Path) -> Self {
        Self {
            node_id: node_id.to_owned(),
            database_url: database_url.to_owned(),
            data_dir: data_dir.join(node_id),
            partitions: 24,
            heartbeat_ms: 200,
            node_lease_ms: 1_000,
            leader_lease_ms: 1_000,
            misfire_threshold_ms: 60_000,
            extra_env: Vec::new(),
            https_ca: None,
            host: None,
        }
    }
}

/// A single node on a fresh SQLite database, owning all its partitions; the database and data
/// directory live as long as it does.
#[derive(Debug)]
pub struct Solo {
    pub node: NodeProcess,
    pub db: crate::support::db::TestDb,
    _dir: tempfile::TempDir,
}

impl Solo {
    /// Starts it with `tune` applied to the fast defaults.
    pub async fn start(tune: impl FnOnce(&mut NodeSpec)) -> Solo {
        let db = crate::support::db::TestDb::create(crate::support::db::Engine::Sqlite)
            .await
            .expect("sqlite");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut spec = NodeSpec::fast("solo", &db.url, dir.path());
        tune(&mut spec);
        let node = NodeProcess::start(spec).await;
        crate::support::wait_for(
            Duration::from_secs(20),
            "the node to own its partitions",
            || async {
                node.cluster()
                    .await
                    .filter(|c| c.this_node.acting_partitions == 24)
            },
        )
        .await;
        Solo {
            node,
            db,
            _dir: dir,
        }
    }
}

impl std::ops::Deref for Solo {
    type Target = NodeProcess;

    fn deref(&self) -> &NodeProcess {
        &self.node
    }
}

/// A running `carillon server` child process; killed when dropped.
#[derive(Debug)]
pub struct NodeProcess {
    pub spec: NodeSpec,
    pub addr: SocketAddr,
    child: Child,
    log: PathBuf,
    client: reqwest::Client,
}

/// Starts `carillon` with `args` and `env`, its standard error going to `log`.
pub fn spawn_carillon(args: &[&str], env: &[(&str, String)], home: &Path, log: &Path) -> Child {
    spawn_carillon_on(None, args, env, home, log)
}

/// [`spawn_carillon`] inside test host `host`'s network namespace, if one is given.
pub fn spawn_carillon_on(
    host: Option<&NetHost>,
    args: &[&str],
    env: &[(&str, String)],
    home: &Path,
    log: &Path,
) -> Child {
    let log_file = std::fs::File::create(log).expect("log file");
    let program = env!("CARGO_BIN_EXE_carillon");
    let mut command = host.map_or_else(|| Command::new(program), |host| host.command(program));
    command.args(args);
    // Nothing from the developer's environment may change what the test sees.
    for (key, _) in std::env::vars() {
        if key.starts_with("CARILLON_") || key == "XDG_DATA_HOME" {
            command.env_remove(key);
        }
    }
    command
        .env("HOME", home)
        .env("CARILLON_LOG", "info,carillon_server=debug")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file);
    command.spawn().expect("spawn carillon")
}

/// Starts a node on `database_url` that must refuse to start; returns what it logged, once it
/// has stopped with a failure (the test fails if it runs on for 30 s, or stops with success).
pub async fn refused_start(database_url: &str) -> String {
    let home = tempfile::tempdir().expect("temp dir");
    let log = home.path().join("node.log");
    let env = [
        ("CARILLON_DATABASE_URL", database_url.to_owned()),
        ("CARILLON_DATA_DIR", home.path().display().to_string()),
        ("CARILLON_LISTEN", "127.0.0.1:0".to_owned()),
    ];
    let mut child = spawn_carillon(&["server"], &env, home.path(), &log);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("the node's status") {
            assert!(
                !status.success(),
                "the node stopped with success: {}",
                said()
            );
            return said();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the node kept running: {}", said());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the node logs the address it listens on.
pub async fn wait_for_listen_address(child: &mut Child, log: &Path) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        // Text logs say `address=…`; JSON logs `"address":"…"`.
        if let Some(addr) = text
            .lines()
            .filter(|l| l.contains("carillon node listening"))
            .find_map(|l| {
                l.split("address=")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .or_else(|| {
                        l.split("\"address\":\"")
                            .nth(1)
                            .and_then(|rest| rest.split('"').next())
                    })
            })
            .and_then(|a| a.parse().ok())
        {
            return addr;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("carillon exited with {status} before listening; its log:\n{text}");
        }
        if Instant::now() >= deadline {
            panic!("carillon did not start listening in time; its log:\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

impl NodeProcess {
    pub async fn start(spec: NodeSpec) -> NodeProcess {
        std::fs::create_dir_all(&spec.data_dir).expect("data dir");
        let log = spec.data_dir.join(format!(
            "node-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let listen = spec
            .host
            .as_ref()
            .map_or_else(|| "127.0.0.1:0".to_owned(), |host| format!("{}:0", host.ip));
        let mut env = vec![
            ("CARILLON_DATABASE_URL", spec.database_url.clone()),
            ("CARILLON_DATA_DIR", spec.data_dir.display().to_string()),
            ("CARILLON_LISTEN", listen),
            ("CARILLON_ADMIN_TOKEN", TOKEN.to_owned()),
            // Executors, webhooks and HTTP jobs of the tests listen on this machine and its
            // test hosts; a test of the egress guard sets its own.
            (
                "CARILLON_EGRESS_ALLOWED_NETWORKS",
                "public,loopback,private".to_owned(),
            ),
            ("CARILLON_NODE_ID", spec.node_id.clone()),
            ("CARILLON_PARTITIONS", spec.partitions.to_string()),
            ("CARILLON_HEARTBEAT_MS", spec.heartbeat_ms.to_string()),
            ("CARILLON_NODE_LEASE_MS", spec.node_lease_ms.to_string()),
            ("CARILLON_LEADER_LEASE_MS", spec.leader_lease_ms.to_string()),
            (
                "CARILLON_MISFIRE_THRESHOLD_MS",
                spec.misfire_threshold_ms.to_string(),
            ),
        ];
        env.extend(spec.extra_env.iter().cloned());
        let child = spawn_carillon_on(spec.host.as_ref(), &["server"], &env, &spec.data_dir, &log);
        Self::adopt(spec, child, log).await
    }

    /// A node started otherwise (as a packaged one, in a chroot) whose standard error goes
    /// to `log`: waits until it listens. `spec` says only its id and how to reach it.
    pub async fn adopt(spec: NodeSpec, mut child: Child, log: PathBuf) -> NodeProcess {
        let addr = wait_for_listen_address(&mut child, &log).await;
        let mut client = carillon_tls::http_client_builder();
        if let Some(ca) = &spec.https_ca {
            let pem = std::fs::read(ca).expect("the CA file");
            client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA"));
        }
        NodeProcess {
            spec,
            addr,
            child,
            log,
            client: client.build().expect("a client"),
        }
    }

    pub fn node_id(&self) -> &str {
        &self.spec.node_id
    }

    pub fn url(&self, path: &str) -> String {
        let scheme = if self.spec.https_ca.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}{path}", self.addr)
    }

    /// `kill -9`: no chance to leave the cluster.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the process.
    pub fn signal(&self, signal: &str) {
        super::send_signal(self.child.id(), signal);
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then waits for the process to exit.
    pub async fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "node did not stop:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `method path` with the admin token and an optional JSON body; returns the status
    /// and the JSON body (`Null` when there is none).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        self.call_as(TOKEN, method, path, body).await
    }

    /// [`Self::call`] with the bearer token `token`.
    pub async fn call_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let what = format!("{method} {path}");
        let mut request = self
            .client
            .request(method, self.url(path))
            .bearer_auth(token)
            .timeout(Duration::from_secs(10));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("{what}: reading the body: {e:?}"));
        let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        (status, json)
    }

    /// Sends a raw body (for oversized or malformed requests), on a connection of its own: the
    /// node may answer an oversized body before reading it and close the connection, which a
    /// pooled connection would then hand to the next call.
    pub async fn call_raw(&self, path: &str, body: Vec<u8>) -> (u16, serde_json::Value) {
        let response = carillon_tls::http_client()
            .unwrap()
            .post(self.url(path))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("request");
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("body");
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
        )
    }

    /// Registers an executor (a `Registration` as JSON) with the executor token `token`; one
    /// whose address answers nothing stands for an app's executors in tests that never run it.
    pub async fn register_executor(&self, token: &str, registration: serde_json::Value) {
        let response = self
            .client
            .post(self.url("/api/v1/executors/register"))
            .bearer_auth(token)
            .json(&registration)
            .send()
            .await
            .expect("registering an executor");
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        assert_eq!(status, 200, "registering {registration}: {body}");
    }

    /// `GET /api/v1/cluster` on this node; `None` if it does not answer.
    /// `/metrics` in the text format, read with the admin token.
    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the metrics")
    }

    pub async fn cluster(&self) -> Option<ClusterSnapshot> {
        let response = self
            .client
            .get(self.url("/api/v1/cluster"))
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.spec.node_id, self.log_text());
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct ClusterSnapshot {
    pub partition_count: usize,
    pub leader: Option<LeaderSnapshot>,
    pub nodes: Vec<NodeSnapshot>,
    pub this_node: ThisNodeSnapshot,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LeaderSnapshot {
    pub node_id: String,
    pub term: i64,
    pub lease_until: Option<String>,
    pub acquired_at: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NodeSnapshot {
    pub node_id: String,
    pub address: String,
    pub alive: bool,
    pub leader: bool,
    pub partitions: Vec<i64>,
    pub handing_off: Vec<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ThisNodeSnapshot {
    pub node_id: String,
    pub member: bool,
    pub leader_term: Option<i64>,
    pub acting_partitions: usize,
}

impl ClusterSnapshot {
    pub fn node(&self, node_id: &str) -> Option<&NodeSnapshot> {
        self.nodes.iter().find(|n| n.node_id == node_id)
    }

    /// True when exactly `live` are alive, one of them leads, every partition is owned by one of
    /// them with no hand-off pending, and the counts differ by at most one.
    pub fn is_settled_on(&self, live: &[&str]) -> bool {
        let Some(leader) = &self.leader else {
            return false;
        };
        let mut alive: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.alive)
            .map(|n| n.node_id.as_str())
            .collect();
        alive.sort();
        let mut expected = live.to_vec();
        expected.sort();
        if alive != expected || !live.contains(&leader.node_id.as_str()) {
            return false;
        }
        let counts: Vec<usize> = live
            .iter()
            .map(|id| self.node(id).map_or(0, |n| n.partitions.len()))
            .collect();
        let owned: usize = counts.iter().sum();
        let pending = self.nodes.iter().any(|n| !n.handing_off.is_empty());
        let (min, max) = (counts.iter().min(), counts.iter().max());
        owned == self.partition_count
            && !pending
            && matches!((min, max), (Some(lo), Some(hi)) if hi - lo <= 1)
    }

    /// Owner of every partition, indexed by partition id.
    pub fn owners(&self) -> Vec<Option<String>> {
        let mut owners = vec![None; self.partition_count];
        for node in &self.nodes {
            for p in &node.partitions {
                let slot = &mut owners[*p as usize];
                assert!(slot.is_none(), "partition {p} owned twice: {self:#?}");
                *slot = Some(node.node_id.clone());
            }
        }
        owners
    }
}

/// Milliseconds since the epoch of an RFC 3339 instant the API returned.
pub fn epoch_ms(instant: &Option<String>) -> i64 {
    let text = instant.as_deref().expect("instant present");
    chrono::DateTime::parse_from_rfc3339(text)
        .expect("RFC 3339")
        .timestamp_millis()
}
