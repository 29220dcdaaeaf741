//! Random RFC 5545 rules for `rrule_oracle.rs`: every FREQ, INTERVAL, the BYxxx parts each
//! FREQ is used with (BYMONTH, BYMONTHDAY, BYDAY with and without ordinals, BYSETPOS, BYHOUR,
//! BYMINUTE, BYSECOND, BYYEARDAY, BYWEEKNO), COUNT or UNTIL, EXDATE and RDATE, in zones with
//! DST, DTSTART and the search start clustered around the months clocks change. Forms Carillon
//! refuses by design (README: SECONDLY/MINUTELY with BYHOUR/BYMINUTE and a day filter) are
//! not generated.

use chrono::{Duration, NaiveDate, NaiveDateTime, TimeZone};
use chrono_tz::Tz;

use crate::common::Rng;

pub(crate) struct Case {
    pub(crate) text: String,
    pub(crate) zone: &'static str,
    pub(crate) after_ms: i64,
}

const ZONES: [&str; 9] = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "America/Santiago",
    "America/Havana",
    "Asia/Kolkata",
];
const DAYS: [&str; 7] = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"];

/// A list of one to `most` distinct values drawn by `value`, joined by commas.
fn list(rng: &mut Rng, most: i64, mut value: impl FnMut(&mut Rng) -> String) -> String {
    let n = rng.range(1, most);
    let mut items: Vec<String> = Vec::new();
    for _ in 0..n {
        let item = value(rng);
        if !items.contains(&item) {
            items.push(item);
        }
    }
    items.join(",")
}

pub(crate) fn generate(rng: &mut Rng) -> Case {
    let zone_name = rng.pick(&ZONES);
    let zone: Tz = zone_name.parse().unwrap();
    let freq = match rng.range(0, 99) {
        0..=24 => "DAILY",
        25..=44 => "WEEKLY",
        45..=64 => "MONTHLY",
        65..=74 => "YEARLY",
        75..=89 => "HOURLY",
        90..=97 => "MINUTELY",
        _ => "SECONDLY",
    };
    let mut parts = vec![format!("FREQ={freq}")];
    if !rng.chance(60) {
        parts.push(format!("INTERVAL={}", rng.range(2, 5)));
    }
    let coarse = matches!(freq, "DAILY" | "WEEKLY" | "MONTHLY" | "YEARLY");
    let mut by_day = false;
    if rng.chance(15) {
        parts.push(format!(
            "BYMONTH={}",
            list(rng, 3, |r| r.range(1, 12).to_string())
        ));
    }
    if matches!(freq, "MONTHLY" | "YEARLY") && rng.chance(30) {
        parts.push(format!(
            "BYMONTHDAY={}",
            list(rng, 3, |r| match r.range(0, 9) {
                0 => "-1".to_owned(),
                1 => "-2".to_owned(),
                2 => "31".to_owned(),
                _ => r.range(1, 28).to_string(),
            })
        ));
    } else {
        let day_chance = match freq {
            "WEEKLY" => 50,
            "MONTHLY" => 35,
            "YEARLY" | "DAILY" => 15,
            "HOURLY" => 10,
            _ => 5,
        };
        if rng.chance(day_chance) {
            by_day = true;
            let ordinals = matches!(freq, "MONTHLY" | "YEARLY") && rng.chance(50);
            parts.push(format!(
                "BYDAY={}",
                list(rng, 3, |r| {
                    let day = r.pick(&DAYS);
                    if ordinals {
                        format!("{}{day}", r.pick(&["1", "2", "3", "4", "-1", "-2"]))
                    } else {
                        day.to_owned()
                    }
                })
            ));
            if freq == "MONTHLY" && !ordinals && rng.chance(30) {
                parts.push(format!("BYSETPOS={}", rng.pick(&["1", "2", "-1"])));
            }
        }
    }
    if freq == "YEARLY" && rng.chance(10) {
        if rng.chance(50) {
            parts.push(format!(
                "BYYEARDAY={}",
                rng.pick(&["1", "100", "-1", "59,60"])
            ));
        } else {
            parts.push(format!("BYWEEKNO={}", rng.pick(&["1", "20", "52", "-1"])));
        }
    }
    // The time parts; MINUTELY and SECONDLY take none with a day filter (refused by design).
    let dense = matches!(freq, "MINUTELY" | "SECONDLY");
    if !(dense && by_day) {
        let hour_chance = if coarse { 40 } else { 10 };
        if freq != "MINUTELY" && freq != "SECONDLY" && rng.chance(hour_chance) {
            parts.push(format!(
                "BYHOUR={}",
                list(rng, 3, |r| r.range(0, 23).to_string())
            ));
            if rng.chance(60) {
                parts.push(format!(
                    "BYMINUTE={}",
                    list(rng, 3, |r| (r.range(0, 11) * 5).to_string())
                ));
            }
        } else if freq == "HOURLY" && rng.chance(40) {
            parts.push(format!(
                "BYMINUTE={}",
                list(rng, 3, |r| (r.range(0, 11) * 5).to_string())
            ));
        }
        if coarse && rng.chance(5) {
            parts.push(format!("BYSECOND={}", rng.pick(&["0", "30", "0,30"])));
        }
    }
    let dtstart = dtstart(rng);
    match rng.range(0, 99) {
        0..=19 => parts.push(format!("COUNT={}", rng.range(1, 40))),
        20..=34 => {
            let until = zone
                .from_local_datetime(&(dtstart + Duration::days(rng.range(1, 400))))
                .earliest()
                .map(|t| t.naive_utc())
                .unwrap_or(dtstart);
            parts.push(format!("UNTIL={}Z", until.format("%Y%m%dT%H%M%S")));
        }
        _ => {}
    }
    let mut text = format!(
        "DTSTART;TZID={zone_name}:{}\nRRULE:{}",
        dtstart.format("%Y%m%dT%H%M%S"),
        parts.join(";")
    );
    if rng.chance(5) {
        let excluded = dtstart + Duration::days(rng.range(1, 10));
        text.push_str(&format!(
            "\nEXDATE;TZID={zone_name}:{}",
            excluded.format("%Y%m%dT%H%M%S")
        ));
    }
    if rng.chance(5) {
        let extra = (dtstart + Duration::days(rng.range(1, 30)))
            .date()
            .and_hms_opt(7, 0, 0)
            .unwrap();
        text.push_str(&format!(
            "\nRDATE;TZID={zone_name}:{}",
            extra.format("%Y%m%dT%H%M%S")
        ));
    }
    // Search from near DTSTART: dense rules a little after it (the oracle replays from
    // DTSTART), others up to a year on.
    let reach_minutes = match freq {
        "SECONDLY" => 90,
        "MINUTELY" => 3 * 1440,
        "HOURLY" => 60 * 1440,
        _ => 400 * 1440,
    };
    let after = dtstart + Duration::minutes(rng.range(-60, reach_minutes));
    let after_ms = zone.from_local_datetime(&after).earliest().map_or_else(
        || after.and_utc().timestamp_millis(),
        |t| t.timestamp_millis(),
    ) + rng.range(0, 59) * 1_000;
    Case {
        text,
        zone: zone_name,
        after_ms,
    }
}

/// A DTSTART in 2024–2030, two times in five in a month where clocks change, mostly on
/// round times.
fn dtstart(rng: &mut Rng) -> NaiveDateTime {
    let year = rng.range(2024, 2030);
    let month = if rng.chance(40) {
        [3, 4, 9, 10, 11][rng.range(0, 4) as usize]
    } else {
        rng.range(1, 12) as u32
    };
    let day = rng.range(1, 28) as u32;
    let (hour, minute, second) = if rng.chance(80) {
        (rng.range(0, 23), rng.range(0, 3) * 15, 0)
    } else {
        (rng.range(0, 23), rng.range(0, 59), rng.range(0, 59))
    };
    NaiveDate::from_ymd_opt(year, month, day)
        .unwrap()
        .and_hms_opt(hour as u32, minute as u32, second as u32)
        .unwrap()
}
