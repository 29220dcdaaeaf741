//! Stage four: a delivery pass. After the watch, it reads the attempts due soon (less those
//! whose deliveries or answers are still under way), plans them, and starts a delivery of
//! each, at its instant, as a task of its own (offers due together for one batch-taking
//! executor in one request); the pass does not wait for them. What executors answer at once
//! is stored as it comes (`answers`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tracing::{debug, warn};

use super::answers::Answers;
use super::client::{Delivery, DispatchClient};
use super::deliver_http::deliver_http;
use super::finish::{Ending, finish_attempt_by};
use super::plan::{Offer, Target, by_priority};
use super::settle::{Delivered, first_taken, settle};
use super::xxl::trigger_of;
use super::{Dispatcher, millis};
use crate::jobs::Delivery as Guarantee;
use crate::observe::Observer;
use crate::store::{self, JobRecord, Store};

/// A delivery pass slower than this is logged with where its time went (it reads, plans and
/// starts deliveries; it waits for none of them).
const SLOW_PASS: Duration = Duration::from_millis(1_000);

impl Dispatcher {
    /// Fails over the attempts of lost executors, times out the overdue, then starts the
    /// deliveries of the attempts due soon, each at its instant, their answers handed to
    /// `answers`.
    pub(super) async fn delivery_pass(&self, answers: &Answers) -> Result<(), store::Error> {
        let partitions = self.owned_partitions();
        if partitions.is_empty() {
            return Ok(());
        }
        let began = std::time::Instant::now();
        let mut fleet = self.fleet(true).await?;
        // The database clock's reading at a local instant: deliveries wait for their instant
        // on the local monotonic clock from here.
        let clock_base = (tokio::time::Instant::now(), fleet.now_ms);
        let mut jobs: HashMap<i64, Option<JobRecord>> = HashMap::new();
        self.watch(&partitions, &fleet).await?;
        let housekeeping = began.elapsed();
        let read = self.settling.begin_read();
        let mut due = self
            .store
            .attempts_due(
                &partitions,
                millis(self.settings.deliver_ahead),
                self.due_cursor(|c| c.current()),
                self.settings.batch,
            )
            .await?;
        if !due.is_empty() && !self.standbys_have_it().await? {
            // Read again next pass, once the standbys have them.
            return Ok(());
        }
        self.due_cursor(|c| c.advance(&due, self.settings.batch));
        self.settling.skip_settling(read, &mut due);
        let due_count = due.len();
        self.prefetch_jobs(&mut jobs, due.iter().map(|d| d.attempt.job_id))
            .await?;
        by_priority(&mut due, fleet.now_ms);
        // Offers are planned in priority order, then delivered concurrently, each at its
        // instant, each waiting for its executor's share of the requests in flight.
        // Offers due at one instant for one batch-taking executor go in one request.
        let mut batches: HashMap<(String, i64), Vec<Offer>> = HashMap::new();
        let mut singles = Vec::new();
        let mut calls = Vec::new();
        for due in due {
            let job = jobs.get(&due.attempt.job_id).and_then(Option::as_ref);
            let planned = self
                .plan(
                    &due.attempt,
                    due.scheduled_at_ms,
                    due.input_json.as_deref(),
                    job,
                    &mut fleet,
                )
                .await?;
            match planned {
                Some(offer) if offer.http.is_some() => calls.push(offer),
                // Offers carrying secrets go alone, once their secrets are read.
                Some(offer) if !offer.policy.secrets.is_empty() => singles.push(offer),
                // Offers under a delivery guarantee other than at-least-once are marked before
                // they go, alone.
                Some(offer)
                    if offer.first_takes_batches
                        && offer.policy.delivery == Guarantee::AtLeastOnce =>
                {
                    let first = offer.targets.first().map(|t| t.executor_id.clone());
                    let key = (first.unwrap_or_default(), offer.attempt.not_before_ms);
                    batches.entry(key).or_default().push(offer);
                }
                Some(offer) => singles.push(offer),
                None => {}
            }
        }
        self.open_offer_secrets(&mut calls).await?;
        self.open_offer_secrets(&mut singles).await?;
        let at = |due_ms: i64| {
            let wait_ms = u64::try_from(due_ms - clock_base.1).unwrap_or(0);
            clock_base.0 + Duration::from_millis(wait_ms)
        };
        for offer in calls {
            let at = at(offer.attempt.not_before_ms);
            let store = Arc::clone(&self.store);
            let client = self.client.clone();
            let view = Arc::clone(&self.view);
            let observer = self.observer.clone();
            let http_jobs = self.http_jobs.clone();
            let ids = vec![offer.attempt.attempt_id];
            self.spawn_delivery(answers, ids, async move {
                tokio::time::sleep_until(at).await;
                if !view.owns(offer.attempt.partition_id) {
                    return Vec::new();
                }
                vec![deliver_http(store, client, observer, http_jobs, offer).await]
            });
        }
        let deliveries = singles.into_iter().map(|offer| vec![offer]).chain(
            batches
                .into_values()
                .flat_map(|offers| chunked(offers, MAX_BATCH)),
        );
        for offers in deliveries {
            let Some(first) = offers.first() else {
                continue;
            };
            let at = at(first.attempt.not_before_ms);
            let executor = first.targets.first().map(|t| t.executor_id.as_str());
            let limits = self.in_flight.limits(executor);
            let store = Arc::clone(&self.store);
            let client = self.client.clone();
            let view = Arc::clone(&self.view);
            let observer = self.observer.clone();
            let ids = offers.iter().map(|o| o.attempt.attempt_id).collect();
            self.spawn_delivery(answers, ids, async move {
                tokio::time::sleep_until(at).await;
                let _permits = limits.acquire().await;
                // A partition that moved away (or a lapsed lease) while the delivery waited for
                // its instant: its attempts stay pending for the next owner.
                let offers: Vec<Offer> = offers
                    .into_iter()
                    .filter(|o| view.owns(o.attempt.partition_id))
                    .collect();
                deliver_batch(&*store, &client, &observer, offers).await
            });
        }
        let live: std::collections::HashSet<&str> = fleet.executor_ids().collect();
        self.in_flight.forget_all_but(&live);
        let took = began.elapsed();
        if took > SLOW_PASS {
            warn!(?took, ?housekeeping, due = due_count, "slow delivery pass");
        }
        Ok(())
    }
}

/// Most attempts in one batch request.
const MAX_BATCH: usize = 512;

fn chunked(mut offers: Vec<Offer>, size: usize) -> Vec<Vec<Offer>> {
    let mut chunks = Vec::with_capacity(offers.len().div_ceil(size));
    while offers.len() > size {
        let rest = offers.split_off(size);
        chunks.push(std::mem::replace(&mut offers, rest));
    }
    chunks.push(offers);
    chunks
}

/// Offers an attempt to its executors in turn until one takes it (`202`: recorded as
/// running) or answers for good (a result or a refusal: returned, to be ended with others).
async fn deliver(
    store: &dyn Store,
    client: &DispatchClient,
    observer: &Observer,
    offer: Offer,
) -> Delivered {
    if let Some(why) = offer.refused.clone() {
        let executor_id = offer.targets.first().map_or("", |t| t.executor_id.as_str());
        return settle(
            store,
            observer,
            &offer,
            executor_id,
            client.now_ms(),
            Delivery::Refused(why),
        )
        .await
        .unwrap_or(Ok(None));
    }
    if offer.policy.delivery == Guarantee::AtMostOnce {
        return deliver_at_most_once(store, client, observer, &offer).await;
    }
    deliver_from(store, client, observer, &offer, 0).await
}

/// An at-most-once offer: recorded as running at its first target before it is sent, then
/// sent once. An attempt the executor did not take (busy, draining, or nothing sent: the
/// connection could not be made) goes back to the queue; a delivery whose fate is unknown (no
/// answer, a failing `5xx`) ends the attempt lost, and it is never sent again (nor is an
/// attempt the node died holding: the watch finds it lost).
async fn deliver_at_most_once(
    store: &dyn Store,
    client: &DispatchClient,
    observer: &Observer,
    offer: &Offer,
) -> Delivered {
    let Some(target) = offer.targets.first() else {
        return Ok(None);
    };
    let executor_id = &target.executor_id;
    let attempt_id = offer.attempt.attempt_id;
    if !store
        .attempt_dispatched(attempt_id, executor_id, offer.timeout_ms)
        .await?
    {
        // Not pending any more: another pass or node has it.
        return Ok(None);
    }
    let sent_ms = client.now_ms();
    let delivery = send(client, observer, (0, target), offer).await;
    match delivery {
        Delivery::Accepted => {
            observer.metrics.dispatches.add(delivery.outcome(), 1);
            first_taken(observer, offer, sent_ms);
            Ok(None)
        }
        Delivery::TryAnother(not_taken, why) if !not_taken.maybe_taken() => {
            observer.metrics.dispatches.add("not_taken", 1);
            debug!(attempt_id, executor = %executor_id, why, "not taken; back to the queue");
            store.attempt_undispatched(attempt_id, executor_id).await?;
            Ok(None)
        }
        Delivery::TryAnother(_, why) => {
            observer.metrics.dispatches.add("lost", 1);
            let error = format!("no answer from executor {executor_id}: {why}");
            finish_attempt_by(
                store,
                observer,
                &offer.attempt,
                Some(executor_id),
                Ending::Lost,
                None,
                Some(error),
            )
            .await?;
            Ok(None)
        }
        Delivery::Finished(_) | Delivery::Refused(_) => {
            settle(store, observer, offer, executor_id, sent_ms, delivery)
                .await
                .unwrap_or(Ok(None))
        }
    }
}

/// Sends an offer to one executor (the `index`th of its order), in its protocol, and traces
/// it.
async fn send(
    client: &DispatchClient,
    observer: &Observer,
    (index, target): (usize, &Target),
    offer: &Offer,
) -> Delivery {
    let began = SystemTime::now();
    let offering = offer.offering(index);
    let delivery = if target.xxl {
        let trigger = trigger_of(
            &offer.request,
            offer.policy.overlap,
            offer.attempt.created_at_ms,
        );
        client
            .xxl_run(&target.address, &trigger, offer.policy.balance)
            .await
    } else if offering.target == 0 {
        client.dispatch(&target.address, &offer.request).await
    } else {
        // The next executor's offer is a delivery span of its own.
        let mut request = offer.request.clone();
        request.traceparent = Some(observer.traces.traceparent((
            offering.run_id,
            offering.attempt_id,
            offering.target,
        )));
        client.dispatch(&target.address, &request).await
    };
    observer.traces.delivered(
        &offering,
        &target.executor_id,
        delivery.outcome(),
        (began, SystemTime::now()),
    );
    delivery
}

/// [`deliver`], starting at target `first`.
async fn deliver_from(
    store: &dyn Store,
    client: &DispatchClient,
    observer: &Observer,
    offer: &Offer,
    first: usize,
) -> Delivered {
    let effect_once = offer.policy.delivery == Guarantee::ExactlyOnceEffect;
    for (index, target) in offer.targets.iter().enumerate().skip(first) {
        let executor_id = &target.executor_id;
        // An effect-once offer names its executor before it goes: only that executor's
        // record can answer for the work, so an offer made again (this node died before
        // recording the answer, or got none) goes there first.
        // So is an offer to an XXL-JOB executor: its callback names only the attempt, and
        // can come back before this node records the answer to `/run`; the callback then
        // finds the executor it came from.
        if effect_once || target.xxl {
            store
                .attempt_prefer(offer.attempt.attempt_id, executor_id)
                .await?;
        }
        let sent_ms = client.now_ms();
        let delivery = send(client, observer, (index, target), offer).await;
        // It may have reached the executor: not on to the next one.
        if effect_once
            && matches!(&delivery, Delivery::TryAnother(not_taken, _) if not_taken.maybe_taken())
        {
            observer.metrics.dispatches.add(delivery.outcome(), 1);
            return Ok(None);
        }
        if let Some(done) = settle(store, observer, offer, executor_id, sent_ms, delivery).await {
            return done;
        }
    }
    Ok(None)
}

/// Offers attempts due together to their first target in one request (a single one goes
/// alone); an attempt it does not take, or all of them when the request fails, go on to the
/// next targets one by one, as a single dispatch would.
async fn deliver_batch(
    store: &dyn Store,
    client: &DispatchClient,
    observer: &Observer,
    offers: Vec<Offer>,
) -> Vec<Delivered> {
    let first = offers
        .first()
        .and_then(|o| o.targets.first())
        .map(|t| (t.executor_id.clone(), t.address.clone()));
    let (Some((executor_id, address)), true) = (first, offers.len() > 1) else {
        let mut products = Vec::with_capacity(offers.len());
        for offer in offers {
            products.push(deliver(store, client, observer, offer).await);
        }
        return products;
    };
    let requests = offers.iter().map(|o| o.request.clone()).collect();
    let sent_ms = client.now_ms();
    let began = SystemTime::now();
    let batch = client.dispatch_batch(&address, requests).await;
    if observer.traces.exporting() {
        let ended = SystemTime::now();
        for offer in &offers {
            let outcome = match &batch {
                Ok(replies) => replies
                    .get(&offer.attempt.attempt_id)
                    .map_or("unanswered", Delivery::outcome),
                Err(_) => "batch_failed",
            };
            observer
                .traces
                .delivered(&offer.offering(0), &executor_id, outcome, (began, ended));
        }
    }
    let mut replies = match batch {
        Ok(replies) => replies,
        Err(why) => {
            debug!(executor = %executor_id, why, attempts = offers.len(), "batch not delivered; offering one by one");
            observer
                .metrics
                .dispatches
                .add("batch_failed", offers.len() as u64);
            HashMap::new()
        }
    };
    // Attempts it accepted are recorded together, a statement per timeout.
    let mut accepted: HashMap<i64, Vec<&Offer>> = HashMap::new();
    let mut products = Vec::with_capacity(offers.len());
    for offer in &offers {
        let settled = match replies.remove(&offer.attempt.attempt_id) {
            Some(Delivery::Accepted) => {
                observer.metrics.dispatches.add("accepted", 1);
                accepted.entry(offer.timeout_ms).or_default().push(offer);
                continue;
            }
            Some(delivery) => settle(store, observer, offer, &executor_id, sent_ms, delivery).await,
            None => None,
        };
        products.push(match settled {
            Some(done) => done,
            None => deliver_from(store, client, observer, offer, 1).await,
        });
    }
    for (timeout_ms, group) in accepted {
        let attempt_ids: Vec<i64> = group.iter().map(|o| o.attempt.attempt_id).collect();
        let recorded = store
            .attempts_dispatched(&attempt_ids, &executor_id, timeout_ms)
            .await;
        // All of them recorded now: none was taken before (an offer made again after a lost
        // record is answered `409`, accepted, and must not count twice).
        if recorded
            .as_ref()
            .is_ok_and(|n| *n == attempt_ids.len() as u64)
        {
            for offer in group {
                first_taken(observer, offer, sent_ms);
            }
        }
        products.push(recorded.map(|_| None));
    }
    products
}
