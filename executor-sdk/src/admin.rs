//! The executor's side of its admin nodes: the state the endpoint, the heartbeat and the
//! reports share; calls that fail over between admin nodes; registration, heartbeats and
//! result reports.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use carillon_protocol::{
    AttemptLines, AttemptReport, DefaultSchedule, HandlerSpec, Heartbeat, HeartbeatReply, LogBatch,
    Outcome, PROTOCOL_VERSION, Registration, RegistrationAccepted, admin_paths,
};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::attempt::AttemptRef;
use crate::registry::Handler;

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Who an executor is and where its admin nodes are, as its builder checked them.
#[derive(Debug)]
pub(crate) struct Identity {
    pub(crate) executor_id: String,
    pub(crate) app: String,
    pub(crate) admin_urls: Vec<String>,
    pub(crate) weight: u32,
    pub(crate) capacity: u32,
    pub(crate) token: String,
    pub(crate) secret: String,
    /// Handlers' log lines are captured and shipped to the nodes (`logs.rs`).
    pub(crate) capture_logs: bool,
}

/// A failed call to the admin nodes; `permanent` when retrying cannot help.
#[derive(Debug)]
pub(crate) struct CallError {
    pub(crate) message: String,
    pub(crate) permanent: bool,
}

/// State shared by the endpoint, the heartbeat and the reports.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) id: Identity,
    http: reqwest::Client,
    pub(crate) jobs: HashMap<String, Handler>,
    pub(crate) slots: Arc<Semaphore>,
    running: Mutex<HashMap<i64, CancellationToken>>,
    seen: Mutex<crate::replay::Seen>,
    effects: Mutex<crate::effects::Effects>,
    pub(crate) draining: AtomicBool,
    pub(crate) tasks: TaskTracker,
    preferred_admin: AtomicUsize,
    /// Handler logs being captured and shipped.
    pub(crate) logs: crate::logs::LogShipper,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps: a panic elsewhere cannot leave them inconsistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    pub(crate) fn new(
        identity: Identity,
        http: reqwest::Client,
        jobs: HashMap<String, Handler>,
    ) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(identity.capacity as usize)),
            id: identity,
            http,
            jobs,
            running: Mutex::new(HashMap::new()),
            seen: Mutex::new(crate::replay::Seen::default()),
            effects: Mutex::default(),
            draining: AtomicBool::new(false),
            tasks: TaskTracker::new(),
            preferred_admin: AtomicUsize::new(0),
            logs: crate::logs::LogShipper::default(),
        }
    }

    pub(crate) fn lock_running(&self) -> MutexGuard<'_, HashMap<i64, CancellationToken>> {
        lock(&self.running)
    }

    pub(crate) fn lock_effects(&self) -> MutexGuard<'_, crate::effects::Effects> {
        lock(&self.effects)
    }

    pub(crate) fn lock_seen(&self) -> MutexGuard<'_, crate::replay::Seen> {
        lock(&self.seen)
    }

    /// POSTs to the admin nodes, starting with the last one that answered, until one takes it.
    pub(crate) async fn call<B: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        extra: &[String],
    ) -> Result<R, String> {
        self.call_once(path, body, extra)
            .await
            .map_err(|e| e.message)
    }

    pub(crate) async fn call_once<B: serde::Serialize, R: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        extra: &[String],
    ) -> Result<R, CallError> {
        let start = self.preferred_admin.load(Ordering::Relaxed);
        let n = self.id.admin_urls.len();
        let mut urls: Vec<&str> = extra.iter().map(String::as_str).collect();
        urls.extend((0..n).map(|i| self.id.admin_urls[(start + i) % n].as_str()));
        let mut last = String::from("no admin node configured");
        for url in urls {
            let sent = self
                .http
                .post(format!("{url}{path}"))
                .bearer_auth(&self.id.token)
                .json(body)
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    if let Some(i) = self.id.admin_urls.iter().position(|u| u == url) {
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

    pub(crate) fn registration(&self, address: &str) -> Registration {
        let mut handlers: Vec<HandlerSpec> = self
            .jobs
            .values()
            .map(|job| HandlerSpec {
                name: job.name.clone(),
                description: job.description.clone(),
                schedule: (job.cron.is_some() || job.rrule.is_some()).then(|| DefaultSchedule {
                    cron: job.cron.clone(),
                    rrule: job.rrule.clone(),
                    timezone: job.timezone.clone(),
                }),
            })
            .collect();
        handlers.sort_by(|a, b| a.name.cmp(&b.name));
        Registration {
            protocol: PROTOCOL_VERSION,
            executor_id: self.id.executor_id.clone(),
            app: self.id.app.clone(),
            address: address.to_owned(),
            weight: self.id.weight,
            capacity: self.id.capacity,
            handlers,
            batch: true,
        }
    }

    /// Reports an attempt's result, retrying until an admin node takes it.
    pub(crate) async fn report(
        &self,
        attempt: &AttemptRef,
        result: Option<Result<Value, String>>,
        report_to: &[String],
    ) {
        let attempt_id = attempt.id;
        let (outcome, output, error) = match result {
            Some(Ok(output)) => (Outcome::Succeeded, Some(output), None),
            Some(Err(error)) => (Outcome::Failed, None, Some(error)),
            None => (Outcome::Cancelled, None, Some("cancelled".to_owned())),
        };
        let report = AttemptReport {
            executor_id: self.id.executor_id.clone(),
            attempt_id,
            handle: attempt.handle.clone(),
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

impl Shared {
    /// Ships the waiting lines of every attempt being captured, every
    /// [`SHIP_EVERY`](crate::logs::SHIP_EVERY), until the task is aborted.
    pub(crate) async fn ship_logs(self: Arc<Self>) {
        let mut tick = tokio::time::interval(crate::logs::SHIP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for log in self.logs.open_logs() {
                self.ship_log(&log).await;
            }
        }
    }

    /// Ships what an ended attempt's log still holds (a few tries) and stops capturing it.
    pub(crate) async fn close_log(&self, attempt_id: i64) {
        let Some(log) = self.logs.close(attempt_id) else {
            return;
        };
        for _ in 0..3 {
            match self.ship_log(&log).await {
                Shipped::Nothing => return,
                Shipped::Taken => {}
                Shipped::NotTaken => tokio::time::sleep(crate::logs::SHIP_EVERY).await,
            }
        }
    }

    /// Sends one batch of an attempt's waiting lines, after any batch of it already on its
    /// way; puts them back when no node took them (not when one refused them for good).
    async fn ship_log(&self, log: &crate::logs::AttemptLog) -> Shipped {
        let _sending = log.sending().await;
        let lines = log.take();
        if lines.is_empty() {
            return Shipped::Nothing;
        }
        let mut batch = LogBatch {
            executor_id: self.id.executor_id.clone(),
            attempts: vec![AttemptLines {
                attempt_id: log.attempt().id,
                handle: log.attempt().handle.clone(),
                lines,
            }],
        };
        match self
            .call_once::<_, Value>(admin_paths::LOGS, &batch, log.report_to())
            .await
        {
            Ok(_) => Shipped::Taken,
            Err(e) if e.permanent => {
                debug!(attempt_id = log.attempt().id, error = %e.message, "log lines refused");
                Shipped::Taken
            }
            Err(_) => {
                if let Some(back) = batch.attempts.pop() {
                    log.put_back(back.lines);
                }
                Shipped::NotTaken
            }
        }
    }
}

/// What sending an attempt's waiting lines came to.
enum Shipped {
    /// None were waiting.
    Nothing,
    /// A node took them, or refused them for good.
    Taken,
    /// No node took them; they wait again.
    NotTaken,
}

/// Heartbeats until the task is aborted: in-flight attempts and draining go up, attempts to
/// cancel come back; an admin node that forgot the executor gets its registration again.
pub(crate) async fn heartbeat(
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
            executor_id: shared.id.executor_id.clone(),
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
