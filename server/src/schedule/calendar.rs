//! Exclusion calendars: named sets of days and times in a zone (holidays, maintenance windows,
//! weekends) that jobs share. An instant of a job that falls in one of its calendars is not
//! run but recorded as skipped (Quartz's `HolidayCalendar`, Temporal's `skip`). Pure.

use std::collections::BTreeSet;

use chrono::{DateTime, Datelike, Days, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::{Schedule, ScheduleSpec, parse_zone, zone};

/// Most entries of each kind in one calendar.
pub const MAX_ENTRIES: usize = 2_000;
/// Most RRULE lines in one calendar: each is searched for every instant a job checks.
pub const MAX_RULES: usize = 50;

/// A calendar as a user writes it. Every field but the zone is a list of exclusions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarSpec {
    /// The IANA zone its dates and wall times are read in (default UTC).
    #[serde(default = "utc")]
    pub timezone: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Whole days, `2026-12-25`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dates: Vec<String>,
    /// Periods from `from` (included) to `to` (excluded): dates (`2026-12-24`, from its start)
    /// or wall times (`2026-12-24T18:00:00`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<CalendarRange>,
    /// RFC 5545 rules (`FREQ=WEEKLY;BYDAY=SA,SU`, with or without `RRULE:` and `DTSTART`):
    /// every day on which a rule has an occurrence is excluded whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rrules: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarRange {
    pub from: String,
    pub to: String,
}

fn utc() -> String {
    "UTC".to_owned()
}

/// Why a calendar was refused; `field` names the JSON field at fault (`dates[2]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct CalendarError {
    pub field: String,
    pub message: String,
}

impl CalendarError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A parsed calendar.
#[derive(Debug, Clone)]
pub struct Calendar {
    zone: Tz,
    dates: BTreeSet<NaiveDate>,
    ranges: Vec<(NaiveDateTime, NaiveDateTime)>,
    rules: Vec<Schedule>,
}

impl Calendar {
    pub fn parse(spec: &CalendarSpec) -> Result<Self, CalendarError> {
        let zone =
            parse_zone(&spec.timezone).map_err(|e| CalendarError::new("timezone", e.message))?;
        if spec.description.chars().count() > 1_000 {
            return Err(CalendarError::new(
                "description",
                "is longer than 1000 characters",
            ));
        }
        for (field, len, max) in [
            ("dates", spec.dates.len(), MAX_ENTRIES),
            ("ranges", spec.ranges.len(), MAX_ENTRIES),
            ("rrules", spec.rrules.len(), MAX_RULES),
        ] {
            if len > max {
                return Err(CalendarError::new(
                    field,
                    format!("has {len} entries; the limit is {max}"),
                ));
            }
        }
        let mut dates = BTreeSet::new();
        for (i, text) in spec.dates.iter().enumerate() {
            dates.insert(
                parse_date(text).map_err(|m| CalendarError::new(format!("dates[{i}]"), m))?,
            );
        }
        let mut ranges = Vec::with_capacity(spec.ranges.len());
        for (i, range) in spec.ranges.iter().enumerate() {
            let from = parse_wall(&range.from)
                .map_err(|m| CalendarError::new(format!("ranges[{i}].from"), m))?;
            let to = parse_wall(&range.to)
                .map_err(|m| CalendarError::new(format!("ranges[{i}].to"), m))?;
            if to <= from {
                return Err(CalendarError::new(
                    format!("ranges[{i}].to"),
                    format!("{:?} is not after {:?}", range.to, range.from),
                ));
            }
            ranges.push((from, to));
        }
        let mut rules = Vec::with_capacity(spec.rrules.len());
        for (i, text) in spec.rrules.iter().enumerate() {
            let rule = rule_text(text);
            let parsed = Schedule::parse(
                &ScheduleSpec {
                    rrule: Some(rule),
                    ..ScheduleSpec::default()
                },
                zone,
            )
            .map_err(|e| CalendarError::new(format!("rrules[{i}]"), e.message))?;
            rules.push(parsed);
        }
        Ok(Self {
            zone,
            dates,
            ranges,
            rules,
        })
    }

    /// A calendar as stored (its definition's JSON); why not, when it no longer reads.
    pub fn from_stored(definition_json: &str) -> Result<Self, String> {
        let spec: CalendarSpec = serde_json::from_str(definition_json)
            .map_err(|e| format!("unreadable definition: {e}"))?;
        Calendar::parse(&spec).map_err(|e| e.to_string())
    }

    /// Why `instant` is excluded (which entry holds it), or `None` when it is not.
    pub fn excludes(&self, instant: DateTime<Utc>) -> Option<String> {
        let wall = zone::local(instant, self.zone).naive_local();
        let day = wall.date();
        if self.dates.contains(&day) {
            return Some(format!("the date {day}"));
        }
        if let Some((from, to)) = self
            .ranges
            .iter()
            .find(|(from, to)| *from <= wall && wall < *to)
        {
            return Some(format!("the range {from} to {to}"));
        }
        let start = zone::resolve(day.and_time(NaiveTime::MIN), self.zone);
        let end = day
            .checked_add_days(Days::new(1))
            .map(|next| zone::resolve(next.and_time(NaiveTime::MIN), self.zone))?;
        let before = start - chrono::Duration::milliseconds(1);
        self.rules.iter().enumerate().find_map(|(i, rule)| {
            // A rule too sparse to search is treated as excluding nothing: the job fires.
            let next = rule.next_after(before, Default::default()).ok().flatten()?;
            (next < end).then(|| format!("rrules[{i}] on {} {day}", day.weekday()))
        })
    }
}

/// A rule as users write it, with the `RRULE:` prefix and a `DTSTART` added when left out.
fn rule_text(text: &str) -> String {
    let text = text.trim();
    let body = if text.contains(':') {
        text.to_owned()
    } else {
        format!("RRULE:{text}")
    };
    if body.to_ascii_uppercase().contains("DTSTART") {
        body
    } else {
        format!("DTSTART:20000101T000000\n{body}")
    }
}

fn parse_date(text: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d")
        .map_err(|_| format!("{text:?} is not a date: write it as 2026-12-25"))
}

/// A date (its start) or a wall time.
fn parse_wall(text: &str) -> Result<NaiveDateTime, String> {
    let text = text.trim();
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(date.and_time(NaiveTime::MIN));
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .map_err(|_| {
            format!("{text:?} is not a date or wall time: write 2026-12-24 or 2026-12-24T18:00:00")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calendar(json: serde_json::Value) -> Result<Calendar, CalendarError> {
        Calendar::parse(&serde_json::from_value(json).unwrap())
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn dates_ranges_and_rules_exclude_in_the_calendars_zone() {
        let cal = calendar(serde_json::json!({"timezone": "Europe/Paris",
            "dates": ["2026-12-25"],
            "ranges": [{"from": "2026-12-31T18:00:00", "to": "2027-01-01T06:00"}],
            "rrules": ["FREQ=WEEKLY;BYDAY=SA,SU"]}))
        .unwrap();
        // Christmas in Paris starts at 23:00Z on the 24th.
        assert!(
            cal.excludes(at("2026-12-24T23:30:00Z"))
                .unwrap()
                .contains("2026-12-25")
        );
        assert_eq!(cal.excludes(at("2026-12-24T22:30:00Z")), None);
        assert!(
            cal.excludes(at("2026-12-31T17:30:00Z"))
                .unwrap()
                .contains("range")
        );
        assert_eq!(
            cal.excludes(at("2027-01-01T05:30:00Z")),
            None,
            "06:00 Paris ended it"
        );
        // 2026-11-28 is a Saturday, the 30th a Monday.
        assert!(
            cal.excludes(at("2026-11-28T12:00:00Z"))
                .unwrap()
                .contains("Sat")
        );
        assert!(cal.excludes(at("2026-11-29T22:59:00Z")).is_some());
        assert_eq!(
            cal.excludes(at("2026-11-29T23:00:00Z")),
            None,
            "Monday in Paris"
        );
    }

    #[test]
    fn each_bad_entry_is_named() {
        let cases = [
            (serde_json::json!({"dates": ["2026-02-30"]}), "dates[0]"),
            (serde_json::json!({"timezone": "Mars/Olympus"}), "timezone"),
            (
                serde_json::json!({"ranges": [{"from": "2026-01-02", "to": "2026-01-01"}]}),
                "ranges[0].to",
            ),
            (
                serde_json::json!({"rrules": ["FREQ=WEEKLY", "FREQ=SOMETIMES"]}),
                "rrules[1]",
            ),
        ];
        for (json, field) in cases {
            assert_eq!(calendar(json).unwrap_err().field, field);
        }
    }
}
