//! Loading a running job into the scheduler: its parsed schedule (shared by every job with
//! the same expression, zone and bounds), its misfire plan's catch-up claims, its bounds and
//! calendars, and its next instant on the timer.

use chrono::DateTime;
use tracing::{info, warn};

use super::misfire::{LoadPlan, MisfireRule, plan};
use super::timer::TimerEntry;
use super::{LoadReason, LoadedJob, ONE_SHOT, Scheduler, UNLIMITED, millis};
use crate::jobs::{JobPolicy, window_of};
use crate::observe::{SkipReason, SkippedInstants};
use crate::schedule::{NextHints, Schedule, ScheduleSpec, Window, parse_zone};
use crate::states::TriggerKind;
use crate::store::ScheduledJob;

impl Scheduler {
    /// Loads a running job: catch-up claims per its misfire policy, and its next instant.
    pub(super) fn load(&mut self, job: ScheduledJob, now: i64, reason: LoadReason) {
        self.awaiting_end.remove(&job.job_id);
        let policy: JobPolicy = match job.policy() {
            Ok(policy) => policy.clone(),
            Err(e) => {
                warn!(job_id = job.job_id, error = %e, "job not scheduled");
                self.jobs.remove(&job.job_id);
                return;
            }
        };
        let window = parse_zone(&job.timezone)
            .ok()
            .and_then(|zone| window_of(policy.bounds.as_ref(), zone).ok());
        let Some((schedule_index, schedule)) =
            window.and_then(|window| self.schedule_of(&job, window))
        else {
            warn!(
                job_id = job.job_id,
                "job schedule, time zone or bounds unreadable; not scheduled"
            );
            self.jobs.remove(&job.job_id);
            return;
        };
        if schedule.is_manual() {
            // Runs only when triggered; never `done`. (A started one came from an older node.)
            self.jobs.remove(&job.job_id);
            return;
        }
        let runs_left = match policy.bounds.as_ref().and_then(|b| b.max_runs) {
            None => UNLIMITED,
            Some(max) => u32::try_from(
                i64::try_from(max)
                    .unwrap_or(i64::MAX)
                    .saturating_sub(job.fired_count)
                    .max(0),
            )
            .unwrap_or(UNLIMITED - 1),
        };
        if runs_left == 0 {
            info!(
                job_id = job.job_id,
                "the job fired its bounds.max_runs; it is done"
            );
            self.jobs.remove(&job.job_id);
            self.exhausted.push((job.job_id, job.version));
            return;
        }
        let calendars = self.calendar_set_of(job.namespace_id, &policy.calendars);
        self.calendars
            .note_names(job.namespace_id, &policy.calendars);
        if schedule.fixed_delay().is_some() {
            self.load_fixed_delay(
                &job,
                schedule_index,
                &schedule,
                &policy,
                runs_left,
                calendars,
                now,
            );
            return;
        }
        let hints = NextHints {
            anchor: job.started_at_ms.and_then(DateTime::from_timestamp_millis),
            cursor: job
                .last_fired_at_ms
                .and_then(DateTime::from_timestamp_millis),
        };
        // Missed instants count from the last one fired, even across a stop and start; a job
        // that never fired starts from when it was started.
        let from = job
            .last_fired_at_ms
            .or(job.started_at_ms)
            .unwrap_or(job.created_at_ms);
        let rule = MisfireRule {
            policy: policy.misfire,
            threshold_ms: millis(self.settings.misfire_threshold),
            window_ms: i64::try_from(policy.catch_up_window_ms).unwrap_or(i64::MAX),
        };
        let planned = match reason {
            LoadReason::Resume => plan(&schedule, hints, from, now, rule),
            // An edited schedule starts from now (or from its last fired instant, if later).
            LoadReason::Edit => plan(&schedule, hints, from.max(now), now, rule),
        };
        let planned = match planned {
            Ok(p) => p,
            Err(err) => {
                warn!(job_id = job.job_id, error = %err, "cannot compute the job's instants");
                self.jobs.remove(&job.job_id);
                return;
            }
        };
        let loaded = LoadedJob {
            version: job.version,
            partition_id: job.partition_id,
            namespace_id: job.namespace_id,
            anchor_ms: job.started_at_ms,
            next_ms: planned.next,
            schedule: schedule_index,
            priority: u8::try_from(policy.priority.clamp(0, 10)).unwrap_or(5),
            overlap: policy.overlap,
            fixed_delay: false,
            runs_left,
            calendars,
            starts_in_claim: policy.starts_as_one_attempt(),
        };
        if planned.next.is_none() && planned.catch_up.is_empty() {
            info!(
                job_id = job.job_id,
                "the job's schedule has no instant left within its bounds; it is done"
            );
            self.jobs.remove(&job.job_id);
            self.exhausted.push((job.job_id, job.version));
            return;
        }
        self.note_unfired(&job, &planned, now);
        let mut planned = planned;
        let mut loaded = loaded;
        if loaded.runs_left != UNLIMITED && planned.catch_up.len() >= loaded.runs_left as usize {
            // The catch-up uses up the job's runs: the last of them ends it.
            planned.catch_up.truncate(loaded.runs_left as usize);
            planned.next = None;
        }
        if !planned.catch_up.is_empty() {
            info!(
                job_id = job.job_id,
                missed = planned.catch_up.len(),
                "firing missed instants"
            );
        }
        let last = planned.catch_up.len().saturating_sub(1);
        for (i, at) in planned.catch_up.iter().enumerate() {
            let done = i == last && planned.next.is_none();
            if let Some(claim) =
                self.claim_for(job.job_id, &loaded, *at, TriggerKind::Misfire, done)
            {
                if claim.counts_as_fired() && loaded.runs_left != UNLIMITED {
                    loaded.runs_left = loaded.runs_left.saturating_sub(1);
                }
                self.pending.push(claim);
            }
        }
        if let Some(next) = planned.next {
            self.timer.push(TimerEntry {
                due_ms: next,
                job_id: job.job_id,
                version: loaded.version,
            });
        }
        self.jobs.insert(job.job_id, loaded);
    }

    /// Tells of the missed instants the job's misfire policy leaves unfired: those due before
    /// it was last started were missed while it was stopped, the others while no node fired.
    fn note_unfired(&mut self, job: &ScheduledJob, planned: &LoadPlan, now: i64) {
        let started = job.started_at_ms.unwrap_or(i64::MIN);
        let (paused, down): (Vec<i64>, Vec<i64>) =
            planned.unfired.iter().partition(|at| **at < started);
        for (reason, instants) in [(SkipReason::Paused, paused), (SkipReason::Misfire, down)] {
            let (Some(first), Some(last)) = (instants.first(), instants.last()) else {
                continue;
            };
            let skipped = SkippedInstants {
                reason,
                count: instants.len() as u64,
                first_ms: *first,
                last_ms: *last,
                // Only the earliest are named; the rest come after the last of them.
                at_least: planned.more_unfired && planned.unfired.last() == Some(last),
                detail: None,
            };
            self.skips.note(job.job_id, job.namespace_id, skipped, now);
        }
    }

    /// The job's parsed schedule and its index in the shared table (a recurring schedule is
    /// parsed once per node, whatever the number of jobs that have it).
    fn schedule_of(&mut self, job: &ScheduledJob, window: Window) -> Option<(u32, Schedule)> {
        // Jobs share a parsed schedule only when their bounds agree too.
        let key = if window == Window::default() {
            job.schedule_json.clone()
        } else {
            format!(
                "{}|{:?}|{:?}",
                job.schedule_json, window.not_before_ms, window.not_after_ms
            )
        };
        if let Some(&index) = self
            .schedule_ids
            .get(&job.timezone)
            .and_then(|by_json| by_json.get(&key))
        {
            return self
                .schedule_table
                .get(index as usize)
                .map(|schedule| (index, schedule.clone()));
        }
        let spec = serde_json::from_str::<ScheduleSpec>(&job.schedule_json).ok()?;
        let schedule = Schedule::parse(&spec, parse_zone(&job.timezone).ok()?)
            .ok()?
            .within(window);
        if schedule.is_one_shot() {
            return Some((ONE_SHOT, schedule));
        }
        let index = u32::try_from(self.schedule_table.len())
            .ok()
            .filter(|i| *i != ONE_SHOT)?;
        self.schedule_table.push(schedule.clone());
        self.schedule_ids
            .entry(job.timezone.clone())
            .or_default()
            .insert(key, index);
        Some((index, schedule))
    }
}
