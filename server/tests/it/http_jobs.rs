//! HTTP jobs end to end, on every backend, against a real HTTP server of the test: a call
//! carries its templates filled from the run and a header read from a secret (never stored in
//! clear), its answer is the run's output; a failing status is retried; a slow call neither
//! holds up other calls nor is lost; redirects are not followed; success can require a value in
//! the answer; a call outside `egress.allowed_networks`, or naming a secret that is not
//! set, fails saying so; a test call answers what came back and records no run; bad
//! documents are refused naming the field.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::{TestDb, fetch_rows};
use support::node::{NodeProcess, NodeSpec};
use support::runs::{create_job as create, trigger};
use support::wait_for;

for_engine!(
    postgres,
    Postgres,
    [http_jobs_call_urls_with_secrets_retry_and_never_block]
);
for_engine!(
    mysql,
    Mysql,
    [http_jobs_call_urls_with_secrets_retry_and_never_block]
);
for_engine!(
    sqlite,
    Sqlite,
    [http_jobs_call_urls_with_secrets_retry_and_never_block]
);

const KEY: &str = "1f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";
const TOKEN: &str = "Bearer tok-in-clear-4242";

/// A request the test server received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path_and_query: String,
    authorization: Option<String>,
    run_header: Option<String>,
    content_type: Option<String>,
    body: String,
}

#[derive(Clone, Default)]
struct Target {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Target {
    fn seen(&self, path: &str) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.path_and_query.split('?').next() == Some(path))
            .cloned()
            .collect()
    }
}

async fn answer(State(target): State<Target>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
    let path = parts.uri.path().to_owned();
    let seen = Seen {
        method: parts.method.to_string(),
        path_and_query: parts.uri.to_string(),
        authorization: header("authorization"),
        run_header: header("x-run"),
        content_type: header("content-type"),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let seen_authorization = seen.authorization.clone();
    let count = {
        let mut all = target.seen.lock().unwrap();
        all.push(seen);
        all.iter()
            .filter(|s| s.path_and_query.split('?').next() == Some(path.as_str()))
            .count()
    };
    match path.as_str() {
        "/ok" => axum::Json(json!({"ok": true, "n": count})).into_response(),
        // Fails its first call, then answers.
        "/flaky" if count == 1 => (StatusCode::INTERNAL_SERVER_ERROR, "not yet").into_response(),
        "/flaky" => (StatusCode::OK, "fine now").into_response(),
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            axum::Json(json!({"slow": true})).into_response()
        }
        "/state" => axum::Json(json!({"state": "failed"})).into_response(),
        // Echoes the request's Authorization header, as a careless endpoint would.
        "/echo" => axum::Json(json!({"you_sent": seen_authorization})).into_response(),
        "/redirect" => (StatusCode::FOUND, [("location", "/ok")]).into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn serve() -> (Target, String) {
    let target = Target::default();
    let app = axum::Router::new()
        .fallback(answer)
        .with_state(target.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (target, base)
}

fn http_job(name: &str, http: Value, extra: Value) -> Value {
    let mut doc = json!({"name": name, "http": http, "schedule": {"manual": true}});
    for (k, v) in extra.as_object().unwrap() {
        doc[k] = v.clone();
    }
    doc
}

/// The run's detail once it ended, and when the test saw it end.
async fn ended(node: &NodeProcess, run: i64) -> (Value, Instant) {
    let detail = support::runs::ended(node, run).await;
    (detail, Instant::now())
}

async fn http_jobs_call_urls_with_secrets_retry_and_never_block(db: TestDb) {
    let (target, base) = serve().await;
    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, home.path());
    // Loopback only, where the tests' target listens.
    spec.extra_env = vec![
        ("CARILLON_SECRETS_KEY", KEY.to_owned()),
        ("CARILLON_EGRESS_ALLOWED_NETWORKS", "loopback".to_owned()),
    ];
    let node = NodeProcess::start(spec).await;
    let (status, _) = node
        .call(
            Method::PUT,
            "/api/v1/secrets/hook-token",
            Some(json!({"value": TOKEN})),
        )
        .await;
    assert_eq!(status, 201);

    // A call with every kind of template value and a secret header.
    let post = create(
        &node,
        http_job(
            "post",
            json!({"method": "POST", "url": format!("{base}/ok?at={{{{instant}}}}&day={{{{args.day}}}}"),
                   "headers": {"Authorization": {"secret": "hook-token"}, "X-Run": "{{run_id}}"},
                   "body": "{\"day\": \"{{args.day}}\", \"shard\": {{shard.index}}, \"job\": \"{{job}}\"}"}),
            json!({"args": {"day": "mon day"}}),
        ),
    )
    .await;
    let run = trigger(&node, post).await;
    let (detail, _) = ended(&node, run).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    let attempt = &detail["attempts"][0];
    assert_eq!(attempt["output"]["status"], 200, "{attempt}");
    assert_eq!(attempt["output"]["body"]["ok"], true, "{attempt}");
    assert_eq!(attempt["executor_id"], "http@n1", "{attempt}");
    let seen = target.seen("/ok");
    assert_eq!(seen.len(), 1, "{seen:?}");
    let call = &seen[0];
    assert_eq!(call.method, "POST");
    assert_eq!(call.authorization.as_deref(), Some(TOKEN));
    assert_eq!(call.run_header.as_deref(), Some(run.to_string().as_str()));
    assert_eq!(call.content_type.as_deref(), Some("application/json"));
    let body: Value = serde_json::from_str(&call.body).unwrap();
    assert_eq!(body, json!({"day": "mon day", "shard": 0, "job": "post"}));
    let instant = detail["scheduled_at"].as_str().unwrap().replace(':', "%3A");
    assert_eq!(
        call.path_and_query,
        format!("/ok?at={instant}&day=mon%20day"),
        "template values in a URL are percent-encoded"
    );
    // The job shows the secret's name, never its value; nor does the database hold it.
    let (_, job) = node
        .call(Method::GET, &format!("/api/v1/jobs/{post}"), None)
        .await;
    assert_eq!(
        job["http"]["headers"]["Authorization"],
        json!({"secret": "hook-token"})
    );
    assert_eq!(job["app"], "http");
    assert!(job.get("warnings").is_none(), "{job}");
    let stored: Vec<(String,)> = fetch_rows(
        db.engine,
        &db.url,
        &format!("SELECT policy_json FROM jobs WHERE job_id = {post}"),
        &[],
    )
    .await;
    assert!(!stored[0].0.contains("tok-in-clear"), "{}", stored[0].0);

    // A failing status fails the attempt; the retry policy calls again.
    let flaky = create(
        &node,
        http_job(
            "flaky",
            json!({"url": format!("{base}/flaky")}),
            json!({"retry": {"max_attempts": 2, "initial_delay_ms": 100, "max_delay_ms": 100}}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, flaky).await).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{detail}");
    assert_eq!(attempts[0]["error"], "the URL answered 500", "{detail}");
    assert_eq!(attempts[1]["output"]["body"], "fine now", "{detail}");

    // A slow call is recorded as running and ended by its answer; meanwhile another call is
    // made and answered at once.
    let slow = create(
        &node,
        http_job("slow", json!({"url": format!("{base}/slow")}), json!({})),
    )
    .await;
    let slow_run = trigger(&node, slow).await;
    wait_for(
        Duration::from_secs(10),
        "the slow call to be made",
        || async { (!target.seen("/slow").is_empty()).then_some(()) },
    )
    .await;
    let quick_run = trigger(&node, post).await;
    // Watched side by side: each is seen ending when it ends.
    let ((quick, quick_ended), (slow_detail, slow_ended)) =
        tokio::join!(ended(&node, quick_run), ended(&node, slow_run));
    assert_eq!(quick["state"], "succeeded", "{quick}");
    assert_eq!(slow_detail["state"], "succeeded", "{slow_detail}");
    assert_eq!(slow_detail["attempts"][0]["output"]["body"]["slow"], true);
    assert!(
        quick_ended < slow_ended,
        "a call waiting for a slow URL held up another"
    );
    assert_eq!(target.seen("/slow").len(), 1, "the slow call went once");

    // An answer that echoes a secret shows it as `***`.
    let echo = create(
        &node,
        http_job(
            "echo",
            json!({"url": format!("{base}/echo"), "headers": {"Authorization": {"secret": "hook-token"}}}),
            json!({}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, echo).await).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(
        detail["attempts"][0]["output"]["body"]["you_sent"], "***",
        "{detail}"
    );

    // Success can require a value in the answer.
    let state = create(
        &node,
        http_job(
            "state",
            json!({"url": format!("{base}/state"),
                   "success": {"json_pointer": "/state", "equals": "done"}}),
            json!({}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, state).await).await;
    assert_eq!(detail["state"], "failed", "{detail}");
    let error = detail["attempts"][0]["error"].as_str().unwrap();
    assert!(error.contains("\"failed\" at /state"), "{error}");

    // A redirect is an answer, not followed.
    let before = target.seen("/ok").len();
    let redirect = create(
        &node,
        http_job(
            "redirect",
            json!({"url": format!("{base}/redirect")}),
            json!({}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, redirect).await).await;
    assert_eq!(detail["state"], "failed", "{detail}");
    assert_eq!(detail["attempts"][0]["error"], "the URL answered 302");
    assert_eq!(
        target.seen("/ok").len(),
        before,
        "the redirect was followed"
    );

    // Outside the allowed networks (loopback here): refused as it is written.
    let (status, refused) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(http_job(
                "outside",
                json!({"url": "http://10.255.255.1:9/x"}),
                json!({}),
            )),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["field"], "http.url", "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("egress.allowed_networks"),
        "{refused}"
    );
    // A name is judged by the addresses it resolves to.
    let named = create(
        &node,
        http_job(
            "named",
            json!({"url": format!("{}/ok", base.replace("127.0.0.1", "localhost"))}),
            json!({}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, named).await).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");

    // A secret that is not set fails the call, naming it.
    let unset = create(
        &node,
        http_job(
            "unset",
            json!({"url": format!("{base}/ok"), "headers": {"Authorization": {"secret": "nope"}}}),
            json!({}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, unset).await).await;
    assert_eq!(detail["state"], "failed", "{detail}");
    let error = detail["attempts"][0]["error"].as_str().unwrap();
    assert!(error.contains("\"nope\" is not set"), "{error}");

    // A call past the job's timeout fails with no answer.
    let timed = create(
        &node,
        http_job(
            "timed",
            json!({"url": format!("{base}/slow")}),
            json!({"timeout_ms": 300}),
        ),
    )
    .await;
    let (detail, _) = ended(&node, trigger(&node, timed).await).await;
    assert!(
        ["failed", "timed_out"].contains(&detail["state"].as_str().unwrap()),
        "{detail}"
    );

    // A test call is made once, now, as a run would make it, and answers what came back;
    // no run is recorded.
    let runs_before =
        fetch_rows::<(i64,)>(db.engine, &db.url, "SELECT COUNT(*) FROM runs", &[]).await[0].0;
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/jobs/test-call",
            Some(
                json!({"http": {"method": "POST", "url": format!("{base}/ok"),
                "headers": {"Authorization": {"secret": "hook-token"}},
                "body": "{\"day\": \"{{args.day}}\"}"}, "args": {"day": "tue"}}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["succeeded"], true, "{answer}");
    assert_eq!(answer["output"]["body"]["ok"], true, "{answer}");
    let last = target.seen("/ok").pop().unwrap();
    assert_eq!(last.authorization.as_deref(), Some(TOKEN));
    assert_eq!(last.body, "{\"day\": \"tue\"}");
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/jobs/test-call",
            Some(json!({"http": {"url": "http://10.255.255.1:9/x"}})),
        )
        .await;
    assert_eq!(
        (status, &answer["succeeded"]),
        (200, &json!(false)),
        "{answer}"
    );
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("egress.allowed_networks"),
        "{answer}"
    );
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/jobs/test-call",
            Some(json!({"http": {"url": "gopher://x"}})),
        )
        .await;
    assert_eq!(
        (status, &answer["field"]),
        (400, &json!("http.url")),
        "{answer}"
    );
    let runs_after =
        fetch_rows::<(i64,)>(db.engine, &db.url, "SELECT COUNT(*) FROM runs", &[]).await[0].0;
    assert_eq!(runs_before, runs_after, "a test call recorded a run");

    // Bad documents are refused naming the field.
    for (doc, field) in [
        (
            http_job("bad", json!({"url": "ftp://x/"}), json!({})),
            "http.url",
        ),
        (
            http_job(
                "bad",
                json!({"url": format!("{base}/ok")}),
                json!({"app": "py"}),
            ),
            "app",
        ),
        (json!({"name": "bad", "schedule": {"manual": true}}), "app"),
        (
            http_job(
                "bad",
                json!({"url": format!("{base}/ok"), "headers": {"A": 1}}),
                json!({}),
            ),
            "http.headers.A",
        ),
    ] {
        let (status, refused) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["field"], field, "{refused}");
    }
}
