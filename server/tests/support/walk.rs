//! The walk of the API's boundary: one of each resource a path can name, in a namespace, and
//! every `/api/v1` operation of the served OpenAPI document with the path it is called on.

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{Value, json};

use super::node::NodeProcess;

/// `call` with the admin token, expecting `status`; the body.
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

/// One of each resource a path can name by id, in one namespace.
#[derive(Debug, Clone)]
pub struct Fixtures {
    pub by_segment: BTreeMap<&'static str, i64>,
}

pub async fn fixtures(node: &NodeProcess, namespace: &str, round: usize) -> Fixtures {
    let post = Method::POST;
    let at = format!("?namespace={namespace}");
    let job = expect(
        node,
        post.clone(),
        &format!("/api/v1/jobs{at}"),
        Some(
            json!({"name": format!("{namespace}-job-{round}"), "app": "billing",
            "handler": "report", "schedule": {"cron": "0 0 2 * * ?"}}),
        ),
        201,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let workflow = expect(
        node,
        post.clone(),
        &format!("/api/v1/workflows{at}"),
        Some(
            json!({"name": format!("{namespace}-flow-{round}"), "schedule": {"manual": true},
            "steps": [{"name": "first", "job": job}]}),
        ),
        201,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let run = expect(
        node,
        post.clone(),
        &format!("/api/v1/jobs/{job}/trigger"),
        None,
        202,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let workflow_run = expect(
        node,
        post.clone(),
        &format!("/api/v1/workflows/{workflow}/trigger"),
        Some(json!({})),
        202,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let now = chrono::Utc::now();
    let backfill = expect(
        node,
        post.clone(),
        &format!("/api/v1/jobs/{job}/backfill"),
        Some(
            json!({"from": (now - chrono::Duration::days(3)).to_rfc3339(),
            "to": (now - chrono::Duration::hours(1)).to_rfc3339()}),
        ),
        202,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let task = expect(
        node,
        post.clone(),
        &format!("/api/v1/tasks{at}"),
        Some(
            json!({"key": format!("{namespace}-order-{round}"), "app": "billing", "handler": "invoice",
            "delay": "1h"}),
        ),
        201,
    )
    .await["tasks"][0]["id"]
        .as_i64()
        .unwrap();
    let (status, answer) = node
        .call(
            Method::PUT,
            &format!("/api/v1/calendars/holidays{at}"),
            Some(json!({"dates": ["2026-12-25"]})),
        )
        .await;
    assert!(status == 200 || status == 201, "{answer}");
    let (status, answer) = node
        .call(
            Method::PUT,
            &format!("/api/v1/secrets/holidays{at}"),
            Some(json!({"value": "not a calendar"})),
        )
        .await;
    assert!(status == 200 || status == 201, "{answer}");
    let token = expect(
        node,
        post.clone(),
        &format!("/api/v1/tokens{at}"),
        Some(json!({"name": format!("spare-{round}"), "role": "viewer"})),
        201,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let grant = expect(
        node,
        post,
        &format!("/api/v1/grants{at}"),
        Some(json!({"group": format!("spare-{round}"), "role": "viewer"})),
        201,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    Fixtures {
        by_segment: BTreeMap::from([
            ("jobs", job),
            ("workflows", workflow),
            ("runs", run),
            ("workflow-runs", workflow_run),
            ("backfills", backfill),
            ("tasks", task),
            ("tokens", token),
            ("grants", grant),
        ]),
    }
}

/// An operation of the served document.
#[derive(Debug)]
pub struct Operation {
    pub method: Method,
    pub path: String,
    pub id: String,
    pub need: String,
    pub in_a_namespace: bool,
}

pub async fn operations(node: &NodeProcess) -> Vec<Operation> {
    let doc = expect(node, Method::GET, "/api/v1/openapi.json", None, 200).await;
    let mut all = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/v1/") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let in_a_namespace = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "namespace" && p["in"] == "query");
            all.push(Operation {
                method: method.to_uppercase().parse().unwrap(),
                path: path.clone(),
                id: operation["operationId"].as_str().unwrap().to_owned(),
                need: operation["x-carillon-permission"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{method} {path} states no permission"))
                    .to_owned(),
                in_a_namespace,
            });
        }
    }
    // Deletions last, so that the resources the others name are there while they run.
    all.sort_by_key(|op| op.method == Method::DELETE);
    all
}

/// The concrete path of `op` in `namespace` (`None`: the token's own, named by leaving the
/// parameter out).
pub fn concrete(op: &Operation, fixtures: &Fixtures, namespace: &str, name_it: bool) -> String {
    let segment = op
        .path
        .trim_start_matches("/api/v1/")
        .split('/')
        .next()
        .unwrap();
    let mut path = op.path.replace(
        "{name}",
        if segment == "namespaces" {
            namespace
        } else {
            "holidays"
        },
    );
    if let Some(id) = fixtures.by_segment.get(segment) {
        path = path.replace("{id}", &id.to_string());
    }
    if segment == "executors" {
        path = path.replace("{id}", &format!("{namespace}-executor"));
    }
    if op.in_a_namespace && name_it {
        path.push_str(&format!("?namespace={namespace}"));
    }
    path
}
