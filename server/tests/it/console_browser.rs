//! The web console in a real browser: headless Chromium, driven by Playwright
//! (`tests/console/console_test.mjs`), against a real node with a real executor. It signs in,
//! creates a cron job and sees its schedule preview, starts it and watches its runs appear,
//! opens a failed run's error, searches, stops and deletes, and checks a phone-sized screen.
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

use support::executor::Executor;
use support::node::{Solo, TOKEN};

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
