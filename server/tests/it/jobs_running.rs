//! Jobs as they run, through the REST API of a real node on SQLite: firing every second and
//! following edits, misfire policies after a stop, a handler nobody offers, runs queued behind
//! one another, and workflows started and stopped by their jobs' rules.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::node::Solo;
use support::wait_for;

use super::jobs_api::{every_second, instants, node};

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

/// A Quartz step after names (`MAR-MAY/2`) is read as Quartz 2.3 reads it, the step dropped,
/// so a job table brought from Quartz or XXL-JOB keeps its instants; the preview and the job's
/// answers say so, with the numbers that step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quartz_step_after_names_is_read_as_quartz_reads_it_and_said() {
    let node = Solo::start(|_| {}).await;
    let (status, preview) = node
        .call(
            Method::POST,
            "/api/v1/schedules/preview",
            Some(
                json!({"schedule": {"cron": "0 0 0 1 MAR-MAY/2 ?"}, "count": 4,
                "after": "2026-01-01T00:00:00Z"}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    let utc: Vec<&str> = preview["instants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["utc"].as_str().unwrap())
        .collect();
    assert_eq!(
        utc,
        [
            "2026-03-01T00:00:00.000Z",
            "2026-04-01T00:00:00.000Z",
            "2026-05-01T00:00:00.000Z",
            "2027-03-01T00:00:00.000Z"
        ]
    );
    let said = preview["warnings"][0].as_str().unwrap_or_default();
    assert!(
        said.contains("MAR-MAY/2") && said.contains("write 3-5/2"),
        "{preview}"
    );

    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(json!({"name": "spring", "app": "demo", "handler": "hello",
                "schedule": {"cron": "0 0 0 ? * SUN-SAT/2"}})),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let warnings = job["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("SUN-SAT/2")),
        "{job}"
    );
    // Written with numbers, it steps, and nothing is said.
    let (status, preview) = node
        .call(
            Method::POST,
            "/api/v1/schedules/preview",
            Some(json!({"schedule": {"cron": "0 0 0 1 3-5/2 ?"}, "count": 2,
                "after": "2026-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["instants"][1]["utc"], "2026-05-01T00:00:00.000Z");
    assert!(preview.get("warnings").is_none(), "{preview}");
}
