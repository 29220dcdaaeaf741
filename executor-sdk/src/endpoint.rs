//! The HTTP endpoint admin nodes dispatch to: `POST /carillon/v1/dispatch`,
//! `POST /carillon/v1/dispatch-batch` and `POST /carillon/v1/cancel`, all signed.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use carillon_protocol::{
    BatchItemReply, Cancel, DirectResult, Dispatch, DispatchBatch, DispatchBatchReply,
    PROTOCOL_VERSION, REPLAY_WINDOW_MS, SIGNATURE_HEADER, TIMESTAMP_HEADER, executor_paths, verify,
};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, warn};

use crate::admin::{Shared, now_ms};
use crate::attempt::AttemptRef;
use crate::context::JobContext;
use crate::effects::Effect;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(executor_paths::DISPATCH, post(dispatch))
        .route(executor_paths::DISPATCH_BATCH, post(dispatch_batch))
        .route(executor_paths::CANCEL, post(cancel))
        .with_state(shared)
}

fn refuse(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "error": message.into() });
    (status, axum::Json(body)).into_response()
}

/// The call's signed timestamp (epoch milliseconds) when its signature verifies; else the
/// refusal to send (`401`).
fn verified(shared: &Shared, headers: &HeaderMap, body: &[u8]) -> Result<i64, Unverified> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    verify(
        shared.id.secret.as_bytes(),
        header(TIMESTAMP_HEADER),
        header(SIGNATURE_HEADER),
        body,
        now_ms(),
    )
    .map_err(|e| {
        warn!(error = %e, "refused a call whose signature does not verify");
        Unverified(e.to_string())
    })
}

/// Why a call's signature did not verify.
struct Unverified(String);

impl IntoResponse for Unverified {
    fn into_response(self) -> Response {
        refuse(StatusCode::UNAUTHORIZED, self.0)
    }
}

async fn dispatch(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let signed_at = match verified(&shared, &headers, &body) {
        Ok(at) => at,
        Err(refused) => return refused.into_response(),
    };
    let dispatch: Dispatch = match serde_json::from_slice(&body) {
        Ok(d) => d,
        Err(e) => return refuse(StatusCode::BAD_REQUEST, format!("not a dispatch: {e}")),
    };
    match accept(&shared, dispatch, signed_at) {
        Ok(Taken::Running) => StatusCode::ACCEPTED.into_response(),
        Ok(Taken::Done(result)) => (StatusCode::OK, axum::Json(result)).into_response(),
        Err((status, why)) => refuse(status, why),
    }
}

/// Attempts due together, each accepted or refused as if it came alone.
async fn dispatch_batch(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let signed_at = match verified(&shared, &headers, &body) {
        Ok(at) => at,
        Err(refused) => return refused.into_response(),
    };
    let batch: DispatchBatch = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("not a dispatch batch: {e}"),
            );
        }
    };
    let replies = batch
        .dispatches
        .into_iter()
        .map(|dispatch| {
            let attempt_id = dispatch.attempt_id;
            let (status, result, error) = match accept(&shared, dispatch, signed_at) {
                Ok(Taken::Running) => (StatusCode::ACCEPTED, None, None),
                Ok(Taken::Done(result)) => (StatusCode::OK, Some(result), None),
                Err((status, why)) => (status, None, Some(why)),
            };
            BatchItemReply {
                attempt_id,
                status: status.as_u16(),
                result,
                error,
            }
        })
        .collect();
    axum::Json(DispatchBatchReply { replies }).into_response()
}

/// How a dispatch was taken.
enum Taken {
    /// Running (or joined to a run of the same work): the result will be reported.
    Running,
    /// Work of this effect key was done already: its result.
    Done(DirectResult),
}

/// Starts the handler of a dispatch signed at `signed_at`, or says why not (with the status a
/// single dispatch answers). A dispatch with an `effect_key` whose work is done or running
/// here is answered from the record instead.
fn accept(
    shared: &Arc<Shared>,
    dispatch: Dispatch,
    signed_at: i64,
) -> Result<Taken, (StatusCode, String)> {
    if dispatch.protocol != PROTOCOL_VERSION {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("protocol {} is not spoken here", dispatch.protocol),
        ));
    }
    if let Some(key) = &dispatch.effect_key {
        match shared
            .lock_effects()
            .begin(key, &AttemptRef::of(&dispatch), now_ms())
        {
            Effect::Run => {}
            Effect::Joined(primary) => {
                debug!(
                    key,
                    attempt_id = dispatch.attempt_id,
                    "joined the running work of this effect key"
                );
                // Listed in flight by heartbeats, and cancelled with it, like the attempt it
                // joined.
                let mut running = shared.lock_running();
                if let Some(token) = running.get(&primary).cloned() {
                    running.insert(dispatch.attempt_id, token);
                }
                return Ok(Taken::Running);
            }
            Effect::Done(result) => {
                debug!(
                    key,
                    attempt_id = dispatch.attempt_id,
                    "answered from the record of this effect key"
                );
                return Ok(Taken::Done(result));
            }
        }
    }
    let started = start(shared, dispatch.clone(), signed_at);
    if started.is_err()
        && let Some(key) = &dispatch.effect_key
    {
        shared.lock_effects().abandon(key);
    }
    started.map(|()| Taken::Running)
}

/// Starts the handler of a dispatch signed at `signed_at`, or says why not.
fn start(
    shared: &Arc<Shared>,
    dispatch: Dispatch,
    signed_at: i64,
) -> Result<(), (StatusCode, String)> {
    let Some(run) = shared
        .jobs
        .get(dispatch.handler.as_str())
        .map(|h| Arc::clone(&h.run))
    else {
        return Err((
            StatusCode::NOT_FOUND,
            format!("no handler {:?} here", dispatch.handler),
        ));
    };
    {
        let mut seen = shared.lock_seen();
        let now = now_ms();
        seen.expire(now);
        // An attempt taken here is this executor's even while it drains: a `503` would send
        // it on to the next executor while it still runs here.
        if seen.contains(dispatch.attempt_id) {
            return Err((
                StatusCode::CONFLICT,
                "this attempt was already accepted".to_owned(),
            ));
        }
        if shared.draining.load(Ordering::SeqCst) {
            return Err((StatusCode::SERVICE_UNAVAILABLE, "draining".to_owned()));
        }
        // Remembered while a replay of the request could still pass the timestamp check.
        seen.remember(dispatch.attempt_id, signed_at.max(now) + REPLAY_WINDOW_MS);
    }
    let Ok(permit) = Arc::clone(&shared.slots).try_acquire_owned() else {
        // Not accepted: the same attempt may be offered again later.
        shared.lock_seen().forget(dispatch.attempt_id);
        return Err((StatusCode::TOO_MANY_REQUESTS, "at capacity".to_owned()));
    };
    let token = CancellationToken::new();
    shared
        .lock_running()
        .insert(dispatch.attempt_id, token.clone());
    let task_shared = Arc::clone(shared);
    // Every line logged while the attempt runs, the handler's own included, and while its
    // result is reported, carries the run and attempt it is about.
    let span = tracing::info_span!(
        "attempt",
        run_id = dispatch.run_id,
        attempt_id = dispatch.attempt_id,
        job = %dispatch.job,
        shard = dispatch.shard.index,
        trace_id = dispatch
            .traceparent
            .as_deref()
            .and_then(crate::context::trace_id_of),
    );
    #[cfg(feature = "opentelemetry")]
    crate::otel::continue_trace(&span, dispatch.traceparent.as_deref());
    shared.tasks.spawn(
        async move {
            let attempt = AttemptRef::of(&dispatch);
            let attempt_id = attempt.id;
            let report_to = dispatch.report_to.clone();
            let effect_key = dispatch.effect_key.clone();
            debug!(handler = %dispatch.handler, "running");
            let ctx = JobContext::new(dispatch, token.clone());
            // In a task of its own, so a handler that panics fails its attempt (and ends the
            // record of its work) instead of leaving it running for ever; what it logs is
            // captured into the attempt's log.
            let run = run(ctx).instrument(tracing::Span::current());
            let mut handler = if task_shared.id.capture_logs {
                let log = task_shared.logs.open(&attempt, &report_to);
                tokio::spawn(crate::logs::capturing(log, run))
            } else {
                tokio::spawn(run)
            };
            let result = tokio::select! {
                joined = &mut handler => Some(joined.unwrap_or_else(|e| {
                    Err(format!("the handler panicked: {e}"))
                })),
                _ = token.cancelled() => {
                    handler.abort();
                    None
                }
            };
            drop(permit);
            // The log is complete before the result: a run that has ended shows all of it.
            task_shared.close_log(attempt_id).await;
            let joined = match &effect_key {
                Some(key) => task_shared.lock_effects().finish(key, &result, now_ms()),
                None => Vec::new(),
            };
            // Each stays listed in flight by the heartbeats until its result is taken: a node
            // that cannot store the report yet (its database link down) must not take an
            // attempt that ended here for one this executor forgot, and end it `lost`.
            for other in joined {
                task_shared.report(&other, result.clone(), &report_to).await;
                task_shared.lock_running().remove(&other.id);
            }
            task_shared.report(&attempt, result, &report_to).await;
            task_shared.lock_running().remove(&attempt_id);
        }
        .instrument(span),
    );
    Ok(())
}

async fn cancel(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = verified(&shared, &headers, &body) {
        return refused.into_response();
    }
    let Ok(cancel) = serde_json::from_slice::<Cancel>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "not a cancellation");
    };
    if let Some(token) = shared.lock_running().get(&cancel.attempt_id) {
        token.cancel();
    }
    StatusCode::OK.into_response()
}
