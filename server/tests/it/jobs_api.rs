//! Jobs through the REST API of a real node on SQLite: create, read, list, update, start,
//! stop, trigger, delete; bad input, one job at a time or in bulk.
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

pub(super) async fn node(misfire_threshold_ms: u64) -> Solo {
    Solo::start(|spec| spec.misfire_threshold_ms = misfire_threshold_ms).await
}

pub(super) fn every_second(name: &str) -> Value {
    json!({"name": name, "app": "billing", "handler": "report",
           "schedule": {"cron": "* * * * * *"}, "start": true})
}

/// Scheduled instants of a job's runs (trigger `schedule`/`misfire`), oldest first, in ms.
pub(super) async fn instants(node: &NodeProcess, id: &Value) -> Vec<i64> {
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
