//! Instants a schedule did not fire, told: every one counted in
//! `carillon_instants_skipped_total`, and an alert naming the job, the instants and why, at
//! most one per job per interval (what comes in between is held and told together with the
//! next). The scheduler notes skips as it meets them; held ones are told on its next poll
//! after their interval. Held skips live in memory: a node that dies loses what it held (the
//! `skipped` runs in the database keep the calendar's and the overlap rule's).

use std::collections::HashMap;
use std::sync::Arc;

use super::alerts::{AlertEvent, Alerter, SkippedInstants};
use super::metrics::NodeMetrics;
use crate::store::NamespaceId;

/// One job's skips: when it was last told of, and what is held since.
#[derive(Debug, Default)]
struct JobSkips {
    told_at_ms: Option<i64>,
    held: Vec<SkippedInstants>,
}

/// Skips held per job, so that each job is told at most once per `every_ms`. Pure.
#[derive(Debug)]
pub struct SkipDigest {
    every_ms: i64,
    jobs: HashMap<i64, JobSkips>,
}

impl SkipDigest {
    pub fn new(every_ms: i64) -> Self {
        Self {
            every_ms,
            jobs: HashMap::new(),
        }
    }

    /// Notes `skipped` of `job_id` at `now_ms`; what to tell of the job now, if its last
    /// telling is at least an interval old (else it is held).
    pub fn note(
        &mut self,
        job_id: i64,
        skipped: SkippedInstants,
        now_ms: i64,
    ) -> Option<Vec<SkippedInstants>> {
        let job = self.jobs.entry(job_id).or_default();
        match job.held.iter_mut().find(|h| h.reason == skipped.reason) {
            Some(held) => held.merge(skipped),
            None => job.held.push(skipped),
        }
        let due = job
            .told_at_ms
            .is_none_or(|told| now_ms - told >= self.every_ms);
        due.then(|| {
            job.told_at_ms = Some(now_ms);
            let mut told = std::mem::take(&mut job.held);
            told.sort_by_key(|s| s.reason);
            told
        })
    }

    /// What is held of jobs whose last telling is an interval old, to tell now; jobs with
    /// nothing held and told long ago are forgotten.
    pub fn due(&mut self, now_ms: i64) -> Vec<(i64, Vec<SkippedInstants>)> {
        let every = self.every_ms;
        let mut due = Vec::new();
        self.jobs.retain(|job_id, job| {
            let quiet = job.told_at_ms.is_none_or(|told| now_ms - told >= every);
            if !quiet {
                return true;
            }
            if job.held.is_empty() {
                return false;
            }
            job.told_at_ms = Some(now_ms);
            let mut told = std::mem::take(&mut job.held);
            told.sort_by_key(|s| s.reason);
            due.push((*job_id, told));
            true
        });
        due.sort_by_key(|(job_id, _)| *job_id);
        due
    }
}

/// The scheduler's handle: counts each skip and raises the alerts the digest lets through.
#[derive(Debug)]
pub struct SkipNotices {
    digest: SkipDigest,
    /// Whether skips are alerted at all (`alerts.skipped_every_ms` > 0); always counted.
    alerting: bool,
    alerter: Alerter,
    metrics: Arc<NodeMetrics>,
}

impl SkipNotices {
    /// `every_ms` 0: counted, never alerted.
    pub fn new(every_ms: u64, alerter: Alerter, metrics: Arc<NodeMetrics>) -> Self {
        Self {
            digest: SkipDigest::new(i64::try_from(every_ms).unwrap_or(i64::MAX)),
            alerting: every_ms > 0,
            alerter,
            metrics,
        }
    }

    /// Notes instants of `job_id` (of `namespace`) skipped at `now_ms`.
    pub fn note(
        &mut self,
        job_id: i64,
        namespace: NamespaceId,
        skipped: SkippedInstants,
        now_ms: i64,
    ) {
        self.metrics
            .instants_skipped
            .add(namespace.0, skipped.reason.as_str(), skipped.count);
        if !self.alerting {
            return;
        }
        if let Some(told) = self.digest.note(job_id, skipped, now_ms) {
            self.alerter.raise(AlertEvent::InstantsSkipped {
                job_id,
                skipped: told,
            });
        }
    }

    /// Raises the alerts held long enough.
    pub fn tell_held(&mut self, now_ms: i64) {
        for (job_id, skipped) in self.digest.due(now_ms) {
            self.alerter
                .raise(AlertEvent::InstantsSkipped { job_id, skipped });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::alerts::SkipReason;

    const MIN: i64 = 60_000;

    #[test]
    fn a_job_is_told_at_once_then_at_most_once_per_interval() {
        let mut digest = SkipDigest::new(10 * MIN);
        let told = digest
            .note(7, SkippedInstants::one(SkipReason::Overlap, 1_000, None), 0)
            .unwrap();
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].count, 1);
        // Within the interval: held, merged per reason.
        for at in [2_000, 3_000] {
            assert!(
                digest
                    .note(7, SkippedInstants::one(SkipReason::Overlap, at, None), MIN)
                    .is_none()
            );
        }
        let calendar = SkippedInstants::one(SkipReason::Calendar, 4_000, Some("holidays".into()));
        assert!(digest.note(7, calendar, 2 * MIN).is_none());
        // Another job is told at once.
        assert!(
            digest
                .note(
                    8,
                    SkippedInstants::one(SkipReason::Misfire, 5, None),
                    2 * MIN
                )
                .is_some()
        );
        assert!(digest.due(9 * MIN).is_empty(), "not an interval yet");
        let due = digest.due(10 * MIN);
        assert_eq!(due.len(), 1);
        let (job, held) = &due[0];
        assert_eq!(*job, 7);
        assert_eq!(held.len(), 2);
        assert_eq!(
            (
                held[0].reason,
                held[0].count,
                held[0].first_ms,
                held[0].last_ms
            ),
            (SkipReason::Overlap, 2, 2_000, 3_000)
        );
        assert_eq!(held[1].reason, SkipReason::Calendar);
        assert_eq!(held[1].detail.as_deref(), Some("holidays"));
        assert!(digest.due(30 * MIN).is_empty(), "nothing held");
        assert!(digest.jobs.is_empty(), "quiet jobs are forgotten");
    }
}
