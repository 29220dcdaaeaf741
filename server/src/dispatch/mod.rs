//! Dispatch: each node sends the runs of the partitions it owns to executors.
//!
//! The attempts table is the queue and the database is the truth: a run claimed by the
//! scheduler is `pending`; the owner's `Dispatcher` starts it (one attempt per shard), offers
//! each due attempt to executors in the order its balancer gives, and watches running attempts
//! for timeouts and lost executors. Results arrive at any node (`finish::finish_attempt`), which
//! ends the attempt and queues a retry or ends the run in the same transaction. Because all
//! state is in the database, a partition's next owner picks up exactly where the last stopped.
//!
//! The fire path after the claim reads as its stages, one file each:
//! - `start`: a pending run gets its first attempts (one per shard), in one transaction;
//! - `plan`: a due attempt is ordered by priority and given the executors to try, in the
//!   order its balancer says;
//! - `deliver`: offers go out at their instant, batched per executor where it can take them
//!   (`deliver_http`: an HTTP job's call, made by the node itself);
//! - `settle`: what executors answered is stored, the plain successes together;
//! - `watch`: attempts of lost executors fail over, overdue ones time out;
//! - `finish`: one attempt ends (from any node), queueing its retry or ending its run.
//!
//! Architecture invariant: the scheduler never runs user code; executors do, over HTTP.

mod answers;
pub mod backoff;
pub mod balancer;
pub mod client;
mod deliver;
mod deliver_http;
pub mod finish;
mod fleet;
mod flow;
pub mod handles;
pub mod http_jobs;
mod job_secrets;
mod plan;
mod settle;
pub mod sharding;
mod standbys;
mod start;
mod watch;
pub mod xxl;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::cluster::LocalView;
use crate::observe::Observer;
use crate::store::{self, JobRecord, Store};
use balancer::Balancers;
use client::DispatchClient;
use fleet::Fleet;
use http_jobs::HttpJobs;
use plan::DueCursor;
use settle::Settling;

/// The dispatcher's settings.
#[derive(Debug, Clone, Copy)]
pub struct DispatchSettings {
    /// How often the queue is looked at when nothing wakes the dispatcher sooner.
    pub tick: Duration,
    /// An executor not heard from for this long is lost; its attempts move elsewhere.
    pub executor_lease: Duration,
    /// How long a run waits for an executor of its handler to appear before it fails.
    pub no_executor_grace: Duration,
    /// Most runs started, and attempts delivered, per pass. A start pass is mostly its
    /// transaction, so fewer, larger passes start more runs a second: at 10,000 jobs/s on
    /// PostgreSQL, 7,923–9,805 fires/s with 8,192 against 6,007–7,714 with start passes of
    /// 2,048. A delivery pass holding all the attempts of a busy instant offers them together:
    /// at 20,000 jobs/s, 17,842 fires/s with 32,768 against 16,111 with 8,192
    /// (`bench/README.md`).
    pub batch: i64,
    /// Attempts due this soon are planned now and delivered at their instant (the scheduler
    /// claims runs as long ahead).
    pub deliver_ahead: Duration,
    /// Deliver nothing before the database's standbys have it (`standbys`).
    pub wait_for_standbys: bool,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        Self {
            tick: Duration::from_millis(100),
            executor_lease: Duration::from_secs(5),
            no_executor_grace: Duration::from_secs(30),
            batch: 32_768,
            deliver_ahead: deliver_ahead(crate::scheduler::DEFAULT_CLAIM_AHEAD),
            wait_for_standbys: true,
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
    settling: Arc<Settling>,
    /// The dispatches in flight, across passes.
    in_flight: answers::InFlight,
    observer: Observer,
    standby_wait: std::sync::Mutex<standbys::StandbyWait>,
    /// Makes HTTP jobs' calls; without it they fail, saying this node makes none.
    http_jobs: Option<Arc<HttpJobs>>,
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
            settling: Settling::new(),
            in_flight: answers::InFlight::new(),
            observer,
            standby_wait: std::sync::Mutex::new(standbys::StandbyWait::default()),
            http_jobs: None,
        }
    }

    /// The dispatcher, making HTTP jobs' calls with `http_jobs`.
    pub fn with_http_jobs(mut self, http_jobs: Arc<HttpJobs>) -> Self {
        self.http_jobs = Some(http_jobs);
        self
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
                    // A claim: the runs it started have their attempts, ready to deliver.
                    _ = self.wake.notified() => self.started.notify_one(),
                    _ = tokio::time::sleep(self.settings.tick) => {}
                }
            }
        };
        // Deliveries run on after the pass that started them; their answers are stored as they
        // come, until the last delivery ends after the stop (its sender, the last, dropped).
        let (answers, answered) = tokio::sync::mpsc::unbounded_channel();
        let delivering = {
            let (this, stop) = (&self, &stop);
            async move {
                loop {
                    if let Err(err) = this.delivery_pass(&answers).await {
                        warn!(error = %err, "delivering attempts failed");
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = this.started.notified() => {}
                        _ = tokio::time::sleep(this.settings.tick) => {}
                    }
                }
            }
        };
        let collecting = self.collect_answers(answered);
        // Runs created by follow-ups (a child's, a workflow step's) start at once, and the
        // workflow runs those ended are counted and alerted on, as any run's end.
        let followed = async {
            let events = self.store.follow_up_events();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    ended = events.next() => {
                        self.wake.notify_one();
                        for run in ended {
                            // A workflow run's end is rare beside its steps': its namespace is
                            // read from its workflow.
                            let namespace = self
                                .store
                                .job_get(run.workflow_id)
                                .await
                                .ok()
                                .flatten()
                                .map(|workflow| workflow.namespace_id);
                            self.observer.workflow_run_ended(
                                run.run_id,
                                run.workflow_id,
                                namespace,
                                run.state,
                            );
                        }
                    }
                }
            }
        };
        // Keys whose queued runs wait on a rate window, or on an end that admitted nothing.
        let flowing = async {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(flow::FLOW_RECHECK) => {}
                }
                if let Err(err) = self.flow_recheck().await {
                    warn!(error = %err, "admitting queued runs of flow keys failed");
                }
            }
        };
        tokio::join!(starting, delivering, collecting, followed, flowing);
        // Answers already received are stored before the dispatcher stops.
        self.settling.wait_all().await;
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

    /// How long work waits for an executor of its handler before it ends (see
    /// [`Fleet::nowhere_to_go`]).
    fn grace_ms(&self) -> i64 {
        millis(self.settings.no_executor_grace)
    }

    /// The healthy executors and their handlers; with what each carries when `with_loads`
    /// (only offers need it: starting a run does not count against capacity).
    async fn fleet(&self, with_loads: bool) -> Result<Fleet, store::Error> {
        let loads = if with_loads {
            self.store.executor_loads().await?
        } else {
            Vec::new()
        };
        let mut fleet = Fleet::new(
            self.store.executors_list(None).await?,
            loads,
            millis(self.settings.executor_lease),
        );
        if with_loads && fleet.has_xxl() {
            fleet.xxl_busy = self
                .store
                .xxl_jobs_running()
                .await?
                .into_iter()
                .map(|r| (r.executor_id, r.job_id))
                .collect();
        }
        Ok(fleet)
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
        for job in store::jobs_of_runs(&*self.store, &missing).await? {
            cache.insert(job.job_id, Some(job));
        }
        Ok(())
    }
}

pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
