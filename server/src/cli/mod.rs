//! The `carillon` command line: `carillon server` runs a node, `carillon migrate` applies the
//! schema, and the client commands (`jobs`, `runs`, `executors`, `cluster`, `schedule`,
//! `apply`) drive a node through its REST API. Flags and `CARILLON_*` environment variables
//! override the config file.

mod access;
mod apply;
mod apply_children;
mod client;
mod client_config;
mod commands;
mod credentials;
mod describe;
mod import;
mod job_fields;
mod login;
mod policies;
mod probe;
mod purge;
mod run_logs;
mod secrets;
mod table;
mod tasks;
mod workflows;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::app::Application;
use crate::config::{Config, ConfigError, LogFormat, Pooler, Secret};
use crate::data_dir::DataDir;
use crate::jobs::{AlertFormat, KeepFor};
use crate::store::{self, DatabaseUrl, PoolOptions};
use crate::telemetry;

#[derive(Debug, Parser)]
#[command(
    name = "carillon",
    version = crate::VERSION,
    about = "Carillon: a distributed cron scheduler"
)]
pub struct Cli {
    /// A TOML configuration file.
    #[arg(long, global = true, env = "CARILLON_CONFIG")]
    config: Option<PathBuf>,
    /// The node's API, for client commands (default: the local default node).
    #[arg(long, global = true, env = "CARILLON_URL")]
    url: Option<String>,
    /// The token for client commands (default: the sign-in of `carillon login` for this node,
    /// else the local default node's admin token).
    #[arg(long, global = true, env = "CARILLON_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A CA certificate (PEM) to trust for an https:// node, beside the system's roots.
    #[arg(long, global = true, env = "CARILLON_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// The namespace client commands work in (default: the client settings file's, else
    /// `default`).
    #[arg(long, short = 'n', global = true, env = "CARILLON_NAMESPACE")]
    namespace: Option<String>,
    /// Output of client commands.
    #[arg(long, short = 'o', global = true, value_enum, default_value_t = commands::Output::Table)]
    output: commands::Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an admin node (with no configuration: a single node on SQLite, on 127.0.0.1:9001).
    Server(Box<ServerArgs>),
    /// Apply the database migrations and exit.
    Migrate(CommonArgs),
    /// A node's settings: example (every setting with its default), check (the --config file).
    #[command(subcommand)]
    Config(describe::ConfigCommand),
    /// Print the shell completions of these commands (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Print the manual page (roff), as `man -l -` reads it; with --dir, write it and a page
    /// per subcommand (carillon-server.1, …) there.
    Man {
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Exit with success when the node on this host is ready (GET /readyz): a container's
    /// health check.
    Ready(probe::ReadyArgs),
    /// Jobs: ls, get, create, edit, start, stop, trigger, rm.
    #[command(subcommand)]
    Jobs(Box<commands::JobsCommand>),
    /// Runs: ls, get, logs, cancel, purge.
    #[command(subcommand)]
    Runs(commands::RunsCommand),
    /// Executors: ls.
    #[command(subcommand)]
    Executors(commands::ExecutorsCommand),
    /// The leader, nodes and partitions.
    Cluster,
    /// Schedules: preview.
    #[command(subcommand)]
    Schedule(commands::ScheduleCommand),
    /// Exclusion calendars: ls, get, put, rm.
    #[command(subcommand)]
    Calendars(policies::CalendarsCommand),
    /// Backfills of past ranges: start, ls, get, cancel.
    #[command(subcommand)]
    Backfill(policies::BackfillCommand),
    /// Delayed tasks: add, ls, get, cancel.
    #[command(subcommand)]
    Tasks(tasks::TasksCommand),
    /// Workflows (DAGs of steps): ls, get, apply, trigger, start, stop, runs, run, cancel,
    /// rerun, rm.
    #[command(subcommand)]
    Workflows(workflows::WorkflowsCommand),
    /// Namespaces, the teams' spaces: ls, create, quotas, rm.
    #[command(subcommand)]
    Namespaces(access::NamespacesCommand),
    /// A namespace's service tokens: ls, create, revoke.
    #[command(subcommand)]
    Tokens(access::TokensCommand),
    /// Sign in with the cluster's identity provider ([auth.oidc]); the client commands then
    /// use that sign-in for this node, renewing it when it expires.
    Login {
        /// Sign in in a browser on this machine rather than with a code on any device.
        #[arg(long)]
        browser: bool,
        /// With --browser: print the address only, start no browser.
        #[arg(long, requires = "browser")]
        no_open: bool,
    },
    /// Forget the sign-in kept for this node.
    Logout,
    /// A namespace's secrets, sealed at rest: ls, set, rm, rotate; key prints a new key.
    #[command(subcommand)]
    Secrets(secrets::SecretsCommand),
    /// A namespace's roles for the identity provider's groups: ls, add, rm.
    #[command(subcommand)]
    Grants(access::GrantsCommand),
    /// The audit trail of changes made through the API: ls.
    #[command(subcommand)]
    Audit(access::AuditCommand),
    /// Bring jobs over from another scheduler: xxl-job.
    #[command(subcommand)]
    Import(import::ImportCommand),
    /// Create or update the jobs of a TOML, YAML or JSON file, by name (idempotent).
    Apply {
        #[arg(short = 'f', long)]
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
struct CommonArgs {
    /// postgres://…, mysql://… (MariaDB too) or sqlite://…; default: SQLite in the data dir.
    #[arg(long, env = "CARILLON_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// `transaction` when the database is reached through a pooler in transaction mode
    /// (pgbouncer's `pool_mode = transaction`).
    #[arg(long, env = "CARILLON_DATABASE_POOLER", value_enum)]
    database_pooler: Option<Pooler>,
    /// Where the node keeps its id, its generated admin token and its default SQLite file.
    #[arg(long, env = "CARILLON_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Log output format.
    #[arg(long, env = "CARILLON_LOG_FORMAT", value_enum)]
    log_format: Option<LogFormat>,
    /// Log filter, e.g. `info` or `carillon_server=debug`.
    #[arg(long, env = "CARILLON_LOG")]
    log: Option<String>,
}

#[derive(Debug, Args)]
struct ServerArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "CARILLON_LISTEN")]
    listen: Option<SocketAddr>,
    /// Address other nodes and executors reach this node at.
    #[arg(long, env = "CARILLON_ADVERTISE")]
    advertise: Option<String>,
    /// Serve HTTPS with this certificate chain (PEM)…
    #[arg(long, env = "CARILLON_HTTP_TLS_CERT")]
    http_tls_cert: Option<PathBuf>,
    /// …and this private key (PEM).
    #[arg(long, env = "CARILLON_HTTP_TLS_KEY")]
    http_tls_key: Option<PathBuf>,
    /// CA certificates (PEM) trusted for https:// executors, beside the system's.
    #[arg(long, env = "CARILLON_DISPATCH_TLS_CA")]
    dispatch_tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) presented to executors that require one…
    #[arg(long, env = "CARILLON_DISPATCH_TLS_CLIENT_CERT")]
    dispatch_tls_client_cert: Option<PathBuf>,
    /// …and its private key (PEM).
    #[arg(long, env = "CARILLON_DISPATCH_TLS_CLIENT_KEY")]
    dispatch_tls_client_key: Option<PathBuf>,
    /// The admin bearer token (prefer the environment variable: flags show in `ps`).
    #[arg(long, env = "CARILLON_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// This node's stable id.
    #[arg(long, env = "CARILLON_NODE_ID")]
    node_id: Option<String>,
    /// Partition count, used only when the cluster is first initialised.
    #[arg(long, env = "CARILLON_PARTITIONS")]
    partitions: Option<u32>,
    #[arg(long, env = "CARILLON_HEARTBEAT_MS")]
    heartbeat_ms: Option<u64>,
    #[arg(long, env = "CARILLON_NODE_LEASE_MS")]
    node_lease_ms: Option<u64>,
    #[arg(long, env = "CARILLON_LEADER_LEASE_MS")]
    leader_lease_ms: Option<u64>,
    /// How often job changes are picked up.
    #[arg(long, env = "CARILLON_SCHEDULER_POLL_MS")]
    scheduler_poll_ms: Option<u64>,
    /// An instant fired later than this is missed and the job's misfire policy applies.
    #[arg(long, env = "CARILLON_MISFIRE_THRESHOLD_MS")]
    misfire_threshold_ms: Option<u64>,
    /// The token executors present (prefer the environment variable).
    #[arg(long, env = "CARILLON_EXECUTOR_TOKEN", hide_env_values = true)]
    executor_token: Option<String>,
    /// Lines of handler log kept per attempt (default 5000).
    #[arg(long, env = "CARILLON_HANDLER_LOGS_MAX_LINES")]
    handler_logs_max_lines: Option<u64>,
    /// Bytes of handler log kept per attempt (default 1048576).
    #[arg(long, env = "CARILLON_HANDLER_LOGS_MAX_BYTES")]
    handler_logs_max_bytes: Option<u64>,
    /// Serve XXL-JOB executors with this access token (prefer the environment variable).
    #[arg(long, env = "CARILLON_XXL_ACCESS_TOKEN", hide_env_values = true)]
    xxl_access_token: Option<String>,
    /// Where XXL-JOB's admin API is served (default /xxl-job-admin).
    #[arg(long, env = "CARILLON_XXL_PATH_PREFIX")]
    xxl_path_prefix: Option<String>,
    /// An XXL-JOB executor not heard from for this long is lost (default 90000).
    #[arg(long, env = "CARILLON_XXL_EXECUTOR_LEASE_MS")]
    xxl_executor_lease_ms: Option<u64>,
    /// A token that may read everything and change nothing.
    #[arg(long, env = "CARILLON_READ_ONLY_TOKEN", hide_env_values = true)]
    read_only_token: Option<String>,
    /// Executor tokens limited to one app each: `billing=<token>,etl=<token>`.
    #[arg(long, env = "CARILLON_APP_TOKENS", hide_env_values = true)]
    app_tokens: Option<String>,
    /// The secret dispatches are signed with (prefer the environment variable).
    #[arg(long, env = "CARILLON_DISPATCH_SECRET", hide_env_values = true)]
    dispatch_secret: Option<String>,
    /// An executor not heard from for this long is lost.
    #[arg(long, env = "CARILLON_EXECUTOR_LEASE_MS")]
    executor_lease_ms: Option<u64>,
    /// How often executors heartbeat.
    #[arg(long, env = "CARILLON_EXECUTOR_HEARTBEAT_MS")]
    executor_heartbeat_ms: Option<u64>,
    /// How long work waits for an executor of its handler before it fails.
    #[arg(long, env = "CARILLON_NO_EXECUTOR_GRACE_MS")]
    no_executor_grace_ms: Option<u64>,
    /// Networks executors may register addresses in: `10.0.0.0/8,fd00::/8`.
    #[arg(long, env = "CARILLON_DISPATCH_ALLOWED_NETWORKS")]
    dispatch_allowed_networks: Option<String>,
    /// Where every alert is posted (prefer the environment variable: flags show in `ps`, and
    /// chat webhooks carry their key in the URL).
    #[arg(long, env = "CARILLON_ALERTS_WEBHOOK", hide_env_values = true)]
    alerts_webhook: Option<String>,
    /// The body of alert webhooks.
    #[arg(long, env = "CARILLON_ALERTS_FORMAT", value_enum)]
    alerts_format: Option<AlertFormat>,
    /// A first dispatch later than this after its instant is a late fire (0: no late alerts).
    #[arg(long, env = "CARILLON_ALERTS_LATE_AFTER_MS")]
    alerts_late_after_ms: Option<u64>,
    /// How often the leader looks for apps without a healthy executor.
    #[arg(long, env = "CARILLON_ALERTS_CHECK_MS")]
    alerts_check_ms: Option<u64>,
    /// How long finished runs are kept (`30d`, `12h`…, or `forever`).
    #[arg(long, env = "CARILLON_RETENTION_RUNS", value_parser = KeepFor::parse)]
    retention_runs: Option<KeepFor>,
    /// How long dead letters (failed and no_executor runs) are kept.
    #[arg(long, env = "CARILLON_RETENTION_DEAD_LETTERS", value_parser = KeepFor::parse)]
    retention_dead_letters: Option<KeepFor>,
    /// How long the audit trail's events are kept (`365d`, or `forever`).
    #[arg(long, env = "CARILLON_RETENTION_AUDIT", value_parser = KeepFor::parse)]
    retention_audit: Option<KeepFor>,
    /// How often a node looks for run history to delete.
    #[arg(long, env = "CARILLON_RETENTION_INTERVAL_MS")]
    retention_interval_ms: Option<u64>,
    /// Rows per retention delete statement.
    #[arg(long, env = "CARILLON_RETENTION_BATCH")]
    retention_batch: Option<u32>,
    /// Pause between two retention batches.
    #[arg(long, env = "CARILLON_RETENTION_PAUSE_MS")]
    retention_pause_ms: Option<u64>,
    /// PostgreSQL: deliver nothing before the standbys have it (`true` by default).
    #[arg(long, env = "CARILLON_WAIT_FOR_STANDBYS")]
    wait_for_standbys: Option<bool>,
    /// Export traces to this OTLP/HTTP collector (`http://collector:4318`).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// Headers for the collector: `x-api-key=…,tenant=…` (prefer the environment variable).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_HEADERS", hide_env_values = true)]
    otlp_headers: Option<String>,
    /// The spans' `service.name` (default carillon).
    #[arg(long, env = "OTEL_SERVICE_NAME")]
    otel_service_name: Option<String>,
    /// The key secrets are sealed with (prefer the environment variable).
    #[arg(long, env = "CARILLON_SECRETS_KEY", hide_env_values = true)]
    secrets_key: Option<String>,
    /// A file holding that key, instead.
    #[arg(long, env = "CARILLON_SECRETS_KEY_FILE")]
    secrets_key_file: Option<PathBuf>,
    /// Earlier keys, comma-separated, that still open secrets during a rotation.
    #[arg(long, env = "CARILLON_SECRETS_PREVIOUS_KEYS", hide_env_values = true)]
    secrets_previous_keys: Option<String>,
}

impl CommonArgs {
    fn apply(self, config: &mut Config) {
        if let Some(url) = self.database_url {
            config.database.url = Some(Secret::new(url));
        }
        set(&mut config.database.pooler, self.database_pooler);
        set(&mut config.data_dir, self.data_dir.map(Some));
        set(&mut config.log.format, self.log_format);
        set(&mut config.log.filter, self.log);
    }
}

impl ServerArgs {
    fn apply(self, config: &mut Config) {
        self.common.apply(config);
        set(&mut config.http.listen, self.listen);
        set(&mut config.http.advertise, self.advertise.map(Some));
        if let Some(token) = self.admin_token {
            config.auth.admin_token = Some(Secret::new(token));
        }
        set(&mut config.cluster.node_id, self.node_id.map(Some));
        set(&mut config.cluster.partitions, self.partitions);
        set(&mut config.cluster.heartbeat_ms, self.heartbeat_ms);
        set(&mut config.cluster.node_lease_ms, self.node_lease_ms);
        set(&mut config.cluster.leader_lease_ms, self.leader_lease_ms);
        set(&mut config.scheduler.poll_ms, self.scheduler_poll_ms);
        if let Some(token) = self.executor_token {
            config.auth.executor_token = Some(Secret::new(token));
        }
        if let Some(token) = self.xxl_access_token {
            config.xxl.access_token = Some(Secret::new(token));
        }
        set(&mut config.xxl.path_prefix, self.xxl_path_prefix);
        set(
            &mut config.handler_logs.max_lines,
            self.handler_logs_max_lines,
        );
        set(
            &mut config.handler_logs.max_bytes,
            self.handler_logs_max_bytes,
        );
        set(
            &mut config.xxl.executor_lease_ms,
            self.xxl_executor_lease_ms,
        );
        if let Some(token) = self.read_only_token {
            config.auth.read_only_token = Some(Secret::new(token));
        }
        if let Some(pairs) = self.app_tokens {
            for pair in pairs.split(',').filter(|p| !p.trim().is_empty()) {
                // A pair without '=' gets an empty token, which validation then names.
                let (app, token) = pair.split_once('=').unwrap_or((pair, ""));
                config
                    .auth
                    .app_tokens
                    .insert(app.trim().to_owned(), Secret::new(token.trim().to_owned()));
            }
        }
        if let Some(secret) = self.dispatch_secret {
            config.dispatch.secret = Some(Secret::new(secret));
        }
        if let Some(networks) = self.dispatch_allowed_networks {
            config.dispatch.allowed_networks = networks
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
        }
        set(
            &mut config.dispatch.executor_lease_ms,
            self.executor_lease_ms,
        );
        set(
            &mut config.dispatch.no_executor_grace_ms,
            self.no_executor_grace_ms,
        );
        set(
            &mut config.dispatch.executor_heartbeat_ms,
            self.executor_heartbeat_ms,
        );
        set(
            &mut config.scheduler.misfire_threshold_ms,
            self.misfire_threshold_ms,
        );
        if let Some(url) = self.alerts_webhook {
            config.alerts.webhook = Some(Secret::new(url));
        }
        set(&mut config.alerts.format, self.alerts_format);
        set(&mut config.alerts.late_after_ms, self.alerts_late_after_ms);
        set(&mut config.alerts.check_ms, self.alerts_check_ms);
        set(&mut config.http.tls_cert, self.http_tls_cert.map(Some));
        set(&mut config.http.tls_key, self.http_tls_key.map(Some));
        set(&mut config.dispatch.tls_ca, self.dispatch_tls_ca.map(Some));
        set(
            &mut config.dispatch.tls_client_cert,
            self.dispatch_tls_client_cert.map(Some),
        );
        set(
            &mut config.dispatch.tls_client_key,
            self.dispatch_tls_client_key.map(Some),
        );
        let r = &mut config.retention;
        set(&mut r.runs, self.retention_runs);
        set(&mut r.dead_letters, self.retention_dead_letters);
        set(&mut r.audit, self.retention_audit);
        set(&mut r.interval_ms, self.retention_interval_ms);
        set(&mut r.batch, self.retention_batch);
        set(&mut r.pause_ms, self.retention_pause_ms);
        set(
            &mut config.database.wait_for_standbys,
            self.wait_for_standbys,
        );
        let keys = &mut config.secrets;
        set(
            &mut keys.key,
            self.secrets_key.map(|k| Some(Secret::new(k))),
        );
        set(&mut keys.key_file, self.secrets_key_file.map(Some));
        if let Some(list) = self.secrets_previous_keys {
            keys.previous_keys = list
                .split(',')
                .filter(|k| !k.trim().is_empty())
                .map(|k| Secret::new(k.trim().to_owned()))
                .collect();
        }
        let t = &mut config.telemetry;
        set(&mut t.otlp_endpoint, self.otlp_endpoint.map(Some));
        set(&mut t.service_name, self.otel_service_name);
        if let Some(pairs) = self.otlp_headers {
            for pair in pairs.split(',').filter(|p| !p.trim().is_empty()) {
                // A pair without '=' is a header without a value, which validation names.
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                t.otlp_headers
                    .insert(name.trim().to_owned(), Secret::new(value.trim().to_owned()));
            }
        }
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

impl Cli {
    fn base_config(&self) -> Result<Config, ConfigError> {
        match &self.config {
            Some(path) => Config::from_file(path),
            None => Ok(Config::default()),
        }
    }
}

/// Runs the parsed command line; the binary's `main` is only this.
pub async fn run(cli: Cli) -> ExitCode {
    let mut config = match cli.base_config() {
        Ok(config) => config,
        Err(err) => return fail_early(&err),
    };
    match cli.command {
        Command::Server(args) => {
            args.apply(&mut config);
            telemetry::init(&config.log);
            serve(config).await
        }
        Command::Migrate(args) => {
            args.apply(&mut config);
            telemetry::init(&config.log);
            migrate(config).await
        }
        Command::Config(command) => describe::run(&command, cli.config.as_deref(), &config),
        Command::Completions { shell } => describe::completions(shell),
        Command::Secrets(secrets::SecretsCommand::Key) => secrets::new_key(),
        Command::Man { dir } => describe::man(dir.as_deref()),
        Command::Ready(args) => probe::ready(args, &config).await,
        Command::Login { browser, no_open } => {
            let flow = if browser {
                login::Flow::Browser { open: !no_open }
            } else {
                login::Flow::Device
            };
            let signed_in = match client::node_of(cli.url, cli.ca_file) {
                Ok((url, ca_file)) => login::login(&url, ca_file.as_ref(), flow)
                    .await
                    .map(|name| (url, name)),
                Err(err) => Err(err),
            };
            match signed_in {
                Ok((url, name)) => {
                    commands::out(&format!("signed in to {url} as {name}\n"));
                    ExitCode::SUCCESS
                }
                Err(err) => fail_early(&err),
            }
        }
        Command::Logout => {
            let forgot = client::node_of(cli.url, cli.ca_file)
                .and_then(|(url, _)| login::logout(&url).map(|forgot| (url, forgot)));
            match forgot {
                Ok((url, true)) => {
                    commands::out(&format!("signed out of {url}\n"));
                    ExitCode::SUCCESS
                }
                Ok((url, false)) => {
                    commands::out(&format!("nobody was signed in to {url}\n"));
                    ExitCode::SUCCESS
                }
                Err(err) => fail_early(&err),
            }
        }
        client_command => {
            let api = match client::ApiTarget::find(cli.url, cli.token, cli.ca_file, cli.namespace)
                .await
            {
                Ok(api) => api,
                Err(err) => return fail_early(&err),
            };
            let output = cli.output;
            let done = match client_command {
                Command::Jobs(c) => commands::jobs(&api, output, *c).await,
                Command::Runs(c) => commands::runs(&api, output, c).await,
                Command::Executors(commands::ExecutorsCommand::Ls) => {
                    commands::executors(&api, output).await
                }
                Command::Cluster => commands::cluster(&api, output).await,
                Command::Schedule(c) => commands::schedule(&api, output, c).await,
                Command::Apply { file } => apply::apply(&api, output, &file).await,
                Command::Calendars(c) => policies::calendars(&api, output, c).await,
                Command::Backfill(c) => policies::backfill(&api, output, c).await,
                Command::Tasks(c) => tasks::tasks(&api, output, c).await,
                Command::Workflows(c) => workflows::workflows(&api, output, c).await,
                Command::Import(c) => import::import(&api, output, c).await,
                Command::Namespaces(c) => access::namespaces(&api, output, c).await,
                Command::Tokens(c) => access::tokens(&api, output, c).await,
                Command::Secrets(c) => secrets::secrets(&api, output, c).await,
                Command::Grants(c) => access::grants(&api, output, c).await,
                Command::Audit(c) => access::audit(&api, output, c).await,
                Command::Server(_)
                | Command::Migrate(_)
                | Command::Config(_)
                | Command::Completions { .. }
                | Command::Man { .. }
                | Command::Ready(_)
                | Command::Login { .. }
                | Command::Logout => Ok(()),
            };
            match done {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail_early(&err),
            }
        }
    }
}

/// Before logging is set up, errors go straight to standard error.
fn fail_early(err: &dyn std::error::Error) -> ExitCode {
    eprintln!("carillon: {err}");
    ExitCode::FAILURE
}

async fn serve(config: Config) -> ExitCode {
    let app = match Application::build(config).await {
        Ok(app) => app,
        Err(err) => {
            error!(error = %err, "node failed to start");
            return ExitCode::FAILURE;
        }
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    match app.run_until_stopped(shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!(error = %err, "node stopped with an error");
            ExitCode::FAILURE
        }
    }
}

async fn migrate(config: Config) -> ExitCode {
    let result = async {
        config.validate().map_err(|e| e.to_string())?;
        let url = match &config.database.url {
            Some(url) => DatabaseUrl::parse(url.expose()),
            None => {
                let dir = DataDir::open(&config.data_dir()).map_err(|e| e.to_string())?;
                DatabaseUrl::parse(&dir.sqlite_url())
            }
        }
        .map_err(|e| format!("database.url: {e}"))?;
        let options = PoolOptions {
            max_connections: 2,
            acquire_timeout: std::time::Duration::from_millis(config.database.acquire_timeout_ms),
            // DDL on a large table may take long: no statement limit beyond the default.
            statement_timeout: std::time::Duration::from_secs(600),
            transaction_pooler: config.database.pooler == Pooler::Transaction,
        };
        let store = store::connect(&url, &options)
            .await
            .map_err(|e| format!("connecting to {url}: {e}"))?;
        store
            .migrate()
            .await
            .map_err(|e| format!("applying migrations to {url}: {e}"))?;
        info!(database = %url, "migrations applied");
        Ok::<(), String>(())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!(error = %err, "migrate failed");
            ExitCode::FAILURE
        }
    }
}

/// The first SIGINT or SIGTERM stops the node gracefully; a second one exits at once.
async fn stop_on_signal(shutdown: CancellationToken) {
    wait_for_signal().await;
    info!("stop signal received; leaving the cluster");
    shutdown.cancel();
    wait_for_signal().await;
    error!("second stop signal; exiting without waiting");
    std::process::exit(130);
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(err) => {
                error!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the node");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
