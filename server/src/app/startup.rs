//! What a node checks and readies as it starts, each failure named ([`StartupError`]): the
//! schema it runs on, its registration, the egress policy and the executors outside it, the
//! attempts' handles, the trace export.

use std::net::SocketAddr;
use std::time::Duration;

use tracing::{info, warn};

use crate::config::{Config, ConfigError};
use crate::data_dir::DataDirError;
use crate::observe::traces::{ExportSettings, TraceExport, Traces};
use crate::store::{self, NodeRegistration, Store};

/// Why a node could not start. Each names what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("database.url: {0}")]
    DatabaseUrl(store::Error),
    #[error("connecting to {url}: {source}")]
    Connect { url: String, source: store::Error },
    #[error("applying migrations to {url}: {source}")]
    Migrate { url: String, source: store::Error },
    #[error(
        "the schema of {url} is at migration {}, and this version needs {wanted}: run `carillon migrate` against it (database.migrate is off, so the node does not)",
        applied.map_or_else(|| "none (no Carillon schema)".to_owned(), |v| v.to_string())
    )]
    SchemaBehind {
        url: String,
        applied: Option<i64>,
        wanted: i64,
    },
    #[error(
        "the schema of {url} is at migration {applied}, newer than this version's {wanted}: run the version that migrated it, or a newer one"
    )]
    SchemaAhead {
        url: String,
        applied: i64,
        wanted: i64,
    },
    #[error("checking the schema of {url}: {source}")]
    SchemaCheck { url: String, source: store::Error },
    #[error("initialising the cluster in {url}: {source}")]
    ClusterInit { url: String, source: store::Error },
    #[error("registering node {node_id}: {source}")]
    Register {
        node_id: String,
        source: store::Error,
    },
    /// Building an HTTP client or the listener's TLS failed; the message says which.
    #[error("{0}")]
    Http(String),
    #[error(transparent)]
    Traces(#[from] crate::observe::traces::ExportError),
    #[error(transparent)]
    SecretKeys(#[from] crate::secrets::KeyError),
    #[error("http.listen: cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The node's trace ids and, when `[telemetry]` names a collector, its span exporter.
pub(super) fn traces(
    telemetry: &crate::config::TelemetryConfig,
    dispatch_key: &crate::secret::Secret,
    node_id: &str,
) -> Result<(Traces, Option<TraceExport>), StartupError> {
    let key = dispatch_key.expose().as_bytes();
    let Some(endpoint) = &telemetry.otlp_endpoint else {
        return Ok((Traces::new(key, None), None));
    };
    let settings = ExportSettings {
        endpoint: endpoint.clone(),
        headers: telemetry
            .otlp_headers
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_owned()))
            .collect(),
        service_name: telemetry.service_name.clone(),
        node_id: node_id.to_owned(),
        timeout: Duration::from_millis(telemetry.export_timeout_ms),
    };
    let (spans, queued) = Traces::queue();
    let export = TraceExport::new(&settings, queued)?;
    info!(endpoint = %endpoint, sample_ratio = telemetry.sample_ratio, "exporting traces over OTLP");
    Ok((
        Traces::new(key, Some((spans, telemetry.sample_ratio))),
        Some(export),
    ))
}

/// The egress policy, saying at start what an operator should know of it: a setting read in
/// its older place, and an allowance of this machine's own services.
pub(super) fn egress_policy(config: &Config) -> Result<crate::egress::Egress, StartupError> {
    let settings = config.egress();
    for notice in &settings.notices {
        warn!("{notice}");
    }
    let egress = config.egress_policy()?;
    // Said, not warned: it is set on purpose (the demo sets it).
    if egress.opens_loopback() {
        info!(
            allowed_networks = ?settings.config.allowed_networks,
            "egress is open to loopback: HTTP jobs, alert webhooks and executors may reach this \
             machine's own services (fine on a laptop; not on a shared server)"
        );
    }
    Ok(egress)
}

/// Says, for each executor registered at an address the egress policy refuses (one that
/// relied on the open default of versions before it), what to set: the nodes no longer
/// dispatch to it. Address literals only: resolving every executor's name here would hold up
/// the start (a name is judged on each connection anyway).
pub(super) async fn warn_of_executors_outside(store: &dyn Store, egress: &crate::egress::Egress) {
    let Ok(list) = store.executors_list(None).await else {
        return;
    };
    for executor in list.executors.iter().filter(|e| e.state != "left") {
        if let Err(why) = egress.check_literal(&executor.address) {
            warn!(
                executor = %executor.executor_id,
                address = %executor.address,
                "{why}: the nodes do not dispatch to it; if its network is yours, add it to \
                 egress.allowed_networks (\"private\", \"loopback\" or its network, e.g. \
                 \"10.0.0.0/8\")"
            );
        }
    }
}

/// The handles of attempts, under the key the nodes share (the first node to start makes it).
pub(super) async fn attempt_handles(
    store: &dyn Store,
    url: &str,
) -> Result<crate::dispatch::handles::AttemptHandles, StartupError> {
    use crate::dispatch::handles::{AttemptHandles, KEY_NAME};
    let init = |source| StartupError::ClusterInit {
        url: url.to_owned(),
        source,
    };
    let candidate = AttemptHandles::random_key_hex()
        .map_err(|e| StartupError::Http(format!("no random numbers for the nodes' key: {e}")))?;
    let key = store.node_key(KEY_NAME, &candidate).await.map_err(init)?;
    AttemptHandles::new(&key).map_err(|e| {
        init(store::Error::Unreadable {
            what: format!("the nodes' key {KEY_NAME}"),
            reason: e.to_string(),
        })
    })
}

/// Refuses to start on a schema this build did not migrate to: with `database.migrate` off
/// (a migration job, a DBA) the schema must be this build's.
pub(super) async fn check_schema(store: &dyn Store, url: &str) -> Result<(), StartupError> {
    let version = store
        .schema_version()
        .await
        .map_err(|source| StartupError::SchemaCheck {
            url: url.to_owned(),
            source,
        })?;
    match version.applied {
        Some(applied) if applied == version.wanted => Ok(()),
        Some(applied) if applied > version.wanted => Err(StartupError::SchemaAhead {
            url: url.to_owned(),
            applied,
            wanted: version.wanted,
        }),
        applied => Err(StartupError::SchemaBehind {
            url: url.to_owned(),
            applied,
            wanted: version.wanted,
        }),
    }
}

pub(super) async fn register(
    store: &dyn Store,
    node: NodeRegistration,
) -> Result<(), StartupError> {
    store
        .node_register(&node)
        .await
        .map_err(|source| StartupError::Register {
            node_id: node.node_id.clone(),
            source,
        })?;
    info!(node_id = %node.node_id, address = %node.address, "registered in the cluster");
    Ok(())
}
