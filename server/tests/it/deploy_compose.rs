//! `compose.yaml` as a user runs it, with `docker-compose` (Debian's) and a real Docker engine:
//! PostgreSQL, three nodes and the demo executor, the images made from this build's binaries
//! (the `Dockerfile`'s prebuilt targets) and PostgreSQL from Debian's packages doing what the
//! official image does (`tests/docker/postgres/`), since no registry can be reached. Jobs of
//! the demo's handlers fire every second; the leader's container is killed; every job runs
//! every instant of the window once, and each run succeeds on the demo executor.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::docker::{self, Image, docker_ok};
use support::text;
use support::wait_for;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs docker-compose and a Docker engine (Debian's docker-compose and docker.io; .ci/run starts them)"]
async fn the_compose_cluster_fires_every_instant_once_through_a_kill() {
    let base = docker::base_image();
    let suffix = carillon_server::data_dir::random_hex(6).unwrap();
    let carillon = Path::new(env!("CARGO_BIN_EXE_carillon"));
    let demo = docker::built_binary("carillon-demo");
    let node_image = Image::prebuilt(
        &base,
        "prebuilt",
        &[(carillon, "carillon")],
        &format!("carillon-test:{suffix}"),
    );
    let demo_image = Image::prebuilt(
        &base,
        "prebuilt-demo",
        &[(carillon, "carillon"), (&demo, "carillon-demo")],
        &format!("carillon-test-demo:{suffix}"),
    );
    let postgres = postgres_image(&base);

    let ports: Vec<u16> = (0..3).map(|_| support::free_port()).collect();
    let project = Project {
        name: format!("carillon-test-{suffix}"),
        env: vec![
            ("CARILLON_IMAGE", node_image.0.clone()),
            ("CARILLON_DEMO_IMAGE", demo_image.0.clone()),
            ("CARILLON_POSTGRES_IMAGE", postgres),
            ("CARILLON_ADMIN_TOKEN", TOKEN.to_owned()),
            ("CARILLON_PORT_1", ports[0].to_string()),
            ("CARILLON_PORT_2", ports[1].to_string()),
            ("CARILLON_PORT_3", ports[2].to_string()),
        ],
    };
    project.ok(&["up", "-d", "--no-build"]);
    let api = Api::new(ports);

    let cluster = wait_for(
        Duration::from_secs(90),
        "three nodes and a leader",
        || async {
            let cluster = api.get(0, "/api/v1/cluster").await?;
            let live = cluster["nodes"]
                .as_array()?
                .iter()
                .filter(|n| n["alive"] == true)
                .count();
            (live == 3 && cluster["leader"].is_object()).then_some(cluster)
        },
    )
    .await;
    wait_for(Duration::from_secs(60), "the demo executor", || async {
        let executors = api.get(0, "/api/v1/executors").await?;
        executors["executors"]
            .as_array()?
            .iter()
            .any(|e| e["app"] == "demo")
            .then_some(())
    })
    .await;

    let mut jobs = Vec::new();
    for i in 0..JOBS {
        let (status, body) = api
            .send(
                i % 3,
                Method::POST,
                "/api/v1/jobs",
                json!({"name": format!("every-second-{i}"), "app": "demo", "handler": "hello",
                       "schedule": {"cron": "* * * * * *"}, "start": true}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        jobs.push(body["id"].as_i64().unwrap());
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let window_start = (now_ms() / 1_000 + 2) * 1_000;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let leader = cluster["leader"]["node_id"].as_str().unwrap().to_owned();
    project.ok(&["kill", &leader]);
    let reached = ["node-1", "node-2", "node-3"]
        .iter()
        .position(|n| *n != leader)
        .unwrap();
    wait_for(Duration::from_secs(30), "a new leader", || async {
        let cluster = api.get(reached, "/api/v1/cluster").await?;
        (cluster["leader"]["node_id"].as_str()? != leader).then_some(())
    })
    .await;
    let window_end = window_start + WINDOW_S * 1_000;
    tokio::time::sleep(Duration::from_millis(
        (window_end - now_ms()).max(0) as u64 + 3_000,
    ))
    .await;

    for job in jobs {
        let instants = wait_for(
            Duration::from_secs(30),
            "the window's runs to end",
            || async {
                let runs = api
                    .get(reached, &format!("/api/v1/runs?job_id={job}&limit=200"))
                    .await?;
                let mut instants = Vec::new();
                for run in runs["runs"].as_array()? {
                    let at = chrono::DateTime::parse_from_rfc3339(run["scheduled_at"].as_str()?)
                        .ok()?
                        .timestamp_millis();
                    if (window_start..=window_end).contains(&at) {
                        if run["state"] != "succeeded" {
                            return None;
                        }
                        instants.push(at);
                    }
                }
                Some(instants)
            },
        )
        .await;
        let mut distinct = instants.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            instants.len(),
            "job {job}: no instant twice"
        );
        assert_eq!(
            instants.len() as i64,
            WINDOW_S + 1,
            "job {job}: every instant of the window, succeeded: {distinct:?}"
        );
    }
}

const TOKEN: &str = "compose-test-admin-token-0123";
/// Jobs firing every second on the demo executor, and the window's length in seconds.
const JOBS: usize = 6;
const WINDOW_S: i64 = 12;

/// The PostgreSQL image of `tests/docker/postgres/`, built once per engine.
fn postgres_image(base: &str) -> String {
    let tag = "carillon-ci/postgres:15";
    if docker::docker(&["image", "inspect", tag]).status.success() {
        return tag.to_owned();
    }
    let context = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/docker/postgres");
    let base = format!("BASE={base}");
    docker_ok(&[
        "build",
        "-q",
        "--build-arg",
        &base,
        "-t",
        tag,
        context.to_str().unwrap(),
    ]);
    tag.to_owned()
}

/// The compose project, taken down with its volumes when dropped.
struct Project {
    name: String,
    env: Vec<(&'static str, String)>,
}

impl Project {
    fn run(&self, args: &[&str]) -> Output {
        let compose = Path::new(env!("CARGO_MANIFEST_DIR")).join("../compose.yaml");
        Command::new("docker-compose")
            .arg("-f")
            .arg(compose)
            .args(["-p", &self.name])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> Output {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "docker-compose {args:?}: {}{}",
            text(&output.stdout),
            text(&output.stderr)
        );
        output
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = self.run(&["logs", "--no-color", "--tail", "40"]);
            eprintln!("--- the project's logs ---\n{}", text(&logs.stdout));
        }
        let _ = self.run(&["down", "-v", "--timeout", "5"]);
    }
}

/// The nodes' published ports, with the admin token.
struct Api {
    ports: Vec<u16>,
    client: reqwest::Client,
}

impl Api {
    fn new(ports: Vec<u16>) -> Self {
        let client = carillon_tls::http_client_builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        Self { ports, client }
    }

    /// `GET path` of node `index`: its JSON when it answered 200.
    async fn get(&self, index: usize, path: &str) -> Option<Value> {
        let url = format!("http://127.0.0.1:{}{path}", self.ports[index]);
        let answer = self.client.get(url).bearer_auth(TOKEN).send().await.ok()?;
        if !answer.status().is_success() {
            return None;
        }
        answer.json().await.ok()
    }

    async fn send(&self, index: usize, method: Method, path: &str, body: Value) -> (u16, Value) {
        let url = format!("http://127.0.0.1:{}{path}", self.ports[index]);
        let answer = self
            .client
            .request(method, url)
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        (status, answer.json().await.unwrap_or(Value::Null))
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
