//! `carillon` as a newcomer meets it: no configuration, SQLite in the data directory, a
//! generated admin token; and the command line's errors.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use support::node::{ClusterSnapshot, spawn_carillon, wait_for_listen_address};
use support::wait_for;

struct Fresh {
    home: tempfile::TempDir,
}

impl Fresh {
    fn new() -> Self {
        Self {
            home: tempfile::tempdir().expect("home"),
        }
    }

    fn data_dir(&self) -> std::path::PathBuf {
        self.home.path().join(".local/share/carillon")
    }

    fn log(&self, name: &str) -> std::path::PathBuf {
        self.home.path().join(name)
    }
}

async fn get(url: String, token: Option<&str>) -> reqwest::Response {
    let mut request = carillon_tls::http_client()
        .unwrap()
        .get(url)
        .timeout(Duration::from_secs(5));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_configuration_a_node_runs_alone_on_sqlite() {
    let fresh = Fresh::new();
    // Only the port is chosen, so the test cannot collide with a developer's node on 9001.
    let env = [("CARILLON_LISTEN", "127.0.0.1:0".to_owned())];
    let log = fresh.log("first.log");
    let mut child = spawn_carillon(&["server"], &env, fresh.home.path(), &log);
    let addr = wait_for_listen_address(&mut child, &log).await;
    let base = format!("http://{addr}");

    let data = fresh.data_dir();
    assert!(
        data.join("carillon.db").is_file(),
        "SQLite file in the data dir"
    );
    let token = std::fs::read_to_string(data.join("admin-token")).expect("generated token");
    let token = token.trim().to_owned();
    assert_eq!(token.len(), 64);
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text.contains("admin-token"),
        "the log says where the token is"
    );
    assert!(!log_text.contains(&token), "the log never shows the token");
    let node_id = std::fs::read_to_string(data.join("node-id")).expect("node id");

    assert_eq!(get(format!("{base}/healthz"), None).await.status(), 200);
    let settled: ClusterSnapshot = wait_for(Duration::from_secs(20), "the node to lead", || {
        let (base, token) = (base.clone(), token.clone());
        async move {
            let s: ClusterSnapshot = get(format!("{base}/api/v1/cluster"), Some(&token))
                .await
                .json()
                .await
                .ok()?;
            s.is_settled_on(&[s.this_node.node_id.as_str()])
                .then_some(s)
        }
    })
    .await;
    assert_eq!(settled.partition_count, 256);
    assert_eq!(settled.this_node.node_id, node_id.trim());
    let first_term = settled.leader.as_ref().expect("leader").term;
    let ready = get(format!("{base}/readyz"), None).await;
    assert_eq!(ready.status(), 200);

    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "graceful stop exits 0: {status}");

    // A restart keeps its identity and token, and leads again under a new term.
    let log = fresh.log("second.log");
    let mut child = spawn_carillon(&["server"], &env, fresh.home.path(), &log);
    let addr = wait_for_listen_address(&mut child, &log).await;
    let again: ClusterSnapshot =
        wait_for(Duration::from_secs(20), "the node to lead again", || {
            let token = token.clone();
            async move {
                let s: ClusterSnapshot = get(format!("http://{addr}/api/v1/cluster"), Some(&token))
                    .await
                    .json()
                    .await
                    .ok()?;
                s.leader.is_some().then_some(s)
            }
        })
        .await;
    assert_eq!(again.this_node.node_id, node_id.trim());
    assert!(again.leader.expect("leader").term > first_term);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_requires_the_admin_token_but_probes_do_not() {
    let fresh = Fresh::new();
    let token = "a-configured-admin-token-42";
    let env = [
        ("CARILLON_LISTEN", "127.0.0.1:0".to_owned()),
        ("CARILLON_ADMIN_TOKEN", token.to_owned()),
    ];
    let log = fresh.log("node.log");
    let mut child = spawn_carillon(&["server"], &env, fresh.home.path(), &log);
    let base = format!("http://{}", wait_for_listen_address(&mut child, &log).await);
    assert!(
        !fresh.data_dir().join("admin-token").exists(),
        "no token generated when one is set"
    );

    for (presented, path) in [
        (None, "/api/v1/cluster"),
        (Some("wrong-token-wrong-token-00"), "/api/v1/cluster"),
        (Some(""), "/api/v1/cluster"),
        (None, "/api/v1/no-such-thing"),
    ] {
        let response = get(format!("{base}{path}"), presented).await;
        assert_eq!(response.status(), 401, "{presented:?} on {path}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        let problem: serde_json::Value = response.json().await.expect("problem body");
        assert_eq!(problem["status"], 401);
        assert_eq!(problem["type"], "urn:carillon:problem:unauthorized");
    }
    assert_eq!(
        get(format!("{base}/api/v1/cluster"), Some(token))
            .await
            .status(),
        200
    );
    let missing = get(format!("{base}/api/v1/no-such-thing"), Some(token)).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(get(format!("{base}/healthz"), None).await.status(), 200);
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn migrate_applies_the_schema_and_exits() {
    let fresh = Fresh::new();
    let log = fresh.log("migrate.log");
    let status = spawn_carillon(&["migrate"], &[], fresh.home.path(), &log)
        .wait()
        .expect("wait");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(fresh.data_dir().join("carillon.db").is_file());
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("migrations applied")
    );
}

#[tokio::test]
async fn a_bad_setting_is_refused_with_its_name() {
    let fresh = Fresh::new();
    let cases: [(&[(&str, String)], &str); 3] = [
        (
            &[
                ("CARILLON_HEARTBEAT_MS", "1000".to_owned()),
                ("CARILLON_LEADER_LEASE_MS", "1500".to_owned()),
            ],
            "cluster.leader_lease_ms",
        ),
        (
            &[("CARILLON_ADMIN_TOKEN", "short".to_owned())],
            "auth.admin_token",
        ),
        (
            &[(
                "CARILLON_DATABASE_URL",
                "oracle://scott:tiger@db/orcl".to_owned(),
            )],
            "database.url",
        ),
    ];
    for (env, field) in cases {
        let log = fresh.log("bad.log");
        let mut env = env.to_vec();
        env.push(("CARILLON_LISTEN", "127.0.0.1:0".to_owned()));
        let status = spawn_carillon(&["server"], &env, fresh.home.path(), &log)
            .wait()
            .expect("wait");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!status.success(), "{field}: should fail");
        assert!(text.contains(field), "{field} not named in:\n{text}");
        assert!(!text.contains("tiger"), "a password leaked:\n{text}");
    }

    let file = fresh.home.path().join("carillon.toml");
    std::fs::write(&file, "[cluster]\nheartbeat = 3\n").expect("write config");
    let log = fresh.log("file.log");
    let args = ["--config", file.to_str().expect("utf-8 path"), "server"];
    let status = spawn_carillon(&args, &[], fresh.home.path(), &log)
        .wait()
        .expect("wait");
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success());
    assert!(
        text.contains("heartbeat") && text.contains("carillon.toml"),
        "{text}"
    );
}
