//! XXL-JOB executors, unchanged, run Carillon jobs: real pyxxl executors (from PyPI) register
//! through XXL-JOB's admin API on a node, run handlers with params, a sharded broadcast, a
//! failing handler retried, a long handler killed on timeout and on cancel, an executor
//! killed mid-run fails over to the other, and two runs of one job on one executor: the
//! first's timeout (a `/kill` naming the job) leaves the second alone.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::node::Solo;
use support::wait_for;

const XXL_TOKEN: &str = "xxl-test-token-0123";
const APP: &str = "pyapp";
/// pyxxl beats every 10 s: the lease must be longer.
const LEASE_MS: u64 = 12_000;

/// A pyxxl executor process; killed when dropped.
struct PyExecutor {
    child: Child,
    port: u16,
}

impl PyExecutor {
    fn start(node: &Solo, marks: &Path) -> PyExecutor {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/xxl/pyxxl_executor.py");
        let admin = node.url("/xxl-job-admin/api/");
        let log = std::fs::File::create(marks.join(format!("stdout-{port}.log"))).unwrap();
        let child = Command::new("python3")
            .arg(&script)
            .args([admin.as_str(), &port.to_string(), XXL_TOKEN, APP])
            .arg(marks)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("python3 {}: {e}", script.display()));
        PyExecutor { child, port }
    }

    fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PyExecutor {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Fails at once, saying how to install it, when pyxxl is missing.
fn require_pyxxl() {
    let found = Command::new("python3")
        .args(["-c", "import pyxxl"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "pyxxl is not installed (python3 -m pip install pyxxl==0.4.8; .ci/run installs it)"
    );
}

async fn create(node: &Solo, name: &str, handler: &str, extra: Value) -> i64 {
    let mut job = json!({
        "name": name, "app": APP, "handler": handler, "schedule": { "manual": true },
    });
    for (key, value) in extra.as_object().unwrap() {
        job[key] = value.clone();
    }
    let (status, body) = node.call(Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_i64().unwrap()
}

async fn trigger(node: &Solo, job: i64) -> i64 {
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/jobs/{job}/trigger"), None)
        .await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_i64().unwrap()
}

/// The run once it has ended.
async fn ended(node: &Solo, run: i64, limit: Duration) -> Value {
    wait_for(limit, &format!("run {run} to end"), || async {
        let (_, body) = node
            .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
            .await;
        let done = !["pending", "queued", "running"]
            .contains(&body["state"].as_str().unwrap_or("pending"));
        done.then_some(body)
    })
    .await
}

fn attempts(run: &Value) -> Vec<Value> {
    run["attempts"].as_array().cloned().unwrap_or_default()
}

/// The first attempt of run `run`, once it is running.
async fn first_attempt_running(node: &Solo, run: i64) -> Value {
    wait_for(
        Duration::from_secs(15),
        &format!("the first attempt of run {run} to be running"),
        || async {
            let (_, body) = node
                .call(Method::GET, &format!("/api/v1/runs/{run}"), None)
                .await;
            attempts(&body)
                .first()
                .filter(|a| a["state"] == "running")
                .cloned()
        },
    )
    .await
}

async fn wait_file(path: &Path, what: &str) {
    wait_for(Duration::from_secs(15), what, || async {
        path.exists().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pyxxl (python3 -m pip install pyxxl==0.4.8; .ci/run installs it)"]
async fn pyxxl_executors_run_carillon_jobs() {
    require_pyxxl();
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_XXL_ACCESS_TOKEN", XXL_TOKEN.to_owned()));
        spec.extra_env
            .push(("CARILLON_XXL_EXECUTOR_LEASE_MS", LEASE_MS.to_string()));
    })
    .await;
    let marks = tempfile::tempdir().unwrap();
    let mut executors = [
        PyExecutor::start(&node, marks.path()),
        PyExecutor::start(&node, marks.path()),
    ];
    executors.sort_by_key(|e| e.address());
    let ids: Vec<String> = wait_for(
        Duration::from_secs(30),
        "both pyxxl executors to register",
        || async {
            let (_, body) = node.call(Method::GET, "/api/v1/executors", None).await;
            let list: Vec<Value> = body["executors"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["app"] == APP && e["healthy"] == true)
                .cloned()
                .collect();
            (list.len() == 2).then(|| {
                assert!(
                    list.iter()
                        .all(|e| e["protocol"] == "xxl" && e["handlers"] == json!(["*"])),
                    "{list:?}"
                );
                let mut by_address: Vec<(String, String)> = list
                    .iter()
                    .map(|e| {
                        (
                            e["address"].as_str().unwrap().to_owned(),
                            e["id"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect();
                by_address.sort();
                by_address.into_iter().map(|(_, id)| id).collect()
            })
        },
    )
    .await;

    // A wrong token is refused in XXL-JOB's own words.
    let refused: Value = carillon_tls::http_client().unwrap()
        .post(node.url("/xxl-job-admin/api/registry"))
        .header("XXL-JOB-ACCESS-TOKEN", "wrong-token-000")
        .json(&json!({ "registryGroup": "EXECUTOR", "registryKey": "intruder", "registryValue": "http://127.0.0.1:1" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(refused["code"], 500, "{refused}");

    // Params reach the handler; its return comes back as the output.
    let echo = create(
        &node,
        "echo",
        "echo",
        json!({ "args": "hello world", "balance": "first" }),
    )
    .await;
    let run = ended(&node, trigger(&node, echo).await, Duration::from_secs(20)).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    let first = &attempts(&run)[0];
    assert_eq!(first["output"], "echo:hello world", "{run}");
    assert_eq!(
        first["executor_id"],
        json!(ids[0]),
        "balance first: the lowest address"
    );
    // Its log, read from the executor's /log by line.
    let run_id = run["id"].as_i64().unwrap();
    let (status, page) = node
        .call(Method::GET, &format!("/api/v1/runs/{run_id}/logs"), None)
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["source"], "executor", "{page}");
    let lines: Vec<&str> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l.contains("echo got hello world")),
        "{page}"
    );
    assert_eq!(page["lines"][0]["line"], 1, "{page}");
    let after = page["next_after"].as_i64().unwrap();
    assert_eq!(after as usize, lines.len(), "{page}");
    let (_, rest) = node
        .call(
            Method::GET,
            &format!("/api/v1/runs/{run_id}/logs?after=1"),
            None,
        )
        .await;
    assert_eq!(
        rest["lines"].as_array().unwrap().len(),
        lines.len() - 1,
        "{rest}"
    );
    assert_eq!(rest["lines"][0]["line"], 2, "{rest}");

    // A sharded broadcast: one shard per executor, as broadcastIndex/broadcastTotal.
    let shard = create(
        &node,
        "shard",
        "shard",
        json!({ "sharding": { "broadcast": true } }),
    )
    .await;
    let run = ended(&node, trigger(&node, shard).await, Duration::from_secs(20)).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    let mut outputs: Vec<String> = attempts(&run)
        .iter()
        .map(|a| a["output"].as_str().unwrap().to_owned())
        .collect();
    outputs.sort();
    assert_eq!(outputs.len(), 2, "{run}");
    assert!(
        outputs[0].starts_with("shard 0/2 on ") && outputs[1].starts_with("shard 1/2 on "),
        "{outputs:?}"
    );
    assert_ne!(
        outputs[0][11..],
        outputs[1][11..],
        "each shard on its own executor: {outputs:?}"
    );

    // A failing handler is retried, then the run fails with its message.
    let fail = create(
        &node,
        "fail",
        "fail",
        json!({ "retry": { "max_attempts": 2, "initial_delay_ms": 100 } }),
    )
    .await;
    let run = ended(&node, trigger(&node, fail).await, Duration::from_secs(20)).await;
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(attempts(&run).len(), 2, "{run}");
    assert!(
        attempts(&run).iter().all(|a| a["error"]
            .as_str()
            .unwrap_or_default()
            .contains("boom from pyxxl")),
        "{run}"
    );

    // A long handler past its timeout ends timed out here and is killed there.
    let sleepy = create(
        &node,
        "sleepy",
        "sleepy",
        json!({ "args": "30", "timeout_ms": 1_500 }),
    )
    .await;
    let run = ended(&node, trigger(&node, sleepy).await, Duration::from_secs(20)).await;
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(attempts(&run)[0]["state"], "timed_out", "{run}");
    let attempt_id = attempts(&run)[0]["id"].as_i64().unwrap();
    wait_file(
        &marks.path().join(format!("cancelled-{attempt_id}")),
        "the executor to kill the timed-out handler",
    )
    .await;

    // A cancelled run is killed there too.
    let long = create(&node, "long", "sleepy", json!({ "args": "30" })).await;
    let run_id = trigger(&node, long).await;
    let running = wait_for(Duration::from_secs(15), "the long run to start", || async {
        let (_, body) = node
            .call(Method::GET, &format!("/api/v1/runs/{run_id}"), None)
            .await;
        (body["state"] == "running"
            && attempts(&body)
                .first()
                .is_some_and(|a| a["state"] == "running"))
        .then_some(body)
    })
    .await;
    let attempt_id = attempts(&running)[0]["id"].as_i64().unwrap();
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/runs/{run_id}/cancel"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    wait_file(
        &marks.path().join(format!("cancelled-{attempt_id}")),
        "the executor to kill the cancelled handler",
    )
    .await;

    // An executor killed mid-run: its attempt fails over to the other once its beats stop.
    let move_me = create(
        &node,
        "move-me",
        "sleepy",
        json!({ "args": "3", "balance": "first" }),
    )
    .await;
    let run_id = trigger(&node, move_me).await;
    let running = first_attempt_running(&node, run_id).await;
    let attempt_id = running["id"].as_i64().unwrap();
    let started = marks
        .path()
        .join(format!("started-{attempt_id}-{}", executors[0].port));
    wait_file(&started, "the handler to start on the first executor").await;
    executors[0].kill9();
    let run = ended(&node, run_id, Duration::from_millis(LEASE_MS + 20_000)).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    let tries = attempts(&run);
    assert_eq!(
        tries.first().map(|a| a["state"].clone()),
        Some(json!("lost")),
        "{run}"
    );
    let last = tries.last().unwrap();
    assert_eq!(last["executor_id"], json!(ids[1]), "{run}");
    assert_eq!(
        last["output"],
        json!(format!("slept on {}", executors[1].port)),
        "{run}"
    );

    // With the first executor gone, `failover` goes to the one that answers.
    let failover = create(
        &node,
        "failover",
        "echo",
        json!({ "args": "still here", "balance": "failover" }),
    )
    .await;
    let run = ended(
        &node,
        trigger(&node, failover).await,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(
        attempts(&run).last().unwrap()["executor_id"],
        json!(ids[1]),
        "{run}"
    );

    two_runs_of_one_job_on_one_executor(&node, marks.path(), &ids[1]).await;
}

/// Two runs of one job (overlap `allow`) on the only healthy executor, the second triggered
/// while the first runs: the executor runs one attempt of a job at a time, so the second is
/// offered once the first has ended; the first times out and is killed (`/kill` names the
/// job), and the second ends by its own outcome, timed from its own delivery.
async fn two_runs_of_one_job_on_one_executor(node: &Solo, marks: &Path, executor: &str) {
    // The executor's own timeout is 4 s (rounded up): Carillon's, 3.5 s, comes first.
    let job = create(
        node,
        "one-thread",
        "first_slow",
        json!({ "balance": "first", "timeout_ms": 3_500 }),
    )
    .await;
    let first = trigger(node, job).await;
    let running = first_attempt_running(node, first).await;
    let first_attempt = running["id"].as_i64().unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = trigger(node, job).await;
    let first_run = ended(node, first, Duration::from_secs(20)).await;
    assert_eq!(first_run["state"], "failed", "{first_run}");
    assert_eq!(attempts(&first_run)[0]["state"], "timed_out", "{first_run}");
    wait_file(
        &marks.join(format!("cancelled-{first_attempt}")),
        "the executor to kill the timed-out run",
    )
    .await;
    let second_run = ended(node, second, Duration::from_secs(20)).await;
    assert_eq!(
        second_run["state"], "succeeded",
        "the first run's kill must leave the second alone: {second_run}"
    );
    let tries = attempts(&second_run);
    assert_eq!(tries.len(), 1, "{second_run}");
    assert_eq!(tries[0]["output"], "slept 1 s", "{second_run}");
    assert_eq!(tries[0]["executor_id"], json!(executor), "{second_run}");
    let second_attempt = tries[0]["id"].as_i64().unwrap();
    assert!(
        !marks.join(format!("cancelled-{second_attempt}")).exists(),
        "the second run was cancelled on the executor: {second_run}"
    );
    // Offered once the first had ended there, not queued behind it.
    let first_ended = attempts(&first_run)[0]["finished_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let second_sent = tries[0]["dispatched_at"].as_str().unwrap().to_owned();
    assert!(
        second_sent >= first_ended,
        "the second run was offered at {second_sent}, while the first ran (it ended at {first_ended})"
    );
}

/// The Python that has fastapi-xxljob and uvicorn: `CARILLON_XXL_PYTHON` (`.ci/run` makes an
/// environment of its own for them), else `python3`; fails at once, saying how to install
/// them, when they are missing.
fn fastapi_python() -> String {
    let python = std::env::var("CARILLON_XXL_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let found = Command::new(&python)
        .args(["-c", "import fastapi_xxljob, uvicorn"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{python} lacks fastapi-xxljob (pip install fastapi-xxljob==0.1.0 fastapi==0.165.0 \
         uvicorn==0.55.0; .ci/run installs them and sets CARILLON_XXL_PYTHON)"
    );
    python
}

/// fastapi-xxljob (from PyPI), as its README sets it up, has no idle-beat callback, and so
/// answers every `/idleBeat` "callback is not configured" (code 500): that says nothing of
/// the job, and its runs go (they once waited, pending, for good, taken for busy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs fastapi-xxljob, fastapi and uvicorn (pip install fastapi-xxljob==0.1.0 fastapi==0.165.0 uvicorn==0.55.0; .ci/run installs them)"]
async fn fastapi_xxljob_executors_run_carillon_jobs() {
    const FAST_APP: &str = "fastapp";
    let python = fastapi_python();
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_XXL_ACCESS_TOKEN", XXL_TOKEN.to_owned()));
    })
    .await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/xxl/fastapi_xxljob_executor.py");
    // Killed when dropped, a failing assertion included: it must not outlive the test.
    let _executor = PyExecutor {
        child: Command::new(&python)
            .arg(&script)
            .args([
                node.url("/xxl-job-admin").as_str(),
                &port.to_string(),
                XXL_TOKEN,
                FAST_APP,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{python} {}: {e}", script.display())),
        port,
    };
    wait_for(
        Duration::from_secs(30),
        "the fastapi-xxljob executor to register",
        || async {
            let (_, body) = node.call(Method::GET, "/api/v1/executors", None).await;
            body["executors"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["app"] == FAST_APP && e["healthy"] == true)
                .then_some(())
        },
    )
    .await;
    let job = json!({"name": "fast-echo", "app": FAST_APP, "handler": "echo",
        "schedule": { "manual": true }, "args": "hello"});
    let (status, body) = node.call(Method::POST, "/api/v1/jobs", Some(job)).await;
    assert_eq!(status, 201, "{body}");
    let job = body["id"].as_i64().unwrap();
    // Two runs one after the other: the first's end leaves the executor free for the second.
    for _ in 0..2 {
        let run = ended(&node, trigger(&node, job).await, Duration::from_secs(20)).await;
        assert_eq!(run["state"], "succeeded", "{run}");
        let first = &attempts(&run)[0];
        assert_eq!(first["output"], "echo:hello", "{run}");
    }
}
