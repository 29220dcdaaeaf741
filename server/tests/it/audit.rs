//! The audit trail through a real node, on every backend: every operation of the served
//! document that changes something leaves exactly one event naming its caller, source,
//! operation and outcome, whether it was done, failed or was refused; a namespace's admin
//! reads its own namespace's events only; events are listed by time and deleted by the
//! leader once older than `retention.audit`; a job's change and its event are stored in one
//! transaction.
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
    [
        every_change_and_every_refusal_leaves_one_event,
        a_change_and_its_event_are_stored_together,
        events_are_filtered_by_time_and_kept_for_the_retention_setting,
        an_edit_records_what_it_changed
    ]
);
for_engine!(
    mysql,
    Mysql,
    [
        every_change_and_every_refusal_leaves_one_event,
        a_change_and_its_event_are_stored_together,
        events_are_filtered_by_time_and_kept_for_the_retention_setting,
        an_edit_records_what_it_changed
    ]
);
for_engine!(
    sqlite,
    Sqlite,
    [
        every_change_and_every_refusal_leaves_one_event,
        a_change_and_its_event_are_stored_together,
        events_are_filtered_by_time_and_kept_for_the_retention_setting,
        an_edit_records_what_it_changed
    ]
);

/// What the trail leaves out: reads, the preview, and the executor protocol's traffic.
const NOT_AUDITED: [&str; 4] = [
    "previewSchedule",
    "executorHeartbeat",
    "reportResult",
    "appendAttemptLogs",
];

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

/// The events of `operation`, newest first, as the admin token reads them.
async fn events_of(node: &NodeProcess, query: &str) -> Vec<Value> {
    let page = expect(
        node,
        Method::GET,
        &format!("/api/v1/audit?{query}&limit=1000"),
        None,
        200,
    )
    .await;
    page["events"].as_array().unwrap().clone()
}

async fn every_change_and_every_refusal_leaves_one_event(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("n1", &db.url, dir.path())).await;

    // Every changing operation of the document, called once with the admin token (no body,
    // and `1` for ids: most fail, which is recorded as well).
    let doc = expect(&node, Method::GET, "/api/v1/openapi.json", None, 200).await;
    let mut walked = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/v1/") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"].as_str().unwrap();
            if method == "get" || NOT_AUDITED.contains(&id) {
                continue;
            }
            let concrete = path.replace("{id}", "1").replace("{name}", "nothing-here");
            let (status, _) = node
                .call(method.to_uppercase().parse().unwrap(), &concrete, None)
                .await;
            walked.push((id.to_owned(), concrete, status));
        }
    }
    assert!(walked.len() >= 35, "{walked:?}");
    for (id, path, status) in &walked {
        let events = events_of(&node, &format!("operation={id}")).await;
        assert_eq!(events.len(), 1, "{id}: {events:?}");
        let event = &events[0];
        assert_eq!(event["actor"], "admin token", "{event}");
        assert_eq!(event["source"], "127.0.0.1", "{event}");
        assert_eq!(
            event["resource"],
            path.split('?').next().unwrap(),
            "{event}"
        );
        assert_eq!(event["status"], *status, "{event}");
        let outcome = if (200..300).contains(status) {
            "ok"
        } else {
            "failed"
        };
        assert_eq!(event["outcome"], outcome, "{event}");
    }
    // Reads leave nothing.
    expect(&node, Method::GET, "/api/v1/jobs", None, 200).await;
    assert!(events_of(&node, "operation=listJobs").await.is_empty());

    // A change that is done names what it touched; a refused one is recorded as refused, in
    // the namespace it aimed at, and one aimed at another namespace's resource too.
    for name in ["team-a", "team-b"] {
        expect(
            &node,
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": name})),
            201,
        )
        .await;
    }
    let mut tokens = Vec::new();
    for role in ["viewer", "operator", "admin"] {
        let made = expect(
            &node,
            Method::POST,
            "/api/v1/tokens?namespace=team-a",
            Some(json!({"name": role, "role": role})),
            201,
        )
        .await;
        tokens.push((
            made["token"].as_str().unwrap().to_owned(),
            made["id"].clone(),
        ));
    }
    let job = json!({"name": "nightly", "app": "billing", "handler": "report",
        "schedule": {"cron": "0 0 2 * * ?"}});
    let theirs = expect(
        &node,
        Method::POST,
        "/api/v1/jobs?namespace=team-b",
        Some(job.clone()),
        201,
    )
    .await;
    let (viewer, viewer_id) = &tokens[0];
    let (status, _) = node
        .call_as(viewer, Method::POST, "/api/v1/jobs", Some(job.clone()))
        .await;
    assert_eq!(status, 403);
    let (operator, operator_id) = &tokens[1];
    let stop = format!("/api/v1/jobs/{}/stop", theirs["id"]);
    let (status, _) = node.call_as(operator, Method::POST, &stop, None).await;
    assert_eq!(status, 404);
    let refused = events_of(&node, "outcome=refused").await;
    let found: Vec<(&Value, &Value, &Value, &Value)> = refused
        .iter()
        .map(|e| (&e["operation"], &e["namespace"], &e["actor"], &e["status"]))
        .collect();
    assert_eq!(
        found,
        [
            (
                &json!("stopJob"),
                &json!("team-b"),
                &json!(format!("token operator (#{operator_id})")),
                &json!(404)
            ),
            (
                &json!("createJob"),
                &json!("team-a"),
                &json!(format!("token viewer (#{viewer_id})")),
                &json!(403)
            ),
        ]
    );
    assert!(
        refused[1]["detail"].as_str().unwrap().contains("viewer"),
        "{refused:?}"
    );

    // team-a's admin reads team-a's events, and only those.
    let (admin, _) = &tokens[2];
    let (status, page) = node
        .call_as(admin, Method::GET, "/api/v1/audit", None)
        .await;
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().unwrap();
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e["namespace"] == "team-a"), "{page}");
    let (status, _) = node
        .call_as(admin, Method::GET, "/api/v1/audit?namespace=team-b", None)
        .await;
    assert_eq!(status, 404);
    let (status, _) = node
        .call_as(viewer, Method::GET, "/api/v1/audit", None)
        .await;
    assert_eq!(status, 403);
}

async fn events_are_filtered_by_time_and_kept_for_the_retention_setting(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, dir.path());
    spec.extra_env = vec![
        ("CARILLON_RETENTION_AUDIT", "6s".to_owned()),
        ("CARILLON_RETENTION_INTERVAL_MS", "300".to_owned()),
        // Several batches for the five.
        ("CARILLON_RETENTION_BATCH", "2".to_owned()),
    ];
    let node = NodeProcess::start(spec).await;
    for n in 0..5 {
        let body = Some(json!({"name": format!("early-{n}")}));
        expect(&node, Method::POST, "/api/v1/namespaces", body, 201).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let body = Some(json!({"name": "late"}));
    expect(&node, Method::POST, "/api/v1/namespaces", body, 201).await;

    let all = events_of(&node, "operation=createNamespace").await;
    assert_eq!(all.len(), 6, "{all:?}");
    let late_at = all[0]["at"].as_str().unwrap().to_owned();
    let since = events_of(&node, &format!("operation=createNamespace&since={late_at}")).await;
    assert_eq!(since.len(), 1, "{since:?}");
    assert!(
        since[0]["resource"]
            .as_str()
            .unwrap()
            .ends_with("/namespaces")
    );
    let until = events_of(&node, &format!("operation=createNamespace&until={late_at}")).await;
    assert_eq!(until.len(), 5, "{until:?}");
    let (status, refused) = node
        .call(Method::GET, "/api/v1/audit?since=yesterday", None)
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["field"], "since", "{refused}");

    // The five go once 6 s old; the late one stays until it is.
    support::wait_for(
        std::time::Duration::from_secs(20),
        "the early events to be deleted",
        || async {
            let left = events_of(&node, "operation=createNamespace").await;
            (left.len() == 1).then_some(left)
        },
    )
    .await;
    support::wait_for(
        std::time::Duration::from_secs(20),
        "the late event to be deleted",
        || async {
            events_of(&node, "operation=createNamespace")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

async fn an_edit_records_what_it_changed(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("n1", &db.url, dir.path())).await;
    let job = expect(
        &node,
        Method::POST,
        "/api/v1/jobs",
        Some(
            json!({"name": "nightly", "app": "billing", "handler": "report",
            "schedule": {"cron": "0 0 2 * * ?"}, "args": {"region": "eu"}}),
        ),
        201,
    )
    .await["id"]
        .as_i64()
        .unwrap();
    let patch = json!({"schedule": {"cron": "0 30 3 * * ?"}, "args": {"region": "eu"},
        "timeout_ms": 60000});
    let path = format!("/api/v1/jobs/{job}");
    expect(&node, Method::PATCH, &path, Some(patch), 200).await;
    let events = events_of(&node, "operation=updateJob").await;
    let changes = &events[0]["changes"];
    assert_eq!(
        changes,
        &json!([
            {"field": "policy.timeout_ms", "after": 60000},
            {"field": "schedule.cron", "before": "0 0 2 * * ?", "after": "0 30 3 * * ?"}
        ]),
        "{events:?}"
    );

    // A webhook's URL (chat webhooks carry their key in it) is shown by a fingerprint only.
    let secret = "https://hooks.example.com/services/T000/B000/very-secret-key";
    let body = Some(json!({"name": "team-a"}));
    expect(&node, Method::POST, "/api/v1/namespaces", body, 201).await;
    let patch = Some(json!({"alert_webhook": secret, "description": "billing"}));
    expect(
        &node,
        Method::PATCH,
        "/api/v1/namespaces/team-a",
        patch,
        200,
    )
    .await;
    let events = events_of(&node, "operation=updateNamespace").await;
    let changes = events[0]["changes"].as_array().unwrap();
    let fields: Vec<&str> = changes
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["alert_webhook", "description"], "{changes:?}");
    assert!(
        changes[0]["after"]
            .as_str()
            .unwrap()
            .contains("fingerprint")
    );
    assert!(
        !events[0].to_string().contains("very-secret-key"),
        "{events:?}"
    );

    // Calendars show their dates' changes; a first PUT, which creates, shows none.
    let path = "/api/v1/calendars/holidays";
    let first = Some(json!({"dates": ["2026-12-25"]}));
    expect(&node, Method::PUT, path, first, 201).await;
    let second = Some(json!({"dates": ["2026-12-25", "2027-01-01"]}));
    expect(&node, Method::PUT, path, second, 200).await;
    let events = events_of(&node, "operation=putCalendar").await;
    assert_eq!(events[0]["changes"][0]["field"], "dates", "{events:?}");
    assert!(events[1].get("changes").is_none(), "{events:?}");
}

/// A trigger that makes the database refuse every `ok` event: on each backend's own terms.
fn refuse_ok_events(engine: support::db::Engine) -> &'static str {
    match engine {
        support::db::Engine::Postgres => {
            "CREATE FUNCTION refuse_ok() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'the trail refuses ok events'; END $$; \
             CREATE TRIGGER refuse_ok BEFORE INSERT ON audit_events FOR EACH ROW \
             WHEN (NEW.outcome = 'ok') EXECUTE FUNCTION refuse_ok();"
        }
        support::db::Engine::Mysql => {
            "CREATE TRIGGER refuse_ok BEFORE INSERT ON audit_events FOR EACH ROW \
             BEGIN IF NEW.outcome = 'ok' THEN \
             SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'the trail refuses ok events'; \
             END IF; END"
        }
        support::db::Engine::Sqlite => {
            "CREATE TRIGGER refuse_ok BEFORE INSERT ON audit_events \
             WHEN NEW.outcome = 'ok' \
             BEGIN SELECT RAISE(ABORT, 'the trail refuses ok events'); END;"
        }
    }
}

/// A change is stored with its event or not at all: when the trail cannot take the event, no
/// job is created, edited, started or deleted, no namespace or token made, and the trail then
/// holds the call as failed (never as done).
async fn a_change_and_its_event_are_stored_together(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(NodeSpec::fast("n1", &db.url, dir.path())).await;
    let job = |name: &str| {
        json!({"name": name, "app": "billing", "handler": "work",
            "schedule": {"cron": "0 0 3 * * *"}})
    };
    let kept = expect(&node, Method::POST, "/api/v1/jobs", Some(job("kept")), 201).await;
    let path = format!("/api/v1/jobs/{}", kept["id"]);
    let task = |key: &str| {
        json!({"tasks": [{"app": "billing", "handler": "work", "key": key,
            "delay": "1h"}]})
    };
    let held = expect(
        &node,
        Method::POST,
        "/api/v1/tasks",
        Some(task("held")),
        201,
    )
    .await;
    let held = format!("/api/v1/tasks/{}", held["tasks"][0]["id"]);
    let flow = |name: &str, handler: &str| {
        json!({"name": name, "schedule": {"cron": "0 0 4 * * *"},
            "steps": [{"name": "only", "app": "billing", "handler": handler}]})
    };
    let kept_flow = expect(
        &node,
        Method::POST,
        "/api/v1/workflows",
        Some(flow("kept-flow", "work")),
        201,
    )
    .await;
    let flow_path = format!("/api/v1/workflows/{}", kept_flow["id"]);
    let count_jobs = || db.fetch_pairs("SELECT COUNT(*), COUNT(*) FROM jobs", &[]);
    let jobs_before = count_jobs().await;
    db.execute_script(refuse_ok_events(db.engine)).await;

    let calls = [
        (
            Method::POST,
            "/api/v1/jobs".to_owned(),
            Some(job("lost")),
            "createJob",
        ),
        (
            Method::POST,
            "/api/v1/jobs/bulk".to_owned(),
            Some(json!({"jobs": [job("lost-too")]})),
            "createJobs",
        ),
        (
            Method::PATCH,
            path.clone(),
            Some(json!({"description": "changed"})),
            "updateJob",
        ),
        (Method::POST, format!("{path}/start"), None, "startJob"),
        (Method::DELETE, path.clone(), None, "deleteJob"),
        (
            Method::POST,
            "/api/v1/namespaces".to_owned(),
            Some(json!({"name": "lost-team"})),
            "createNamespace",
        ),
        (
            Method::POST,
            "/api/v1/tokens".to_owned(),
            Some(json!({"name": "lost", "role": "viewer"})),
            "createToken",
        ),
        (
            Method::POST,
            "/api/v1/tasks".to_owned(),
            Some(task("lost")),
            "enqueueTasks",
        ),
        (Method::DELETE, held.clone(), None, "cancelTask"),
        (
            Method::POST,
            "/api/v1/workflows".to_owned(),
            Some(
                json!({"start": true, "name": "lost-flow", "schedule": {"cron": "0 0 4 * * *"},
                "steps": [{"name": "only", "app": "billing", "handler": "work"}]}),
            ),
            "createWorkflow",
        ),
        (
            Method::PUT,
            flow_path.clone(),
            Some(flow("kept-flow", "other-work")),
            "updateWorkflow",
        ),
    ];
    for (method, at, body, operation) in calls {
        let (status, answer) = node.call(method.clone(), &at, body).await;
        assert!(
            status >= 500,
            "{method} {at} was done without its event: {status} {answer}"
        );
        let events = events_of(&node, &format!("operation={operation}")).await;
        let after_trigger: Vec<&Value> = events
            .iter()
            .filter(|e| e["resource"] == at.as_str() && e["status"] == status)
            .collect();
        assert_eq!(after_trigger.len(), 1, "{operation}: {events:?}");
        assert_eq!(after_trigger[0]["outcome"], "failed", "{events:?}");
        assert!(
            events.iter().all(|e| e["outcome"] != "ok"
                || ["/api/v1/jobs", "/api/v1/tasks", "/api/v1/workflows"]
                    .contains(&e["resource"].as_str().unwrap())),
            "{operation}: {events:?}"
        );
    }
    // Nothing of it was stored: the job is as it was, and no other was made.
    let now = expect(&node, Method::GET, &path, None, 200).await;
    assert_eq!(now["description"], kept["description"], "{now}");
    assert_eq!(now["state"], "stopped", "{now}");
    let jobs = expect(&node, Method::GET, "/api/v1/jobs", None, 200).await;
    let names: Vec<&Value> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| &j["name"])
        .collect();
    assert_eq!(names, [&json!("kept")]);
    let namespaces = expect(&node, Method::GET, "/api/v1/namespaces", None, 200).await;
    assert!(
        !namespaces.to_string().contains("lost-team"),
        "{namespaces}"
    );
    let tokens = expect(&node, Method::GET, "/api/v1/tokens", None, 200).await;
    assert!(!tokens.to_string().contains("\"lost\""), "{tokens}");
    // No workflow row, step row or definition of the failed calls: the jobs table is as it
    // was, and the kept workflow's step is the one it had.
    assert_eq!(count_jobs().await, jobs_before);
    let flow_now = expect(&node, Method::GET, &flow_path, None, 200).await;
    assert_eq!(flow_now["steps"], kept_flow["steps"], "{flow_now}");
    assert_eq!(flow_now["version"], kept_flow["version"], "{flow_now}");
    let task_now = expect(&node, Method::GET, &held, None, 200).await;
    assert_eq!(task_now["state"], "pending", "{task_now}");
    let tasks = expect(&node, Method::GET, "/api/v1/tasks", None, 200).await;
    assert_eq!(tasks["items"].as_array().unwrap().len(), 1, "{tasks}");
    // The one done before the trigger is there, as done.
    let created = events_of(&node, "operation=createJob").await;
    assert_eq!(
        created.iter().filter(|e| e["outcome"] == "ok").count(),
        1,
        "{created:?}"
    );
}
