//! The fast executor: answers every dispatch at once with a direct result (`200`), so the
//! figures measure Carillon, not a handler. It verifies each dispatch's signature as a real
//! executor must, and records when each scheduled instant arrived.

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
    BatchItemReply, DirectResult, Dispatch, DispatchBatch, DispatchBatchReply, Heartbeat, Outcome,
    PROTOCOL_VERSION, SIGNATURE_HEADER, TIMESTAMP_HEADER, admin_paths, executor_paths, verify,
};
use serde_json::json;

use crate::cluster::{Cluster, now_ms};

/// One dispatch received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Receipt {
    pub(crate) job_id: i64,
    pub(crate) scheduled_ms: i64,
    pub(crate) received_ms: i64,
}

#[derive(Debug)]
struct Shared {
    secret: String,
    receipts: Mutex<Vec<Receipt>>,
}

/// A running fast executor.
#[derive(Debug)]
pub(crate) struct FastExecutor {
    shared: Arc<Shared>,
    pub(crate) address: String,
}

impl FastExecutor {
    /// Serves on a loopback port, registers with the cluster and heartbeats until the process
    /// ends.
    pub(crate) async fn start(cluster: &Cluster, batch: bool) -> anyhow::Result<FastExecutor> {
        let shared = Arc::new(Shared {
            secret: cluster.dispatch_secret.clone(),
            receipts: Mutex::new(Vec::with_capacity(1 << 20)),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = format!("http://{}", listener.local_addr()?);
        let app = axum::Router::new()
            .route(executor_paths::DISPATCH, post(dispatch))
            .route(executor_paths::DISPATCH_BATCH, post(dispatch_batch))
            .route(executor_paths::CANCEL, post(|| async { StatusCode::OK }))
            .with_state(Arc::clone(&shared));
        tokio::spawn(async move { axum::serve(listener, app).await });
        let executor = FastExecutor { shared, address };
        let heartbeat_ms = executor.register(cluster, batch).await?;
        let urls = cluster.urls();
        let token = cluster.executor_token.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let beat = Heartbeat {
                executor_id: "bench-executor".to_owned(),
                in_flight: Vec::new(),
                draining: false,
            };
            loop {
                tokio::time::sleep(Duration::from_millis(heartbeat_ms)).await;
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
        Ok(executor)
    }

    async fn register(&self, cluster: &Cluster, batch: bool) -> anyhow::Result<u64> {
        let body = json!({"protocol": PROTOCOL_VERSION, "executor_id": "bench-executor",
            "app": "bench", "address": self.address, "weight": 1, "capacity": 100_000,
            "handlers": [{"name": "noop"}], "batch": batch});
        let response = reqwest::Client::new()
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
            scheduled_ms: crate::cluster::parse_rfc3339_ms(&dispatch.scheduled_at).unwrap_or(0),
            received_ms,
        });
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
