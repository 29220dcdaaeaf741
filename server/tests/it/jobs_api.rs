//! Jobs through the REST API of a real node on SQLite: create, read, list, update, start,
//! stop, trigger, delete; bad input; firing every second; misfire policies after a stop.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::node::{NodeProcess, Solo};
use support::wait_for;

async fn node(misfire_threshold_ms: u64) -> Solo {
    Solo::start(|spec| spec.misfire_threshold_ms = misfire_threshold_ms).await
}

fn every_second(name: &str) -> Value {
    json!({"name": name, "app": "billing", "handler": "report",
           "schedule": {"cron": "* * * * * *"}, "start": true})
}

/// Scheduled instants of a job's runs (trigger `schedule`/`misfire`), oldest first, in ms.
async fn instants(node: &NodeProcess, id: &Value) -> Vec<i64> {
    let (status, body) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs/{id}/runs?limit=1000"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut at: Vec<i64> = body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["trigger"] != "manual")
        .map(|r| {
            chrono::DateTime::parse_from_rfc3339(r["scheduled_at"].as_str().unwrap())
                .unwrap()
                .timestamp_millis()
        })
        .collect();
    at.sort();
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_created_read_listed_updated_and_deleted() {
    let node = node(60_000).await;
    let doc = json!({ "name": "nightly-report", "app": "billing", "handler": "report",
        "schedule": { "cron": "0 30 2 * * ?" }, "timezone": "Asia/Shanghai",
        "args": ["eu", "us", "apac"], "sharding": { "split": true }, "balance": "weighted",
        "retry": { "max_attempts": 3, "backoff": "exponential", "initial_delay_ms": 1000 },
        "timeout_ms": 600000, "misfire": "fire_once", "overlap": "skip", "priority": 5 });
    let (status, created) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["state"], "stopped", "created stopped unless asked");
    assert_eq!(created["retry"]["max_attempts"], 3);
    assert_eq!(created["timezone"], "Asia/Shanghai");
    let id = created["id"].clone();

    let (status, got) = node
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!((status, &got["name"]), (200, &json!("nightly-report")));

    // ETag / If-Match: an edit made from a stale read is refused.
    let response = carillon_tls::http_client()
        .unwrap()
        .get(node.url(&format!("/api/v1/jobs/{id}")))
        .bearer_auth(support::node::TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["etag"], "\"1\"");
    let stale = carillon_tls::http_client()
        .unwrap()
        .patch(node.url(&format!("/api/v1/jobs/{id}")))
        .bearer_auth(support::node::TOKEN)
        .header("if-match", "\"0\"")
        .json(&json!({"priority": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(stale.status(), 412);

    let (status, dup) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(every_second("nightly-report")),
        )
        .await;
    assert_eq!(status, 409, "{dup}");

    for i in 0..3 {
        node.call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": format!("etl-{i}"), "app": "etl",
            "handler": "load", "schedule": {"every": "1h"}})),
        )
        .await;
    }
    let (_, page) = node
        .call(Method::GET, "/api/v1/jobs?app=etl&limit=2", None)
        .await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let (_, rest) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs?app=etl&limit=2&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(rest["jobs"].as_array().unwrap().len(), 1);
    assert!(rest["next_cursor"].is_null());

    // Every sort pages through all jobs once, in its order.
    let walk = |sort: &'static str| {
        let node = &node;
        async move {
            let mut names = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut path = format!("/api/v1/jobs?app=etl&limit=2&sort={sort}");
                if let Some(c) = &cursor {
                    path.push_str(&format!("&cursor={c}"));
                }
                let (status, page) = node.call(Method::GET, &path, None).await;
                assert_eq!(status, 200, "{page}");
                for job in page["jobs"].as_array().unwrap() {
                    names.push(job["name"].as_str().unwrap().to_owned());
                }
                match page["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break names,
                }
            }
        }
    };
    assert_eq!(walk("name").await, ["etl-0", "etl-1", "etl-2"]);
    assert_eq!(walk("-name").await, ["etl-2", "etl-1", "etl-0"]);
    assert_eq!(walk("created").await, ["etl-0", "etl-1", "etl-2"]);
    assert_eq!(walk("-created").await, ["etl-2", "etl-1", "etl-0"]);
    // A cursor belongs to its sort; a made-up one and an unknown sort are named.
    let (status, problem) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs?app=etl&limit=2&sort=name&cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(
        (status, &problem["field"]),
        (400, &json!("cursor")),
        "{problem}"
    );
    for (query, field) in [
        ("cursor=5", "cursor"),
        ("sort=size", "sort"),
        ("limit=0", "limit"),
    ] {
        let (status, problem) = node
            .call(Method::GET, &format!("/api/v1/jobs?{query}"), None)
            .await;
        assert_eq!(
            (status, &problem["field"]),
            (400, &json!(field)),
            "{problem}"
        );
    }

    let (status, patched) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{id}"),
            Some(json!({"priority": 9, "version": 1})),
        )
        .await;
    assert_eq!(
        (status, &patched["priority"], &patched["version"]),
        (200, &json!(9), &json!(2))
    );
    let (status, stale) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{id}"),
            Some(json!({"priority": 1, "version": 1})),
        )
        .await;
    assert_eq!(status, 409, "{stale}");

    let (status, started) = node
        .call(Method::POST, &format!("/api/v1/jobs/{id}/start"), None)
        .await;
    assert_eq!((status, &started["state"]), (200, &json!("running")));
    assert!(
        started["next_fire_at"]
            .as_str()
            .unwrap()
            .ends_with("18:30:00.000Z"),
        "02:30 in Shanghai"
    );
    let (status, stopped) = node
        .call(Method::POST, &format!("/api/v1/jobs/{id}/stop"), None)
        .await;
    assert_eq!((status, &stopped["state"]), (200, &json!("stopped")));

    let (status, run) = node
        .call(Method::POST, &format!("/api/v1/jobs/{id}/trigger"), None)
        .await;
    assert_eq!(
        (status, &run["trigger"], &run["state"]),
        (202, &json!("manual"), &json!("pending"))
    );

    let (status, _) = node
        .call(Method::DELETE, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, gone) = node
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, 404);
    assert_eq!(gone["type"], "urn:carillon:problem:not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_jobs_and_schedules_get_a_400_naming_the_field() {
    let node = node(60_000).await;
    let with = |schedule: Value, timezone: &str| json!({"name": "bad", "app": "a", "handler": "h", "schedule": schedule, "timezone": timezone});
    let huge = "1,".repeat(512 * 1024);
    let cases = [
        (with(json!({"cron": ""}), "UTC"), "schedule.cron"),
        (with(json!({"cron": "0 25 * * *"}), "UTC"), "schedule.cron"),
        (
            with(json!({"cron": "0 61 * * * ?"}), "UTC"),
            "schedule.cron",
        ),
        (
            with(
                json!({"rrule": "DTSTART:20260101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=0"}),
                "UTC",
            ),
            "schedule.rrule",
        ),
        (
            with(
                json!({"rrule": "DTSTART:20260101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}),
                "UTC",
            ),
            "schedule",
        ),
        (with(json!({"cron": "0 0 30 2 *"}), "UTC"), "schedule"),
        (
            with(json!({"cron": "* * * * *"}), "Mars/Olympus_Mons"),
            "timezone",
        ),
        (with(json!({"cron": huge}), "UTC"), "schedule.cron"),
        (
            with(json!({"at": "2020-01-01T00:00:00Z"}), "UTC"),
            "schedule.at",
        ),
        (
            with(json!({"cron": "* * * * *", "every": "1m"}), "UTC"),
            "schedule",
        ),
        (
            json!({"name": "x", "app": "a", "handler": "h", "schedule": {"every": "1m"}, "priority": "high"}),
            "priority",
        ),
        (
            json!({"name": "x", "app": "a", "schedule": {"every": "1m"}}),
            "handler",
        ),
        (
            json!({"name": "x", "app": "a", "handler": "h", "schedule": {"every": "1m"}, "colour": 1}),
            "colour",
        ),
    ];
    for (doc, field) in cases {
        let (status, problem) = node
            .call(Method::POST, "/api/v1/jobs", Some(doc.clone()))
            .await;
        assert_eq!(status, 400, "{doc:.200}: {problem}");
        assert_eq!(problem["field"], field, "{problem}");
        assert_eq!(problem["type"], "urn:carillon:problem:invalid-field");
        let detail = problem["detail"].as_str().unwrap();
        assert!(detail.len() < 500, "the detail does not echo a huge input");
    }
    // What a field must be, in the API's words, never serde's (no Rust type names).
    for (doc, field, detail) in [
        (
            json!({"name": "x", "app": "a", "handler": "h", "schedule": {"every": "1m"}, "priority": "high"}),
            "priority",
            r#"must be an integer, not the string "high""#,
        ),
        (
            json!({"name": "x", "app": "a", "handler": "h", "schedule": {"every": "1m"}, "overlap": "sometimes"}),
            "overlap",
            r#""sometimes" is not one of allow, skip, queue, replace"#,
        ),
        (
            json!({"name": "x", "app": "a", "schedule": {"every": "1m"}}),
            "handler",
            "is required",
        ),
    ] {
        let (status, problem) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
        assert_eq!(
            (status, &problem["field"]),
            (400, &json!(field)),
            "{problem}"
        );
        assert_eq!(problem["detail"], format!("{field}: {detail}"), "{problem}");
    }
    let (status, problem) = node.call_raw("/api/v1/jobs", b"{not json".to_vec()).await;
    assert_eq!((status, &problem["field"]), (400, &json!("body")));
    let (status, _) = node
        .call_raw("/api/v1/jobs", vec![b' '; 3 * 1024 * 1024])
        .await;
    assert_eq!(status, 413);

    // The preview refuses the same schedules and lists valid ones in UTC and local time.
    let (status, problem) = node
        .call(Method::POST, "/api/v1/schedules/preview",
              Some(json!({"schedule": {"rrule": "DTSTART:20260101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}})))
        .await;
    assert_eq!((status, &problem["field"]), (400, &json!("schedule.rrule")));
    let (status, preview) = node
        .call(
            Method::POST,
            "/api/v1/schedules/preview",
            Some(json!({
            "schedule": {"cron": "30 2 * * *"}, "timezone": "America/New_York",
            "after": "2026-03-07T00:00:00Z", "count": 3})),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["instants"][1]["utc"], "2026-03-08T07:30:00.000Z");
    assert_eq!(
        preview["instants"][1]["local"],
        "2026-03-08T03:30:00.000-04:00"
    );
    let (status, _) = node.call(Method::GET, "/api/v1/jobs/12345", None).await;
    assert_eq!(status, 404);
    let (status, problem) = node
        .call(Method::GET, "/api/v1/jobs/not-a-number", None)
        .await;
    assert_eq!((status, &problem["field"]), (400, &json!("id")));
    let (status, problem) = node
        .call(Method::GET, "/api/v1/jobs?limit=lots", None)
        .await;
    assert_eq!((status, &problem["field"]), (400, &json!("limit")));
    assert_eq!(
        problem["detail"], "limit: must be a whole number",
        "{problem}"
    );
    let (status, problem) = node
        .call(Method::GET, "/api/v1/jobs?colour=red", None)
        .await;
    assert_eq!(
        (status, &problem["field"]),
        (400, &json!("colour")),
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .starts_with(r#"colour: unknown field "colour" (known: app, state"#),
        "{problem}"
    );
    let (status, problem) = node.call(Method::GET, "/api/v1/jobs?limit=0", None).await;
    assert_eq!((status, &problem["field"]), (400, &json!("limit")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_fires_each_second_once_and_follows_edits_and_stops() {
    let node = node(60_000).await;
    let (status, job) = node
        .call(Method::POST, "/api/v1/jobs", Some(every_second("tick")))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].clone();
    let fired = wait_for(Duration::from_secs(15), "five runs", || async {
        let at = instants(&node, &id).await;
        (at.len() >= 5).then_some(at)
    })
    .await;
    for pair in fired.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1_000,
            "one run per second, none missing: {fired:?}"
        );
    }

    // An edit reaches the owning node within about a second.
    let (status, _) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{id}"),
            Some(json!({"schedule": {"cron": "*/3 * * * * *"}})),
        )
        .await;
    assert_eq!(status, 200);
    let edited_at = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(7_000)).await;
    let after_edit: Vec<i64> = instants(&node, &id)
        .await
        .into_iter()
        .filter(|t| *t > edited_at + 1_500)
        .collect();
    assert!(!after_edit.is_empty());
    assert!(
        after_edit.iter().all(|t| (t / 1_000) % 3 == 0),
        "only multiples of 3 s: {after_edit:?}"
    );

    let (status, _) = node
        .call(Method::POST, &format!("/api/v1/jobs/{id}/stop"), None)
        .await;
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let settled = instants(&node, &id).await.len();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert_eq!(
        instants(&node, &id).await.len(),
        settled,
        "a stopped job does not fire"
    );

    let at = (chrono::Utc::now() + chrono::Duration::seconds(2)).to_rfc3339();
    let (status, once) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "once", "app": "a", "handler": "h",
            "schedule": {"at": at}, "start": true})),
        )
        .await;
    assert_eq!(status, 201, "{once}");
    let once_id = once["id"].clone();
    let done = wait_for(Duration::from_secs(10), "the one-shot to run", || async {
        let (_, job) = node
            .call(Method::GET, &format!("/api/v1/jobs/{once_id}"), None)
            .await;
        (job["state"] == "done").then_some(job)
    })
    .await;
    assert!(done["last_fired_at"].is_string());
    assert_eq!(instants(&node, &once_id).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misfire_policies_apply_when_a_job_is_started_again() {
    // Instants more than a second late count as missed.
    let node = node(1_000).await;
    let mut ids = Vec::new();
    for policy in ["fire_once", "skip", "catch_up"] {
        let mut doc = every_second(policy);
        doc["misfire"] = json!(policy);
        let (_, job) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
        ids.push(job["id"].clone());
    }
    for id in &ids {
        wait_for(Duration::from_secs(15), "runs", || async {
            (instants(&node, id).await.len() >= 2).then_some(())
        })
        .await;
        node.call(Method::POST, &format!("/api/v1/jobs/{id}/stop"), None)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    let mut before = Vec::new();
    for id in &ids {
        before.push(instants(&node, id).await);
        node.call(Method::POST, &format!("/api/v1/jobs/{id}/start"), None)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut misfires = Vec::new();
    for id in &ids {
        let (_, runs) = node
            .call(
                Method::GET,
                &format!("/api/v1/jobs/{id}/runs?limit=1000"),
                None,
            )
            .await;
        misfires.push(
            runs["runs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["trigger"] == "misfire")
                .count(),
        );
    }
    assert_eq!(misfires[0], 1, "fire_once: one catch-up run");
    assert_eq!(misfires[1], 0, "skip: none");
    assert!(
        misfires[2] >= 4,
        "catch_up: every missed second, got {}",
        misfires[2]
    );
    for (id, before) in ids.iter().zip(before) {
        let after = instants(&node, id).await;
        let mut unique = after.clone();
        unique.dedup();
        assert_eq!(unique.len(), after.len(), "no instant twice");
        assert!(after.len() > before.len(), "fires again after the start");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_created_in_bulk_all_or_none_each_bad_one_named_by_index() {
    let node = node(60_000).await;
    let (status, taken) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": "taken", "app": "billing", "handler": "report",
                        "schedule": {"manual": true}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{taken}");
    // Enough jobs for several statements and several milliseconds of ids; two of them run.
    let mut jobs: Vec<Value> = (0..5_000)
        .map(|i| {
            json!({"name": format!("bulk-{i}"), "app": "billing", "handler": "report",
                        "schedule": {"every": "1h"}})
        })
        .collect();
    jobs[7] = every_second("bulk-fires-a");
    jobs[4_000] = every_second("bulk-fires-b");
    let (status, created) = node
        .call(
            Method::POST,
            "/api/v1/jobs/bulk",
            Some(json!({ "jobs": jobs })),
        )
        .await;
    assert_eq!(status, 201, "{created:.500}");
    assert_eq!(created["created"], 5_000);
    let made = created["jobs"].as_array().unwrap();
    assert_eq!(made[7]["name"], "bulk-fires-a", "in the order sent");
    let ids: std::collections::HashSet<i64> =
        made.iter().map(|j| j["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), 5_000, "every id distinct");
    let (status, one) = node
        .call(
            Method::GET,
            &format!("/api/v1/jobs/{}", made[4_999]["id"]),
            None,
        )
        .await;
    assert_eq!((status, &one["name"]), (200, &json!("bulk-4999")), "{one}");
    assert_eq!(one["state"], "stopped", "created stopped unless start");
    for fires in [&made[7]["id"], &made[4_000]["id"]] {
        wait_for(Duration::from_secs(15), "a started job to fire", || async {
            (!instants(&node, fires).await.is_empty()).then_some(())
        })
        .await;
    }

    // Each bad job named by its index; nothing of the batch stored.
    let batch = json!({"jobs": [
        {"name": "fine-0", "app": "billing", "handler": "report", "schedule": {"every": "1m"}},
        {"name": "bad-cron", "app": "billing", "handler": "report", "schedule": {"cron": "0 61 * * * ?"}},
        {"name": "fine-2", "app": "billing", "handler": "report", "schedule": {"every": "1m"}, "priority": "high"},
        {"name": "taken", "app": "billing", "handler": "report", "schedule": {"every": "1m"}},
        {"name": "fine-0", "app": "billing", "handler": "report", "schedule": {"every": "1m"}},
        {"name": "fine-5", "app": "billing", "handler": "report", "schedule": {"every": "1m"}}
    ]});
    let (status, problem) = node
        .call(Method::POST, "/api/v1/jobs/bulk", Some(batch))
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["type"], "urn:carillon:problem:invalid-jobs");
    let errors: Vec<(i64, String)> = problem["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["index"].as_i64().unwrap(),
                e["field"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            (1, "schedule.cron".to_owned()),
            (2, "priority".to_owned()),
            (3, "name".to_owned()),
            (4, "name".to_owned()),
        ],
        "{problem}"
    );
    let message = |i: usize| problem["errors"][i]["message"].as_str().unwrap().to_owned();
    assert_eq!(message(1), r#"must be an integer, not the string "high""#);
    assert!(
        message(2).contains(&format!("taken by job {}", taken["id"])),
        "{problem}"
    );
    assert!(message(3).contains("jobs[0]"), "{problem}");
    let (_, listed) = node
        .call(Method::GET, "/api/v1/jobs?name=fine-", None)
        .await;
    assert_eq!(
        listed["jobs"],
        json!([]),
        "nothing of a refused batch is stored"
    );

    for (body, field) in [
        (json!({"jobs": []}), "jobs"),
        (json!({"jobs": {}}), "jobs"),
        (json!({"job": []}), "job"),
        (json!([]), "body"),
    ] {
        let (status, problem) = node
            .call(Method::POST, "/api/v1/jobs/bulk", Some(body))
            .await;
        assert_eq!(
            (status, &problem["field"]),
            (400, &json!(field)),
            "{problem}"
        );
    }
}

/// A job naming a handler that no executor of its app offers is accepted (executors may come
/// later), and its answers say so, naming what is offered, until an executor offers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_for_a_handler_nobody_offers_is_created_with_a_warning_naming_what_is_offered() {
    const EXECUTOR_TOKEN: &str = "warnings-executor-token-0123";
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()));
    })
    .await;
    let job = |name: &str, handler: &str| {
        json!({"name": name, "app": "demo", "handler": handler,
               "schedule": {"cron": "0 0 3 * * ?"}, "start": true})
    };
    let warnings = |answer: &Value| -> Vec<String> {
        answer["warnings"]
            .as_array()
            .map(|w| w.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };

    let (status, early) = node
        .call(Method::POST, "/api/v1/jobs", Some(job("early", "hello")))
        .await;
    assert_eq!(
        status, 201,
        "accepted before any executor registers: {early}"
    );
    let said = warnings(&early);
    assert_eq!(said.len(), 1, "{early}");
    assert!(
        said[0].contains(r#"no executor of app "demo" is registered"#)
            && said[0].contains("no_executor"),
        "{said:?}"
    );

    node.register_executor(
        EXECUTOR_TOKEN,
        json!({"protocol": 1, "executor_id": "demo-1", "app": "demo",
            "address": "http://127.0.0.1:9", "weight": 1, "capacity": 4,
            "handlers": [{"name": "reindex"}, {"name": "hello"}]}),
    )
    .await;

    let (status, typo) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(job("typo", "demo.hello")),
        )
        .await;
    assert_eq!(status, 201, "{typo}");
    assert_eq!(typo["handler"], "demo.hello", "stored as sent");
    assert_eq!(
        warnings(&typo),
        vec![
            r#"no executor of app "demo" offers handler "demo.hello"; they offer hello, reindex: its runs end `no_executor` unless an executor of app "demo" offering "demo.hello" registers (dispatch.no_executor_grace_ms)"#
        ],
        "{typo}"
    );
    // The same answer when the job is read, edited or stopped, and none once it is served.
    for (method, path, body) in [
        (Method::GET, format!("/api/v1/jobs/{}", typo["id"]), None),
        (
            Method::PATCH,
            format!("/api/v1/jobs/{}", typo["id"]),
            Some(json!({"args": [1]})),
        ),
        (
            Method::POST,
            format!("/api/v1/jobs/{}/stop", typo["id"]),
            None,
        ),
    ] {
        let (status, answer) = node.call(method, &path, body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(warnings(&answer).len(), 1, "{path}: {answer}");
    }
    let (status, fixed) = node
        .call(
            Method::PATCH,
            &format!("/api/v1/jobs/{}", typo["id"]),
            Some(json!({"handler": "hello"})),
        )
        .await;
    assert_eq!(status, 200, "{fixed}");
    assert!(fixed.get("warnings").is_none(), "{fixed}");
    let (_, early) = node
        .call(Method::GET, &format!("/api/v1/jobs/{}", early["id"]), None)
        .await;
    assert!(early.get("warnings").is_none(), "served now: {early}");
    // Lists carry no warnings: one lookup per job would slow every page.
    let (_, list) = node.call(Method::GET, "/api/v1/jobs", None).await;
    assert!(
        list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|j| j.get("warnings").is_none())
    );
}

/// Overlap `queue`: each way a run ends passes the job's turn to the next queued run, not only
/// an attempt's end: a run that found no executor, and a run cancelled through the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_starts_when_the_one_before_finds_no_executor_or_is_cancelled() {
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_NO_EXECUTOR_GRACE_MS", "1000".to_owned()));
    })
    .await;
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "queued", "app": "nobody", "handler": "work",
                "schedule": {"every": "1s"}, "overlap": "queue", "start": true})),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let runs = || async {
        let (status, page) = node
            .call(
                Method::GET,
                &format!("/api/v1/jobs/{}/runs?limit=1000", job["id"]),
                None,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        page["runs"].as_array().unwrap().clone()
    };
    let count = |runs: &[Value], state: &str| runs.iter().filter(|r| r["state"] == state).count();

    // Each run waits its second for an executor, ends `no_executor`, and the next goes.
    let ended = wait_for(
        Duration::from_secs(20),
        "three runs ended no_executor",
        || async {
            let runs = runs().await;
            (count(&runs, "no_executor") >= 3).then_some(runs)
        },
    )
    .await;
    assert!(
        count(&ended, "pending") + count(&ended, "running") <= 1,
        "one run at a time: {ended:#?}"
    );

    // A cancel passes the turn too. The pending run may end `no_executor` first (409): then
    // the next one is cancelled.
    let mut holder = Value::Null;
    for _ in 0..5 {
        holder = wait_for(Duration::from_secs(10), "a pending run", || async {
            runs().await.into_iter().find(|r| r["state"] == "pending")
        })
        .await;
        let (status, body) = node
            .call(
                Method::POST,
                &format!("/api/v1/runs/{}/cancel", holder["id"]),
                None,
            )
            .await;
        if status != 409 {
            assert!(status == 202 || status == 200, "{status} {body}");
            break;
        }
    }
    wait_for(Duration::from_secs(5), "the next run released", || async {
        let runs = runs().await;
        runs.iter()
            .any(|r| r["state"] == "pending" && r["id"].as_i64() > holder["id"].as_i64())
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_starts_and_stops_by_the_jobs_rules() {
    let node = node(60_000).await;
    let (status, flow) = node
        .call(
            Method::POST,
            "/api/v1/workflows",
            Some(json!({"name": "once", "schedule": {"every": "1s"},
                "bounds": {"max_runs": 1}, "start": true,
                "steps": [{"name": "only", "app": "nobody", "handler": "work"}]})),
        )
        .await;
    assert_eq!(status, 201, "{flow}");
    let path = format!("/api/v1/workflows/{}", flow["id"]);
    wait_for(
        Duration::from_secs(20),
        "its one run to be claimed",
        || async {
            let (_, flow) = node.call(Method::GET, &path, None).await;
            (flow["state"] == "done").then_some(())
        },
    )
    .await;

    // Its runs are used up: starting it again is refused, naming the field, as for a job.
    let (status, problem) = node
        .call(Method::POST, &format!("{path}/start"), None)
        .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["field"], "bounds.max_runs", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("the workflow has fired 1 of its 1 runs"),
        "{problem}"
    );

    // A workflow is stopped through its own API, never the jobs API; a deleted one is gone.
    let (status, problem) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/stop", flow["id"]),
            None,
        )
        .await;
    assert_eq!(status, 409, "{problem}");
    let (status, _) = node.call(Method::DELETE, &path, None).await;
    assert_eq!(status, 204);
    for action in ["start", "stop"] {
        let (status, problem) = node
            .call(Method::POST, &format!("{path}/{action}"), None)
            .await;
        assert_eq!(status, 404, "{action}: {problem}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_workflow_run_passes_its_turn_to_the_next_queued_run() {
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_NO_EXECUTOR_GRACE_MS", "600000".to_owned()));
    })
    .await;
    let (status, flow) = node
        .call(
            Method::POST,
            "/api/v1/workflows",
            Some(json!({"name": "queued-flow", "schedule": {"every": "1s"},
                "overlap": "queue", "start": true,
                "steps": [{"name": "only", "app": "nobody", "handler": "work"}]})),
        )
        .await;
    assert_eq!(status, 201, "{flow}");
    let runs_path = format!("/api/v1/workflows/{}/runs?limit=1000", flow["id"]);
    let runs = || async {
        let (status, page) = node.call(Method::GET, &runs_path, None).await;
        assert_eq!(status, 200, "{page}");
        page["runs"].as_array().unwrap().clone()
    };
    // The first run waits for an executor of its step; the next ones queue behind it.
    let first = wait_for(
        Duration::from_secs(20),
        "a run queued behind the first",
        || async {
            let runs = runs().await;
            let queued = runs.iter().any(|r| r["state"] == "queued");
            let holder = runs
                .iter()
                .find(|r| r["state"] == "running" || r["state"] == "pending")
                .cloned();
            holder.filter(|_| queued)
        },
    )
    .await;
    let (status, body) = node
        .call(
            Method::POST,
            &format!("/api/v1/workflow-runs/{}/cancel", first["id"]),
            None,
        )
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    wait_for(Duration::from_secs(10), "the next run released", || async {
        runs()
            .await
            .iter()
            .any(|r| {
                r["id"].as_i64() > first["id"].as_i64()
                    && (r["state"] == "pending" || r["state"] == "running")
            })
            .then_some(())
    })
    .await;
}
