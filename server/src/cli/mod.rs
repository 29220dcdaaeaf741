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
mod flags;
mod import;
mod job_fields;
mod login;
mod policies;
mod probe;
mod purge;
mod run_logs;
mod script_executor;
mod secrets;
mod table;
mod tasks;
mod workflows;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::app::Application;
use crate::config::{Config, ConfigError, Pooler};
use crate::data_dir::DataDir;
use crate::store::{self, DatabaseUrl, PoolOptions};
use crate::telemetry;
use flags::{CommonArgs, ServerArgs};

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
    /// Run a script executor, on the hosts where the scripts live: each executable file of
    /// --scripts DIR is a handler of the app (default `scripts`), run with the run's
    /// arguments, environment and stdin, its output in the run's log.
    Executor(Box<script_executor::ExecutorArgs>),
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
        Command::Executor(args) => script_executor::run(*args, &config).await,
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
                | Command::Executor(_)
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
