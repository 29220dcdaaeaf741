//! An HTTP job's offer: this node makes the call (`http_jobs`). A call answered within
//! `http_jobs.answer_wait_ms` is settled with the pass's other answers; a slower one is
//! recorded as running (executor `http@<node>`, with a deadline) and ended by its answer in
//! the background, so a slow URL never holds up a delivery pass.
//!
//! What a call that got no answer means follows the job's delivery guarantee: at least once
//! and exactly-once effect fail the attempt, and the retry policy sends it again (with the same
//! `Idempotency-Key` for exactly-once effect, so a server that honours it applies the run
//! once); at most once records it lost and never sends it again. A call that could not be sent
//! fails under every guarantee.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use carillon_protocol::{DirectResult, Outcome};
use serde_json::Value;
use tracing::warn;

use super::Dispatcher;
use super::client::{Delivery, DispatchClient, NotTaken};
use super::finish::{Ending, finish_attempt_by};
use super::http_jobs::HttpJobs;
use super::plan::Offer;
use super::settle::{Delivered, first_taken, settle};
use crate::jobs::Delivery as Guarantee;
use crate::observe::Observer;
use crate::store::{self, NamespaceId, Store};

/// A running call's deadline is its timeout and this much more: the call's own timeout answers
/// first, with its reason.
const DEADLINE_MARGIN_MS: i64 = 5_000;

impl Dispatcher {
    /// Opens the secrets the HTTP offers of a pass name: one read per namespace that needs
    /// any, none for offers that name none.
    pub(super) async fn open_http_secrets(&self, offers: &mut [Offer]) -> Result<(), store::Error> {
        let Some(http_jobs) = &self.http_jobs else {
            return Ok(());
        };
        let mut needed: HashMap<NamespaceId, Vec<usize>> = HashMap::new();
        for (i, offer) in offers.iter().enumerate() {
            if offer.http.as_ref().is_some_and(|h| h.names_secrets()) {
                needed.entry(offer.namespace).or_default().push(i);
            }
        }
        for (namespace, indices) in needed {
            let stored = self.store.secrets_list(namespace).await?;
            for i in indices {
                if let Some(http) = offers[i].http.as_mut() {
                    http_jobs.open_secrets(http, namespace, &stored);
                }
            }
        }
        Ok(())
    }
}

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
    let executor_id = http_jobs.executor_id.clone();
    let guarantee = offer.policy.delivery;
    let attempt_id = offer.attempt.attempt_id;
    let deadline_ms = offer.timeout_ms.saturating_add(DEADLINE_MARGIN_MS);
    // At most once: recorded before it goes, so it never goes twice.
    if guarantee == Guarantee::AtMostOnce
        && !store
            .attempt_dispatched(attempt_id, &executor_id, deadline_ms)
            .await?
    {
        return Ok(None);
    }
    let Ok(slot) = Arc::clone(&http_jobs.slots).acquire_owned().await else {
        return Ok(None);
    };
    let sent_ms = client.now_ms();
    let began = SystemTime::now();
    // One key for every try of a run's shard: the server applies the run once.
    let key = (guarantee == Guarantee::ExactlyOnceEffect)
        .then(|| format!("{}:{}", offer.attempt.run_id, offer.attempt.shard_index));
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
        if guarantee == Guarantee::AtMostOnce
            && let Delivery::TryAnother(_, why) = &delivery
        {
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
    if guarantee != Guarantee::AtMostOnce {
        store
            .attempt_dispatched(attempt_id, &executor_id, deadline_ms)
            .await?;
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
        let ended = finish_attempt_by(
            &*store,
            &observer,
            &offer.attempt,
            Some(&executor_id),
            ending,
            output.as_ref(),
            error,
        )
        .await;
        http_jobs.end_calling(attempt_id);
        if let Err(err) = ended {
            // Left running: its deadline ends it.
            warn!(attempt_id, error = %err, "an HTTP job's answer could not be stored");
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
/// retried) unless the guarantee is at most once, where it may have been taken and is lost;
/// one never sent fails under every guarantee.
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
        Ok(Delivery::TryAnother(not, why)) if guarantee == Guarantee::AtMostOnce => {
            Delivery::TryAnother(not, why)
        }
        Ok(Delivery::TryAnother(_, why)) => failed(why),
        Ok(delivery) => delivery,
    }
}
