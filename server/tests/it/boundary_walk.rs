//! The boundary, walked from the node's own OpenAPI document: every `/api/v1` operation, called
//! by every kind of token (a service token of each role of `team-a`, `team-a`'s executor
//! token, the cluster's executor token, the read-only token, the admin token) and by every
//! kind of person (signed in with a real OpenID provider: a member of a group granted each
//! role in `team-a`, a viewer of `team-a` and `default`, a person with no role, the cluster's
//! viewers and admins), in the caller's own namespace, another team's and `default`, answers
//! what one table below says: allowed, refused (`403`) or nothing there (`404`). A refused
//! answer about another namespace carries nothing of it, and nothing of `team-b` is changed by
//! the walk. An operation the document has and the table lacks fails the walk (write its row),
//! as does a row whose operation is gone or whose need the document states otherwise.
//! XXL-JOB's endpoints, outside the document, refuse every token but their own.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::{BTreeMap, BTreeSet};

use crate::support;

use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::node::{NodeProcess, NodeSpec};
use support::oidc::{AUDIENCE, Provider, ProviderSpec};
use support::walk::{Fixtures, concrete, fixtures, operations};

for_engine!(
    postgres,
    Postgres,
    [every_operation_answers_every_token_as_its_row_says]
);
for_engine!(
    sqlite,
    Sqlite,
    [every_operation_answers_every_token_as_its_row_says]
);
for_engine!(
    postgres_people,
    Postgres,
    ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)",
    [every_operation_answers_every_person_as_their_row_says]
);
for_engine!(
    sqlite_people,
    Sqlite,
    ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)",
    [every_operation_answers_every_person_as_their_row_says]
);

/// What an operation needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    SignedIn,
    /// At least this role (an index into [`ROLES`]) in the namespace it works in.
    Role(usize),
    ClusterViewer,
    ClusterAdmin,
    Executor,
}

const ROLES: [&str; 4] = ["viewer", "operator", "editor", "admin"];
const VIEWER: Need = Need::Role(0);
const OPERATOR: Need = Need::Role(1);
const EDITOR: Need = Need::Role(2);
const ADMIN: Need = Need::Role(3);

/// Every `/api/v1` operation, by `operationId`, and what it needs: the table the node is held
/// to. (`/metrics`, outside `/api/v1`, is walked by `auth_scopes.rs`.)
const TABLE: &[(&str, Need)] = &[
    ("getCluster", Need::SignedIn),
    ("getOpenApi", Need::SignedIn),
    ("listNamespaces", Need::SignedIn),
    ("getNamespace", VIEWER),
    ("listJobs", VIEWER),
    ("getJob", VIEWER),
    ("listJobRuns", VIEWER),
    ("listJobBackfills", VIEWER),
    ("getBackfill", VIEWER),
    ("previewSchedule", VIEWER),
    ("listCalendars", VIEWER),
    ("getCalendar", VIEWER),
    ("listWorkflows", VIEWER),
    ("getWorkflow", VIEWER),
    ("listWorkflowRuns", VIEWER),
    ("getWorkflowRun", VIEWER),
    ("listRuns", VIEWER),
    ("getRun", VIEWER),
    ("listDeadLetters", VIEWER),
    ("getRunLogs", VIEWER),
    ("listTasks", VIEWER),
    ("getTask", VIEWER),
    ("listExecutors", VIEWER),
    ("getExecutor", VIEWER),
    ("listApps", VIEWER),
    ("listSecrets", VIEWER),
    ("startJob", OPERATOR),
    ("stopJob", OPERATOR),
    ("triggerJob", OPERATOR),
    ("backfillJob", OPERATOR),
    ("cancelBackfill", OPERATOR),
    ("startWorkflow", OPERATOR),
    ("stopWorkflow", OPERATOR),
    ("triggerWorkflow", OPERATOR),
    ("rerunWorkflowRun", OPERATOR),
    ("cancelWorkflowRun", OPERATOR),
    ("rerunRun", OPERATOR),
    ("cancelRun", OPERATOR),
    ("releaseRun", OPERATOR),
    ("enqueueTasks", OPERATOR),
    ("cancelTask", OPERATOR),
    ("cancelTaskByKey", OPERATOR),
    ("createJob", EDITOR),
    ("updateJob", EDITOR),
    ("deleteJob", EDITOR),
    ("createJobs", EDITOR),
    ("putCalendar", EDITOR),
    ("deleteCalendar", EDITOR),
    ("createWorkflow", EDITOR),
    ("updateWorkflow", EDITOR),
    ("deleteWorkflow", EDITOR),
    ("putSecret", EDITOR),
    ("deleteSecret", EDITOR),
    ("testHttpCall", EDITOR),
    ("updateNamespace", ADMIN),
    ("listTokens", ADMIN),
    ("createToken", ADMIN),
    ("revokeToken", ADMIN),
    ("listGrants", ADMIN),
    ("createGrant", ADMIN),
    ("revokeGrant", ADMIN),
    ("listAuditEvents", ADMIN),
    ("getStats", Need::ClusterViewer),
    ("createNamespace", Need::ClusterAdmin),
    ("deleteNamespace", Need::ClusterAdmin),
    ("drainExecutor", Need::ClusterAdmin),
    ("resumeExecutor", Need::ClusterAdmin),
    ("removeExecutor", Need::ClusterAdmin),
    ("purgeRuns", Need::ClusterAdmin),
    ("rotateSecrets", Need::ClusterAdmin),
    ("registerExecutor", Need::Executor),
    ("executorHeartbeat", Need::Executor),
    ("reportResult", Need::Executor),
    ("deregisterExecutor", Need::Executor),
    ("appendAttemptLogs", Need::Executor),
];

/// How the document names a need (`x-carillon-permission`).
fn named(need: Need) -> &'static str {
    match need {
        Need::SignedIn => "signed-in",
        Need::Role(rank) => ROLES[rank],
        Need::ClusterViewer => "cluster-viewer",
        Need::ClusterAdmin => "cluster-admin",
        Need::Executor => "executor",
    }
}

/// A kind of caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    /// A service token of `team-a` with this role.
    Service(usize),
    /// `team-a`'s `executor` service token.
    NamespaceExecutor,
    ClusterExecutor,
    ReadOnly,
    Admin,
    /// A person whose group has this role in `team-a`.
    Person(usize),
    /// A person whose groups are viewers of `team-a` and of `default`.
    ViewerOfTwo,
    /// A person whose groups have no role anywhere.
    NoRole,
    /// A person of `[auth.oidc] cluster_viewer_groups`.
    ClusterViewerPerson,
    /// A person of `[auth.oidc] cluster_admin_groups`.
    ClusterAdminPerson,
}

impl Caller {
    /// The namespaces it has a role in, as far as the walk goes (`None`: every one).
    fn homes(self) -> Option<&'static [&'static str]> {
        match self {
            Caller::ReadOnly | Caller::Admin => None,
            Caller::ClusterViewerPerson | Caller::ClusterAdminPerson => None,
            Caller::ViewerOfTwo => Some(&["team-a", "default"]),
            Caller::NoRole => Some(&[]),
            _ => Some(&["team-a"]),
        }
    }
}

/// What a call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Allowed,
    /// `403`.
    Refused,
    /// `404`: nothing there, for this caller.
    Hidden,
}

/// The row's answer for `caller` in `namespace`.
fn expected(need: Need, caller: Caller, namespace: &str) -> Answer {
    use Answer::{Allowed, Hidden, Refused};
    let executor = matches!(caller, Caller::NamespaceExecutor | Caller::ClusterExecutor);
    let own = caller
        .homes()
        .is_none_or(|homes| homes.contains(&namespace));
    match (need, caller) {
        (_, Caller::Admin) => Allowed,
        (Need::Executor, _) if executor => Allowed,
        (_, _) if executor => Refused,
        (Need::Executor, _) => Refused,
        (Need::SignedIn, _) => Allowed,
        (_, Caller::ClusterAdminPerson) => Allowed,
        (Need::ClusterViewer, Caller::ReadOnly | Caller::ClusterViewerPerson) => Allowed,
        (Need::ClusterViewer | Need::ClusterAdmin, _) => Refused,
        (Need::Role(0), Caller::ReadOnly | Caller::ClusterViewerPerson) => Allowed,
        (Need::Role(_), Caller::ReadOnly | Caller::ClusterViewerPerson) => Refused,
        // A caller whose best role falls short is refused wherever it asks (which tells
        // nothing of the namespace); one whose role would do is told of no namespace but its
        // own.
        (Need::Role(needed), Caller::Service(role) | Caller::Person(role)) if role < needed => {
            Refused
        }
        (Need::Role(needed), Caller::ViewerOfTwo) if needed > 0 => Refused,
        (Need::Role(_), Caller::NoRole) => Refused,
        (Need::Role(_), _) if !own => Hidden,
        (Need::Role(_), _) => Allowed,
    }
}

/// The strings only a namespace's own resources hold.
fn marks_of(namespace: &str) -> [String; 4] {
    ["job", "flow", "order", "app"].map(|kind| format!("{namespace}-{kind}"))
}

const CLUSTER_EXECUTOR: &str = "walk-cluster-executor-0123";
const READ_ONLY: &str = "walk-read-only-token-0123";
const XXL_TOKEN: &str = "walk-xxl-access-token-0123";

async fn expect(node: &NodeProcess, method: Method, path: &str, body: Option<Value>) -> Value {
    let (status, answer) = node.call(method.clone(), path, body).await;
    assert!(
        (200..300).contains(&status),
        "{method} {path}: {status} {answer}"
    );
    answer
}

/// A node with `team-a`, `team-b` and `default`, each with an executor of an app of its own
/// registered by the namespace's executor token (what `/executors/{id}` finds); the node and
/// `team-a`'s executor token.
async fn start(
    db: &TestDb,
    dir: &std::path::Path,
    settings: Option<String>,
) -> (NodeProcess, String) {
    let mut spec = NodeSpec::fast("n1", &db.url, dir);
    spec.extra_env = vec![
        // Secrets are stored only with a key, on a shared database.
        ("CARILLON_SECRETS_KEY", "ab".repeat(32)),
        ("CARILLON_EXECUTOR_TOKEN", CLUSTER_EXECUTOR.to_owned()),
        ("CARILLON_READ_ONLY_TOKEN", READ_ONLY.to_owned()),
        ("CARILLON_XXL_ACCESS_TOKEN", XXL_TOKEN.to_owned()),
    ];
    if let Some(settings) = settings {
        let path = dir.join("carillon.toml");
        std::fs::write(&path, settings).unwrap();
        spec.extra_env
            .push(("CARILLON_CONFIG", path.display().to_string()));
    }
    let node = NodeProcess::start(spec).await;
    let mut executor_token = String::new();
    for name in ["team-a", "team-b", "default"] {
        if name != "default" {
            let body = Some(json!({"name": name}));
            expect(&node, Method::POST, "/api/v1/namespaces", body).await;
        }
        let made = expect(
            &node,
            Method::POST,
            &format!("/api/v1/tokens?namespace={name}"),
            Some(json!({"name": "executors", "role": "executor"})),
        )
        .await;
        let token = made["token"].as_str().unwrap().to_owned();
        let (status, answer) = node
            .call_as(
                &token,
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
        if name == "team-a" {
            executor_token = token;
        }
    }
    (node, executor_token)
}

async fn every_operation_answers_every_token_as_its_row_says(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let (node, executor_token) = start(&db, dir.path(), None).await;
    let mut callers = vec![(Caller::NamespaceExecutor, executor_token)];
    for (rank, role) in ROLES.iter().enumerate() {
        let made = expect(
            &node,
            Method::POST,
            "/api/v1/tokens?namespace=team-a",
            Some(json!({"name": format!("{role}-bot"), "role": role})),
        )
        .await;
        callers.push((
            Caller::Service(rank),
            made["token"].as_str().unwrap().to_owned(),
        ));
    }
    callers.push((Caller::ClusterExecutor, CLUSTER_EXECUTOR.to_owned()));
    callers.push((Caller::ReadOnly, READ_ONLY.to_owned()));
    callers.push((Caller::Admin, support::node::TOKEN.to_owned()));
    walk(&node, &callers, &[Caller::Service(0), Caller::ReadOnly]).await;

    // XXL-JOB's endpoints take their own token and no other.
    for path in ["registry", "registryRemove", "callback"] {
        let url = node.url(&format!("/xxl-job-admin/api/{path}"));
        for (caller, token) in &callers {
            let answer: Value = carillon_tls::http_client()
                .unwrap()
                .post(&url)
                .header("XXL-JOB-ACCESS-TOKEN", token)
                .bearer_auth(token)
                .json(
                    &json!({"registryGroup": "EXECUTOR", "registryKey": "team-b-app",
                    "registryValue": "http://127.0.0.1:9"}),
                )
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(answer["code"], 500, "{path} as {caller:?}: {answer}");
            assert_eq!(answer["msg"], "The access token is wrong.", "{answer}");
        }
    }
    let executor = expect(
        &node,
        Method::GET,
        "/api/v1/executors/team-b-executor",
        None,
    )
    .await;
    assert_eq!(executor["state"], "active", "{executor}");
}

async fn every_operation_answers_every_person_as_their_row_says(db: TestDb) {
    let mut accounts = json!({"nobody": ["nowhere"], "two": ["team-a-viewer", "default-viewer"],
        "watcher": ["cluster-viewers"], "root": ["platform"]});
    for role in ROLES {
        accounts[role] = json!([format!("team-a-{role}")]);
    }
    let provider = Provider::start(&ProviderSpec {
        accounts,
        alg: "RS256",
        port: None,
    });
    let dir = tempfile::tempdir().unwrap();
    let settings = format!(
        "[auth.oidc]\nissuer = \"{}\"\naudience = \"{AUDIENCE}\"\n\
         cluster_admin_groups = [\"platform\"]\ncluster_viewer_groups = [\"cluster-viewers\"]\n",
        provider.issuer
    );
    let (node, _) = start(&db, dir.path(), Some(settings)).await;
    for role in ROLES {
        let grant = Some(json!({"group": format!("team-a-{role}"), "role": role}));
        expect(
            &node,
            Method::POST,
            "/api/v1/grants?namespace=team-a",
            grant,
        )
        .await;
    }
    let grant = Some(json!({"group": "default-viewer", "role": "viewer"}));
    expect(
        &node,
        Method::POST,
        "/api/v1/grants?namespace=default",
        grant,
    )
    .await;
    let sign_in = |login: &'static str| provider.sign_in(login, "carillon", AUDIENCE);
    let mut callers = Vec::new();
    for (rank, role) in ROLES.iter().enumerate() {
        callers.push((Caller::Person(rank), sign_in(role).await));
    }
    callers.push((Caller::ViewerOfTwo, sign_in("two").await));
    callers.push((Caller::NoRole, sign_in("nobody").await));
    callers.push((Caller::ClusterViewerPerson, sign_in("watcher").await));
    callers.push((Caller::ClusterAdminPerson, sign_in("root").await));
    let filtered = [
        Caller::Person(0),
        Caller::ViewerOfTwo,
        Caller::ClusterViewerPerson,
    ];
    walk(&node, &callers, &filtered).await;
}

/// Walks every operation of the document as each of `callers`, then checks that nothing of
/// `team-b` changed and that a filter by `team-b`'s job lists nothing for each of `filtered`.
async fn walk(node: &NodeProcess, callers: &[(Caller, String)], filtered: &[Caller]) {
    let mut round = 0;
    let mut fixtures_of: BTreeMap<&str, Fixtures> = BTreeMap::new();
    for name in ["team-a", "team-b", "default"] {
        fixtures_of.insert(name, fixtures(node, name, round).await);
    }
    let other_job = format!("/api/v1/jobs/{}", fixtures_of["team-b"].by_segment["jobs"]);
    let other_job_before = expect(node, Method::GET, &other_job, None).await;

    // The table and the document agree, row for operation.
    let operations = operations(node).await;
    let table: BTreeMap<&str, Need> = TABLE.iter().copied().collect();
    assert_eq!(table.len(), TABLE.len(), "a row written twice");
    let documented: BTreeSet<&str> = operations.iter().map(|op| op.id.as_str()).collect();
    let missing: Vec<&&str> = documented
        .iter()
        .filter(|id| !table.contains_key(**id))
        .collect();
    assert!(
        missing.is_empty(),
        "operations without a row in the walk's table: {missing:?}"
    );
    let gone: Vec<&&str> = table
        .keys()
        .filter(|id| !documented.contains(**id))
        .collect();
    assert!(
        gone.is_empty(),
        "rows of operations the document does not have: {gone:?}"
    );

    let mut opened = BTreeMap::<usize, usize>::new();
    let mut calls = 0;
    for op in &operations {
        let need = table[op.id.as_str()];
        assert_eq!(
            op.need,
            named(need),
            "{} {} ({})",
            op.method,
            op.path,
            op.id
        );
        for (caller, token) in callers {
            // Where the answer may depend on the namespace, each of the three; the cluster's
            // callers are walked in their own (`default`) and `team-a`, so `team-b` is only
            // ever reached by calls that must be refused.
            let spaces: &[&str] = match (need, caller.homes()) {
                (Need::Role(_), None) => &["team-a", "default"],
                (Need::Role(_), Some(_)) => &["team-a", "team-b", "default"],
                _ => &["team-a"],
            };
            for &namespace in spaces {
                let own = namespace == "team-a";
                let answer = expected(need, *caller, namespace);
                // A caller of one namespace that names none works in it.
                let name_it = !(own && matches!(caller, Caller::Service(_) | Caller::Person(_)));
                let path = concrete(op, &fixtures_of[namespace], namespace, name_it);
                let (status, body) = node.call_as(token, op.method.clone(), &path, None).await;
                calls += 1;
                let what = format!(
                    "{} {path} ({}, needs {}) as {caller:?}: {status} {body}",
                    op.method, op.id, op.need
                );
                match answer {
                    Answer::Allowed => {
                        assert!(status != 401 && status != 403, "{what}");
                        // Its own resources are found (a `404` here would be the check
                        // hiding them from their own namespace).
                        if op.path.contains("{id}") || op.path.contains("{name}") {
                            assert_ne!(status, 404, "{what}");
                        }
                        if let Caller::Service(rank) | Caller::Person(rank) = caller {
                            *opened.entry(*rank).or_default() += 1;
                        }
                        if op.method == Method::DELETE {
                            round += 1;
                            let renewed = fixtures(node, namespace, round).await;
                            fixtures_of.insert(namespace, renewed);
                        }
                    }
                    Answer::Refused => assert_eq!(status, 403, "{what}"),
                    Answer::Hidden => assert_eq!(status, 404, "{what}"),
                }
                if answer != Answer::Allowed && !own {
                    let text = body.to_string();
                    for mark in marks_of(namespace) {
                        assert!(!text.contains(&mark), "{what}: tells of {mark}");
                    }
                }
            }
        }
    }
    assert!(calls > 800, "{calls} calls");
    // Each role opens more than the one before it.
    let counts: Vec<usize> = (0..ROLES.len()).map(|rank| opened[&rank]).collect();
    assert!(
        counts.windows(2).all(|pair| pair[0] < pair[1]),
        "{opened:?}"
    );

    // Nothing of team-b was touched by all of that.
    let other = &fixtures_of["team-b"];
    for (segment, id) in &other.by_segment {
        let path = match *segment {
            "tokens" | "grants" => format!("/api/v1/{segment}?namespace=team-b"),
            _ => format!("/api/v1/{segment}/{id}"),
        };
        let answer = expect(node, Method::GET, &path, None).await;
        if *segment == "tokens" || *segment == "grants" {
            // The fixture's, and for tokens the namespace's executor token.
            let kept = if *segment == "tokens" { 2 } else { 1 };
            assert_eq!(answer[*segment].as_array().unwrap().len(), kept, "{answer}");
        }
    }
    let now = expect(node, Method::GET, &other_job, None).await;
    assert_eq!(
        (&now["state"], &now["version"]),
        (&other_job_before["state"], &other_job_before["version"]),
        "{now}"
    );
    let runs = expect(node, Method::GET, &format!("{other_job}/runs"), None).await;
    let manual = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["trigger"] == "manual")
        .count();
    assert_eq!(manual, 1, "no run of team-b's job was added: {runs}");
    let executor = expect(node, Method::GET, "/api/v1/executors/team-b-executor", None).await;
    assert_eq!(executor["app"], "team-b-app", "{executor}");
    assert_eq!(executor["state"], "active", "{executor}");

    // A filter cannot widen a listing: by another namespace's job, nothing, for each of
    // `filtered` asking in the namespace it works in.
    let other_job_id = other.by_segment["jobs"];
    for &caller in filtered {
        let token = &callers.iter().find(|(c, _)| *c == caller).unwrap().1;
        for listing in ["runs", "dead-letters"] {
            let path = format!("/api/v1/{listing}?job_id={other_job_id}");
            let (status, listed) = node.call_as(token, Method::GET, &path, None).await;
            assert_eq!(status, 200, "{path} as {caller:?}: {listed}");
            assert_eq!(listed["runs"], json!([]), "{path} as {caller:?}: {listed}");
        }
    }
}
