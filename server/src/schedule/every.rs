//! Fixed-interval schedules: every `interval` from an anchor (the job's start).

use chrono::{DateTime, Duration, Utc};

use super::ScheduleError;

/// The shortest interval accepted: anything faster is a load test, not a schedule.
const MIN_INTERVAL: Duration = Duration::seconds(1);
const MAX_INTERVAL: Duration = Duration::days(3660);

/// Parses `90s`, `5m`, `1h30m`, `2d`, `1500ms`.
pub fn parse_interval(text: &str) -> Result<Duration, ScheduleError> {
    parse_duration(text, "schedule.every")
}

/// [`parse_interval`] for any field of a schedule that is a duration; errors name `field`.
pub fn parse_duration(text: &str, field: &'static str) -> Result<Duration, ScheduleError> {
    let bad = |why: &str| {
        ScheduleError::new(
            field,
            format!("{text:?} {why}: use a duration like 30s, 5m, 1h30m or 2d"),
        )
    };
    let text = text.trim();
    if text.is_empty() || text.len() > 64 {
        return Err(bad("is not a duration"));
    }
    let mut total = Duration::zero();
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad("is not a duration"));
        }
        let amount: i64 = rest[..digits].parse().map_err(|_| bad("is too large"))?;
        rest = &rest[digits..];
        let unit_len = rest.chars().take_while(char::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => Duration::milliseconds(1),
            "s" => Duration::seconds(1),
            "m" => Duration::minutes(1),
            "h" => Duration::hours(1),
            "d" => Duration::days(1),
            _ => return Err(bad("has an unknown unit")),
        };
        rest = &rest[unit_len..];
        let part = unit
            .checked_mul(i32::try_from(amount).map_err(|_| bad("is too large"))?)
            .ok_or_else(|| bad("is too large"))?;
        total = total
            .checked_add(&part)
            .ok_or_else(|| bad("is too large"))?;
    }
    if total < MIN_INTERVAL {
        return Err(bad("is shorter than 1s"));
    }
    if total > MAX_INTERVAL {
        return Err(bad("is longer than 3660d"));
    }
    Ok(total)
}

/// The first `anchor + k × interval` (k ≥ 1) strictly after `after`; without an anchor, one
/// interval after `after`.
pub(super) fn next_after(
    interval: Duration,
    anchor: Option<DateTime<Utc>>,
    after: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let Some(anchor) = anchor else {
        return after.checked_add_signed(interval);
    };
    let step = interval.num_milliseconds();
    let since = (after - anchor).num_milliseconds();
    let k = if since < 0 { 1 } else { since / step + 1 };
    anchor.checked_add_signed(Duration::milliseconds(k.checked_mul(step)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_combine() {
        assert_eq!(parse_interval("90s").unwrap(), Duration::seconds(90));
        assert_eq!(parse_interval("1h30m").unwrap(), Duration::minutes(90));
        assert_eq!(parse_interval("2d").unwrap(), Duration::days(2));
        assert_eq!(
            parse_interval("1500ms").unwrap(),
            Duration::milliseconds(1500)
        );
        for bad in ["", "5", "5x", "0s", "999ms", "s5", "99999999999999999999s"] {
            let err = parse_interval(bad).unwrap_err();
            assert_eq!(err.field, "schedule.every", "{bad:?}");
        }
    }

    #[test]
    fn instants_stay_on_the_anchor_grid() {
        let anchor = DateTime::from_timestamp(1_000, 0).unwrap();
        let step = Duration::seconds(10);
        let at = |s| DateTime::from_timestamp(s, 0).unwrap();
        assert_eq!(next_after(step, Some(anchor), at(1_000)), Some(at(1_010)));
        assert_eq!(next_after(step, Some(anchor), at(1_015)), Some(at(1_020)));
        assert_eq!(next_after(step, Some(anchor), at(500)), Some(at(1_010)));
    }
}
