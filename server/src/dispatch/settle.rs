//! Stage five: what executors answered. An accepted offer is recorded as running; a result
//! given at once is ended with the others answered within a few milliseconds of it (more
//! under load, while earlier settles hold both slots), in the background while the pass goes
//! on, [`SETTLE_CHUNK`] answers to a transaction: plain successes in two statements per
//! executor, the rest together (`finish` ends results reported later). [`Settling`] holds the
//! answered attempts from this node's passes until their settle has ended.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{debug, warn};

use super::Dispatcher;
use super::client::Delivery;
use super::finish::{Ending, end_of};
use super::plan::Offer;
use crate::jobs::Overlap;
use crate::observe::Observer;
use crate::store::{self, AttemptEnd, AttemptEnded, DueAttempt, NamespaceId, Store};

/// An attempt an executor answered at once, to end with the others of its pass.
#[derive(Debug)]
pub(super) struct Ended {
    pub(super) attempt_id: i64,
    pub(super) run_id: i64,
    pub(super) job_id: i64,
    pub(super) namespace: NamespaceId,
    pub(super) end: AttemptEnd,
    /// The executor, when this is a plain success: the run's only shard, no output, and a
    /// job that queues nothing behind it and has no children (so nothing else changes when
    /// it ends).
    pub(super) simple_success: Option<String>,
    /// The flow key of its run (*Flow control*), admitted again once a plain success ends it.
    pub(super) flow_key: Option<String>,
}

/// What a delivery produced: an attempt to end (answered at once), or nothing more to do.
pub(super) type Delivered = Result<Option<Ended>, store::Error>;

/// A run's first attempt (of shard 0) was taken by an executor, sent at `sent_ms`: the run's
/// lateness. Called once per attempt: after its `202` was recorded, or with its result.
pub(super) fn first_taken(observer: &Observer, offer: &Offer, sent_ms: i64) {
    let a = &offer.attempt;
    if a.attempt_no == 1 && a.shard_index == 0 {
        // Late from when it was due: its instant plus the job's jitter.
        observer.first_dispatch(
            a.run_id,
            a.job_id,
            offer.scheduled_at_ms.max(a.not_before_ms),
            sent_ms,
            &offer.policy,
        );
    }
}

/// What an executor's answer to an offer means: `None` to offer it to the next executor.
pub(super) async fn settle(
    store: &dyn Store,
    observer: &Observer,
    offer: &Offer,
    executor_id: &str,
    sent_ms: i64,
    delivery: Delivery,
) -> Option<Delivered> {
    observer.metrics.dispatches.add(delivery.outcome(), 1);
    let attempt = &offer.attempt;
    let (ending, output, error) = match delivery {
        Delivery::Accepted => {
            let recorded = store
                .attempt_dispatched(attempt.attempt_id, executor_id, offer.timeout_ms)
                .await;
            if matches!(recorded, Ok(true)) {
                first_taken(observer, offer, sent_ms);
            }
            return Some(recorded.map(|_| None));
        }
        Delivery::Finished(result) => {
            first_taken(observer, offer, sent_ms);
            (
                Ending::Reported(result.outcome),
                result.output,
                result.error,
            )
        }
        Delivery::TryAnother(_, why) => {
            debug!(run_id = attempt.run_id, attempt_id = attempt.attempt_id, trace_id = observer.traces.trace_id(attempt.run_id), executor = %executor_id, why, "offering to the next executor");
            return None;
        }
        Delivery::Refused(why) => (Ending::Refused, None, Some(why)),
    };
    let end = end_of(
        &offer.policy,
        attempt,
        Some(executor_id),
        ending,
        output.as_ref(),
        error,
    );
    let simple = store::PlainSuccessCheck {
        end: &end,
        shard_total: attempt.shard_total,
        // A run queued behind it (overlap `queue`) is released by the full end.
        job_queues: offer.policy.overlap == Overlap::Queue,
        run_has_input: offer.request.input.is_some(),
    }
    .holds();
    Some(Ok(Some(Ended {
        attempt_id: attempt.attempt_id,
        run_id: attempt.run_id,
        job_id: attempt.job_id,
        namespace: offer.namespace,
        end,
        simple_success: simple.then(|| executor_id.to_owned()),
        flow_key: flow_key_of(offer),
    })))
}

/// The key a run of `offer` was admitted under, as its policy and arguments give it (the
/// start pass put it in line by the same rule).
fn flow_key_of(offer: &Offer) -> Option<String> {
    let flow = offer.policy.flow.as_ref()?;
    let args = offer.attempt.args().ok()?;
    flow.key_of(offer.namespace.0, &args).ok()
}

/// Settles in flight at once (each the answers gathered while the others ran, in
/// transactions of [`SETTLE_CHUNK`]); two let the database store one batch while the next
/// gathers.
const SETTLES_IN_FLIGHT: u32 = 2;

/// Most answers stored in one transaction. A pass may hold 32,768; their settle as one
/// statement neared the 2 s statement timeout when the database was overloaded (20,000
/// jobs/s), and a settle that times out sends every attempt of its pass out again.
const SETTLE_CHUNK: usize = 4_096;

/// How often a settle is tried before its attempts are left to go out again.
const SETTLE_TRIES: u32 = 4;

/// A settle slower than this is logged.
const SLOW_SETTLE: Duration = Duration::from_millis(1_000);

/// The passes' answers still being stored. Their attempts are live in the database until the
/// settle commits, so a pass that reads them again must not offer them again; nor may a pass
/// whose read began before the commit, and so may have seen them still live. An attempt is
/// forgotten only by a pass whose read began after its settle ended.
#[derive(Debug)]
pub(super) struct Settling {
    /// Attempt id → the number of reads begun when its settle ended (`u64::MAX` while it
    /// runs).
    attempts: Mutex<HashMap<i64, u64>>,
    /// Reads of due attempts begun so far.
    reads: AtomicU64,
    slots: Arc<Semaphore>,
}

impl Settling {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            attempts: Mutex::new(HashMap::new()),
            reads: AtomicU64::new(0),
            slots: Arc::new(Semaphore::new(SETTLES_IN_FLIGHT as usize)),
        })
    }

    fn attempts(&self) -> MutexGuard<'_, HashMap<i64, u64>> {
        self.attempts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks the start of a read of due attempts; pass what it returns to
    /// [`Settling::skip_settling`] with what the read returned.
    pub(super) fn begin_read(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Drops from `due`, read from `read`, the attempts whose answers are being stored or were
    /// stored after the read began.
    pub(super) fn skip_settling(&self, read: u64, due: &mut Vec<DueAttempt>) {
        let held = self.held_at(read);
        if !held.is_empty() {
            due.retain(|d| !held.contains_key(&d.attempt.attempt_id));
        }
    }

    /// Forgets the answers stored before read `read` began (it saw them ended, or live again
    /// after a settle that failed, to be offered again) and returns the rest.
    fn held_at(&self, read: u64) -> MutexGuard<'_, HashMap<i64, u64>> {
        let mut held = self.attempts();
        held.retain(|_, ended_at| *ended_at >= read);
        held
    }

    /// Holds `ids` from the passes that read due attempts (their delivery or their settle
    /// runs) until [`Settling::release`].
    pub(super) fn hold(&self, ids: &[i64]) {
        self.attempts().extend(ids.iter().map(|id| (*id, u64::MAX)));
    }

    /// Lets the reads that begin from now on see `ids` again.
    pub(super) fn release(&self, ids: &[i64]) {
        let now = self.reads.load(Ordering::SeqCst);
        let mut settling = self.attempts();
        for id in ids {
            settling.insert(*id, now);
        }
    }

    /// Waits for every settle in flight (when the dispatcher stops).
    pub(super) async fn wait_all(&self) {
        let _all = self.slots.acquire_many(SETTLES_IN_FLIGHT).await;
    }
}

impl Dispatcher {
    /// Ends attempts answered at once, in the background: the pass delivers on while they
    /// are stored. It waits for a free slot, so no more than [`SETTLES_IN_FLIGHT`] settles are
    /// ever outstanding.
    /// A settle that fails leaves its attempts live: a later pass offers them again, as one
    /// would after a node died between an executor's answer and its record.
    pub(super) async fn settle_in_background(&self, ended: Vec<Ended>) {
        if ended.is_empty() {
            return;
        }
        // Closed never: the semaphore lives as long as the dispatcher.
        let slot = Arc::clone(&self.settling.slots).acquire_owned().await.ok();
        let ids: Vec<i64> = ended.iter().map(|e| e.attempt_id).collect();
        self.settling.hold(&ids);
        let store = Arc::clone(&self.store);
        let observer = self.observer.clone();
        // Runs in line behind flow keys these ends admitted may start: the start pass is woken
        // rather than left to its tick.
        let admits = ended.iter().any(|e| e.flow_key.is_some());
        let wake = Arc::clone(&self.wake);
        // Released however the task ends (a panic, a runtime shutting down): a held id left
        // behind would keep its attempt from this node's passes for good.
        let held = HeldUntilStored {
            settling: Arc::clone(&self.settling),
            ids,
            _slot: slot,
        };
        tokio::spawn(async move {
            let held = held;
            let began = std::time::Instant::now();
            let mut tries = 1;
            // Storing an answer again is a no-op (every update is guarded by the attempt's live
            // state), so a settle the database refused (SQLite's lock wait, a statement
            // timeout under overload) is tried again while its attempts stay held: giving up
            // sends them out again.
            let stored = loop {
                match end_together(&*store, &observer, &ended).await {
                    Err(err) if tries < SETTLE_TRIES => {
                        debug!(error = %err, tries, "storing executors' answers failed; trying again");
                        tokio::time::sleep(Duration::from_millis(100 << tries)).await;
                        tries += 1;
                    }
                    other => break other,
                }
            };
            if admits && stored.is_ok() {
                wake.notify_one();
            }
            match stored {
                Ok(count) if began.elapsed() > SLOW_SETTLE => {
                    warn!(took = ?began.elapsed(), count, "slow settle of answered attempts");
                }
                Ok(_) => {}
                Err(err) => {
                    warn!(error = %err, attempts = held.ids.len(), "storing executors' answers failed; the attempts stay live and go out again");
                }
            }
        });
    }
}

/// A settle's attempts, held from this node's passes, and its slot: both released when the
/// settle ends, however it ends.
struct HeldUntilStored {
    settling: Arc<Settling>,
    ids: Vec<i64>,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Drop for HeldUntilStored {
    fn drop(&mut self) {
        self.settling.release(&self.ids);
    }
}

/// Plain successes of one executor and namespace: their attempts, and the flow keys of their
/// runs as their offers give them.
type PlainSuccesses = (Vec<i64>, Vec<String>);

/// Ends the attempts answered at once during a pass; returns how many.
async fn end_together(
    store: &dyn Store,
    observer: &Observer,
    ended: &[Ended],
) -> Result<usize, store::Error> {
    // Plain successes end in two statements per executor (and namespace, whose runs they count
    // as); the rest one by one, together.
    let mut simple: HashMap<(&str, NamespaceId), PlainSuccesses> = HashMap::new();
    let mut outputs: HashMap<i64, String> = HashMap::new();
    // The others end together; `runs_of_rest` names each one's run, job and namespace, in order.
    let mut rest = Vec::new();
    let mut runs_of_rest = Vec::new();
    for done in ended {
        match &done.simple_success {
            Some(executor) => {
                let (attempts, keys) = simple
                    .entry((executor.as_str(), done.namespace))
                    .or_default();
                attempts.push(done.attempt_id);
                keys.extend(done.flow_key.clone());
                if let Some(output) = &done.end.output {
                    outputs.insert(done.attempt_id, output.clone());
                }
            }
            None => {
                runs_of_rest.push((done.run_id, done.job_id, done.namespace));
                rest.push((done.attempt_id, done.end.clone()));
            }
        }
    }
    // What the settle spans need, gathered only when spans are recorded.
    let traced = observer.traces.exporting();
    let began = std::time::SystemTime::now();
    let mut run_ends = Vec::new();
    let mut count = 0;
    for ((executor, namespace), (attempts, keys)) in simple {
        let last = attempts.len().saturating_sub(1) / SETTLE_CHUNK;
        for (i, chunk) in attempts.chunks(SETTLE_CHUNK).enumerate() {
            // The keys are admitted once, with the last chunk: after every run of theirs here
            // has ended.
            let keys: &[String] = if i == last { &keys } else { &[] };
            let with_output: Vec<(i64, String)> = chunk
                .iter()
                .filter_map(|id| outputs.remove(id).map(|output| (*id, output)))
                .collect();
            let runs = store
                .attempts_succeed(executor, chunk, &with_output, keys)
                .await?;
            observer.runs_succeeded(namespace, runs);
            count += chunk.len();
        }
    }
    let chunks = rest
        .chunks(SETTLE_CHUNK)
        .zip(runs_of_rest.chunks(SETTLE_CHUNK));
    for (rest, runs_of_rest) in chunks {
        let outcomes = store.attempts_end(rest).await?;
        for (((run_id, job_id, namespace), (attempt_id, end)), outcome) in
            runs_of_rest.iter().zip(rest).zip(&outcomes)
        {
            if traced {
                run_ends.push((*attempt_id, outcome.clone()));
            }
            observer.attempt_ended(
                outcome,
                *run_id,
                *job_id,
                Some(*namespace),
                end.error.as_deref(),
            );
        }
        count += rest.len();
    }
    if traced {
        let times = (began, std::time::SystemTime::now());
        let run_ends: HashMap<i64, AttemptEnded> = run_ends.into_iter().collect();
        for done in ended {
            let run_state = match run_ends.get(&done.attempt_id) {
                Some(AttemptEnded::RunEnded(state)) => Some(state.as_str()),
                Some(_) => None,
                // A plain success is its run's only shard: the run succeeded with it.
                None => Some(done.end.state.as_str()),
            };
            observer.traces.settled(
                (done.run_id, done.attempt_id),
                done.end.state.as_str(),
                run_state,
                times,
            );
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::{HeldUntilStored, Settling};

    #[test]
    fn a_settle_that_ends_any_way_releases_its_attempts() {
        let settling = Settling::new();
        settling.hold(&[3]);
        let held = HeldUntilStored {
            settling: std::sync::Arc::clone(&settling),
            ids: vec![3],
            _slot: None,
        };
        // A settle task that panicked or was dropped mid-way ends here too.
        drop(held);
        let next = settling.begin_read();
        assert!(settling.held_at(next).is_empty());
    }

    #[test]
    fn an_answer_is_held_from_every_read_that_may_have_seen_it_live() {
        let settling = Settling::new();
        let before = settling.begin_read();
        settling.hold(&[7, 8]);
        assert!(settling.held_at(before).contains_key(&7));
        let during = settling.begin_read();
        settling.release(&[7, 8]);
        // Begun before the commit, that read may have seen them still pending.
        assert!(settling.held_at(during).contains_key(&7));
        assert!(settling.held_at(during).contains_key(&8));
        // Begun after it, a read sees them ended (or live again after a settle that failed,
        // and then they must go out again): they are forgotten.
        let after = settling.begin_read();
        assert!(settling.held_at(after).is_empty());
    }

    #[test]
    fn answers_of_another_settle_stay_held_while_it_runs() {
        let settling = Settling::new();
        settling.hold(&[1]);
        settling.hold(&[2]);
        settling.release(&[1]);
        let next = settling.begin_read();
        let held = settling.held_at(next);
        assert!(!held.contains_key(&1));
        assert!(held.contains_key(&2));
    }
}
