//! Secrets through the API, on every backend: a value is written and never read back, the
//! database holds it sealed (never in clear, not even in the audit trail), names are per
//! namespace, bad input is refused naming the field, a node without the key cannot open
//! what it lists, and a rotation moves every secret to a new key, after which a node with
//! only the new key opens them all.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::{TestDb, fetch_rows};
use support::node::{NodeProcess, NodeSpec};

for_engine!(
    postgres,
    Postgres,
    [
        secrets_are_sealed_write_only_and_rotate,
        a_job_naming_secrets_has_them_in_its_dispatch
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        secrets_are_sealed_write_only_and_rotate,
        a_job_naming_secrets_has_them_in_its_dispatch
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        secrets_are_sealed_write_only_and_rotate,
        a_job_naming_secrets_has_them_in_its_dispatch
    ]
);

const KEY_A: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
/// Another key, in base64 as `openssl rand -base64 32` writes one.
const KEY_B: &str = "qrvM3e7/ABEiM0RVZneImaq7zN3u/wARIjNEVWZ3iJk=";
const VALUE: &str = "hunter2-in-clear";

async fn node_with(
    db: &TestDb,
    home: &std::path::Path,
    id: &str,
    keys: &[(&'static str, &str)],
) -> NodeProcess {
    let mut spec = NodeSpec::fast(id, &db.url, home);
    spec.extra_env = keys.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    NodeProcess::start(spec).await
}

async fn secrets_are_sealed_write_only_and_rotate(db: TestDb) {
    let home = tempfile::tempdir().unwrap();
    let mut node = node_with(&db, home.path(), "a", &[("CARILLON_SECRETS_KEY", KEY_A)]).await;

    let (status, created) = put(&node, "db-password", "", json!({"value": VALUE})).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["version"], 1);
    assert_eq!(created["readable"], true);
    assert!(!created.to_string().contains(VALUE), "{created}");
    let key_a = created["key_id"].as_str().unwrap().to_owned();
    assert_eq!(key_a.len(), 16);
    let (status, replaced) = put(&node, "db-password", "", json!({"value": "v2"})).await;
    assert_eq!(
        (status, &replaced["version"]),
        (200, &json!(2)),
        "{replaced}"
    );

    // Names are per namespace: the same name in another one is another secret.
    let (status, _) = node
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": "team"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, theirs) = put(
        &node,
        "db-password",
        "?namespace=team",
        json!({"value": VALUE}),
    )
    .await;
    assert_eq!(
        (status, &theirs["namespace"]),
        (201, &json!("team")),
        "{theirs}"
    );
    // The largest value: sealed, it still fits every backend's column.
    let (status, largest) = put(
        &node,
        "API_TOKEN.v1",
        "",
        json!({"value": "x".repeat(32 * 1024)}),
    )
    .await;
    assert_eq!(status, 201, "{largest}");
    // Names are compared as written, on every backend.
    let (status, other) = put(&node, "DB-PASSWORD", "", json!({"value": "upper"})).await;
    assert_eq!((status, &other["readable"]), (201, &json!(true)), "{other}");
    let (status, _) = node
        .call(Method::DELETE, "/api/v1/secrets/DB-PASSWORD", None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(names(&node, "").await, ["API_TOKEN.v1", "db-password"]);
    assert_eq!(names(&node, "?namespace=team").await, ["db-password"]);

    bad_input_is_refused_naming_the_field(&node).await;
    the_cli_sets_lists_and_deletes(&node, home.path());
    the_cli_works_in_the_namespace_it_names(&node, home.path()).await;

    // Sealed at rest: no value in clear, in the table or in the audit trail.
    let rows: Vec<(String, String)> =
        fetch_rows(db.engine, &db.url, "SELECT name, sealed FROM secrets", &[]).await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (name, sealed) in &rows {
        assert!(
            sealed.starts_with(&format!("v1.{key_a}.")),
            "{name}: {}",
            &sealed[..40]
        );
        assert!(!sealed.contains(VALUE), "{name}: {sealed}");
    }
    let (_, trail) = node
        .call(Method::GET, "/api/v1/audit?limit=100", None)
        .await;
    assert!(!trail.to_string().contains(VALUE), "{trail}");
    let statuses: Vec<&Value> = trail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["operation"] == "putSecret")
        .map(|e| &e["status"])
        .collect();
    assert!(
        statuses.contains(&&json!(201)) && statuses.contains(&&json!(200)),
        "a creation is recorded 201, a replacement 200: {trail}"
    );

    let (status, _) = node
        .call(Method::DELETE, "/api/v1/secrets/API_TOKEN.v1", None)
        .await;
    assert_eq!(status, 204);
    let (status, gone) = node
        .call(Method::DELETE, "/api/v1/secrets/API_TOKEN.v1", None)
        .await;
    assert_eq!(status, 404, "{gone}");
    node.terminate().await;

    // A node without key A lists them unreadable and refuses to rotate what it cannot open.
    let mut node = node_with(&db, home.path(), "b", &[("CARILLON_SECRETS_KEY", KEY_B)]).await;
    let listed = list(&node, "").await;
    assert_eq!(listed[0]["readable"], false, "{listed:?}");
    assert_eq!(listed[0]["key_id"], key_a.as_str());
    let rotation = rotate(&node).await;
    assert_eq!(
        (rotation["resealed"].as_u64(), rotation["unopened"].as_u64()),
        (Some(0), Some(2))
    );
    node.terminate().await;

    // The rotation: key B, with A among the previous keys.
    let mut node = node_with(
        &db,
        home.path(),
        "c",
        &[
            ("CARILLON_SECRETS_KEY", KEY_B),
            ("CARILLON_SECRETS_PREVIOUS_KEYS", KEY_A),
        ],
    )
    .await;
    assert_eq!(list(&node, "").await[0]["readable"], true);
    let rotation = rotate(&node).await;
    let key_b = rotation["key_id"].as_str().unwrap().to_owned();
    assert_ne!(key_b, key_a);
    assert_eq!(
        (rotation["resealed"].as_u64(), rotation["unopened"].as_u64()),
        (Some(2), Some(0)),
        "{rotation}"
    );
    assert_eq!(
        rotate(&node).await["resealed"],
        0,
        "nothing is left under key A"
    );
    node.terminate().await;

    // Key B alone now opens every secret; key A alone none.
    let mut node = node_with(&db, home.path(), "d", &[("CARILLON_SECRETS_KEY", KEY_B)]).await;
    for namespace in ["", "?namespace=team"] {
        for secret in list(&node, namespace).await {
            assert_eq!(
                (&secret["readable"], &secret["key_id"]),
                (&json!(true), &json!(key_b)),
                "{secret}"
            );
            assert_eq!(
                secret["version"],
                if namespace.is_empty() { 2 } else { 1 },
                "a rotation is no new version"
            );
        }
    }
    node.terminate().await;
    let mut node = node_with(&db, home.path(), "e", &[("CARILLON_SECRETS_KEY", KEY_A)]).await;
    assert_eq!(list(&node, "").await[0]["readable"], false);
    node.terminate().await;

    // No key: a node on SQLite makes one of its own; on a shared database, none is made, and
    // writing says which setting is missing.
    let node = node_with(&db, home.path(), "f", &[]).await;
    let (status, answer) = put(&node, "db-password", "", json!({"value": "v3"})).await;
    if db.engine.key() == "sqlite" {
        assert_eq!(status, 200, "{answer}");
    } else {
        assert_eq!(status, 409, "{answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains("secrets.key"),
            "{answer}"
        );
    }
}

/// `carillon secrets`: a value from a file (its last newline dropped), never on the command
/// line nor printed; `key` makes a key the node takes.
fn the_cli_sets_lists_and_deletes(node: &NodeProcess, dir: &std::path::Path) {
    let file = dir.join("value.txt");
    std::fs::write(&file, format!("{VALUE}\n")).unwrap();
    let url = node.url("");
    let file = file.display().to_string();
    let (ok, out, err) =
        support::cli::carillon(&url, &["secrets", "set", "from-cli", "--from-file", &file]);
    assert!(
        ok && out.contains("from-cli") && !out.contains(VALUE),
        "{out}{err}"
    );
    let (ok, out, err) = support::cli::carillon(&url, &["secrets", "ls", "-o", "json"]);
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert!(
        ok && listed["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "from-cli")
    );
    let (ok, _, err) = support::cli::carillon(&url, &["secrets", "rm", "from-cli"]);
    assert!(ok, "{err}");
    let (ok, _, err) = support::cli::carillon(&url, &["secrets", "rm", "from-cli"]);
    assert!(!ok && err.contains("from-cli"), "{err}");
    let (ok, key, err) = support::cli::carillon(&url, &["secrets", "key"]);
    assert!(ok && key.trim().len() == 64, "{key}{err}");
    assert_ne!(
        support::cli::carillon(&url, &["secrets", "key"]).1,
        key,
        "keys are random"
    );
}

/// `carillon -n NAMESPACE secrets …` works in that namespace, not `default`.
async fn the_cli_works_in_the_namespace_it_names(node: &NodeProcess, dir: &std::path::Path) {
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": "team-s"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let file = dir.join("scoped.txt");
    std::fs::write(&file, VALUE).unwrap();
    let (url, file) = (node.url(""), file.display().to_string());
    let in_team = |args: &[&str]| {
        let mut all = vec!["-n", "team-s", "secrets"];
        all.extend_from_slice(args);
        support::cli::carillon(&url, &all)
    };
    let (ok, out, err) = in_team(&["set", "scoped", "--from-file", &file]);
    assert!(ok, "{out}{err}");
    let names = |listed: &Value| -> Vec<Value> {
        listed["secrets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].clone())
            .collect()
    };
    let (_, team) = node
        .call(Method::GET, "/api/v1/secrets?namespace=team-s", None)
        .await;
    assert_eq!(names(&team), [json!("scoped")], "{team}");
    let (_, default) = node.call(Method::GET, "/api/v1/secrets", None).await;
    assert!(!names(&default).contains(&json!("scoped")), "{default}");
    let (ok, out, err) = in_team(&["ls", "-o", "json"]);
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert!(ok && names(&listed) == [json!("scoped")], "{out}{err}");
    let (ok, _, err) = in_team(&["rm", "scoped"]);
    assert!(ok, "{err}");
    let (_, team) = node
        .call(Method::GET, "/api/v1/secrets?namespace=team-s", None)
        .await;
    assert_eq!(names(&team), Vec::<Value>::new(), "{team}");
}

async fn bad_input_is_refused_naming_the_field(node: &NodeProcess) {
    for (name, body, field) in [
        ("has space", json!({"value": "x"}), "name"),
        (".hidden", json!({"value": "x"}), "name"),
        ("ok", json!({"value": ""}), "value"),
        ("ok", json!({"value": "x".repeat(32 * 1024 + 1)}), "value"),
        ("ok", json!({"value": "x", "colour": 1}), "colour"),
        ("ok", json!({"value": 7}), "value"),
    ] {
        let path = format!("/api/v1/secrets/{}", name.replace(' ', "%20"));
        let (status, problem) = node.call(Method::PUT, &path, Some(body)).await;
        assert_eq!(status, 400, "{name}: {problem}");
        assert!(
            problem["detail"].as_str().unwrap().contains(field),
            "{name}: {problem}"
        );
    }
    // `rotate` is the rotation's path, not a name.
    let (status, problem) = put(node, "rotate", "", json!({"value": "x"})).await;
    assert_eq!(status, 405, "{problem}");
    let (status, problem) = put(node, "ok", "?namespace=nope", json!({"value": "x"})).await;
    assert_eq!(status, 404, "{problem}");
}

/// A job of an executor that names secrets: its dispatch carries their values (the Python
/// executor answers a digest of each, never the value), the job shows only their names, a
/// secret not set fails the attempt naming it, and an HTTP job cannot name them so.
async fn a_job_naming_secrets_has_them_in_its_dispatch(db: TestDb) {
    use sha2::Digest;
    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, home.path());
    spec.extra_env = support::executor::node_env();
    spec.extra_env
        .push(("CARILLON_SECRETS_KEY", KEY_A.to_owned()));
    let node = NodeProcess::start(spec).await;
    let _executor = support::executor::Executor::start_registered(&node, "py", "e1").await;
    let (status, _) = put(&node, "db-password", "", json!({"value": VALUE})).await;
    assert_eq!(status, 201);
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": "uses-secret", "app": "py", "handler": "secrets",
                "schedule": {"manual": true}, "secrets": ["db-password"]}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    assert_eq!(job["secrets"], json!(["db-password"]));
    assert!(!job.to_string().contains(VALUE), "{job}");
    let detail = run_once(&node, job["id"].as_i64().unwrap()).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    let digest: String = sha2::Sha256::digest(VALUE.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        detail["attempts"][0]["output"]["sha256"],
        json!({"db-password": digest}),
        "{detail}"
    );

    let (status, missing) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": "needs-missing", "app": "py", "handler": "secrets",
                "schedule": {"manual": true}, "secrets": ["not-set"]}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{missing}");
    let detail = run_once(&node, missing["id"].as_i64().unwrap()).await;
    assert_eq!(detail["state"], "failed", "{detail}");
    let error = detail["attempts"][0]["error"].as_str().unwrap();
    assert!(error.contains("\"not-set\" is not set"), "{error}");

    let (status, refused) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "bad", "schedule": {"manual": true},
                "http": {"url": "http://127.0.0.1:9/"}, "secrets": ["db-password"]})),
        )
        .await;
    assert_eq!(
        (status, &refused["field"]),
        (400, &json!("secrets")),
        "{refused}"
    );
    let (status, refused) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "bad", "app": "py", "handler": "secrets",
                "schedule": {"manual": true}, "secrets": ["bad name"]})),
        )
        .await;
    assert_eq!(
        (status, &refused["field"]),
        (400, &json!("secrets[0]")),
        "{refused}"
    );
}

/// Triggers job `id` and answers its run's detail once it ended.
async fn run_once(node: &NodeProcess, id: i64) -> Value {
    let (status, run) = node
        .call(Method::POST, &format!("/api/v1/jobs/{id}/trigger"), None)
        .await;
    assert_eq!(status, 202, "{run}");
    let run = run["id"].as_i64().unwrap();
    support::wait_for(
        std::time::Duration::from_secs(30),
        &format!("run {run} to end"),
        || async {
            let (_, detail) = node
                .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
                .await;
            ["succeeded", "failed", "cancelled", "no_executor"]
                .contains(&detail["state"].as_str().unwrap_or(""))
                .then_some(detail)
        },
    )
    .await
}

async fn put(node: &NodeProcess, name: &str, query: &str, body: Value) -> (u16, Value) {
    node.call(
        Method::PUT,
        &format!("/api/v1/secrets/{name}{query}"),
        Some(body),
    )
    .await
}

async fn list(node: &NodeProcess, query: &str) -> Vec<Value> {
    let (status, list) = node
        .call(Method::GET, &format!("/api/v1/secrets{query}"), None)
        .await;
    assert_eq!(status, 200, "{list}");
    list["secrets"].as_array().unwrap().clone()
}

async fn names(node: &NodeProcess, query: &str) -> Vec<String> {
    list(node, query)
        .await
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn rotate(node: &NodeProcess) -> Value {
    let (status, done) = node
        .call(Method::POST, "/api/v1/secrets/rotate", None)
        .await;
    assert_eq!(status, 200, "{done}");
    done
}
