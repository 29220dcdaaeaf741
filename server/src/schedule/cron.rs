//! Cron schedules: an expression of either dialect (`carillon-cron`: 5 fields Unix, 6–7 fields
//! Quartz) matched on wall-clock time in the job's zone, turned into instants by
//! `zone::resolve`, so cron and RRULE treat DST gaps and overlaps alike.

use carillon_cron::CronExpr;
use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;

use super::{ScheduleError, zone};

/// How many wall-time matches one search may pass over because they resolve to instants not
/// after the start (only happens inside a repeated hour).
const MAX_SKIPS: usize = 10_000;

#[derive(Debug)]
pub(crate) struct CronSchedule {
    expression: CronExpr,
}

impl CronSchedule {
    pub(crate) fn parse(expression: &str) -> Result<Self, ScheduleError> {
        CronExpr::parse(expression)
            .map(|expression| Self { expression })
            .map_err(|e| ScheduleError::cron(e.to_string()))
    }

    /// What the expression means that its text may not say (a step Quartz drops).
    pub(crate) fn notes(&self) -> &[String] {
        self.expression.notes()
    }

    fn next_wall_after(
        &self,
        cursor: &NaiveDateTime,
    ) -> Result<Option<NaiveDateTime>, ScheduleError> {
        self.expression
            .next_after(*cursor)
            .map_err(|e| ScheduleError::cron(e.to_string()))
    }

    /// The first instant strictly after `after`.
    pub(crate) fn next_after(
        &self,
        after: DateTime<Utc>,
        zone: Tz,
    ) -> Result<Option<DateTime<Utc>>, ScheduleError> {
        let mut cursor: NaiveDateTime = zone::search_start(after, zone);
        for _ in 0..MAX_SKIPS {
            let Some(wall) = self.next_wall_after(&cursor)? else {
                return Ok(None);
            };
            let instant = zone::resolve(wall, zone);
            if instant > after {
                return self.earliest_from(wall, instant, after, zone).map(Some);
            }
            cursor = wall;
        }
        Err(ScheduleError::cron("matches too densely to search"))
    }

    /// The earliest instant after `after` given the first match `wall`, which resolved to
    /// `instant`. A wall time in a DST gap resolves later than it reads: where the shift is
    /// not a whole hour (Lord Howe's 30 minutes), later wall times up to the one `instant`
    /// shows on the clock can resolve earlier (02:20 in the gap is 15:50Z, 02:40 is 15:40Z),
    /// so those are searched too. Outside a gap `instant` shows `wall` and nothing is.
    fn earliest_from(
        &self,
        wall: NaiveDateTime,
        instant: DateTime<Utc>,
        after: DateTime<Utc>,
        zone: Tz,
    ) -> Result<DateTime<Utc>, ScheduleError> {
        let shown = zone::local(instant, zone).naive_local();
        if shown <= wall {
            return Ok(instant);
        }
        let (mut earliest, mut cursor) = (instant, wall);
        while let Some(next) = self.next_wall_after(&cursor)?.filter(|w| *w <= shown) {
            let candidate = zone::resolve(next, zone);
            if candidate > after && candidate < earliest {
                earliest = candidate;
            }
            cursor = next;
        }
        Ok(earliest)
    }
}
