//! `Executor`: configuration, registration with failover between admin nodes, heartbeats,
//! result reports, and a graceful drain.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use carillon_protocol::{
    AttemptReport, DefaultSchedule, Deregistration, HandlerSpec, Heartbeat, HeartbeatReply,
    Outcome, PROTOCOL_VERSION, Registration, RegistrationAccepted, admin_paths,
};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::registry::{JobDescriptor, registered_jobs};

/// Why an executor could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    #[error("{field}: {reason}")]
    Config { field: &'static str, reason: String },
    #[error("two #[job] handlers are named {0:?}")]
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

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
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
}

impl ExecutorBuilder {
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
        let mut jobs: HashMap<&'static str, &'static JobDescriptor> = HashMap::new();
        for job in registered_jobs() {
            if jobs.insert(job.name, job).is_some() {
                return Err(ExecutorError::DuplicateJob(job.name.to_owned()));
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
                reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(Duration::from_secs(10)),
            )
            .map_err(|e| bad("admin_ca", &e.to_string()))?
            .build()
            .map_err(|e| bad("admin_urls", &format!("cannot build an HTTP client: {e}")))?;
        let shared = Arc::new(Shared {
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
            http,
            jobs,
            slots: Arc::new(Semaphore::new(self.capacity as usize)),
            running: Mutex::new(HashMap::new()),
            seen: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            tasks: TaskTracker::new(),
            preferred_admin: AtomicUsize::new(0),
        });
        Ok(Executor {
            shared,
            listen: self.listen,
            advertise: self.advertise,
            drain_timeout: self.drain_timeout,
            tls,
        })
    }
}

/// A failed call to the admin nodes; `permanent` when retrying cannot help.
#[derive(Debug)]
struct CallError {
    message: String,
    permanent: bool,
}

/// State shared by the endpoint, the heartbeat and the reports.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) executor_id: String,
    app: String,
    admin_urls: Vec<String>,
    weight: u32,
    capacity: u32,
    token: String,
    pub(crate) secret: String,
    http: reqwest::Client,
    pub(crate) jobs: HashMap<&'static str, &'static JobDescriptor>,
    pub(crate) slots: Arc<Semaphore>,
    running: Mutex<HashMap<i64, CancellationToken>>,
    seen: Mutex<HashMap<i64, i64>>,
    pub(crate) draining: AtomicBool,
    pub(crate) tasks: TaskTracker,
    preferred_admin: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps: a panic elsewhere cannot leave them inconsistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn lock_running(&self) -> MutexGuard<'_, HashMap<i64, CancellationToken>> {
        lock(&self.running)
    }

    pub(crate) fn lock_seen(&self) -> MutexGuard<'_, HashMap<i64, i64>> {
        lock(&self.seen)
    }

    /// POSTs to the admin nodes, starting with the last one that answered, until one takes it.
    async fn call<B: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        extra: &[String],
    ) -> Result<R, String> {
        self.call_once(path, body, extra)
            .await
            .map_err(|e| e.message)
    }

    async fn call_once<B: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        extra: &[String],
    ) -> Result<R, CallError> {
        let start = self.preferred_admin.load(Ordering::Relaxed);
        let n = self.admin_urls.len();
        let mut urls: Vec<&str> = extra.iter().map(String::as_str).collect();
        urls.extend((0..n).map(|i| self.admin_urls[(start + i) % n].as_str()));
        let mut last = String::from("no admin node configured");
        for url in urls {
            let sent = self
                .http
                .post(format!("{url}{path}"))
                .bearer_auth(&self.token)
                .json(body)
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    if let Some(i) = self.admin_urls.iter().position(|u| u == url) {
                        self.preferred_admin.store(i, Ordering::Relaxed);
                    }
                    return r.json::<R>().await.map_err(|e| CallError {
                        message: e.to_string(),
                        permanent: false,
                    });
                }
                // The admin node understood and refused: another would refuse too.
                Ok(r)
                    if r.status().is_client_error()
                        && !matches!(r.status().as_u16(), 408 | 429) =>
                {
                    let status = r.status();
                    let detail: String = r
                        .text()
                        .await
                        .unwrap_or_default()
                        .chars()
                        .take(200)
                        .collect();
                    return Err(CallError {
                        message: format!("{url} answered {status}: {detail}"),
                        permanent: true,
                    });
                }
                Ok(r) => last = format!("{url} answered {}", r.status()),
                Err(e) => last = format!("{url}: {e}"),
            }
        }
        Err(CallError {
            message: last,
            permanent: false,
        })
    }

    fn registration(&self, address: &str) -> Registration {
        let mut handlers: Vec<HandlerSpec> = self
            .jobs
            .values()
            .map(|job| HandlerSpec {
                name: job.name.to_owned(),
                description: job.description.to_owned(),
                schedule: (job.cron.is_some() || job.rrule.is_some()).then(|| DefaultSchedule {
                    cron: job.cron.map(str::to_owned),
                    rrule: job.rrule.map(str::to_owned),
                    timezone: job.timezone.map(str::to_owned),
                }),
            })
            .collect();
        handlers.sort_by(|a, b| a.name.cmp(&b.name));
        Registration {
            protocol: PROTOCOL_VERSION,
            executor_id: self.executor_id.clone(),
            app: self.app.clone(),
            address: address.to_owned(),
            weight: self.weight,
            capacity: self.capacity,
            handlers,
            batch: true,
        }
    }

    /// Reports an attempt's result, retrying until an admin node takes it.
    pub(crate) async fn report(
        &self,
        attempt_id: i64,
        result: Option<Result<Value, String>>,
        report_to: &[String],
    ) {
        let (outcome, output, error) = match result {
            Some(Ok(output)) => (Outcome::Succeeded, Some(output), None),
            Some(Err(error)) => (Outcome::Failed, None, Some(error)),
            None => (Outcome::Cancelled, None, Some("cancelled".to_owned())),
        };
        let report = AttemptReport {
            executor_id: self.executor_id.clone(),
            attempt_id,
            outcome,
            output,
            error,
        };
        let mut delay = Duration::from_millis(200);
        loop {
            match self
                .call_once::<_, Value>(admin_paths::RESULTS, &report, report_to)
                .await
            {
                Ok(_) => return,
                Err(e) if e.permanent => {
                    warn!(attempt_id, error = %e.message, "result refused for good; not retrying");
                    return;
                }
                Err(e) => {
                    warn!(attempt_id, error = %e.message, "result not delivered yet; retrying")
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(30));
        }
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
        }
    }

    pub fn executor_id(&self) -> &str {
        &self.shared.executor_id
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
        info!(executor = %shared.executor_id, %address, handlers = shared.jobs.len(), "registered");

        let stop = CancellationToken::new();
        let beat = tokio::spawn(heartbeat(
            Arc::clone(&shared),
            address.clone(),
            accepted.heartbeat_interval_ms,
            stop.clone(),
        ));
        let serve_stop = stop.clone();
        let stopped = async move {
            shutdown.await;
            serve_stop.cancel();
        };
        let served = match &self.tls {
            Some(config) => {
                let listener = carillon_tls::TlsListener::new(listener, Arc::clone(config))
                    .map_err(ExecutorError::Serve)?;
                axum::serve(listener, self.router())
                    .with_graceful_shutdown(stopped)
                    .await
            }
            None => {
                axum::serve(listener, self.router())
                    .with_graceful_shutdown(stopped)
                    .await
            }
        }
        .map_err(ExecutorError::Serve);

        // Drain: refuse new work, let in-flight attempts finish and report, then leave.
        shared.draining.store(true, Ordering::SeqCst);
        shared.tasks.close();
        if tokio::time::timeout(self.drain_timeout, shared.tasks.wait())
            .await
            .is_err()
        {
            warn!("in-flight attempts outlived the drain timeout; cancelling them");
            for token in shared.lock_running().values() {
                token.cancel();
            }
            let _ = tokio::time::timeout(Duration::from_secs(5), shared.tasks.wait()).await;
        }
        beat.abort();
        let leaving = Deregistration {
            executor_id: shared.executor_id.clone(),
        };
        if let Err(e) = shared
            .call::<_, Value>(admin_paths::DEREGISTER, &leaving, &[])
            .await
        {
            warn!(error = %e, "could not deregister; the admin nodes will notice the silence");
        }
        info!(executor = %shared.executor_id, "stopped");
        served
    }
}

async fn heartbeat(
    shared: Arc<Shared>,
    address: String,
    interval_ms: u64,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(Duration::from_millis(interval_ms.max(100)));
    loop {
        ticks.tick().await;
        let in_flight: Vec<i64> = shared.lock_running().keys().copied().collect();
        let beat = Heartbeat {
            executor_id: shared.executor_id.clone(),
            in_flight,
            draining: stop.is_cancelled() || shared.draining.load(Ordering::SeqCst),
        };
        match shared
            .call::<_, HeartbeatReply>(admin_paths::HEARTBEAT, &beat, &[])
            .await
        {
            Ok(reply) => {
                if !reply.registered && !beat.draining {
                    let _ = shared
                        .call::<_, RegistrationAccepted>(
                            admin_paths::REGISTER,
                            &shared.registration(&address),
                            &[],
                        )
                        .await;
                }
                for attempt in reply.cancel {
                    if let Some(token) = shared.lock_running().get(&attempt) {
                        token.cancel();
                    }
                }
            }
            Err(e) => warn!(error = %e, "heartbeat not delivered"),
        }
    }
}
