//! The demo: a single admin node on embedded SQLite and an executor app with four kinds of
//! job, in one process, so that `cargo run -p carillon-demo` shows jobs firing, sharding,
//! retrying and reporting late results within a minute.

mod jobs;

use std::time::Duration;

use anyhow::Context;
use carillon_executor::Executor;
use carillon_server::app::Application;
use carillon_server::config::Config;
use carillon_server::data_dir::DataDir;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// The SDK drains for 30 s, then cancels what still runs and waits 5 s more.
const EXECUTOR_DRAIN_LIMIT: Duration = Duration::from_secs(40);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match std::env::var("CARILLON_ADMIN_URLS") {
        Ok(urls) => executor_alone(&urls).await,
        Err(_) => node_and_executor().await,
    }
}

/// The node and the executor in one process, on SQLite: the quickstart.
async fn node_and_executor() -> anyhow::Result<()> {
    // The server's own variables, for the few settings a demo may need to move.
    let mut config = Config::default();
    if let Ok(url) = std::env::var("CARILLON_DATABASE_URL") {
        config.database.url = Some(carillon_server::config::Secret::new(url));
    }
    if let Ok(listen) = std::env::var("CARILLON_LISTEN") {
        config.http.listen = listen
            .parse()
            .with_context(|| format!("CARILLON_LISTEN={listen:?} is not an address:port"))?;
    }
    if let Some(dir) = std::env::var_os("CARILLON_DATA_DIR") {
        config.data_dir = Some(dir.into());
    }
    // Its executor listens on this machine, and HTTP jobs of a first try call services here:
    // the demo opens loopback on purpose, and the node says so as it starts. A server's
    // default does not.
    config.egress.allowed_networks = vec!["public".to_owned(), "loopback".to_owned()];
    carillon_server::telemetry::init(&config.log);
    let data_dir = DataDir::open(&config.data_dir()).context("opening the data directory")?;
    let listen = config.http.listen;
    let app = Application::build(config)
        .await
        .with_context(|| format!("starting the admin node (is something else on {listen}?)"))?;
    let admin = format!("http://{}", app.local_addr());
    let node_stop = CancellationToken::new();
    let node = tokio::spawn(app.run_until_stopped(node_stop.clone()));

    let executor = Executor::builder()
        .app("demo")
        .admin_urls([admin.clone()])
        .executor_token(data_dir.executor_token()?.value.expose())
        .dispatch_secret(data_dir.dispatch_secret()?.value.expose())
        .capacity(8)
        .build()?;
    let executor_stop = CancellationToken::new();
    let executor = tokio::spawn({
        let stop = executor_stop.clone();
        executor.run_until(async move { stop.cancelled().await })
    });

    let token = data_dir.admin_token()?;
    create_api_jobs(&admin, token.value.expose()).await?;
    info!(
        "demo running. The jobs declared in code (demo.hello every 5 s, demo.long_report every \
         5 min) and two created through the API (demo-sharded, demo-flaky) are firing."
    );
    info!(
        "the web console is at {admin}/ : sign in with the token in {}",
        token.path.display()
    );
    info!(
        "look around: TOKEN=$(cat {}) ; curl -s -H \"Authorization: Bearer $TOKEN\" {admin}/api/v1/jobs \
         ; then /api/v1/runs, /api/v1/runs/<id>, /api/v1/executors, /api/v1/dead-letters, /api/v1/cluster",
        token.path.display()
    );

    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    // The executor leaves first, through its own node: a node stopped first would leave it
    // nobody to deregister with.
    info!("stopping: the executor drains and deregisters, then the node leaves the cluster");
    executor_stop.cancel();
    match tokio::time::timeout(EXECUTOR_DRAIN_LIMIT, executor).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => warn!(error = %e, "the demo's executor stopped with an error"),
        Ok(Err(e)) => warn!(error = %e, "the demo's executor task failed"),
        Err(_) => warn!("the demo's executor did not stop in time; stopping the node anyway"),
    }
    node_stop.cancel();
    node.await.context("the admin node's task failed")??;
    Ok(())
}

/// Only the executor, for a cluster that runs elsewhere (`compose.yaml`): it registers with
/// the nodes of `CARILLON_ADMIN_URLS` (comma-separated) with the cluster's executor token and
/// dispatch key, listens on `CARILLON_EXECUTOR_LISTEN` (default 0.0.0.0:9100) and is reached
/// at `CARILLON_EXECUTOR_ADVERTISE`; with `CARILLON_ADMIN_TOKEN` it also creates the API's
/// jobs. SIGTERM (a container's stop) or Ctrl-C drains it.
async fn executor_alone(urls: &str) -> anyhow::Result<()> {
    carillon_server::telemetry::init(&Config::default().log);
    let setting = |name: &str| std::env::var(name).with_context(|| format!("{name} is not set"));
    let admins: Vec<String> = urls
        .split(',')
        .map(|url| url.trim().trim_end_matches('/').to_owned())
        .filter(|url| !url.is_empty())
        .collect();
    let first = admins
        .first()
        .cloned()
        .context("CARILLON_ADMIN_URLS names no node")?;
    let listen =
        std::env::var("CARILLON_EXECUTOR_LISTEN").unwrap_or_else(|_| "0.0.0.0:9100".into());
    let listen = listen
        .parse()
        .with_context(|| format!("CARILLON_EXECUTOR_LISTEN={listen:?} is not an address:port"))?;
    let mut builder = Executor::builder()
        .app("demo")
        .admin_urls(admins)
        .listen(listen)
        .executor_token(setting("CARILLON_EXECUTOR_TOKEN")?)
        .dispatch_secret(setting("CARILLON_DISPATCH_SECRET")?)
        .capacity(8);
    if let Ok(advertise) = std::env::var("CARILLON_EXECUTOR_ADVERTISE") {
        builder = builder.advertise(advertise);
    }
    let executor = builder.build()?;
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        executor.run_until(async move { stop.cancelled().await })
    });
    if let Ok(token) = std::env::var("CARILLON_ADMIN_TOKEN") {
        create_api_jobs(&first, &token).await?;
    }
    info!("demo executor running for the nodes at {urls}");
    stopped().await?;
    info!("stopping: the executor drains and deregisters");
    stop.cancel();
    match tokio::time::timeout(EXECUTOR_DRAIN_LIMIT, running).await {
        Ok(Ok(done)) => done.context("the demo's executor stopped with an error"),
        Ok(Err(e)) => Err(e).context("the demo's executor task failed"),
        Err(_) => anyhow::bail!("the demo's executor did not stop in time"),
    }
}

/// Waits for Ctrl-C or SIGTERM.
async fn stopped() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        interrupted = tokio::signal::ctrl_c() => interrupted.context("waiting for Ctrl-C"),
        _ = term.recv() => Ok(()),
    }
}

/// Jobs whose policies are set through the API: sharding and retries.
async fn create_api_jobs(admin: &str, token: &str) -> anyhow::Result<()> {
    let client = carillon_tls::http_client().context("building an HTTP client")?;
    let jobs = [
        json!({"name": "demo-sharded", "app": "demo", "handler": "reindex",
               "schedule": {"cron": "*/20 * * * * *"}, "args": [1, 2, 3, 4, 5, 6, 7, 8, 9],
               "sharding": {"count": 3}, "start": true}),
        json!({"name": "demo-flaky", "app": "demo", "handler": "flaky",
               "schedule": {"cron": "*/10 * * * * *"},
               "retry": {"max_attempts": 4, "backoff": "exponential", "initial_delay_ms": 500},
               "start": true}),
    ];
    for job in jobs {
        let sent = client
            .post(format!("{admin}/api/v1/jobs"))
            .bearer_auth(token)
            .json(&job)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() || r.status().as_u16() == 409 => {}
            Ok(r) => warn!(status = %r.status(), "could not create a demo job"),
            Err(e) => warn!(error = %e, "could not create a demo job"),
        }
    }
    Ok(())
}
