//! `carillon executor --scripts DIR`: the script executor, a process of its own on the hosts
//! where the scripts live (`crate::scripts` runs them).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use carillon_executor::Executor;
use clap::Args;
use tracing::{error, info, warn};

use crate::config::Config;
use crate::data_dir::DataDir;
use crate::scripts::{self, ScriptDir, ScriptSettings};

/// Variables of the executor's environment every script is given.
const ALWAYS_PASSED: [&str; 5] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ"];

#[derive(Debug, Args)]
pub(super) struct ExecutorArgs {
    /// The directory whose executable files are the handlers, each named by its file name
    /// without extension (`backup.sh` is the handler `backup`). Read at start.
    #[arg(long, env = "CARILLON_SCRIPTS")]
    scripts: PathBuf,
    /// The app the handlers are registered under; jobs name it with the handler.
    #[arg(long, env = "CARILLON_EXECUTOR_APP", default_value = "scripts")]
    app: String,
    /// Admin nodes' URLs (repeat, or comma-separate); default: the local default node, with
    /// the tokens of its data directory.
    #[arg(long = "admin", env = "CARILLON_ADMIN_URLS", value_delimiter = ',')]
    admin: Vec<String>,
    /// Where the dispatch endpoint listens.
    #[arg(
        long,
        env = "CARILLON_EXECUTOR_LISTEN",
        default_value = "127.0.0.1:9100"
    )]
    listen: SocketAddr,
    /// The URL the nodes reach this executor at (default: http:// and the bound address).
    #[arg(long, env = "CARILLON_EXECUTOR_ADVERTISE")]
    advertise: Option<String>,
    /// Scripts run at once; a dispatch beyond it is answered busy and the node offers it
    /// again or elsewhere.
    #[arg(long, env = "CARILLON_EXECUTOR_CAPACITY", default_value_t = 4)]
    capacity: u32,
    /// This executor's share of the app's dispatches against the others'.
    #[arg(long, default_value_t = 1)]
    weight: u32,
    /// A fixed executor id (default: the app and random digits).
    #[arg(long, env = "CARILLON_EXECUTOR_ID")]
    executor_id: Option<String>,
    /// The scripts' working directory (default: the scripts directory).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// A variable of this process's environment to give the scripts too (repeat, or
    /// comma-separate); PATH, HOME, LANG, LC_ALL and TZ always are, nothing else is.
    #[arg(long = "pass-env", value_delimiter = ',')]
    pass_env: Vec<String>,
    /// Seconds a script is given to stop after SIGTERM (on timeout or cancel) before its
    /// process group is killed.
    #[arg(long, default_value_t = 10)]
    kill_grace_secs: u64,
    /// Seconds a stop waits for running scripts before cancelling them.
    #[arg(long, default_value_t = 30)]
    drain_secs: u64,
    /// Serve HTTPS with this certificate chain (PEM)…
    #[arg(long, env = "CARILLON_EXECUTOR_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// …and this private key (PEM).
    #[arg(long, env = "CARILLON_EXECUTOR_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Accept only nodes presenting a client certificate signed by this CA (PEM).
    #[arg(long, env = "CARILLON_EXECUTOR_CLIENT_CA", requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Trust admin nodes served over HTTPS with certificates of this CA (PEM).
    #[arg(long, env = "CARILLON_ADMIN_CA")]
    admin_ca: Option<PathBuf>,
    /// The cluster's executor token (default with no --admin: the local node's).
    #[arg(long, env = "CARILLON_EXECUTOR_TOKEN", hide_env_values = true)]
    executor_token: Option<String>,
    /// The cluster's dispatch secret (default with no --admin: the local node's).
    #[arg(long, env = "CARILLON_DISPATCH_SECRET", hide_env_values = true)]
    dispatch_secret: Option<String>,
    /// Log filter, e.g. `info` or `carillon_server=debug`.
    #[arg(long, env = "CARILLON_LOG")]
    log: Option<String>,
}

/// Why the script executor could not start.
#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Scripts(#[from] scripts::ScriptsError),
    #[error(
        "{0} is not set: give the cluster's executor token and dispatch secret \
         (CARILLON_EXECUTOR_TOKEN, CARILLON_DISPATCH_SECRET) with --admin"
    )]
    Missing(&'static str),
    #[error("reading the local node's tokens in {dir}: {reason}")]
    LocalTokens { dir: PathBuf, reason: String },
    #[error(transparent)]
    Executor(#[from] carillon_executor::ExecutorError),
}

/// Runs the script executor until SIGINT or SIGTERM, then drains.
pub(super) async fn run(args: ExecutorArgs, config: &Config) -> ExitCode {
    let mut log = config.log.clone();
    if let Some(filter) = &args.log {
        log.filter.clone_from(filter);
    }
    crate::telemetry::init(&log);
    // Random, not the pid: executors in containers sharing a /tmp are all pid 1.
    let mut random = [0u8; 8];
    let _ = getrandom::fill(&mut random);
    let result_dir = std::env::temp_dir().join(format!(
        "carillon-scripts-{}-{:016x}",
        std::process::id(),
        u64::from_le_bytes(random)
    ));
    let served = serve(args, config, result_dir.clone()).await;
    let _ = std::fs::remove_dir_all(&result_dir);
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!(error = %err, "the script executor stopped");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ExecutorArgs, config: &Config, result_dir: PathBuf) -> Result<(), StartError> {
    let found = ScriptDir::scan(&args.scripts)?;
    for (path, why) in &found.skipped {
        warn!(file = %path.display(), reason = why, "not served");
    }
    let names: Vec<&str> = found.handlers.keys().map(String::as_str).collect();
    info!(dir = %args.scripts.display(), handlers = ?names, "scripts found");
    let mut pass_env: Vec<String> = ALWAYS_PASSED.iter().map(|v| (*v).to_owned()).collect();
    pass_env.extend(args.pass_env.iter().cloned());
    let settings = ScriptSettings {
        workdir: args.workdir.clone().unwrap_or_else(|| found.dir.clone()),
        pass_env,
        kill_grace: Duration::from_secs(args.kill_grace_secs),
        result_dir,
        concurrency: usize::try_from(args.capacity).unwrap_or(usize::MAX),
    };
    settings.prepare()?;

    let (admins, token, secret) = cluster_of(&args, config)?;
    let mut builder = Executor::builder()
        .app(&args.app)
        .admin_urls(admins)
        .listen(args.listen)
        .capacity(args.capacity)
        .weight(args.weight)
        .executor_token(token)
        .dispatch_secret(secret)
        .drain_timeout(Duration::from_secs(args.drain_secs));
    if let Some(url) = &args.advertise {
        builder = builder.advertise(url);
    }
    if let Some(id) = &args.executor_id {
        builder = builder.executor_id(id);
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        builder = builder.tls(cert, key);
    }
    if let Some(ca) = &args.client_ca {
        builder = builder.require_client_certificate(ca);
    }
    if let Some(ca) = &args.admin_ca {
        builder = builder.admin_ca(ca);
    }
    let executor = scripts::with_handlers(builder, &found, settings).build()?;
    let ran = executor.run_until(super::wait_for_signal()).await;
    // Scripts cancelled by the drain are given their grace, then killed, before the process
    // exits: none outlives the executor.
    let grace = Duration::from_secs(args.kill_grace_secs) + Duration::from_secs(1);
    if !tokio::task::spawn_blocking(move || scripts::wait_stopped(grace))
        .await
        .unwrap_or(false)
    {
        warn!("scripts were still stopping when the executor exited");
    }
    ran?;
    Ok(())
}

/// The admin nodes and the cluster's executor token and dispatch secret: as given, else
/// (with no `--admin`) the local default node's.
fn cluster_of(
    args: &ExecutorArgs,
    config: &Config,
) -> Result<(Vec<String>, String, String), StartError> {
    if !args.admin.is_empty() {
        let token = args
            .executor_token
            .clone()
            .ok_or(StartError::Missing("CARILLON_EXECUTOR_TOKEN"))?;
        let secret = args
            .dispatch_secret
            .clone()
            .ok_or(StartError::Missing("CARILLON_DISPATCH_SECRET"))?;
        return Ok((args.admin.clone(), token, secret));
    }
    let dir = config.data_dir();
    let local = |reason: String| StartError::LocalTokens {
        dir: dir.clone(),
        reason,
    };
    let data = DataDir::open(&dir).map_err(|e| local(e.to_string()))?;
    let token = match &args.executor_token {
        Some(token) => token.clone(),
        None => data
            .executor_token()
            .map_err(|e| local(e.to_string()))?
            .value
            .expose()
            .to_owned(),
    };
    let secret = match &args.dispatch_secret {
        Some(secret) => secret.clone(),
        None => data
            .dispatch_secret()
            .map_err(|e| local(e.to_string()))?
            .value
            .expose()
            .to_owned(),
    };
    Ok((
        vec![format!("http://{}", config.http.listen)],
        token,
        secret,
    ))
}
