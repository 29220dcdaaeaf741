//! The Grafana dashboard (`deploy/grafana/carillon.json`) and the Prometheus alerting rules
//! (`deploy/prometheus/`) against a real node: `promtool` checks the rules and runs their unit
//! tests, and every metric a panel or a rule names is one the node exports, with every label
//! the query groups or filters by.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support;
use support::executor::Executor;
use support::node::Solo;

/// Labels Prometheus adds (or histograms have) that a node does not write.
const ADDED_LABELS: [&str; 3] = ["instance", "job", "le"];

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs promtool (Debian's prometheus package; .ci/run installs it)"]
async fn the_dashboard_and_alert_rules_use_what_a_node_exports() {
    for args in [
        ["check", "rules", "carillon-rules.yaml"],
        ["test", "rules", "carillon-rules.test.yaml"],
    ] {
        let ran = Command::new("promtool")
            .args(args)
            .current_dir(deploy("prometheus"))
            .output()
            .unwrap_or_else(|e| panic!("promtool did not run: {e}"));
        assert!(
            ran.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        );
    }

    let exported = Exported::of(&busy_node_metrics().await);
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(deploy("grafana/carillon.json")).unwrap())
            .unwrap();
    let mut queries = Vec::new();
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_i64().unwrap()), "{panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{panel}");
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{panel}");
        for target in targets {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["definition"].as_str() {
            queries.push(query.to_owned());
        }
    }
    let rules = std::fs::read_to_string(deploy("prometheus/carillon-rules.yaml")).unwrap();
    queries.extend(rule_expressions(&rules));
    for query in &queries {
        exported.check(query);
    }
    // What the rules' descriptions tell an operator to look at must exist too.
    exported.check_names(&rules);
}

/// `/metrics` of a node that has done what makes every series show: an executor registered,
/// a job run, a namespace with quotas.
async fn busy_node_metrics() -> String {
    let node = Solo::start(|spec| spec.extra_env = support::executor::node_env()).await;
    let _executor = Executor::start_registered(&node, "py", "py-1").await;
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": "team-a", "quotas": {"jobs": 10, "pending_tasks": 100}})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs?namespace=team-a",
            Some(json!({"name": "work", "app": "py", "handler": "echo",
                "schedule": {"manual": true}})),
        )
        .await;
    assert_eq!(status, 201, "{job}");
    let (status, run) = node
        .call(
            Method::POST,
            &format!("/api/v1/jobs/{}/trigger", job["id"]),
            None,
        )
        .await;
    assert_eq!(status, 202, "{run}");
    let path = format!("/api/v1/runs/{}", run["id"]);
    support::wait_for(Duration::from_secs(30), "the run to end", || async {
        let (_, run) = node.call(Method::GET, &path, None).await;
        (run["state"] == "succeeded").then_some(())
    })
    .await;
    node.metrics().await
}

/// The `expr` of each rule.
fn rule_expressions(rules: &str) -> Vec<String> {
    let rules: Value = yaml_serde::from_str(rules).unwrap();
    let found: Vec<String> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|group| group["rules"].as_array().unwrap())
        .map(|rule| rule["expr"].as_str().unwrap().to_owned())
        .collect();
    assert!(found.len() >= 5, "the rules' expressions: {found:?}");
    found
}

/// The series a node exported: each metric's kind and the labels its samples carry.
struct Exported {
    kinds: BTreeMap<String, String>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

impl Exported {
    fn of(text: &str) -> Self {
        let mut kinds = BTreeMap::new();
        let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                kinds.insert(name.to_owned(), kind.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let name = line.split(['{', ' ']).next().unwrap();
                let names = labels.entry(name.to_owned()).or_default();
                if let Some((_, set)) = line.split_once('{') {
                    for pair in set.split_once('}').unwrap().0.split(',') {
                        names.insert(pair.split('=').next().unwrap().to_owned());
                    }
                }
            }
        }
        Exported { kinds, labels }
    }

    /// Every `carillon_…` name in `query` is exported, with every label the query names.
    fn check(&self, query: &str) {
        let metrics = self.check_names(query);
        for metric in &metrics {
            let has = self
                .labels
                .get(metric.as_str())
                .cloned()
                .unwrap_or_default();
            for label in labels_in(query) {
                assert!(
                    ADDED_LABELS.contains(&label.as_str()) || has.contains(&label),
                    "{metric} has no label {label:?}, which {query} uses; it has {has:?}"
                );
            }
        }
    }

    /// Every `carillon_…` name in `text` is exported; the names.
    fn check_names(&self, text: &str) -> BTreeSet<String> {
        let metrics = names_in(text);
        for metric in &metrics {
            assert!(
                self.family_of(metric).is_some(),
                "{metric} (in {text}) is not exported; the node exports: {:?}",
                self.kinds.keys().collect::<Vec<_>>()
            );
        }
        metrics
    }

    /// The metric family a sample name belongs to (a histogram's `_bucket`, `_sum`, `_count`).
    fn family_of<'a>(&'a self, name: &'a str) -> Option<&'a str> {
        if self.kinds.contains_key(name) {
            return Some(name);
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            (self.kinds.get(base)? == "histogram").then_some(base)
        })
    }
}

/// The `carillon_…` metric names in a query (or any text).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("carillon_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

/// The labels a query groups by (`by (…)`) or matches (`{label="…"}`).
fn labels_in(query: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for part in query.split("by (").skip(1) {
        for label in part.split(')').next().unwrap().split(',') {
            labels.insert(label.trim().to_owned());
        }
    }
    for part in query.split('{').skip(1) {
        let matchers = part.split('}').next().unwrap();
        // `{{ $labels.x }}` is a template, not a matcher.
        if matchers.contains("$labels") {
            continue;
        }
        for matcher in matchers.split(',') {
            let label = matcher.split(['=', '!', '~']).next().unwrap().trim();
            if !label.is_empty() {
                labels.insert(label.to_owned());
            }
        }
    }
    labels
}
