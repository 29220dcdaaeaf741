//! The container image (`Dockerfile`) as an operator runs it: built by a real Docker engine
//! from a Debian base made of Debian's packages (`.ci/run` imports it; no registry is needed),
//! with this build's binary (the `prebuilt` target: the `image` target compiles the same
//! binary in a Rust image); it runs as uid 10001 on a read-only root file system, and its
//! health check turns healthy. Three node containers on PostgreSQL fire jobs while one of them
//! is killed (`docker kill` of the leader's): every job runs every instant of the window exactly once.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::TestDb;
use support::docker::{self, Image, docker, docker_ok};
use support::executor::{EXECUTOR_TOKEN, Executor, SECRET};
use support::node::{NodeProcess, NodeSpec, TOKEN};
use support::text;
use support::wait_for;

for_engine!(
    postgres,
    Postgres,
    ignore = "needs a Docker engine (Debian's docker.io) and the Debian base image (.ci/run starts and imports them)",
    [three_node_containers_fire_every_instant_once_through_a_kill]
);

/// Jobs firing every second with no executor (their runs are counted), and the window's
/// length in seconds.
const JOBS: usize = 60;
const WINDOW_S: i64 = 12;

async fn three_node_containers_fire_every_instant_once_through_a_kill(db: TestDb) {
    let base = docker::base_image();
    let scratch = tempfile::tempdir().unwrap();
    let suffix = carillon_server::data_dir::random_hex(6).unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_carillon"));
    let image = Image::prebuilt(
        &base,
        "prebuilt",
        &[(binary, "carillon")],
        &format!("carillon-test:{suffix}"),
    );

    // What the image says of itself.
    let config: Value = serde_json::from_slice(
        &docker_ok(&["image", "inspect", "--format", "{{json .Config}}", &image.0]).stdout,
    )
    .unwrap();
    assert_eq!(config["User"], "10001:10001", "{config}");
    assert_eq!(
        config["Healthcheck"]["Test"],
        json!(["CMD", "/usr/bin/carillon", "ready"]),
        "{config}"
    );
    assert!(
        config["Volumes"]["/var/lib/carillon"].is_object(),
        "{config}"
    );

    let mut nodes = Vec::new();
    let mut containers = Containers(Vec::new());
    for id in ["n1", "n2", "n3"] {
        let name = format!("carillon-test-{suffix}-{id}");
        containers.0.push(name.clone());
        nodes.push(start_node(&image, &name, id, &db, scratch.path()).await);
    }
    for name in &containers.0 {
        wait_for(
            Duration::from_secs(60),
            "the health check to pass",
            || async {
                let status = docker_ok(&["inspect", "--format", "{{.State.Health.Status}}", name]);
                (text(&status.stdout).trim() == "healthy").then_some(())
            },
        )
        .await;
    }
    let n1 = &containers.0[0];
    assert_eq!(
        text(&docker_ok(&["exec", n1, "id", "-u"]).stdout).trim(),
        "10001"
    );
    // /tmp is anyone's to write to, but for a read-only root.
    let wrote = docker(&["exec", n1, "touch", "/tmp/written"]);
    assert!(!wrote.status.success(), "the root file system is read-only");
    assert!(
        text(&wrote.stderr).contains("Read-only file system"),
        "{}",
        text(&wrote.stderr)
    );
    let before = wait_for(Duration::from_secs(30), "a settled cluster", || async {
        nodes[0]
            .cluster()
            .await
            .filter(|s| s.is_settled_on(&["n1", "n2", "n3"]))
    })
    .await;

    // The leader is the node killed; the executor reports to another.
    let leader = before.leader.as_ref().unwrap().node_id.clone();
    let victim = leader[1..].parse::<usize>().unwrap() - 1;
    let reached = (victim + 1) % 3;

    // A job an executor runs, and jobs whose runs are only counted.
    let _executor = Executor::start_registered(&nodes[reached], "py", "py-1").await;
    let (status, echo) = nodes[reached]
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "echo", "app": "py", "handler": "echo",
                        "schedule": {"cron": "* * * * * *"}, "start": true})),
        )
        .await;
    assert_eq!(status, 201, "{echo}");
    for i in 0..JOBS {
        let (status, body) = nodes[i % 3]
            .call(
                Method::POST,
                "/api/v1/jobs",
                Some(
                    json!({"name": format!("tick-{i}"), "app": "billing", "handler": "tick",
                            "schedule": {"cron": "* * * * * *"}, "start": true}),
                ),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let window_start = (db_now(&db).await / 1_000 + 1) * 1_000;
    tokio::time::sleep(Duration::from_secs(4)).await;
    docker_ok(&["kill", &containers.0[victim]]);
    let survivors: Vec<&str> = ["n1", "n2", "n3"]
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, id)| id)
        .collect();
    wait_for(
        Duration::from_secs(30),
        "the survivors to take over",
        || async {
            nodes[reached]
                .cluster()
                .await
                .filter(|s| s.is_settled_on(&survivors))
        },
    )
    .await;

    let window_end = window_start + WINDOW_S * 1_000;
    db.wait_fired_past(window_end).await;
    let per_job = db.runs_per_job(window_start, window_end).await;
    let wrong: Vec<_> = per_job.iter().filter(|(_, n)| *n != WINDOW_S + 1).collect();
    assert_eq!(per_job.len(), JOBS + 1, "every job ran in the window");
    assert!(
        wrong.is_empty(),
        "jobs with missing or extra runs: {wrong:?}"
    );
    let echo = echo["id"].as_i64().unwrap();
    let succeeded = db
        .fetch_pairs(
            "SELECT COUNT(*), COUNT(*) FROM runs WHERE job_id = ? AND state = 'succeeded'",
            &[echo],
        )
        .await[0]
        .0;
    assert!(succeeded > 0, "the executor's job succeeded");
    drop(nodes);
}

/// Containers removed when dropped, whatever the test's outcome.
struct Containers(Vec<String>);

impl Drop for Containers {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = docker(&["rm", "-f", name]);
        }
    }
}

/// A node container on the host's network (the database and the executor are the host's),
/// attached: its log is the client's standard error.
async fn start_node(
    image: &Image,
    name: &str,
    id: &str,
    db: &TestDb,
    scratch: &Path,
) -> NodeProcess {
    let port = support::free_port();
    let mut env = vec![
        ("CARILLON_DATABASE_URL", db.url.clone()),
        ("CARILLON_LISTEN", format!("127.0.0.1:{port}")),
        ("CARILLON_NODE_ID", id.to_owned()),
        ("CARILLON_ADMIN_TOKEN", TOKEN.to_owned()),
        ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
        ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
        ("CARILLON_PARTITIONS", "64".to_owned()),
        ("CARILLON_HEARTBEAT_MS", "200".to_owned()),
        ("CARILLON_NODE_LEASE_MS", "1000".to_owned()),
        ("CARILLON_LEADER_LEASE_MS", "1000".to_owned()),
        // The executor is the host's, on loopback (a server's default refuses it).
        (
            "CARILLON_EGRESS_ALLOWED_NETWORKS",
            "public,loopback".to_owned(),
        ),
    ];
    env.extend(
        support::executor::node_env()
            .into_iter()
            .filter(|(key, _)| key.ends_with("_MS")),
    );
    let mut run = Command::new("docker");
    run.args([
        "run",
        "--rm",
        "--name",
        name,
        "--network",
        "host",
        "--read-only",
    ])
    .args(["--tmpfs", "/var/lib/carillon:uid=10001,gid=10001,mode=0750"])
    .args(["--health-interval", "2s"]);
    for (key, value) in &env {
        run.arg("-e").arg(format!("{key}={value}"));
    }
    let log = scratch.join(format!("{id}.log"));
    let child = run
        .arg(&image.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    NodeProcess::adopt(NodeSpec::fast(id, &db.url, scratch), child, log).await
}

async fn db_now(db: &TestDb) -> i64 {
    db.fetch_pairs("SELECT COUNT(*), MAX(heartbeat_at_ms) FROM nodes", &[])
        .await[0]
        .1
}
