//! RRULE lines the `rrule` crate accepts but that can never fire, refused at parse time with
//! the reason (as python-dateutil refuses them), instead of a job that silently never runs.

use chrono::{NaiveDateTime, Timelike};

use super::ScheduleError;

/// The `rrule` crate accepts `INTERVAL=0`, which would never advance.
pub(super) fn interval(rule: &str) -> Result<(), ScheduleError> {
    if let Some(value) = part(rule, "INTERVAL")
        && value.parse::<u32>().map_or(true, |n| n == 0)
    {
        return Err(ScheduleError::rrule(format!(
            "INTERVAL={value} must be a whole number of at least 1"
        )));
    }
    Ok(())
}

/// An HOURLY, MINUTELY or SECONDLY rule steps through the day on a grid of INTERVAL units
/// from DTSTART; when its BYHOUR/BYMINUTE/BYSECOND name no time on that grid, it has no
/// instant at all (`FREQ=HOURLY;INTERVAL=3;BYHOUR=9` from 14:00 visits 14, 17, 20, 23, 2, 5,
/// 8 and 11 o'clock only).
pub(super) fn reachable(dtstart: NaiveDateTime, rule: &str) -> Result<(), ScheduleError> {
    let unit: u64 = match part(rule, "FREQ").map(str::to_ascii_uppercase).as_deref() {
        Some("HOURLY") => 3_600,
        Some("MINUTELY") => 60,
        Some("SECONDLY") => 1,
        _ => return Ok(()),
    };
    let interval: u64 = part(rule, "INTERVAL")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let values = |name: &str, all: std::ops::Range<u64>| -> Option<Vec<u64>> {
        match part(rule, name) {
            None => Some(all.collect()),
            Some(list) => list.split(',').map(|v| v.trim().parse().ok()).collect(),
        }
    };
    let (Some(hours), Some(minutes), Some(seconds)) = (
        values("BYHOUR", 0..24),
        values("BYMINUTE", 0..60),
        values("BYSECOND", 0..60),
    ) else {
        return Ok(()); // Malformed values are the crate's to refuse.
    };
    // The parts that pick units of the grid: BYHOUR for HOURLY, and BYMINUTE, BYSECOND as
    // the unit gets finer. Without any, every unit the grid visits is taken.
    let picking: &[&str] = match unit {
        3_600 => &["BYHOUR"],
        60 => &["BYHOUR", "BYMINUTE"],
        _ => &["BYHOUR", "BYMINUTE", "BYSECOND"],
    };
    if picking.iter().all(|name| part(rule, name).is_none()) {
        return Ok(());
    }
    // The day in units, and the grid's step within it.
    let day = 86_400 / unit;
    let step = gcd(interval, day);
    let start = u64::from(dtstart.num_seconds_from_midnight()) / unit;
    let on_grid = hours.iter().any(|h| {
        minutes.iter().any(|m| {
            seconds.iter().any(|s| {
                let at = (h * 3_600 + m * 60 + s) / unit;
                at % step == start % step
            })
        })
    });
    if on_grid {
        return Ok(());
    }
    Err(ScheduleError::rrule(format!(
        "{rule} never fires: from DTSTART at {} its INTERVAL of {interval} steps only onto \
         times its BYHOUR/BYMINUTE/BYSECOND exclude",
        dtstart.time()
    )))
}

/// The value of `name` in an RRULE line, if given.
fn part<'a>(rule: &'a str, name: &str) -> Option<&'a str> {
    rule.split(';').find_map(|p| {
        p.split_once('=')
            .filter(|(key, _)| key.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim())
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").unwrap()
    }

    #[test]
    fn an_hour_off_the_interval_grid_is_refused() {
        let start = at("2024-09-12 14:12:20");
        let refused = reachable(start, "FREQ=HOURLY;INTERVAL=3;BYHOUR=9").unwrap_err();
        assert!(refused.to_string().contains("never fires"), "{refused}");
        // 14, 17, 20, 23, 2: 2 o'clock is on the grid.
        reachable(start, "FREQ=HOURLY;INTERVAL=3;BYHOUR=9,2").unwrap();
        // An interval that does not divide the day reaches every hour in time.
        reachable(start, "FREQ=HOURLY;INTERVAL=5;BYHOUR=9").unwrap();
    }

    #[test]
    fn minutes_and_seconds_are_checked_on_their_own_grids() {
        let start = at("2024-01-01 00:10:00");
        reachable(start, "FREQ=MINUTELY;INTERVAL=20;BYMINUTE=30").unwrap();
        assert!(reachable(start, "FREQ=MINUTELY;INTERVAL=20;BYMINUTE=35").is_err());
        assert!(reachable(start, "FREQ=MINUTELY;INTERVAL=60;BYHOUR=3;BYMINUTE=0").is_err());
        reachable(start, "FREQ=SECONDLY;INTERVAL=30;BYSECOND=0,30").unwrap();
        assert!(reachable(start, "FREQ=SECONDLY;INTERVAL=30;BYSECOND=15").is_err());
        reachable(start, "FREQ=DAILY;INTERVAL=3;BYHOUR=9").unwrap();
    }

    #[test]
    fn interval_zero_is_refused() {
        assert!(interval("FREQ=DAILY;INTERVAL=0").is_err());
        interval("FREQ=DAILY;INTERVAL=2").unwrap();
    }
}
