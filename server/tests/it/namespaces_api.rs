//! Namespaces through the REST API of a real node, on every backend: two teams' jobs,
//! workflows, tasks and calendars with the same names side by side, each collection showing
//! only its namespace's; nothing of one namespace reachable by name from another; a namespace
//! deleted only once empty, and `default` never.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::node::{NodeProcess, NodeSpec};

for_engine!(
    postgres,
    Postgres,
    [two_teams_share_names_and_see_only_their_own]
);
for_engine!(mysql, Mysql, [two_teams_share_names_and_see_only_their_own]);
for_engine!(
    sqlite,
    Sqlite,
    [two_teams_share_names_and_see_only_their_own]
);

fn nightly(extra: Value) -> Value {
    let mut job = json!({"name": "nightly-report", "app": "billing", "handler": "report",
        "schedule": {"cron": "0 0 2 * * ?"}});
    if let (Some(job), Some(extra)) = (job.as_object_mut(), extra.as_object()) {
        job.extend(extra.clone());
    }
    job
}

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

/// The names (or ids, where there is no name) of a listing's items under `key`.
fn field_of(list: &Value, key: &str, field: &str) -> Vec<Value> {
    list[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item[field].clone())
        .collect()
}

async fn two_teams_share_names_and_see_only_their_own(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("n1", &db.url, dir.path())).await;
    let post = Method::POST;
    let get = Method::GET;

    // The namespaces: `default` is there from the start; names are checked and unique.
    let created = expect(
        &node,
        post.clone(),
        "/api/v1/namespaces",
        Some(json!({"name": "team-a", "description": "Billing"})),
        201,
    )
    .await;
    assert_eq!(created["name"], "team-a");
    let taken = expect(
        &node,
        post.clone(),
        "/api/v1/namespaces",
        Some(json!({"name": "team-a"})),
        409,
    )
    .await;
    assert!(
        taken["detail"].as_str().unwrap().contains("team-a"),
        "{taken}"
    );
    let bad = expect(
        &node,
        post.clone(),
        "/api/v1/namespaces",
        Some(json!({"name": "Team_A"})),
        400,
    )
    .await;
    assert_eq!(bad["field"], "name", "{bad}");
    // A description and an alert webhook are changed in place; the same again changes nothing.
    let change = json!({"description": "Billing team", "alert_webhook": "http://127.0.0.1:1/hook"});
    for _ in 0..2 {
        let changed = expect(
            &node,
            Method::PATCH,
            "/api/v1/namespaces/team-a",
            Some(change.clone()),
            200,
        )
        .await;
        assert_eq!(
            (&changed["description"], &changed["alert_webhook"]),
            (&json!("Billing team"), &json!("http://127.0.0.1:1/hook"))
        );
    }
    let cleared = expect(
        &node,
        Method::PATCH,
        "/api/v1/namespaces/team-a",
        Some(json!({"alert_webhook": null})),
        200,
    )
    .await;
    assert!(cleared.get("alert_webhook").is_none(), "{cleared}");
    assert_eq!(cleared["description"], "Billing team");
    expect(
        &node,
        Method::PATCH,
        "/api/v1/namespaces/team-z",
        Some(json!({})),
        404,
    )
    .await;
    // A list of the fields' values is no document (serde would take it for the struct).
    let listed = expect(
        &node,
        Method::PATCH,
        "/api/v1/namespaces/team-a",
        Some(json!([null, null])),
        400,
    )
    .await;
    assert_eq!(listed["field"], "body", "{listed}");
    let all = expect(&node, get.clone(), "/api/v1/namespaces", None, 200).await;
    assert_eq!(
        field_of(&all, "namespaces", "name"),
        [json!("default"), json!("team-a")]
    );

    // Jobs: one name in each namespace, each listing its own.
    let ours = expect(
        &node,
        post.clone(),
        "/api/v1/jobs",
        Some(nightly(json!({}))),
        201,
    )
    .await;
    let theirs = expect(
        &node,
        post.clone(),
        "/api/v1/jobs?namespace=team-a",
        Some(nightly(json!({}))),
        201,
    )
    .await;
    assert_eq!(
        (&ours["namespace"], &theirs["namespace"]),
        (&json!("default"), &json!("team-a"))
    );
    expect(
        &node,
        post.clone(),
        "/api/v1/jobs?namespace=team-a",
        Some(nightly(json!({}))),
        409,
    )
    .await;
    let listed = expect(
        &node,
        get.clone(),
        "/api/v1/jobs?namespace=team-a",
        None,
        200,
    )
    .await;
    assert_eq!(field_of(&listed, "jobs", "id"), [theirs["id"].clone()]);
    let listed = expect(&node, get.clone(), "/api/v1/jobs", None, 200).await;
    assert_eq!(field_of(&listed, "jobs", "id"), [ours["id"].clone()]);
    let got = expect(
        &node,
        get.clone(),
        &format!("/api/v1/jobs/{}", theirs["id"]),
        None,
        200,
    )
    .await;
    assert_eq!(got["namespace"], "team-a");
    let unknown = expect(
        &node,
        get.clone(),
        "/api/v1/jobs?namespace=team-z",
        None,
        404,
    )
    .await;
    assert!(
        unknown["detail"].as_str().unwrap().contains("team-z"),
        "{unknown}"
    );
    expect(&node, get.clone(), "/api/v1/jobs?namespace=Bad!", None, 400).await;

    // Calendars: team-a's `holidays` is not default's.
    let holidays = json!({"dates": ["2026-12-25"]});
    expect(
        &node,
        Method::PUT,
        "/api/v1/calendars/holidays?namespace=team-a",
        Some(holidays),
        201,
    )
    .await;
    expect(&node, get.clone(), "/api/v1/calendars/holidays", None, 404).await;
    let refused = expect(
        &node,
        post.clone(),
        "/api/v1/jobs",
        Some(nightly(
            json!({"name": "with-holidays", "calendars": ["holidays"]}),
        )),
        400,
    )
    .await;
    assert_eq!(refused["field"], "calendars[0]", "{refused}");
    expect(
        &node,
        post.clone(),
        "/api/v1/jobs?namespace=team-a",
        Some(nightly(
            json!({"name": "with-holidays", "calendars": ["holidays"]}),
        )),
        201,
    )
    .await;

    // Children and workflow steps: another namespace's job is as good as none.
    let child = theirs["id"].as_i64().unwrap();
    let refused = expect(
        &node,
        post.clone(),
        "/api/v1/jobs",
        Some(nightly(
            json!({"name": "parent", "children": {"on_success": [child]}}),
        )),
        400,
    )
    .await;
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("in this job's namespace"),
        "{refused}"
    );
    let flow = |job: Value| {
        json!({"name": "flow", "schedule": {"manual": true},
               "steps": [{"name": "first", "job": job}]})
    };
    expect(
        &node,
        post.clone(),
        "/api/v1/workflows",
        Some(flow(json!(child))),
        400,
    )
    .await;
    expect(
        &node,
        post.clone(),
        "/api/v1/workflows?namespace=team-a",
        Some(flow(json!(child))),
        201,
    )
    .await;
    let mine = expect(
        &node,
        post.clone(),
        "/api/v1/workflows",
        Some(flow(json!("nightly-report"))),
        201,
    )
    .await;
    assert_eq!(
        mine["steps"][0]["job"], ours["id"],
        "a name resolves in its own namespace"
    );
    let listed = expect(
        &node,
        get.clone(),
        "/api/v1/workflows?namespace=team-a",
        None,
        200,
    )
    .await;
    assert_eq!(
        field_of(&listed, "workflows", "namespace"),
        [json!("team-a")]
    );

    // Tasks: one holder of a key per namespace.
    let task = json!({"key": "order-9", "app": "billing", "handler": "invoice",
        "delay": "1h"});
    for namespace in ["default", "team-a"] {
        let enqueued = expect(
            &node,
            post.clone(),
            &format!("/api/v1/tasks?namespace={namespace}"),
            Some(task.clone()),
            201,
        )
        .await;
        assert_eq!(enqueued["created"], 1, "{namespace}: {enqueued}");
    }
    let found = expect(
        &node,
        get.clone(),
        "/api/v1/tasks?namespace=team-a&key=order-9",
        None,
        200,
    )
    .await;
    assert_eq!(field_of(&found, "items", "namespace"), [json!("team-a")]);

    // Runs: a manual run of team-a's job is listed in team-a only.
    let run = expect(
        &node,
        post.clone(),
        &format!("/api/v1/jobs/{}/trigger", theirs["id"]),
        None,
        202,
    )
    .await;
    assert_eq!(run["namespace"], "team-a");
    let runs = expect(
        &node,
        get.clone(),
        "/api/v1/runs?namespace=team-a",
        None,
        200,
    )
    .await;
    assert_eq!(field_of(&runs, "runs", "id"), [run["id"].clone()]);
    let runs = expect(&node, get.clone(), "/api/v1/runs", None, 200).await;
    assert!(field_of(&runs, "runs", "id").is_empty(), "{runs}");

    // Deleting: never `default`; team-a only once it holds nothing but history.
    expect(
        &node,
        Method::DELETE,
        "/api/v1/namespaces/default",
        None,
        409,
    )
    .await;
    let held = expect(
        &node,
        Method::DELETE,
        "/api/v1/namespaces/team-a",
        None,
        409,
    )
    .await;
    assert!(
        held["detail"]
            .as_str()
            .unwrap()
            .contains("1 pending task(s)"),
        "{held}"
    );
    let jobs = expect(
        &node,
        get.clone(),
        "/api/v1/jobs?namespace=team-a",
        None,
        200,
    )
    .await;
    let workflows = expect(
        &node,
        get.clone(),
        "/api/v1/workflows?namespace=team-a",
        None,
        200,
    )
    .await;
    for id in field_of(&workflows, "workflows", "id") {
        expect(
            &node,
            Method::DELETE,
            &format!("/api/v1/workflows/{id}"),
            None,
            204,
        )
        .await;
    }
    for id in field_of(&jobs, "jobs", "id") {
        expect(
            &node,
            Method::DELETE,
            &format!("/api/v1/jobs/{id}"),
            None,
            204,
        )
        .await;
    }
    expect(
        &node,
        Method::DELETE,
        "/api/v1/calendars/holidays?namespace=team-a",
        None,
        204,
    )
    .await;
    expect(
        &node,
        Method::DELETE,
        "/api/v1/tasks?namespace=team-a&key=order-9",
        None,
        200,
    )
    .await;
    expect(
        &node,
        Method::DELETE,
        "/api/v1/namespaces/team-a",
        None,
        204,
    )
    .await;
    expect(
        &node,
        get.clone(),
        "/api/v1/jobs?namespace=team-a",
        None,
        404,
    )
    .await;
    let kept = expect(
        &node,
        get.clone(),
        &format!("/api/v1/runs/{}", run["id"]),
        None,
        200,
    )
    .await;
    assert_eq!(
        (&kept["id"], &kept["namespace"]),
        (&run["id"], &json!("#2")),
        "its history stays"
    );
    let ours_still = expect(
        &node,
        get,
        &format!("/api/v1/jobs/{}", ours["id"]),
        None,
        200,
    )
    .await;
    assert_eq!(ours_still["namespace"], "default");
}
