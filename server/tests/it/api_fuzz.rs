//! A property-based fuzz of the whole API, driven by the OpenAPI document the node serves
//! (schemathesis): no `5xx`, and no status, header, content type or body that the document
//! does not describe, for valid and invalid input alike, with and without a token, with the
//! admin token and with a namespace's editor token.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::process::Command;

use reqwest::Method;
use serde_json::json;
use support::node::{Solo, TOKEN};

const EXECUTOR_TOKEN: &str = "fuzz-executor-token-0123456789";
/// The command; `.ci/run` installs a pinned version.
const SCHEMATHESIS: &str = "schemathesis";

/// The schemathesis command; fails the test when it is not installed.
fn schemathesis() -> Command {
    let found = Command::new(SCHEMATHESIS)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "schemathesis is not installed (pip install schemathesis==4.32.5; .ci/run installs it)"
    );
    Command::new(SCHEMATHESIS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs schemathesis (pip install schemathesis==4.32.5; .ci/run installs it)"]
async fn the_api_answers_as_its_openapi_document_says() {
    let node = Solo::start(|spec| {
        spec.extra_env
            .push(("CARILLON_EXECUTOR_TOKEN", EXECUTOR_TOKEN.to_owned()));
    })
    .await;

    // Something to find: jobs, a run, an executor (whose address answers nothing, so runs end
    // as failures and dead letters).
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(
                json!({"name": "fuzz-seed", "app": "fuzz", "handler": "work",
                "schedule": {"every": "1s"}, "start": true,
                "retry": {"max_attempts": 2, "initial_delay_ms": 10}}),
            ),
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
    node.register_executor(
        EXECUTOR_TOKEN,
        json!({"protocol": 1, "executor_id": "fuzz-1", "app": "fuzz",
            "address": "http://127.0.0.1:9", "weight": 1, "capacity": 4,
            "handlers": [{"name": "work"}]}),
    )
    .await;

    // A namespace's editor token too: the cluster's operations and the namespace's tokens
    // refuse it and another namespace's resources are not found, each answer as the document
    // says. (An editor cannot revoke itself, and it runs first: the admin token's run revokes
    // tokens by the ids it makes up.)
    let (status, _) = node
        .call(
            Method::POST,
            "/api/v1/namespaces",
            Some(json!({"name": "fuzz-team"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, created) = node
        .call(
            Method::POST,
            "/api/v1/tokens?namespace=fuzz-team",
            Some(json!({"name": "fuzzer", "role": "editor"})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let team_token = created["token"].as_str().unwrap().to_owned();
    let (status, job) = node
        .call(
            Method::POST,
            "/api/v1/jobs?namespace=fuzz-team",
            Some(
                json!({"name": "fuzz-team-seed", "app": "fuzz", "handler": "work",
                "schedule": {"every": "1s"}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{job}");

    let seed = std::env::var("CARILLON_FUZZ_SEED").unwrap_or_else(|_| "20261122".to_owned());
    // Examples per operation and token: a sample in a plain run (the seed is fixed, so every
    // run asks the same), as many as wanted with `CARILLON_FUZZ_EXAMPLES`.
    let examples = std::env::var("CARILLON_FUZZ_EXAMPLES").unwrap_or_else(|_| "15".to_owned());
    for (who, token) in [
        ("a namespace's editor token", team_token.as_str()),
        ("the admin token", TOKEN),
    ] {
        fuzz(&node, who, token, &seed, &examples);
        // The token's run was a run of its role, not of refusals: it still opens its namespace.
        let (status, answer) = node.call_as(token, Method::GET, "/api/v1/jobs", None).await;
        assert_eq!(status, 200, "{who}: {answer}");
    }
}

/// Runs schemathesis over the whole document with `token`, failing on any answer the
/// document does not allow.
fn fuzz(node: &Solo, who: &str, token: &str, seed: &str, examples: &str) {
    let report_dir = tempfile::tempdir().unwrap();
    let run = || {
        schemathesis()
            .args(["run", &node.url("/api/v1/openapi.json")])
            .args(["--url", &node.url("")])
            .args(["--header", &format!("Authorization: Bearer {token}")])
            .args(["--checks", "all"])
            // A request the schema allows may still be refused for what a schema cannot say (a
            // cron expression that does not parse, a name already taken): a documented 400/409.
            .args(["--exclude-checks", "positive_data_acceptance"])
            .args(["--max-examples", examples, "--workers", "2", "--seed", seed])
            .args(["--request-timeout", "20"])
            .args(["--report-dir", report_dir.path().to_str().unwrap()])
            .args(["--no-color", "--warnings", "off"])
            .env("SCHEMATHESIS_HOOKS", "")
            // Its cache of found failures goes with the reports, not into the source tree.
            .current_dir(report_dir.path())
            .output()
            .unwrap()
    };
    let mut output = run();
    // The tool itself may crash on an operation (seen once: hypothesis's "AST constructor
    // recursion depth mismatch" while describing a strategy); that says nothing of the API, so
    // a run whose only errors are the tool's runtime errors, with no failure found, is run
    // again once. A failure the API caused is never retried.
    let tool_crashed = |o: &std::process::Output| {
        let text = String::from_utf8_lossy(&o.stdout);
        !o.status.success() && text.contains("Runtime Error") && !text.contains("FAILURES")
    };
    if tool_crashed(&output) {
        eprintln!(
            "schemathesis crashed on its own, running it again:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
        output = run();
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: String = stdout
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect::<Vec<_>>()
        .join("\n");
    eprintln!("with {who}:\n{summary}");
    assert!(
        output.status.success(),
        "schemathesis found responses the document does not allow with {who} (seed {seed}, {examples} examples an operation):\n{stdout}\n{stderr}\nnode log:\n{}",
        node.log_text()
    );
    // Every operation of the document was tested ("Selected: 31/31", "Tested: 31").
    let figure = |label: &str| {
        summary
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .map(|rest| rest.trim().rsplit('/').next().unwrap_or("").to_owned())
    };
    let (selected, tested) = (figure("Selected:"), figure("Tested:"));
    assert!(
        selected.is_some() && selected == tested,
        "every operation should have been fuzzed with {who}:\n{summary}"
    );
}
