//! The node's lifecycle: [`Application::build`] connects, migrates, joins and binds;
//! [`Application::run_until_stopped`] serves until told to stop, then leaves the cluster.
//! Signal handling lives only in the binary: the stop signal is a parameter here, so tests
//! start and stop nodes in-process.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::api::{self, ApiState};
use crate::clock::ClusterClock;
use crate::cluster::{Coordinator, CoordinatorError, LocalView};
use crate::config::{Config, Pooler};
use crate::data_dir::DataDir;
use crate::dispatch::Dispatcher;
use crate::dispatch::client::DispatchClient;
use crate::dispatch::http_jobs::HttpJobs;
use crate::observe::traces::TraceExport;
use crate::observe::{
    self, AlertSettings, AlertWorker, FailedJobs, FailurePauser, NodeMetrics, Observer, SkipNotices,
};
use crate::retention::HistoryPurger;
use crate::scheduler::backfill::BackfillDriver;
use crate::scheduler::{Scheduler, SchedulerReports, SchedulerStores};
use crate::store::{self, DatabaseUrl, NodeRegistration, PoolOptions};
use crate::tasks::firer::TaskFirer;

mod startup;

pub use startup::StartupError;
use startup::{
    attempt_handles, check_schema, egress_policy, register, traces, warn_of_executors_outside,
};

/// Why a running node stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Cluster(#[from] CoordinatorError),
    #[error("http server failed: {0}")]
    Http(std::io::Error),
    #[error("a node task panicked: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// A node that has joined the cluster and bound its listener, ready to run.
#[derive(Debug)]
pub struct Application {
    listener: TcpListener,
    local_addr: SocketAddr,
    api_state: ApiState,
    coordinator: Coordinator,
    scheduler: Scheduler,
    dispatcher: Dispatcher,
    alert_worker: AlertWorker,
    history_purger: HistoryPurger,
    failure_pauser: FailurePauser,
    backfill_driver: BackfillDriver,
    task_firer: TaskFirer,
    /// Sends the node's spans, when `[telemetry]` names a collector.
    trace_export: Option<TraceExport>,
    /// Serve HTTPS with this configuration (`http.tls_cert`).
    tls: Option<Arc<carillon_tls::ServerConfig>>,
    shutdown_grace: Duration,
}

impl Application {
    pub async fn build(config: Config) -> Result<Self, StartupError> {
        config.validate()?;
        let data_dir = DataDir::open(&config.data_dir())?;
        let node_id = match &config.cluster.node_id {
            Some(id) => id.clone(),
            None => data_dir.node_id()?.value,
        };
        let executor_token = match &config.auth.executor_token {
            Some(token) => token.clone(),
            None => data_dir.executor_token()?.value,
        };
        let dispatch_secret = match &config.dispatch.secret {
            Some(secret) => secret.clone(),
            None => data_dir.dispatch_secret()?.value,
        };
        let admin_token = match &config.auth.admin_token {
            Some(token) => token.clone(),
            None => {
                let token = data_dir.admin_token()?;
                if token.created {
                    info!(path = %token.path.display(), "generated an admin token; read it from this file");
                } else {
                    info!(path = %token.path.display(), "using the admin token kept in this file");
                }
                token.value
            }
        };
        let url = match &config.database.url {
            Some(url) => DatabaseUrl::parse(url.expose()),
            None => DatabaseUrl::parse(&data_dir.sqlite_url()),
        }
        .map_err(StartupError::DatabaseUrl)?;

        let kept_key = if !config.secrets.names_a_key() && url.backend() == store::Backend::Sqlite {
            Some(data_dir.secrets_key()?)
        } else {
            None
        };
        let secret_keys = crate::secrets::load_keys(
            &config.secrets,
            kept_key
                .as_ref()
                .map(|kept| (kept.value.as_str(), kept.path.as_path())),
        )?
        .map(Arc::new);
        match &secret_keys {
            Some(keys) => info!(
                key_id = keys.current().id(),
                "secrets are sealed with this key"
            ),
            None => info!("no secrets key: secrets cannot be stored (set secrets.key)"),
        }

        let db = &config.database;
        let api_pool = PoolOptions {
            max_connections: db.max_connections,
            acquire_timeout: Duration::from_millis(db.acquire_timeout_ms),
            statement_timeout: Duration::from_millis(db.statement_timeout_ms),
            transaction_pooler: db.pooler == Pooler::Transaction,
        };
        // Leases get their own small pool, so a busy API never delays a renewal, with timeouts
        // well inside the node lease, so a lost database is noticed before the lease runs out.
        let lease_budget = config.timings().node_lease / 4;
        let lease_pool = PoolOptions {
            max_connections: 2,
            acquire_timeout: api_pool.acquire_timeout.min(lease_budget),
            statement_timeout: api_pool.statement_timeout.min(lease_budget),
            transaction_pooler: api_pool.transaction_pooler,
        };
        let connect = |options: PoolOptions| {
            let url = url.clone();
            async move {
                store::connect(&url, &options)
                    .await
                    .map_err(|source| StartupError::Connect {
                        url: url.to_string(),
                        source,
                    })
            }
        };
        let api_store = connect(api_pool).await?;
        let lease_store = connect(lease_pool).await?;
        info!(database = %url, backend = url.backend().as_str(), "connected");

        if db.migrate {
            api_store
                .migrate()
                .await
                .map_err(|source| StartupError::Migrate {
                    url: url.to_string(),
                    source,
                })?;
        } else {
            check_schema(&*api_store, &url.to_string()).await?;
        }
        let partitions = i64::from(config.cluster.partitions);
        let meta = api_store.cluster_init(partitions).await.map_err(|source| {
            StartupError::ClusterInit {
                url: url.to_string(),
                source,
            }
        })?;
        let handles = attempt_handles(&*api_store, &url.to_string()).await?;
        if meta.partition_count != partitions {
            warn!(
                configured = partitions,
                cluster = meta.partition_count,
                "cluster.partitions is fixed when the cluster is first initialised; using the cluster's"
            );
        }

        let listen = config.http.listen;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| StartupError::Bind {
                addr: listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartupError::Bind {
            addr: listen,
            source,
        })?;
        // Bad certificate files stop the node here, naming the file.
        let tls = config
            .http
            .server_tls()
            .map(|tls| tls.config())
            .transpose()
            .map_err(|e| StartupError::Http(format!("http.tls_cert/http.tls_key: {e}")))?;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let address = config
            .http
            .advertise
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{local_addr}"));
        let advertised = address.clone();
        if config.xxl.access_token.is_some() {
            // What an XXL-JOB executor names as its admin (`xxl.job.admin.addresses`).
            info!(
                admin_address = %format!("{advertised}{}", config.xxl.path_prefix),
                "XXL-JOB endpoints on"
            );
        }

        let incarnation = crate::data_dir::random_hex(8)?;
        register(
            &*lease_store,
            NodeRegistration {
                node_id: node_id.clone(),
                incarnation: incarnation.clone(),
                address,
                version: crate::VERSION.to_owned(),
            },
        )
        .await?;

        let view = Arc::new(LocalView::new(node_id));
        let clock = Arc::new(ClusterClock::new());
        let timings = config.timings();
        let coordinator = Coordinator::new(
            lease_store as Arc<dyn crate::store::ClusterStore>,
            Arc::clone(&view),
            Arc::clone(&clock),
            incarnation,
            timings,
        );
        let egress = Arc::new(egress_policy(&config)?);
        warn_of_executors_outside(&*api_store, &egress).await;
        let metrics = Arc::new(NodeMetrics::new());
        let (alerter, alert_worker) = observe::alerts::alerts(
            Arc::clone(&api_store) as Arc<dyn store::JobStore>,
            Arc::clone(&api_store) as Arc<dyn store::DispatchStore>,
            Arc::clone(&api_store) as Arc<dyn store::NamespaceStore>,
            Arc::clone(&view),
            AlertSettings::new(&config.alerts, config.dispatch.executor_lease_ms),
            Arc::clone(&egress),
            Arc::clone(&metrics),
        )
        .map_err(|e| {
            StartupError::Http(format!(
                "cannot build the HTTP client for alerts: {}",
                carillon_tls::with_causes(&e)
            ))
        })?;
        let failed_jobs = Arc::new(FailedJobs::default());
        let failure_pauser = FailurePauser::new(
            Arc::clone(&api_store) as Arc<dyn store::JobStore>,
            Arc::clone(&failed_jobs),
            alerter.clone(),
        );
        let (traces, trace_export) = traces(&config.telemetry, &dispatch_secret, view.node_id())?;
        let skips = SkipNotices::new(
            config.alerts.skipped_every_ms,
            alerter.clone(),
            Arc::clone(&metrics),
        );
        let observer = Observer::new(
            Arc::clone(&metrics),
            alerter,
            config.alerts.late_after_ms,
            failed_jobs,
            traces.clone(),
        );
        let history_purger = HistoryPurger::new(
            Arc::clone(&api_store) as Arc<dyn store::HistoryStore>,
            Arc::clone(&api_store) as Arc<dyn store::TaskStore>,
            Arc::clone(&api_store) as Arc<dyn store::AuditStore>,
            Arc::clone(&view),
            Arc::clone(&clock),
            config.retention.clone(),
            Arc::clone(&metrics),
        );
        let dispatcher_wake = Arc::new(Notify::new());
        let backfill_driver = BackfillDriver::new(
            Arc::clone(&api_store) as Arc<dyn store::PolicyStore>,
            Arc::clone(&api_store) as Arc<dyn store::JobStore>,
            Arc::clone(&view),
            config.scheduler_settings().poll_interval,
            Arc::clone(&dispatcher_wake),
            Arc::clone(&metrics),
        );
        let task_firer = TaskFirer::new(
            Arc::clone(&api_store) as Arc<dyn store::TaskStore>,
            Arc::clone(&view),
            Arc::clone(&clock),
            config.task_fire_settings(),
            Arc::clone(&dispatcher_wake),
            Arc::clone(&metrics),
        );
        let scheduler = Scheduler::new(
            SchedulerStores::of(&api_store),
            Arc::clone(&view),
            Arc::clone(&clock),
            config.scheduler_settings(),
            Arc::clone(&dispatcher_wake),
            SchedulerReports {
                metrics,
                traces,
                skips,
            },
        );
        let client = DispatchClient::new(
            Arc::new(dispatch_secret),
            Arc::clone(&clock),
            (
                Duration::from_millis(config.dispatch.connect_timeout_ms),
                Duration::from_millis(config.dispatch.request_timeout_ms),
            ),
            Arc::clone(&egress),
            &config.dispatch.client_tls(),
            handles,
        )
        .map_err(|e| StartupError::Http(carillon_tls::with_causes(&e)))?
        .with_xxl_token(config.xxl.access_token.clone());
        let http_jobs = Arc::new(
            HttpJobs::new(
                &config.http_jobs,
                Arc::clone(&egress),
                view.node_id(),
                secret_keys.clone(),
            )
            .map_err(StartupError::Http)?,
        );
        let dispatcher = Dispatcher::new(
            Arc::clone(&api_store),
            Arc::clone(&view),
            client.clone(),
            config.dispatch_settings(),
            dispatcher_wake,
            vec![advertised.clone()],
            observer.clone(),
        )
        .with_http_jobs(Arc::clone(&http_jobs));
        let namespaces = Arc::new(crate::namespaces::Directory::new(
            Arc::clone(&api_store) as Arc<dyn crate::store::NamespaceStore>
        ));
        let tokens = Arc::new(crate::access::tokens::ServiceTokens::new(
            Arc::clone(&api_store) as Arc<dyn crate::store::TokenStore>,
        ));
        let grants = Arc::new(crate::access::grants::RoleGrants::new(
            Arc::clone(&api_store) as Arc<dyn crate::store::GrantStore>,
        ));
        let oidc = match &config.auth.oidc {
            Some(settings) => Some(Arc::new(
                crate::access::oidc::OidcVerifier::new(settings.clone())
                    .map_err(|e| StartupError::Http(format!("[auth.oidc]: {e}")))?,
            )),
            None => None,
        };
        let api_state = ApiState {
            namespaces,
            tokens,
            grants,
            oidc,
            refused_sign_ins: Arc::default(),
            enqueue_rates: Arc::default(),
            store: api_store,
            view,
            clock,
            admin_token: Arc::new(admin_token),
            executor_token: Arc::new(executor_token),
            read_only_token: config.auth.read_only_token.clone().map(Arc::new),
            app_tokens: Arc::new(
                config
                    .auth
                    .app_tokens
                    .iter()
                    .map(|(app, token)| (app.clone(), token.clone()))
                    .collect(),
            ),
            timings,
            partition_count: meta.partition_count,
            dispatch: client,
            executor_heartbeat_ms: config.dispatch.executor_heartbeat_ms,
            executor_lease_ms: config.dispatch.executor_lease_ms,
            observer,
            late_after_ms: config.alerts.late_after_ms,
            settled_minutes: Arc::default(),
            task_horizon_ms: i64::try_from(config.tasks.horizon_ms).unwrap_or(i64::MAX),
            task_ids: Arc::default(),
            known_handlers: Arc::default(),
            log_caps: config.handler_logs.caps(),
            secret_keys,
            http_jobs,
            xxl: config.xxl_settings(),
        };
        Ok(Self {
            listener,
            local_addr,
            api_state,
            coordinator,
            scheduler,
            dispatcher,
            alert_worker,
            history_purger,
            failure_pauser,
            backfill_driver,
            task_firer,
            trace_export,
            tls,
            shutdown_grace: Duration::from_millis(config.cluster.shutdown_grace_ms),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn node_id(&self) -> &str {
        self.api_state.view.node_id()
    }

    /// Serves until `shutdown` is cancelled (or the node must stop on its own), then leaves
    /// the cluster and waits up to the grace period for the node's tasks.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> Result<(), RunError> {
        let tracker = TaskTracker::new();
        let http_stop = shutdown.child_token();
        let router = api::router(self.api_state);
        let mut http = match self.tls {
            Some(config) => {
                let listener = carillon_tls::TlsListener::new(self.listener, config)
                    .map_err(RunError::Http)?;
                let server = axum::serve(
                    listener,
                    router.into_make_service_with_connect_info::<api::Peer>(),
                )
                .with_graceful_shutdown(http_stop.cancelled_owned());
                tracker.spawn(async move { server.await })
            }
            None => {
                let server = axum::serve(
                    self.listener,
                    router.into_make_service_with_connect_info::<api::Peer>(),
                )
                .with_graceful_shutdown(http_stop.cancelled_owned());
                tracker.spawn(async move { server.await })
            }
        };
        let mut coordinator = tracker.spawn(self.coordinator.run(shutdown.child_token()));
        tracker.spawn(self.scheduler.run(shutdown.child_token()));
        tracker.spawn(self.dispatcher.run(shutdown.child_token()));
        tracker.spawn(self.alert_worker.run(shutdown.child_token()));
        tracker.spawn(self.history_purger.run(shutdown.child_token()));
        tracker.spawn(self.failure_pauser.run(shutdown.child_token()));
        tracker.spawn(self.backfill_driver.run(shutdown.child_token()));
        tracker.spawn(self.task_firer.run(shutdown.child_token()));
        if let Some(export) = self.trace_export {
            tracker.spawn(export.run(shutdown.child_token()));
        }
        tracker.close();
        info!(address = %self.local_addr, "carillon node listening");

        let outcome: Result<(), RunError> = tokio::select! {
            _ = shutdown.cancelled() => Ok(()),
            joined = &mut coordinator => joined?.map_err(RunError::from),
            served = &mut http => match served? {
                Ok(()) => Ok(()),
                Err(err) => Err(RunError::Http(err)),
            },
        };
        shutdown.cancel();
        if tokio::time::timeout(self.shutdown_grace, tracker.wait())
            .await
            .is_err()
        {
            warn!(grace = ?self.shutdown_grace, "tasks still running after the grace period; stopping hard");
        }
        info!("node stopped");
        outcome
    }
}
