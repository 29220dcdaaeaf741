//! A service token's life on a real node, on every backend: shown once, listed without its
//! secret, last use recorded, expiry and revocation refused at once, and gone with its
//! namespace. What each role opens is walked in `boundary_walk.rs`.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::time::Duration;

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::node::{NodeProcess, NodeSpec};

for_engine!(
    postgres,
    Postgres,
    [a_token_lives_until_it_expires_or_is_revoked]
);
for_engine!(mysql, Mysql, [a_token_lives_until_it_expires_or_is_revoked]);
for_engine!(
    sqlite,
    Sqlite,
    [a_token_lives_until_it_expires_or_is_revoked]
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
