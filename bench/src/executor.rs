//! The fast executor: answers every dispatch at once with a direct result (`200`), so the
//! figures measure Carillon, not a handler. It verifies each dispatch's signature as a real
//! executor must, and records when each scheduled instant arrived. With `--log-lines N`, each
//! attempt's handler "logs" N lines, shipped to the nodes as the SDK ships them: every 300 ms,
//! every waiting line in one request.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use carillon_protocol::{
    AttemptLines, BatchItemReply, DirectResult, Dispatch, DispatchBatch, DispatchBatchReply,
    Heartbeat, LogBatch, LogBatchAccepted, Outcome, PROTOCOL_VERSION, SIGNATURE_HEADER,
    ShippedLine, TIMESTAMP_HEADER, admin_paths, executor_paths, verify,
};
use serde_json::json;

use crate::cluster::{Cluster, now_ms};

/// One dispatch received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Receipt {
    pub(crate) job_id: i64,
    pub(crate) run_id: i64,
    pub(crate) scheduled_ms: i64,
    pub(crate) received_ms: i64,
}

/// A workflow step's dispatch: its run and the runs of the steps it needed (from its input).
#[derive(Debug, Clone)]
pub(crate) struct StepReceipt {
    pub(crate) run_id: i64,
    pub(crate) workflow_run_id: i64,
    pub(crate) upstream_runs: Vec<i64>,
}

#[derive(Debug)]
struct Shared {
    secret: String,
    receipts: Mutex<Vec<Receipt>>,
    steps: Mutex<Vec<StepReceipt>>,
    log_lines: usize,
    /// Lines waiting to be shipped.
    logs: Mutex<Vec<AttemptLines>>,
    shipped: Mutex<LogFigures>,
}

/// What the log shipping did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogFigures {
    pub(crate) lines: u64,
    pub(crate) stored: u64,
    pub(crate) dropped: u64,
    pub(crate) failed_requests: u64,
}

/// A running fast executor.
#[derive(Debug)]
pub(crate) struct FastExecutor {
    shared: Arc<Shared>,
    pub(crate) address: String,
    id: String,
    /// Its server and heartbeat, ended by [`FastExecutor::stop`].
    tasks: Vec<tokio::task::JoinHandle<()>>,
    draining: Arc<std::sync::atomic::AtomicBool>,
}

impl FastExecutor {
    /// Serves on a loopback port, registers with the cluster and heartbeats until the process
    /// ends.
    pub(crate) async fn start(
        cluster: &Cluster,
        batch: bool,
        log_lines: usize,
    ) -> anyhow::Result<FastExecutor> {
        Self::start_as(cluster, "bench-executor", batch, log_lines).await
    }

    /// The same, registered as `id`.
    pub(crate) async fn start_as(
        cluster: &Cluster,
        id: &str,
        batch: bool,
        log_lines: usize,
    ) -> anyhow::Result<FastExecutor> {
        let shared = Arc::new(Shared {
            secret: cluster.dispatch_secret.clone(),
            receipts: Mutex::new(Vec::with_capacity(1 << 20)),
            steps: Mutex::new(Vec::new()),
            log_lines,
            logs: Mutex::new(Vec::new()),
            shipped: Mutex::new(LogFigures::default()),
        });
        if log_lines > 0 {
            tokio::spawn(ship_logs(
                Arc::clone(&shared),
                carillon_tls::http_client()?,
                cluster.urls(),
                cluster.executor_token.clone(),
            ));
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new()
            .route(executor_paths::DISPATCH, post(dispatch))
            .route(executor_paths::DISPATCH_BATCH, post(dispatch_batch))
            .route(executor_paths::CANCEL, post(|| async { StatusCode::OK }))
            .route(HTTP_JOB_PATH, post(http_job))
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let mut executor = FastExecutor {
            shared,
            address,
            id: id.to_owned(),
            tasks: vec![server],
            draining: Arc::default(),
        };
        let heartbeat_ms = executor.register(cluster, batch).await?;
        let urls = cluster.urls();
        let token = cluster.executor_token.clone();
        let client = carillon_tls::http_client()?;
        let executor_id = executor.id.clone();
        let draining = Arc::clone(&executor.draining);
        let heartbeat = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(heartbeat_ms)).await;
                let beat = Heartbeat {
                    executor_id: executor_id.clone(),
                    in_flight: Vec::new(),
                    draining: draining.load(std::sync::atomic::Ordering::Relaxed),
                };
                // Any live node will do: they share the database.
                for url in &urls {
                    let sent = client
                        .post(format!("{url}{}", admin_paths::HEARTBEAT))
                        .bearer_auth(&token)
                        .timeout(Duration::from_secs(2))
                        .json(&beat)
                        .send()
                        .await;
                    if sent.is_ok_and(|r| r.status().is_success()) {
                        break;
                    }
                }
            }
        });
        executor.tasks.push(heartbeat);
        Ok(executor)
    }

    /// Stops as an executor leaving for a restart does: says it is draining (the nodes send
    /// it nothing new), waits `drain` for what was sent, then stops serving.
    /// Its receipts are returned.
    pub(crate) async fn stop(self, drain: Duration) -> Vec<Receipt> {
        self.draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(drain).await;
        for task in &self.tasks {
            task.abort();
        }
        self.receipts()
    }

    async fn register(&self, cluster: &Cluster, batch: bool) -> anyhow::Result<u64> {
        let body = json!({"protocol": PROTOCOL_VERSION, "executor_id": self.id,
            "app": "bench", "address": self.address, "weight": 1, "capacity": 100_000,
            "handlers": [{"name": "noop"}], "batch": batch});
        let response = carillon_tls::http_client()?
            .post(format!("{}{}", cluster.urls()[0], admin_paths::REGISTER))
            .bearer_auth(&cluster.executor_token)
            .json(&body)
            .send()
            .await
            .context("registering the bench executor")?;
        if !response.status().is_success() {
            bail!("registration refused: {}", response.text().await?);
        }
        let accepted: serde_json::Value = response.json().await?;
        Ok(accepted["heartbeat_interval_ms"].as_u64().unwrap_or(1_000))
    }

    /// What the log shipping did so far.
    pub(crate) fn log_figures(&self) -> LogFigures {
        *self
            .shared
            .shipped
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every workflow step's dispatch so far.
    pub(crate) fn step_receipts(&self) -> Vec<StepReceipt> {
        self.shared
            .steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every receipt so far.
    pub(crate) fn receipts(&self) -> Vec<Receipt> {
        self.shared
            .receipts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

fn unsigned(shared: &Shared, headers: &HeaderMap, body: &[u8], now: i64) -> Option<Response> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let signed = verify(
        shared.secret.as_bytes(),
        header(TIMESTAMP_HEADER),
        header(SIGNATURE_HEADER),
        body,
        now,
    );
    signed
        .err()
        .map(|e| (StatusCode::UNAUTHORIZED, e.to_string()).into_response())
}

fn record(shared: &Shared, dispatches: &[Dispatch], received_ms: i64) {
    let mut receipts = shared
        .receipts
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for dispatch in dispatches {
        receipts.push(Receipt {
            job_id: dispatch.job_id,
            run_id: dispatch.run_id,
            scheduled_ms: crate::cluster::parse_rfc3339_ms(&dispatch.scheduled_at).unwrap_or(0),
            received_ms,
        });
    }
    drop(receipts);
    let steps: Vec<StepReceipt> = dispatches
        .iter()
        .filter_map(|d| {
            let input = d.input.as_ref()?;
            let workflow_run_id = input["workflow"]["run_id"].as_i64()?;
            let upstream_runs = input["upstream"]
                .as_object()
                .map(|ups| ups.values().filter_map(|u| u["run_id"].as_i64()).collect())
                .unwrap_or_default();
            Some(StepReceipt {
                run_id: d.run_id,
                workflow_run_id,
                upstream_runs,
            })
        })
        .collect();
    if !steps.is_empty() {
        shared
            .steps
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(steps);
    }
    if shared.log_lines > 0 {
        let mut logs = shared.logs.lock().unwrap_or_else(PoisonError::into_inner);
        for dispatch in dispatches {
            let lines = (1..=shared.log_lines as i64)
                .map(|line| ShippedLine {
                    line,
                    at_ms: received_ms,
                    level: "INFO".to_owned(),
                    message: format!(
                        "step {line} of run {} for job {}: processed 120 rows in 3 ms",
                        dispatch.run_id, dispatch.job
                    ),
                })
                .collect();
            logs.push(AttemptLines {
                attempt_id: dispatch.attempt_id,
                handle: dispatch.handle.clone(),
                lines,
            });
        }
    }
}

/// Every 300 ms, every waiting line, in requests of at most [`LINES_PER_REQUEST`] lines (the
/// SDK sends at most 1,000 lines of an attempt in one; a request must stay under the node's
/// 2 MiB).
async fn ship_logs(shared: Arc<Shared>, client: reqwest::Client, urls: Vec<String>, token: String) {
    const LINES_PER_REQUEST: usize = 5_000;
    let mut next = 0usize;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut waiting =
            std::mem::take(&mut *shared.logs.lock().unwrap_or_else(PoisonError::into_inner));
        while !waiting.is_empty() {
            let mut attempts = Vec::new();
            let mut lines = 0usize;
            while let Some(a) = waiting.pop() {
                lines += a.lines.len();
                attempts.push(a);
                if lines >= LINES_PER_REQUEST {
                    break;
                }
            }
            next = (next + 1) % urls.len().max(1);
            let batch = LogBatch {
                executor_id: "bench-executor".to_owned(),
                attempts,
            };
            let accepted = send_logs(&client, &urls[next], &token, &batch).await;
            let mut figures = shared
                .shipped
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            figures.lines += lines as u64;
            match accepted {
                Some(a) => {
                    figures.stored += a.stored;
                    figures.dropped += a.dropped;
                }
                None => figures.failed_requests += 1,
            }
        }
    }
}

async fn send_logs(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    batch: &LogBatch,
) -> Option<LogBatchAccepted> {
    let sent = client
        .post(format!("{url}{}", admin_paths::LOGS))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30))
        .json(batch)
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => r.json::<LogBatchAccepted>().await.ok(),
        Ok(r) => {
            let status = r.status();
            let body: String = r
                .text()
                .await
                .unwrap_or_default()
                .chars()
                .take(300)
                .collect();
            eprintln!("log batch refused: {status} {body}");
            None
        }
        Err(e) => {
            eprintln!("log batch not sent: {e}");
            None
        }
    }
}

fn succeeded() -> DirectResult {
    DirectResult {
        outcome: Outcome::Succeeded,
        output: None,
        error: None,
    }
}

async fn dispatch(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let received_ms = now_ms();
    if let Some(refused) = unsigned(&shared, &headers, &body, received_ms) {
        return refused;
    }
    let Ok(dispatch) = serde_json::from_slice::<Dispatch>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    record(&shared, std::slice::from_ref(&dispatch), received_ms);
    Json(succeeded()).into_response()
}

/// Where the `http` scenario's HTTP jobs call: the same receipts as a dispatch.
pub(crate) const HTTP_JOB_PATH: &str = "/http-job";

/// The body the `http` scenario's jobs send (`{{job_id}}`, `{{run_id}}`, `{{instant_ms}}`).
#[derive(serde::Deserialize)]
struct HttpJobCall {
    job_id: i64,
    run_id: i64,
    at: i64,
}

async fn http_job(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let received_ms = now_ms();
    let Ok(call) = serde_json::from_slice::<HttpJobCall>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    shared
        .receipts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Receipt {
            job_id: call.job_id,
            run_id: call.run_id,
            scheduled_ms: call.at,
            received_ms,
        });
    StatusCode::NO_CONTENT.into_response()
}

async fn dispatch_batch(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received_ms = now_ms();
    if let Some(refused) = unsigned(&shared, &headers, &body, received_ms) {
        return refused;
    }
    let Ok(batch) = serde_json::from_slice::<DispatchBatch>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    record(&shared, &batch.dispatches, received_ms);
    let replies = batch
        .dispatches
        .iter()
        .map(|d| BatchItemReply {
            attempt_id: d.attempt_id,
            status: 200,
            result: Some(succeeded()),
            error: None,
        })
        .collect();
    Json(DispatchBatchReply { replies }).into_response()
}
