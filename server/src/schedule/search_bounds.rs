//! Rules that can never fire, and the bounds that stop their searches: each search ends,
//! with no instant or with an error that names the rule, and the shortcuts stay within their
//! budgets.

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

use super::properties::{ZONES, cron, rrule, utc};
use super::rrule::MAX_SCAN;
use super::{NextHints, Schedule, ScheduleSpec};

fn next(spec: &ScheduleSpec, zone: Tz, after: &str) -> Result<Option<DateTime<Utc>>, String> {
    Schedule::parse(spec, zone)
        .and_then(|s| s.next_after(utc(after), NextHints::default()))
        .map_err(|e| e.to_string())
}

#[test]
fn cron_days_that_never_come_have_no_next_instant() {
    for expression in [
        "0 0 30 2 *",
        "0 0 31 4 *",
        "0 0 0 31 2 ? *",
        "0 0 0 30 FEB ?",
    ] {
        for zone in ZONES {
            assert_eq!(
                next(&cron(expression), zone, "2026-01-01T00:00:00Z"),
                Ok(None),
                "{expression} in {zone}"
            );
        }
    }
}

#[test]
fn rrule_days_that_never_come_have_no_next_instant() {
    for rule in [
        "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=31",
        "FREQ=HOURLY;BYMONTH=4;BYMONTHDAY=31",
        "FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30",
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=31",
        "FREQ=MONTHLY;BYMONTH=6;BYMONTHDAY=31",
    ] {
        let text = format!("DTSTART:19700101T000000Z\nRRULE:{rule}");
        for after in ["1970-01-01T00:00:00Z", "2026-01-01T00:00:00Z"] {
            assert_eq!(
                next(&rrule(&text), chrono_tz::UTC, after),
                Ok(None),
                "{rule} after {after}"
            );
        }
    }
}

#[test]
fn a_rule_whose_interval_never_meets_its_times_is_refused() {
    // From second 0 an interval of 2 visits even seconds only (python-dateutil refuses it too).
    let text = "DTSTART:19700101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=2;BYSECOND=1";
    let refused = next(&rrule(text), chrono_tz::UTC, "2026-01-01T00:00:00Z").unwrap_err();
    assert!(refused.contains("never fires"), "{refused}");
}

#[test]
fn a_sparse_rule_still_finds_its_next_leap_day() {
    let text = "DTSTART:19700101T000000Z\nRRULE:FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=29";
    assert_eq!(
        next(&rrule(text), chrono_tz::UTC, "2026-01-01T00:00:00Z"),
        Ok(Some(utc("2028-02-29T00:00:00Z")))
    );
    let cron_leap = cron("0 0 29 2 *");
    assert_eq!(
        next(&cron_leap, chrono_tz::UTC, "2097-01-01T00:00:00Z"),
        Ok(Some(utc("2104-02-29T00:00:00Z"))),
        "2100 is not a leap year"
    );
}

#[test]
fn a_dense_rule_with_an_old_dtstart_restarts_instead_of_replaying() {
    // Billions of occurrences lie between DTSTART and the search: only a restart reaches it.
    let text = "DTSTART:19700101T000000Z\nRRULE:FREQ=SECONDLY";
    let zone = chrono_tz::America::New_York;
    assert_eq!(
        next(&rrule(text), zone, "2199-12-31T23:59:59Z"),
        Ok(Some(utc("2200-01-01T00:00:00Z")))
    );
    let every_7s =
        "DTSTART:20200101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=7;UNTIL=20300101T000000Z";
    let after = utc("2026-06-01T00:00:00Z");
    let next_7 = Schedule::parse(&rrule(every_7s), chrono_tz::UTC)
        .unwrap()
        .next_after(after, NextHints::default())
        .unwrap()
        .unwrap();
    assert_eq!(
        next_7.timestamp() % 7,
        utc("2020-01-01T00:00:00Z").timestamp() % 7
    );
    assert!(next_7 > after && next_7 <= after + Duration::seconds(7));
}

#[test]
fn a_rule_that_must_be_replayed_too_far_is_refused_with_a_clear_error() {
    // Stepping every 7 s through BYMINUTE, the crate's sequence depends on where it began, so
    // this rule is replayed from DTSTART: a year of it is far beyond the bound.
    let text = "DTSTART:20200101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=7;BYMINUTE=5";
    let err = next(&rrule(text), chrono_tz::UTC, "2022-01-01T00:00:00Z").unwrap_err();
    assert!(
        err.starts_with("schedule.rrule: steps over more than 100000 occurrences"),
        "{err}"
    );
    // From its last occurrence (the scheduler's cursor) it resumes instead.
    let schedule = Schedule::parse(&rrule(text), chrono_tz::UTC).unwrap();
    let cursor = schedule
        .next_after(utc("2020-12-31T23:00:00Z"), NextHints::default())
        .unwrap()
        .unwrap();
    let hints = NextHints {
        cursor: Some(cursor),
        ..NextHints::default()
    };
    let resumed = schedule.next_after(cursor, hints).unwrap().unwrap();
    assert!(resumed > cursor && resumed - cursor < Duration::hours(1));
}

#[test]
fn a_count_is_expanded_once_and_bounded() {
    let text = "DTSTART:20200101T000000Z\nRRULE:FREQ=SECONDLY;COUNT=50000";
    let schedule = Schedule::parse(&rrule(text), chrono_tz::UTC).unwrap();
    let last = utc("2020-01-01T00:00:00Z") + Duration::seconds(49_999);
    assert_eq!(
        schedule.next_after(last - Duration::seconds(1), NextHints::default()),
        Ok(Some(last))
    );
    assert_eq!(schedule.next_after(last, NextHints::default()), Ok(None));

    let too_many = format!(
        "DTSTART:20200101T000000Z\nRRULE:FREQ=SECONDLY;COUNT={}",
        MAX_SCAN + 1
    );
    let err = Schedule::parse(&rrule(&too_many), chrono_tz::UTC).unwrap_err();
    assert_eq!(err.field, "schedule.rrule");
    assert!(err.message.contains("use UNTIL instead"), "{err}");
    // A COUNT the rule never reaches costs what the rule has, not what it asks for.
    let yearly = "DTSTART:20200101T000000Z\nRRULE:FREQ=YEARLY;COUNT=1000000";
    assert!(Schedule::parse(&rrule(yearly), chrono_tz::UTC).is_ok());
}

#[test]
fn a_preview_of_a_replayed_rule_replays_it_once() {
    // Each instant found by its own search would replay ~70,000 occurrences: 1,000 of them
    // would be 70 million steps. One pass steps over them once.
    let text = "DTSTART:20200101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=7;BYMINUTE=5";
    let schedule = Schedule::parse(&rrule(text), chrono_tz::UTC).unwrap();
    let instants = schedule
        .preview(utc("2020-12-01T00:00:00Z"), 1_000, NextHints::default())
        .unwrap();
    assert_eq!(instants.len(), 1_000);
    assert!(instants.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn grid_arithmetic_at_the_ends_of_the_calendar_does_not_panic() {
    // DTSTART and a search near the ends of what chrono and the crate accept.
    for (text, after) in [
        (
            "DTSTART:00010101T000000Z\nRRULE:FREQ=WEEKLY;INTERVAL=3;WKST=SU",
            "2026-01-01T00:00:00Z",
        ),
        (
            "DTSTART:99991231T235959Z\nRRULE:FREQ=SECONDLY",
            "2026-01-01T00:00:00Z",
        ),
        (
            "DTSTART:20260101T000000Z\nRRULE:FREQ=MONTHLY;INTERVAL=1000",
            "9999-12-31T00:00:00Z",
        ),
        (
            "DTSTART:20260101T000000Z\nRRULE:FREQ=YEARLY;INTERVAL=65535",
            "2100-01-01T00:00:00Z",
        ),
        (
            "DTSTART:20260101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=65535;BYHOUR=3",
            "2100-01-01T00:00:00Z",
        ),
    ] {
        let _ = next(&rrule(text), chrono_tz::UTC, after);
    }
}

#[test]
fn a_rule_the_rrule_library_gets_wrong_is_refused_with_a_way_out() {
    let text = "DTSTART:20260101T000000Z\nRRULE:FREQ=MINUTELY;INTERVAL=15;BYDAY=MO;BYHOUR=9,10";
    let err = Schedule::parse(&rrule(text), chrono_tz::UTC)
        .unwrap_err()
        .to_string();
    assert!(err.contains("FREQ=MINUTELY with BYHOUR"), "{err}");
    assert!(
        err.contains("FREQ=WEEKLY with BYHOUR and BYMINUTE"),
        "{err}"
    );
    // The way out fires the same times: Mondays at 9:00, 9:15 … 10:45.
    let weekly =
        "DTSTART:20260101T000000Z\nRRULE:FREQ=WEEKLY;BYDAY=MO;BYHOUR=9,10;BYMINUTE=0,15,30,45";
    assert_eq!(
        next(&rrule(weekly), chrono_tz::UTC, "2026-01-05T10:40:00Z"),
        Ok(Some(utc("2026-01-05T10:45:00Z")))
    );
}
