//! Cron expressions: 5 fields are Unix cron (day-of-week 0–7, Sunday 0 and 7); 6 or 7 fields
//! are Quartz (seconds first, optional year, day-of-week 1–7 = SUN–SAT, `?`, `L`, `W`, `#`).
//! Names and `@hourly`-style aliases work in both. When both day fields are restricted, a day
//! matching either fires.
//!
//! Patterns are matched by `croner` against wall-clock time; `zone::resolve` then applies the
//! DST rule, so cron and RRULE treat gaps and overlaps alike.

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use super::{ScheduleError, zone};

/// The longest expression accepted.
pub(crate) const MAX_LEN: usize = 512;
/// How many wall-time matches one search may pass over because they resolve to instants not
/// after the start (only happens inside a repeated hour).
const MAX_SKIPS: usize = 10_000;

#[derive(Debug)]
pub(crate) struct CronSchedule {
    pattern: Cron,
}

impl CronSchedule {
    pub(crate) fn parse(expression: &str) -> Result<Self, ScheduleError> {
        let expression = expression.trim();
        if expression.is_empty() {
            return Err(ScheduleError::cron("is empty"));
        }
        if expression.len() > MAX_LEN {
            return Err(ScheduleError::cron(format!(
                "is {} characters long; the limit is {MAX_LEN}",
                expression.len()
            )));
        }
        let fields = expression.split_whitespace().count();
        let parser = if expression.starts_with('@') || fields == 5 {
            CronParser::builder()
                .seconds(Seconds::Disallowed)
                .year(Year::Disallowed)
                .build()
        } else if fields == 6 || fields == 7 {
            CronParser::builder()
                .seconds(Seconds::Required)
                .year(Year::Optional)
                .alternative_weekdays(true)
                .build()
        } else {
            return Err(ScheduleError::cron(format!(
                "has {fields} fields; use 5 (minute hour day-of-month month day-of-week) or \
                 6–7 (Quartz: seconds first, optional year)"
            )));
        };
        let pattern = parser
            .parse(expression)
            .map_err(|e| ScheduleError::cron(describe(&e)))?;
        Ok(Self { pattern })
    }

    /// The first instant strictly after `after`.
    pub(crate) fn next_after(
        &self,
        after: DateTime<Utc>,
        zone: Tz,
    ) -> Result<Option<DateTime<Utc>>, ScheduleError> {
        let mut cursor: NaiveDateTime = zone::search_start(after, zone);
        for _ in 0..MAX_SKIPS {
            let wall = match self.pattern.find_next_occurrence(&cursor, false) {
                Ok(wall) => wall,
                Err(croner::errors::CronError::TimeSearchLimitExceeded) => return Ok(None),
                Err(e) => return Err(ScheduleError::cron(describe(&e))),
            };
            let instant = zone::resolve(wall, zone);
            if instant > after {
                return Ok(Some(instant));
            }
            cursor = wall;
        }
        Err(ScheduleError::cron("matches too densely to search"))
    }
}

fn describe(err: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    match err {
        E::EmptyPattern => "is empty".to_owned(),
        E::TimeSearchLimitExceeded => "never matches a real date".to_owned(),
        other => other.to_string().trim_end_matches('.').to_owned(),
    }
}
