//! `Executor`: configuration, then the executor's life: register, serve dispatches, heartbeat,
//! and drain gracefully on shutdown (the calls themselves are `admin`'s).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use carillon_protocol::{Deregistration, RegistrationAccepted, admin_paths};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::admin::{self, Identity, Shared};
use crate::context::JobContext;
use crate::registry::{Handler, into_result, name_problem, registered_jobs};

/// Why an executor could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("{field}: {reason}")]
    Config { field: &'static str, reason: String },
    #[error("two handlers are named {0:?}")]
    DuplicateJob(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("no admin node accepted the registration: {0}")]
    Register(String),
    #[error("the endpoint failed: {0}")]
    Serve(std::io::Error),
}

/// Builds an [`Executor`]. `app`, `admin_urls`, `executor_token` and `dispatch_secret` are
/// required.
#[derive(Debug, Clone)]
pub struct ExecutorBuilder {
    app: String,
    admin_urls: Vec<String>,
    listen: SocketAddr,
    advertise: Option<String>,
    weight: u32,
    capacity: u32,
    executor_token: String,
    dispatch_secret: String,
    executor_id: Option<String>,
    drain_timeout: Duration,
    /// Serve HTTPS with this certificate and key; with `client_ca`, require nodes to present
    /// a certificate signed by it.
    tls: Option<carillon_tls::ServerTls>,
    /// Trust for admin nodes reached over `https://`, beside the system's roots.
    admin_ca: Option<std::path::PathBuf>,
    capture_logs: bool,
    /// Handlers given at run time, beside the `#[job]` ones.
    handlers: Vec<Handler>,
}

impl ExecutorBuilder {
    /// A handler made at run time, beside the `#[job]` ones: for handlers known only once the
    /// program runs (one per script of a directory, one per entry of a configuration). It is
    /// served, registered and logged exactly as a `#[job]` handler; it declares no default
    /// schedule. Its name follows `#[job]`'s rule (1 to 128 letters, digits, `-`, `_`, `.`),
    /// checked by [`ExecutorBuilder::build`], which also refuses two handlers of one name.
    pub fn handler<F, Fut, T, E>(
        mut self,
        name: impl Into<String>,
        description: impl Into<String>,
        run: F,
    ) -> Self
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: serde::Serialize,
        E: std::fmt::Display,
    {
        let run = Arc::new(run);
        self.handlers.push(Handler {
            name: name.into(),
            description: description.into(),
            cron: None,
            rrule: None,
            timezone: None,
            run: Arc::new(move |ctx| {
                let attempt = run(ctx);
                Box::pin(async move { into_result(attempt.await) })
            }),
        });
        self
    }

    /// Serve the dispatch endpoint over HTTPS with this certificate chain and key (PEM
    /// files); the executor then registers an `https://` address.
    pub fn tls(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        let client_ca = self.tls.and_then(|t| t.client_ca);
        self.tls = Some(carillon_tls::ServerTls {
            cert: cert.into(),
            key: key.into(),
            client_ca,
        });
        self
    }

    /// Accept only nodes presenting a client certificate signed by this CA (PEM); needs
    /// [`ExecutorBuilder::tls`]. Nodes present theirs with `dispatch.tls_client_cert`.
    pub fn require_client_certificate(mut self, ca: impl Into<std::path::PathBuf>) -> Self {
        let ca = Some(ca.into());
        self.tls = Some(match self.tls {
            Some(tls) => carillon_tls::ServerTls {
                client_ca: ca,
                ..tls
            },
            None => carillon_tls::ServerTls {
                cert: std::path::PathBuf::new(),
                key: std::path::PathBuf::new(),
                client_ca: ca,
            },
        });
        self
    }

    /// Trust admin nodes served over HTTPS with certificates from this CA (PEM), beside the
    /// system's roots.
    pub fn admin_ca(mut self, ca: impl Into<std::path::PathBuf>) -> Self {
        self.admin_ca = Some(ca.into());
        self
    }

    pub fn app(mut self, app: impl Into<String>) -> Self {
        self.app = app.into();
        self
    }
    /// Admin node base URLs; registration, heartbeats and reports fail over between them.
    pub fn admin_urls<I: IntoIterator<Item = S>, S: Into<String>>(mut self, urls: I) -> Self {
        self.admin_urls = urls.into_iter().map(Into::into).collect();
        self
    }
    /// Where the dispatch endpoint listens (default `127.0.0.1:0`, a free port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }
    /// The URL admin nodes reach this executor at (default: `http://` and the bound address).
    pub fn advertise(mut self, url: impl Into<String>) -> Self {
        self.advertise = Some(url.into());
        self
    }
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }
    /// Attempts run at once; beyond that dispatches are answered `429`.
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }
    pub fn executor_token(mut self, token: impl Into<String>) -> Self {
        self.executor_token = token.into();
        self
    }
    pub fn dispatch_secret(mut self, secret: impl Into<String>) -> Self {
        self.dispatch_secret = secret.into();
        self
    }
    /// A fixed id (default: the app name and random digits).
    pub fn executor_id(mut self, id: impl Into<String>) -> Self {
        self.executor_id = Some(id.into());
        self
    }
    /// Whether what handlers log (INFO and above) is captured and shipped to the nodes, for
    /// the run's live log (default: yes). Capture runs each handler under a subscriber that
    /// forwards to yours; turn it off if your subscriber must be found by downcasting
    /// (`Dispatch::downcast_ref`, as OpenTelemetry's context lookup does), which it cannot
    /// forward.
    pub fn capture_handler_logs(mut self, capture: bool) -> Self {
        self.capture_logs = capture;
        self
    }

    /// How long a stop waits for in-flight attempts (default 30 s).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Executor, ExecutorError> {
        let bad = |field, reason: &str| ExecutorError::Config {
            field,
            reason: reason.to_owned(),
        };
        if self.app.is_empty() {
            return Err(bad("app", "is required"));
        }
        if self.admin_urls.is_empty() {
            return Err(bad("admin_urls", "name at least one admin node"));
        }
        if self.executor_token.trim().len() < 16 {
            return Err(bad(
                "executor_token",
                "is required (at least 16 characters)",
            ));
        }
        if self.dispatch_secret.trim().len() < 16 {
            return Err(bad(
                "dispatch_secret",
                "is required (at least 16 characters)",
            ));
        }
        if self.weight == 0 || self.capacity == 0 {
            return Err(bad("weight", "weight and capacity must be at least 1"));
        }
        let mut jobs: HashMap<String, Handler> = HashMap::new();
        let declared = registered_jobs().iter().map(Handler::from);
        for job in declared.chain(self.handlers) {
            if let Some(problem) = name_problem(&job.name) {
                return Err(ExecutorError::Config {
                    field: "handler",
                    reason: format!("{:?}: {problem}", job.name),
                });
            }
            if let Some(twice) = jobs.insert(job.name.clone(), job) {
                return Err(ExecutorError::DuplicateJob(twice.name));
            }
        }
        let executor_id = self.executor_id.clone().unwrap_or_else(|| {
            let mut random = [0u8; 4];
            let _ = getrandom::fill(&mut random);
            format!("{}-{:08x}", self.app, u32::from_le_bytes(random))
        });
        let tls = match &self.tls {
            Some(tls) if tls.cert.as_os_str().is_empty() => {
                return Err(bad(
                    "tls",
                    "require_client_certificate needs tls(cert, key) to serve HTTPS",
                ));
            }
            Some(tls) => Some(tls.config().map_err(|e| bad("tls", &e.to_string()))?),
            None => None,
        };
        let admin_tls = carillon_tls::ClientTls {
            ca: self.admin_ca.clone(),
            ..carillon_tls::ClientTls::default()
        };
        let http = admin_tls
            .apply(
                carillon_tls::http_client_builder()
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(Duration::from_secs(10)),
            )
            .map_err(|e| bad("admin_ca", &e.to_string()))?
            .build()
            .map_err(|e| bad("admin_urls", &format!("cannot build an HTTP client: {e}")))?;
        let identity = Identity {
            executor_id,
            app: self.app,
            admin_urls: self
                .admin_urls
                .iter()
                .map(|u| u.trim_end_matches('/').to_owned())
                .collect(),
            weight: self.weight,
            capacity: self.capacity,
            token: self.executor_token,
            secret: self.dispatch_secret,
            capture_logs: self.capture_logs,
        };
        let shared = Arc::new(Shared::new(identity, http, jobs));
        Ok(Executor {
            shared,
            listen: self.listen,
            advertise: self.advertise,
            drain_timeout: self.drain_timeout,
            tls,
        })
    }
}

/// An executor, ready to bind and run.
#[derive(Debug)]
pub struct Executor {
    shared: Arc<Shared>,
    listen: SocketAddr,
    advertise: Option<String>,
    drain_timeout: Duration,
    tls: Option<Arc<carillon_tls::ServerConfig>>,
}

impl Executor {
    pub fn builder() -> ExecutorBuilder {
        ExecutorBuilder {
            app: String::new(),
            admin_urls: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            weight: 1,
            capacity: 16,
            executor_token: String::new(),
            dispatch_secret: String::new(),
            executor_id: None,
            drain_timeout: Duration::from_secs(30),
            tls: None,
            admin_ca: None,
            capture_logs: true,
            handlers: Vec::new(),
        }
    }

    pub fn executor_id(&self) -> &str {
        &self.shared.id.executor_id
    }

    /// The dispatch endpoint, to mount into an existing axum app (at the root: its paths are
    /// `/carillon/v1/…`). Registration and heartbeats are then the app's to start with
    /// [`Executor::run_with_listener`] or by running this executor elsewhere.
    pub fn router(&self) -> axum::Router {
        crate::endpoint::router(Arc::clone(&self.shared))
    }

    /// Binds, registers, heartbeats and serves until `shutdown` resolves; then drains and
    /// deregisters.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ExecutorError> {
        let listener =
            TcpListener::bind(self.listen)
                .await
                .map_err(|source| ExecutorError::Bind {
                    addr: self.listen,
                    source,
                })?;
        self.run_with_listener(listener, shutdown).await
    }

    /// Like [`Executor::run_until`] on a listener the caller bound (port 0 for tests).
    pub async fn run_with_listener(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ExecutorError> {
        let local = listener.local_addr().map_err(ExecutorError::Serve)?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let address = self
            .advertise
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{local}"));
        let shared = Arc::clone(&self.shared);
        let accepted: RegistrationAccepted = shared
            .call(admin_paths::REGISTER, &shared.registration(&address), &[])
            .await
            .map_err(ExecutorError::Register)?;
        info!(executor = %shared.id.executor_id, %address, handlers = shared.jobs.len(), "registered");

        let stop = CancellationToken::new();
        let ship = tokio::spawn(Arc::clone(&shared).ship_logs());
        let beat = tokio::spawn(admin::heartbeat(
            Arc::clone(&shared),
            address.clone(),
            accepted.heartbeat_interval_ms,
            stop.clone(),
        ));
        // On shutdown the executor drains while it still serves: the nodes, told by the
        // next heartbeat, offer it nothing new (a dispatch is answered `503`), an attempt
        // offered again is answered `409` (it runs here), and cancels still reach handlers.
        // It stops listening once in-flight work is done.
        let drain_timeout = self.drain_timeout;
        let drained = {
            let shared = Arc::clone(&shared);
            let stop = stop.clone();
            async move {
                shutdown.await;
                stop.cancel();
                drain(&shared, drain_timeout).await;
            }
        };
        let served = match &self.tls {
            Some(config) => {
                let listener = carillon_tls::TlsListener::new(listener, Arc::clone(config))
                    .map_err(ExecutorError::Serve)?;
                axum::serve(listener, self.router())
                    .with_graceful_shutdown(drained)
                    .await
            }
            None => {
                axum::serve(listener, self.router())
                    .with_graceful_shutdown(drained)
                    .await
            }
        }
        .map_err(ExecutorError::Serve);
        // Serving failed before any shutdown: what runs still finishes and reports.
        drain(&shared, drain_timeout).await;
        beat.abort();
        ship.abort();
        let leaving = Deregistration {
            executor_id: shared.id.executor_id.clone(),
        };
        if let Err(e) = shared
            .call::<_, Value>(admin_paths::DEREGISTER, &leaving, &[])
            .await
        {
            warn!(error = %e, "could not deregister; the admin nodes will notice the silence");
        }
        info!(executor = %shared.id.executor_id, "stopped");
        served
    }
}

/// Refuses new work, lets in-flight attempts finish and report (cancelled past `timeout`).
/// Done twice, the second returns at once.
async fn drain(shared: &Shared, timeout: Duration) {
    shared.draining.store(true, Ordering::SeqCst);
    shared.tasks.close();
    if tokio::time::timeout(timeout, shared.tasks.wait())
        .await
        .is_err()
    {
        warn!("in-flight attempts outlived the drain timeout; cancelling them");
        for token in shared.lock_running().values() {
            token.cancel();
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), shared.tasks.wait()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> ExecutorBuilder {
        Executor::builder()
            .app("runtime")
            .admin_urls(["http://127.0.0.1:9"])
            .executor_token("executor-token-0123456789")
            .dispatch_secret("dispatch-secret-0123456789")
    }

    async fn nothing(_: JobContext) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn handlers_given_at_run_time_are_named_as_job_handlers() {
        let executor = builder()
            .handler("backup", "the backup", nothing)
            .handler("report.daily", "", nothing)
            .build()
            .unwrap();
        let mut names: Vec<&String> = executor.shared.jobs.keys().collect();
        names.sort();
        assert_eq!(names, ["backup", "report.daily"]);

        let bad = builder()
            .handler("two words", "", nothing)
            .build()
            .unwrap_err();
        assert!(
            bad.to_string().contains("\"two words\": a job name is"),
            "{bad}"
        );
        let twice = builder()
            .handler("sync", "", nothing)
            .handler("sync", "", nothing)
            .build()
            .unwrap_err();
        assert!(matches!(twice, ExecutorError::DuplicateJob(name) if name == "sync"));
    }
}
