//! Schedules: parsing (cron, RRULE, one-shot `at`, fixed interval `every`, `fixed_delay`
//! after each run), a job's bounds on them, exclusion calendars, and the pure next-instant
//! function. No I/O and no clock: callers say what "after" means.
//!
//! Every job has an IANA time zone. Cron and RRULE are evaluated on wall-clock time in that zone
//! and turned into instants by one DST rule (see `zone`), so both behave alike across gaps and
//! overlaps.

pub mod calendar;
mod cron;
mod every;
mod rrule;
mod rrule_checks;
mod zone;

#[cfg(test)]
mod dst_properties;
#[cfg(test)]
mod properties;
#[cfg(test)]
mod search_bounds;

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, NaiveDateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

pub use every::{parse_duration, parse_interval};

/// Why a schedule was refused; `field` names the JSON field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScheduleError {
    pub field: &'static str,
    pub message: String,
}

impl ScheduleError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }

    pub(crate) fn cron(message: impl Into<String>) -> Self {
        Self::new("schedule.cron", message)
    }

    pub(crate) fn rrule(message: impl Into<String>) -> Self {
        Self::new("schedule.rrule", message)
    }
}

/// A schedule as a user writes it: exactly one of the five fields.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(min_properties = 1, max_properties = 1)]
pub struct ScheduleSpec {
    /// Unix (5 fields) or Quartz (6 or 7 fields, with seconds) cron.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// RFC 5545: `DTSTART`, `RRULE`, `RDATE`, `EXDATE` lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rrule: Option<String>,
    /// An RFC 3339 instant, or a wall time (`2026-12-01T09:00:00`) in the job's zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// A duration such as `30s`, `5m`, `1h30m`, `2d`; anchored to the job's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// A duration: each run is due this long after the previous one ended (the first when
    /// the job is started), so runs never overlap however long they take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_delay: Option<String>,
    /// `true`: no instants at all; the job runs only when triggered (by hand, through the
    /// API, or as another job's child), as XXL-JOB's schedule type NONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual: Option<bool>,
}

/// Parses an IANA zone name.
pub fn parse_zone(name: &str) -> Result<Tz, ScheduleError> {
    if name.len() > 64 {
        return Err(ScheduleError::new(
            "timezone",
            "is longer than 64 characters",
        ));
    }
    Tz::from_str(name).map_err(|_| {
        ScheduleError::new(
            "timezone",
            format!("unknown IANA time zone {name:?} (use e.g. \"Europe/Paris\" or \"UTC\")"),
        )
    })
}

#[derive(Debug)]
enum Kind {
    Cron(cron::CronSchedule),
    Rrule(Box<rrule::RruleSchedule>),
    At(DateTime<Utc>),
    Every(chrono::Duration),
    FixedDelay(chrono::Duration),
    Manual,
}

/// The instants a job's schedule may fire in (its `bounds`): none before `not_before`, none
/// after `not_after`. Part of the parsed schedule, so every search honours it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Window {
    pub not_before_ms: Option<i64>,
    pub not_after_ms: Option<i64>,
}

/// A parsed schedule in a zone. Cheap to clone; jobs with the same expression and zone can
/// share one.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Arc<Kind>,
    zone: Tz,
    window: Window,
}

/// What the next-instant search may know about the job beyond its schedule.
#[derive(Debug, Clone, Copy, Default)]
pub struct NextHints {
    /// When the job was started: the anchor of an `every` schedule.
    pub anchor: Option<DateTime<Utc>>,
    /// An earlier instant of this schedule (the last fired), from which an RRULE search that
    /// cannot restart on the rule's grid resumes instead of replaying its history.
    pub cursor: Option<DateTime<Utc>>,
}

impl Schedule {
    /// Parses `spec` in `zone`. Exactly one field must be set.
    pub fn parse(spec: &ScheduleSpec, zone: Tz) -> Result<Self, ScheduleError> {
        let others_unset = [
            &spec.cron,
            &spec.rrule,
            &spec.at,
            &spec.every,
            &spec.fixed_delay,
        ]
        .iter()
        .all(|f| f.is_none());
        match spec.manual {
            Some(true) if others_unset => {
                return Ok(Self {
                    kind: Arc::new(Kind::Manual),
                    zone,
                    window: Window::default(),
                });
            }
            Some(false) => {
                return Err(ScheduleError::new(
                    "schedule.manual",
                    "must be true when given (leave it out for a schedule)",
                ));
            }
            _ => {}
        }
        let kind = match (&spec.cron, &spec.rrule, &spec.at, &spec.every) {
            _ if spec.manual.is_some() => {
                return Err(ScheduleError::new(
                    "schedule",
                    "\"manual\" cannot go with another schedule field",
                ));
            }
            (Some(expr), None, None, None) => Kind::Cron(cron::CronSchedule::parse(expr)?),
            (None, Some(text), None, None) => {
                Kind::Rrule(Box::new(rrule::RruleSchedule::parse(text, zone)?))
            }
            (None, None, Some(at), None) => Kind::At(parse_at(at, zone)?),
            (None, None, None, Some(every)) if spec.fixed_delay.is_none() => {
                Kind::Every(parse_interval(every)?)
            }
            (None, None, None, None) if spec.fixed_delay.is_some() => {
                Kind::FixedDelay(parse_duration(
                    spec.fixed_delay.as_deref().unwrap_or_default(),
                    "schedule.fixed_delay",
                )?)
            }
            _ => {
                return Err(ScheduleError::new(
                    "schedule",
                    "give exactly one of \"cron\", \"rrule\", \"at\", \"every\", \"fixed_delay\" or \"manual\"",
                ));
            }
        };
        Ok(Self {
            kind: Arc::new(kind),
            zone,
            window: Window::default(),
        })
    }

    /// This schedule limited to `window`.
    pub fn within(mut self, window: Window) -> Self {
        self.window = window;
        self
    }

    /// The delay after each run's end, for a `fixed_delay` schedule: its instants depend on
    /// when runs end, which only the scheduler knows.
    pub fn fixed_delay(&self) -> Option<chrono::Duration> {
        match &*self.kind {
            Kind::FixedDelay(delay) => Some(*delay),
            _ => None,
        }
    }

    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// True for a job that runs only when triggered (`manual`): it has no instants.
    pub fn is_manual(&self) -> bool {
        matches!(*self.kind, Kind::Manual)
    }

    /// What the schedule means that its text may not say, one sentence each, for whoever
    /// wrote it: a cron step after names, which Quartz drops.
    pub fn notes(&self) -> &[String] {
        match &*self.kind {
            Kind::Cron(cron) => cron.notes(),
            _ => &[],
        }
    }

    /// True for schedules that fire once (`at`).
    pub fn is_one_shot(&self) -> bool {
        matches!(*self.kind, Kind::At(_))
    }

    /// The first instant of the schedule strictly after `after` and within its window, or
    /// `None` when it has no more. A `fixed_delay` schedule reads `after` as the end of the
    /// previous run.
    pub fn next_after(
        &self,
        after: DateTime<Utc>,
        hints: NextHints,
    ) -> Result<Option<DateTime<Utc>>, ScheduleError> {
        let from = self.window_start(after);
        let next = match &*self.kind {
            Kind::Cron(cron) => cron.next_after(from, self.zone)?,
            Kind::Rrule(rule) => rule.next_after(from, hints.cursor)?,
            Kind::At(at) => (*at > from).then_some(*at),
            Kind::Every(interval) => every::next_after(*interval, hints.anchor, from),
            Kind::Manual => None,
            Kind::FixedDelay(delay) => {
                // The delay runs from the end of the previous run, but never before the window.
                let due = after.checked_add_signed(*delay);
                due.map(|due| due.max(from + chrono::Duration::milliseconds(1)))
            }
        };
        Ok(next.filter(|n| self.within_end(*n)))
    }

    /// Where a search for instants after `after` starts: not before the window opens.
    fn window_start(&self, after: DateTime<Utc>) -> DateTime<Utc> {
        match self
            .window
            .not_before_ms
            .and_then(|ms| DateTime::from_timestamp_millis(ms - 1))
        {
            Some(opens) if opens > after => opens,
            _ => after,
        }
    }

    fn within_end(&self, instant: DateTime<Utc>) -> bool {
        self.window
            .not_after_ms
            .is_none_or(|end| instant.timestamp_millis() <= end)
    }

    /// Up to `count` instants after `after`, strictly increasing: `next_after` repeated.
    pub fn preview(
        &self,
        after: DateTime<Utc>,
        count: usize,
        hints: NextHints,
    ) -> Result<Vec<DateTime<Utc>>, ScheduleError> {
        if let Kind::Rrule(rule) = &*self.kind {
            let mut instants = rule.preview(self.window_start(after), count, hints.cursor)?;
            instants.retain(|i| self.within_end(*i));
            return Ok(instants);
        }
        let mut instants = Vec::with_capacity(count);
        let mut cursor = after;
        while instants.len() < count {
            let hints = NextHints {
                cursor: instants.last().copied().or(hints.cursor),
                ..hints
            };
            match self.next_after(cursor, hints)? {
                Some(next) => {
                    instants.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        Ok(instants)
    }

    /// The wall time of `instant` in this schedule's zone.
    pub fn local(&self, instant: DateTime<Utc>) -> DateTime<Tz> {
        zone::local(instant, self.zone)
    }
}

/// Instants are kept to the millisecond, the precision they are stored with: a finer one would
/// stay "after" its own stored millisecond forever.
fn parse_at(text: &str, zone: Tz) -> Result<DateTime<Utc>, ScheduleError> {
    parse_instant(text, zone, "schedule.at")
}

/// An RFC 3339 instant, or a wall time in `zone`, to the millisecond; an error names `field`.
pub fn parse_instant(
    text: &str,
    zone: Tz,
    field: &'static str,
) -> Result<DateTime<Utc>, ScheduleError> {
    let instant = parse_at_exact(text, zone, field)?;
    Ok(DateTime::from_timestamp_millis(instant.timestamp_millis()).unwrap_or(instant))
}

fn parse_at_exact(
    text: &str,
    zone: Tz,
    field: &'static str,
) -> Result<DateTime<Utc>, ScheduleError> {
    let text = text.trim();
    if let Ok(instant) = DateTime::parse_from_rfc3339(text) {
        return Ok(instant.with_timezone(&Utc));
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .map(|wall| zone::resolve(wall, zone))
        .map_err(|_| {
            ScheduleError::new(
                field,
                format!(
                    "{text:?} is not an instant: use RFC 3339 (2026-12-01T09:00:00Z) or a wall \
                     time in the job's zone (2026-12-01T09:00:00)"
                ),
            )
        })
}
