//! People signing in with a real OpenID provider (npm's `oidc-provider`, started by the test):
//! they sign in through its pages (authorization code with PKCE) and call the API with the JWT
//! access token it signs; their groups carry the roles granted to them, in each namespace, and
//! the cluster's groups of `[auth.oidc]`. Tokens that are not good (another audience, expired,
//! `alg: none`, HMAC, changed, another provider's) are refused and the refusal recorded; the
//! provider's new keys are picked up when it rotates them.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::time::Duration;

use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::TestDb;
use support::node::{NodeProcess, NodeSpec, Solo};
use support::oidc::{AUDIENCE, Provider, ProviderSpec};

for_engine!(
    postgres,
    Postgres,
    ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)",
    [people_get_the_roles_their_groups_are_granted]
);
for_engine!(
    mysql,
    Mysql,
    ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)",
    [people_get_the_roles_their_groups_are_granted]
);
for_engine!(
    sqlite,
    Sqlite,
    ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)",
    [people_get_the_roles_their_groups_are_granted]
);

fn provider(alg: &'static str, port: Option<u16>) -> Provider {
    Provider::start(&ProviderSpec {
        accounts: accounts(),
        alg,
        port,
    })
}

/// A node of its own whose people sign in with `provider`; the group `everyone` reads
/// `default`.
async fn solo_of(provider: &Provider, dir: &std::path::Path) -> Solo {
    let env = oidc_settings(provider, dir);
    let node = Solo::start(|spec| spec.extra_env = env).await;
    expect(
        &node,
        support::node::TOKEN,
        Method::POST,
        "/api/v1/grants",
        Some(json!({"group": "everyone", "role": "viewer"})),
        201,
    )
    .await;
    node
}

fn accounts() -> Value {
    json!({"alice": ["team-a-dev", "everyone"], "bob": ["team-b"], "carol": ["platform"],
        "dave": ["everyone"], "erin": ["team-a-dev", "team-b"]})
}

/// `[auth.oidc]` for `provider`, in a settings file of `dir`; the node's environment for it.
fn oidc_settings(provider: &Provider, dir: &std::path::Path) -> Vec<(&'static str, String)> {
    let path = dir.join("carillon.toml");
    std::fs::write(
        &path,
        format!(
            "[auth.oidc]\nissuer = \"{}\"\naudience = \"{AUDIENCE}\"\n\
             cluster_admin_groups = [\"platform\"]\nclock_skew_s = 0\n",
            provider.issuer
        ),
    )
    .unwrap();
    vec![("CARILLON_CONFIG", path.display().to_string())]
}

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

fn job(name: &str) -> Value {
    json!({"name": name, "app": "billing", "handler": "report",
        "schedule": {"cron": "0 0 2 * * ?"}})
}

async fn people_get_the_roles_their_groups_are_granted(db: TestDb) {
    let provider = provider("RS256", None);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env = oidc_settings(&provider, dir.path());
    let node = NodeProcess::start(spec).await;
    let admin = support::node::TOKEN;
    for name in ["team-a", "team-b"] {
        let body = Some(json!({"name": name}));
        expect(&node, admin, Method::POST, "/api/v1/namespaces", body, 201).await;
    }
    let grant = |group: &str, role: &str| Some(json!({"group": group, "role": role}));
    let alice_grant = expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/grants?namespace=team-a",
        grant("team-a-dev", "editor"),
        201,
    )
    .await;
    assert_eq!(alice_grant["created_by"], "admin token");
    // The CLI grants too.
    let url = node.url("");
    let cli = |args: &[&str]| support::cli::carillon(&url, args);
    let (ok, _, err) = cli(&[
        "-n", "team-b", "grants", "add", "team-b", "--role", "viewer",
    ]);
    assert!(ok, "{err}");
    let (ok, listed, err) = cli(&["-n", "team-b", "grants", "ls"]);
    assert!(
        ok && listed.contains("team-b") && listed.contains("viewer"),
        "{listed}{err}"
    );
    let (ok, _, err) = cli(&["-n", "team-b", "grants", "add", "ops", "--role", "owner"]);
    assert!(!ok && err.contains("role"), "{err}");
    expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/grants?namespace=team-a",
        grant("team-a-dev", "viewer"),
        409,
    )
    .await;
    expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/grants?namespace=team-a",
        grant("x", "owner"),
        400,
    )
    .await;

    let sign_in = |login: &'static str| provider.sign_in(login, "carillon", AUDIENCE);
    let (alice, bob, carol, dave) = (
        sign_in("alice").await,
        sign_in("bob").await,
        sign_in("carol").await,
        sign_in("dave").await,
    );

    // alice edits team-a (her only namespace, so the one she works in by default), sees
    // nothing of team-b, and cannot reach the cluster nor team-a's grants.
    let created = expect(
        &node,
        &alice,
        Method::POST,
        "/api/v1/jobs?namespace=team-a",
        Some(job("nightly")),
        201,
    )
    .await;
    assert_eq!(created["namespace"], "team-a");
    let listed = expect(&node, &alice, Method::GET, "/api/v1/jobs", None, 200).await;
    assert_eq!(listed["jobs"][0]["name"], "nightly", "{listed}");
    expect(
        &node,
        &alice,
        Method::GET,
        "/api/v1/jobs?namespace=team-b",
        None,
        404,
    )
    .await;
    // The cluster's figures are its viewers'; the executors serving team-a are alice's to see.
    expect(&node, &alice, Method::GET, "/api/v1/stats", None, 403).await;
    expect(&node, &alice, Method::GET, "/api/v1/executors", None, 200).await;
    expect(
        &node,
        &alice,
        Method::GET,
        "/api/v1/grants?namespace=team-a",
        None,
        403,
    )
    .await;
    let namespaces = expect(&node, &alice, Method::GET, "/api/v1/namespaces", None, 200).await;
    let names: Vec<&str> = namespaces["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ns| ns["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["team-a"]);

    // bob reads team-b and changes nothing; dave's groups have no role anywhere.
    expect(
        &node,
        &bob,
        Method::GET,
        "/api/v1/jobs?namespace=team-b",
        None,
        200,
    )
    .await;
    let refused = expect(
        &node,
        &bob,
        Method::POST,
        "/api/v1/jobs?namespace=team-b",
        Some(job("x")),
        403,
    )
    .await;
    assert!(
        refused["detail"].as_str().unwrap().contains("viewer"),
        "{refused}"
    );
    let refused = expect(&node, &dave, Method::GET, "/api/v1/jobs", None, 403).await;
    assert!(
        refused["detail"].as_str().unwrap().contains("everyone"),
        "{refused}"
    );

    // erin works in two namespaces: a call that names none is told which.
    let erin = sign_in("erin").await;
    let told = expect(&node, &erin, Method::GET, "/api/v1/jobs", None, 400).await;
    assert_eq!(told["field"], "namespace", "{told}");
    assert!(
        told["detail"].as_str().unwrap().contains("team-a, team-b"),
        "{told}"
    );
    expect(
        &node,
        &erin,
        Method::GET,
        "/api/v1/jobs?namespace=team-b",
        None,
        200,
    )
    .await;

    // carol's group administers the cluster.
    expect(
        &node,
        &carol,
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"name": "team-c"})),
        201,
    )
    .await;
    expect(&node, &carol, Method::GET, "/api/v1/executors", None, 200).await;
    expect(
        &node,
        &carol,
        Method::GET,
        "/api/v1/jobs?namespace=team-a",
        None,
        200,
    )
    .await;

    // The trail names the people.
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?operation=createJob&actor=user%20alice",
        None,
        200,
    )
    .await;
    assert_eq!(trail["events"][0]["actor"], "user alice", "{trail}");
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?operation=createNamespace&actor=user%20carol",
        None,
        200,
    )
    .await;
    assert_eq!(trail["events"].as_array().unwrap().len(), 1, "{trail}");

    // An admin of `default` with a role elsewhere too (so no single home) who names no
    // namespace reads `default`'s trail, never the whole cluster's.
    let everyone = expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/grants",
        grant("everyone", "admin"),
        201,
    )
    .await;
    let own = expect(&node, &alice, Method::GET, "/api/v1/audit", None, 200).await;
    let namespaces: Vec<&Value> = own["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["namespace"])
        .collect();
    assert!(!namespaces.is_empty(), "{own}");
    assert!(namespaces.iter().all(|n| *n == "default"), "{own}");
    // Nor do a job's id and no namespace list another team's runs: every filter applies
    // inside the namespace the call was admitted in (`default` here).
    let theirs = expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/jobs?namespace=team-b",
        Some(job("theirs")),
        201,
    )
    .await;
    let run_path = format!("/api/v1/jobs/{}/trigger", theirs["id"]);
    expect(&node, admin, Method::POST, &run_path, None, 202).await;
    for listing in ["runs", "dead-letters"] {
        let path = format!("/api/v1/{listing}?job_id={}", theirs["id"]);
        let seen = expect(&node, &alice, Method::GET, &path, None, 200).await;
        assert_eq!(seen["runs"], json!([]), "{path}: {seen}");
        let path = format!("{path}&namespace=team-b");
        expect(&node, &alice, Method::GET, &path, None, 404).await;
    }
    let path = format!("/api/v1/jobs/{}/runs", theirs["id"]);
    expect(&node, &alice, Method::GET, &path, None, 404).await;
    let seen = expect(&node, admin, Method::GET, &path, None, 200).await;
    assert_eq!(seen["runs"].as_array().unwrap().len(), 1, "{seen}");
    let path = format!("/api/v1/jobs/{}", theirs["id"]);
    expect(&node, admin, Method::DELETE, &path, None, 204).await;
    let path = format!("/api/v1/grants/{}", everyone["id"]);
    expect(&node, admin, Method::DELETE, &path, None, 204).await;

    // A grant taken back closes what it opened, at once on this node; the namespace's
    // deletion takes its grants along.
    let id = alice_grant["id"].as_i64().unwrap();
    expect(
        &node,
        admin,
        Method::DELETE,
        &format!("/api/v1/grants/{id}"),
        None,
        204,
    )
    .await;
    expect(
        &node,
        &alice,
        Method::GET,
        "/api/v1/jobs?namespace=team-a",
        None,
        403,
    )
    .await;
    expect(
        &node,
        admin,
        Method::DELETE,
        &format!("/api/v1/grants/{id}"),
        None,
        404,
    )
    .await;
    let listed = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/grants?namespace=team-b",
        None,
        200,
    )
    .await;
    assert_eq!(listed["grants"][0]["group"], "team-b");
    expect(
        &node,
        admin,
        Method::DELETE,
        "/api/v1/namespaces/team-b",
        None,
        204,
    )
    .await;
    expect(
        &node,
        admin,
        Method::POST,
        "/api/v1/namespaces",
        Some(json!({"name": "team-b"})),
        201,
    )
    .await;
    let listed = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/grants?namespace=team-b",
        None,
        200,
    )
    .await;
    assert_eq!(listed["grants"], json!([]), "a new team-b inherits nothing");
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// `token` with its header replaced by `header` and its signature by `signature`.
fn forged(token: &str, header: &Value, signature: &[u8]) -> String {
    let payload = token.split('.').nth(1).unwrap();
    format!(
        "{}.{payload}.{}",
        b64(header.to_string().as_bytes()),
        b64(signature)
    )
}

/// `token` with `groups` changed in its payload, the signature kept.
fn with_groups(token: &str, groups: Value) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[1])
        .unwrap();
    let mut claims: Value = serde_json::from_slice(&decoded).unwrap();
    claims["groups"] = groups;
    format!(
        "{}.{}.{}",
        parts[0],
        b64(claims.to_string().as_bytes()),
        parts[2]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)"]
async fn tokens_that_are_not_good_are_refused_and_recorded() {
    let provider = provider("RS256", None);
    let other = self::provider("RS256", None);
    let dir = tempfile::tempdir().unwrap();
    let node = solo_of(&provider, dir.path()).await;
    let admin = support::node::TOKEN;

    let good = provider.sign_in("dave", "carillon", AUDIENCE).await;
    expect(&node, &good, Method::GET, "/api/v1/jobs", None, 200).await;
    let short = provider.sign_in("dave", "carillon-short", AUDIENCE).await;
    expect(&node, &short, Method::GET, "/api/v1/jobs", None, 200).await;

    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(good.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    let kid = header["kid"].clone();
    let cases = [
        (
            provider
                .sign_in("dave", "carillon", "https://elsewhere.test/api")
                .await,
            "audience",
        ),
        (
            forged(&good, &json!({"alg": "none", "kid": kid}), b""),
            "none",
        ),
        (
            forged(&good, &json!({"alg": "HS256", "kid": kid}), &[7; 32]),
            "HS256",
        ),
        (with_groups(&good, json!(["platform"])), "signature"),
        (
            other.sign_in("dave", "carillon", AUDIENCE).await,
            "not among the identity provider's keys",
        ),
        ("eyJhbGciOiJSUzI1NiJ9.e30.AAAA".to_owned(), "signature"),
    ];
    for (token, why) in &cases {
        let refused = expect(&node, token, Method::GET, "/api/v1/jobs", None, 401).await;
        let detail = refused["detail"].as_str().unwrap();
        assert!(detail.contains(why), "{why}: {refused}");
        assert!(
            !detail.contains(token.as_str()),
            "the token is never echoed"
        );
    }
    support::wait_for(
        Duration::from_secs(10),
        "the short token to expire",
        || async {
            let (status, answer) = node
                .call_as(&short, Method::GET, "/api/v1/jobs", None)
                .await;
            (status == 401 && answer["detail"].as_str()?.contains("expired")).then_some(())
        },
    )
    .await;

    // Refusals from one address are recorded once a minute, how many were held back said by
    // the next one recorded.
    let trail = expect(
        &node,
        admin,
        Method::GET,
        "/api/v1/audit?operation=signIn",
        None,
        200,
    )
    .await;
    let events = trail["events"].as_array().unwrap();
    assert!(
        (1..=2).contains(&events.len()),
        "{} refusals within a minute or two: {trail}",
        cases.len() + 1
    );
    let first = events.last().unwrap();
    assert_eq!(first["outcome"], "refused");
    assert_eq!(first["actor"], "unknown caller");
    assert_eq!(first["source"], "127.0.0.1");
    assert_eq!(first["status"], 401);
    assert!(
        first["detail"].as_str().unwrap().contains("audience"),
        "{first}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)"]
async fn the_providers_new_keys_are_read_when_it_rotates_them() {
    let mut provider = provider("RS256", None);
    let dir = tempfile::tempdir().unwrap();
    let node = solo_of(&provider, dir.path()).await;
    let before = provider.sign_in("dave", "carillon", AUDIENCE).await;
    expect(&node, &before, Method::GET, "/api/v1/jobs", None, 200).await;

    // The provider goes away: the keys the node holds keep its tokens working.
    let port = provider.port;
    let old_kid = provider.kid.clone();
    drop(provider);
    expect(&node, &before, Method::GET, "/api/v1/jobs", None, 200).await;

    // It comes back with a new key (another algorithm, too): its new tokens are accepted once
    // the node has read the new key, the old key's are not.
    provider = self::provider("ES256", Some(port));
    assert_ne!(provider.kid, old_kid);
    let after = provider.sign_in("dave", "carillon", AUDIENCE).await;
    support::wait_for(
        Duration::from_secs(15),
        "the new key to be read",
        || async {
            let (status, _) = node
                .call_as(&after, Method::GET, "/api/v1/jobs", None)
                .await;
            (status == 200).then_some(())
        },
    )
    .await;
    let refused = expect(&node, &before, Method::GET, "/api/v1/jobs", None, 401).await;
    assert!(
        refused["detail"].as_str().unwrap().contains("not among"),
        "{refused}"
    );
}
