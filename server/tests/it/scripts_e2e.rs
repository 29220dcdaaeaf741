//! The script executor end to end, on every backend: `carillon executor --scripts DIR`
//! processes serve real `sh` scripts to a real node. A run's arguments, parameters, secrets
//! and stdin reach its script, and nothing else of the executor's environment does; the
//! script's lines arrive in the run's log in order; its result file (or last line) is the
//! output; a failing exit is retried, then fails with the last stderr line; a timeout and a
//! cancel end the script's whole process group, children ignoring SIGTERM included; two
//! executors on two hosts share an app's runs and one takes them all when the other is killed;
//! capacity 1 runs a second script only once the first has ended, or, cancelled, has wound
//! down; an executor told to stop kills what its scripts left before it exits. Arguments a process cannot carry (a NUL) or that would make one variable twice fail
//! the attempt naming them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::db::TestDb;
use support::executor::{EXECUTOR_TOKEN, SECRET, node_env, wait_registered};
use support::node::{NodeProcess, NodeSpec, spawn_carillon};
use support::runs::{create_job, ended, log_messages, trigger};
use support::wait_for;

for_engine!(postgres, Postgres, [scripts_run_as_handlers_of_an_executor]);
for_engine!(mysql, Mysql, [scripts_run_as_handlers_of_an_executor]);
for_engine!(sqlite, Sqlite, [scripts_run_as_handlers_of_an_executor]);

const KEY: &str = "2f1e1d1c1b1a191817161514131211100f0e0d0c0b0a09080706050403020100";

const REPORT: &str = r#"#!/bin/sh
echo "argv: $*"
echo "run $CARILLON_RUN_ID attempt $CARILLON_ATTEMPT shard $CARILLON_SHARD_INDEX/$CARILLON_SHARD_TOTAL job $CARILLON_JOB"
echo "day=${CARILLON_PARAM_DAY:-none} secret=${CARILLON_SECRET_DB_PASSWORD:-none} leak=${LEAK:-none}"
IFS= read -r dispatch
echo "stdin: $dispatch"
echo "complaint" >&2
for i in 1 2 3 4 5 6 7 8 9 10; do echo "line $i"; done
printf '{"ok": true, "run": %s}' "$CARILLON_RUN_ID" > "$CARILLON_RESULT_FILE"
"#;

const LAST_LINE: &str = "#!/bin/sh\necho working\necho '{\"rows\": 42}'\n";

const FAIL: &str = "#!/bin/sh\necho trying\necho 'disk full' >&2\nexit 3\n";

/// Starts a child that ignores SIGTERM (as the script does: an ignored signal stays ignored
/// across exec), notes its pid in the working directory, and waits.
const HANG: &str = r#"#!/bin/sh
trap '' TERM
sleep 300 &
echo $! > "$PWD/child-$CARILLON_RUN_ID.pid"
echo started
wait
"#;

/// Takes its time to stop: on SIGTERM it winds down for 0.7 s, then notes when it ended.
const LINGER: &str = r#"#!/bin/sh
trap 'sleep 0.7; date +%s%N > "$PWD/linger-end"; exit 0' TERM
touch "$PWD/linger-started"
while true; do sleep 0.1; done
"#;

const WHOAMI: &str = "#!/bin/sh\nsleep 0.2\necho \"\\\"$HOST_NAME\\\"\"\n";

const SLOW: &str = r#"#!/bin/sh
start=$(date +%s%N)
sleep 1
end=$(date +%s%N)
echo "[$start, $end]"
"#;

fn write_script(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A `carillon executor --scripts` process, killed when dropped.
struct ScriptExecutor {
    child: Child,
    log: PathBuf,
}

impl ScriptExecutor {
    async fn start(
        node: &NodeProcess,
        home: &Path,
        id: &str,
        scripts: &Path,
        extra: &[&str],
        env: &[(&str, String)],
    ) -> Self {
        let log = home.join(format!("{id}.log"));
        let admin = node.url("");
        let mut args = vec![
            "executor",
            "--scripts",
            scripts.to_str().unwrap(),
            "--admin",
            &admin,
            "--listen",
            "127.0.0.1:0",
            "--executor-id",
            id,
            "--kill-grace-secs",
            "1",
        ];
        args.extend_from_slice(extra);
        let mut all_env = vec![
            ("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()),
            ("CARILLON_DISPATCH_SECRET", SECRET.to_owned()),
        ];
        all_env.extend(env.iter().cloned());
        let child = spawn_carillon(&args, &all_env, home, &log);
        let executor = Self { child, log };
        wait_registered(node, id).await;
        executor
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits (15 s at most) for the executor to exit.
    fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while self.child.try_wait().unwrap().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the executor did not stop: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ScriptExecutor {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn job(name: &str, app: &str, handler: &str, extra: Value) -> Value {
    let mut doc =
        json!({"name": name, "app": app, "handler": handler, "schedule": {"manual": true}});
    for (k, v) in extra.as_object().unwrap() {
        doc[k] = v.clone();
    }
    doc
}

/// `path` relative to the test's working directory (the one the executors start in).
fn relative(path: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let mut up = PathBuf::new();
    for _ in cwd.components().skip(1) {
        up.push("..");
    }
    up.join(path.strip_prefix("/").unwrap())
}

fn process_alive(pid: u32) -> bool {
    // A zombie has ended: only its exit status is left to collect.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// Waits for the pid file the hanging script writes, then until that process is gone.
async fn child_ends(workdir: &Path, run: i64) {
    let file = workdir.join(format!("child-{run}.pid"));
    let pid: u32 = wait_for(
        Duration::from_secs(10),
        "the script to note its child",
        || async { std::fs::read_to_string(&file).ok()?.trim().parse().ok() },
    )
    .await;
    wait_for(
        Duration::from_secs(10),
        &format!("the script's child {pid} to be killed"),
        || async { (!process_alive(pid)).then_some(()) },
    )
    .await;
}

async fn scripts_run_as_handlers_of_an_executor(db: TestDb) {
    let home = tempfile::tempdir().unwrap();
    let mut spec = NodeSpec::fast("n1", &db.url, home.path());
    spec.extra_env = node_env();
    spec.extra_env
        .push(("CARILLON_SECRETS_KEY", KEY.to_owned()));
    let node = NodeProcess::start(spec).await;
    let (status, _) = node
        .call(
            Method::PUT,
            "/api/v1/secrets/db-password",
            Some(json!({"value": "s3cr3t"})),
        )
        .await;
    assert_eq!(status, 201);

    let host_a = home.path().join("host-a");
    let work_a = home.path().join("work-a");
    std::fs::create_dir_all(&host_a).unwrap();
    std::fs::create_dir_all(&work_a).unwrap();
    for (name, text) in [
        ("report.sh", REPORT),
        ("last-line.sh", LAST_LINE),
        ("fail.sh", FAIL),
        ("hang.sh", HANG),
        ("whoami.sh", WHOAMI),
    ] {
        write_script(&host_a, name, text);
    }
    std::fs::write(host_a.join("README.txt"), "not a script").unwrap();
    let mut executor_a = ScriptExecutor::start(
        &node,
        home.path(),
        "host-a",
        &host_a,
        &[
            "--workdir",
            work_a.to_str().unwrap(),
            "--pass-env",
            "HOST_NAME",
        ],
        &[
            ("LEAK", "from-the-executor".to_owned()),
            ("HOST_NAME", "host-a".to_owned()),
        ],
    )
    .await;
    let (_, executors) = node.call(Method::GET, "/api/v1/executors", None).await;
    let a = executors["executors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == "host-a")
        .unwrap();
    let mut handlers: Vec<&str> = a["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().or(h.as_str()).unwrap())
        .collect();
    handlers.sort_unstable();
    assert_eq!(
        handlers,
        ["fail", "hang", "last-line", "report", "whoami"],
        "{a}"
    );
    assert!(
        executor_a.log_text().contains("README.txt"),
        "a file passed over is named: {}",
        executor_a.log_text()
    );

    // Arguments as argv, parameters, a secret and stdin reach the script; the executor's own
    // environment does not; the result file is the output; lines arrive in order.
    let report = create_job(
        &node,
        job(
            "report",
            "scripts",
            "report",
            json!({"args": ["first arg", 2], "secrets": ["db-password"]}),
        ),
    )
    .await;
    let run = trigger(&node, report).await;
    let detail = ended(&node, run).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(
        detail["attempts"][0]["output"],
        json!({"ok": true, "run": run}),
        "{detail}"
    );
    let all_lines = log_messages(&node, run).await;
    assert!(all_lines.contains(&"complaint".to_owned()), "{all_lines:?}");
    // Each stream keeps its order; stderr's lines may fall anywhere between stdout's.
    let lines: Vec<String> = all_lines.into_iter().filter(|l| l != "complaint").collect();
    let stdin_line = lines
        .iter()
        .find_map(|l| l.strip_prefix("stdin: "))
        .unwrap_or_else(|| panic!("{lines:?}"));
    let dispatch: Value = serde_json::from_str(stdin_line).unwrap();
    assert_eq!(dispatch["run_id"], run);
    assert_eq!(dispatch["args"], json!(["first arg", 2]));
    assert_eq!(dispatch["shard"], json!({"index": 0, "total": 1}));
    assert_eq!(dispatch["job"], "report");
    assert_eq!(lines[0], "argv: first arg 2", "{lines:?}");
    assert_eq!(
        lines[1],
        format!("run {run} attempt 1 shard 0/1 job report"),
        "{lines:?}"
    );
    assert_eq!(lines[2], "day=none secret=s3cr3t leak=none", "{lines:?}");
    let numbered: Vec<&String> = lines.iter().filter(|l| l.starts_with("line ")).collect();
    let expected: Vec<String> = (1..=10).map(|i| format!("line {i}")).collect();
    assert_eq!(numbered, expected.iter().collect::<Vec<_>>(), "in order");

    // Parameters of an object reach the environment; the last line of stdout is the output.
    let last_line = create_job(
        &node,
        job(
            "last-line",
            "scripts",
            "last-line",
            json!({"args": {"day": "mon"}}),
        ),
    )
    .await;
    let detail = ended(&node, trigger(&node, last_line).await).await;
    assert_eq!(detail["state"], "succeeded", "{detail}");
    assert_eq!(detail["attempts"][0]["output"], json!({"rows": 42}));

    // Arguments a process cannot be given fail the attempt, naming what is wrong.
    for (name, args, why) in [
        (
            "nul",
            json!(["a\u{0}b"]),
            "argument 1 holds a NUL character",
        ),
        (
            "twice",
            json!({"day-x": "mon", "day_x": "tue"}),
            "would both be the variable CARILLON_PARAM_DAY_X",
        ),
    ] {
        let refused = create_job(
            &node,
            job(name, "scripts", "last-line", json!({"args": args})),
        )
        .await;
        let detail = ended(&node, trigger(&node, refused).await).await;
        assert_eq!(detail["state"], "failed", "{detail}");
        let error = detail["attempts"][0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(why), "{name}: {detail}");
    }

    // A failing exit is retried, then the run fails with its last stderr line.
    let fail = create_job(
        &node,
        job(
            "fail",
            "scripts",
            "fail",
            json!({"retry": {"max_attempts": 2, "initial_delay_ms": 50}}),
        ),
    )
    .await;
    let detail = ended(&node, trigger(&node, fail).await).await;
    assert_eq!(detail["state"], "failed", "{detail}");
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{detail}");
    for attempt in attempts {
        assert_eq!(attempt["error"], "exit code 3: disk full", "{attempt}");
    }

    // A timeout ends the whole process group, a child ignoring SIGTERM included.
    let timed = create_job(
        &node,
        job("hang-timed", "scripts", "hang", json!({"timeout_ms": 1500})),
    )
    .await;
    let run = trigger(&node, timed).await;
    let detail = ended(&node, run).await;
    assert_eq!(detail["attempts"][0]["state"], "timed_out", "{detail}");
    child_ends(&work_a, run).await;

    // So does a cancel.
    let hang = create_job(&node, job("hang", "scripts", "hang", json!({}))).await;
    let run = trigger(&node, hang).await;
    let pid_file = work_a.join(format!("child-{run}.pid"));
    wait_for(Duration::from_secs(10), "the script to start", || async {
        pid_file.exists().then_some(())
    })
    .await;
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/runs/{run}/cancel"), None)
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let detail = ended(&node, run).await;
    assert_eq!(detail["state"], "cancelled", "{detail}");
    child_ends(&work_a, run).await;

    // Two hosts share the app's runs; with one killed, the other takes them all.
    let host_b = home.path().join("host-b");
    std::fs::create_dir_all(&host_b).unwrap();
    write_script(&host_b, "whoami.sh", WHOAMI);
    // Named by a relative path: the script still runs in a working directory of its own.
    let _executor_b = ScriptExecutor::start(
        &node,
        home.path(),
        "host-b",
        &relative(&host_b),
        &["--pass-env", "HOST_NAME"],
        &[("HOST_NAME", "host-b".to_owned())],
    )
    .await;
    let whoami = create_job(
        &node,
        job(
            "whoami",
            "scripts",
            "whoami",
            json!({"balance": "round_robin"}),
        ),
    )
    .await;
    let mut hosts = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let detail = ended(&node, trigger(&node, whoami).await).await;
        assert_eq!(detail["state"], "succeeded", "{detail}");
        hosts.insert(detail["attempts"][0]["output"].as_str().unwrap().to_owned());
    }
    assert_eq!(hosts.len(), 2, "both hosts ran the script: {hosts:?}");
    executor_a.kill9();
    for _ in 0..3 {
        let detail = ended(&node, trigger(&node, whoami).await).await;
        assert_eq!(detail["state"], "succeeded", "{detail}");
        let attempts = detail["attempts"].as_array().unwrap();
        assert_eq!(attempts.last().unwrap()["output"], "host-b", "{detail}");
    }

    // Capacity 1: the second run's script starts only once the first has ended.
    let host_c = home.path().join("host-c");
    std::fs::create_dir_all(&host_c).unwrap();
    write_script(&host_c, "slow.sh", SLOW);
    write_script(&host_c, "linger.sh", LINGER);
    let _executor_c = ScriptExecutor::start(
        &node,
        home.path(),
        "host-c",
        &host_c,
        &["--app", "solo", "--capacity", "1"],
        &[],
    )
    .await;
    // Two jobs, so no overlap policy of one job can be what keeps them apart.
    let slow_one = create_job(&node, job("slow-1", "solo", "slow", json!({}))).await;
    let slow_two = create_job(&node, job("slow-2", "solo", "slow", json!({}))).await;
    let first = trigger(&node, slow_one).await;
    let second = trigger(&node, slow_two).await;
    let (first, second) = tokio::join!(ended(&node, first), ended(&node, second));
    let span = |detail: &Value| {
        assert_eq!(detail["state"], "succeeded", "{detail}");
        let output = &detail["attempts"].as_array().unwrap().last().unwrap()["output"];
        (output[0].as_i64().unwrap(), output[1].as_i64().unwrap())
    };
    let (a, b) = (span(&first), span(&second));
    assert!(
        a.1 <= b.0 || b.1 <= a.0,
        "two scripts ran at once on a capacity of 1: {a:?} {b:?}"
    );

    // A cancelled script winding down still holds its place: the next starts once it is gone.
    let linger = create_job(&node, job("linger", "solo", "linger", json!({}))).await;
    let run = trigger(&node, linger).await;
    wait_for(
        Duration::from_secs(10),
        "the lingering script to start",
        || async { host_c.join("linger-started").exists().then_some(()) },
    )
    .await;
    let (status, body) = node
        .call(Method::POST, &format!("/api/v1/runs/{run}/cancel"), None)
        .await;
    assert!(status == 200 || status == 202, "{status} {body}");
    let next = ended(&node, trigger(&node, slow_one).await).await;
    let (started, _) = span(&next);
    let wound_down: i64 = std::fs::read_to_string(host_c.join("linger-end"))
        .unwrap_or_else(|e| {
            panic!(
                "the lingering script noted no end ({e}): {next} {}",
                _executor_c.log_text()
            )
        })
        .trim()
        .parse()
        .unwrap();
    assert!(
        started >= wound_down,
        "a script started while a cancelled one was winding down: {started} < {wound_down}"
    );

    // An executor told to stop gives a script its drain, then its grace, then kills its group
    // before it exits: none outlives it.
    let host_d = home.path().join("host-d");
    std::fs::create_dir_all(&host_d).unwrap();
    write_script(&host_d, "hang.sh", HANG);
    let mut executor_d = ScriptExecutor::start(
        &node,
        home.path(),
        "host-d",
        &host_d,
        &["--app", "stopping", "--drain-secs", "1"],
        &[],
    )
    .await;
    let hang = create_job(&node, job("hang-stopping", "stopping", "hang", json!({}))).await;
    let run = trigger(&node, hang).await;
    let pid_file = host_d.join(format!("child-{run}.pid"));
    wait_for(Duration::from_secs(10), "the script to start", || async {
        pid_file.exists().then_some(())
    })
    .await;
    executor_d.stop();
    child_ends(&host_d, run).await;
}
