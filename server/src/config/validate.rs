//! Checking a node's settings before it starts: the first setting at fault is named, with
//! what would be accepted.

use super::{Config, ConfigError, invalid};
use crate::secrets::seal::SealingKey;

/// The longest node id: it is stored in `VARCHAR(64)` columns.
const NODE_ID_MAX: usize = 64;
/// The shortest admin token accepted; shorter ones are guessable.
const TOKEN_MIN: usize = 16;

impl Config {
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
        let postgres = db.url.as_ref().is_some_and(|url| {
            let url = url.expose();
            url.starts_with("postgres://") || url.starts_with("postgresql://")
        });
        if db.pooler == super::Pooler::Transaction && !postgres {
            return Err(invalid(
                "database.pooler",
                "\"transaction\" is for PostgreSQL behind a pooler such as pgbouncer: \
                 database.url must then be a postgres:// URL",
            ));
        }
        if let Some(token) = &self.auth.admin_token {
            check_secret("auth.admin_token", token.expose())?;
        }
        if let Some(token) = &self.auth.read_only_token {
            check_secret("auth.read_only_token", token.expose())?;
        }
        for (app, token) in &self.auth.app_tokens {
            check_secret("auth.app_tokens", token.expose()).map_err(|err| match err {
                ConfigError::Invalid { field, reason } => ConfigError::Invalid {
                    field,
                    reason: format!("the token of app {app:?}: {reason}"),
                },
                other => other,
            })?;
        }
        if let Some(token) = &self.auth.executor_token {
            check_secret("auth.executor_token", token.expose())?;
        }
        if let Some(oidc) = &self.auth.oidc {
            validate_oidc(oidc)?;
        }
        if let Some(secret) = &self.dispatch.secret {
            check_secret("dispatch.secret", secret.expose())?;
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
        self.egress_policy()?;
        self.validate_xxl()?;
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
        // Ten years: due instants stay far inside what the database's integers hold.
        if !(60_000..=3_650 * 86_400_000).contains(&self.tasks.horizon_ms) {
            return Err(invalid(
                "tasks.horizon_ms",
                format!(
                    "{} is outside 60000..=315360000000 (a minute to ten years)",
                    self.tasks.horizon_ms
                ),
            ));
        }
        if self.tasks.fire_ahead_ms > 300_000 {
            return Err(invalid(
                "tasks.fire_ahead_ms",
                format!(
                    "{} is outside 0..=300000 (five minutes)",
                    self.tasks.fire_ahead_ms
                ),
            ));
        }
        if !(1..=100_000).contains(&self.tasks.fire_batch) {
            return Err(invalid(
                "tasks.fire_batch",
                format!("{} is outside 1..=100000", self.tasks.fire_batch),
            ));
        }
        self.telemetry.validate()?;
        self.http_jobs
            .check()
            .map_err(|(setting, why)| invalid(setting, why))?;
        self.validate_secrets()
    }

    /// Refuses keys that are not keys, naming the setting; a key file is read at start.
    fn validate_secrets(&self) -> Result<(), ConfigError> {
        let secrets = &self.secrets;
        if secrets.key.is_some() && secrets.key_file.is_some() {
            return Err(invalid(
                "secrets.key_file",
                "set secrets.key or secrets.key_file, not both",
            ));
        }
        if let Some(key) = &secrets.key {
            SealingKey::parse(key.expose()).map_err(|e| invalid("secrets.key", e.to_string()))?;
        }
        for key in &secrets.previous_keys {
            SealingKey::parse(key.expose())
                .map_err(|e| invalid("secrets.previous_keys", e.to_string()))?;
        }
        Ok(())
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

fn validate_oidc(oidc: &crate::access::oidc::OidcConfig) -> Result<(), ConfigError> {
    if reqwest::Url::parse(&oidc.issuer).is_err() {
        return Err(invalid(
            "auth.oidc.issuer",
            format!(
                "{:?} is not a URL: give the provider's issuer, e.g. \
                 https://id.example.com/realms/main",
                oidc.issuer
            ),
        ));
    }
    if !crate::access::oidc::secure_or_loopback(&oidc.issuer) {
        return Err(invalid(
            "auth.oidc.issuer",
            "must be an https:// URL (http:// only on a loopback address): the keys that \
             sign every token are read from it",
        ));
    }
    if oidc.audience.trim().is_empty() {
        return Err(invalid(
            "auth.oidc.audience",
            "is required: the audience (aud) the provider puts in access tokens for this API",
        ));
    }
    for (key, claim) in [
        ("auth.oidc.groups_claim", &oidc.groups_claim),
        ("auth.oidc.name_claim", &oidc.name_claim),
    ] {
        if claim.trim().is_empty() {
            return Err(invalid(key, "must name a claim"));
        }
    }
    if let Some(client_id) = &oidc.client_id {
        if client_id.trim().is_empty() {
            return Err(invalid(
                "auth.oidc.client_id",
                "is blank: give the provider's public client for carillon login, or leave it out",
            ));
        }
        // Then the provider's ID tokens, made for that client, would open the API too.
        if *client_id == oidc.audience {
            return Err(invalid(
                "auth.oidc.audience",
                "must not be the client_id: the provider's ID tokens for that client would then \
                 pass as access tokens; give the API an audience of its own",
            ));
        }
    }
    if oidc.clock_skew_s > 300 {
        return Err(invalid(
            "auth.oidc.clock_skew_s",
            "must be at most 300: a larger skew keeps expired tokens working",
        ));
    }
    Ok(())
}

pub fn validate_token(token: &str) -> Result<(), ConfigError> {
    check_secret("auth.admin_token", token)
}

/// What the deployment examples (`deploy/`) put where a secret of the operator's own goes.
const PLACEHOLDER: &str = "replace-me";

/// Refuses a token or key at `field` that is short, blank, or an example's placeholder.
fn check_secret(field: &'static str, value: &str) -> Result<(), ConfigError> {
    if value.trim().len() < TOKEN_MIN {
        return Err(invalid(
            field,
            format!("too short or blank: use at least {TOKEN_MIN} characters"),
        ));
    }
    if value.contains(PLACEHOLDER) {
        return Err(invalid(
            field,
            "is the deployment example's placeholder: put one of your own in its place \
             (openssl rand -hex 32)",
        ));
    }
    Ok(())
}

impl Config {
    fn validate_xxl(&self) -> Result<(), ConfigError> {
        let x = &self.xxl;
        if let Some(token) = &x.access_token {
            let token = token.expose();
            // As long as every other token (SECURITY.md): it lets a caller register
            // executors that are then sent work, and end attempts.
            if token.trim().len() < TOKEN_MIN || token == "default_token" {
                return Err(invalid(
                    "xxl.access_token",
                    format!(
                        "too short, blank, or XXL-JOB's published default_token: give the \
                         executors (xxl.job.accessToken) and this node a token of at least \
                         {TOKEN_MIN} characters of your own"
                    ),
                ));
            }
        }
        let l = &self.handler_logs;
        if !(1..=1_000_000).contains(&l.max_lines) {
            return Err(invalid(
                "handler_logs.max_lines",
                format!("{} is outside 1..=1000000", l.max_lines),
            ));
        }
        if !(1_024..=1_073_741_824).contains(&l.max_bytes) {
            return Err(invalid(
                "handler_logs.max_bytes",
                format!("{} is outside 1024..=1073741824 (1 GiB)", l.max_bytes),
            ));
        }
        let prefix = &x.path_prefix;
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
        if !prefix.is_empty()
            && (!prefix.starts_with('/')
                || prefix.ends_with('/')
                || !prefix.chars().all(allowed)
                || prefix.starts_with("/api/v1")
                || prefix.starts_with("/ui"))
        {
            return Err(invalid(
                "xxl.path_prefix",
                format!(
                    "{prefix:?} must be empty or start with '/', not end with one, hold only \
                     letters, digits, '-', '_', '.', '/', and stay out of /api/v1 and /ui"
                ),
            ));
        }
        if !(1_000..=3_600_000).contains(&x.executor_lease_ms) {
            return Err(invalid(
                "xxl.executor_lease_ms",
                format!("{} is outside 1000..=3600000", x.executor_lease_ms),
            ));
        }
        if !(1..=100_000).contains(&x.executor_capacity) {
            return Err(invalid(
                "xxl.executor_capacity",
                format!("{} is outside 1..=100000", x.executor_capacity),
            ));
        }
        Ok(())
    }
}
