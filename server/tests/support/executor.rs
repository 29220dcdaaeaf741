//! The example Python executor (`tests/executors/python_executor.py`, written from
//! `protocol/README.md`) as a child process.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::netns::NetHost;
use super::node::NodeProcess;

pub const EXECUTOR_TOKEN: &str = "executor-token-for-tests-0123";
pub const SECRET: &str = "dispatch-secret-for-tests-0123";

/// The settings a node needs for these executors.
pub fn node_env() -> Vec<(&'static str, String)> {
    vec![
        ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
        ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
        ("CARILLON_EXECUTOR_LEASE_MS", "1500".to_owned()),
        ("CARILLON_EXECUTOR_HEARTBEAT_MS", "300".to_owned()),
    ]
}

/// Waits (20 s at most) until `node` lists the executor `id`.
pub async fn wait_registered(node: &NodeProcess, id: &str) {
    super::wait_for(
        std::time::Duration::from_secs(20),
        &format!("executor {id} to register"),
        || async {
            let (_, list) = node
                .call(reqwest::Method::GET, "/api/v1/executors", None)
                .await;
            list["executors"]
                .as_array()
                .is_some_and(|all| all.iter().any(|e| e["id"] == id))
                .then_some(())
        },
    )
    .await;
}

pub struct Executor {
    pub id: String,
    pub port: u16,
    /// The address it listens on and registered.
    pub ip: Ipv4Addr,
    child: Child,
}

impl Executor {
    pub fn start(node: &NodeProcess, app: &str, id: &str, weight: u32, extra: &[&str]) -> Executor {
        Self::start_with_secret(node, app, id, weight, extra, SECRET)
    }

    pub fn start_with_secret(
        node: &NodeProcess,
        app: &str,
        id: &str,
        weight: u32,
        extra: &[&str],
        secret: &str,
    ) -> Executor {
        Self::spawn(None, node, app, id, weight, extra, secret)
    }

    /// One on test host `host`, listening on its address, registered with `node`.
    pub fn start_on(
        host: &NetHost,
        node: &NodeProcess,
        app: &str,
        id: &str,
        extra: &[&str],
    ) -> Executor {
        Self::spawn(Some(host), node, app, id, 1, extra, SECRET)
    }

    fn spawn(
        host: Option<&NetHost>,
        node: &NodeProcess,
        app: &str,
        id: &str,
        weight: u32,
        extra: &[&str],
        secret: &str,
    ) -> Executor {
        let script = format!(
            "{}/tests/executors/python_executor.py",
            env!("CARGO_MANIFEST_DIR")
        );
        let ip = host.map_or(Ipv4Addr::LOCALHOST, |host| host.ip);
        let mut command = host.map_or_else(|| Command::new("python3"), |h| h.command("python3"));
        let mut child = command
            .arg(script)
            .args(["--host", &ip.to_string()])
            .args([
                "--admin",
                &node.url(""),
                "--token",
                EXECUTOR_TOKEN,
                "--secret",
                secret,
            ])
            .args(["--app", app, "--id", id, "--weight", &weight.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the example executor");
        let stdout = child.stdout.take().expect("executor");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("executor");
        let port = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("executor said {line:?}"))
            .parse()
            .expect("executor");
        Executor {
            id: id.to_owned(),
            port,
            ip,
            child,
        }
    }

    /// Starts one with weight 1 and waits until `node` lists it among its executors.
    pub async fn start_registered(node: &NodeProcess, app: &str, id: &str) -> Executor {
        let executor = Self::start(node, app, id, 1, &[]);
        wait_registered(node, id).await;
        executor
    }

    /// Sends `signal` (`STOP`, `CONT`, …) to the executor process.
    pub fn signal(&self, signal: &str) {
        super::send_signal(self.child.id(), signal);
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub async fn log(&self) -> Vec<Value> {
        reqwest::get(format!("http://{}:{}/log", self.ip, self.port))
            .await
            .expect("executor")
            .json()
            .await
            .expect("executor")
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An executor address that takes dispatches and never answers them (an attempt stays offered
/// to it), keeping what it heard.
pub struct SilentExecutor {
    pub address: String,
    heard: std::sync::Arc<std::sync::Mutex<String>>,
}

impl SilentExecutor {
    pub async fn start() -> SilentExecutor {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = format!("http://{}", listener.local_addr().unwrap());
        let heard: std::sync::Arc<std::sync::Mutex<String>> = std::sync::Arc::default();
        let keep = std::sync::Arc::clone(&heard);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let keep = std::sync::Arc::clone(&keep);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = socket.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        keep.lock()
                            .unwrap()
                            .push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                });
            }
        });
        SilentExecutor { address, heard }
    }

    /// Everything sent to it so far.
    pub fn text(&self) -> String {
        self.heard.lock().unwrap().clone()
    }

    /// Whether it was offered run `run`.
    pub fn heard_run(&self, run: &Value) -> bool {
        self.offers_of(run) > 0
    }

    /// How many times it was offered run `run`.
    pub fn offers_of(&self, run: &Value) -> usize {
        self.text().matches(&format!("\"run_id\":{run}")).count()
    }

    /// Its registration as executor `id` of `app`, with one handler, `work`.
    pub fn registration(&self, app: &str, id: &str) -> Value {
        serde_json::json!({"protocol": 1, "executor_id": id, "app": app,
            "address": self.address, "weight": 1, "capacity": 4,
            "handlers": [{"name": "work"}]})
    }
}
