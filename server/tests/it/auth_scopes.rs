//! Who may do what: every `/api/v1` endpoint refuses a missing or wrong token (`401`); the
//! read-only token reads (and previews schedules) but cannot write (`403`); executor tokens
//! open only the executor endpoints, and an app token only for its own app's executors.
//! Service tokens and their roles: `roles.rs`.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use reqwest::{Method, StatusCode};
use serde_json::json;
use support::node::{Solo, TOKEN};

const READ_ONLY: &str = "read-only-token-0123456789";
const EXECUTOR: &str = "cluster-executor-token-0123";
const BILLING: &str = "billing-app-token-0123456789";

/// Every `/api/v1` operation of the node's OpenAPI document (which the router is built from),
/// with `1` for each path parameter, and what it needs (`x-carillon-permission`).
async fn endpoints(node: &Solo) -> Vec<(String, String, String)> {
    let (status, doc) = node.call(Method::GET, "/api/v1/openapi.json", None).await;
    assert_eq!(status, 200, "{doc}");
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/v1/") {
            continue;
        }
        let concrete = path.replace("{id}", "1");
        for (method, operation) in item.as_object().unwrap() {
            let need = operation["x-carillon-permission"]
                .as_str()
                .unwrap()
                .to_owned();
            all.push((method.to_uppercase(), concrete.clone(), need));
        }
    }
    all
}

const EXECUTOR_ENDPOINTS: [&str; 5] = [
    "/api/v1/executors/register",
    "/api/v1/executors/heartbeat",
    "/api/v1/executors/results",
    "/api/v1/executors/deregister",
    "/api/v1/executors/logs",
];

async fn status(
    node: &Solo,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> StatusCode {
    let mut request = carillon_tls::http_client()
        .unwrap()
        .request(method.parse::<Method>().unwrap(), node.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    if !response.status().is_success() && response.status() != StatusCode::NOT_FOUND {
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{method} {path}"
        );
    }
    response.status()
}

fn registration(app: &str, id: &str) -> serde_json::Value {
    json!({"protocol": 1, "executor_id": id, "app": app, "address": "http://127.0.0.1:1",
           "weight": 1, "capacity": 1, "handlers": []})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_token_opens_exactly_what_it_should() {
    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_READ_ONLY_TOKEN", READ_ONLY.to_owned()),
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR.to_owned()),
            ("CARILLON_APP_TOKENS", format!("billing={BILLING}")),
        ];
    })
    .await;

    let endpoints = endpoints(&node).await;
    assert!(endpoints.len() >= 27, "{endpoints:?}");
    for (method, path, need) in &endpoints {
        let (method, path) = (method.as_str(), path.as_str());
        assert_eq!(
            status(&node, method, path, None, None).await,
            StatusCode::UNAUTHORIZED,
            "{method} {path}"
        );
        let wrong = status(&node, method, path, Some("not-a-token-we-issued-00"), None).await;
        assert_eq!(wrong, StatusCode::UNAUTHORIZED, "{method} {path}");
        let executor = EXECUTOR_ENDPOINTS.contains(&path);
        let read_only = status(&node, method, path, Some(READ_ONLY), None).await;
        if ["signed-in", "viewer", "cluster-viewer"].contains(&need.as_str()) {
            assert_ne!(
                read_only,
                StatusCode::FORBIDDEN,
                "{method} {path}: the read-only token reads"
            );
            assert_ne!(read_only, StatusCode::UNAUTHORIZED, "{method} {path}");
        } else {
            assert_eq!(
                read_only,
                StatusCode::FORBIDDEN,
                "{method} {path}: the read-only token cannot write"
            );
        }
        // What changes anything needs more than a viewer (a token listing needs an admin).
        if method != "GET" && path != "/api/v1/schedules/preview" {
            assert!(
                !["signed-in", "viewer", "cluster-viewer"].contains(&need.as_str()),
                "{method} {path} changes something, yet needs only {need}"
            );
        }
        if !executor {
            for token in [EXECUTOR, BILLING] {
                assert_eq!(
                    status(&node, method, path, Some(token), None).await,
                    StatusCode::FORBIDDEN,
                    "{method} {path}"
                );
            }
        }
    }

    // An app token registers its own app's executors only, and acts only for them.
    let register = "/api/v1/executors/register";
    assert_eq!(
        status(
            &node,
            "POST",
            register,
            Some(BILLING),
            Some(registration("etl", "etl-1"))
        )
        .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status(
            &node,
            "POST",
            register,
            Some(BILLING),
            Some(registration("billing", "billing-1"))
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status(
            &node,
            "POST",
            register,
            Some(EXECUTOR),
            Some(registration("etl", "etl-1"))
        )
        .await,
        StatusCode::OK
    );
    let beat = |id: &str| json!({"executor_id": id, "in_flight": []});
    let heartbeat = "/api/v1/executors/heartbeat";
    assert_eq!(
        status(
            &node,
            "POST",
            heartbeat,
            Some(BILLING),
            Some(beat("billing-1"))
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(
        status(&node, "POST", heartbeat, Some(BILLING), Some(beat("etl-1"))).await,
        StatusCode::FORBIDDEN
    );
    let lines = |id: &str| json!({"executor_id": id, "attempts": []});
    let logs = "/api/v1/executors/logs";
    assert_eq!(
        status(&node, "POST", logs, Some(BILLING), Some(lines("billing-1"))).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&node, "POST", logs, Some(BILLING), Some(lines("etl-1"))).await,
        StatusCode::FORBIDDEN,
        "an app token ships logs for its own app's executors only"
    );
    let leave = json!({"executor_id": "etl-1"});
    assert_eq!(
        status(
            &node,
            "POST",
            "/api/v1/executors/deregister",
            Some(BILLING),
            Some(leave)
        )
        .await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        status(&node, "GET", "/api/v1/jobs", Some(TOKEN), None).await,
        StatusCode::OK,
        "the admin token opens everything"
    );
}

/// With `egress.allowed_networks`, an executor cannot point the nodes outside those networks:
/// an address literal or a name resolving outside them is refused at registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_register_only_addresses_in_the_allowed_networks() {
    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR.to_owned()),
            (
                "CARILLON_EGRESS_ALLOWED_NETWORKS",
                "10.0.0.0/8, fd00::/8".to_owned(),
            ),
        ];
    })
    .await;
    let register = node.url("/api/v1/executors/register");
    for address in [
        "http://127.0.0.1:9100",
        "http://localhost:9100",
        "http://[::1]:9100",
    ] {
        let mut body = registration("etl", "etl-outside");
        body["address"] = json!(address);
        let response = carillon_tls::http_client()
            .unwrap()
            .post(&register)
            .bearer_auth(EXECUTOR)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{address}");
        let problem: serde_json::Value = response.json().await.unwrap();
        let text = problem.to_string();
        assert!(
            text.contains("address") && text.contains("egress.allowed_networks"),
            "{address}: {text}"
        );
    }
    let mut inside = registration("etl", "etl-inside");
    inside["address"] = json!("http://10.9.8.7:9100");
    assert_eq!(
        status(
            &node,
            "POST",
            "/api/v1/executors/register",
            Some(EXECUTOR),
            Some(inside)
        )
        .await,
        StatusCode::OK
    );
    let (_, executors) = node.call(Method::GET, "/api/v1/executors", None).await;
    let ids: Vec<&str> = executors["executors"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str())
        .collect();
    assert_eq!(ids, ["etl-inside"], "nothing outside was stored");
}

/// Every secret a node holds, with the database password, is absent from everything it
/// answers (every documented `GET`, errors included) and from its whole debug log, whatever
/// work it did: registrations, dispatches refused, jobs, runs, bad tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_secret_or_database_password_leaks_into_answers_or_logs() {
    const SECRET: &str = "dispatch-secret-never-shown-0123";
    const PASSWORD: &str = "database-password-never-shown";
    // Postgres when it answers (trust authentication ignores the password), else SQLite.
    let database = support::db::TestDb::create(support::db::Engine::Postgres).await;
    let node = Solo::start(|spec| {
        if let Some(db) = &database {
            spec.database_url = db
                .url
                .replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1);
        }
        spec.extra_env = vec![
            ("CARILLON_READ_ONLY_TOKEN", READ_ONLY.to_owned()),
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR.to_owned()),
            ("CARILLON_APP_TOKENS", format!("billing={BILLING}")),
            ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
        ];
    })
    .await;
    let secrets = [TOKEN, READ_ONLY, EXECUTOR, BILLING, SECRET, PASSWORD];

    let mut answers = Vec::new();
    let post = |path: &'static str, token: &'static str, body: serde_json::Value| {
        let request = carillon_tls::http_client()
            .unwrap()
            .post(node.url(path))
            .bearer_auth(token)
            .json(&body)
            .send();
        async move { request.await.unwrap().text().await.unwrap() }
    };
    answers.push(
        post(
            "/api/v1/executors/register",
            BILLING,
            registration("billing", "b-1"),
        )
        .await,
    );
    answers.push(
        post(
            "/api/v1/executors/heartbeat",
            BILLING,
            json!({"executor_id": "b-1", "in_flight": []}),
        )
        .await,
    );
    answers.push(
        post(
            "/api/v1/jobs",
            TOKEN,
            json!({"name": "leak-check", "app": "billing", "handler": "report",
                   "schedule": {"every": "1s"}, "start": true}),
        )
        .await,
    );
    answers.push(post("/api/v1/jobs", "a-wrong-token-of-24-chars", json!({})).await);
    // A service token is answered once, when it is made, and never again: not in the
    // listing of tokens (which the walk below reads), not in the log after it is used.
    let (status, made) = node
        .call(
            Method::POST,
            "/api/v1/tokens",
            Some(json!({"name": "leak-check", "role": "operator"})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let service_token = made["token"].as_str().unwrap().to_owned();
    let used = carillon_tls::http_client()
        .unwrap()
        .get(node.url("/api/v1/jobs"))
        .bearer_auth(&service_token)
        .send()
        .await
        .unwrap();
    assert_eq!(used.status(), 200);
    answers.push(used.text().await.unwrap());
    // The job fires and its dispatch fails against the executor's unreachable address.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for (method, path, _) in endpoints(&node).await {
        if method != "GET" {
            continue;
        }
        let response = carillon_tls::http_client()
            .unwrap()
            .get(node.url(&path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        answers.push(response.text().await.unwrap());
    }
    for path in [
        "/api/v1/runs",
        "/api/v1/executors",
        "/api/v1/executors/b-1",
        "/api/v1/apps",
    ] {
        let (_, body) = node.call(Method::GET, path, None).await;
        answers.push(body.to_string());
    }
    let log = node.log_text();
    assert!(
        log.contains("executor registered"),
        "the node did the work:\n{log}"
    );
    if database.is_some() {
        assert!(
            log.contains("postgres:***@"),
            "the log names the database:\n{log}"
        );
    }
    for secret in secrets.iter().copied().chain([service_token.as_str()]) {
        for answer in &answers {
            assert!(
                !answer.contains(secret),
                "an answer holds a secret: {answer}"
            );
        }
        assert!(!log.contains(secret), "the log holds a secret:\n{log}");
    }
}
