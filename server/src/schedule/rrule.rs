//! RFC 5545 recurrences: `DTSTART[;TZID=…]`, `RRULE` (every FREQ, BY* parts, COUNT, UNTIL),
//! `RDATE`, `EXDATE`.
//!
//! The `rrule` crate expands the rule on wall-clock time (every date-time is rewritten as a
//! zone-less wall time before it sees it), and `zone::resolve` applies the DST rule, exactly as
//! for cron. That sidesteps the crate's duplicates and disorder for hourly rules across DST.
//!
//! Finding the next instant must not replay the whole history: a rule without COUNT restarts
//! from a known earlier occurrence (the cursor), which reproduces the same sequence from there.

use std::str::FromStr;

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use chrono_tz::Tz;
use rrule::RRuleSet;

use super::{ScheduleError, zone};

/// The longest RRULE text accepted.
pub(crate) const MAX_LEN: usize = 4096;
/// Occurrences one search may step over before it gives up (a minutely rule replayed over
/// five years is about 2.6 million; the scheduler resumes from a cursor, so replays are rare).
const MAX_SCAN: usize = 5_000_000;

#[derive(Debug)]
pub(crate) struct RruleSchedule {
    zone: Tz,
    dtstart: NaiveDateTime,
    /// The RRULE/RDATE/EXDATE lines with every date-time rewritten as a zone-less wall time.
    body: String,
    /// A rule with COUNT must be counted from DTSTART; one with RDATEs cannot resume from a
    /// cursor that may be an RDATE. Both replay from DTSTART.
    resumable: bool,
    full: RRuleSet,
}

fn err(message: impl Into<String>) -> ScheduleError {
    ScheduleError::rrule(message)
}

impl RruleSchedule {
    /// Parses `text`; a floating DTSTART is read in `job_zone`.
    pub(crate) fn parse(text: &str, job_zone: Tz) -> Result<Self, ScheduleError> {
        if text.trim().is_empty() {
            return Err(err("is empty"));
        }
        if text.len() > MAX_LEN {
            return Err(err(format!(
                "is {} characters long; the limit is {MAX_LEN}",
                text.len()
            )));
        }
        let mut dtstart: Option<(NaiveDateTime, Tz)> = None;
        let mut lines: Vec<(String, String)> = Vec::new();
        for raw in text.lines().flat_map(|l| l.split("\\n")) {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let (head, value) = line
                .split_once(':')
                .ok_or_else(|| err(format!("line {line:?} has no ':'")))?;
            let (name, params) = head.split_once(';').unwrap_or((head, ""));
            match name.to_ascii_uppercase().as_str() {
                "DTSTART" => {
                    let (wall, zone) = parse_datetime(value, params, job_zone, "DTSTART")?;
                    dtstart = Some((wall, zone));
                }
                "RRULE" | "RDATE" | "EXDATE" => {
                    lines.push((name.to_ascii_uppercase(), format!("{params}\u{0}{value}")))
                }
                other => {
                    return Err(err(format!(
                        "unknown property {other}: use DTSTART, RRULE, RDATE or EXDATE"
                    )));
                }
            }
        }
        let (dtstart, zone) = dtstart.ok_or_else(|| err("DTSTART is required"))?;
        if !lines.iter().any(|(n, _)| n == "RRULE" || n == "RDATE") {
            return Err(err("needs an RRULE or RDATE line"));
        }
        let mut body = String::new();
        let mut has_count = false;
        for (name, packed) in lines {
            let (params, value) = packed.split_once('\u{0}').unwrap_or(("", &packed));
            let rewritten = match name.as_str() {
                "RRULE" => {
                    check_interval(value)?;
                    has_count |= value.to_ascii_uppercase().contains("COUNT=");
                    rewrite_until(value, zone)?
                }
                _ => value
                    .split(',')
                    .map(|v| {
                        parse_datetime(v, params, zone, &name).map(|(wall, from)| {
                            // A value in another zone is first resolved, then read in ours.
                            let wall = if from == zone {
                                wall
                            } else {
                                zone::local(zone::resolve(wall, from), zone).naive_local()
                            };
                            naive_utc_text(wall)
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join(","),
            };
            body.push_str(&format!("\n{name}:{rewritten}"));
        }
        let full = build(dtstart, &body)?;
        let resumable = !has_count && !body.contains("\nRDATE:");
        Ok(Self {
            zone,
            dtstart,
            body,
            resumable,
            full,
        })
    }

    /// The first instant strictly after `after`. `cursor`, when given, is an earlier
    /// occurrence of this rule (such as the last one fired), from which the search resumes.
    pub(crate) fn next_after(
        &self,
        after: DateTime<Utc>,
        cursor: Option<DateTime<Utc>>,
    ) -> Result<Option<DateTime<Utc>>, ScheduleError> {
        let start = zone::search_start(after, self.zone);
        // Resuming restarts the rule at the cursor's wall time, which must be the occurrence's
        // own: not so for an instant a DST gap moved, so near an offset change we replay.
        let resumed = match cursor {
            Some(c) if self.resumable && c <= after && !zone::near_offset_change(c, self.zone) => {
                let wall = zone::local(c, self.zone).naive_local();
                (wall > self.dtstart)
                    .then(|| build(wall, &self.body).ok())
                    .flatten()
            }
            _ => None,
        };
        let set = resumed.unwrap_or_else(|| self.full.clone());
        for (scanned, occurrence) in set.limit().into_iter().enumerate() {
            if scanned >= MAX_SCAN {
                return Err(err("takes too long to reach the requested time"));
            }
            let wall = occurrence.naive_utc();
            if wall < start {
                continue;
            }
            let instant = zone::resolve(wall, self.zone);
            if instant > after {
                return Ok(Some(instant));
            }
        }
        Ok(None)
    }
}

/// The `rrule` crate accepts `INTERVAL=0`, which would never advance.
fn check_interval(rule: &str) -> Result<(), ScheduleError> {
    for part in rule.split(';') {
        if let Some((key, value)) = part.split_once('=')
            && key.eq_ignore_ascii_case("INTERVAL")
            && value.trim().parse::<u32>().map_or(true, |n| n == 0)
        {
            return Err(err(format!(
                "INTERVAL={value} must be a whole number of at least 1"
            )));
        }
    }
    Ok(())
}

fn build(dtstart: NaiveDateTime, body: &str) -> Result<RRuleSet, ScheduleError> {
    let text = format!("DTSTART:{}{body}", naive_utc_text(dtstart));
    RRuleSet::from_str(&text).map_err(|e| err(e.to_string()))
}

fn naive_utc_text(wall: NaiveDateTime) -> String {
    wall.format("%Y%m%dT%H%M%SZ").to_string()
}

/// Parses an iCalendar DATE-TIME or DATE with its `TZID`/`VALUE` parameters: returns the wall
/// time and the zone it is in (UTC for a trailing `Z`, `default` when floating).
fn parse_datetime(
    value: &str,
    params: &str,
    default: Tz,
    property: &str,
) -> Result<(NaiveDateTime, Tz), ScheduleError> {
    let mut zone = default;
    for param in params.split(';').filter(|p| !p.is_empty()) {
        let (key, val) = param
            .split_once('=')
            .ok_or_else(|| err(format!("{property} parameter {param:?} has no '='")))?;
        if key.eq_ignore_ascii_case("TZID") {
            zone = Tz::from_str(val)
                .map_err(|_| err(format!("{property}: unknown time zone {val:?}")))?;
        }
    }
    let value = value.trim();
    let (text, utc) = match value.strip_suffix('Z') {
        Some(text) => (text, true),
        None => (value, false),
    };
    let wall = NaiveDateTime::parse_from_str(text, "%Y%m%dT%H%M%S")
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y%m%d").map(|d| d.and_time(chrono::NaiveTime::MIN))
        })
        .map_err(|_| {
            err(format!(
                "{property} value {value:?} is not a date-time like 20260101T090000"
            ))
        })?;
    if utc {
        Ok((wall, Tz::UTC))
    } else {
        Ok((wall, zone))
    }
}

/// Rewrites `UNTIL=…` as a wall time in `zone` (RFC 5545 gives it in UTC when DTSTART has a
/// zone).
fn rewrite_until(rule: &str, zone: Tz) -> Result<String, ScheduleError> {
    let parts = rule
        .split(';')
        .map(|part| match part.split_once('=') {
            Some((key, value)) if key.eq_ignore_ascii_case("UNTIL") => {
                let (wall, from) = parse_datetime(value, "", zone, "UNTIL")?;
                let wall = if from == zone {
                    wall
                } else {
                    zone::local(zone::resolve(wall, from), zone).naive_local()
                };
                Ok(format!("UNTIL={}", naive_utc_text(wall)))
            }
            _ => Ok(part.to_owned()),
        })
        .collect::<Result<Vec<_>, ScheduleError>>()?;
    Ok(parts.join(";"))
}
