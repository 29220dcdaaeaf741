//! `carillon apply`: jobs, their children and workflows from a file, applied again without
//! change, and driven from the command line.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use serde_json::Value;
use support::node::Solo;

use super::cli::Cli;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_names_children_by_name_and_the_flags_by_id() {
    let node = Solo::start(|_| {}).await;
    let cli = Cli {
        node: &node,
        home: tempfile::tempdir().unwrap(),
    };
    // `extract` names jobs the file creates after it.
    let yaml = cli.home.path().join("etl.yaml");
    std::fs::write(
        &yaml,
        r#"
jobs:
  - name: extract
    app: etl
    handler: extract
    schedule: { cron: "0 0 2 * * ?" }
    children:
      on_success: [load]
      on_failure: [alert]
  - name: load
    app: etl
    handler: load
    schedule: { manual: true }
  - name: alert
    app: etl
    handler: page
    schedule: { manual: true }
"#,
    )
    .unwrap();
    let first = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    let actions: Vec<&Value> = (0..3).map(|i| &first["jobs"][i]["action"]).collect();
    assert_eq!(actions, ["created", "created", "created"], "{first}");
    let id_of = |i: usize| first["jobs"][i]["id"].clone();
    let extract = cli.json(&["jobs", "get", &id_of(0).to_string()]);
    assert_eq!(
        extract["children"],
        serde_json::json!({"on_success": [id_of(1)], "on_failure": [id_of(2)]}),
        "{extract}"
    );
    let second = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    for i in 0..3 {
        assert_eq!(second["jobs"][i]["action"], "unchanged", "{second}");
    }

    // A child nobody has is named, and nothing is written.
    let bad = cli.home.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "jobs:\n  - name: report\n    app: etl\n    handler: report\n    schedule: { manual: true }\n    children: { always: [nowhere] }\n",
    )
    .unwrap();
    let (ok, _, stderr) = cli.run(&["apply", "-f", bad.to_str().unwrap()]);
    assert!(!ok && stderr.contains("\"nowhere\""), "{stderr}");
    assert_eq!(
        cli.json(&["jobs", "ls"])["jobs"].as_array().unwrap().len(),
        3
    );

    // The flags name children by id; a circle is refused, naming it.
    let load = id_of(1).to_string();
    let alert = id_of(2).to_string();
    let edited = cli.json(&["jobs", "edit", &load, "--child-always", &alert]);
    assert_eq!(
        edited["children"],
        serde_json::json!({"always": [id_of(2)]})
    );
    let (ok, _, stderr) = cli.run(&[
        "jobs",
        "edit",
        &alert,
        "--child-on-success",
        &id_of(0).to_string(),
    ]);
    assert!(!ok && stderr.contains("circle"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_are_applied_from_a_file_and_driven_from_the_cli() {
    let node = Solo::start(|_| {}).await;
    let cli = Cli {
        node: &node,
        home: tempfile::tempdir().unwrap(),
    };
    // A job and a workflow that runs it as a step, named by name, in one file.
    let yaml = cli.home.path().join("etl.yaml");
    std::fs::write(
        &yaml,
        r#"
jobs:
  - name: publish
    app: etl
    handler: publish
    schedule: { manual: true }
workflows:
  - name: nightly
    schedule: { cron: "0 0 2 * * ?" }
    params: { date: yesterday }
    steps:
      - { name: extract, app: etl, handler: extract, args: { region: eu } }
      - { name: load, app: etl, handler: load, needs: [extract] }
      - { name: publish, job: publish, needs: [{ step: load, on: always }] }
"#,
    )
    .unwrap();
    let first = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    assert_eq!(first["jobs"][0]["action"], "created", "{first}");
    assert_eq!(first["jobs"][1]["action"], "created", "{first}");
    let second = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    assert_eq!(second["jobs"][1]["action"], "unchanged", "{second}");
    let id = first["jobs"][1]["id"].to_string();
    let workflow = cli.json(&["workflows", "get", &id]);
    assert_eq!(
        workflow["steps"][2]["job"], first["jobs"][0]["id"],
        "{workflow}"
    );
    assert_eq!(
        workflow["steps"][2]["needs"][0],
        serde_json::json!({"step": "load", "on": "always"})
    );
    let listed = cli.json(&["workflows", "ls"]);
    assert_eq!(listed["workflows"].as_array().unwrap().len(), 1);

    // A changed step is an update; the graph is checked by the server.
    let changed = std::fs::read_to_string(&yaml)
        .unwrap()
        .replace("region: eu", "region: us");
    std::fs::write(&yaml, changed).unwrap();
    let third = cli.json(&["apply", "-f", yaml.to_str().unwrap()]);
    assert_eq!(third["jobs"][1]["action"], "updated", "{third}");
    let cyclic = cli.home.path().join("cyclic.yaml");
    std::fs::write(
        &cyclic,
        "workflows:\n  - name: loop\n    schedule: { manual: true }\n    steps:\n      - { name: a, app: x, handler: y, needs: [b] }\n      - { name: b, app: x, handler: y, needs: [a] }\n",
    )
    .unwrap();
    let (ok, _, stderr) = cli.run(&["apply", "-f", cyclic.to_str().unwrap()]);
    assert!(!ok && stderr.contains("cycle"), "{stderr}");

    // Triggered with parameters: no executor serves `etl`, so its first step waits; cancel.
    let run = cli.json(&[
        "workflows",
        "trigger",
        &id,
        "--params",
        r#"{"date":"2026-11-25"}"#,
    ]);
    let run_id = run["id"].to_string();
    let shown = cli.json(&["workflows", "run", &run_id]);
    assert_eq!(shown["steps"].as_array().unwrap().len(), 3, "{shown}");
    let cancelled = cli.json(&["workflows", "cancel", &run_id]);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled}");
    assert_eq!(
        cancelled["params"],
        serde_json::json!({"date": "2026-11-25"})
    );
    let again = cli.json(&["workflows", "rerun", &run_id]);
    assert_eq!(again["rerun_of"].to_string(), run_id, "{again}");
    cli.json(&["workflows", "cancel", &again["id"].to_string()]);
    let runs = cli.json(&["workflows", "runs", &id]);
    assert_eq!(runs["runs"][1]["id"].to_string(), run_id);
    let (ok, _, stderr) = cli.run(&["workflows", "rm", &id]);
    assert!(ok, "{stderr}");
    assert!(
        cli.json(&["workflows", "ls"])["workflows"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
