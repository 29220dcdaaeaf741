//! A client for enqueueing tasks, usable from any Rust service (it needs no executor).
//!
//! ```no_run
//! use carillon_executor::{Task, Tasks};
//!
//! # async fn enqueue() -> Result<(), Box<dyn std::error::Error>> {
//! let tasks = Tasks::builder()
//!     .admin_urls(["http://127.0.0.1:9001"])
//!     .token(std::env::var("CARILLON_ADMIN_TOKEN")?)
//!     .build()?;
//! let cancel = Task::new("orders", "cancel_unpaid")
//!     .args(serde_json::json!({"order": 1234}))
//!     .delay(std::time::Duration::from_secs(30 * 60))
//!     .key("cancel-order-1234");
//! let enqueued = tasks.enqueue([cancel]).await?;
//! # Ok(())
//! # }
//! ```
//!
//! `enqueue` sends any number of tasks in requests of up to 10,000 (the API's batch), each
//! stored whole or refused whole. A node that cannot be reached is skipped for the next admin
//! URL. A request whose answer was lost may have been stored: it is sent again only when every
//! task in it has a key, since a key makes the second enqueue return the first's tasks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Most tasks the API takes in one request.
pub const MAX_BATCH: usize = 10_000;

/// One task to enqueue.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    app: String,
    handler: String,
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    args: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delay: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    balance: Option<Balance>,
    #[serde(skip_serializing_if = "Option::is_none")]
    delivery: Option<Delivery>,
}

/// What a task's delivery promises and how its executor is picked: the wire's values.
pub use carillon_protocol::{Balance, Delivery};

impl Task {
    /// A task for `handler` of `app`, due now.
    pub fn new(app: impl Into<String>, handler: impl Into<String>) -> Self {
        Self {
            app: app.into(),
            handler: handler.into(),
            args: serde_json::Value::Null,
            at: None,
            delay: None,
            key: None,
            priority: None,
            retry: None,
            timeout_ms: None,
            balance: None,
            delivery: None,
        }
    }

    pub fn delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = Some(delivery);
        self
    }

    pub fn balance(mut self, balance: Balance) -> Self {
        self.balance = Some(balance);
        self
    }

    pub fn args(mut self, args: serde_json::Value) -> Self {
        self.args = args;
        self
    }

    /// Due this long after the node stores it.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        self.at = None;
        self
    }

    /// Due at this instant, RFC 3339 (`2026-11-26T02:00:00Z`).
    pub fn at(mut self, instant: impl Into<String>) -> Self {
        self.at = Some(instant.into());
        self.delay = None;
        self
    }

    /// Due at this instant, in milliseconds since the Unix epoch.
    pub fn at_epoch_ms(self, ms: i64) -> Self {
        self.at(epoch_ms_rfc3339(ms))
    }

    /// The idempotency key: while a task with this key is unfinished, enqueueing it again
    /// returns that task.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// 0 (lowest) to 10.
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Up to `max_attempts` attempts, `delay_ms` apart.
    pub fn retry(mut self, max_attempts: u32, delay_ms: u64) -> Self {
        self.retry = Some(serde_json::json!({
            "max_attempts": max_attempts,
            "initial_delay_ms": delay_ms,
            "max_delay_ms": delay_ms.max(60_000),
        }));
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout_ms = Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        self
    }
}

/// What an enqueue did with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The task's id.
    pub id: i64,
    /// `false`: an unfinished task held the key, and `id` is that task's.
    pub created: bool,
}

/// Why an enqueue failed.
#[derive(Debug, thiserror::Error)]
pub enum TasksError {
    #[error("the client is misconfigured: {0}")]
    Config(String),
    /// The node refused a batch (nothing of it was stored): its problem document. Earlier
    /// batches of the same call were stored: `stored` lists them.
    #[error("the node refused the batch: {detail}")]
    Refused {
        status: u16,
        detail: String,
        /// Each bad task: `(index in the whole call, field, message)`.
        errors: Vec<(usize, String, String)>,
        stored: Vec<Enqueued>,
    },
    /// No node took the batch. Tasks of earlier batches of the same call were stored:
    /// `stored` lists them.
    #[error("no admin node took the batch: {reason}")]
    Unavailable {
        reason: String,
        stored: Vec<Enqueued>,
    },
}

/// Builds a [`Tasks`] client.
#[derive(Debug, Default)]
pub struct TasksBuilder {
    admin_urls: Vec<String>,
    token: Option<String>,
    tls: carillon_tls::ClientTls,
    batch: Option<usize>,
    timeout: Option<Duration>,
}

impl TasksBuilder {
    /// The nodes to call, tried in turn.
    pub fn admin_urls<I: IntoIterator<Item = S>, S: Into<String>>(mut self, urls: I) -> Self {
        self.admin_urls = urls
            .into_iter()
            .map(|u| u.into().trim_end_matches('/').to_owned())
            .collect();
        self
    }

    /// The admin token (`Authorization: Bearer`).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Certificates for HTTPS nodes: CA files beside the system roots, a client identity.
    pub fn tls(mut self, tls: carillon_tls::ClientTls) -> Self {
        self.tls = tls;
        self
    }

    /// Tasks per request (default and most: 10,000).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = Some(batch);
        self
    }

    /// How long one request may take (default 60 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub fn build(self) -> Result<Tasks, TasksError> {
        if self.admin_urls.is_empty() {
            return Err(TasksError::Config("admin_urls: give at least one".into()));
        }
        let token = self
            .token
            .filter(|t| !t.is_empty())
            .ok_or_else(|| TasksError::Config("token: the admin token is needed".into()))?;
        let batch = self.batch.unwrap_or(MAX_BATCH);
        if !(1..=MAX_BATCH).contains(&batch) {
            return Err(TasksError::Config(format!(
                "batch: {batch} is outside 1..={MAX_BATCH}"
            )));
        }
        let http = self
            .tls
            .apply(
                carillon_tls::http_client_builder()
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(self.timeout.unwrap_or(Duration::from_secs(60)))
                    .redirect(reqwest::redirect::Policy::none()),
            )
            .map_err(|e| TasksError::Config(format!("tls: {e}")))?
            .build()
            .map_err(|e| TasksError::Config(format!("http client: {e}")))?;
        Ok(Tasks {
            http,
            admin_urls: self.admin_urls,
            token,
            batch,
        })
    }
}

/// The client.
#[derive(Debug, Clone)]
pub struct Tasks {
    http: reqwest::Client,
    admin_urls: Vec<String>,
    token: String,
    batch: usize,
}

#[derive(Deserialize)]
struct EnqueueReply {
    tasks: Vec<EnqueuedReply>,
}

#[derive(Deserialize)]
struct EnqueuedReply {
    id: i64,
    status: String,
}

#[derive(Deserialize, Default)]
struct Problem {
    #[serde(default)]
    detail: String,
    #[serde(default)]
    errors: Vec<ProblemEntry>,
}

#[derive(Deserialize)]
struct ProblemEntry {
    index: usize,
    field: String,
    message: String,
}

impl Tasks {
    pub fn builder() -> TasksBuilder {
        TasksBuilder::default()
    }

    /// Enqueues `tasks`, in requests of the client's batch; per task, in order, its id and
    /// whether it was created.
    pub async fn enqueue(
        &self,
        tasks: impl IntoIterator<Item = Task>,
    ) -> Result<Vec<Enqueued>, TasksError> {
        let tasks: Vec<Task> = tasks.into_iter().collect();
        let mut stored = Vec::with_capacity(tasks.len());
        for (n, chunk) in tasks.chunks(self.batch).enumerate() {
            match self.enqueue_batch(chunk).await {
                Ok(done) => stored.extend(done),
                Err(TasksError::Refused {
                    status,
                    detail,
                    errors,
                    ..
                }) => {
                    let offset = n * self.batch;
                    return Err(TasksError::Refused {
                        status,
                        detail,
                        errors: errors
                            .into_iter()
                            .map(|(i, f, m)| (i + offset, f, m))
                            .collect(),
                        stored,
                    });
                }
                Err(TasksError::Unavailable { reason, .. }) => {
                    return Err(TasksError::Unavailable { reason, stored });
                }
                Err(other) => return Err(other),
            }
        }
        Ok(stored)
    }

    async fn enqueue_batch(&self, tasks: &[Task]) -> Result<Vec<Enqueued>, TasksError> {
        let body = serde_json::json!({ "tasks": tasks });
        let all_keyed = tasks.iter().all(|t| t.key.is_some());
        let mut last = String::from("no admin node configured");
        for url in &self.admin_urls {
            let sent = self
                .http
                .post(format!("{url}/api/v1/tasks"))
                .bearer_auth(&self.token)
                .json(&body)
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                // Not connected: nothing reached the node.
                Err(e) if e.is_connect() => {
                    last = format!("{url}: {e}");
                    continue;
                }
                Err(e) if all_keyed => {
                    last = format!("{url}: {e}");
                    continue;
                }
                Err(e) => {
                    return Err(TasksError::Unavailable {
                        reason: format!(
                            "{url}: {e}; the batch may have been stored, and without keys \
                             on all its tasks it is not sent again"
                        ),
                        stored: Vec::new(),
                    });
                }
            };
            let status = response.status();
            if status.is_success() {
                let reply: EnqueueReply =
                    response.json().await.map_err(|e| TasksError::Unavailable {
                        reason: format!("{url}: unreadable answer: {e}"),
                        stored: Vec::new(),
                    })?;
                return Ok(reply
                    .tasks
                    .into_iter()
                    .map(|t| Enqueued {
                        id: t.id,
                        created: t.status == "created",
                    })
                    .collect());
            }
            if status.is_client_error() && !matches!(status.as_u16(), 408 | 429) {
                let problem: Problem = response.json().await.unwrap_or_default();
                return Err(TasksError::Refused {
                    status: status.as_u16(),
                    detail: problem.detail,
                    errors: problem
                        .errors
                        .into_iter()
                        .map(|e| (e.index, e.field, e.message))
                        .collect(),
                    stored: Vec::new(),
                });
            }
            // Busy (429) or timed out before reading (408): nothing stored. A server error
            // may have come after the commit: sent again only when keys make that safe.
            if status.is_server_error() && !all_keyed {
                return Err(TasksError::Unavailable {
                    reason: format!(
                        "{url} answered {status}; the batch may have been stored, and without \
                         keys on all its tasks it is not sent again"
                    ),
                    stored: Vec::new(),
                });
            }
            last = format!("{url} answered {status}");
        }
        Err(TasksError::Unavailable {
            reason: last,
            stored: Vec::new(),
        })
    }
}

/// An epoch instant as RFC 3339 in UTC, with milliseconds (no date library needed).
fn epoch_ms_rfc3339(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1_000), ms.rem_euclid(1_000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_instants_are_written_in_rfc3339() {
        assert_eq!(epoch_ms_rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            epoch_ms_rfc3339(1_800_000_000_123),
            "2027-01-15T08:00:00.123Z"
        );
        assert_eq!(
            epoch_ms_rfc3339(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(epoch_ms_rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_task_is_written_as_the_api_reads_it() {
        let task = Task::new("orders", "cancel")
            .args(serde_json::json!({"order": 7}))
            .delay(Duration::from_secs(90))
            .key("o-7")
            .retry(3, 500)
            .delivery(Delivery::ExactlyOnceEffect);
        let doc = serde_json::to_value(&task).unwrap_or_default();
        assert_eq!(
            doc,
            serde_json::json!({"app": "orders", "handler": "cancel", "args": {"order": 7},
                "delay": 90_000, "key": "o-7",
                "retry": {"max_attempts": 3, "initial_delay_ms": 500, "max_delay_ms": 60_000},
                "delivery": "exactly_once_effect"})
        );
    }
}
