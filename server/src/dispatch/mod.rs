//! Dispatch: each node sends the runs of the partitions it owns to executors.
//!
//! The attempts table is the queue and the database is the truth: a run claimed by the
//! scheduler is `pending`; the owner's `Dispatcher` starts it (one attempt per shard), offers
//! each due attempt to executors in the order its balancer gives, and watches running attempts
//! for timeouts and lost executors. Results arrive at any node (`finish::finish_attempt`), which
//! ends the attempt and queues a retry or ends the run in the same transaction. Because all
//! state is in the database, a partition's next owner picks up exactly where the last stopped.
//!
//! Architecture invariant: the scheduler never runs user code; executors do, over HTTP.

pub mod backoff;
pub mod balancer;
pub mod client;
pub mod finish;
pub mod networks;
pub mod sharding;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use carillon_protocol::{Dispatch, PROTOCOL_VERSION, Shard};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cluster::LocalView;
use crate::jobs::{JobPolicy, Overlap, Sharding, jitter_delay_ms};
use crate::observe::Observer;
use crate::store::{
    self, AttemptEnd, AttemptRecord, DueAttempt, ExecutorList, ExecutorRecord, JobRecord,
    NewAttempt, RunRecord, Store, attempt_state, run_state,
};
use balancer::{Balancers, Candidate};
use client::{Delivery, DispatchClient};
use finish::{Ending, end_of, finish_attempt};

/// The dispatcher's settings.
#[derive(Debug, Clone, Copy)]
pub struct DispatchSettings {
    /// How often the queue is looked at when nothing wakes the dispatcher sooner.
    pub tick: Duration,
    /// An executor not heard from for this long is lost; its attempts move elsewhere.
    pub executor_lease: Duration,
    /// How long a run waits for an executor of its handler to appear before it fails.
    pub no_executor_grace: Duration,
    /// Most runs started, and attempts delivered, per pass.
    pub batch: i64,
    /// Attempts due this soon are planned now and delivered at their instant (the scheduler
    /// claims runs as long ahead).
    pub deliver_ahead: Duration,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(100),
            executor_lease: Duration::from_secs(5),
            no_executor_grace: Duration::from_secs(30),
            batch: 8_192,
            deliver_ahead: deliver_ahead(crate::scheduler::DEFAULT_CLAIM_AHEAD),
        }
    }
}

/// How far ahead a delivery pass plans deliveries, given how far ahead runs are claimed: a pass
/// waits for its deliveries, so holding them long would hold up the passes behind it; a quarter
/// second covers a pass's round trips and leaves the runs started earlier waiting in the
/// database.
pub fn deliver_ahead(claim_ahead: Duration) -> Duration {
    claim_ahead.min(Duration::from_millis(250))
}

/// Waiting this long raises an attempt's priority by one, so low priorities are not starved.
const AGEING_STEP_MS: i64 = 10_000;

/// Per-node dispatcher.
#[derive(Debug)]
pub struct Dispatcher {
    store: Arc<dyn Store>,
    view: Arc<LocalView>,
    client: DispatchClient,
    settings: DispatchSettings,
    /// Only planning uses it, never across an `.await`.
    balancers: std::sync::Mutex<Balancers>,
    wake: Arc<Notify>,
    /// Woken when runs started, so their attempts are delivered at once.
    started: Notify,
    report_to: Vec<String>,
    /// Where the next pass resumes reading pending runs and due attempts: a slice per pass,
    /// wrapping around, so work that cannot go anywhere never hides the rest.
    runs_cursor: AtomicI64,
    due_cursor: std::sync::Mutex<DueCursor>,
    observer: Observer,
}

/// Where the next delivery pass resumes in the queue of due attempts, ordered by when they
/// are due. It starts over after a short slice (the queue is drained) and at least every
/// [`DUE_CURSOR_RESTART`], so an attempt that became due behind the cursor (claimed ahead, or
/// a retry) waits at most that long while the queue stays full.
#[derive(Debug)]
struct DueCursor {
    after: Option<(i64, i64)>,
    since: std::time::Instant,
}

const DUE_CURSOR_RESTART: Duration = Duration::from_secs(1);

impl DueCursor {
    fn new() -> Self {
        Self {
            after: None,
            since: std::time::Instant::now(),
        }
    }

    fn current(&mut self) -> Option<(i64, i64)> {
        if self.since.elapsed() >= DUE_CURSOR_RESTART {
            *self = Self::new();
        }
        self.after
    }

    fn advance(&mut self, slice: &[DueAttempt], batch: i64) {
        match slice.last() {
            Some(last) if slice.len() as i64 >= batch => {
                self.after = Some((last.attempt.not_before_ms, last.attempt.attempt_id));
            }
            _ => *self = Self::new(),
        }
    }
}

/// The executors able to take work now, by app, with what each offers and carries.
struct Fleet {
    by_app: HashMap<String, Vec<ExecutorRecord>>,
    /// Handler names by executor id.
    handlers: HashMap<String, HashSet<String>>,
    /// Handler names by app, over every executor ever registered (healthy or not).
    registered_handlers: HashMap<String, HashSet<String>>,
    load: HashMap<String, i64>,
    now_ms: i64,
}

impl Fleet {
    fn new(list: ExecutorList, loads: Vec<(String, i64)>, lease_ms: i64) -> Self {
        let mut by_app: HashMap<String, Vec<ExecutorRecord>> = HashMap::new();
        let mut app_of: HashMap<String, String> = HashMap::new();
        for e in list.executors {
            app_of.insert(e.executor_id.clone(), e.app_name.clone());
            if e.is_healthy(list.now_ms, lease_ms) {
                by_app.entry(e.app_name.clone()).or_default().push(e);
            }
        }
        let mut handlers: HashMap<String, HashSet<String>> = HashMap::new();
        let mut registered_handlers: HashMap<String, HashSet<String>> = HashMap::new();
        for (executor, handler) in list.handlers {
            if let Some(app) = app_of.get(&executor) {
                registered_handlers
                    .entry(app.clone())
                    .or_default()
                    .insert(handler.clone());
            }
            handlers.entry(executor).or_default().insert(handler);
        }
        Self {
            by_app,
            handlers,
            registered_handlers,
            load: loads.into_iter().collect(),
            now_ms: list.now_ms,
        }
    }

    /// Healthy executors of `app` that registered `handler`.
    fn offering(&self, app: &str, handler: &str) -> Vec<&ExecutorRecord> {
        self.by_app
            .get(app)
            .map(|all| {
                all.iter()
                    .filter(|e| {
                        self.handlers
                            .get(&e.executor_id)
                            .is_some_and(|h| h.contains(handler))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn has_room(&self, executor: &ExecutorRecord) -> bool {
        self.load.get(&executor.executor_id).copied().unwrap_or(0) < executor.capacity
    }
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        view: Arc<LocalView>,
        client: DispatchClient,
        settings: DispatchSettings,
        wake: Arc<Notify>,
        report_to: Vec<String>,
        observer: Observer,
    ) -> Self {
        let seed = crate::clock::system_now_ms() as u64;
        Self {
            store,
            view,
            client,
            settings,
            balancers: std::sync::Mutex::new(Balancers::new(seed)),
            wake,
            started: Notify::new(),
            report_to,
            runs_cursor: AtomicI64::new(0),
            due_cursor: std::sync::Mutex::new(DueCursor::new()),
            observer,
        }
    }

    /// Two passes run side by side: one starts pending runs (the database work of creating
    /// their attempts), the other delivers due attempts and stores what executors answered;
    /// so a pass's HTTP never waits for the next runs' inserts, nor those for the HTTP.
    pub async fn run(self, stop: CancellationToken) {
        let starting = async {
            loop {
                match self.start_pass().await {
                    Ok(0) => {}
                    Ok(_) => self.started.notify_one(),
                    Err(err) => warn!(error = %err, "starting runs failed"),
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(self.settings.tick) => {}
                }
            }
        };
        let delivering = async {
            loop {
                if let Err(err) = self.delivery_pass().await {
                    warn!(error = %err, "delivering attempts failed");
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.started.notified() => {}
                    _ = tokio::time::sleep(self.settings.tick) => {}
                }
            }
        };
        tokio::join!(starting, delivering);
    }

    fn due_cursor<T>(&self, f: impl FnOnce(&mut DueCursor) -> T) -> T {
        match self.due_cursor.lock() {
            Ok(mut cursor) => f(&mut cursor),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    fn owned_partitions(&self) -> Vec<i64> {
        self.view
            .owned_partitions()
            .iter()
            .map(|p| p.partition_id)
            .collect()
    }

    /// The healthy executors and their handlers; with what each carries when `with_loads`
    /// (only offers need it: starting a run does not count against capacity).
    async fn fleet(&self, with_loads: bool) -> Result<Fleet, store::Error> {
        let loads = if with_loads {
            self.store.executor_loads().await?
        } else {
            Vec::new()
        };
        Ok(Fleet::new(
            self.store.executors_list(None).await?,
            loads,
            millis(self.settings.executor_lease),
        ))
    }

    /// Starts a slice of pending runs: one attempt per shard, all in one transaction.
    /// Returns how many started.
    async fn start_pass(&self) -> Result<usize, store::Error> {
        let partitions = self.owned_partitions();
        if partitions.is_empty() {
            return Ok(0);
        }
        let cursor = self.runs_cursor.load(Ordering::Relaxed);
        let pending = self
            .store
            .runs_pending(&partitions, cursor, self.settings.batch)
            .await?;
        self.runs_cursor.store(
            next_cursor(&pending, self.settings.batch, |r| r.run_id),
            Ordering::Relaxed,
        );
        if pending.is_empty() {
            return Ok(0);
        }
        let fleet = self.fleet(false).await?;
        let mut jobs: HashMap<i64, Option<JobRecord>> = HashMap::new();
        self.prefetch_jobs(&mut jobs, pending.iter().map(|r| r.job_id))
            .await?;
        let mut starting = Vec::new();
        for run in pending {
            let job = jobs.get(&run.job_id).and_then(Option::as_ref);
            if let Some(attempts) = self.start_run(&run, job, &fleet).await? {
                starting.push((run, attempts));
            }
        }
        if starting.is_empty() {
            return Ok(0);
        }
        let started = self.store.runs_start(&starting).await?;
        debug!(started, "runs started");
        Ok(started)
    }

    /// Fails over the attempts of lost executors, times out the overdue, then delivers the
    /// attempts due soon, each at its instant, and stores what executors answered at once.
    async fn delivery_pass(&self) -> Result<(), store::Error> {
        let partitions = self.owned_partitions();
        if partitions.is_empty() {
            return Ok(());
        }
        let began = std::time::Instant::now();
        let lease_ms = millis(self.settings.executor_lease);
        let mut fleet = self.fleet(true).await?;
        // The database clock's reading at a local instant: deliveries wait for their instant
        // on the local monotonic clock from here.
        let clock_base = (tokio::time::Instant::now(), fleet.now_ms);
        let mut jobs: HashMap<i64, Option<JobRecord>> = HashMap::new();

        for attempt in self
            .store
            .attempts_orphaned(&partitions, lease_ms, self.settings.batch)
            .await?
        {
            info!(run_id = attempt.run_id, attempt_id = attempt.attempt_id, executor = ?attempt.executor_id, "executor lost the attempt; failing it over");
            let error = Some(
                "the executor stopped heartbeating, or heartbeats without listing it".to_owned(),
            );
            finish_attempt(
                &*self.store,
                &self.observer,
                &attempt,
                Ending::Lost,
                None,
                error,
            )
            .await?;
        }
        for attempt in self
            .store
            .attempts_expired(&partitions, self.settings.batch)
            .await?
        {
            info!(
                run_id = attempt.run_id,
                attempt_id = attempt.attempt_id,
                "attempt timed out"
            );
            // Record the timeout first: the executor's "cancelled" report then finds the attempt
            // ended and changes nothing.
            let error = Some("the job's timeout passed".to_owned());
            finish_attempt(
                &*self.store,
                &self.observer,
                &attempt,
                Ending::TimedOut,
                None,
                error,
            )
            .await?;
            if let Some(address) = self.address_of(&fleet, attempt.executor_id.as_deref()) {
                self.client.cancel(&address, attempt.attempt_id).await;
            }
        }
        let housekeeping = began.elapsed();
        let mut due = self
            .store
            .attempts_due(
                &partitions,
                millis(self.settings.deliver_ahead),
                self.due_cursor(|c| c.current()),
                self.settings.batch,
            )
            .await?;
        self.due_cursor(|c| c.advance(&due, self.settings.batch));
        let due_count = due.len();
        self.prefetch_jobs(&mut jobs, due.iter().map(|d| d.attempt.job_id))
            .await?;
        // Highest effective priority first: waiting raises it, so nothing starves.
        let now = fleet.now_ms;
        due.sort_by_key(|d| {
            let a = &d.attempt;
            let aged = a.priority + (now - a.created_at_ms).max(0) / AGEING_STEP_MS;
            (std::cmp::Reverse(aged), a.attempt_id)
        });
        // Offers are planned in priority order, then delivered concurrently (one slow
        // executor must not hold up the rest), each at its instant; the attempts answered at
        // once with their result end together, in one transaction.
        let mut delivering = tokio::task::JoinSet::new();
        let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
        let mut ended = Vec::new();
        // Offers due at one instant for one batch-taking executor go in one request.
        let mut batches: HashMap<(String, i64), Vec<Offer>> = HashMap::new();
        let mut singles = Vec::new();
        for due in due {
            let job = jobs.get(&due.attempt.job_id).and_then(Option::as_ref);
            let planned = self
                .plan(&due.attempt, due.scheduled_at_ms, job, &mut fleet)
                .await?;
            match planned {
                Some(offer) if offer.first_takes_batches => {
                    let first = offer.targets.first().map(|(id, _)| id.clone());
                    let key = (first.unwrap_or_default(), offer.attempt.not_before_ms);
                    batches.entry(key).or_default().push(offer);
                }
                Some(offer) => singles.push(offer),
                None => {}
            }
        }
        let deliveries = singles.into_iter().map(|offer| vec![offer]).chain(
            batches
                .into_values()
                .flat_map(|offers| chunked(offers, MAX_BATCH)),
        );
        for offers in deliveries {
            let Some(due_ms) = offers.first().map(|o| o.attempt.not_before_ms) else {
                continue;
            };
            let store = Arc::clone(&self.store);
            let client = self.client.clone();
            let view = Arc::clone(&self.view);
            let observer = self.observer.clone();
            let in_flight = Arc::clone(&in_flight);
            let wait_ms = u64::try_from(due_ms - clock_base.1).unwrap_or(0);
            let at = clock_base.0 + Duration::from_millis(wait_ms);
            delivering.spawn(async move {
                tokio::time::sleep_until(at).await;
                // Closed never: the semaphore lives as long as the pass.
                let _permit = in_flight.acquire_owned().await.ok();
                // A partition that moved away (or a lapsed lease) while the delivery waited for
                // its instant: its attempts stay pending for the next owner.
                let offers: Vec<Offer> = offers
                    .into_iter()
                    .filter(|o| view.owns(o.attempt.partition_id))
                    .collect();
                deliver_batch(&*store, &client, &observer, offers).await
            });
        }
        drain(&mut delivering, &mut ended).await;
        let delivered = began.elapsed();
        // Plain successes end in two statements per executor; the rest one by one, together.
        let mut simple: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        // The others end together; `runs_of_rest` names each one's run and job, in order.
        let mut rest = Vec::new();
        let mut runs_of_rest = Vec::new();
        for done in ended.into_iter().flatten() {
            match done.simple_success {
                Some(executor) => simple
                    .entry(executor)
                    .or_default()
                    .push((done.attempt_id, done.run_id)),
                None => {
                    runs_of_rest.push((done.run_id, done.job_id));
                    rest.push((done.attempt_id, done.end));
                }
            }
        }
        let mut ended = 0;
        for (executor, attempts) in simple {
            let runs = self.store.attempts_succeed(&executor, &attempts).await?;
            self.observer.runs_succeeded(runs);
            ended += attempts.len();
        }
        if !rest.is_empty() {
            let outcomes = self.store.attempts_end(&rest).await?;
            for (((run_id, job_id), (_, end)), outcome) in
                runs_of_rest.iter().zip(&rest).zip(&outcomes)
            {
                self.observer
                    .attempt_ended(outcome, *run_id, *job_id, end.error.as_deref());
            }
            ended += rest.len();
        }
        let took = began.elapsed();
        if took > SLOW_PASS {
            warn!(
                ?took,
                ?housekeeping,
                ?delivered,
                due = due_count,
                ended,
                "slow delivery pass"
            );
        }
        Ok(())
    }

    /// Reads the jobs of `job_ids` not yet in `cache` in one statement; a job that no longer
    /// exists is cached as `None`. Every job a pass looks at is read here, once.
    async fn prefetch_jobs(
        &self,
        cache: &mut HashMap<i64, Option<JobRecord>>,
        job_ids: impl Iterator<Item = i64>,
    ) -> Result<(), store::Error> {
        let mut missing: Vec<i64> = job_ids.filter(|id| !cache.contains_key(id)).collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        for id in &missing {
            cache.insert(*id, None);
        }
        for job in self.store.jobs_get_many(&missing).await? {
            cache.insert(job.job_id, Some(job));
        }
        Ok(())
    }

    fn address_of(&self, fleet: &Fleet, executor_id: Option<&str>) -> Option<String> {
        let id = executor_id?;
        fleet
            .by_app
            .values()
            .flatten()
            .find(|e| e.executor_id == id)
            .map(|e| e.address.clone())
    }

    /// Why work of `job` that has waited `waited_ms` with no healthy executor to offer it to
    /// should now end, if it should: after the grace when no executor ever registered the
    /// handler, after ten graces when some did but none is healthy (an executor restarting
    /// during a deploy must not fail runs).
    fn nowhere_to_go(&self, fleet: &Fleet, job: &JobRecord, waited_ms: i64) -> Option<String> {
        let grace = millis(self.settings.no_executor_grace);
        let registered = fleet
            .registered_handlers
            .get(&job.app_name)
            .is_some_and(|h| h.contains(&job.handler_name));
        let (limit, why) = if registered {
            (grace.saturating_mul(10), "no healthy executor")
        } else {
            (grace, "no executor is registered")
        };
        (waited_ms > limit).then(|| {
            format!(
                "{why} for app {:?} (handler {:?}) after {} s",
                job.app_name,
                job.handler_name,
                waited_ms / 1_000
            )
        })
    }

    /// The first attempts of a pending run (one per shard), to be stored; `None` when the run
    /// cannot start now (it waits for an executor, or was ended here).
    async fn start_run(
        &self,
        run: &RunRecord,
        job: Option<&JobRecord>,
        fleet: &Fleet,
    ) -> Result<Option<Vec<NewAttempt>>, store::Error> {
        let Some(job) = job else {
            let message = "the job was deleted";
            if self
                .store
                .run_end(run.run_id, run_state::CANCELLED, Some(message))
                .await?
            {
                self.observer.run_ended(
                    run.run_id,
                    run.job_id,
                    run_state::CANCELLED,
                    Some(message),
                );
            }
            return Ok(None);
        };
        let executors = fleet.offering(&job.app_name, &job.handler_name);
        if executors.is_empty() {
            let waited = fleet.now_ms - run.created_at_ms;
            if let Some(message) = self.nowhere_to_go(fleet, job, waited)
                && self
                    .store
                    .run_end(run.run_id, run_state::NO_EXECUTOR, Some(&message))
                    .await?
            {
                self.observer.run_ended(
                    run.run_id,
                    run.job_id,
                    run_state::NO_EXECUTOR,
                    Some(&message),
                );
            }
            return Ok(None);
        }
        let policy: JobPolicy = serde_json::from_str(&job.policy_json).unwrap_or_default();
        let args: Value = serde_json::from_str(&job.args_json).unwrap_or(Value::Null);
        let mut attempts = shards(&policy.sharding, &args, &executors);
        // Jitter delays the scheduled runs only; a manual run or a backfill goes at once.
        if let Some(max) = policy.jitter_ms
            && matches!(run.trigger_kind.as_str(), "schedule" | "misfire")
        {
            let delay = jitter_delay_ms(run.job_id, run.scheduled_at_ms, max);
            attempts.iter_mut().for_each(|a| a.delay_ms = delay);
        }
        Ok(Some(attempts))
    }

    /// Plans the offer of one attempt to the executors that can take it, in balancer order,
    /// counting it against the first one's capacity; ends it here when it cannot go anywhere.
    async fn plan(
        &self,
        attempt: &AttemptRecord,
        scheduled_at_ms: i64,
        job: Option<&JobRecord>,
        fleet: &mut Fleet,
    ) -> Result<Option<Offer>, store::Error> {
        let Some(job) = job else {
            let error = Some("the job was deleted".to_owned());
            finish_attempt(
                &*self.store,
                &self.observer,
                attempt,
                Ending::Reported(carillon_protocol::Outcome::Cancelled),
                None,
                error,
            )
            .await?;
            return Ok(None);
        };
        let policy: JobPolicy = serde_json::from_str(&job.policy_json).unwrap_or_default();
        let offering = fleet.offering(&job.app_name, &job.handler_name);
        if offering.is_empty() {
            let waited = fleet.now_ms - attempt.not_before_ms.max(attempt.created_at_ms);
            if let Some(message) = self.nowhere_to_go(fleet, job, waited) {
                finish_attempt(
                    &*self.store,
                    &self.observer,
                    attempt,
                    Ending::Refused,
                    None,
                    Some(message),
                )
                .await?;
            }
            return Ok(None);
        }
        let executors: Vec<&ExecutorRecord> =
            offering.into_iter().filter(|e| fleet.has_room(e)).collect();
        if executors.is_empty() {
            return Ok(None); // capacity is short: the attempt waits, its priority ageing
        }
        let candidates: Vec<Candidate<'_>> = executors
            .iter()
            .map(|e| Candidate {
                executor_id: &e.executor_id,
                weight: u32::try_from(e.weight).unwrap_or(1),
                load: u32::try_from(fleet.load.get(&e.executor_id).copied().unwrap_or(0))
                    .unwrap_or(u32::MAX),
                capacity: u32::try_from(e.capacity).unwrap_or(1),
            })
            .collect();
        let group = format!("{}/{}", job.app_name, job.handler_name);
        let key = (job.job_id as u64) ^ (attempt.shard_index as u64).rotate_left(32);
        let mut order = match self.balancers.lock() {
            Ok(mut balancers) => balancers.order(
                policy.balance,
                &group,
                &candidates,
                key,
                attempt.avoid_executor_id.as_deref(),
            ),
            // A panic while planning left it poisoned; its state is only rotation counters.
            Err(poisoned) => poisoned.into_inner().order(
                policy.balance,
                &group,
                &candidates,
                key,
                attempt.avoid_executor_id.as_deref(),
            ),
        };
        // A shard meant for one executor goes there first.
        if let Some(preferred) = attempt.executor_id.as_deref()
            && let Some(pos) = order
                .iter()
                .position(|&i| candidates[i].executor_id == preferred)
        {
            let first = order.remove(pos);
            order.insert(0, first);
        }
        let request = Dispatch {
            protocol: PROTOCOL_VERSION,
            run_id: attempt.run_id,
            attempt_id: attempt.attempt_id,
            attempt: u32::try_from(attempt.attempt_no).unwrap_or(u32::MAX),
            job_id: job.job_id,
            job: job.name.clone(),
            handler: job.handler_name.clone(),
            args: serde_json::from_str(&attempt.args_json).unwrap_or(Value::Null),
            shard: Shard {
                index: u32::try_from(attempt.shard_index).unwrap_or(0),
                total: u32::try_from(attempt.shard_total).unwrap_or(1),
            },
            scheduled_at: crate::api::rfc3339(scheduled_at_ms).unwrap_or_default(),
            timeout_ms: policy.timeout_ms,
            report_to: self.report_to.clone(),
        };
        let targets: Vec<(String, String)> = order
            .iter()
            .map(|&i| {
                (
                    executors[i].executor_id.clone(),
                    executors[i].address.clone(),
                )
            })
            .collect();
        let first_takes_batches = order.first().is_some_and(|&i| executors[i].takes_batches());
        if let Some((first, _)) = targets.first() {
            *fleet.load.entry(first.clone()).or_default() += 1;
        }
        Ok(Some(Offer {
            attempt: attempt.clone(),
            scheduled_at_ms,
            request,
            targets,
            first_takes_batches,
            timeout_ms: policy
                .timeout_ms
                .map_or(0, |t| i64::try_from(t).unwrap_or(i64::MAX)),
            policy,
        }))
    }
}

/// A delivery pass slower than this is logged with where its time went (a pass waits up to
/// [`deliver_ahead`] for the instants it holds, so this leaves most of a second of work).
const SLOW_PASS: Duration = Duration::from_millis(1_000);

/// Most dispatches of one node in flight at once.
const MAX_IN_FLIGHT: usize = 128;

/// An attempt an executor answered at once, to end with the others of its pass.
#[derive(Debug)]
struct Ended {
    attempt_id: i64,
    run_id: i64,
    job_id: i64,
    end: AttemptEnd,
    /// The executor, when this is a plain success: the run's only shard, no output, and a
    /// job that queues nothing behind it (so nothing else changes when it ends).
    simple_success: Option<String>,
}

/// What a delivery produced: an attempt to end (answered at once), or nothing more to do.
type Delivered = Result<Option<Ended>, store::Error>;

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

/// Waits for every delivery.
async fn drain(tasks: &mut tokio::task::JoinSet<Vec<Delivered>>, ended: &mut Vec<Option<Ended>>) {
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(products) => {
                for product in products {
                    keep(Some(Ok(product)), ended);
                }
            }
            Err(err) => keep(Some(Err(err)), ended),
        }
    }
}

/// Keeps a delivery's product; a failed one is logged (its attempt stays in the database and
/// a later pass picks it up again).
fn keep(done: Option<Result<Delivered, tokio::task::JoinError>>, ended: &mut Vec<Option<Ended>>) {
    match done {
        Some(Ok(Ok(product))) => ended.push(product),
        Some(Ok(Err(err))) => warn!(error = %err, "dispatch failed; it will be retried"),
        Some(Err(err)) => warn!(error = %err, "dispatch task failed"),
        None => {}
    }
}

/// An attempt ready to offer: the request, the executors to try in order, and the job's
/// policy (for its timeout and retries).
#[derive(Debug)]
struct Offer {
    attempt: AttemptRecord,
    scheduled_at_ms: i64,
    request: Dispatch,
    /// `(executor_id, address)` in the order to try.
    targets: Vec<(String, String)>,
    /// The first target serves `dispatch-batch`: the offer may go with others due with it.
    first_takes_batches: bool,
    policy: JobPolicy,
    timeout_ms: i64,
}

/// Offers an attempt to its executors in turn until one takes it (`202`: recorded as
/// running) or answers for good (a result or a refusal: returned, to be ended with others).
async fn deliver(
    store: &dyn Store,
    client: &DispatchClient,
    observer: &Observer,
    offer: Offer,
) -> Delivered {
    deliver_from(store, client, observer, &offer, 0).await
}

/// [`deliver`], starting at target `first`.
async fn deliver_from(
    store: &dyn Store,
    client: &DispatchClient,
    observer: &Observer,
    offer: &Offer,
    first: usize,
) -> Delivered {
    for (executor_id, address) in offer.targets.iter().skip(first) {
        let sent_ms = client.now_ms();
        let delivery = client.dispatch(address, &offer.request).await;
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
    let first = offers.first().and_then(|o| o.targets.first()).cloned();
    let (Some((executor_id, address)), true) = (first, offers.len() > 1) else {
        let mut products = Vec::with_capacity(offers.len());
        for offer in offers {
            products.push(deliver(store, client, observer, offer).await);
        }
        return products;
    };
    let requests = offers.iter().map(|o| o.request.clone()).collect();
    let sent_ms = client.now_ms();
    let mut replies = match client.dispatch_batch(&address, requests).await {
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

/// A run's first attempt (of shard 0) was taken by an executor, sent at `sent_ms`: the run's
/// lateness. Called once per attempt: after its `202` was recorded, or with its result.
fn first_taken(observer: &Observer, offer: &Offer, sent_ms: i64) {
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
async fn settle(
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
            debug!(run_id = attempt.run_id, attempt_id = attempt.attempt_id, executor = %executor_id, why, "offering to the next executor");
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
    let simple = end.state == attempt_state::SUCCEEDED
        && end.output.is_none()
        && end.error.is_none()
        && end.retry_after_ms.is_none()
        && attempt.shard_total == 1
        && offer.policy.overlap != Overlap::Queue;
    Some(Ok(Some(Ended {
        attempt_id: attempt.attempt_id,
        run_id: attempt.run_id,
        job_id: attempt.job_id,
        end,
        simple_success: simple.then(|| executor_id.to_owned()),
    })))
}

/// The first attempts of a run: one per shard.
fn shards(sharding: &Sharding, args: &Value, executors: &[&ExecutorRecord]) -> Vec<NewAttempt> {
    let one = |index: usize, total: usize, args: &Value, prefer: Option<&str>| NewAttempt {
        shard_index: index as i64,
        shard_total: total as i64,
        args_json: args.to_string(),
        prefer_executor_id: prefer.map(str::to_owned),
        delay_ms: 0,
    };
    if sharding.broadcast {
        let total = executors.len();
        return executors
            .iter()
            .enumerate()
            .map(|(i, e)| one(i, total, args, Some(&e.executor_id)))
            .collect();
    }
    if let Some(count) = sharding.count {
        let total = count.max(1) as usize;
        return (0..total).map(|i| one(i, total, args, None)).collect();
    }
    if sharding.split
        && let Some(items) = args.as_array()
    {
        let weights: Vec<u32> = executors
            .iter()
            .map(|e| u32::try_from(e.weight).unwrap_or(1))
            .collect();
        let parts: Vec<(usize, std::ops::Range<usize>)> = sharding::split(items.len(), &weights)
            .into_iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .collect();
        if parts.is_empty() {
            return vec![one(0, 1, args, None)];
        }
        let total = parts.len();
        return parts
            .into_iter()
            .enumerate()
            .map(|(index, (executor, range))| {
                let part = Value::Array(items[range].to_vec());
                one(index, total, &part, Some(&executors[executor].executor_id))
            })
            .collect();
    }
    vec![one(0, 1, args, None)]
}

/// After a full slice, resume after its last id; after a short one, start over.
fn next_cursor<T>(slice: &[T], batch: i64, id: impl Fn(&T) -> i64) -> i64 {
    if (slice.len() as i64) < batch {
        0
    } else {
        slice.last().map_or(0, id)
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::next_cursor;

    #[test]
    fn the_cursor_walks_full_slices_and_wraps_after_a_short_one() {
        let full: Vec<i64> = vec![3, 8, 9];
        assert_eq!(
            next_cursor(&full, 3, |x| *x),
            9,
            "a full slice: more may follow"
        );
        assert_eq!(
            next_cursor(&full[..2], 3, |x| *x),
            0,
            "a short slice: start over"
        );
        assert_eq!(next_cursor(&Vec::<i64>::new(), 3, |x| *x), 0);
    }
}
