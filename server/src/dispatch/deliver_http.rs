//! An HTTP job's offer: this node makes the call (`http_jobs`). A call answered within
//! `http_jobs.answer_wait_ms` is settled with the pass's other answers; a slower one is
//! recorded as running (executor `http@<node>`, with a deadline) and ended by its answer in
//! the background, so a slow URL never holds up a delivery pass. When every call slot is
//! taken the offer waits for a later pass, pending.
//!
//! What a call that got no answer means follows the job's delivery guarantee: at least once
//! fails the attempt, and the retry policy sends it again; exactly-once effect records it lost
//! and sends it again with the same `Idempotency-Key` (the dispatch's effect key: a failure
//! answered is tried again under a new one), so a server that honours the key applies it
//! once; at most once records it lost and never sends it again. The last two record the
//! attempt as running before the call, so no other pass or node makes it meanwhile. A call
//! that could not be sent fails under every guarantee.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use carillon_protocol::{DirectResult, Outcome};
use serde_json::Value;
use tracing::warn;

use super::client::{Delivery, DispatchClient, NotTaken};
use super::finish::{Ending, finish_attempt_by};
use super::http_jobs::HttpJobs;
use super::plan::Offer;
use super::settle::{Delivered, first_taken, settle};
use crate::jobs::Delivery as Guarantee;
use crate::observe::Observer;
use crate::store::Store;

/// A running call's deadline is its timeout and this much more: the call's own timeout answers
/// first, with its reason.
const DEADLINE_MARGIN_MS: i64 = 5_000;

/// How often a slow call's answer is stored before it is left to its deadline.
const FINISH_TRIES: u32 = 4;

/// Makes the call of an HTTP job's offer and settles or records what came of it.
pub(super) async fn deliver_http(
    store: Arc<dyn Store>,
    client: DispatchClient,
    observer: Observer,
    http_jobs: Option<Arc<HttpJobs>>,
    offer: Offer,
) -> Delivered {
    let Some(http_jobs) = http_jobs else {
        let refused = Delivery::Refused("this node makes no HTTP calls".to_owned());
        return settle(&*store, &observer, &offer, "", client.now_ms(), refused)
            .await
            .unwrap_or(Ok(None));
    };
    let Some(http) = offer.http.clone() else {
        return Ok(None);
    };
    // Every slot taken: pending, for a later pass (waiting here would hold this pass up).
    let Ok(slot) = Arc::clone(&http_jobs.slots).try_acquire_owned() else {
        observer.metrics.dispatches.add("busy", 1);
        return Ok(None);
    };
    let executor_id = http_jobs.executor_id.clone();
    let guarantee = offer.policy.delivery;
    let attempt_id = offer.attempt.attempt_id;
    let deadline_ms = offer.timeout_ms.saturating_add(DEADLINE_MARGIN_MS);
    // Recorded before it goes where a second call must not follow a first.
    let recorded_first = guarantee != Guarantee::AtLeastOnce;
    if recorded_first
        && !store
            .attempt_dispatched(attempt_id, &executor_id, deadline_ms)
            .await?
    {
        return Ok(None);
    }
    let sent_ms = client.now_ms();
    let began = SystemTime::now();
    let key = offer.request.effect_key.clone();
    let mut call = tokio::spawn({
        let http_jobs = Arc::clone(&http_jobs);
        let request = offer.request.clone();
        let scheduled_at_ms = offer.scheduled_at_ms;
        async move {
            let _slot = slot;
            http_jobs
                .call(&http, (&request, scheduled_at_ms), key.as_deref())
                .await
        }
    });
    if let Ok(joined) = tokio::time::timeout(http_jobs.answer_wait, &mut call).await {
        let delivery = delivery_of(joined, guarantee);
        trace(&observer, &offer, &executor_id, delivery.outcome(), began);
        if let Delivery::TryAnother(_, why) = &delivery {
            observer.metrics.dispatches.add("lost", 1);
            let error = format!("no answer from the URL: {why}");
            finish_attempt_by(
                &*store,
                &observer,
                &offer.attempt,
                Some(&executor_id),
                Ending::Lost,
                None,
                Some(error),
            )
            .await?;
            return Ok(None);
        }
        return settle(&*store, &observer, &offer, &executor_id, sent_ms, delivery)
            .await
            .unwrap_or(Ok(None));
    }
    // Still calling: recorded as running (the watch leaves this node's calls alone while it
    // makes them), ended by its answer.
    http_jobs.begin_calling(attempt_id);
    if !recorded_first
        && let Err(err) = store
            .attempt_dispatched(attempt_id, &executor_id, deadline_ms)
            .await
    {
        // Its answer still ends it (an attempt ends from pending as from running).
        warn!(attempt_id, error = %err, "an HTTP job's call could not be recorded as running");
    }
    observer.metrics.dispatches.add("accepted", 1);
    first_taken(&observer, &offer, sent_ms);
    tokio::spawn(async move {
        let delivery = delivery_of(call.await, guarantee);
        trace(&observer, &offer, &executor_id, delivery.outcome(), began);
        let (ending, output, error) = match delivery {
            Delivery::Finished(result) => (
                Ending::Reported(result.outcome),
                result.output,
                result.error,
            ),
            Delivery::Refused(why) => (Ending::Refused, None, Some(why)),
            Delivery::TryAnother(_, why) => (
                Ending::Lost,
                None,
                Some(format!("no answer from the URL: {why}")),
            ),
            Delivery::Accepted => (Ending::Lost, None, None),
        };
        let mut tries = 1;
        loop {
            let ended = finish_attempt_by(
                &*store,
                &observer,
                &offer.attempt,
                Some(&executor_id),
                ending,
                output.as_ref(),
                error.clone(),
            )
            .await;
            match ended {
                Ok(_) => {
                    http_jobs.end_calling(attempt_id);
                    return;
                }
                Err(err) if tries < FINISH_TRIES => {
                    warn!(attempt_id, error = %err, tries, "an HTTP job's answer could not be stored; trying again");
                    tokio::time::sleep(Duration::from_millis(100 << tries)).await;
                    tries += 1;
                }
                // Left running and held as this node's call: its deadline ends it.
                Err(err) => {
                    warn!(attempt_id, error = %err, "an HTTP job's answer could not be stored; its deadline ends it");
                    return;
                }
            }
        }
    });
    Ok(None)
}

fn trace(
    observer: &Observer,
    offer: &Offer,
    executor_id: &str,
    outcome: &'static str,
    began: SystemTime,
) {
    observer.traces.delivered(
        &offer.offering(0),
        executor_id,
        outcome,
        (began, SystemTime::now()),
    );
}

/// What a call's result means under `guarantee`: a call that got no answer fails (to be
/// retried) under at least once, and is lost (it may have been taken) under the others; one
/// never sent fails under every guarantee.
fn delivery_of(joined: Result<Delivery, tokio::task::JoinError>, guarantee: Guarantee) -> Delivery {
    let failed = |why: String| {
        Delivery::Finished(DirectResult {
            outcome: Outcome::Failed,
            output: None::<Value>,
            error: Some(why),
        })
    };
    match joined {
        Err(err) => failed(format!("the call stopped: {err}")),
        Ok(Delivery::TryAnother(NotTaken::Unreachable, why)) => failed(why),
        Ok(Delivery::TryAnother(not, why)) if guarantee != Guarantee::AtLeastOnce => {
            Delivery::TryAnother(not, why)
        }
        Ok(Delivery::TryAnother(_, why)) => failed(why),
        Ok(delivery) => delivery,
    }
}
