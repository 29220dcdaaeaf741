//! Executors of a namespace, through a real node on every backend: a namespace's executor
//! token registers apps into its namespace and acts for their executors only; a job's work
//! goes to executors of its own namespace's apps or of `default`'s, never another's, and work
//! with only another namespace's executors ends saying so. A job naming another namespace's
//! app is refused once that app is known, and a namespace's people see the apps serving it.
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
    [executor_tokens_serve_their_namespaces_apps_only]
);
for_engine!(
    mysql,
    Mysql,
    [executor_tokens_serve_their_namespaces_apps_only]
);
for_engine!(
    sqlite,
    Sqlite,
    [executor_tokens_serve_their_namespaces_apps_only]
);

/// `call`, expecting `status`; the body.
async fn expect(
    node: &NodeProcess,
    method: Method,
    path: &str,
    body: Option<Value>,
    status: u16,
) -> Value {
    let (got, answer) = node.call(method.clone(), path, body).await;
    assert_eq!(got, status, "{method} {path}: {answer}");
    answer
}

const CLUSTER_EXECUTOR: &str = "cluster-executor-token-0123";

/// A namespace's executor token registers apps into its namespace and acts for their
/// executors only; another namespace's executors never get its jobs' work, while the apps of
/// `default` (the cluster's executor token) serve every namespace.
async fn executor_tokens_serve_their_namespaces_apps_only(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env
        .push(("CARILLON_EXECUTOR_TOKEN", CLUSTER_EXECUTOR.to_owned()));
    spec.extra_env
        .push(("CARILLON_NO_EXECUTOR_GRACE_MS", "500".to_owned()));
    let node = NodeProcess::start(spec).await;
    let mut executor_tokens = Vec::new();
    for name in ["team-a", "team-b"] {
        expect(
            &node,
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": name})),
            201,
        )
        .await;
        let made = expect(
            &node,
            Method::POST,
            &format!("/api/v1/tokens?namespace={name}"),
            Some(json!({"name": "executors", "role": "executor"})),
            201,
        )
        .await;
        executor_tokens.push(made["token"].as_str().unwrap().to_owned());
    }
    let (team_a, team_b) = (&executor_tokens[0], &executor_tokens[1]);
    // Made before any executor of `billing` registered: nothing says whose it will be.
    let early = expect(
        &node,
        Method::POST,
        "/api/v1/jobs?namespace=team-b",
        Some(
            json!({"name": "on-billing", "app": "billing", "handler": "work",
            "schedule": {"manual": true}}),
        ),
        201,
    )
    .await;
    let (b, a, s) = (
        SilentExecutor::start().await,
        SilentExecutor::start().await,
        SilentExecutor::start().await,
    );
    let register = "/api/v1/executors/register";
    let (status, answer) = post_as(&node, team_a, register, a.registration("billing", "a-1")).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post_as(&node, team_b, register, b.registration("billing", "b-1")).await;
    assert_eq!(status, 403, "team-b registered team-a's app: {answer}");
    let (status, answer) = post_as(&node, team_b, register, b.registration("ledger", "b-2")).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post_as(
        &node,
        CLUSTER_EXECUTOR,
        register,
        s.registration("shared", "s-1"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let beat = |id: &str| json!({"executor_id": id, "in_flight": []});
    let heartbeat = "/api/v1/executors/heartbeat";
    assert_eq!(post_as(&node, team_b, heartbeat, beat("a-1")).await.0, 403);
    assert_eq!(post_as(&node, team_a, heartbeat, beat("a-1")).await.0, 200);
    assert_eq!(post_as(&node, team_a, heartbeat, beat("s-1")).await.0, 403);
    let apps = expect(&node, Method::GET, "/api/v1/apps", None, 200).await;
    let owners: Vec<(&Value, &Value)> = apps["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|app| (&app["name"], &app["namespace"]))
        .collect();
    assert_eq!(
        owners,
        [
            (&json!("billing"), &json!("team-a")),
            (&json!("ledger"), &json!("team-b")),
            (&json!("shared"), &json!("default"))
        ]
    );
    // It speaks the executor protocol only.
    let (status, _) = node
        .call_as(team_a, Method::GET, "/api/v1/jobs", None)
        .await;
    assert_eq!(status, 403);
    // The app is team-a's now: team-a cannot be deleted while it holds it.
    let refused = expect(
        &node,
        Method::DELETE,
        "/api/v1/namespaces/team-a",
        None,
        409,
    )
    .await;
    assert!(
        refused["detail"].as_str().unwrap().contains("1 app"),
        "{refused}"
    );

    // Now `billing` is team-a's: team-b can no longer name it, in a job, a bulk create or a
    // workflow's step; `shared` (default's) it can.
    let refused = expect(
        &node,
        Method::POST,
        "/api/v1/jobs?namespace=team-b",
        Some(
            json!({"name": "late-billing", "app": "billing", "handler": "work",
            "schedule": {"manual": true}}),
        ),
        400,
    )
    .await;
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("another namespace's"),
        "{refused}"
    );
    assert_eq!(refused["field"], "app", "{refused}");
    expect(
        &node,
        Method::POST,
        "/api/v1/jobs/bulk?namespace=team-b",
        Some(
            json!([{"name": "bulk-billing", "app": "billing", "handler": "work",
            "schedule": {"manual": true}}]),
        ),
        400,
    )
    .await;
    let refused = expect(
        &node,
        Method::POST,
        "/api/v1/workflows?namespace=team-b",
        Some(json!({"name": "flow", "schedule": {"manual": true},
            "steps": [{"name": "pay", "app": "billing", "handler": "work"}]})),
        400,
    )
    .await;
    assert_eq!(refused["field"], "steps[0].app", "{refused}");
    expect(
        &node,
        Method::PATCH,
        &format!("/api/v1/jobs/{}", early["id"]),
        Some(json!({"app": "billing"})),
        200,
    )
    .await;
    // team-a's people see the apps serving team-a: its own and default's, not team-b's.
    let viewer = expect(
        &node,
        Method::POST,
        "/api/v1/tokens?namespace=team-a",
        Some(json!({"name": "dashboards", "role": "viewer"})),
        201,
    )
    .await;
    let viewer = viewer["token"].as_str().unwrap();
    let (status, seen) = node
        .call_as(viewer, Method::GET, "/api/v1/apps", None)
        .await;
    assert_eq!(status, 200, "{seen}");
    let names: Vec<&Value> = seen["apps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["name"])
        .collect();
    assert_eq!(names, [&json!("billing"), &json!("shared")], "{seen}");
    let (status, seen) = node
        .call_as(viewer, Method::GET, "/api/v1/executors", None)
        .await;
    assert_eq!(status, 200, "{seen}");
    let ids: Vec<&Value> = seen["executors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["id"])
        .collect();
    assert_eq!(ids.len(), 2, "{seen}");
    assert!(
        !ids.contains(&&json!("b-2")),
        "team-b's executor shown to team-a: {seen}"
    );
    let (status, _) = node
        .call_as(viewer, Method::GET, "/api/v1/executors/b-2", None)
        .await;
    assert_eq!(status, 404, "team-b's executor found by team-a");
    let (status, _) = node
        .call_as(viewer, Method::GET, "/api/v1/apps?namespace=team-b", None)
        .await;
    assert_eq!(status, 404, "team-b's apps listed for team-a");

    // team-a's job runs on team-a's executor; team-b's job made before `billing` was team-a's
    // finds none, and its job naming a `default` app runs there.
    let mut runs = Vec::new();
    for (namespace, app) in [
        ("team-a", "billing"),
        ("team-b", "billing"),
        ("team-b", "shared"),
    ] {
        let job = if (namespace, app) == ("team-b", "billing") {
            early.clone()
        } else {
            expect(
                &node,
                Method::POST,
                &format!("/api/v1/jobs?namespace={namespace}"),
                Some(
                    json!({"name": format!("on-{app}"), "app": app, "handler": "work",
                    "schedule": {"manual": true}}),
                ),
                201,
            )
            .await
        };
        let run = expect(
            &node,
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", job["id"]),
            None,
            202,
        )
        .await;
        runs.push(run["id"].clone());
    }
    // A delivery pass waits for its offers' answers, up to the dispatch timeout (10 s): one
    // to a silent executor holds up the offers of the next pass that long.
    support::wait_for(Duration::from_secs(30), "both runs offered", || async {
        // Kept alive: executors without heartbeats are offered nothing.
        post_as(&node, team_a, heartbeat, beat("a-1")).await;
        post_as(&node, CLUSTER_EXECUTOR, heartbeat, beat("s-1")).await;
        (a.heard_run(&runs[0]) && s.heard_run(&runs[2])).then_some(())
    })
    .await;
    assert!(
        a.heard_run(&runs[0]),
        "team-a's executor never got team-a's run: {}",
        a.text()
    );
    assert!(
        s.heard_run(&runs[2]),
        "the default app's executor never got team-b's run: {}",
        s.text()
    );
    assert!(
        !a.heard_run(&runs[1]),
        "team-b's work went to team-a's executor"
    );
    // It ends as having no executor, saying why.
    let path = format!("/api/v1/runs/{}", runs[1]);
    let detail = support::wait_for(Duration::from_secs(30), "team-b's run to end", || async {
        let (_, detail) = node.call(Method::GET, &path, None).await;
        (detail["state"] == "no_executor").then_some(detail)
    })
    .await;
    assert_eq!(
        detail["attempts"][0]["dispatched_at"],
        Value::Null,
        "{detail}"
    );
    let message = detail["message"].as_str().unwrap_or_default();
    assert!(message.contains("another namespace's"), "{detail}");
}

async fn post_as(node: &NodeProcess, token: &str, path: &str, body: Value) -> (u16, Value) {
    node.call_as(token, Method::POST, path, Some(body)).await
}
