//! The executor protocol's boundary, on a real node, walked from another team's side: an
//! executor belongs to the token that registered it (another token, of another namespace or
//! of the same one, cannot register it again, move it, beat, report or deregister for it,
//! until the cluster's admin removes it); a result or a log line is taken only with the
//! handle its attempt's dispatch carried, never for a sequential id alone; and every refusal
//! is in the audit trail under the actor's own name, in the namespace of what it aimed at.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::time::Duration;

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::executor::SilentExecutor;
use support::node::{NodeProcess, NodeSpec};

for_engine!(
    postgres,
    Postgres,
    [an_executor_acts_only_for_itself_and_only_on_attempts_it_was_handed]
);
for_engine!(
    sqlite,
    Sqlite,
    [an_executor_acts_only_for_itself_and_only_on_attempts_it_was_handed]
);

const CLUSTER_EXECUTOR: &str = "cluster-executor-token-0123";

async fn expect(
    node: &NodeProcess,
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

/// An executor token of `namespace`, named `name`.
async fn executor_token(node: &NodeProcess, namespace: &str, name: &str) -> String {
    let made = expect(
        node,
        support::node::TOKEN,
        Method::POST,
        &format!("/api/v1/tokens?namespace={namespace}"),
        Some(json!({"name": name, "role": "executor"})),
        201,
    )
    .await;
    made["token"].as_str().unwrap().to_owned()
}

/// Asserts a refusal's answer says nothing of team-b's app, namespace or token.
fn tells_nothing_of_team_b(answer: &Value) {
    let text = answer.to_string();
    for secret in ["bapp", "team-b", "b-runners", "token #"] {
        assert!(!text.contains(secret), "{secret:?} told: {text}");
    }
}

async fn an_executor_acts_only_for_itself_and_only_on_attempts_it_was_handed(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env
        .push(("CARILLON_EXECUTOR_TOKEN", CLUSTER_EXECUTOR.to_owned()));
    let node = NodeProcess::start(spec).await;
    let admin = support::node::TOKEN;
    for name in ["team-a", "team-b"] {
        let body = Some(json!({"name": name}));
        expect(&node, admin, Method::POST, "/api/v1/namespaces", body, 201).await;
    }
    let team_a = executor_token(&node, "team-a", "a-runners").await;
    let team_b = executor_token(&node, "team-b", "b-runners").await;
    let team_b_too = executor_token(&node, "team-b", "b-spare").await;
    let (a, b, s) = (
        SilentExecutor::start().await,
        SilentExecutor::start().await,
        SilentExecutor::start().await,
    );
    let register = "/api/v1/executors/register";
    let post = Method::POST;
    let body = Some(b.registration("bapp", "exec-b-1"));
    expect(&node, &team_b, post.clone(), register, body, 200).await;
    let body = Some(a.registration("aapp", "exec-a-1"));
    expect(&node, &team_a, post.clone(), register, body, 200).await;
    let body = Some(s.registration("shared", "s-1"));
    expect(&node, CLUSTER_EXECUTOR, post.clone(), register, body, 200).await;

    // 1. Nobody takes over an executor another token registered: not another team's token,
    // not another token of its own team, not the cluster's executor token.
    for (token, id) in [
        (team_a.as_str(), "exec-b-1"),
        (team_b_too.as_str(), "exec-b-1"),
        (CLUSTER_EXECUTOR, "exec-b-1"),
        (team_a.as_str(), "s-1"),
    ] {
        let body = Some(a.registration("aapp", id));
        let refused = expect(&node, token, post.clone(), register, body, 403).await;
        assert!(
            refused["detail"].as_str().unwrap().contains(id),
            "{refused}"
        );
        tells_nothing_of_team_b(&refused);
        let leave = Some(json!({"executor_id": id}));
        let path = "/api/v1/executors/deregister";
        let refused = expect(&node, token, post.clone(), path, leave, 403).await;
        tells_nothing_of_team_b(&refused);
        let beat = Some(json!({"executor_id": id, "in_flight": []}));
        let path = "/api/v1/executors/heartbeat";
        expect(&node, token, post.clone(), path, beat, 403).await;
    }
    let path = "/api/v1/executors/exec-b-1";
    let kept = expect(&node, admin, Method::GET, path, None, 200).await;
    assert_eq!(kept["app"], "bapp", "{kept}");
    assert_eq!(kept["address"], b.address, "{kept}");
    assert_eq!(kept["namespace"], "team-b", "{kept}");
    assert!(
        kept["registered_by"]
            .as_str()
            .unwrap()
            .starts_with("service token #"),
        "{kept}"
    );
    // Its own token registers it again, as an executor restarting does.
    let body = Some(b.registration("bapp", "exec-b-1"));
    expect(&node, &team_b, post.clone(), register, body, 200).await;

    // 4. The refusal is in team-b's trail, naming team-a's token; the registration in
    // team-a's, naming it too.
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?namespace=team-b&operation=registerExecutor",
        None,
        200,
    )
    .await;
    let events = trail["events"].as_array().unwrap();
    let refused = events
        .iter()
        .find(|e| e["outcome"] == "refused" && e["actor"].as_str().unwrap().contains("a-runners"))
        .unwrap_or_else(|| panic!("no refusal of team-a's token in team-b's trail: {trail}"));
    assert!(
        refused["detail"].as_str().unwrap().contains("exec-b-1"),
        "{refused}"
    );
    assert!(
        events.iter().any(|e| e["outcome"] == "ok"
            && e["actor"]
                .as_str()
                .unwrap()
                .starts_with("executor token b-runners (#")),
        "{trail}"
    );
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?namespace=team-a&operation=registerExecutor",
        None,
        200,
    )
    .await;
    assert!(
        trail["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["outcome"] == "ok"
                && e["actor"]
                    .as_str()
                    .unwrap()
                    .starts_with("executor token a-runners (#")),
        "{trail}"
    );

    // 2 and 3. A run of team-b's, offered to its silent executor: its attempt's id is no
    // secret, its handle is.
    let job = expect(
        &node,
        admin,
        post.clone(),
        "/api/v1/jobs?namespace=team-b",
        Some(json!({"name": "ledger", "app": "bapp", "handler": "work",
            "schedule": {"manual": true}})),
        201,
    )
    .await;
    let run = expect(
        &node,
        admin,
        post.clone(),
        &format!("/api/v1/jobs/{}/trigger", job["id"]),
        None,
        202,
    )
    .await;
    let handle = support::wait_for(Duration::from_secs(20), "the run offered", || async {
        let beat = Some(json!({"executor_id": "exec-b-1", "in_flight": []}));
        let path = "/api/v1/executors/heartbeat";
        node.call_as(&team_b, post.clone(), path, beat).await;
        let heard = b.text();
        let at = heard.find("\"handle\":\"")? + "\"handle\":\"".len();
        Some(heard[at..at + 22].to_owned())
    })
    .await;
    let run_path = format!("/api/v1/runs/{}", run["id"]);
    let detail = expect(&node, admin, Method::GET, &run_path, None, 200).await;
    let attempt = detail["attempts"][0]["id"].as_i64().unwrap();
    let results = "/api/v1/executors/results";
    let forged = |executor: &str, handle: Option<&str>| {
        let mut body = json!({"executor_id": executor, "attempt_id": attempt,
            "outcome": "succeeded", "output": {"forged": true}});
        if let Some(handle) = handle {
            body["handle"] = json!(handle);
        }
        Some(body)
    };
    let wrong = "AAAAAAAAAAAAAAAAAAAAAA";
    for (token, executor, quoted, status) in [
        (team_a.as_str(), "exec-a-1", None, 403),
        (team_a.as_str(), "exec-a-1", Some(wrong), 403),
        (team_a.as_str(), "exec-b-1", Some(wrong), 403),
        (team_b_too.as_str(), "exec-b-1", Some(handle.as_str()), 403),
        (team_b.as_str(), "exec-b-1", None, 403),
        (team_b.as_str(), "exec-b-1", Some(wrong), 403),
    ] {
        let refused = expect(
            &node,
            token,
            post.clone(),
            results,
            forged(executor, quoted),
            status,
        )
        .await;
        tells_nothing_of_team_b(&refused);
    }
    let logs = "/api/v1/executors/logs";
    let lines = |executor: &str, handle: Option<&str>| {
        let mut attempt = json!({"attempt_id": attempt, "lines": [
            {"line": 1, "at_ms": 0, "level": "INFO", "message": "written by someone"}]});
        if let Some(handle) = handle {
            attempt["handle"] = json!(handle);
        }
        Some(json!({"executor_id": executor, "attempts": [attempt]}))
    };
    let stored = expect(
        &node,
        &team_a,
        post.clone(),
        logs,
        lines("exec-a-1", None),
        200,
    )
    .await;
    assert_eq!(stored["refused"], json!([attempt]), "{stored}");
    let stored = expect(
        &node,
        &team_a,
        post.clone(),
        logs,
        lines("exec-a-1", Some(wrong)),
        200,
    )
    .await;
    assert_eq!(stored["refused"], json!([attempt]), "{stored}");
    expect(
        &node,
        &team_a,
        post.clone(),
        logs,
        lines("exec-b-1", Some(&handle)),
        403,
    )
    .await;
    let log_path = format!("{run_path}/logs?attempt={attempt}");
    let page = expect(&node, admin, Method::GET, &log_path, None, 200).await;
    assert_eq!(
        page["lines"],
        json!([]),
        "a line written by another: {page}"
    );
    let detail = expect(&node, admin, Method::GET, &run_path, None, 200).await;
    assert_ne!(
        detail["state"], "succeeded",
        "a forged result was taken: {detail}"
    );
    // Refused results and lines are recorded too, though the protocol's traffic is not.
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?namespace=default&operation=reportResult",
        None,
        200,
    )
    .await;
    assert!(
        trail["events"].as_array().unwrap().is_empty(),
        "team-a's tries are in default's trail: {trail}"
    );
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?namespace=team-a&operation=reportResult",
        None,
        200,
    )
    .await;
    let tries = trail["events"].as_array().unwrap();
    assert!(
        tries.len() >= 2
            && tries
                .iter()
                .all(|e| e["outcome"] == "refused"
                    && e["actor"].as_str().unwrap().contains("a-runners")),
        "{trail}"
    );

    // Its own executor, quoting the handle, writes the log and ends the attempt.
    let stored = expect(
        &node,
        &team_b,
        post.clone(),
        logs,
        lines("exec-b-1", Some(&handle)),
        200,
    )
    .await;
    assert_eq!(stored["stored"], 1, "{stored}");
    let body = Some(json!({"executor_id": "exec-b-1", "attempt_id": attempt,
        "handle": handle, "outcome": "succeeded", "output": {"rows": 3}}));
    expect(&node, &team_b, post.clone(), results, body, 200).await;
    let detail = expect(&node, admin, Method::GET, &run_path, None, 200).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(
        detail["attempts"][0]["output"],
        json!({"rows": 3}),
        "{detail}"
    );

    // The cluster's admin removes an executor: its id is free for another token.
    expect(
        &node,
        admin,
        Method::DELETE,
        "/api/v1/executors/exec-b-1",
        None,
        204,
    )
    .await;
    let body = Some(a.registration("aapp", "exec-b-1"));
    expect(&node, &team_a, post.clone(), register, body, 200).await;
    let moved = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/executors/exec-b-1",
        None,
        200,
    )
    .await;
    assert_eq!(moved["namespace"], "team-a", "{moved}");
}
