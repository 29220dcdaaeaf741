//! The web console in a real browser: headless Chromium, driven by Playwright
//! (`tests/console/console_test.mjs`), against a real node with a real executor. It signs in,
//! creates a cron job and sees its schedule preview, starts it and watches its runs appear,
//! opens a failed run's error, searches, stops and deletes, and checks a phone-sized screen.
//!
//! A person signs in too, through a real OpenID provider (`tests/console/console_sign_in_test.mjs`
//! against npm's `oidc-provider`), and sees only their namespace's work and their own changes
//! in the audit page.
//!
//! Needs Node.js, `playwright-core` (`npm ci` in `tests/console`) and Debian's `chromium`;
//! `.ci/run` installs them and runs it with `--include-ignored`; a plain `cargo test` reports
//! it ignored.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use support::executor::Executor;
use support::node::{Solo, TOKEN};
use support::oidc::{AUDIENCE, Provider, ProviderSpec};

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// What is missing to run the browser test, if anything.
fn missing(dir: &Path) -> Option<String> {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node {
        return Some("Node.js (`node`) is not installed".to_owned());
    }
    if !dir.join("node_modules/playwright-core").is_dir() {
        return Some(format!(
            "playwright-core is not installed: run `npm ci` in {}",
            dir.display()
        ));
    }
    if !chromium().exists() {
        return Some(format!(
            "{} does not exist: install Debian's chromium, or set CHROMIUM",
            chromium().display()
        ));
    }
    None
}

#[tokio::test]
#[ignore = "needs Node.js, playwright-core (npm ci in server/tests/console) and chromium"]
async fn the_console_creates_starts_and_shows_jobs_and_their_runs_in_a_browser() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console");
    if let Some(what) = missing(&dir) {
        panic!("the browser test cannot run: {what}");
    }
    let node = Solo::start(|spec| spec.extra_env = support::executor::node_env()).await;
    let _py = Executor::start_registered(&node, "py", "py-1").await;

    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screens");
    let run = tokio::process::Command::new("node")
        .arg(dir.join("console_test.mjs"))
        .current_dir(&dir)
        .env("CONSOLE_URL", node.url(""))
        .env("CONSOLE_TOKEN", TOKEN)
        .env("CONSOLE_APP", "py")
        .env("CHROMIUM", chromium())
        .env("SCREENSHOT_DIR", &screenshots)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .expect("the browser test finished within 4 minutes")
        .expect("node runs the browser test");
    let say = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(
        output.status.success(),
        "the browser test failed ({}); screenshots in {}\n--- its output:\n{}\n{}\n--- the node's log:\n{}",
        output.status,
        screenshots.display(),
        say(&output.stdout),
        say(&output.stderr),
        node.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js, playwright-core and oidc-provider (npm ci in server/tests/console and server/tests/oidc) and chromium"]
async fn a_person_signs_in_to_the_console_through_the_provider_and_sees_only_their_namespace() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console");
    if let Some(what) = missing(&dir) {
        panic!("the browser test cannot run: {what}");
    }
    let provider = Provider::start(&ProviderSpec {
        accounts: json!({"alice": ["team-a-admins"]}),
        alg: "RS256",
        port: None,
    });
    let settings = tempfile::tempdir().unwrap();
    let config = settings.path().join("carillon.toml");
    std::fs::write(
        &config,
        format!(
            "[auth.oidc]\nissuer = \"{}\"\naudience = \"{AUDIENCE}\"\nclient_id = \"carillon\"\n\
             scopes = \"openid carillon\"\n",
            provider.issuer
        ),
    )
    .unwrap();
    let env = vec![("CARILLON_CONFIG", config.display().to_string())];
    let node = Solo::start(|spec| spec.extra_env = env).await;
    let setup = [
        ("/api/v1/namespaces", json!({"name": "team-a"})),
        ("/api/v1/namespaces", json!({"name": "team-b"})),
        (
            "/api/v1/grants?namespace=team-a",
            json!({"group": "team-a-admins", "role": "admin"}),
        ),
        (
            "/api/v1/jobs?namespace=team-a",
            json!({"name": "a-report", "app": "billing", "handler": "report",
                   "schedule": {"cron": "0 0 2 * * ?"}}),
        ),
        (
            "/api/v1/jobs?namespace=team-b",
            json!({"name": "b-report", "app": "billing", "handler": "report",
                   "schedule": {"cron": "0 0 2 * * ?"}}),
        ),
    ];
    for (path, body) in setup {
        let (status, answer) = node.call(Method::POST, path, Some(body)).await;
        assert_eq!(status, 201, "{path}: {answer}");
    }

    let screenshots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screens");
    let run = tokio::process::Command::new("node")
        .arg(dir.join("console_sign_in_test.mjs"))
        .current_dir(&dir)
        .env("CONSOLE_URL", node.url(""))
        .env("LOGIN", "alice")
        .env("NAMESPACE", "team-a")
        .env("OWN_JOB", "a-report")
        .env("OTHER_JOB", "b-report")
        .env("CHROMIUM", chromium())
        .env("SCREENSHOT_DIR", &screenshots)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the sign-in test finished within 2 minutes")
        .expect("node runs the sign-in test");
    let say = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(
        output.status.success(),
        "the sign-in test failed ({}); screenshots in {}\n--- its output:\n{}\n{}\n--- the node's log:\n{}",
        output.status,
        screenshots.display(),
        say(&output.stdout),
        say(&output.stderr),
        node.log_text()
    );
    // The console may call the provider, and nothing else beside its node.
    let page = reqwest::get(node.url("/")).await.unwrap();
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains(&format!("connect-src 'self' {};", provider.issuer)),
        "{csp}"
    );
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_with_a_strict_content_security_policy() {
    let node = Solo::start(|_| {}).await;
    let get = |path: &str| reqwest::get(node.url(path));
    let page = get("/").await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(r#"<script type="module" src="/console/app.js">"#),
        "{html}"
    );
    let script = get("/console/app.js").await.unwrap();
    assert_eq!(script.status(), 200);
    assert!(
        script.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    // Only the console's own files, and no way out of its folder.
    for path in ["/console/nope.js", "/console/..%2Fbuild.rs", "/console/"] {
        assert_eq!(get(path).await.unwrap().status(), 404, "{path}");
    }
}
