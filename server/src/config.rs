//! The node's configuration: one typed tree built from defaults, an optional TOML file, then
//! environment variables and flags (see `cli`), validated once before anything starts.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cluster::ClusterTimings;
use crate::jobs::{AlertFormat, RetentionConfig};

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

/// A value that must never reach a log line or an error message.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
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
}

/// Alerts every job shares. A job may add its own webhook (`alerts` in the job document).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertsConfig {
    /// Receives every alert: runs that fail for good, late fires, apps left without a healthy
    /// executor. A secret: chat webhooks carry their credential in the URL.
    pub webhook: Option<Secret>,
    pub format: AlertFormat,
    /// A first dispatch later than this after its instant is a late fire; 0 turns the node's
    /// late alerts off (a job's own `late_after_ms` still applies to its webhook).
    pub late_after_ms: u64,
    /// How often the leader looks for apps without a healthy executor.
    pub check_ms: u64,
    /// Tries per webhook call before the alert is given up (1 s, 2 s, 4 s… apart).
    pub attempts: u32,
}

impl Default for AlertsConfig {
    fn default() -> Self {
        Self {
            webhook: None,
            format: AlertFormat::Json,
            late_after_ms: 60_000,
            check_ms: 10_000,
            attempts: 5,
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
    /// Most instants claimed in one transaction.
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
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: None,
            migrate: true,
            max_connections: 10,
            acquire_timeout_ms: 2_000,
            statement_timeout_ms: 2_000,
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
    /// Networks executors may register addresses in (`10.0.0.0/8`, `fd00::/8`, single
    /// addresses); empty allows any. Checked at registration and on every connection.
    pub allowed_networks: Vec<String>,
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
            allowed_networks: Vec::new(),
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

/// The longest node id: it is stored in `VARCHAR(64)` columns.
const NODE_ID_MAX: usize = 64;
/// The shortest admin token accepted; shorter ones are guessable.
const TOKEN_MIN: usize = 16;

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

    /// Checks every setting; the first one at fault is named.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.cluster;
        if let Some(id) = &c.node_id {
            validate_node_id(id)?;
        }
        if !(1..=65_536).contains(&c.partitions) {
            return Err(invalid(
                "cluster.partitions",
                format!("{} is out of range 1..=65536", c.partitions),
            ));
        }
        if c.heartbeat_ms < 10 {
            return Err(invalid(
                "cluster.heartbeat_ms",
                format!("{} is too small: use at least 10", c.heartbeat_ms),
            ));
        }
        for (field, lease) in [
            ("cluster.node_lease_ms", c.node_lease_ms),
            ("cluster.leader_lease_ms", c.leader_lease_ms),
        ] {
            if lease < 2 * c.heartbeat_ms {
                return Err(invalid(
                    field,
                    format!(
                        "{lease} must be at least twice cluster.heartbeat_ms ({}), or a node \
                         loses its lease between two renewals",
                        c.heartbeat_ms
                    ),
                ));
            }
        }
        let db = &self.database;
        if db.max_connections < 2 {
            return Err(invalid(
                "database.max_connections",
                format!("{} is too small: use at least 2", db.max_connections),
            ));
        }
        if db.acquire_timeout_ms == 0 {
            return Err(invalid("database.acquire_timeout_ms", "must be above 0"));
        }
        if db.statement_timeout_ms == 0 {
            return Err(invalid("database.statement_timeout_ms", "must be above 0"));
        }
        if let Some(token) = &self.auth.admin_token {
            validate_token(token.expose())?;
        }
        if let Some(token) = &self.auth.read_only_token {
            validate_token(token.expose()).map_err(|_| {
                invalid(
                    "auth.read_only_token",
                    "too short or blank: use at least 16 characters",
                )
            })?;
        }
        for (app, token) in &self.auth.app_tokens {
            if validate_token(token.expose()).is_err() {
                return Err(invalid(
                    "auth.app_tokens",
                    format!(
                        "the token of app {app:?} is too short or blank: use at least 16 characters"
                    ),
                ));
            }
        }
        if let Some(token) = &self.auth.executor_token {
            validate_token(token.expose()).map_err(|_| {
                invalid(
                    "auth.executor_token",
                    "too short or blank: use at least 16 characters",
                )
            })?;
        }
        if let Some(secret) = &self.dispatch.secret {
            validate_token(secret.expose()).map_err(|_| {
                invalid(
                    "dispatch.secret",
                    "too short or blank: use at least 16 characters",
                )
            })?;
        }
        let d = &self.dispatch;
        if d.executor_lease_ms < 2 * d.executor_heartbeat_ms || d.executor_heartbeat_ms == 0 {
            return Err(invalid(
                "dispatch.executor_lease_ms",
                format!(
                    "{} must be at least twice dispatch.executor_heartbeat_ms ({})",
                    d.executor_lease_ms, d.executor_heartbeat_ms
                ),
            ));
        }
        crate::dispatch::networks::Allowlist::parse(&d.allowed_networks)
            .map_err(|why| invalid("dispatch.allowed_networks", why))?;
        let s = &self.scheduler;
        if !(10..=60_000).contains(&s.poll_ms) {
            return Err(invalid(
                "scheduler.poll_ms",
                format!("{} is outside 10..=60000", s.poll_ms),
            ));
        }
        if !(1..=100_000).contains(&s.claim_batch) {
            return Err(invalid(
                "scheduler.claim_batch",
                format!("{} is outside 1..=100000", s.claim_batch),
            ));
        }
        if s.claim_ahead_ms > 10_000 {
            return Err(invalid(
                "scheduler.claim_ahead_ms",
                format!("{} is outside 0..=10000", s.claim_ahead_ms),
            ));
        }
        let a = &self.alerts;
        if let Some(url) = &a.webhook {
            crate::jobs::check_webhook(url.expose())
                .map_err(|why| invalid("alerts.webhook", why))?;
        }
        if !(100..=3_600_000).contains(&a.check_ms) {
            return Err(invalid(
                "alerts.check_ms",
                format!("{} is outside 100..=3600000", a.check_ms),
            ));
        }
        if !(1..=20).contains(&a.attempts) {
            return Err(invalid(
                "alerts.attempts",
                format!("{} is outside 1..=20", a.attempts),
            ));
        }
        if self.http.tls_cert.is_some() != self.http.tls_key.is_some() {
            return Err(invalid(
                "http.tls_cert",
                "HTTPS needs both http.tls_cert and http.tls_key",
            ));
        }
        if self.dispatch.tls_client_cert.is_some() != self.dispatch.tls_client_key.is_some() {
            return Err(invalid(
                "dispatch.tls_client_cert",
                "a client certificate needs both dispatch.tls_client_cert and dispatch.tls_client_key",
            ));
        }
        self.retention
            .check()
            .map_err(|(field, why)| invalid(field, why))?;
        Ok(())
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
            ..crate::dispatch::DispatchSettings::default()
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

pub fn validate_node_id(id: &str) -> Result<(), ConfigError> {
    let ok_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if id.is_empty() || id.len() > NODE_ID_MAX || !ok_chars {
        return Err(invalid(
            "cluster.node_id",
            format!(
                "{id:?} is not a node id: use 1 to {NODE_ID_MAX} letters, digits, '-', '_' or '.'"
            ),
        ));
    }
    Ok(())
}

pub fn validate_token(token: &str) -> Result<(), ConfigError> {
    if token.trim().len() < TOKEN_MIN {
        return Err(invalid(
            "auth.admin_token",
            format!("too short or blank: use at least {TOKEN_MIN} characters"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn unknown_settings_are_named() {
        let err = parse("[cluster]\nheartbeat = 5\n").unwrap_err().to_string();
        assert!(err.contains("heartbeat"), "{err}");
    }

    #[test]
    fn allowed_networks_are_parsed_and_a_bad_one_is_named() {
        let ok = parse("[dispatch]\nallowed_networks = [\"10.0.0.0/8\", \"fd00::/8\"]\n").unwrap();
        assert_eq!(ok.dispatch.allowed_networks.len(), 2);
        let err = parse("[dispatch]\nallowed_networks = [\"10.0.0.0/40\"]\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dispatch.allowed_networks") && err.contains("10.0.0.0/40"),
            "{err}"
        );
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
