//! The schedule policies end to end, on each backend, with a real node and a real executor:
//! bounds (`not_before`, `not_after`, `max_runs`) end a job on their own; jitter delays each
//! run by the amount the preview shows; an exclusion calendar's instants are recorded as
//! skipped; a fixed delay counts from each run's end; `pause_after_failures` stops a job and
//! alerts; a backfill fires every instant of a past range once, however often it is asked.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::process::Command;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use support::db::TestDb;
use support::executor::{self, Executor};
use support::node::{NodeProcess, NodeSpec, TOKEN};
use support::wait_for;
use support::webhook::Receiver;

for_engine!(postgres, Postgres, [schedule_policies_work_end_to_end]);
for_engine!(mysql, Mysql, [schedule_policies_work_end_to_end]);
for_engine!(sqlite, Sqlite, [schedule_policies_work_end_to_end]);

const WAIT: Duration = Duration::from_secs(60);

async fn schedule_policies_work_end_to_end(db: TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("p1", &db.url, dir.path());
    spec.extra_env = executor::node_env();
    let node = NodeProcess::start(spec).await;
    let _py = Executor::start_registered(&node, "py", "py-1").await;
    let receiver = Receiver::start().await;
    // Each scenario has jobs of its own: they run side by side.
    tokio::join!(
        bounds_end_a_job(&node),
        jitter_delays_each_run_as_previewed(&node),
        calendars_skip_their_instants(&node),
        fixed_delay_counts_from_each_end(&node),
        failures_in_a_row_pause_a_job(&node, &receiver),
        backfill_fires_a_past_range_once(&node),
        the_cli_and_apply_files_take_every_policy(&node, dir.path()),
    );
}

fn iso(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn ms(text: &Value) -> i64 {
    DateTime::parse_from_rfc3339(text.as_str().unwrap())
        .unwrap()
        .timestamp_millis()
}

/// Now, on the next whole second (the node and the test share this machine's clock).
fn soon(seconds: i64) -> DateTime<Utc> {
    let now = Utc::now().timestamp();
    DateTime::from_timestamp(now + seconds, 0).unwrap()
}

async fn create(node: &NodeProcess, doc: Value) -> Value {
    let (status, job) = node.call(Method::POST, "/api/v1/jobs", Some(doc)).await;
    assert_eq!(status, 201, "{job}");
    job
}

async fn refused(node: &NodeProcess, method: Method, path: &str, doc: Value, field: &str) {
    let (status, body) = node.call(method, path, Some(doc)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["field"], field, "{body}");
}

async fn job(node: &NodeProcess, id: &Value) -> Value {
    let (status, job) = node
        .call(Method::GET, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert_eq!(status, 200, "{job}");
    job
}

/// The job's runs, oldest instant first.
async fn runs(node: &NodeProcess, id: &Value) -> Vec<Value> {
    let (status, body) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs?job_id={id}&limit=500"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut runs = body["runs"].as_array().unwrap().clone();
    runs.sort_by_key(|r| ms(&r["scheduled_at"]));
    runs
}

async fn wait_state(node: &NodeProcess, id: &Value, state: &str) -> Value {
    wait_for(WAIT, &format!("job {id} to be {state}"), || async {
        let job = job(node, id).await;
        (job["state"] == state).then_some(job)
    })
    .await
}

/// Waits until `pick` holds for the job's runs, and returns them.
async fn wait_runs(
    node: &NodeProcess,
    id: &Value,
    what: &str,
    pick: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    wait_for(WAIT, what, || async {
        let runs = runs(node, id).await;
        pick(&runs).then_some(runs)
    })
    .await
}

fn finished(runs: &[Value]) -> Vec<&Value> {
    runs.iter()
        .filter(|r| r["finished_at"].is_string())
        .collect()
}

async fn bounds_end_a_job(node: &NodeProcess) {
    let not_before = soon(3);
    let counted = create(
        node,
        json!({"name": "bounded", "app": "py", "handler": "echo", "schedule": {"every": "1s"},
               "bounds": {"not_before": iso(not_before), "max_runs": 3}, "start": true}),
    )
    .await;
    let done = wait_state(node, &counted["id"], "done").await;
    assert_eq!(done["fired"], 3, "{done}");
    let ran = wait_runs(node, &counted["id"], "the bounded runs to end", |r| {
        finished(r).len() == 3
    })
    .await;
    assert_eq!(ran.len(), 3, "exactly max_runs runs: {ran:?}");
    for run in &ran {
        assert!(
            ms(&run["scheduled_at"]) >= not_before.timestamp_millis(),
            "{run}"
        );
        assert_eq!(run["state"], "succeeded", "{run}");
    }
    // Started again, a job that used up its runs says so.
    refused(
        node,
        Method::POST,
        &format!("/api/v1/jobs/{}/start", counted["id"]),
        json!({}),
        "bounds.max_runs",
    )
    .await;

    let not_after = soon(3);
    let ending = create(
        node,
        json!({"name": "ending", "app": "py", "handler": "echo", "schedule": {"cron": "* * * * * ?"},
               "bounds": {"not_after": iso(not_after)}, "start": true}),
    )
    .await;
    wait_state(node, &ending["id"], "done").await;
    let runs = runs(node, &ending["id"]).await;
    assert!(!runs.is_empty());
    assert!(
        runs.iter()
            .all(|r| ms(&r["scheduled_at"]) <= not_after.timestamp_millis()),
        "{runs:?}"
    );
    assert_eq!(
        ms(&runs[runs.len() - 1]["scheduled_at"]),
        not_after.timestamp_millis(),
        "the last instant within the bounds fires"
    );

    refused(
        node,
        Method::POST,
        "/api/v1/jobs",
        json!({"name": "backwards", "app": "py", "handler": "echo", "schedule": {"every": "1s"},
               "bounds": {"not_before": "2030-01-02T00:00:00Z", "not_after": "2030-01-01T00:00:00Z"}}),
        "bounds.not_after",
    )
    .await;
}

async fn jitter_delays_each_run_as_previewed(node: &NodeProcess) {
    let jittery = create(
        node,
        json!({"name": "jittery", "app": "py", "handler": "echo", "schedule": {"cron": "* * * * * ?"},
               "jitter_ms": 700, "start": true}),
    )
    .await;
    let id = &jittery["id"];
    let runs = wait_runs(node, id, "six jittered runs", |r| finished(r).len() >= 6).await;
    node.call(Method::POST, &format!("/api/v1/jobs/{id}/stop"), None)
        .await;
    let mut delays = Vec::new();
    for run in finished(&runs).into_iter().take(6) {
        let (_, detail) = node
            .call(Method::GET, &format!("/api/v1/runs/{}", run["id"]), None)
            .await;
        let attempt = &detail["attempts"][0];
        let scheduled = ms(&run["scheduled_at"]);
        let delay = ms(&attempt["not_before"]) - scheduled;
        assert!((0..=700).contains(&delay), "delay {delay} ms: {detail}");
        assert!(
            ms(&attempt["dispatched_at"]) >= ms(&attempt["not_before"]),
            "{detail}"
        );
        // The preview names the same instant: every node computes the same jitter.
        let (status, preview) = node
            .call(
                Method::POST,
                "/api/v1/schedules/preview",
                Some(json!({"schedule": {"cron": "* * * * * ?"}, "count": 1, "jitter_ms": 700,
                            "job_id": id, "after": iso(DateTime::from_timestamp_millis(scheduled - 1).unwrap())})),
            )
            .await;
        assert_eq!(status, 200, "{preview}");
        assert_eq!(
            ms(&preview["instants"][0]["due"]),
            ms(&attempt["not_before"]),
            "{preview}"
        );
        delays.push(delay);
    }
    delays.sort_unstable();
    delays.dedup();
    assert!(
        delays.len() >= 3,
        "jitter varies from instant to instant: {delays:?}"
    );
}

async fn calendars_skip_their_instants(node: &NodeProcess) {
    let from = soon(4);
    let to = from + chrono::Duration::seconds(3);
    let wall = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let (status, calendar) = node
        .call(
            Method::PUT,
            "/api/v1/calendars/quiet_hours",
            Some(json!({"timezone": "UTC", "description": "a quiet spell",
                        "ranges": [{"from": wall(from), "to": wall(to)}]})),
        )
        .await;
    assert_eq!(status, 201, "{calendar}");
    assert_eq!(calendar["version"], 1);
    refused(
        node,
        Method::PUT,
        "/api/v1/calendars/bad",
        json!({"dates": ["2026-02-30"]}),
        "dates[0]",
    )
    .await;
    refused(
        node,
        Method::POST,
        "/api/v1/jobs",
        json!({"name": "uncalendared", "app": "py", "handler": "echo", "schedule": {"every": "1s"},
               "calendars": ["nope"]}),
        "calendars[0]",
    )
    .await;
    // The preview marks the instants the calendar holds.
    let (status, preview) = node
        .call(
            Method::POST,
            "/api/v1/schedules/preview",
            Some(json!({"schedule": {"cron": "* * * * * ?"}, "count": 5, "calendars": ["quiet_hours"],
                        "after": iso(from - chrono::Duration::seconds(1))})),
        )
        .await;
    assert_eq!(status, 200, "{preview}");
    let skipped: Vec<bool> = preview["instants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["skipped"].is_string())
        .collect();
    assert_eq!(skipped, [true, true, true, false, false], "{preview}");

    let quiet = create(
        node,
        json!({"name": "calendared", "app": "py", "handler": "echo",
               "schedule": {"cron": "* * * * * ?"}, "calendars": ["quiet_hours"], "start": true}),
    )
    .await;
    let id = &quiet["id"];
    let after = to.timestamp_millis() + 1_000;
    let runs = wait_runs(node, id, "runs past the quiet spell", |r| {
        finished(r)
            .iter()
            .any(|run| ms(&run["scheduled_at"]) >= after)
    })
    .await;
    node.call(Method::POST, &format!("/api/v1/jobs/{id}/stop"), None)
        .await;
    let (inside, outside): (Vec<&Value>, Vec<&Value>) =
        finished(&runs).into_iter().partition(|r| {
            let at = ms(&r["scheduled_at"]);
            at >= from.timestamp_millis() && at < to.timestamp_millis()
        });
    assert_eq!(inside.len(), 3, "{runs:?}");
    for run in inside {
        assert_eq!(run["state"], "skipped", "{run}");
        assert!(
            run["message"].as_str().unwrap().contains("quiet_hours"),
            "{run}"
        );
    }
    assert!(
        outside.iter().all(|r| r["state"] == "succeeded"),
        "{outside:?}"
    );
    // A calendar a job names cannot be deleted.
    let (status, body) = node
        .call(Method::DELETE, "/api/v1/calendars/quiet_hours", None)
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("calendared"),
        "{body}"
    );
}

async fn fixed_delay_counts_from_each_end(node: &NodeProcess) {
    let delayed = create(
        node,
        json!({"name": "delayed", "app": "py", "handler": "slow", "args": {"seconds": 1},
               "schedule": {"fixed_delay": "1s"}, "start": true}),
    )
    .await;
    let id = &delayed["id"];
    let runs = wait_runs(node, id, "four runs a delay apart", |r| {
        finished(r).len() >= 4
    })
    .await;
    node.call(Method::POST, &format!("/api/v1/jobs/{id}/stop"), None)
        .await;
    let ended = finished(&runs);
    for pair in ended.windows(2) {
        let gap = ms(&pair[1]["scheduled_at"]) - ms(&pair[0]["finished_at"]);
        // The delay runs from the end; the node notices an end within a poll or two.
        assert!(
            (1_000..=4_000).contains(&gap),
            "gap {gap} ms between {} and {}",
            pair[0],
            pair[1]
        );
        let ran_for = ms(&pair[0]["finished_at"]) - ms(&pair[0]["scheduled_at"]);
        assert!(ran_for >= 1_000, "the handler took a second: {}", pair[0]);
    }
    assert!(ended.iter().all(|r| r["state"] == "succeeded"), "{ended:?}");
}

async fn failures_in_a_row_pause_a_job(node: &NodeProcess, receiver: &Receiver) {
    let failing = create(
        node,
        json!({"name": "failing", "app": "py", "handler": "fail", "schedule": {"cron": "* * * * * ?"},
               "pause_after_failures": 3, "alerts": {"webhook": receiver.url("/paused")},
               "start": true}),
    )
    .await;
    let id = &failing["id"];
    wait_state(node, id, "stopped").await;
    let alert = receiver
        .wait("/paused", "the job_paused alert", |b| {
            b["event"] == "job_paused"
        })
        .await;
    assert_eq!(alert["job"]["id"], *id, "{alert}");
    assert_eq!(alert["failures"], 3, "{alert}");
    let runs = runs(node, id).await;
    let failed = runs.iter().filter(|r| r["state"] == "failed").count();
    assert!(failed >= 3, "{runs:?}");
    // Stopped: no new instant is claimed (those claimed ahead before the node saw the stop,
    // up to a poll and the claim-ahead second, may still come).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = self::runs(node, id).await;
    assert!(
        later.len() <= runs.len() + 2,
        "{} runs, then {}",
        runs.len(),
        later.len()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = self::runs(node, id).await;
    assert_eq!(
        settled.len(),
        later.len(),
        "runs keep coming after the stop"
    );
}

async fn backfill_fires_a_past_range_once(node: &NodeProcess) {
    let backfilled = create(
        node,
        json!({"name": "backfilled", "app": "py", "handler": "echo",
               "schedule": {"cron": "* * * * * ?"}}),
    )
    .await;
    let id = &backfilled["id"];
    let from = soon(-12);
    let to = from + chrono::Duration::seconds(9);
    let path = format!("/api/v1/jobs/{id}/backfill");
    refused(
        node,
        Method::POST,
        &path,
        json!({"from": iso(from), "to": iso(soon(60))}),
        "to",
    )
    .await;
    let request = json!({"from": iso(from), "to": iso(to), "max_in_flight": 2});
    for round in 0..2 {
        let (status, backfill) = node.call(Method::POST, &path, Some(request.clone())).await;
        assert_eq!(status, 202, "{backfill}");
        let done = wait_for(WAIT, "the backfill to finish", || async {
            let (_, b) = node
                .call(
                    Method::GET,
                    &format!("/api/v1/backfills/{}", backfill["id"]),
                    None,
                )
                .await;
            (b["state"] == "done").then_some(b)
        })
        .await;
        let runs = wait_runs(node, id, "the backfilled runs to end", |r| {
            r.len() == 10 && finished(r).len() == 10
        })
        .await;
        // Ten instants, each once: asking again fires none of them twice.
        assert_eq!(done["fired"], if round == 0 { 10 } else { 0 }, "{done}");
        for (i, run) in runs.iter().enumerate() {
            assert_eq!(
                ms(&run["scheduled_at"]),
                from.timestamp_millis() + 1_000 * i as i64
            );
            assert_eq!(run["trigger"], "backfill", "{run}");
            assert_eq!(run["state"], "succeeded", "{run}");
        }
    }
    let (_, list) = node
        .call(Method::GET, &format!("/api/v1/jobs/{id}/backfills"), None)
        .await;
    assert_eq!(list["backfills"].as_array().unwrap().len(), 2, "{list}");
    // A deleted job's backfills are gone with it: the list answers 404 as the job does.
    let (status, body) = node
        .call(Method::DELETE, &format!("/api/v1/jobs/{id}"), None)
        .await;
    assert!((200..300).contains(&status), "{status} {body}");
    let (status, body) = node
        .call(Method::GET, &format!("/api/v1/jobs/{id}/backfills"), None)
        .await;
    assert_eq!(status, 404, "{body}");
}

/// Runs `carillon <args>` against the node and returns its standard output.
fn cli(node: &NodeProcess, home: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_carillon"))
        .args(args)
        .env("CARILLON_URL", node.url(""))
        .env("CARILLON_TOKEN", TOKEN)
        .env("XDG_DATA_HOME", home)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        output.status.success(),
        "carillon {args:?}: {stdout}{stderr}"
    );
    stdout
}

async fn the_cli_and_apply_files_take_every_policy(node: &NodeProcess, home: &std::path::Path) {
    let calendar = home.join("weekends.yaml");
    std::fs::write(
        &calendar,
        "timezone: Europe/Paris\nrrules: [\"FREQ=WEEKLY;BYDAY=SA,SU\"]\n",
    )
    .unwrap();
    cli(
        node,
        home,
        &[
            "calendars",
            "put",
            "weekends",
            "-f",
            calendar.to_str().unwrap(),
        ],
    );
    let shown: Value = serde_json::from_str(&cli(
        node,
        home,
        &["-o", "json", "calendars", "get", "weekends"],
    ))
    .unwrap();
    assert_eq!(shown["rrules"][0], "FREQ=WEEKLY;BYDAY=SA,SU", "{shown}");

    let created: Value = serde_json::from_str(&cli(
        node,
        home,
        &[
            "-o",
            "json",
            "jobs",
            "create",
            "--name",
            "by-flags",
            "--app",
            "py",
            "--handler",
            "echo",
            "--fixed-delay",
            "1s",
            "--max-runs",
            "2",
            "--jitter-ms",
            "100",
            "--calendar",
            "weekends",
            "--pause-after-failures",
            "5",
        ],
    ))
    .unwrap();
    assert_eq!(created["schedule"]["fixed_delay"], "1s", "{created}");
    assert_eq!(created["bounds"]["max_runs"], 2, "{created}");
    assert_eq!(created["jitter_ms"], 100, "{created}");
    assert_eq!(created["calendars"], json!(["weekends"]), "{created}");
    assert_eq!(created["pause_after_failures"], 5, "{created}");

    // An apply file with every policy: applied twice, the second changes nothing.
    let file = home.join("jobs.yaml");
    std::fs::write(
        &file,
        "jobs:\n  - name: applied\n    app: py\n    handler: echo\n    schedule: {cron: \"0 0 3 * * ?\"}\n    \
         bounds: {not_after: \"2099-01-01T00:00:00Z\", max_runs: 10}\n    jitter_ms: 5000\n    \
         calendars: [weekends]\n    pause_after_failures: 2\n    start: true\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    assert!(cli(node, home, &["apply", "-f", path]).contains("created"));
    assert!(cli(node, home, &["apply", "-f", path]).contains("unchanged"));
    // The file loses its bounds: applying it clears them from the job.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(
            "bounds: {not_after: \"2099-01-01T00:00:00Z\", max_runs: 10}\n    ",
            "",
        ),
    )
    .unwrap();
    assert!(cli(node, home, &["apply", "-f", path]).contains("updated"));
    let (_, list) = node
        .call(Method::GET, "/api/v1/jobs?name=applied", None)
        .await;
    assert!(list["jobs"][0]["bounds"].is_null(), "{list}");

    let backfilled = create(
        node,
        json!({"name": "cli-backfilled", "app": "py", "handler": "echo", "schedule": {"cron": "* * * * * ?"}}),
    )
    .await;
    let (from, to) = (iso(soon(-6)), iso(soon(-4)));
    let started: Value = serde_json::from_str(&cli(
        node,
        home,
        &[
            "-o",
            "json",
            "backfill",
            "start",
            &backfilled["id"].to_string(),
            "--from",
            &from,
            "--to",
            &to,
        ],
    ))
    .unwrap();
    assert_eq!(started["state"], "running", "{started}");
    let id = started["id"].to_string();
    wait_for(WAIT, "the CLI's backfill to finish", || async {
        let shown: Value =
            serde_json::from_str(&cli(node, home, &["-o", "json", "backfill", "get", &id]))
                .unwrap();
        (shown["state"] == "done" && shown["fired"] == 3).then_some(())
    })
    .await;
    assert!(
        cli(
            node,
            home,
            &["backfill", "ls", &backfilled["id"].to_string()]
        )
        .contains("done")
    );
}
