//! The example Python executor (`tests/executors/python_executor.py`, written from
//! `protocol/README.md`) as a child process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

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

pub struct Executor {
    pub id: String,
    pub port: u16,
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
        let script = format!(
            "{}/tests/executors/python_executor.py",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut child = Command::new("python3")
            .arg(script)
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
            child,
        }
    }

    /// Starts one with weight 1 and waits until `node` lists it among its executors.
    pub async fn start_registered(node: &NodeProcess, app: &str, id: &str) -> Executor {
        let executor = Self::start(node, app, id, 1, &[]);
        super::wait_for(
            std::time::Duration::from_secs(10),
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
        reqwest::get(format!("http://127.0.0.1:{}/log", self.port))
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
