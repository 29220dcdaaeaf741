//! The scheduler: each node fires the jobs of the partitions it owns.
//!
//! One task per node. It follows `LocalView`'s partitions (loading a partition's running jobs
//! when it arrives, applying their misfire policy, and forgetting them when it leaves), polls
//! job changes made through any node's API, and claims due instants in batches through
//! `Store::runs_claim`, which fences each claim by the partition's epoch and the job's version.
//! The scheduler never runs user code; a claimed run is handed to dispatch.
//!
//! Architecture invariant: an instant becomes a run only through `runs_claim`, whose unique key
//! `(job_id, scheduled_at_ms)` makes it happen at most once cluster-wide; the job's last fired
//! instant advances in the same transaction, so the next owner resumes exactly after it.

pub mod backfill;
mod claims;
mod failover;
mod load;
pub mod misfire;
mod policies;
pub mod timer;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::ClusterClock;
use crate::cluster::LocalView;
use crate::jobs::Overlap;
use crate::observe::{NodeMetrics, SkipNotices, Traces};
use crate::schedule::{NextHints, Schedule};
use crate::states::{JobState, RunState, TriggerKind};
use crate::store::{
    self, JobStore, NamespaceId, OverlapRule, PolicyStore, RunClaim, StandbyStore, Store,
};
use policies::CalendarSet;
use timer::{Timer, TimerEntry};

/// The scheduler's settings.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerSettings {
    /// How often job changes are polled and partitions re-read.
    pub poll_interval: Duration,
    /// An instant later than this is missed (misfire policy), not merely late.
    pub misfire_threshold: Duration,
    /// Most instants claimed in one round, which the claim lanes (four transactions) share by
    /// partition. Each round waits for its slowest lane, so the batch bounds the claim rate.
    /// Since most runs start in their claim (one more insert per run), the claim is the stage
    /// that lags at 10,000 jobs/s: rounds of 2,048 claimed 5,998 fires/s on PostgreSQL here,
    /// 8,192 claimed 7,976-8,879, with p99 at 5,000 jobs/s 32 ms (`bench/README.md`). A round
    /// no larger than what is due within `claim_ahead` commits before its instants.
    pub claim_batch: usize,
    /// Instants are claimed this long before they are due, so the run is stored and started
    /// by then and only its delivery is left at the instant (XXL-JOB reads 5 s ahead).
    pub claim_ahead: Duration,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_millis(500),
            misfire_threshold: Duration::from_secs(60),
            claim_batch: 8_192,
            claim_ahead: DEFAULT_CLAIM_AHEAD,
        }
    }
}

/// See [`SchedulerSettings::claim_ahead`]; the dispatcher holds deliveries as long.
pub const DEFAULT_CLAIM_AHEAD: Duration = Duration::from_millis(1_000);

/// Re-read recent changes with this overlap: a change committed late with an earlier
/// `updated_at` is still seen.
const CHANGE_OVERLAP_MS: i64 = 5_000;
const CHANGE_PAGE: i64 = 10_000;

/// A job this node fires. Kept small and free of heap data, because a node holds hundreds of
/// thousands: the schedule is an index into the node's shared table, and only what claiming
/// needs of the policy is kept (the dispatcher reads the rest when the job fires).
#[derive(Debug, Clone, Copy)]
struct LoadedJob {
    version: i64,
    partition_id: i64,
    /// Carried into its runs' rows.
    namespace_id: NamespaceId,
    anchor_ms: Option<i64>,
    next_ms: Option<i64>,
    /// Index into `Scheduler::schedule_table`, or [`ONE_SHOT`].
    schedule: u32,
    priority: u8,
    overlap: Overlap,
    /// Its instants follow the end of its previous run (`fixed_delay`).
    fixed_delay: bool,
    /// Scheduled instants left under `bounds.max_runs` ([`UNLIMITED`]: no limit).
    runs_left: u32,
    /// Index into `Scheduler::calendar_sets`, or [`NO_CALENDARS`].
    calendars: u32,
    /// Its runs are one attempt each with its own arguments: they start in their claim.
    starts_in_claim: bool,
}

/// `runs_left` of a job without `bounds.max_runs`.
const UNLIMITED: u32 = u32::MAX;
/// `calendars` of a job that names none.
const NO_CALENDARS: u32 = u32::MAX;

/// The schedule index of a one-shot (`at`) job: after its instant there is nothing to compute,
/// so its schedule is not kept (a million delayed tasks are a million distinct instants).
const ONE_SHOT: u32 = u32::MAX;

/// Why a job is being (re)loaded: decides whether missed instants count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoadReason {
    /// Taking over its partition, restarting, or the job was started: misfire policy applies.
    Resume,
    /// Its definition changed while running: the new schedule applies from now on.
    Edit,
}

/// The store as the scheduler uses it: jobs and their claims, the schedule policies' tables,
/// and the database's timeline.
#[derive(Debug, Clone)]
pub struct SchedulerStores {
    pub jobs: Arc<dyn JobStore>,
    pub policies: Arc<dyn PolicyStore>,
    pub standbys: Arc<dyn StandbyStore>,
}

impl SchedulerStores {
    /// The parts of a whole store.
    pub fn of(store: &Arc<dyn Store>) -> Self {
        Self {
            jobs: Arc::clone(store) as Arc<dyn JobStore>,
            policies: Arc::clone(store) as Arc<dyn PolicyStore>,
            standbys: Arc::clone(store) as Arc<dyn StandbyStore>,
        }
    }
}

/// Where the scheduler reports: its counters, each claim's timing, the instants it did not fire.
#[derive(Debug)]
pub struct SchedulerReports {
    pub metrics: Arc<NodeMetrics>,
    pub traces: Traces,
    pub skips: SkipNotices,
}

/// The per-node scheduler.
#[derive(Debug)]
pub struct Scheduler {
    metrics: Arc<NodeMetrics>,
    /// Each claim's timing, for its run's trace.
    traces: Traces,
    /// Instants not fired: counted, and told.
    skips: SkipNotices,
    store: SchedulerStores,
    view: Arc<LocalView>,
    clock: Arc<ClusterClock>,
    settings: SchedulerSettings,
    jobs: HashMap<i64, LoadedJob>,
    partitions: HashMap<i64, i64>,
    timer: Timer,
    pending: Vec<RunClaim>,
    changes_since_ms: Option<i64>,
    /// The key after which the next page of a burst of changes starts.
    changes_page_after: Option<(i64, i64)>,
    /// Parsed recurring schedules, shared by every job with the same expression and zone.
    schedule_table: Vec<Schedule>,
    /// Index into `schedule_table` by zone, then schedule JSON.
    schedule_ids: HashMap<String, HashMap<String, u32>>,
    /// Woken when runs are claimed, so they are dispatched at once rather than at its next tick.
    dispatcher: Arc<tokio::sync::Notify>,
    /// The lists of calendars jobs name, each kept once, by index.
    calendar_sets: Vec<CalendarSet>,
    calendar_set_ids: HashMap<CalendarSet, u32>,
    /// Every calendar as last read, by namespace and name.
    calendars: policies::Calendars,
    /// `fixed_delay` jobs waiting for the run of their last fired instant to end.
    awaiting_end: HashMap<i64, i64>,
    /// Jobs past their bounds, `(job_id, version)`, to be marked `done`.
    exhausted: Vec<(i64, i64)>,
    /// The database's timeline as last read (PostgreSQL; see `failover`).
    timeline: Option<String>,
}

impl Scheduler {
    pub fn new(
        store: SchedulerStores,
        view: Arc<LocalView>,
        clock: Arc<ClusterClock>,
        settings: SchedulerSettings,
        dispatcher: Arc<tokio::sync::Notify>,
        reports: SchedulerReports,
    ) -> Self {
        let SchedulerReports {
            metrics,
            traces,
            skips,
        } = reports;
        Self {
            metrics,
            traces,
            skips,
            store,
            view,
            clock,
            settings,
            jobs: HashMap::new(),
            partitions: HashMap::new(),
            timer: Timer::default(),
            pending: Vec::new(),
            changes_since_ms: None,
            changes_page_after: None,
            schedule_table: Vec::new(),
            schedule_ids: HashMap::new(),
            dispatcher,
            calendar_sets: Vec::new(),
            calendar_set_ids: HashMap::new(),
            calendars: policies::Calendars::default(),
            awaiting_end: HashMap::new(),
            exhausted: Vec::new(),
            timeline: None,
        }
    }

    /// Runs until `stop` is cancelled. Claimed runs are durable, so stopping loses nothing.
    pub async fn run(mut self, stop: CancellationToken) {
        // Until the database clock has been read, this machine's clock is all there is, and
        // it may be minutes off: instants computed from it would be wrong.
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = self.clock.synced() => {}
        }
        // Polls are paced on the monotonic clock: a correction of the cluster clock (its
        // first reading can move it by minutes) must not postpone them.
        let mut next_poll = tokio::time::Instant::now();
        loop {
            match self.follow_timeline().await {
                // Loaded again at once.
                Ok(true) => next_poll = tokio::time::Instant::now(),
                Ok(false) => {}
                Err(err) => {
                    warn!(error = %err, "reading the database's timeline failed; retrying");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    }
                    continue;
                }
            }
            if tokio::time::Instant::now() >= next_poll {
                next_poll = tokio::time::Instant::now() + self.settings.poll_interval;
                if let Err(err) = self.follow_cluster(self.clock.now_ms()).await {
                    warn!(error = %err, "scheduler could not refresh its jobs");
                }
                self.skips.tell_held(self.clock.now_ms());
            }
            let ahead = millis(self.settings.claim_ahead);
            if let Err(err) = self.fire_due(self.clock.now_ms() + ahead).await {
                warn!(error = %err, "claiming due instants failed; retrying");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
                continue;
            }
            let until_due = self.timer.next_due().map_or(Duration::MAX, |due| {
                Duration::from_millis(u64::try_from(due - ahead - self.clock.now_ms()).unwrap_or(0))
            });
            let until_poll = next_poll.saturating_duration_since(tokio::time::Instant::now());
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(until_due.min(until_poll)) => {}
            }
        }
    }

    /// Follows the partitions this node owns and the job changes made anywhere.
    async fn follow_cluster(&mut self, now: i64) -> Result<(), store::Error> {
        // Calendars first: the claims a load makes (catch-ups) check them.
        self.refresh_calendars_if_needed().await?;
        let owned: HashMap<i64, i64> = self
            .view
            .owned_partitions()
            .into_iter()
            .map(|p| (p.partition_id, p.epoch))
            .collect();
        let lost: Vec<i64> = self
            .partitions
            .iter()
            .filter(|(p, e)| owned.get(p) != Some(e))
            .map(|(p, _)| *p)
            .collect();
        for partition in lost {
            self.forget_partition(partition);
        }
        let gained: Vec<(i64, i64)> = owned
            .iter()
            .filter(|(p, _)| !self.partitions.contains_key(p))
            .map(|(p, e)| (*p, *e))
            .collect();
        for (partition, epoch) in gained {
            let jobs = self.store.jobs.jobs_in_partition(partition).await?;
            self.partitions.insert(partition, epoch);
            let count = jobs.len();
            for job in jobs {
                self.load(job, now, LoadReason::Resume);
            }
            debug!(partition, epoch, jobs = count, "partition loaded");
        }
        self.poll_changes(now).await?;
        // A job just loaded may name a calendar created since the read above.
        self.refresh_stale_calendars().await?;
        self.follow_policies().await?;
        self.view.set_jobs_held(self.jobs.len());
        if self.timer.len() > 2 * self.jobs.len() + 1_024 {
            let jobs = &self.jobs;
            self.timer.compact(|e| {
                jobs.get(&e.job_id)
                    .is_some_and(|j| j.version == e.version && j.next_ms == Some(e.due_ms))
            });
        }
        Ok(())
    }

    async fn poll_changes(&mut self, now: i64) -> Result<(), store::Error> {
        // After a full page, the next one starts right after its last row; otherwise a poll
        // re-reads the overlap before the last one (the first poll starts now: loading the
        // partitions read everything older). Resuming a burst with the overlap instead would
        // read the same first page forever once more than a page changed within the overlap.
        let (since, after_job_id) = match self.changes_page_after.take() {
            Some(after) => after,
            None => (
                self.changes_since_ms.unwrap_or(now) - CHANGE_OVERLAP_MS,
                i64::MAX,
            ),
        };
        let changes = self
            .store
            .jobs
            .jobs_changed_since(since, after_job_id, CHANGE_PAGE)
            .await?;
        if changes.changed.len() as i64 >= CHANGE_PAGE {
            self.changes_page_after = changes.changed.last().map(|j| (j.updated_at_ms, j.job_id));
        } else {
            self.changes_since_ms = Some(changes.now_ms);
        }
        for job_id in changes.deleted {
            self.jobs.remove(&job_id);
            self.awaiting_end.remove(&job_id);
        }
        for job in changes.changed {
            if !self.partitions.contains_key(&job.partition_id) {
                continue;
            }
            let known = self.jobs.get(&job.job_id);
            if known.is_some_and(|k| k.version == job.version) {
                continue;
            }
            if job.state != JobState::Running {
                self.jobs.remove(&job.job_id);
                self.awaiting_end.remove(&job.job_id);
                continue;
            }
            let reason = match known {
                Some(k) if k.anchor_ms == job.started_at_ms => LoadReason::Edit,
                _ => LoadReason::Resume,
            };
            self.load(job.into(), now, reason);
        }
        Ok(())
    }

    fn forget_partition(&mut self, partition: i64) {
        self.partitions.remove(&partition);
        let jobs = &self.jobs;
        self.awaiting_end.retain(|job_id, _| {
            jobs.get(job_id)
                .is_some_and(|j| j.partition_id != partition)
        });
        self.jobs.retain(|_, j| j.partition_id != partition);
        self.pending.retain(|c| c.partition_id != partition);
        debug!(partition, "partition released");
    }

    fn claim_for(
        &self,
        job_id: i64,
        job: &LoadedJob,
        at: i64,
        trigger_kind: TriggerKind,
        job_done: bool,
    ) -> Option<RunClaim> {
        let epoch = *self.partitions.get(&job.partition_id)?;
        let skipped = self.calendar_skip(job.calendars, at);
        let (state, message) = match skipped {
            Some(why) => (RunState::Skipped, Some(why)),
            None => (RunState::Pending, None),
        };
        Some(RunClaim {
            job_id,
            namespace_id: job.namespace_id,
            job_version: job.version,
            partition_id: job.partition_id,
            epoch,
            scheduled_at_ms: at,
            trigger_kind,
            priority: i64::from(job.priority),
            state,
            message,
            overlap: match job.overlap {
                Overlap::Allow => OverlapRule::Allow,
                Overlap::Skip => OverlapRule::Skip,
                Overlap::Queue => OverlapRule::Queue,
                Overlap::Replace => OverlapRule::Replace,
            },
            job_done,
            start: job.starts_in_claim
                && state == RunState::Pending
                && job.overlap == Overlap::Allow,
        })
    }

    /// The claim for a timer entry, if the entry is still current; the job's following instant
    /// is computed now, so that a one-shot's claim can also mark the job done.
    fn due_claim(&mut self, entry: TimerEntry) -> Option<RunClaim> {
        let job = *self.jobs.get(&entry.job_id)?;
        if job.version != entry.version || job.next_ms != Some(entry.due_ms) {
            return None;
        }
        let hints = NextHints {
            anchor: job.anchor_ms.and_then(DateTime::from_timestamp_millis),
            cursor: DateTime::from_timestamp_millis(entry.due_ms),
        };
        let search = self
            .schedule_table
            .get(job.schedule as usize)
            .zip(DateTime::from_timestamp_millis(entry.due_ms))
            .map(|(schedule, due)| schedule.next_after(due, hints));
        // A search that gives up (a rule too sparse to replay within its bound) is not the
        // end of the schedule: the job stays running, idle until it is edited or reloaded,
        // and says so, rather than being finished as if its last instant had come.
        let (mut following, mut ended) = match search {
            Some(Ok(next)) => (next.map(|n| n.timestamp_millis()), next.is_none()),
            Some(Err(err)) => {
                warn!(job_id = entry.job_id, error = %err, "cannot find the job's next instant; it stays idle until edited or reloaded");
                (None, false)
            }
            None => (None, true),
        };
        if job.fixed_delay {
            // Its next instant comes from this run's end.
            (following, ended) = (None, false);
        }
        let mut claim = self.claim_for(
            entry.job_id,
            &job,
            entry.due_ms,
            TriggerKind::Schedule,
            ended,
        );
        let counted = claim.as_ref().is_some_and(RunClaim::counts_as_fired);
        if counted && job.runs_left == 1 {
            following = None;
            if let Some(claim) = claim.as_mut() {
                claim.job_done = true;
            }
        }
        if job.fixed_delay && claim.as_ref().is_some_and(|c| !c.job_done) {
            self.awaiting_end.insert(entry.job_id, entry.due_ms);
        }
        if let Some(job) = self.jobs.get_mut(&entry.job_id) {
            if counted && job.runs_left != UNLIMITED {
                job.runs_left = job.runs_left.saturating_sub(1);
            }
            job.next_ms = following;
            if let Some(next) = following {
                self.timer.push(TimerEntry {
                    due_ms: next,
                    job_id: entry.job_id,
                    version: entry.version,
                });
            }
        }
        claim
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
