//! The `carillon` client commands against a real node: jobs, runs, executors, cluster,
//! schedule preview, tasks, and the namespace a command works in.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::node::{Solo, TOKEN};

pub(super) struct Cli<'a> {
    pub(super) node: &'a Solo,
    pub(super) home: tempfile::TempDir,
}

impl Cli<'_> {
    /// Runs `carillon <args>`; returns the exit success, standard output and standard error.
    pub(super) fn run(&self, args: &[&str]) -> (bool, String, String) {
        self.run_with_token(args, Some(TOKEN))
    }

    fn run_with_token(&self, args: &[&str], token: Option<&str>) -> (bool, String, String) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_carillon"));
        command
            .args(args)
            .env_remove("CARILLON_TOKEN")
            .env_remove("CARILLON_NAMESPACE")
            .env_remove("CARILLON_CLI_CONFIG")
            .env("CARILLON_URL", self.node.url(""))
            // No default node's data here: the token must come from the flag or variable;
            // and no settings file but the test's own.
            .env("XDG_DATA_HOME", self.home.path())
            .env("XDG_CONFIG_HOME", self.home.path());
        if let Some(token) = token {
            command.env("CARILLON_TOKEN", token);
        }
        let output = command.output().unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    pub(super) fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let (ok, stdout, stderr) = self.run(&all);
        assert!(ok, "carillon {args:?} failed: {stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_drives_jobs_runs_and_the_cluster() {
    let node = Solo::start(|_| {}).await;
    let cli = Cli {
        node: &node,
        home: tempfile::tempdir().unwrap(),
    };

    let created = cli.json(&[
        "jobs",
        "create",
        "--name",
        "nightly",
        "--app",
        "billing",
        "--handler",
        "report",
        "--cron",
        "0 30 2 * * ?",
        "--tz",
        "Asia/Shanghai",
        "--args",
        r#"["eu","us"]"#,
        "--start",
    ]);
    assert_eq!(created["state"], "running");
    assert_eq!(created["args"], serde_json::json!(["eu", "us"]));
    let id = created["id"].to_string();

    let (ok, table, _) = cli.run(&["jobs", "ls"]);
    assert!(ok);
    let header = table.lines().next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("SCHEDULE") && header.contains("STATE"),
        "{table}"
    );
    assert!(
        table.contains("nightly") && table.contains("cron=0 30 2 * * ?"),
        "{table}"
    );

    let edited = cli.json(&["jobs", "edit", &id, "--every", "5m"]);
    assert_eq!(edited["schedule"], serde_json::json!({"every": "5m"}));
    let limited = cli.json(&[
        "jobs",
        "edit",
        &id,
        "--flow-key",
        "reports",
        "--max-in-flight",
        "2",
        "--rate-limit",
        "10",
        "--rate-per-ms",
        "60000",
    ]);
    assert_eq!(
        limited["flow"],
        serde_json::json!({"key": "reports", "max_in_flight": 2, "on_full": "queue",
                           "rate": {"limit": 10, "per_ms": 60000}})
    );
    let (ok, _, err) = cli.run(&["jobs", "edit", &id, "--rate-limit", "10"]);
    assert!(
        !ok && err.contains("--rate-limit and --rate-per-ms go together"),
        "{err}"
    );
    let run = cli.json(&["jobs", "trigger", &id]);
    assert_eq!(run["trigger"], "manual");
    let runs = cli.json(&["runs", "ls", "--job", &id]);
    assert_eq!(runs["runs"][0]["id"], run["id"]);
    let detail = cli.json(&["runs", "get", &run["id"].to_string()]);
    assert_eq!(detail["job_id"].to_string(), id);
    assert_eq!(cli.json(&["jobs", "stop", &id])["state"], "stopped");

    let preview = cli.json(&[
        "schedule",
        "preview",
        "30 2 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-07T00:00:00Z",
        "--count",
        "2",
    ]);
    assert_eq!(
        preview["instants"][1]["local"],
        "2026-03-08T03:30:00.000-04:00"
    );
    let cluster = cli.json(&["cluster"]);
    assert_eq!(cluster["leader"]["node_id"], "solo");
    assert!(
        cli.json(&["executors", "ls"])["executors"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // apply creates, then applying again changes nothing more.
    let file = cli.home.path().join("jobs.toml");
    std::fs::write(
        &file,
        r#"
[[jobs]]
name = "etl-load"
app = "etl"
handler = "load"
schedule = { every = "1h" }
start = true

[[jobs]]
name = "nightly"
app = "billing"
handler = "report"
schedule = { cron = "0 0 3 * * ?" }
"#,
    )
    .unwrap();
    let first = cli.json(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(first["jobs"][0]["action"], "created");
    // The existing `nightly` gets the file's schedule and is stopped (the file omits `start`,
    // so its state is left alone: it was stopped above).
    assert_eq!(first["jobs"][1]["action"], "updated");
    let after_first = cli.json(&["jobs", "ls"]);
    let second = cli.json(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(second["jobs"][0]["action"], "unchanged");
    assert_eq!(second["jobs"][1]["action"], "unchanged");
    let after_second = cli.json(&["jobs", "ls"]);
    let summary = |list: &Value| -> Vec<(Value, Value, Value, Value)> {
        list["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| {
                let fields = ["name", "schedule", "state", "version"];
                let [a, b, c, d] = fields.map(|f| j[f].clone());
                (a, b, c, d)
            })
            .collect()
    };
    // Applying again wrote nothing: not even a version bump.
    assert_eq!(summary(&after_first), summary(&after_second));
    assert_eq!(after_second["jobs"].as_array().unwrap().len(), 2);
    let nightly = after_second["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "nightly")
        .unwrap()
        .clone();
    assert_eq!(
        nightly["schedule"],
        serde_json::json!({"cron": "0 0 3 * * ?"})
    );
    assert_eq!(nightly["state"], "stopped");

    // The same jobs in YAML: one changed field is one update, and `start: true` starts it.
    let yaml = cli.home.path().join("jobs.yaml");
    std::fs::write(
        &yaml,
        r#"
jobs:
  - name: etl-load
    app: etl
    handler: load
    schedule: { every: 1h }
    start: true
  - name: nightly
    app: billing
    handler: report
    schedule:
      cron: "0 0 4 * * ?"
    retry: { max_attempts: 5 }
    start: true
"#,
    )
    .unwrap();
    let third = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    assert_eq!(third["jobs"][0]["action"], "unchanged");
    assert_eq!(third["jobs"][1]["action"], "updated");
    let nightly = cli.json(&["jobs", "get", &nightly["id"].to_string()]);
    assert_eq!(
        nightly["schedule"],
        serde_json::json!({"cron": "0 0 4 * * ?"})
    );
    assert_eq!(nightly["retry"]["max_attempts"], 5);
    assert_eq!(nightly["state"], "running");
    let fourth = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    assert_eq!(fourth["jobs"][1]["action"], "unchanged");
    let broken = cli.home.path().join("broken.yaml");
    std::fs::write(&broken, "jobs:\n  - name: [unclosed\n").unwrap();
    let (ok, _, stderr) = cli.run(&["apply", "-f", broken.to_str().unwrap()]);
    assert!(!ok && stderr.contains("broken.yaml"), "{stderr}");
    // A field of the wrong type is named, in plain words (never serde's `expected i64`).
    let wrong = cli.home.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        "jobs:\n  - name: wrong\n    app: a\n    handler: h\n    schedule: {every: 1m}\n    priority: high\n",
    )
    .unwrap();
    let (ok, _, stderr) = cli.run(&["apply", "-f", wrong.to_str().unwrap()]);
    assert!(
        !ok && stderr.contains(r#"job 1: priority: must be an integer, not the string "high""#),
        "{stderr}"
    );

    let (ok, _, stderr) = cli.run(&["jobs", "rm", &id]);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = cli.run(&["jobs", "get", &id]);
    assert!(!ok);
    assert!(
        stderr.contains("404") && stderr.contains("not found"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli.run_with_token(&["jobs", "ls"], Some("wrong-token-wrong-token-1"));
    assert!(!ok && stderr.contains("401"), "{stderr}");
    let (ok, _, stderr) = cli.run_with_token(&["jobs", "ls"], None);
    assert!(
        !ok && stderr.contains("no token") && stderr.contains("CARILLON_TOKEN"),
        "{stderr}"
    );
    let (ok, _, stderr) = cli.run(&[
        "jobs",
        "create",
        "--name",
        "bad",
        "--app",
        "a",
        "--handler",
        "h",
        "--cron",
        "99 * * * *",
    ]);
    assert!(!ok && stderr.contains("schedule.cron"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_enqueues_lists_shows_and_cancels_tasks() {
    let node = Solo::start(|_| {}).await;
    let cli = Cli {
        node: &node,
        home: tempfile::tempdir().unwrap(),
    };
    let one = cli.json(&[
        "tasks",
        "add",
        "--app",
        "orders",
        "--handler",
        "cancel_unpaid",
        "--args",
        r#"{"order": 7}"#,
        "--delay",
        "30m",
        "--key",
        "order-7",
        "--priority",
        "8",
    ]);
    assert_eq!(one["created"], 1, "{one}");
    assert_eq!(
        one["unknown_handlers"],
        serde_json::json!([{"app": "orders", "handler": "cancel_unpaid"}])
    );
    let id = one["tasks"][0]["id"].as_i64().unwrap();

    // A batch from a file; table output names the unknown handler.
    let file = cli.home.path().join("batch.json");
    std::fs::write(
        &file,
        r#"{"tasks": [{"app": "orders", "handler": "remind", "delay": "1h"},
                      {"app": "orders", "handler": "remind", "delay": "2h", "key": "order-7"}]}"#,
    )
    .unwrap();
    let (ok, table, stderr) = cli.run(&["tasks", "add", "-f", file.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(table.contains("existing"), "the keyed task exists: {table}");
    assert!(table.contains("created"), "{table}");
    assert!(table.contains("handler \"remind\""), "{table}");

    let listed = cli.json(&[
        "tasks",
        "ls",
        "--state",
        "pending",
        "--handler",
        "cancel_unpaid",
    ]);
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(
        (items[0]["id"].as_i64(), &items[0]["priority"]),
        (Some(id), &serde_json::json!(8))
    );
    let by_key = cli.json(&["tasks", "get", "--key", "order-7"]);
    assert_eq!(by_key["args"], serde_json::json!({"order": 7}));

    let cancelled = cli.json(&["tasks", "cancel", &id.to_string()]);
    assert_eq!(cancelled["state"], "cancelled");
    let (ok, _, stderr) = cli.run(&["tasks", "cancel", "--key", "order-7"]);
    assert!(!ok, "a cancelled task cannot be cancelled again");
    assert!(
        stderr.contains("not found"),
        "a cancelled task is gone: {stderr}"
    );

    // A bad task is refused naming it; nothing is stored.
    let (ok, _, stderr) = cli.run(&[
        "tasks",
        "add",
        "--app",
        "orders",
        "--handler",
        "remind",
        "--delay",
        "500d",
    ]);
    assert!(!ok);
    assert!(stderr.contains("tasks[0].delay"), "{stderr}");
    let all = cli.json(&["tasks", "ls"]);
    assert_eq!(all["items"].as_array().unwrap().len(), 1, "{all}");
}

/// The names of the jobs `carillon jobs ls` shows, in JSON.
fn job_names(list: &Value) -> Vec<String> {
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_works_in_the_namespace_its_flag_file_or_settings_name() {
    let node = Solo::start(|_| {}).await;
    let cli = Cli {
        node: &node,
        home: tempfile::tempdir().unwrap(),
    };
    for name in ["team-a", "team-b"] {
        let (status, made) = node
            .call(
                reqwest::Method::POST,
                "/api/v1/namespaces",
                Some(serde_json::json!({ "name": name })),
            )
            .await;
        assert_eq!(status, 201, "{made}");
    }
    let create = |namespace: &str| {
        cli.json(&[
            "--namespace",
            namespace,
            "jobs",
            "create",
            "--name",
            "nightly",
            "--app",
            "billing",
            "--handler",
            "report",
            "--cron",
            "0 30 2 * * ?",
        ])
    };
    assert_eq!(create("team-a")["namespace"], "team-a");
    assert_eq!(
        create("default")["namespace"],
        "default",
        "the same name elsewhere"
    );
    let (ok, _, stderr) = cli.run(&[
        "-n",
        "team-a",
        "jobs",
        "create",
        "--name",
        "nightly",
        "--app",
        "billing",
        "--handler",
        "report",
        "--cron",
        "0 30 2 * * ?",
    ]);
    assert!(
        !ok && stderr.contains("nightly"),
        "taken in team-a: {stderr}"
    );
    assert_eq!(
        job_names(&cli.json(&["-n", "team-b", "jobs", "ls"])),
        Vec::<String>::new()
    );

    // The settings file's namespace, which the flag overrides.
    let settings = cli.home.path().join("carillon");
    std::fs::create_dir_all(&settings).unwrap();
    std::fs::write(settings.join("cli.toml"), "namespace = \"team-b\"\n").unwrap();
    cli.json(&[
        "jobs",
        "create",
        "--name",
        "weekly",
        "--app",
        "billing",
        "--handler",
        "report",
        "--cron",
        "0 0 3 * * MON",
    ]);
    assert_eq!(job_names(&cli.json(&["jobs", "ls"])), ["weekly"]);
    assert_eq!(
        job_names(&cli.json(&["-n", "team-a", "jobs", "ls"])),
        ["nightly"]
    );

    // A file to apply names its namespace; a flag naming another is refused.
    let file = cli.home.path().join("team-a.yaml");
    std::fs::write(
        &file,
        "namespace: team-a\njobs:\n  - name: hourly\n    app: billing\n    handler: report\n    schedule: { cron: \"0 0 * * * ?\" }\n",
    )
    .unwrap();
    let applied = cli.json(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(applied["jobs"][0]["action"], "created", "{applied}");
    let mut names = job_names(&cli.json(&["-n", "team-a", "jobs", "ls"]));
    names.sort();
    assert_eq!(
        names,
        ["hourly", "nightly"],
        "applied in the file's namespace"
    );
    let (ok, _, stderr) = cli.run(&["-n", "team-b", "apply", "-f", file.to_str().unwrap()]);
    assert!(
        !ok && stderr.contains("\"team-a\"") && stderr.contains("\"team-b\""),
        "{stderr}"
    );

    // A namespace that cannot be one is refused before any call.
    let (ok, _, stderr) = cli.run(&["-n", "a&state=running", "jobs", "ls"]);
    assert!(
        !ok && stderr.contains("is not a namespace name"),
        "{stderr}"
    );

    // A settings file that does not read is named, with what is wrong.
    std::fs::write(settings.join("cli.toml"), "namspace = \"team-b\"\n").unwrap();
    let (ok, _, stderr) = cli.run(&["jobs", "ls"]);
    assert!(
        !ok && stderr.contains("cli.toml") && stderr.contains("namspace"),
        "{stderr}"
    );
}
