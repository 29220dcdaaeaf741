//! Deliveries outlive the pass that planned them: each runs as a task of its own and hands
//! what came of it to [`Dispatcher::collect_answers`], which stores answers as they come. A
//! delivery pass never waits for its deliveries, so an executor that answers slowly, or not at
//! all, delays only its own attempts: the next pass starts at its tick, and its attempts wait
//! for their executor's share of the requests in flight, not for everyone's.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tracing::warn;

use super::Dispatcher;
use super::settle::{Delivered, Ended};

/// Most dispatches of one node in flight at once.
const MAX_IN_FLIGHT: usize = 256;

/// Most dispatches in flight to one executor: one that stopped answering holds no more of
/// the node's requests than this.
const PER_EXECUTOR: usize = 64;

/// An answer waits at most this long for others to be stored with it: deliveries spread over
/// [`deliver_ahead`](super::deliver_ahead), and an answer not yet stored is work a node killed
/// meanwhile leaves to be done again.
const SETTLE_AFTER: Duration = Duration::from_millis(10);

/// What one delivery (an attempt, or a batch of them) came to.
#[derive(Debug)]
pub(super) struct Answered {
    /// Every attempt it covered: held from the next passes until it ended.
    attempt_ids: Vec<i64>,
    products: Vec<Delivered>,
}

/// Where deliveries hand their answers.
pub(super) type Answers = mpsc::UnboundedSender<Answered>;

/// The node's dispatches in flight, in all and per executor.
#[derive(Debug)]
pub(super) struct InFlight {
    all: Arc<Semaphore>,
    per_executor: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl InFlight {
    pub(super) fn new() -> Self {
        Self {
            all: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            per_executor: Mutex::new(HashMap::new()),
        }
    }

    /// The limits a dispatch to `executor` waits for (none of its own without one: an HTTP
    /// job's call, limited by its own client).
    pub(super) fn limits(&self, executor: Option<&str>) -> Limits {
        let own = executor.map(|id| {
            let mut all = self
                .per_executor
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            Arc::clone(
                all.entry(id.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(PER_EXECUTOR))),
            )
        });
        Limits {
            own,
            all: Arc::clone(&self.all),
        }
    }

    /// Forgets the limits of executors that are gone (none of their dispatches in flight).
    pub(super) fn forget_all_but(&self, live: &HashSet<&str>) {
        let mut all = self
            .per_executor
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.retain(|id, limit| {
            live.contains(id.as_str()) || limit.available_permits() < PER_EXECUTOR
        });
    }
}

/// The permits one dispatch waits for.
#[derive(Debug)]
pub(super) struct Limits {
    own: Option<Arc<Semaphore>>,
    all: Arc<Semaphore>,
}

impl Limits {
    /// Waits for its executor's share first, so a silent executor's dispatches queue behind
    /// each other and never take the node's from the rest. Closed never: the semaphores live
    /// as long as the dispatcher.
    pub(super) async fn acquire(
        self,
    ) -> (Option<OwnedSemaphorePermit>, Option<OwnedSemaphorePermit>) {
        let own = match self.own {
            Some(own) => own.acquire_owned().await.ok(),
            None => None,
        };
        (own, self.all.acquire_owned().await.ok())
    }
}

/// A delivery's attempts on their way to the collector: handed with what came of them, or,
/// dropped unhanded (the delivery panicked), with nothing, which releases them.
struct Handing {
    answers: Answers,
    attempt_ids: Option<Vec<i64>>,
}

impl Handing {
    fn hand(mut self, products: Vec<Delivered>) {
        if let Some(attempt_ids) = self.attempt_ids.take() {
            // Closed only once the collector is gone, when the node stops: what is not stored
            // then goes out again from the next owner.
            let _ = self.answers.send(Answered {
                attempt_ids,
                products,
            });
        }
    }
}

impl Drop for Handing {
    fn drop(&mut self) {
        if let Some(attempt_ids) = self.attempt_ids.take() {
            warn!(
                attempts = attempt_ids.len(),
                "a delivery ended without an answer; its attempts go out again"
            );
            let _ = self.answers.send(Answered {
                attempt_ids,
                products: Vec::new(),
            });
        }
    }
}

impl Dispatcher {
    /// Runs `delivery` (of the attempts `attempt_ids`, which it holds from the passes that
    /// follow) as a task of its own, its answers handed to `answers`. A delivery that panics
    /// hands nothing and releases its attempts, to be offered again.
    pub(super) fn spawn_delivery(
        &self,
        answers: &Answers,
        attempt_ids: Vec<i64>,
        delivery: impl Future<Output = Vec<Delivered>> + Send + 'static,
    ) {
        self.settling.hold(&attempt_ids);
        let handing = Handing {
            answers: answers.clone(),
            attempt_ids: Some(attempt_ids),
        };
        tokio::spawn(async move {
            let handing = handing;
            let products = delivery.await;
            handing.hand(products);
        });
    }

    /// Stores what executors answered as deliveries end, across passes: answers received
    /// within [`SETTLE_AFTER`] of the first go together, in the background; the attempts a
    /// delivery left live (taken and running, or not taken) are released to the next pass.
    /// Returns once every sender is gone (the dispatcher stopped) and every delivery ended.
    pub(super) async fn collect_answers(&self, mut answers: mpsc::UnboundedReceiver<Answered>) {
        let mut ended: Vec<Ended> = Vec::new();
        let mut first_at: Option<tokio::time::Instant> = None;
        loop {
            let flush_at = first_at.map(|at| at + SETTLE_AFTER);
            tokio::select! {
                got = answers.recv() => {
                    let Some(answered) = got else { break };
                    let before = ended.len();
                    for product in answered.products {
                        match product {
                            Ok(Some(end)) => ended.push(end),
                            Ok(None) => {}
                            Err(err) => warn!(error = %err, "dispatch failed; it will be retried"),
                        }
                    }
                    let ending: HashSet<i64> =
                        ended[before..].iter().map(|e| e.attempt_id).collect();
                    let live: Vec<i64> = answered
                        .attempt_ids
                        .into_iter()
                        .filter(|id| !ending.contains(id))
                        .collect();
                    self.settling.release(&live);
                    if first_at.is_none() && !ended.is_empty() {
                        first_at = Some(tokio::time::Instant::now());
                    }
                }
                () = tokio::time::sleep_until(flush_at.unwrap_or_else(tokio::time::Instant::now)),
                    if flush_at.is_some() => {
                    self.settle_in_background(std::mem::take(&mut ended)).await;
                    first_at = None;
                }
            }
        }
        self.settle_in_background(ended).await;
    }
}
