//! `carillon login` against a real OpenID provider (npm's `oidc-provider`, started by the
//! test): a person signs in by the device flow (the test confirms the code on the provider's
//! pages, as the person would on a phone) or in a browser on this machine (the test plays the
//! browser), and the client commands then work as that person, renewing the sign-in when its
//! access token has expired, until `carillon logout`.
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::support;
use support::node::Solo;
use support::oidc::{AUDIENCE, Provider, ProviderSpec};

/// A node whose people sign in with `provider`'s client `carillon`; `everyone` edits
/// `default`.
async fn node_of(provider: &Provider, dir: &Path) -> Solo {
    let path = dir.join("carillon.toml");
    std::fs::write(
        &path,
        format!(
            "[auth.oidc]\nissuer = \"{}\"\naudience = \"{AUDIENCE}\"\nclient_id = \"carillon\"\n\
             scopes = \"openid offline_access carillon\"\n",
            provider.issuer
        ),
    )
    .unwrap();
    let env = vec![("CARILLON_CONFIG", path.display().to_string())];
    let node = Solo::start(|spec| spec.extra_env = env).await;
    let (status, answer) = node
        .call(
            Method::POST,
            "/api/v1/grants",
            Some(json!({"group": "everyone", "role": "editor"})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    node
}

fn provider() -> Provider {
    Provider::start(&ProviderSpec {
        accounts: json!({"dave": ["everyone"]}),
        alg: "ES256",
        port: None,
    })
}

/// `carillon <args>` for the node at `url` with no token: only what `home` keeps.
fn cli(url: &str, home: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_carillon"));
    command
        .args(args)
        .env("CARILLON_URL", url)
        .env_remove("CARILLON_TOKEN")
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("CARILLON_CREDENTIALS")
        .env_remove("CARILLON_CLI_CONFIG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn run(url: &str, home: &Path, args: &[&str]) -> (bool, String, String) {
    let output = cli(url, home, args).output().await.unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// A `carillon login` under way: the child, and what it writes to stderr after the address
/// it asks the person to open (read meanwhile, so it never blocks on a full pipe).
struct Login {
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<String>,
}

/// Starts `carillon login <args>`; the login and the address it asks the person to open.
async fn start_login(url: &str, home: &Path, args: &[&str]) -> (Login, String) {
    let mut child = cli(url, home, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let page = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(page) = line.strip_prefix("To sign in, open ") {
                return page.to_owned();
            }
        }
        panic!("carillon login printed no address to open");
    })
    .await
    .expect("carillon login asks the person to open an address");
    let stderr = tokio::spawn(async move {
        let mut rest = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push_str(&line);
            rest.push('\n');
        }
        rest
    });
    (Login { child, stderr }, page)
}

async fn finished(login: Login) -> String {
    let output = tokio::time::timeout(Duration::from_secs(30), login.child.wait_with_output())
        .await
        .expect("carillon login ends once signed in")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = login.stderr.await.unwrap_or_default();
    assert!(
        output.status.success(),
        "carillon login failed ({}): {stdout}\n--- its stderr:\n{stderr}",
        output.status
    );
    stdout
}

fn credentials(home: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(home.join("config/carillon/credentials.json")).unwrap())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)"]
async fn a_person_signs_in_with_a_code_and_the_cli_uses_and_renews_the_sign_in() {
    let provider = provider();
    let dir = tempfile::tempdir().unwrap();
    let node = node_of(&provider, dir.path()).await;
    let url = node.url("");
    let home = dir.path().join("home");

    let (ok, _, err) = run(&url, &home, &["jobs", "ls"]).await;
    assert!(!ok && err.contains("carillon login"), "{err}");

    let (child, page) = start_login(&url, &home, &["login"]).await;
    assert!(page.contains("user_code="), "{page}");
    provider.confirm_device(&page, "dave").await;
    let said = finished(child).await;
    assert!(
        said.contains(&format!("signed in to {url} as dave")),
        "{said}"
    );

    // Kept for this node only, readable by its owner only.
    let file = home.join("config/carillon/credentials.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let kept = credentials(&home)["nodes"][&url].clone();
    assert!(kept["refresh_token"].is_string(), "{kept}");

    // The client commands act as dave.
    let (ok, out, err) = run(
        &url,
        &home,
        &[
            "jobs",
            "create",
            "--name",
            "by-dave",
            "--app",
            "a",
            "--handler",
            "h",
            "--cron",
            "0 0 2 * * ?",
        ],
    )
    .await;
    assert!(ok, "{out}{err}");
    let (status, trail) = node
        .call(Method::GET, "/api/v1/audit?operation=createJob", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(trail["events"][0]["actor"], "user dave", "{trail}");

    // An expired access token is renewed with the refresh token, and kept.
    let mut edited = credentials(&home);
    edited["nodes"][&url]["expires_at_s"] = json!(1);
    std::fs::write(&file, serde_json::to_vec(&edited).unwrap()).unwrap();
    let (ok, out, err) = run(&url, &home, &["jobs", "ls"]).await;
    assert!(ok && out.contains("by-dave"), "{out}{err}");
    let renewed = credentials(&home)["nodes"][&url].clone();
    assert_ne!(renewed["access_token"], kept["access_token"]);
    assert!(renewed["expires_at_s"].as_i64().unwrap() > 1);

    // Signed out, the commands have no token again.
    let (ok, out, _) = run(&url, &home, &["logout"]).await;
    assert!(ok && out.contains("signed out"), "{out}");
    let (ok, _, err) = run(&url, &home, &["jobs", "ls"]).await;
    assert!(!ok && err.contains("no token"), "{err}");
    let (ok, out, _) = run(&url, &home, &["logout"]).await;
    assert!(ok && out.contains("nobody was signed in"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and oidc-provider (npm ci in server/tests/oidc)"]
async fn a_person_signs_in_in_a_browser_on_this_machine() {
    let provider = provider();
    let dir = tempfile::tempdir().unwrap();
    let node = node_of(&provider, dir.path()).await;
    let url = node.url("");
    let home = dir.path().join("home");

    let (child, page) = start_login(&url, &home, &["login", "--browser", "--no-open"]).await;
    // Another program's request to the CLI's port, with a state of its own, is turned away and
    // the CLI keeps waiting for the provider's answer.
    let redirect = reqwest::Url::parse(&page)
        .unwrap()
        .query_pairs()
        .find(|(key, _)| key == "redirect_uri")
        .map(|(_, value)| value.into_owned())
        .unwrap();
    let stray = carillon_tls::http_client()
        .unwrap()
        .get(format!("{redirect}?code=stolen&state=guessed"))
        .send()
        .await
        .unwrap();
    assert_eq!(stray.status(), 404);
    // The test is the browser: the provider's pages, then its answer to the CLI's port.
    let back = provider.follow(page, None, "dave").await;
    assert!(
        back.starts_with("http://127.0.0.1:") && back.contains("/callback?"),
        "{back}"
    );
    let shown = carillon_tls::http_client()
        .unwrap()
        .get(&back)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(shown.contains("Signed in"), "{shown}");
    let said = finished(child).await;
    assert!(said.contains("as dave"), "{said}");
    let (ok, out, err) = run(&url, &home, &["cluster"]).await;
    assert!(ok, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_says_so_when_the_node_has_no_identity_provider() {
    let node = Solo::start(|_| {}).await;
    let home = tempfile::tempdir().unwrap();
    let (ok, _, err) = run(&node.url(""), home.path(), &["login"]).await;
    assert!(!ok, "{err}");
    assert!(
        err.contains("404") && err.contains("[auth.oidc] with a client_id"),
        "{err}"
    );
}
