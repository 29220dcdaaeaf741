//! The scheduler's side of the schedule policies: exclusion calendars (read from the database
//! and checked at claim time), `fixed_delay` jobs (whose next instant waits for their last
//! run's end), and jobs past their bounds (marked `done`).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::DateTime;
use tracing::{debug, info, warn};

use super::timer::TimerEntry;
use super::{LoadedJob, NO_CALENDARS, Scheduler};
use crate::jobs::JobPolicy;
use crate::schedule::calendar::Calendar;
use crate::schedule::{NextHints, Schedule};
use crate::states::RunState;
use crate::store::{self, JobInstant, NamespaceId, ScheduledJob};

/// The calendars a job names: its namespace's, by name.
pub(super) type CalendarSet = (NamespaceId, Vec<String>);

/// A calendar as last read: its version and parsed definition (`None`: unreadable).
type ReadCalendar = (i64, Option<Arc<Calendar>>);

/// Every calendar as last read, by namespace and name.
#[derive(Debug, Default)]
pub(super) struct Calendars {
    by_name: HashMap<(NamespaceId, String), ReadCalendar>,
    /// Whether they have been read at all.
    read_once: bool,
    /// A job loaded since the last read names a calendar that read did not have.
    stale: bool,
}

impl Calendars {
    /// A job of `namespace` naming these calendars was loaded: unknown names call for a read.
    pub(super) fn note_names(&mut self, namespace: NamespaceId, names: &[String]) {
        if names
            .iter()
            .any(|name| !self.by_name.contains_key(&(namespace, name.clone())))
        {
            self.stale = true;
        }
    }
}

impl Scheduler {
    /// The index of a job's list of calendars (in its namespace), kept once per distinct list.
    pub(super) fn calendar_set_of(&mut self, namespace: NamespaceId, names: &[String]) -> u32 {
        if names.is_empty() {
            return NO_CALENDARS;
        }
        let set = (namespace, names.to_vec());
        if let Some(&index) = self.calendar_set_ids.get(&set) {
            return index;
        }
        let Ok(index) = u32::try_from(self.calendar_sets.len()) else {
            return NO_CALENDARS;
        };
        self.calendar_sets.push(set.clone());
        self.calendar_set_ids.insert(set, index);
        index
    }

    /// Why the instant `at` of a job with calendar list `set` is skipped, if it is.
    pub(super) fn calendar_skip(&self, set: u32, at: i64) -> Option<String> {
        let (namespace, names) = self.calendar_sets.get(set as usize)?;
        let instant = DateTime::from_timestamp_millis(at)?;
        names.iter().find_map(|name| {
            let calendar = self
                .calendars
                .by_name
                .get(&(*namespace, name.clone()))?
                .1
                .as_ref()?;
            calendar
                .excludes(instant)
                .map(|why| format!("in calendar {name:?}: {why}"))
        })
    }

    /// Reads the calendars at the first poll, and at every poll once a job names one.
    pub(super) async fn refresh_calendars_if_needed(&mut self) -> Result<(), store::Error> {
        if self.calendars.read_once && self.calendar_sets.is_empty() {
            return Ok(());
        }
        self.refresh_calendars().await?;
        self.calendars.read_once = true;
        Ok(())
    }

    /// Reads the calendars again when a job loaded since names one the last read did not
    /// have, and checks the catch-up claims those loads queued against them.
    pub(super) async fn refresh_stale_calendars(&mut self) -> Result<(), store::Error> {
        if !self.calendars.stale {
            return Ok(());
        }
        self.refresh_calendars().await?;
        self.calendars.stale = false;
        let pending = std::mem::take(&mut self.pending);
        self.pending = pending
            .into_iter()
            .map(|mut claim| {
                let set = self.jobs.get(&claim.job_id).map(|j| j.calendars);
                if claim.state == RunState::Pending
                    && let Some(why) =
                        set.and_then(|set| self.calendar_skip(set, claim.scheduled_at_ms))
                {
                    claim.state = RunState::Skipped;
                    claim.message = Some(why);
                }
                claim
            })
            .collect();
        Ok(())
    }

    /// What the policies need after each poll: the ends of the runs fixed-delay jobs wait
    /// for, and the jobs to mark `done`.
    pub(super) async fn follow_policies(&mut self) -> Result<(), store::Error> {
        self.follow_fixed_delays().await?;
        for (job_id, version) in std::mem::take(&mut self.exhausted) {
            if self.store.policies.job_finish(job_id, version).await? {
                info!(job_id, "job done: no instant left within its bounds");
            }
        }
        Ok(())
    }

    async fn refresh_calendars(&mut self) -> Result<(), store::Error> {
        let records = self.store.policies.calendars_list().await?;
        let mut by_name = HashMap::with_capacity(records.len());
        for record in records {
            let key = (record.namespace_id, record.name);
            let known = self.calendars.by_name.remove(&key);
            let entry = match known {
                Some((version, parsed)) if version == record.version => (version, parsed),
                _ => {
                    let parsed = match Calendar::from_stored(&record.definition_json) {
                        Ok(calendar) => Some(Arc::new(calendar)),
                        Err(err) => {
                            warn!(calendar = %key.1, namespace = %key.0, error = %err, "calendar unreadable; it excludes nothing");
                            None
                        }
                    };
                    debug!(calendar = %key.1, namespace = %key.0, version = record.version, "calendar read");
                    (record.version, parsed)
                }
            };
            by_name.insert(key, entry);
        }
        self.calendars.by_name = by_name;
        Ok(())
    }

    /// Loads a running `fixed_delay` job: its first instant when it is started, or, once it
    /// has fired, after the end of that run.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of a job load() has already read"
    )]
    pub(super) fn load_fixed_delay(
        &mut self,
        job: &ScheduledJob,
        schedule_index: u32,
        schedule: &Schedule,
        policy: &JobPolicy,
        runs_left: u32,
        calendars: u32,
        now: i64,
    ) {
        let loaded = LoadedJob {
            version: job.version,
            partition_id: job.partition_id,
            namespace_id: job.namespace_id,
            anchor_ms: job.started_at_ms,
            next_ms: None,
            schedule: schedule_index,
            priority: u8::try_from(policy.priority.clamp(0, 10)).unwrap_or(5),
            overlap: policy.overlap,
            fixed_delay: true,
            runs_left,
            calendars,
            starts_in_claim: policy.starts_as_one_attempt(),
        };
        self.jobs.insert(job.job_id, loaded);
        if let Some(last) = job.last_fired_at_ms {
            self.awaiting_end.insert(job.job_id, last);
            return;
        }
        // Never fired: due when it was started (late, if that has passed), within its bounds.
        let started = job.started_at_ms.unwrap_or(now);
        let first = DateTime::from_timestamp_millis(started).and_then(|from| {
            let delay = schedule.fixed_delay()?;
            // next_after adds the delay to the previous end; the first run has none.
            schedule
                .next_after(from - delay, NextHints::default())
                .ok()
                .flatten()
        });
        self.set_next(job.job_id, first.map(|f| f.timestamp_millis()));
    }

    /// Gives a loaded job its next instant, or marks it `done` when it has none.
    fn set_next(&mut self, job_id: i64, next: Option<i64>) {
        let Some(job) = self.jobs.get_mut(&job_id) else {
            return;
        };
        job.next_ms = next;
        match next {
            Some(due_ms) => self.timer.push(TimerEntry {
                due_ms,
                job_id,
                version: job.version,
            }),
            None => {
                let version = job.version;
                self.jobs.remove(&job_id);
                self.exhausted.push((job_id, version));
            }
        }
    }

    /// Fixed-delay jobs whose last run has ended get their next instant: that end plus the
    /// delay. A run no longer stored (deleted by retention) counts as ended at its instant.
    async fn follow_fixed_delays(&mut self) -> Result<(), store::Error> {
        if self.awaiting_end.is_empty() {
            return Ok(());
        }
        let waiting: Vec<JobInstant> = self
            .awaiting_end
            .iter()
            .map(|(job_id, at)| JobInstant {
                job_id: *job_id,
                scheduled_at_ms: *at,
            })
            .collect();
        let found: HashMap<(i64, i64), Option<i64>> = self
            .store
            .policies
            .runs_finished_at(&waiting)
            .await?
            .into_iter()
            .map(|end| {
                let at = end.instant;
                ((at.job_id, at.scheduled_at_ms), end.finished_at_ms)
            })
            .collect();
        for JobInstant {
            job_id,
            scheduled_at_ms: at,
        } in waiting
        {
            let ended = match found.get(&(job_id, at)) {
                Some(Some(end)) => *end,
                Some(None) => continue,
                None => at,
            };
            self.awaiting_end.remove(&job_id);
            let Some(job) = self.jobs.get(&job_id).copied() else {
                continue;
            };
            let next = self
                .schedule_table
                .get(job.schedule as usize)
                .zip(DateTime::from_timestamp_millis(ended))
                .and_then(|(schedule, end)| schedule.next_after(end, NextHints::default()).ok())
                .flatten()
                .map(|n| n.timestamp_millis());
            self.set_next(job_id, next);
        }
        Ok(())
    }
}
