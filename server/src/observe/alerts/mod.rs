//! Alerts: webhooks told when a run fails for good, when a run is first dispatched later than
//! its job's threshold, and when an app is left without a healthy executor.
//!
//! Whoever notices (the dispatcher, the results endpoint) only puts an [`AlertEvent`] on a
//! bounded queue and goes on: an alert never holds up a dispatch. A full queue drops the
//! alert and counts it. The [`AlertWorker`] reads the job to find its own webhook, then posts
//! to each webhook in a task of its own, retrying with backoff. Alerts live in memory: one
//! queued on a node that dies is lost (the run log in the database keeps the facts).

mod app_watch;
mod message;
mod namespace_webhooks;
mod skipped;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::metrics::NodeMetrics;
use crate::cluster::LocalView;
use crate::egress::Egress;
use crate::jobs::{AlertFormat, JobAlerts};
use crate::secret::Secret;
use crate::store::{DispatchStore, JobRecord, JobStore, NamespaceStore};
pub use app_watch::{AppLook, AppWatch};
pub use message::Alert;
use namespace_webhooks::NamespaceWebhooks;
pub use skipped::{SkipReason, SkippedInstants};

/// Alerts waiting for the worker; more are dropped (and counted), never waited for.
const QUEUE: usize = 1_024;
/// Webhook calls in flight at once.
const CONCURRENT_CALLS: usize = 16;
/// One webhook call may take this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Something worth telling a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertEvent {
    /// A run ended `failed` after its last attempt, or `no_executor`.
    RunFailed {
        run_id: i64,
        job_id: i64,
        state: String,
        error: Option<String>,
    },
    /// A run's first dispatch went later than its job's threshold after its instant.
    FiredLate {
        run_id: i64,
        job_id: i64,
        scheduled_at_ms: i64,
        lateness_ms: i64,
    },
    /// A job was stopped after `failures` failed runs in a row (`pause_after_failures`).
    JobPaused { job_id: i64, failures: u32 },
    /// Instants of a job's schedule were not fired, per reason.
    InstantsSkipped {
        job_id: i64,
        skipped: Vec<SkippedInstants>,
    },
    /// An app that had a healthy executor has none.
    AppUnhealthy { app: String, executors: usize },
    /// An app without a healthy executor has one again.
    AppRecovered { app: String, healthy: usize },
}

/// Where alerts are put; cheap to clone.
#[derive(Debug, Clone)]
pub struct Alerter {
    queue: mpsc::Sender<AlertEvent>,
    metrics: Arc<NodeMetrics>,
    dropped: Arc<AtomicU64>,
}

impl Alerter {
    /// Queues `event` for the worker without waiting.
    pub fn raise(&self, event: AlertEvent) {
        if let Err(err) = self.queue.try_send(event) {
            self.metrics.alerts.add("dropped", 1);
            // The 1st, 2nd, 4th, 8th… drop is logged: a webhook down for an hour must not
            // flood the log too.
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                warn!(dropped, event = ?err.into_inner(), "alert queue full; alerts dropped (carillon_alerts_total{{outcome=\"dropped\"}})");
            }
        }
    }
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
    /// A job's instants that did not fire (misfire, paused, overlap `skip`, calendar) are
    /// told at once, then at most once per this interval (what comes between is told with the
    /// next); 0 turns these alerts off (`carillon_instants_skipped_total` still counts).
    pub skipped_every_ms: u64,
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
            skipped_every_ms: 600_000,
            attempts: 5,
        }
    }
}

/// The settings the worker needs.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    pub webhook: Option<Secret>,
    pub format: AlertFormat,
    /// The node's late-fire threshold; 0: the node's webhook gets no late alerts.
    pub late_after_ms: u64,
    pub check_every: Duration,
    pub attempts: u32,
    pub executor_lease_ms: i64,
}

impl AlertSettings {
    pub fn new(config: &AlertsConfig, executor_lease_ms: u64) -> Self {
        Self {
            webhook: config.webhook.clone(),
            format: config.format,
            late_after_ms: config.late_after_ms,
            check_every: Duration::from_millis(config.check_ms),
            attempts: config.attempts,
            executor_lease_ms: i64::try_from(executor_lease_ms).unwrap_or(i64::MAX),
        }
    }
}

/// The task that turns alert events into webhook calls, and, on the leader, watches apps.
#[derive(Debug)]
pub struct AlertWorker {
    queue: mpsc::Receiver<AlertEvent>,
    /// The jobs alerts name.
    jobs: Arc<dyn JobStore>,
    /// Runs and executors.
    dispatch: Arc<dyn DispatchStore>,
    /// The jobs' namespaces' own webhooks.
    namespaces: NamespaceWebhooks,
    view: Arc<LocalView>,
    /// Posts to the node's own webhook, the operator's.
    http: reqwest::Client,
    /// Posts to jobs' and namespaces' webhooks, which their users set: through the egress guard.
    guarded: reqwest::Client,
    egress: Arc<Egress>,
    settings: AlertSettings,
    metrics: Arc<NodeMetrics>,
    calls: Arc<Semaphore>,
}

/// A webhook and the body it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    url: String,
    format: AlertFormat,
    /// A user's webhook (a job's or a namespace's), called through the egress guard.
    guarded: bool,
}

/// The queue's two ends: what raises alerts and the worker that sends them.
pub fn alerts(
    jobs: Arc<dyn JobStore>,
    dispatch: Arc<dyn DispatchStore>,
    namespaces: Arc<dyn NamespaceStore>,
    view: Arc<LocalView>,
    settings: AlertSettings,
    egress: Arc<Egress>,
    metrics: Arc<NodeMetrics>,
) -> Result<(Alerter, AlertWorker), reqwest::Error> {
    let (tx, rx) = mpsc::channel(QUEUE);
    // Never follow a redirect elsewhere, and never wait long.
    let http = carillon_tls::http_client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT)
        .build()?;
    let guarded = egress
        .guard(carillon_tls::http_client_builder())
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT)
        .build()?;
    let alerter = Alerter {
        queue: tx,
        metrics: Arc::clone(&metrics),
        dropped: Arc::default(),
    };
    let worker = AlertWorker {
        queue: rx,
        jobs,
        dispatch,
        namespaces: NamespaceWebhooks::new(namespaces),
        view,
        http,
        guarded,
        egress,
        settings,
        metrics,
        calls: Arc::new(Semaphore::new(CONCURRENT_CALLS)),
    };
    Ok((alerter, worker))
}

impl AlertWorker {
    pub async fn run(mut self, stop: CancellationToken) {
        let mut apps = AppWatch::default();
        let mut check = tokio::time::interval(self.settings.check_every);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                event = self.queue.recv() => match event {
                    Some(event) => tokio::select! {
                        _ = stop.cancelled() => return,
                        () = self.handle(event) => {}
                    },
                    None => return,
                },
                _ = check.tick() => {
                    if self.view.leader_term().is_some() {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            () = self.check_apps(&mut apps) => {}
                        }
                    } else {
                        // A node that leads again starts afresh: what it saw is stale.
                        apps = AppWatch::default();
                    }
                }
            }
        }
    }

    /// Finds where `event` goes and sends it there, each call in a task of its own.
    async fn handle(&self, event: AlertEvent) {
        let job = match event_job(&event) {
            Some(job_id) => match self.jobs.job_get(job_id).await {
                Ok(job) => job,
                Err(err) => {
                    warn!(job_id, error = %err, "cannot read the job of an alert; sending it without");
                    None
                }
            },
            None => None,
        };
        let job_alerts = match job.as_ref().map(JobRecord::policy) {
            Some(Ok(policy)) => policy.alerts.clone(),
            Some(Err(err)) => {
                warn!(error = %err, "sending an alert to the node's webhook only");
                None
            }
            None => None,
        };
        let namespace = match &job {
            Some(job) => self.namespaces.of(job.namespace_id).await,
            None => None,
        };
        let namespace_webhook = namespace.as_ref().and_then(|n| n.webhook.as_deref());
        let targets = targets(&event, job_alerts, namespace_webhook, &self.settings);
        if targets.is_empty() {
            return;
        }
        let run = match &event {
            AlertEvent::RunFailed { run_id, .. } => {
                self.dispatch.run_get(*run_id).await.ok().flatten()
            }
            _ => None,
        };
        let mut alert = Alert::describe(&event, job.as_ref(), run.as_ref(), self.view.node_id());
        if let Some(namespace) = &namespace {
            alert = alert.with_namespace(&namespace.name);
        }
        for target in targets {
            // Waiting here for a free call holds up the queue, which then drops (and counts)
            // what it cannot hold: calls in flight, and their retries, stay bounded.
            let Ok(permit) = Arc::clone(&self.calls).acquire_owned().await else {
                return;
            };
            let body = alert.body(target.format);
            if target.guarded
                && let Err(refused) = self.egress.check_literal(&target.url)
            {
                // A webhook written before the policy closed, or set around the check.
                warn!(run_id = alert.run_id, "alert webhook not called: {refused}");
                self.metrics.alerts.add("failed", 1);
                continue;
            }
            let http = if target.guarded {
                self.guarded.clone()
            } else {
                self.http.clone()
            };
            let metrics = Arc::clone(&self.metrics);
            let attempts = self.settings.attempts;
            let run_id = alert.run_id;
            tokio::spawn(async move {
                let _permit = permit;
                let outcome = if post_with_retries(&http, &target.url, &body, attempts).await {
                    "delivered"
                } else {
                    "failed"
                };
                metrics.alerts.add(outcome, 1);
                if outcome == "failed" {
                    warn!(
                        run_id,
                        attempts, "alert webhook never answered 2xx; alert given up"
                    );
                } else {
                    debug!(run_id, "alert delivered");
                }
            });
        }
    }

    /// Looks at every app's executors and raises what [`AppWatch`] finds changed.
    async fn check_apps(&self, apps: &mut AppWatch) {
        let list = match self.dispatch.executors_list(None).await {
            Ok(list) => list,
            Err(err) => {
                debug!(error = %err, "cannot read executors for the app health check");
                return;
            }
        };
        let lease = self.settings.executor_lease_ms;
        // Heard from this recently and unhealthy now: it went down lately (perhaps while
        // another node led), not long ago.
        let recent = lease
            + 3 * i64::try_from(self.settings.check_every.as_millis()).unwrap_or(i64::MAX / 4);
        let mut looks: HashMap<String, AppLook> = HashMap::new();
        for e in &list.executors {
            let look = looks.entry(e.app_name.clone()).or_default();
            if e.state != "left" {
                look.executors += 1;
            }
            if e.is_healthy(list.now_ms, lease) {
                look.healthy += 1;
            }
            if list.now_ms - e.heartbeat_at_ms <= recent {
                look.heard_lately = true;
            }
        }
        for event in apps.look(looks) {
            if let AlertEvent::AppUnhealthy { app, .. } = &event {
                info!(app, "app has no healthy executor");
            }
            self.handle(event).await;
        }
    }
}

/// Where `event` goes: the job's own webhook (for alerts about its runs), else its namespace's
/// (`namespace_webhook`), and the node's. A late fire goes to each only past its threshold: the
/// job's (or else the node's) for the job's or namespace's webhook, the node's for the node's.
fn targets(
    event: &AlertEvent,
    job_alerts: Option<JobAlerts>,
    namespace_webhook: Option<&str>,
    settings: &AlertSettings,
) -> Vec<Target> {
    let lateness = match event {
        AlertEvent::FiredLate { lateness_ms, .. } => Some(u64::try_from(*lateness_ms).unwrap_or(0)),
        _ => None,
    };
    let node_late = settings.late_after_ms;
    let mut targets = Vec::new();
    let (own, format, threshold) = match job_alerts {
        Some(alerts) => (
            alerts.webhook,
            alerts.format,
            alerts.late_after_ms.unwrap_or(node_late),
        ),
        None => (None, settings.format, node_late),
    };
    if let Some(url) = own.or_else(|| namespace_webhook.map(str::to_owned))
        && lateness.is_none_or(|late| threshold > 0 && late > threshold)
    {
        targets.push(Target {
            url,
            format,
            guarded: true,
        });
    }
    if let Some(url) = &settings.webhook
        && !targets.iter().any(|t| t.url == url.expose())
        && lateness.is_none_or(|late| node_late > 0 && late > node_late)
    {
        targets.push(Target {
            url: url.expose().to_owned(),
            format: settings.format,
            guarded: false,
        });
    }
    targets
}

fn event_job(event: &AlertEvent) -> Option<i64> {
    match event {
        AlertEvent::RunFailed { job_id, .. }
        | AlertEvent::FiredLate { job_id, .. }
        | AlertEvent::JobPaused { job_id, .. }
        | AlertEvent::InstantsSkipped { job_id, .. } => Some(*job_id),
        AlertEvent::AppUnhealthy { .. } | AlertEvent::AppRecovered { .. } => None,
    }
}

/// Posts `body` until a `2xx` answer, at most `attempts` times, 1 s, 2 s, 4 s… apart (capped
/// at a minute).
async fn post_with_retries(http: &reqwest::Client, url: &str, body: &Value, attempts: u32) -> bool {
    for attempt in 1..=attempts {
        match http.post(url).json(body).send().await {
            Ok(response) if response.status().is_success() => return true,
            Ok(response) => {
                debug!(attempt, status = %response.status(), "alert webhook refused the alert");
            }
            Err(err) => debug!(attempt, error = %err.without_url(), "alert webhook unreachable"),
        }
        if attempt < attempts {
            let secs = 1u64 << (attempt - 1).min(6);
            tokio::time::sleep(Duration::from_secs(secs)).await;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_fire_goes_to_each_webhook_only_past_its_threshold() {
        let settings = |late_after_ms| AlertSettings {
            webhook: Some(Secret::new("http://node/hook".to_owned())),
            format: AlertFormat::Json,
            late_after_ms,
            check_every: Duration::from_secs(10),
            attempts: 1,
            executor_lease_ms: 5_000,
        };
        let job = |late_after_ms| {
            Some(JobAlerts {
                webhook: Some("http://job/hook".to_owned()),
                format: AlertFormat::Slack,
                late_after_ms,
            })
        };
        let late = |lateness_ms| AlertEvent::FiredLate {
            run_id: 1,
            job_id: 2,
            scheduled_at_ms: 0,
            lateness_ms,
        };
        let urls = |targets: Vec<Target>| targets.into_iter().map(|t| t.url).collect::<Vec<_>>();
        // The job's threshold for its webhook, the node's for the node's.
        assert_eq!(
            urls(targets(
                &late(2_000),
                job(Some(1_000)),
                None,
                &settings(5_000)
            )),
            ["http://job/hook"]
        );
        assert_eq!(
            urls(targets(
                &late(6_000),
                job(Some(1_000)),
                None,
                &settings(5_000)
            )),
            ["http://job/hook", "http://node/hook"]
        );
        // No threshold of its own: the node's, for both.
        assert!(targets(&late(2_000), job(None), None, &settings(5_000)).is_empty());
        // The node's late alerts off: the job's own still go to its own webhook only.
        assert_eq!(
            urls(targets(&late(2_000), job(Some(1_000)), None, &settings(0))),
            ["http://job/hook"]
        );
        assert!(targets(&late(2_000), job(None), None, &settings(0)).is_empty());
        // Other alerts go to both, whatever the thresholds.
        let failed = AlertEvent::RunFailed {
            run_id: 1,
            job_id: 2,
            state: "failed".to_owned(),
            error: None,
        };
        assert_eq!(
            urls(targets(&failed, job(None), None, &settings(0))),
            ["http://job/hook", "http://node/hook"]
        );
        // A job without a webhook of its own: its namespace's, under the job's threshold.
        let team = Some("http://team/hook");
        assert_eq!(
            urls(targets(&failed, None, team, &settings(0))),
            ["http://team/hook", "http://node/hook"]
        );
        assert_eq!(
            urls(targets(&failed, job(None), team, &settings(0))),
            ["http://job/hook", "http://node/hook"],
            "the job's own wins"
        );
        let no_hook = Some(JobAlerts {
            webhook: None,
            format: AlertFormat::Slack,
            late_after_ms: Some(1_000),
        });
        let sent = targets(&late(2_000), no_hook, team, &settings(5_000));
        assert_eq!(urls(sent.clone()), ["http://team/hook"]);
        assert_eq!(sent[0].format, AlertFormat::Slack);
    }
}
