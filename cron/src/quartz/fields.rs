//! One field of a Quartz expression, read into a set of values or a day rule.
//!
//! The grammar is Quartz 2.3's `CronExpression`: `*`, `?`, numbers, names (`JAN`, `MON`),
//! ranges `A-B` (wrapping past the end when `A > B`, as in `FRI-MON` or `22-2`), steps `*/S`,
//! `/S`, `N/S` (from `N` to the end of the field) and `A-B/S`, lists of those, and the day
//! forms `L`, `L-n`, `LW`, `L-nW`, `nW` (day of month) and `L`, `nL`, `n#k` (day of week).
//!
//! Where Quartz accepts text it then ignores (`5X`, a `W` or `#` inside a list, which keep
//! only the list's first day), this parser refuses it: an expression must mean what it says.
//! A step after names (`MON-FRI/2`) is the exception: Quartz drops the step, job tables
//! brought from Quartz hold such expressions, and so it is read as Quartz reads it and said.

use crate::CronError;

/// The seven fields, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

/// The first and last year a year field may name. Quartz's own limit moves with the clock
/// (this year + 100); a fixed one keeps a stored expression's meaning from changing.
pub(super) const FIRST_YEAR: u32 = 1970;
pub(super) const LAST_YEAR: u32 = 2199;

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
/// Quartz numbers the days of the week 1–7 from Sunday.
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Field {
    pub(super) fn name(self) -> &'static str {
        match self {
            Field::Second => "seconds",
            Field::Minute => "minutes",
            Field::Hour => "hours",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    /// The smallest and largest value.
    pub(super) fn bounds(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (1, 7),
            Field::Year => (FIRST_YEAR, LAST_YEAR),
        }
    }

    fn names(self) -> &'static [&'static str] {
        match self {
            Field::Month => &MONTHS,
            Field::DayOfWeek => &WEEKDAYS,
            _ => &[],
        }
    }

    fn hint(self) -> String {
        let (low, high) = self.bounds();
        match self {
            Field::Month => format!("{low}–{high} or JAN–DEC"),
            Field::DayOfWeek => format!("{low}–{high} (1 = SUN) or SUN–SAT"),
            _ => format!("{low}–{high}"),
        }
    }
}

/// A field's values as bits (bit `v` set when value `v` is in), years offset by `FIRST_YEAR`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ValueSet {
    bits: [u64; 4],
    /// Written as `*` alone: what makes a day field stand aside for the other.
    pub(super) star: bool,
}

impl ValueSet {
    fn empty() -> Self {
        Self {
            bits: [0; 4],
            star: false,
        }
    }

    fn insert(&mut self, index: u32) {
        self.bits[(index / 64) as usize] |= 1 << (index % 64);
    }

    pub(super) fn contains(&self, index: u32) -> bool {
        index < 256 && self.bits[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    /// The smallest index at or after `from`.
    pub(super) fn next_from(&self, from: u32) -> Option<u32> {
        (from..256).find(|&i| self.contains(i))
    }
}

/// What a day-of-month field says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum MonthDays {
    /// Any day.
    Unspecified,
    Days(ValueSet),
    /// `L` / `L-n`: the last day of the month, or `n` days before it.
    Last {
        offset: u32,
    },
    /// `LW` / `L-nW`: the weekday nearest to the last day (less `n`), within the month.
    LastWeekday {
        offset: u32,
    },
    /// `nW`: the weekday nearest to day `n`, within the month.
    NearestWeekday(u32),
}

/// What a day-of-week field says (days 1–7 from Sunday).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum WeekDays {
    /// Any day.
    Unspecified,
    Days(ValueSet),
    /// `nL`: the last such weekday of the month.
    Last(u32),
    /// `n#k`: the `k`th such weekday of the month.
    Nth {
        weekday: u32,
        nth: u32,
    },
}

fn refuse(field: Field, token: &str, why: impl std::fmt::Display) -> CronError {
    CronError::new(format!("{} field {token:?}: {why}", field.name()))
}

/// Reads a plain field (seconds, minutes, hours, month, year, or the list form of a day
/// field) into its values.
pub(super) fn values(field: Field, text: &str) -> Result<ValueSet, CronError> {
    if text == "?" {
        return Err(refuse(
            field,
            text,
            "'?' is only allowed in day-of-month and day-of-week",
        ));
    }
    let mut set = ValueSet::empty();
    set.star = text == "*";
    for item in text.split(',') {
        list_item(field, item, &mut set).map_err(|why| refuse(field, item, why))?;
    }
    Ok(set)
}

/// One item of a list: `*`, `*/S`, `/S`, `V`, `V/S`, `A-B`, `A-B/S`.
fn list_item(field: Field, item: &str, set: &mut ValueSet) -> Result<(), String> {
    let (low, high) = field.bounds();
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (item, None),
    };
    let mut step = match step {
        None => None,
        Some(step) => Some(parse_step(field, step)?),
    };
    if names_a_step(field, item) {
        // Quartz 2.3 reads a name or a name range and drops the step after it (`MAR-MAY/2` is
        // March to May, `MON/2` Monday alone): read as Quartz reads it, which a job table
        // brought from Quartz relies on, and said ([`dropped_steps`]).
        step = None;
    }
    let (start, end) = if range == "*" || (range.is_empty() && step.is_some()) {
        (low, high)
    } else if let Some((a, b)) = range.split_once('-') {
        let is_name = |t: &str| field.names().contains(&t);
        if is_name(a) != is_name(b) && (is_number(a) || is_number(b)) {
            // Quartz refuses these too (it reads a range as two names or two numbers).
            return Err("a range cannot mix a name and a number".to_owned());
        }
        let (a, b) = (value(field, a)?, value(field, b)?);
        if field == Field::Year && a > b {
            return Err(format!("the range starts after it ends ({a} > {b})"));
        }
        (a, b)
    } else {
        let v = value(field, range)?;
        match step {
            // `N/S`: from N to the end of the field.
            Some(_) => (v, high),
            None => (v, v),
        }
    };
    let step = step.unwrap_or(1);
    if start <= end {
        let mut v = start;
        while v <= end {
            set.insert(index(field, v));
            v += step;
        }
    } else {
        // A range that wraps past the field's end: 22-2 is 22, 23, 0, 1, 2.
        let span = high - low + 1;
        let mut offset = 0;
        let length = end + span - start;
        while offset <= length {
            let v = (start - low + offset) % span + low;
            set.insert(index(field, v));
            offset += step;
        }
    }
    Ok(())
}

/// Whether list item `item` puts a step after a name (`MAR-MAY/2`, `MON/2`).
fn names_a_step(field: Field, item: &str) -> bool {
    item.split_once('/')
        .is_some_and(|(range, _)| field.names().iter().any(|n| range.contains(n)))
}

/// What a field that puts a step after names means, as Quartz reads it, and how to write the
/// step if it was meant: one sentence per such item.
pub(super) fn dropped_steps(field: Field, text: &str) -> Vec<String> {
    let mut told = Vec::new();
    for item in text.split(',').filter(|item| names_a_step(field, item)) {
        let Some((range, step)) = item.split_once('/') else {
            continue;
        };
        let number =
            |name: &str| value(field, name).map_or_else(|_| name.to_owned(), |v| v.to_string());
        let (means, meant) = match range.split_once('-') {
            Some((a, b)) => (
                format!("each of {a} to {b}"),
                format!("{}-{}/{step}", number(a), number(b)),
            ),
            None => (
                format!("{range} alone"),
                format!("{}/{step}", number(range)),
            ),
        };
        told.push(format!(
            "{} field {item:?}: Quartz drops a step after names, so this is {means}; to step \
             by {step}, write {meant}",
            field.name()
        ));
    }
    told
}

fn parse_step(field: Field, text: &str) -> Result<u32, String> {
    let (low, high) = field.bounds();
    // Quartz's limits: 59 for seconds and minutes, 23 for hours, 31, 12, 7 for the days and
    // months; years have none of their own.
    let largest = if field == Field::Year {
        high - low
    } else {
        high
    };
    match text.parse::<u32>() {
        Ok(0) => Err("a step of 0 never advances".to_owned()),
        Ok(step) if step <= largest => Ok(step),
        Ok(step) => Err(format!(
            "the step {step} is larger than the field ({largest} at most)"
        )),
        Err(_) => Err(format!("{text:?} after '/' is not a number")),
    }
}

/// The bit a value takes in its set.
fn index(field: Field, v: u32) -> u32 {
    if field == Field::Year {
        v - FIRST_YEAR
    } else {
        v
    }
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// A number or, in month and day-of-week, a three-letter name.
fn value(field: Field, text: &str) -> Result<u32, String> {
    let (low, high) = field.bounds();
    if let Some(at) = field.names().iter().position(|n| *n == text) {
        return Ok(low + at as u32);
    }
    if !is_number(text) {
        return Err(format!("{text:?} is not a value; use {}", field.hint()));
    }
    match text.parse::<u32>() {
        Ok(v) if (low..=high).contains(&v) => Ok(v),
        _ => Err(format!("{text} is out of range; use {}", field.hint())),
    }
}

/// Reads the day-of-month field.
pub(super) fn month_days(text: &str) -> Result<MonthDays, CronError> {
    let field = Field::DayOfMonth;
    if text == "?" {
        return Ok(MonthDays::Unspecified);
    }
    let special = text.contains('L') || text.contains('W');
    if !special {
        return values(field, text).map(MonthDays::Days);
    }
    if text.contains(',') {
        return Err(refuse(
            field,
            text,
            "'L' and 'W' days cannot be in a list (Quartz would keep only the first day)",
        ));
    }
    if let Some(rest) = text.strip_prefix('L') {
        let (rest, weekday) = match rest.strip_suffix('W') {
            Some(rest) => (rest, true),
            None => (rest, false),
        };
        let offset = match rest {
            "" => 0,
            _ => match rest.strip_prefix('-').map(str::parse::<u32>) {
                Some(Ok(n)) if n <= 30 => n,
                Some(Ok(n)) => {
                    return Err(refuse(
                        field,
                        text,
                        format!("L-{n}: the offset is 30 at most"),
                    ));
                }
                _ => {
                    return Err(refuse(
                        field,
                        text,
                        "use L, L-n, LW or L-nW (n from 0 to 30)",
                    ));
                }
            },
        };
        return Ok(if weekday {
            MonthDays::LastWeekday { offset }
        } else {
            MonthDays::Last { offset }
        });
    }
    match text.strip_suffix('W').map(|day| value(field, day)) {
        Some(Ok(day)) => Ok(MonthDays::NearestWeekday(day)),
        Some(Err(why)) => Err(refuse(field, text, why)),
        None => Err(refuse(
            field,
            text,
            "'L' and 'W' are used as L, L-n, LW, L-nW or nW",
        )),
    }
}

/// Reads the day-of-week field.
pub(super) fn week_days(text: &str) -> Result<WeekDays, CronError> {
    let field = Field::DayOfWeek;
    if text == "?" {
        return Ok(WeekDays::Unspecified);
    }
    if text == "L" {
        // Quartz's meaning of a lone L in day-of-week: the last day of the week, Saturday.
        return Ok(WeekDays::Days(values(field, "7")?));
    }
    // No weekday name holds an L, so any L is Quartz's "last".
    let last = text.contains('L');
    let nth = text.contains('#');
    if !last && !nth {
        return values(field, text).map(WeekDays::Days);
    }
    if text.contains(',') {
        return Err(refuse(
            field,
            text,
            "'L' and '#' days cannot be in a list (Quartz would keep only the first day)",
        ));
    }
    if let Some(day) = text.strip_suffix('L').filter(|_| last) {
        let day = value(field, day).map_err(|why| refuse(field, text, why))?;
        return Ok(WeekDays::Last(day));
    }
    let (day, nth) = text.split_once('#').unwrap_or((text, ""));
    let day = value(field, day).map_err(|why| refuse(field, text, why))?;
    match nth.parse::<u32>() {
        Ok(n) if (1..=5).contains(&n) => Ok(WeekDays::Nth {
            weekday: day,
            nth: n,
        }),
        _ => Err(refuse(
            field,
            text,
            "'#' is followed by a number from 1 to 5",
        )),
    }
}
