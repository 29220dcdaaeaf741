//! Backfills: every instant of a past range of a job's schedule, fired once each.
//!
//! The owner of the job's partition steps each running backfill every poll: it counts the
//! job's unfinished runs, and claims as many of the range's next instants as leave at most
//! `max_in_flight` unfinished (under an overlap rule other than `allow`, one at a time and only
//! when the job has no unfinished run at all), so a backfill of a year of a minutely job never
//! floods the executors. A step is one transaction fenced by the partition's epoch and the
//! backfill's cursor, and each run goes in under the unique key `(job_id, scheduled_at_ms)`:
//! an instant that already has a run (it fired on schedule, or an earlier step) keeps it.

use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::cluster::LocalView;
use crate::jobs::{JobPolicy, Overlap, window_of};
use crate::observe::NodeMetrics;
use crate::schedule::calendar::Calendar;
use crate::schedule::{NextHints, Schedule, ScheduleSpec, parse_zone};
use crate::states::{RunState, TriggerKind};
use crate::store::{
    self, BackfillRecord, BackfillStep, JobRecord, JobStore, NamespaceId, PolicyStore,
};

/// Most instants one step claims, whatever `max_in_flight` allows.
const MAX_STEP: usize = 100;

/// The task that steps the backfills of this node's partitions.
#[derive(Debug)]
pub struct BackfillDriver {
    /// Backfills, their steps and the runs they wait for.
    policies: Arc<dyn PolicyStore>,
    jobs: Arc<dyn JobStore>,
    view: Arc<LocalView>,
    every: Duration,
    dispatcher: Arc<tokio::sync::Notify>,
    metrics: Arc<NodeMetrics>,
}

impl BackfillDriver {
    pub fn new(
        policies: Arc<dyn PolicyStore>,
        jobs: Arc<dyn JobStore>,
        view: Arc<LocalView>,
        every: Duration,
        dispatcher: Arc<tokio::sync::Notify>,
        metrics: Arc<NodeMetrics>,
    ) -> Self {
        Self {
            policies,
            jobs,
            view,
            every,
            dispatcher,
            metrics,
        }
    }

    pub async fn run(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(self.every) => {}
            }
            if let Err(err) = self.pass().await {
                warn!(error = %err, "stepping backfills failed; trying again");
            }
        }
    }

    async fn pass(&self) -> Result<(), store::Error> {
        let owned = self.view.owned_partitions();
        let partitions: Vec<i64> = owned.iter().map(|p| p.partition_id).collect();
        for backfill in self.policies.backfills_running(&partitions).await? {
            let Some(epoch) = owned
                .iter()
                .find(|p| p.partition_id == backfill.partition_id)
                .map(|p| p.epoch)
            else {
                continue;
            };
            let Some(step) = self.plan(&backfill, epoch).await? else {
                continue;
            };
            let claimed = step.instants.len();
            match self
                .policies
                .backfill_step(self.view.node_id(), &step)
                .await?
            {
                Some(fired) => {
                    if fired > 0 {
                        self.metrics.fires.add(
                            step.namespace_id.0,
                            TriggerKind::Backfill.as_str(),
                            fired,
                        );
                        self.dispatcher.notify_one();
                    }
                    debug!(
                        backfill = backfill.backfill_id,
                        claimed, fired, "backfill stepped"
                    );
                    if step.done {
                        info!(
                            backfill = backfill.backfill_id,
                            job_id = backfill.job_id,
                            "backfill done"
                        );
                    }
                }
                None => debug!(
                    backfill = backfill.backfill_id,
                    "backfill step refused (moved, cancelled or raced)"
                ),
            }
        }
        Ok(())
    }

    /// The next step of `backfill`, if it may take one now.
    async fn plan(
        &self,
        backfill: &BackfillRecord,
        epoch: i64,
    ) -> Result<Option<BackfillStep>, store::Error> {
        let job = self.jobs.job_get(backfill.job_id).await?;
        // A step's runs are its job's: in its namespace, at its priority (the middle one when
        // its policy does not read; such a step has no instant).
        let namespace_id = job
            .as_ref()
            .map_or(NamespaceId::DEFAULT, |j| j.namespace_id);
        let priority = job
            .as_ref()
            .and_then(|j| j.policy().ok())
            .map_or(5, |p| i64::from(p.priority));
        let step = |instants, cursor_ms, done, message: Option<String>| BackfillStep {
            backfill_id: backfill.backfill_id,
            partition_id: backfill.partition_id,
            epoch,
            expected_cursor_ms: backfill.cursor_ms,
            cursor_ms,
            instants,
            priority,
            namespace_id,
            done,
            message,
        };
        let Some(job) = job else {
            let why = Some("the job was deleted".to_owned());
            return Ok(Some(step(Vec::new(), backfill.cursor_ms, true, why)));
        };
        let (schedule, policy) = match parsed(&job) {
            Ok(parsed) => parsed,
            Err(why) => return Ok(Some(step(Vec::new(), backfill.cursor_ms, true, Some(why)))),
        };
        let room = if policy.overlap == Overlap::Allow {
            let range = (backfill.from_ms, backfill.to_ms);
            let unfinished = self
                .policies
                .runs_unfinished_count(job.job_id, Some(range))
                .await?;
            backfill.max_in_flight - unfinished
        } else {
            i64::from(
                self.policies
                    .runs_unfinished_count(job.job_id, None)
                    .await?
                    == 0,
            )
        };
        let room = usize::try_from(room).unwrap_or(0).min(MAX_STEP);
        if room == 0 {
            return Ok(None);
        }
        let calendars = self.calendars(job.namespace_id, &policy.calendars).await?;
        // An `every` schedule keeps the grid of the job's (last) start.
        let hints = NextHints {
            anchor: job.started_at_ms.and_then(DateTime::from_timestamp_millis),
            cursor: None,
        };
        let mut instants = Vec::with_capacity(room);
        let mut cursor = backfill.cursor_ms;
        let mut done = false;
        while instants.len() < room {
            let next = DateTime::from_timestamp_millis(cursor)
                .map(|after| schedule.next_after(after, hints));
            let next = match next {
                Some(Ok(Some(n))) if n.timestamp_millis() <= backfill.to_ms => n,
                Some(Err(err)) => {
                    let why = format!("the schedule cannot be searched: {}", err.message);
                    return Ok(Some(step(instants, cursor, true, Some(why))));
                }
                _ => {
                    done = true;
                    break;
                }
            };
            cursor = next.timestamp_millis();
            let skipped = calendars.iter().find_map(|(name, calendar)| {
                calendar
                    .excludes(next)
                    .map(|why| format!("in calendar {name:?}: {why}"))
            });
            instants.push(match skipped {
                Some(why) => (cursor, RunState::Skipped, Some(why)),
                None => (cursor, RunState::Pending, None),
            });
        }
        if !done {
            // The range may end right after the last instant taken: say so in this step.
            let after = DateTime::from_timestamp_millis(cursor)
                .map(|after| schedule.next_after(after, hints));
            done = !matches!(after, Some(Ok(Some(n))) if n.timestamp_millis() <= backfill.to_ms);
        }
        Ok(Some(step(instants, cursor, done, None)))
    }

    async fn calendars(
        &self,
        namespace: NamespaceId,
        names: &[String],
    ) -> Result<Vec<(String, Calendar)>, store::Error> {
        let mut calendars = Vec::with_capacity(names.len());
        for name in names {
            let parsed = self
                .policies
                .calendar_get(namespace, name)
                .await?
                .and_then(|r| Calendar::from_stored(&r.definition_json).ok());
            if let Some(calendar) = parsed {
                calendars.push((name.clone(), calendar));
            }
        }
        Ok(calendars)
    }
}

/// A job's schedule within its bounds, and its policy; why not, when they cannot be read.
fn parsed(job: &JobRecord) -> Result<(Schedule, JobPolicy), String> {
    let spec: ScheduleSpec = serde_json::from_str(&job.schedule_json)
        .map_err(|e| format!("unreadable schedule: {e}"))?;
    let policy = job.policy().map_err(|e| e.to_string())?.clone();
    let zone = parse_zone(&job.timezone).map_err(|e| e.to_string())?;
    let window = window_of(policy.bounds.as_ref(), zone).map_err(|e| e.to_string())?;
    let schedule = Schedule::parse(&spec, zone)
        .map_err(|e| e.to_string())?
        .within(window);
    if schedule.fixed_delay().is_some() {
        return Err("a fixed_delay schedule has no instants of its own to backfill".to_owned());
    }
    Ok((schedule, policy))
}
