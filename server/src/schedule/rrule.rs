//! RFC 5545 recurrences: `DTSTART[;TZID=…]`, `RRULE` (every FREQ, BY* parts, COUNT, UNTIL),
//! `RDATE`, `EXDATE`.
//!
//! The `rrule` crate expands the rule on wall-clock time (every date-time is rewritten as a
//! zone-less wall time before it sees it), and `zone::resolve` applies the DST rule, exactly as
//! for cron. That sidesteps the crate's duplicates and disorder for hourly rules across DST.
//!
//! Finding the next instant must not replay the whole history. A search restarts the rule at the
//! time it searches from, on the rule's own grid of periods (see `restarted`); where that cannot
//! reproduce the sequence, it resumes from a known earlier occurrence (the cursor), and only
//! failing both replays from DTSTART. COUNT is turned into the UNTIL it amounts to when the rule
//! is parsed, so that counting never needs the history either.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use rrule::{Frequency, RRule, RRuleSet};

use super::rrule_checks as checks;
use super::{ScheduleError, zone};

/// The longest RRULE text accepted.
pub(crate) const MAX_LEN: usize = 4096;
/// Occurrences one search may step over before it gives up (each counted once per RRULE line,
/// as the crate spends about that much on it), and the most all COUNTs of a rule may expand to.
/// Measured in a test build (the crates optimised, this one not): 0.45 µs an occurrence for
/// one line, so a search that reaches the bound gives up after about 45 ms, and expanding a
/// COUNT of 100,000 takes 35 ms; the bound before, 5 million, took 2.4 s. A restarted search
/// steps over almost nothing; the bound is met only by what must be replayed (a few SECONDLY
/// and MINUTELY rules, several RRULE lines on different grids) and by DST rescans, at most
/// three hours of occurrences.
pub(crate) const MAX_SCAN: usize = 100_000;

#[derive(Debug)]
pub(crate) struct RruleSchedule {
    zone: Tz,
    dtstart: NaiveDateTime,
    /// The RRULE/RDATE/EXDATE lines with every date-time rewritten as a zone-less wall time.
    body: String,
    /// Whether a search may resume from a cursor (see `resumed`).
    resumable: bool,
    /// Whether a search may restart the rule on its grid (see `restarted`).
    restartable: bool,
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
        let mut shapes = Vec::new();
        let mut expansion_budget = MAX_SCAN;
        for (name, packed) in lines {
            let (params, value) = packed.split_once('\u{0}').unwrap_or(("", &packed));
            let rewritten = match name.as_str() {
                "RRULE" => {
                    checks::interval(value)?;
                    checks::reachable(dtstart, value)?;
                    let rule = rewrite_until(value, zone)?;
                    let rule = count_as_until(dtstart, &rule, &mut expansion_budget)?;
                    let shape = Shape::of(&rule);
                    if shape.skips_days_in_the_crate() {
                        return Err(err(format!(
                            "FREQ={} with BYHOUR, BYMINUTE or BYSECOND and a day filter (BYDAY, \
                             BYMONTHDAY, BYMONTH, …) is not supported: the rrule library skips \
                             whole days with it and the job would stop firing; write it as \
                             FREQ=DAILY or FREQ=WEEKLY with BYHOUR and BYMINUTE listing the times",
                            shape.freq
                        )));
                    }
                    shapes.push(shape);
                    rule
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
        let restartable = shapes.iter().all(Shape::restartable);
        let resumable = match shapes.as_slice() {
            [shape] => shape.resumable() && !body.contains("\nRDATE:"),
            _ => false,
        };
        Ok(Self {
            zone,
            dtstart,
            body,
            resumable,
            restartable,
            full,
        })
    }

    /// The first instant strictly after `after`. `cursor`, when given, is an earlier
    /// occurrence of this rule (such as the last one fired), from which the search may resume.
    pub(crate) fn next_after(
        &self,
        after: DateTime<Utc>,
        cursor: Option<DateTime<Utc>>,
    ) -> Result<Option<DateTime<Utc>>, ScheduleError> {
        Ok(self.preview(after, 1, cursor)?.pop())
    }

    /// Up to `count` instants after `after`, strictly increasing: what repeating `next_after`
    /// gives, in one pass over the occurrences, so that a rule that has to be replayed is
    /// replayed once and not once an instant.
    pub(crate) fn preview(
        &self,
        after: DateTime<Utc>,
        count: usize,
        cursor: Option<DateTime<Utc>>,
    ) -> Result<Vec<DateTime<Utc>>, ScheduleError> {
        let start = zone::search_start(after, self.zone);
        let set = self
            .restarted(start)
            .or_else(|| self.resumed(after, cursor))
            .unwrap_or_else(|| self.full.clone());
        self.scan(set, start, after, count)
    }

    /// `preview` replaying the rule from DTSTART, the reference the shortcuts must agree with.
    #[cfg(test)]
    pub(crate) fn preview_replayed(
        &self,
        after: DateTime<Utc>,
        count: usize,
    ) -> Result<Vec<DateTime<Utc>>, ScheduleError> {
        let start = zone::search_start(after, self.zone);
        self.scan(self.full.clone(), start, after, count)
    }

    /// Up to `count` instants of `set`, each the first after the one before (`after` for the
    /// first), ignoring occurrences before the wall time `start`. The bound applies to each
    /// instant's search.
    ///
    /// Occurrences come in wall-time order, but a wall time in a DST gap resolves later than it
    /// reads, and where the shift is not a whole hour (Lord Howe's 30 minutes) later than wall
    /// times after it. So an instant is given out only once an occurrence past the wall time
    /// it shows on the clock has been read: nothing still unread can resolve before it.
    fn scan(
        &self,
        set: RRuleSet,
        start: NaiveDateTime,
        after: DateTime<Utc>,
        count: usize,
    ) -> Result<Vec<DateTime<Utc>>, ScheduleError> {
        // The crate spends about one step per RRULE line on each occurrence of a set.
        let cost = set.get_rrule().len().max(1);
        let limited = set.limit();
        let mut occurrences = (&limited).into_iter();
        let mut instants = Vec::with_capacity(count.min(1_000));
        // Instants read but not given out yet, and the wall time of the last occurrence read.
        let mut pending: BTreeSet<DateTime<Utc>> = BTreeSet::new();
        let mut read_up_to: Option<NaiveDateTime> = None;
        let mut exhausted = false;
        let mut spent = 0;
        let mut last = after;
        while instants.len() < count {
            while !exhausted {
                let settled = pending.first().is_some_and(|first| {
                    read_up_to
                        .is_some_and(|read| read > zone::local(*first, self.zone).naive_local())
                });
                if settled {
                    break;
                }
                let Some(occurrence) = occurrences.next() else {
                    exhausted = true;
                    break;
                };
                spent += cost;
                if spent > MAX_SCAN {
                    return Err(err(format!(
                        "steps over more than {MAX_SCAN} occurrences without reaching one after \
                         {last}: move DTSTART closer to it"
                    )));
                }
                let wall = occurrence.naive_utc();
                if wall < start {
                    continue;
                }
                read_up_to = Some(wall);
                let instant = zone::resolve(wall, self.zone);
                if instant > last {
                    pending.insert(instant);
                }
            }
            let Some(instant) = pending.pop_first() else {
                break;
            };
            instants.push(instant);
            last = instant;
            spent = 0;
        }
        Ok(instants)
    }

    /// The rule restarted at its cursor, an occurrence: restarting DTSTART there reproduces the
    /// sequence of a single RRULE line (see `Shape::resumable`), without RDATEs (the cursor may
    /// be one), unless near an offset change, where a DST-shifted instant is not its own wall
    /// time.
    fn resumed(&self, after: DateTime<Utc>, cursor: Option<DateTime<Utc>>) -> Option<RRuleSet> {
        match cursor {
            Some(c) if self.resumable && c <= after && !zone::near_offset_change(c, self.zone) => {
                let wall = zone::local(c, self.zone).naive_local();
                (wall > self.dtstart)
                    .then(|| build(wall, &self.body).ok())
                    .flatten()
            }
            _ => None,
        }
    }

    /// The rule restarted at the wall time `start`, giving the same occurrences from `start` on
    /// as a replay from DTSTART, or `None` when that cannot be promised.
    ///
    /// Every rule's BYxxx defaults were filled in from DTSTART when it was parsed, so a
    /// restart only has to keep to the rule's grid of periods (the years, months, weeks… that
    /// are a multiple of INTERVAL from DTSTART's): see `restart_point`. Several rules must agree
    /// on the point. Rules the crate does not step along their grid are left out (see
    /// `Shape::restartable`).
    fn restarted(&self, start: NaiveDateTime) -> Option<RRuleSet> {
        if !self.restartable || start <= self.dtstart {
            return None;
        }
        // A rule that ended before `start` adds nothing from there on.
        let live: Vec<RRule> = self
            .full
            .get_rrule()
            .iter()
            .filter(|rule| rule.get_until().is_none_or(|u| u.naive_utc() >= start))
            .cloned()
            .collect();
        let mut points = live
            .iter()
            .map(|rule| restart_point(rule, self.dtstart, start));
        let at = match points.next() {
            Some(first) => {
                let first = first?;
                if !points.all(|p| p == Some(first)) {
                    return None;
                }
                first
            }
            None => start,
        };
        if at <= self.dtstart {
            return None;
        }
        Some(
            RRuleSet::new(rrule::Tz::UTC.from_utc_datetime(&at))
                .set_rrules(live)
                .set_rdates(self.full.get_rdate().clone())
                .set_exdates(self.full.get_exdate().clone()),
        )
    }
}

/// What the shortcuts of a search need to know of one RRULE line.
#[derive(Debug, Default)]
struct Shape {
    freq: String,
    interval: u32,
    count: bool,
    by_hour: bool,
    by_minute: bool,
    by_second: bool,
    /// Any of the parts that filter days: BYMONTH, BYMONTHDAY, BYYEARDAY, BYWEEKNO, BYDAY.
    by_day: bool,
    by_set_pos: bool,
}

impl Shape {
    fn of(rule: &str) -> Self {
        let mut shape = Self {
            interval: 1,
            ..Self::default()
        };
        for part in rule.split(';') {
            let Some((key, value)) = part.split_once('=') else {
                continue;
            };
            match key.trim().to_ascii_uppercase().as_str() {
                "FREQ" => shape.freq = value.trim().to_ascii_uppercase(),
                "INTERVAL" => shape.interval = value.trim().parse().unwrap_or(1).max(1),
                "COUNT" => shape.count = true,
                "BYHOUR" => shape.by_hour = true,
                "BYMINUTE" => shape.by_minute = true,
                "BYSECOND" => shape.by_second = true,
                "BYSETPOS" => shape.by_set_pos = true,
                "BYMONTH" | "BYMONTHDAY" | "BYYEARDAY" | "BYWEEKNO" | "BYDAY" | "BYEASTER" => {
                    shape.by_day = true;
                }
                _ => {}
            }
        }
        shape
    }

    /// Whether the crate's sequence from an occurrence, restarted as DTSTART with the defaults
    /// read again from it, is the sequence from there on. Not with COUNT, counted from DTSTART;
    /// nor for a weekly rule with BYSETPOS: the crate's first week runs from the day it starts
    /// on, and BYSETPOS counts within it.
    fn resumable(&self) -> bool {
        !(self.count || self.freq == "WEEKLY" && self.by_set_pos)
    }

    /// Whether the crate's sequence from any point of the rule's grid is its sequence from
    /// there on (see `restart_point` for the point). Not with COUNT.
    ///
    /// A SECONDLY or MINUTELY rule with BYHOUR/BYMINUTE is stepped by whole minutes or hours
    /// once it leaves a matching one, which stays on the INTERVAL grid only when those are
    /// multiples of INTERVAL (or INTERVAL of them).
    fn restartable(&self) -> bool {
        let steps_on_grid =
            |unit: u32| unit.is_multiple_of(self.interval) || self.interval.is_multiple_of(unit);
        let on_grid = match self.freq.as_str() {
            "SECONDLY" if self.by_hour || self.by_minute => {
                3600u32.is_multiple_of(self.interval) && steps_on_grid(60)
            }
            "MINUTELY" if self.by_hour => steps_on_grid(60),
            _ => true,
        };
        !self.count && on_grid
    }

    /// Whether the crate gets this rule wrong: a SECONDLY or MINUTELY rule with BYHOUR,
    /// BYMINUTE or BYSECOND and a day filter. Skipping a day that does not match, it goes on
    /// skipping whole days each time the time of day carries over while it looks for a match,
    /// or reports an endless loop and ends the rule (the JavaScript rrule, its ancestor, has
    /// the same bug: issue #373). Such a rule is refused when it is parsed.
    fn skips_days_in_the_crate(&self) -> bool {
        let by_time = match self.freq.as_str() {
            "SECONDLY" => self.by_hour || self.by_minute || self.by_second,
            "MINUTELY" => self.by_hour || self.by_minute,
            _ => false,
        };
        by_time && self.by_day
    }
}

/// The index of the period of `rule`'s frequency that `wall` falls in.
fn period(rule: &RRule, wall: NaiveDateTime) -> i64 {
    let days = i64::from(wall.date().num_days_from_ce());
    let seconds = i64::from(wall.num_seconds_from_midnight());
    match rule.get_freq() {
        Frequency::Yearly => i64::from(wall.year()),
        Frequency::Monthly => i64::from(wall.year()) * 12 + i64::from(wall.month0()),
        Frequency::Weekly => {
            let since_week_start = (wall.weekday().num_days_from_monday() + 7
                - rule.get_week_start().num_days_from_monday())
                % 7;
            (days - i64::from(since_week_start)).div_euclid(7)
        }
        Frequency::Daily => days,
        Frequency::Hourly => days * 24 + seconds / 3600,
        Frequency::Minutely => days * 1440 + seconds / 60,
        Frequency::Secondly => days * 86_400 + seconds,
    }
}

/// The first wall time of period `index` of `rule`'s frequency.
fn period_start(rule: &RRule, index: i64) -> Option<NaiveDateTime> {
    let day = |days: i64| NaiveDate::from_num_days_from_ce_opt(i32::try_from(days).ok()?);
    let at = |days: i64, seconds: i64| {
        day(days)?
            .and_time(NaiveTime::MIN)
            .checked_add_signed(chrono::Duration::seconds(seconds))
    };
    match rule.get_freq() {
        Frequency::Yearly => NaiveDate::from_ymd_opt(i32::try_from(index).ok()?, 1, 1)
            .map(|d| d.and_time(NaiveTime::MIN)),
        Frequency::Monthly => NaiveDate::from_ymd_opt(
            i32::try_from(index.div_euclid(12)).ok()?,
            u32::try_from(index.rem_euclid(12)).ok()? + 1,
            1,
        )
        .map(|d| d.and_time(NaiveTime::MIN)),
        Frequency::Weekly => {
            // The one day of the seven numbered `7 × index …` that is a week start.
            let first = day(index * 7)?.weekday();
            let to_start = (rule.get_week_start().num_days_from_monday() + 7
                - first.num_days_from_monday())
                % 7;
            at(index * 7 + i64::from(to_start), 0)
        }
        Frequency::Daily => at(index, 0),
        Frequency::Hourly => at(index.div_euclid(24), index.rem_euclid(24) * 3600),
        Frequency::Minutely => at(index.div_euclid(1440), index.rem_euclid(1440) * 60),
        Frequency::Secondly => at(index.div_euclid(86_400), index.rem_euclid(86_400)),
    }
}

/// Where `rule` can restart to give its occurrences from `wall` on: `wall` itself if it lies
/// in one of the periods the rule fires in (those a multiple of INTERVAL from DTSTART's), else
/// the start of the next such period.
fn restart_point(
    rule: &RRule,
    dtstart: NaiveDateTime,
    wall: NaiveDateTime,
) -> Option<NaiveDateTime> {
    let index = period(rule, wall);
    let interval = i64::from(rule.get_interval());
    let offset = (index - period(rule, dtstart)).rem_euclid(interval);
    if offset != 0 {
        period_start(rule, index + interval - offset)
    } else if rule.get_freq() == Frequency::Weekly && !rule.get_by_set_pos().is_empty() {
        // The crate's first week runs from the day it starts on, and BYSETPOS counts within
        // what it built: a week has to be restarted whole.
        period_start(rule, index)
    } else {
        Some(wall)
    }
}

/// Rewrites `COUNT=n` as `UNTIL=` the n-th occurrence, found by expanding the rule (without
/// EXDATEs, which COUNT does not see) from `dtstart`. A rule with COUNT would otherwise have to
/// be replayed from DTSTART on every search. Expanding spends from `budget`, shared by all the
/// rule's lines; a rule that would need more is refused. A rule that yields nothing, or ends
/// after year 9999, keeps its COUNT: replaying it costs no more than this expansion did.
fn count_as_until(
    dtstart: NaiveDateTime,
    rule: &str,
    budget: &mut usize,
) -> Result<String, ScheduleError> {
    let Some(count) = rule.split(';').find_map(|part| {
        part.split_once('=')
            .filter(|(key, _)| key.trim().eq_ignore_ascii_case("COUNT"))
            .map(|(_, value)| value.trim())
    }) else {
        return Ok(rule.to_owned());
    };
    let set = build(dtstart, &format!("\nRRULE:{rule}"))?;
    let mut last = None;
    for occurrence in &set.limit() {
        if *budget == 0 {
            return Err(err(format!(
                "COUNT={count} expands to more than {MAX_SCAN} occurrences; use UNTIL instead"
            )));
        }
        last = Some(occurrence.naive_utc());
        *budget -= 1;
    }
    // Past year 9999 an UNTIL cannot be written; the rule stays within the budget replayed.
    let Some(last) = last.filter(|l| l.year() <= 9999) else {
        return Ok(rule.to_owned());
    };
    let mut parts: Vec<String> = rule
        .split(';')
        .filter(|part| {
            !part
                .split_once('=')
                .is_some_and(|(key, _)| key.trim().eq_ignore_ascii_case("COUNT"))
        })
        .map(str::to_owned)
        .collect();
    parts.push(format!("UNTIL={}", naive_utc_text(last)));
    Ok(parts.join(";"))
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
