//! The flags of `carillon server` and `carillon migrate`, each with its `CARILLON_*`
//! environment variable, laid over the config file's settings.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::config::{Config, LogFormat, Pooler, Secret};
use crate::jobs::{AlertFormat, KeepFor};

#[derive(Debug, Args)]
pub(super) struct CommonArgs {
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
pub(super) struct ServerArgs {
    #[command(flatten)]
    pub(super) common: CommonArgs,
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
    /// Networks HTTP jobs, alert webhooks and executors may be at: `public,10.0.0.0/8`
    /// (default `public`; also `loopback`, `private`, `link-local`).
    #[arg(long, env = "CARILLON_EGRESS_ALLOWED_NETWORKS")]
    egress_allowed_networks: Option<String>,
    /// Host names they may be at wherever those resolve: `api.example.com,*.corp.example`.
    #[arg(long, env = "CARILLON_EGRESS_ALLOWED_HOSTS")]
    egress_allowed_hosts: Option<String>,
    /// Read into the egress networks, with a notice (use the egress setting).
    #[arg(long, env = "CARILLON_DISPATCH_ALLOWED_NETWORKS", hide = true)]
    dispatch_allowed_networks: Option<String>,
    /// Read into the egress networks, with a notice (use the egress setting).
    #[arg(long, env = "CARILLON_HTTP_JOBS_ALLOWED_NETWORKS", hide = true)]
    http_jobs_allowed_networks: Option<String>,
    /// Read into the egress hosts, with a notice (use the egress setting).
    #[arg(long, env = "CARILLON_HTTP_JOBS_ALLOWED_HOSTS", hide = true)]
    http_jobs_allowed_hosts: Option<String>,
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
    /// Skipped instants are alerted at most once per job per this interval (0: never).
    #[arg(long, env = "CARILLON_ALERTS_SKIPPED_EVERY_MS")]
    alerts_skipped_every_ms: Option<u64>,
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
    pub(super) fn apply(self, config: &mut Config) {
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
    pub(super) fn apply(self, config: &mut Config) {
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
        if let Some(networks) = self.egress_allowed_networks {
            config.egress.allowed_networks = comma_list(&networks);
        }
        if let Some(hosts) = self.egress_allowed_hosts {
            config.egress.allowed_hosts = comma_list(&hosts);
        }
        if let Some(networks) = self.dispatch_allowed_networks {
            config.dispatch.allowed_networks = Some(comma_list(&networks));
        }
        if let Some(networks) = self.http_jobs_allowed_networks {
            config.http_jobs.allowed_networks = Some(comma_list(&networks));
        }
        if let Some(hosts) = self.http_jobs_allowed_hosts {
            config.http_jobs.allowed_hosts = Some(comma_list(&hosts));
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
        set(
            &mut config.alerts.skipped_every_ms,
            self.alerts_skipped_every_ms,
        );
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

/// The items of a comma-separated list, trimmed, the empty ones left out.
fn comma_list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}
