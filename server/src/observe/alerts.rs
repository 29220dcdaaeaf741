//! Alerts: webhooks told when a run fails for good, when a run is first dispatched later than
//! its job's threshold, and when an app is left without a healthy executor.
//!
//! Whoever notices (the dispatcher, the results endpoint) only puts an [`AlertEvent`] on a
//! bounded queue and goes on: an alert never holds up a dispatch. A full queue drops the
//! alert and counts it. The [`AlertWorker`] reads the job to find its own webhook, then posts
//! to each webhook in a task of its own, retrying with backoff. Alerts live in memory: one
//! queued on a node that dies is lost (the run log in the database keeps the facts).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::metrics::NodeMetrics;
use crate::api::rfc3339;
use crate::cluster::LocalView;
use crate::config::{AlertsConfig, Secret};
use crate::jobs::{AlertFormat, JobPolicy};
use crate::store::{JobRecord, Store};

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
}

impl Alerter {
    /// Queues `event` for the worker without waiting.
    pub fn raise(&self, event: AlertEvent) {
        if let Err(err) = self.queue.try_send(event) {
            self.metrics.alerts.add("dropped", 1);
            warn!(event = ?err.into_inner(), "alert queue full or closed; alert dropped");
        }
    }
}

/// The settings the worker needs.
#[derive(Debug, Clone)]
pub struct AlertSettings {
    pub webhook: Option<Secret>,
    pub format: AlertFormat,
    pub check_every: Duration,
    pub attempts: u32,
    pub executor_lease_ms: i64,
}

impl AlertSettings {
    pub fn new(config: &AlertsConfig, executor_lease_ms: u64) -> Self {
        Self {
            webhook: config.webhook.clone(),
            format: config.format,
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
    store: Arc<dyn Store>,
    view: Arc<LocalView>,
    http: reqwest::Client,
    settings: AlertSettings,
    metrics: Arc<NodeMetrics>,
    calls: Arc<Semaphore>,
}

/// A webhook and the body it takes.
#[derive(Debug, Clone)]
struct Target {
    url: String,
    format: AlertFormat,
}

/// The queue's two ends: what raises alerts and the worker that sends them.
pub fn alerts(
    store: Arc<dyn Store>,
    view: Arc<LocalView>,
    settings: AlertSettings,
    metrics: Arc<NodeMetrics>,
) -> Result<(Alerter, AlertWorker), reqwest::Error> {
    let (tx, rx) = mpsc::channel(QUEUE);
    // Webhooks are the operator's and jobs' authors' own URLs; never follow a redirect
    // elsewhere, and never wait long.
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(CALL_TIMEOUT)
        .connect_timeout(CALL_TIMEOUT)
        .build()?;
    let alerter = Alerter {
        queue: tx,
        metrics: Arc::clone(&metrics),
    };
    let worker = AlertWorker {
        queue: rx,
        store,
        view,
        http,
        settings,
        metrics,
        calls: Arc::new(Semaphore::new(CONCURRENT_CALLS)),
    };
    Ok((alerter, worker))
}

impl AlertWorker {
    pub async fn run(mut self, stop: CancellationToken) {
        let mut healthy_by_app: Option<HashMap<String, usize>> = None;
        let mut check = tokio::time::interval(self.settings.check_every);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                event = self.queue.recv() => match event {
                    Some(event) => self.handle(event).await,
                    None => return,
                },
                _ = check.tick() => {
                    if self.view.leader_term().is_some() {
                        self.check_apps(&mut healthy_by_app).await;
                    } else {
                        // A node that leads again starts afresh: its last reading is stale.
                        healthy_by_app = None;
                    }
                }
            }
        }
    }

    /// Finds where `event` goes and sends it there, each call in a task of its own.
    async fn handle(&self, event: AlertEvent) {
        let job = match event_job(&event) {
            Some(job_id) => match self.store.job_get(job_id).await {
                Ok(job) => job,
                Err(err) => {
                    warn!(job_id, error = %err, "cannot read the job of an alert; sending it without");
                    None
                }
            },
            None => None,
        };
        let targets = self.targets(job.as_ref());
        if targets.is_empty() {
            return;
        }
        let scheduled_at_ms = match &event {
            AlertEvent::RunFailed { run_id, .. } => self
                .store
                .run_get(*run_id)
                .await
                .ok()
                .flatten()
                .map(|r| r.scheduled_at_ms),
            AlertEvent::FiredLate {
                scheduled_at_ms, ..
            } => Some(*scheduled_at_ms),
            _ => None,
        };
        let alert = Alert::describe(&event, job.as_ref(), scheduled_at_ms, self.view.node_id());
        for target in targets {
            let body = alert.body(target.format);
            let http = self.http.clone();
            let metrics = Arc::clone(&self.metrics);
            let calls = Arc::clone(&self.calls);
            let attempts = self.settings.attempts;
            let run_id = alert.run_id;
            tokio::spawn(async move {
                let Ok(_permit) = calls.acquire_owned().await else {
                    return;
                };
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

    /// The job's own webhook (for alerts about its runs) and the node's.
    fn targets(&self, job: Option<&JobRecord>) -> Vec<Target> {
        let mut targets = Vec::new();
        if let Some(alerts) = job
            .and_then(|j| serde_json::from_str::<JobPolicy>(&j.policy_json).ok())
            .and_then(|p| p.alerts)
            && let Some(url) = alerts.webhook
        {
            targets.push(Target {
                url,
                format: alerts.format,
            });
        }
        if let Some(url) = &self.settings.webhook
            && !targets.iter().any(|t| t.url == url.expose())
        {
            targets.push(Target {
                url: url.expose().to_owned(),
                format: self.settings.format,
            });
        }
        targets
    }

    /// Raises an alert for each app whose healthy executors went from some to none, or back,
    /// since the leader's last look.
    async fn check_apps(&self, last: &mut Option<HashMap<String, usize>>) {
        let list = match self.store.executors_list(None).await {
            Ok(list) => list,
            Err(err) => {
                debug!(error = %err, "cannot read executors for the app health check");
                return;
            }
        };
        let mut now: HashMap<String, (usize, usize)> = HashMap::new();
        for e in &list.executors {
            let entry = now.entry(e.app_name.clone()).or_default();
            if e.state != "left" {
                entry.0 += 1;
            }
            if e.is_healthy(list.now_ms, self.settings.executor_lease_ms) {
                entry.1 += 1;
            }
        }
        if let Some(before) = last.as_ref() {
            for (app, (executors, healthy)) in &now {
                let had = before.get(app).copied().unwrap_or(0);
                if had > 0 && *healthy == 0 {
                    info!(app, "app has no healthy executor");
                    self.handle(AlertEvent::AppUnhealthy {
                        app: app.clone(),
                        executors: *executors,
                    })
                    .await;
                } else if had == 0 && *healthy > 0 && before.contains_key(app) {
                    self.handle(AlertEvent::AppRecovered {
                        app: app.clone(),
                        healthy: *healthy,
                    })
                    .await;
                }
            }
        }
        *last = Some(now.into_iter().map(|(app, (_, h))| (app, h)).collect());
    }
}

fn event_job(event: &AlertEvent) -> Option<i64> {
    match event {
        AlertEvent::RunFailed { job_id, .. } | AlertEvent::FiredLate { job_id, .. } => {
            Some(*job_id)
        }
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

/// An alert, described once and rendered per webhook format.
#[derive(Debug, Clone)]
pub struct Alert {
    run_id: Option<i64>,
    summary: String,
    document: Value,
}

impl Alert {
    pub fn describe(
        event: &AlertEvent,
        job: Option<&JobRecord>,
        scheduled_at_ms: Option<i64>,
        node_id: &str,
    ) -> Self {
        let job_doc = |job_id: i64| match job {
            Some(j) => {
                json!({"id": j.job_id, "name": j.name, "app": j.app_name, "handler": j.handler_name})
            }
            None => json!({"id": job_id}),
        };
        let job_label = |job_id: i64| match job {
            Some(j) => format!("job {} ({}/{})", j.name, j.app_name, j.handler_name),
            None => format!("job {job_id}"),
        };
        let scheduled = scheduled_at_ms.and_then(rfc3339);
        let (kind, run_id, summary, extra) = match event {
            AlertEvent::RunFailed {
                run_id,
                job_id,
                state,
                error,
            } => {
                let why = error.as_deref().unwrap_or("no error given");
                (
                    "run_failed",
                    Some(*run_id),
                    format!(
                        "{} failed for good: run {run_id} ({state}), scheduled at {}: {why}",
                        job_label(*job_id),
                        scheduled.as_deref().unwrap_or("?"),
                    ),
                    json!({
                        "job": job_doc(*job_id),
                        "run": {"id": run_id, "state": state, "scheduled_at": scheduled, "error": error},
                    }),
                )
            }
            AlertEvent::FiredLate {
                run_id,
                job_id,
                lateness_ms,
                ..
            } => (
                "run_late",
                Some(*run_id),
                format!(
                    "{} fired {:.1} s late: run {run_id}, scheduled at {}",
                    job_label(*job_id),
                    *lateness_ms as f64 / 1_000.0,
                    scheduled.as_deref().unwrap_or("?"),
                ),
                json!({
                    "job": job_doc(*job_id),
                    "run": {"id": run_id, "scheduled_at": scheduled},
                    "lateness_ms": lateness_ms,
                }),
            ),
            AlertEvent::AppUnhealthy { app, executors } => (
                "app_unhealthy",
                None,
                format!(
                    "app {app} has no healthy executor ({executors} registered); its runs wait, then fail"
                ),
                json!({"app": app, "executors": executors, "healthy_executors": 0}),
            ),
            AlertEvent::AppRecovered { app, healthy } => (
                "app_recovered",
                None,
                format!("app {app} has a healthy executor again ({healthy} healthy)"),
                json!({"app": app, "healthy_executors": healthy}),
            ),
        };
        let mut document = json!({
            "event": kind,
            "summary": summary,
            "node_id": node_id,
        });
        if let (Some(doc), Some(extra)) = (document.as_object_mut(), extra.as_object()) {
            doc.extend(extra.clone());
        }
        Self {
            run_id,
            summary,
            document,
        }
    }

    /// The webhook body in `format`.
    pub fn body(&self, format: AlertFormat) -> Value {
        match format {
            AlertFormat::Json => self.document.clone(),
            AlertFormat::Slack => json!({"text": format!("[carillon] {}", self.summary)}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_is_described_with_its_job_and_error_in_both_formats() {
        let event = AlertEvent::RunFailed {
            run_id: 7,
            job_id: 3,
            state: "failed".to_owned(),
            error: Some("disk full".to_owned()),
        };
        let alert = Alert::describe(&event, None, Some(0), "n1");
        let doc = alert.body(AlertFormat::Json);
        assert_eq!(doc["event"], "run_failed");
        assert_eq!(doc["run"]["id"], 7);
        assert_eq!(doc["run"]["error"], "disk full");
        assert_eq!(doc["run"]["scheduled_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(doc["job"]["id"], 3);
        assert_eq!(doc["node_id"], "n1");
        let chat = alert.body(AlertFormat::Slack);
        let text = chat["text"].as_str().unwrap_or_default();
        assert!(
            text.starts_with("[carillon] job 3 failed for good: run 7"),
            "{text}"
        );
        assert!(text.ends_with("disk full"), "{text}");
        assert_eq!(chat.as_object().map(|o| o.len()), Some(1), "{chat}");
    }
}
