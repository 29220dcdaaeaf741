//! Quartz cron (6 or 7 fields: seconds first, optional year), with Quartz 2.3's meaning for
//! every form it accepts, matched against wall-clock time to the second.
//!
//! Our own engine rather than a crate's: the crates we measured refuse `N/S` (the commonest
//! form in Quartz and XXL-JOB job tables), and Quartz's day forms (`L-n`, `LW`, `nW`, `nL`,
//! `n#k`) and year field need its exact meaning, which `tests/quartz_oracle.rs` checks against
//! Quartz itself.

mod fields;

use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

use super::CronError;
use fields::{Field, MonthDays, ValueSet, WeekDays};

/// Quartz stops searching past the year 2999; an expression with no instant before then has
/// none.
const SEARCH_LAST_YEAR: i32 = 2999;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Days {
    OfMonth(MonthDays),
    OfWeek(WeekDays),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuartzCron {
    seconds: ValueSet,
    minutes: ValueSet,
    hours: ValueSet,
    days: Days,
    months: ValueSet,
    years: ValueSet,
    /// What the expression means that its text may not say (a step Quartz drops).
    notes: Vec<String>,
}

impl QuartzCron {
    /// Parses 6 or 7 whitespace-separated fields; names are case-insensitive, as in Quartz.
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        let upper = expression.to_ascii_uppercase();
        let parts: Vec<&str> = upper.split_whitespace().collect();
        if !(6..=7).contains(&parts.len()) {
            return Err(CronError::new(format!(
                "has {} fields; Quartz has 6 or 7 (seconds minutes hours day-of-month month \
                 day-of-week [year])",
                parts.len()
            )));
        }
        let days = days(parts[3], parts[5])?;
        let mut notes = fields::dropped_steps(Field::Month, parts[4]);
        notes.extend(fields::dropped_steps(Field::DayOfWeek, parts[5]));
        Ok(Self {
            seconds: fields::values(Field::Second, parts[0])?,
            minutes: fields::values(Field::Minute, parts[1])?,
            hours: fields::values(Field::Hour, parts[2])?,
            days,
            months: fields::values(Field::Month, parts[4])?,
            years: match parts.get(6) {
                Some(text) => fields::values(Field::Year, text)?,
                None => fields::values(Field::Year, "*")?,
            },
            notes,
        })
    }

    /// What the expression means that its text may not say, one sentence each: a step after
    /// names, which Quartz drops.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The first wall time strictly after `after` (to the second) that the expression
    /// matches, or `None` when there is none before the year 3000.
    pub fn next_after(&self, after: NaiveDateTime) -> Option<NaiveDateTime> {
        let mut at = after.with_nanosecond(0)? + Duration::seconds(1);
        loop {
            let date = at.date();
            if date.year() > SEARCH_LAST_YEAR {
                return None;
            }
            if !self.year_matches(date.year()) {
                let year = self.next_year(date.year() + 1)?;
                at = NaiveDate::from_ymd_opt(year, 1, 1)?.and_time(NaiveTime::MIN);
                continue;
            }
            if !self.months.contains(date.month()) {
                at = match self.months.next_from(date.month() + 1) {
                    Some(month) => NaiveDate::from_ymd_opt(date.year(), month, 1)?,
                    None => NaiveDate::from_ymd_opt(date.year() + 1, 1, 1)?,
                }
                .and_time(NaiveTime::MIN);
                continue;
            }
            if self.day_matches(date)
                && let Some(time) = self.time_at_or_after(at.time())
            {
                return Some(date.and_time(time));
            }
            at = date.succ_opt()?.and_time(NaiveTime::MIN);
        }
    }

    fn year_matches(&self, year: i32) -> bool {
        u32::try_from(year)
            .ok()
            .and_then(|y| y.checked_sub(fields::FIRST_YEAR))
            .is_some_and(|i| self.years.contains(i))
    }

    /// The first year at or after `from` that the year field names.
    fn next_year(&self, from: i32) -> Option<i32> {
        let from = u32::try_from(from).ok()?.max(fields::FIRST_YEAR);
        let index = self.years.next_from(from - fields::FIRST_YEAR)?;
        i32::try_from(index + fields::FIRST_YEAR).ok()
    }

    /// The first time of day at or after `from` that the time fields match.
    fn time_at_or_after(&self, from: NaiveTime) -> Option<NaiveTime> {
        let (h0, m0, s0) = (from.hour(), from.minute(), from.second());
        let mut hour = self.hours.next_from(h0)?;
        loop {
            let first_minute = if hour == h0 { m0 } else { 0 };
            let mut minute = self.minutes.next_from(first_minute);
            while let Some(m) = minute.filter(|m| *m < 60) {
                let first_second = if hour == h0 && m == m0 { s0 } else { 0 };
                if let Some(s) = self.seconds.next_from(first_second).filter(|s| *s < 60) {
                    return NaiveTime::from_hms_opt(hour, m, s);
                }
                minute = self.minutes.next_from(m + 1);
            }
            hour = self.hours.next_from(hour + 1).filter(|h| *h < 24)?;
        }
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        let day = date.day();
        let length = month_length(date);
        match &self.days {
            Days::OfMonth(rule) => match rule {
                MonthDays::Unspecified => true,
                MonthDays::Days(set) => set.contains(day),
                MonthDays::Last { offset } => length.checked_sub(*offset) == Some(day),
                MonthDays::LastWeekday { offset } => length
                    .checked_sub(*offset)
                    .filter(|target| *target >= 1)
                    .is_some_and(|target| nearest_weekday(date, target, length) == day),
                MonthDays::NearestWeekday(target) => {
                    *target <= length && nearest_weekday(date, *target, length) == day
                }
            },
            Days::OfWeek(rule) => {
                // Quartz numbers weekdays 1–7 from Sunday.
                let weekday = date.weekday().number_from_sunday();
                match rule {
                    WeekDays::Unspecified => true,
                    WeekDays::Days(set) => set.contains(weekday),
                    WeekDays::Last(w) => weekday == *w && day + 7 > length,
                    WeekDays::Nth { weekday: w, nth } => weekday == *w && (day - 1) / 7 + 1 == *nth,
                }
            }
        }
    }
}

/// Reads the two day fields: exactly one of them says which days, the other is `?`. A `*` in
/// one of them stands aside like `?` (Spring's and most users' reading of `0 0 12 * * *`, which
/// Quartz refuses); two restrictions at once are refused, as Quartz refuses them.
fn days(month_text: &str, week_text: &str) -> Result<Days, CronError> {
    let month = fields::month_days(month_text)?;
    let week = fields::week_days(week_text)?;
    let is_star_month = matches!(&month, MonthDays::Days(set) if set.star);
    let is_star_week = matches!(&week, WeekDays::Days(set) if set.star);
    match (month, week) {
        (MonthDays::Unspecified, WeekDays::Unspecified) => Err(CronError::new(
            "day-of-month and day-of-week are both '?': one of them must say which days",
        )),
        (MonthDays::Unspecified, week) => Ok(Days::OfWeek(week)),
        (month, WeekDays::Unspecified) => Ok(Days::OfMonth(month)),
        (month, _) if is_star_week => Ok(Days::OfMonth(month)),
        (_, week) if is_star_month => Ok(Days::OfWeek(week)),
        _ => Err(CronError::new(format!(
            "day-of-month {month_text:?} and day-of-week {week_text:?} are both given; Quartz \
             supports one of them: put '?' in the other"
        ))),
    }
}

fn month_length(date: NaiveDate) -> u32 {
    let (year, month) = (date.year(), date.month());
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    };
    next.and_then(|n| n.pred_opt())
        .map_or(28, |last| last.day())
}

/// The weekday nearest to day `target` of `date`'s month, without leaving the month: a
/// Saturday moves to the Friday before (or the Monday after, on the 1st), a Sunday to the
/// Monday after (or the Friday before, on the last day).
fn nearest_weekday(date: NaiveDate, target: u32, length: u32) -> u32 {
    let Some(day) = date.with_day(target) else {
        return 0;
    };
    match day.weekday() {
        chrono::Weekday::Sat if target == 1 => 3,
        chrono::Weekday::Sat => target - 1,
        chrono::Weekday::Sun if target == length => target - 2,
        chrono::Weekday::Sun => target + 1,
        _ => target,
    }
}

#[cfg(test)]
mod tests;
