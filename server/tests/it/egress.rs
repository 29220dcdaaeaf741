//! The one egress guard, on a real node with the production default (`public` only): what
//! users write that the node then calls (an HTTP job's URL, a job's or a namespace's alert
//! webhook, an executor's address) cannot lead to this machine, its network or a cloud's
//! metadata service: an address literal is refused when it is written, a name when it is
//! called (by what it resolves to then), each with the same message. The node's own webhook,
//! the operator's, is not a user's and is called.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::time::Duration;

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::node::Solo;
use support::webhook::Receiver;

const EXECUTOR: &str = "egress-executor-token-0123";

async fn expect(
    node: &Solo,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    let (got, answer) = node.call_as(token, method.clone(), path, body).await;
    assert_eq!(got, status, "{method} {path}: {answer}");
    answer
}

fn refused_at(answer: &Value, field: &str) {
    assert_eq!(answer["field"], field, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("is outside egress.allowed_networks"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_a_user_writes_leads_the_node_inward() {
    let receiver = Receiver::start().await;
    let node = Solo::start(|spec| {
        spec.extra_env = vec![
            ("CARILLON_EGRESS_ALLOWED_NETWORKS", "public".to_owned()),
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR.to_owned()),
            ("CARILLON_ALERTS_WEBHOOK", receiver.url("/node")),
            ("CARILLON_NO_EXECUTOR_GRACE_MS", "300".to_owned()),
        ];
    })
    .await;
    let admin = support::node::TOKEN;
    let body = Some(json!({"name": "team-a"}));
    expect(&node, admin, Method::POST, "/api/v1/namespaces", body, 201).await;
    let made = expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/tokens?namespace=team-a",
        Some(json!({"name": "authors", "role": "editor"})),
        201,
    )
    .await;
    let editor = made["token"].as_str().unwrap();
    let port = receiver.url("").rsplit(':').next().unwrap().to_owned();
    let jobs = "/api/v1/jobs?namespace=team-a";
    let job = |name: &str, extra: Value| {
        let mut doc = json!({"name": name, "app": "nobody", "handler": "work",
            "schedule": {"manual": true}});
        for (key, value) in extra.as_object().unwrap() {
            doc[key] = value.clone();
        }
        Some(doc)
    };

    // 7. An editor's webhook or HTTP call at an address inward is refused as it is written.
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        "http://169.254.169.254/latest/meta-data/iam".to_owned(),
        "http://10.0.0.1/hook".to_owned(),
    ] {
        let doc = job("hooked", json!({"alerts": {"webhook": url}}));
        let refused = expect(&node, editor, Method::POST, jobs, doc, 400).await;
        refused_at(&refused, "alerts.webhook");
        let doc = Some(json!({"name": "caller", "http": {"url": url},
            "schedule": {"manual": true}}));
        let refused = expect(&node, editor, Method::POST, jobs, doc, 400).await;
        refused_at(&refused, "http.url");
    }
    let patch = Some(json!({"alert_webhook": format!("http://127.0.0.1:{port}/team")}));
    let path = "/api/v1/namespaces/team-a";
    let refused = expect(&node, admin, Method::PATCH, path, patch, 400).await;
    refused_at(&refused, "alert_webhook");

    // 9. An executor cannot have the nodes call this machine either.
    let registration = Some(json!({"protocol": 1, "executor_id": "inward", "app": "etl",
        "address": format!("http://127.0.0.1:{port}"), "weight": 1, "capacity": 4,
        "handlers": [{"name": "work"}]}));
    let register = "/api/v1/executors/register";
    let refused = expect(&node, EXECUTOR, Method::POST, register, registration, 400).await;
    refused_at(&refused, "address");

    // A name is judged when it is called: `localhost` is written, and never called.
    let by_name = format!("http://localhost:{port}/by-name");
    let doc = job("named", json!({"alerts": {"webhook": by_name}}));
    let named = expect(&node, editor, Method::POST, jobs, doc, 201).await;
    let tried = expect(
        &node,
        editor,
        Method::POST,
        "/api/v1/jobs/test-call?namespace=team-a",
        Some(json!({"http": {"url": format!("http://localhost:{port}/by-name")}})),
        200,
    )
    .await;
    assert_eq!(tried["succeeded"], false, "{tried}");
    assert!(
        tried["error"]
            .as_str()
            .unwrap()
            .contains("egress.allowed_networks"),
        "{tried}"
    );
    let trigger = format!("/api/v1/jobs/{}/trigger", named["id"]);
    expect(&node, editor, Method::POST, &trigger, None, 202).await;
    // The operator's own webhook hears of the run that found no executor; the job's does not.
    receiver
        .wait("/node", "the node's alert", |b| b["event"] == "run_failed")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        receiver.bodies("/by-name").is_empty(),
        "a user's webhook reached loopback by name"
    );
    assert!(receiver.bodies("/hook").is_empty() && receiver.bodies("/team").is_empty());
}
