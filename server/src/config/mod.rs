//! The node's configuration: one typed tree built from defaults, an optional TOML file, then
//! environment variables and flags (see `cli`), validated once before anything starts.

mod egress;
pub mod example;
mod telemetry;
mod validate;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cluster::ClusterTimings;
pub use crate::dispatch::http_jobs::HttpJobsConfig;
pub use crate::egress::EgressConfig;
use crate::jobs::RetentionConfig;
pub use crate::observe::alerts::AlertsConfig;
pub use crate::secret::Secret;
pub use crate::secrets::SecretsConfig;
pub use egress::EgressSettings;
pub use telemetry::TelemetryConfig;
pub use validate::{validate_node_id, validate_token};

/// Why a configuration was refused. Every message names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        reason: reason.into(),
    }
}

/// Everything a node can be told.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the node keeps its id, its generated admin token and, by default, its SQLite file.
    pub data_dir: Option<PathBuf>,
    pub http: HttpConfig,
    pub database: DatabaseConfig,
    pub cluster: ClusterConfig,
    pub auth: AuthConfig,
    pub scheduler: SchedulerConfig,
    pub dispatch: DispatchConfig,
    pub log: LogConfig,
    pub alerts: AlertsConfig,
    pub retention: RetentionConfig,
    pub tasks: TasksConfig,
    pub xxl: XxlConfig,
    pub handler_logs: HandlerLogsConfig,
    pub telemetry: TelemetryConfig,
    pub secrets: SecretsConfig,
    pub http_jobs: HttpJobsConfig,
    /// Where the node calls on a user's behalf (HTTP jobs, webhooks, executors).
    pub egress: EgressConfig,
}

/// `[handler_logs]`: how much of the log each attempt's handler ships is kept.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandlerLogsConfig {
    /// Lines kept per attempt; later ones are dropped and the log says so.
    pub max_lines: u64,
    /// Bytes of text kept per attempt.
    pub max_bytes: u64,
}

impl Default for HandlerLogsConfig {
    fn default() -> Self {
        Self {
            max_lines: 5_000,
            max_bytes: 1024 * 1024,
        }
    }
}

impl HandlerLogsConfig {
    pub fn caps(&self) -> crate::store::LogCaps {
        crate::store::LogCaps {
            max_lines: i64::try_from(self.max_lines).unwrap_or(i64::MAX),
            max_bytes: i64::try_from(self.max_bytes).unwrap_or(i64::MAX),
        }
    }
}

/// `[xxl]`: XXL-JOB executors, unchanged, registering here as with an XXL-JOB admin. Off
/// unless `access_token` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct XxlConfig {
    /// The `XXL-JOB-ACCESS-TOKEN` executors send and are sent: a shared header, not a
    /// signature (SECURITY.md). Without it the XXL-JOB endpoints do not exist.
    pub access_token: Option<Secret>,
    /// Where XXL-JOB's admin API is served: executors are configured with
    /// `http://<node>:9001<path_prefix>` as their admin address.
    pub path_prefix: String,
    /// An XXL-JOB executor not heard from for this long is lost (XXL-JOB's 90 s).
    pub executor_lease_ms: u64,
    /// Attempts an XXL-JOB executor is given at once (it queues more per job itself).
    pub executor_capacity: u32,
}

impl Default for XxlConfig {
    fn default() -> Self {
        Self {
            access_token: None,
            path_prefix: "/xxl-job-admin".to_owned(),
            executor_lease_ms: 90_000,
            executor_capacity: 100,
        }
    }
}

/// `[tasks]`: how far ahead tasks may be enqueued, and how the firer reads its windows.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// A task due further ahead than this is refused (default: 366 days).
    pub horizon_ms: u64,
    /// Tasks due this soon are fired (made runs) now; a fired task is cancelled by
    /// cancelling its run.
    pub fire_ahead_ms: u64,
    /// Most tasks one fire reads and fires (one transaction).
    pub fire_batch: i64,
}

impl Default for TasksConfig {
    fn default() -> Self {
        Self {
            horizon_ms: crate::tasks::DEFAULT_HORIZON_MS.unsigned_abs(),
            fire_ahead_ms: u64::try_from(
                crate::tasks::firer::FireSettings::default()
                    .ahead
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
            fire_batch: crate::tasks::firer::FireSettings::default().batch,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    /// How often job changes made through any node are picked up.
    pub poll_ms: u64,
    /// An instant fired later than this is missed (its job's misfire policy applies); earlier
    /// it is merely late and fires as usual.
    pub misfire_threshold_ms: u64,
    /// Most instants claimed in one round (shared by four concurrent transactions).
    pub claim_batch: usize,
    /// How long before its instant a run is claimed and started, to be delivered on time.
    pub claim_ahead_ms: u64,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        let defaults = crate::scheduler::SchedulerSettings::default();
        Self {
            poll_ms: defaults.poll_interval.as_millis() as u64,
            misfire_threshold_ms: defaults.misfire_threshold.as_millis() as u64,
            claim_batch: defaults.claim_batch,
            claim_ahead_ms: defaults.claim_ahead.as_millis() as u64,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    pub listen: SocketAddr,
    /// The address other nodes and executors reach this node at; defaults to the bound address.
    pub advertise: Option<String>,
    /// Serve HTTPS with this certificate chain (PEM) and `tls_key`; default: plain HTTP.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
}

impl HttpConfig {
    /// The HTTPS settings, when both files are set.
    pub fn server_tls(&self) -> Option<carillon_tls::ServerTls> {
        Some(carillon_tls::ServerTls {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: None,
        })
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9001)),
            advertise: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `postgres://…`, `mysql://…` (also MariaDB) or `sqlite://…`; default: SQLite in the data dir.
    pub url: Option<Secret>,
    /// Apply the migrations at start. Turn off when a DBA manages the schema from `sql/`.
    pub migrate: bool,
    pub max_connections: u32,
    pub acquire_timeout_ms: u64,
    pub statement_timeout_ms: u64,
    /// What stands between the nodes and the database: `none`, or `transaction` for a pooler
    /// in transaction mode (pgbouncer's `pool_mode = transaction`; PostgreSQL only).
    pub pooler: Pooler,
    /// PostgreSQL: deliver nothing before every standby (streaming, or holding a physical
    /// replication slot) has it, so that a failover to an asynchronous standby cannot fire an
    /// instant twice (`dispatch/standbys.rs`).
    pub wait_for_standbys: bool,
}

/// See `DatabaseConfig::pooler`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Pooler {
    /// Direct connections, or a pooler in session mode.
    #[default]
    None,
    /// A pooler that hands out a server connection per transaction.
    Transaction,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            migrate: true,
            max_connections: 10,
            acquire_timeout_ms: 2_000,
            statement_timeout_ms: 2_000,
            pooler: Pooler::None,
            wait_for_standbys: true,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Stable id of this node; default: generated once and kept in the data dir.
    pub node_id: Option<String>,
    /// Number of partitions, fixed when the cluster is first initialised.
    pub partitions: u32,
    pub heartbeat_ms: u64,
    pub node_lease_ms: u64,
    pub leader_lease_ms: u64,
    /// How long a graceful stop waits for in-flight work before it stops hard.
    pub shutdown_grace_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        let timings = ClusterTimings::default();
        Self {
            node_id: None,
            partitions: 256,
            heartbeat_ms: timings.heartbeat.as_millis() as u64,
            node_lease_ms: timings.node_lease.as_millis() as u64,
            leader_lease_ms: timings.leader_lease.as_millis() as u64,
            shutdown_grace_ms: 10_000,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The admin bearer token; default: generated at first start and kept in the data dir.
    pub admin_token: Option<Secret>,
    /// The token executors present; default: generated and kept in the data dir. Every node of
    /// a cluster needs the same one. It serves executors of every app.
    pub executor_token: Option<Secret>,
    /// A token that may read everything and change nothing.
    pub read_only_token: Option<Secret>,
    /// Executor tokens limited to one app each: `{ billing = "…", etl = "…" }`.
    pub app_tokens: std::collections::BTreeMap<String, Secret>,
    /// People signing in through an OpenID Connect provider; none when absent.
    pub oidc: Option<crate::access::oidc::OidcConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatchConfig {
    /// The HMAC key dispatches are signed with; default: generated and kept in the data dir.
    /// Every node of a cluster, and every executor, needs the same one.
    pub secret: Option<Secret>,
    /// An executor not heard from for this long is lost: its attempts move elsewhere.
    pub executor_lease_ms: u64,
    /// How often executors are told to heartbeat.
    pub executor_heartbeat_ms: u64,
    pub connect_timeout_ms: u64,
    pub request_timeout_ms: u64,
    /// How long a run waits for an executor of its handler to register before it fails.
    pub no_executor_grace_ms: u64,
    /// Read into `egress.allowed_networks` (where it now belongs), with a notice at start.
    pub allowed_networks: Option<Vec<String>>,
    /// CA certificates (PEM) trusted for `https://` executors, beside the system's roots.
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM chain) and key presented to executors that require one.
    pub tls_client_cert: Option<PathBuf>,
    pub tls_client_key: Option<PathBuf>,
}

impl DispatchConfig {
    pub fn client_tls(&self) -> carillon_tls::ClientTls {
        carillon_tls::ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_client_cert.clone(),
            key: self.tls_client_key.clone(),
        }
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        Self {
            secret: None,
            executor_lease_ms: 5_000,
            executor_heartbeat_ms: 1_000,
            connect_timeout_ms: 2_000,
            request_timeout_ms: 10_000,
            no_executor_grace_ms: 30_000,
            allowed_networks: None,
            tls_ca: None,
            tls_client_cert: None,
            tls_client_key: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    pub format: LogFormat,
    /// A `tracing` filter, e.g. `info` or `carillon_server=debug,info`.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".to_owned(),
        }
    }
}

impl Config {
    /// Reads a TOML file over the defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        toml::from_str(&text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            message: err.to_string(),
        })
    }

    pub fn scheduler_settings(&self) -> crate::scheduler::SchedulerSettings {
        crate::scheduler::SchedulerSettings {
            poll_interval: Duration::from_millis(self.scheduler.poll_ms),
            misfire_threshold: Duration::from_millis(self.scheduler.misfire_threshold_ms),
            claim_batch: self.scheduler.claim_batch,
            claim_ahead: Duration::from_millis(self.scheduler.claim_ahead_ms),
        }
    }

    pub fn dispatch_settings(&self) -> crate::dispatch::DispatchSettings {
        crate::dispatch::DispatchSettings {
            executor_lease: Duration::from_millis(self.dispatch.executor_lease_ms),
            no_executor_grace: Duration::from_millis(self.dispatch.no_executor_grace_ms),
            deliver_ahead: crate::dispatch::deliver_ahead(Duration::from_millis(
                self.scheduler.claim_ahead_ms,
            )),
            wait_for_standbys: self.database.wait_for_standbys,
            ..crate::dispatch::DispatchSettings::default()
        }
    }

    /// The XXL-JOB admin API's settings; none while `xxl.access_token` is unset (the API is not
    /// mounted).
    pub fn xxl_settings(&self) -> Option<std::sync::Arc<crate::api::xxl::XxlSettings>> {
        let token = self.xxl.access_token.clone()?;
        Some(std::sync::Arc::new(crate::api::xxl::XxlSettings {
            token,
            path_prefix: self.xxl.path_prefix.clone(),
            executor_lease_ms: i64::try_from(self.xxl.executor_lease_ms).unwrap_or(i64::MAX),
            executor_capacity: i64::from(self.xxl.executor_capacity),
        }))
    }

    pub fn task_fire_settings(&self) -> crate::tasks::firer::FireSettings {
        crate::tasks::firer::FireSettings {
            ahead: Duration::from_millis(self.tasks.fire_ahead_ms),
            batch: self.tasks.fire_batch,
            ..crate::tasks::firer::FireSettings::default()
        }
    }

    pub fn timings(&self) -> ClusterTimings {
        ClusterTimings {
            heartbeat: Duration::from_millis(self.cluster.heartbeat_ms),
            node_lease: Duration::from_millis(self.cluster.node_lease_ms),
            leader_lease: Duration::from_millis(self.cluster.leader_lease_ms),
        }
    }

    /// The data directory: configured, or `$XDG_DATA_HOME/carillon`, or
    /// `$HOME/.local/share/carillon`, or `./carillon-data`.
    pub fn data_dir(&self) -> PathBuf {
        if let Some(dir) = &self.data_dir {
            return dir.clone();
        }
        let non_empty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(xdg) = non_empty("XDG_DATA_HOME") {
            return PathBuf::from(xdg).join("carillon");
        }
        if let Some(home) = non_empty("HOME") {
            return PathBuf::from(home).join(".local/share/carillon");
        }
        PathBuf::from("carillon-data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::AlertFormat;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: "test.toml".into(),
            message: e.to_string(),
        })?;
        config.validate()?;
        Ok(config)
    }

    #[test]
    fn defaults_are_a_single_local_node_with_documented_timings() {
        let config = Config::default();
        config.validate().unwrap();
        assert_eq!(config.http.listen.to_string(), "127.0.0.1:9001");
        assert!(
            config.database.url.is_none(),
            "SQLite in the data dir by default"
        );
        assert_eq!(config.cluster.partitions, 256);
        assert_eq!(config.timings(), ClusterTimings::default());
        assert_eq!(config.timings().heartbeat, Duration::from_millis(500));
        assert_eq!(config.timings().node_lease, Duration::from_secs(4));
        assert_eq!(config.timings().leader_lease, Duration::from_secs(4));
        assert_eq!(config.scheduler.claim_ahead_ms, 1_000);
    }

    #[test]
    fn a_file_overrides_only_what_it_names() {
        let config = parse("[cluster]\nheartbeat_ms = 200\nnode_lease_ms = 1000\n").unwrap();
        assert_eq!(config.cluster.heartbeat_ms, 200);
        assert_eq!(config.cluster.leader_lease_ms, 4_000);
        assert_eq!(config.http.listen.port(), 9001);
    }

    #[test]
    fn a_transaction_pooler_is_for_postgres_only() {
        let config = parse(
            "[database]\nurl = \"postgres://carillon@pgbouncer:6432/carillon\"\npooler = \"transaction\"\n",
        )
        .unwrap();
        assert_eq!(config.database.pooler, Pooler::Transaction);
        let err =
            parse("[database]\nurl = \"mysql://root@db/carillon\"\npooler = \"transaction\"\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("database.pooler") && err.contains("postgres://"),
            "{err}"
        );
        let err = parse("[database]\npooler = \"session\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("session"), "{err}");
    }

    #[test]
    fn unknown_settings_are_named() {
        let err = parse("[cluster]\nheartbeat = 5\n").unwrap_err().to_string();
        assert!(err.contains("heartbeat"), "{err}");
    }

    #[test]
    fn allowed_networks_are_parsed_and_a_bad_one_is_named() {
        let ok = parse("[egress]\nallowed_networks = [\"10.0.0.0/8\", \"fd00::/8\"]\n").unwrap();
        assert_eq!(ok.egress.allowed_networks.len(), 2);
        for section in ["egress", "dispatch", "http_jobs"] {
            let err = parse(&format!(
                "[{section}]\nallowed_networks = [\"10.0.0.0/40\"]\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("egress.allowed_networks") && err.contains("10.0.0.0/40"),
                "{err}"
            );
        }
    }

    #[test]
    fn claiming_more_than_ten_seconds_ahead_is_refused_by_name() {
        let err = parse("[scheduler]\nclaim_ahead_ms = 60000\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("scheduler.claim_ahead_ms"), "{err}");
        let none = parse("[scheduler]\nclaim_ahead_ms = 0\n").unwrap();
        assert_eq!(none.scheduler_settings().claim_ahead, Duration::ZERO);
    }

    #[test]
    fn a_lease_shorter_than_two_heartbeats_is_refused() {
        let err = parse("[cluster]\nheartbeat_ms = 1000\nleader_lease_ms = 1500\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cluster.leader_lease_ms"), "{err}");
    }

    #[test]
    fn blank_or_short_tokens_are_refused() {
        let err = parse("[auth]\nadmin_token = \"   \"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("auth.admin_token"), "{err}");
        assert!(parse("[auth]\nadmin_token = \"0123456789abcdef\"\n").is_ok());
    }

    #[test]
    fn node_ids_must_fit_the_schema() {
        assert!(validate_node_id("node-1.eu_west").is_ok());
        assert!(validate_node_id("").is_err());
        assert!(validate_node_id("has space").is_err());
        assert!(validate_node_id(&"x".repeat(65)).is_err());
    }

    #[test]
    fn secrets_do_not_print() {
        let config = parse("[auth]\nadmin_token = \"0123456789abcdef-secret\"\n").unwrap();
        assert!(!format!("{config:?}").contains("secret\""));
        assert!(!format!("{config:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn alert_settings_are_checked_by_name_and_the_webhook_never_prints() {
        let config = parse(
            "[alerts]\nwebhook = \"https://hooks.example/T0/B0/s3cr3t\"\nformat = \"slack\"\n",
        )
        .unwrap();
        assert_eq!(config.alerts.format, AlertFormat::Slack);
        assert_eq!(config.alerts.late_after_ms, 60_000);
        assert!(!format!("{config:?}").contains("s3cr3t"));
        let err = parse("[alerts]\nwebhook = \"hooks.example/x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("alerts.webhook: must be an http"), "{err}");
        let err = parse("[alerts]\ncheck_ms = 5\n").unwrap_err().to_string();
        assert!(err.starts_with("alerts.check_ms"), "{err}");
        let err = parse("[alerts]\nformat = \"xml\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("xml"), "{err}");
    }
}
