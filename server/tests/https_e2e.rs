//! HTTPS end to end, with certificates made by the test: a node serving its API over HTTPS
//! dispatches to a Rust SDK executor that serves HTTPS and requires the node's client
//! certificate; the CLI reaches the node with `--ca-file`. A node that does not trust the
//! executor's CA, or that presents no client certificate where one is required, fails the
//! attempt saying TLS failed, instead of waiting for ever.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::time::Duration;

use carillon_executor::{Executor, JobContext, JobError, job};
use reqwest::Method;
use serde_json::{Value, json};
use support::node::{NodeProcess, Solo, TOKEN};
use support::pki::TestPki;
use support::wait_for;
use tokio_util::sync::CancellationToken;

const EXECUTOR_TOKEN: &str = "https-executor-token-0123456789";
const SECRET: &str = "https-dispatch-secret-0123456789";

#[job(name = "secure")]
async fn secure(ctx: JobContext) -> Result<Value, JobError> {
    Ok(json!({ "over": "https", "run": ctx.run_id() }))
}

fn path(p: std::path::PathBuf) -> String {
    p.display().to_string()
}

/// A Rust SDK executor of `app` serving HTTPS with the test's server certificate, requiring
/// a client certificate from the test CA when `mtls`, until `stop`.
async fn https_executor(
    node: &NodeProcess,
    pki: &TestPki,
    app: &str,
    mtls: bool,
    stop: CancellationToken,
) {
    let mut builder = Executor::builder()
        .app(app)
        .admin_urls([node.url("")])
        .executor_token(EXECUTOR_TOKEN)
        .dispatch_secret(SECRET)
        .executor_id(format!("{app}-1"))
        .tls(pki.server_cert(), pki.server_key())
        .admin_ca(pki.ca());
    if mtls {
        builder = builder.require_client_certificate(pki.ca());
    }
    let executor = builder.build().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    tokio::spawn(executor.run_with_listener(listener, async move { stop.cancelled().await }));
    wait_for(
        Duration::from_secs(20),
        "the executor's registration",
        || async {
            let (status, body) = node.call(Method::GET, "/api/v1/executors", None).await;
            (status == 200
                && body["executors"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|e| e["app"] == app)))
            .then_some(())
        },
    )
    .await;
}

/// Triggers a run of a new job of `app` and waits for it to end; the run with its attempts.
async fn run_once(node: &NodeProcess, app: &str) -> Value {
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": format!("{app}-job"), "app": app, "handler": "secure",
                "schedule": {"every": "1h"}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let (status, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", job["id"]),
            None,
        )
        .await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_i64().unwrap();
    wait_for(Duration::from_secs(30), "the run to end", || async {
        let (_, run) = node
            .call(Method::GET, &format!("/api/v1/runs/{id}"), None)
            .await;
        run["finished_at"].is_string().then_some(run)
    })
    .await
}

fn base_env(pki: &TestPki) -> Vec<(&'static str, String)> {
    vec![
        ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
        ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
        ("CARILLON_HTTP_TLS_CERT", path(pki.server_cert())),
        ("CARILLON_HTTP_TLS_KEY", path(pki.server_key())),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_over_https_runs_jobs_on_an_executor_that_requires_its_client_certificate() {
    let pki = TestPki::new();
    let node = Solo::start(|spec| {
        spec.https_ca = Some(pki.ca());
        spec.extra_env = base_env(&pki);
        spec.extra_env.extend([
            ("CARILLON_DISPATCH_TLS_CA", path(pki.ca())),
            ("CARILLON_DISPATCH_TLS_CLIENT_CERT", path(pki.client_cert())),
            ("CARILLON_DISPATCH_TLS_CLIENT_KEY", path(pki.client_key())),
        ]);
    })
    .await;
    assert!(node.url("").starts_with("https://"));
    let stop = CancellationToken::new();
    https_executor(&node, &pki, "vault", true, stop.clone()).await;
    let (_, executors) = node.call(Method::GET, "/api/v1/executors", None).await;
    assert!(
        executors["executors"][0]["address"]
            .as_str()
            .unwrap()
            .starts_with("https://127.0.0.1:"),
        "{executors}"
    );

    let run = run_once(&node, "vault").await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["attempts"][0]["output"]["over"], "https", "{run}");

    // The CLI trusts the node with --ca-file, and says why without it.
    let cli = |ca: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_carillon"));
        command
            .args(["cluster", "-o", "json"])
            .env("CARILLON_URL", node.url(""))
            .env("CARILLON_TOKEN", TOKEN)
            .env_remove("CARILLON_CA_FILE");
        if let Some(ca) = ca {
            command.args(["--ca-file", ca]);
        }
        command.output().unwrap()
    };
    let trusted = cli(Some(&path(pki.ca())));
    assert!(trusted.status.success(), "{trusted:?}");
    let untrusted = cli(None);
    let said = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success());
    assert!(
        said.contains("certificate") || said.contains("UnknownIssuer"),
        "{said}"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_complete_tls_with_an_executor_fails_the_attempt_saying_so() {
    let pki = TestPki::new();
    // Trusts the system's roots only: not the test CA the executor's certificate comes from.
    let untrusting = Solo::start(|spec| {
        spec.https_ca = Some(pki.ca());
        spec.extra_env = base_env(&pki);
    })
    .await;
    let stop = CancellationToken::new();
    https_executor(&untrusting, &pki, "stranger", false, stop.clone()).await;
    let run = run_once(&untrusting, "stranger").await;
    assert_eq!(run["state"], "failed", "{run}");
    let error = run["attempts"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("TLS with the executor failed") && error.contains("certificate"),
        "{run}"
    );

    // Trusts the CA but has no client certificate for an executor that requires one.
    let anonymous = Solo::start(|spec| {
        spec.https_ca = Some(pki.ca());
        spec.extra_env = base_env(&pki);
        spec.extra_env
            .push(("CARILLON_DISPATCH_TLS_CA", path(pki.ca())));
    })
    .await;
    https_executor(&anonymous, &pki, "guarded", true, stop.clone()).await;
    let run = run_once(&anonymous, "guarded").await;
    assert_eq!(run["state"], "failed", "{run}");
    let error = run["attempts"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("TLS with the executor failed"), "{run}");
    stop.cancel();
}
