//! Service tokens and roles on a real node, on every backend. The walk goes through every
//! `/api/v1` operation of the served OpenAPI document with a token of each role of namespace
//! `team-a`, in its own namespace and in `team-b`, and expects what the operation's
//! `x-carillon-permission` says: a role at least the one named opens it in the token's own
//! namespace and finds nothing of `team-b` (`404`), a weaker one is refused (`403`) in both;
//! the cluster's operations and the executor protocol are closed to service tokens. Then what
//! a token's life holds: shown once, listed without its secret, last use recorded, expiry and
//! revocation refused at once, and gone with its namespace.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::node::{NodeProcess, NodeSpec};

for_engine!(
    postgres,
    Postgres,
    [
        each_role_opens_its_operations_in_its_own_namespace_only,
        a_token_lives_until_it_expires_or_is_revoked
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        each_role_opens_its_operations_in_its_own_namespace_only,
        a_token_lives_until_it_expires_or_is_revoked
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        each_role_opens_its_operations_in_its_own_namespace_only,
        a_token_lives_until_it_expires_or_is_revoked
    ]
);

const ROLES: [&str; 4] = ["viewer", "operator", "editor", "admin"];

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

/// One of each resource a path can name by id, in one namespace.
#[derive(Debug, Clone)]
struct Fixtures {
    by_segment: BTreeMap<&'static str, i64>,
}

async fn fixtures(node: &NodeProcess, namespace: &str, round: usize) -> Fixtures {
    let post = Method::POST;
    let at = format!("?namespace={namespace}");
    let job = expect(
        node,
        post.clone(),
        &format!("/api/v1/jobs{at}"),
        Some(json!({"name": format!("nightly-{round}"), "app": "billing",
            "handler": "report", "schedule": {"cron": "0 0 2 * * ?"}})),
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
            json!({"name": format!("flow-{round}"), "schedule": {"manual": true},
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
            json!({"key": format!("order-{round}"), "app": "billing", "handler": "invoice",
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
struct Operation {
    method: Method,
    path: String,
    id: String,
    need: String,
    in_a_namespace: bool,
}

async fn operations(node: &NodeProcess) -> Vec<Operation> {
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
fn concrete(op: &Operation, fixtures: &Fixtures, namespace: &str, name_it: bool) -> String {
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

async fn each_role_opens_its_operations_in_its_own_namespace_only(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    // Secrets are stored only with a key, on a shared database.
    spec.extra_env = vec![("CARILLON_SECRETS_KEY", "ab".repeat(32))];
    let node = NodeProcess::start(spec).await;
    for name in ["team-a", "team-b"] {
        expect(
            &node,
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": name})),
            201,
        )
        .await;
        // An executor of an app of its own, registered with the namespace's executor token:
        // what `/executors/{id}` finds (`concrete` names it).
        let made = expect(
            &node,
            Method::POST,
            &format!("/api/v1/tokens?namespace={name}"),
            Some(json!({"name": "executors", "role": "executor"})),
            201,
        )
        .await;
        let (status, answer) = node
            .call_as(
                made["token"].as_str().unwrap(),
                Method::POST,
                "/api/v1/executors/register",
                Some(
                    json!({"protocol": 1, "executor_id": format!("{name}-executor"),
                    "app": format!("{name}-app"), "address": "http://127.0.0.1:9",
                    "weight": 1, "capacity": 1, "handlers": [{"name": "work"}]}),
                ),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    let mut tokens = Vec::new();
    for role in ROLES {
        let created = expect(
            &node,
            Method::POST,
            "/api/v1/tokens?namespace=team-a",
            Some(json!({"name": format!("{role}-bot"), "role": role})),
            201,
        )
        .await;
        assert_eq!(created["role"], role, "{created}");
        tokens.push((role, created["token"].as_str().unwrap().to_owned()));
    }
    let mut round = 0;
    let mut own = fixtures(&node, "team-a", round).await;
    let other = fixtures(&node, "team-b", round).await;

    let other_job = format!("/api/v1/jobs/{}", other.by_segment["jobs"]);
    let other_job_before = expect(&node, Method::GET, &other_job, None, 200).await;

    let operations = operations(&node).await;
    assert!(operations.len() >= 60, "{}", operations.len());
    let mut opened = BTreeMap::<&str, usize>::new();
    for op in &operations {
        for (rank, (role, token)) in tokens.iter().enumerate() {
            let what = format!(
                "{} {} ({}, needs {}) as {role}",
                op.method, op.path, op.id, op.need
            );
            let path = concrete(op, &own, "team-a", false);
            let (status, answer) = node.call_as(token, op.method.clone(), &path, None).await;
            let needed_rank = ROLES.iter().position(|r| *r == op.need);
            let allowed = match op.need.as_str() {
                "signed-in" => true,
                _ => needed_rank.is_some_and(|needed| rank >= needed),
            };
            if allowed {
                assert!(
                    status != 401 && status != 403,
                    "{what} in its own namespace: {status} {answer}"
                );
                // Its own namespace's resources are found (a `404` here would be the check
                // hiding them from their own namespace).
                if op.path.contains("{id}") || op.path.contains("{name}") {
                    assert_ne!(status, 404, "{what} in its own namespace: {answer}");
                }
                *opened.entry(role).or_default() += 1;
                if op.method == Method::DELETE {
                    round += 1;
                    own = fixtures(&node, "team-a", round).await;
                }
            } else {
                assert_eq!(status, 403, "{what} in its own namespace: {answer}");
            }
            if needed_rank.is_some() {
                // A role strong enough finds nothing there; one too weak is refused first.
                let path = concrete(op, &other, "team-b", true);
                let (status, answer) = node.call_as(token, op.method.clone(), &path, None).await;
                let expected = if allowed { 404 } else { 403 };
                assert_eq!(status, expected, "{what} in another namespace: {answer}");
            }
        }
    }
    // Each role opens more than the one before it.
    let counts: Vec<usize> = ROLES.iter().map(|role| opened[role]).collect();
    assert!(
        counts.windows(2).all(|pair| pair[0] < pair[1]),
        "{opened:?}"
    );

    // Nothing of team-b was touched by all of that.
    for (segment, id) in &other.by_segment {
        let path = match *segment {
            "tokens" | "grants" => format!("/api/v1/{segment}?namespace=team-b"),
            _ => format!("/api/v1/{segment}/{id}"),
        };
        let answer = expect(&node, Method::GET, &path, None, 200).await;
        if *segment == "tokens" || *segment == "grants" {
            // The fixture's, and for tokens the namespace's executor token.
            let kept = if *segment == "tokens" { 2 } else { 1 };
            assert_eq!(answer[*segment].as_array().unwrap().len(), kept, "{answer}");
        }
        if *segment == "jobs" {
            assert_eq!(
                (&answer["state"], &answer["version"]),
                (&other_job_before["state"], &other_job_before["version"]),
                "{answer}"
            );
        }
    }
    let runs = expect(&node, Method::GET, &format!("{other_job}/runs"), None, 200).await;
    let manual = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["trigger"] == "manual")
        .count();
    assert_eq!(manual, 1, "no run of team-b's job was added: {runs}");

    // A token's request that names no namespace works in its own; it sees only its own.
    let viewer = &tokens[0].1;
    let (status, listed) = node
        .call_as(viewer, Method::GET, "/api/v1/jobs", None)
        .await;
    assert_eq!(status, 200, "{listed}");
    let namespaces: Vec<&Value> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|job| &job["namespace"])
        .collect();
    assert!(
        !namespaces.is_empty() && namespaces.iter().all(|ns| *ns == "team-a"),
        "{listed}"
    );
    let (_, listed) = node
        .call_as(viewer, Method::GET, "/api/v1/namespaces", None)
        .await;
    let names: Vec<&Value> = listed["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ns| &ns["name"])
        .collect();
    assert_eq!(names, [&json!("team-a")]);
    // A runs listing by another namespace's job finds nothing, rather than its runs.
    let (status, listed) = node
        .call_as(
            viewer,
            Method::GET,
            &format!("/api/v1/runs?job_id={}", other.by_segment["jobs"]),
            None,
        )
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["runs"], json!([]), "{listed}");
}

async fn a_token_lives_until_it_expires_or_is_revoked(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("n1", &db.url, dir.path())).await;
    expect(
        &node,
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"name": "team-a"})),
        201,
    )
    .await;
    let create =
        |name: &str, role: &str| json!({"name": name, "role": role, "expires_in_days": 30});
    let admin = expect(
        &node,
        Method::POST,
        "/api/v1/tokens?namespace=team-a",
        Some(create("team-admin", "admin")),
        201,
    )
    .await;
    let admin_token = admin["token"].as_str().unwrap().to_owned();
    assert!(admin_token.starts_with("carillon_"), "{admin}");
    assert_eq!(admin["created_by"], "admin token");
    let expires =
        chrono::DateTime::parse_from_rfc3339(admin["expires_at"].as_str().unwrap()).unwrap();
    let days = (expires.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_hours() as f64 / 24.0;
    assert!((29.9..=30.1).contains(&days), "{admin}");

    // A namespace admin makes tokens of its own namespace; each is shown once.
    let (status, ci) = node
        .call_as(
            &admin_token,
            Method::POST,
            "/api/v1/tokens",
            Some(create("ci", "operator")),
        )
        .await;
    assert_eq!(status, 201, "{ci}");
    assert_eq!(ci["namespace"], "team-a");
    assert_eq!(
        ci["created_by"],
        format!("token team-admin (#{})", admin["id"])
    );
    let ci_token = ci["token"].as_str().unwrap().to_owned();
    let (status, refused) = node
        .call_as(
            &admin_token,
            Method::POST,
            "/api/v1/tokens",
            Some(json!({"name": "x", "role": "owner"})),
        )
        .await;
    assert_eq!(
        (status, &refused["field"]),
        (400, &json!("role")),
        "{refused}"
    );
    let (status, taken) = node
        .call_as(
            &admin_token,
            Method::POST,
            "/api/v1/tokens",
            Some(create("ci", "viewer")),
        )
        .await;
    assert_eq!(status, 409, "{taken}");
    for days in [0, 3651] {
        let (status, refused) = node
            .call_as(
                &admin_token,
                Method::POST,
                "/api/v1/tokens",
                Some(json!({"name": "y", "role": "viewer", "expires_in_days": days})),
            )
            .await;
        assert_eq!(
            (status, &refused["field"]),
            (400, &json!("expires_in_days")),
            "{refused}"
        );
    }

    // Its use is recorded; a listing never shows a secret.
    let (status, _) = node
        .call_as(&ci_token, Method::GET, "/api/v1/jobs", None)
        .await;
    assert_eq!(status, 200);
    let listed = expect(
        &node,
        Method::GET,
        "/api/v1/tokens?namespace=team-a",
        None,
        200,
    )
    .await;
    let text = listed.to_string();
    assert!(
        !text.contains(&ci_token) && !text.contains(&admin_token[12..]),
        "{listed}"
    );
    let ci_row = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .unwrap()
        .clone();
    assert!(
        ci_token.starts_with(ci_row["prefix"].as_str().unwrap()),
        "{ci_row}"
    );
    let reader = &node;
    support::wait_for(
        Duration::from_secs(5),
        "the token's last use",
        || async move {
            let (_, listed) = reader
                .call(Method::GET, "/api/v1/tokens?namespace=team-a", None)
                .await;
            let ci = listed["tokens"]
                .as_array()?
                .iter()
                .find(|t| t["name"] == "ci")?;
            ci["last_used_at"].is_string().then_some(())
        },
    )
    .await;

    // Expired: refused as unknown, by the next read of the tokens (at once on this node after
    // it changes one; the test moves the expiry in the database, so it waits out the copy).
    db.execute_script("UPDATE service_tokens SET expires_at_ms = 1 WHERE name = 'ci'")
        .await;
    let ci_token = &ci_token;
    support::wait_for(
        Duration::from_secs(8),
        "the expired token to be refused",
        || async move {
            let (status, _) = reader
                .call_as(ci_token, Method::GET, "/api/v1/jobs", None)
                .await;
            (status == 401).then_some(())
        },
    )
    .await;

    // Revoked: refused at once on the node that revoked it.
    let (status, _) = node
        .call_as(
            &admin_token,
            Method::DELETE,
            &format!("/api/v1/tokens/{}", admin["id"]),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .call_as(&admin_token, Method::GET, "/api/v1/jobs", None)
        .await;
    assert_eq!(status, 401, "a revoked token still opens the API");

    // The break-glass admin token works whatever the tokens table holds.
    db.execute_script("DELETE FROM service_tokens").await;
    expect(
        &node,
        Method::GET,
        "/api/v1/jobs?namespace=team-a",
        None,
        200,
    )
    .await;

    // A namespace's tokens go with it: one of the same name made later inherits none.
    let viewer = expect(
        &node,
        Method::POST,
        "/api/v1/tokens?namespace=team-a",
        Some(create("reader", "viewer")),
        201,
    )
    .await["token"]
        .as_str()
        .unwrap()
        .to_owned();
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
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"name": "team-a"})),
        201,
    )
    .await;
    let (status, _) = node
        .call_as(&viewer, Method::GET, "/api/v1/jobs", None)
        .await;
    assert_eq!(
        status, 401,
        "a deleted namespace's token opens its successor"
    );
}
