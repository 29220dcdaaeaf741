//! The DST rule around every offset change of every zone in the tz database, 2024–2027: the
//! instants a schedule gives are strictly increasing and are exactly the rule's instants, the
//! set of `zone::resolve(w)` for every wall time `w` the schedule names, so none is lost, even
//! where a gap-shifted wall time resolves after later ones (Lord Howe's 30-minute shift), and
//! none is repeated.
//!
//! The schedules are sub-daily and daily shapes, in Unix cron, Quartz cron and RRULE; which
//! wall times they name is written here as plain predicates, not asked of the parsers.

use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::{TZ_VARIANTS, Tz};

use super::{NextHints, Schedule, ScheduleSpec, zone};

/// How far either side of a change the instants are compared.
const WINDOW: Duration = Duration::hours(5);

struct Shape {
    spec: fn(Tz) -> ScheduleSpec,
    /// Whether the schedule names this wall time (to the minute; seconds are 0).
    names: fn(NaiveDateTime) -> bool,
}

fn cron(text: &str) -> ScheduleSpec {
    ScheduleSpec {
        cron: Some(text.to_owned()),
        ..ScheduleSpec::default()
    }
}

fn rrule(zone: Tz, rule: &str) -> ScheduleSpec {
    ScheduleSpec {
        rrule: Some(format!(
            "DTSTART;TZID={}:20200101T000000\nRRULE:{rule}",
            zone.name()
        )),
        ..ScheduleSpec::default()
    }
}

const SHAPES: [Shape; 6] = [
    Shape {
        spec: |_| cron("0,20,40 * * * *"),
        names: |w| w.minute() % 20 == 0,
    },
    Shape {
        spec: |_| cron("0 0/15 * * * ?"),
        names: |w| w.minute() % 15 == 0,
    },
    Shape {
        spec: |_| cron("30 2 * * *"),
        names: |w| w.hour() == 2 && w.minute() == 30,
    },
    Shape {
        spec: |_| cron("0 10 0-3 ? * *"),
        names: |w| w.hour() <= 3 && w.minute() == 10,
    },
    Shape {
        spec: |z| rrule(z, "FREQ=HOURLY;BYMINUTE=0,20,40"),
        names: |w| w.minute() % 20 == 0,
    },
    Shape {
        spec: |z| rrule(z, "FREQ=DAILY;BYHOUR=0,1,2,3;BYMINUTE=5,35"),
        names: |w| w.hour() <= 3 && (w.minute() == 5 || w.minute() == 35),
    },
];

fn offset(zone: Tz, at: DateTime<Utc>) -> i32 {
    zone.offset_from_utc_datetime(&at.naive_utc())
        .fix()
        .local_minus_utc()
}

/// The instants in `[from, to)` where `zone`'s offset changes, to the minute: a daily scan,
/// then bisection.
fn changes(zone: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut found = Vec::new();
    let mut day = from;
    while day < to {
        let next = day + Duration::days(1);
        if offset(zone, day) != offset(zone, next) {
            let (mut low, mut high) = (day, next);
            while high - low > Duration::minutes(1) {
                let middle = low + (high - low) / 2;
                if offset(zone, middle) == offset(zone, low) {
                    low = middle;
                } else {
                    high = middle;
                }
            }
            found.push(high);
        }
        day = next;
    }
    found
}

/// The rule's instants in `(from, to]`: every named wall time around the window resolved,
/// sorted, without repeats.
fn expected(shape: &Shape, zone: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let first = zone::local(from, zone).naive_local() - Duration::hours(4);
    let last = zone::local(to, zone).naive_local() + Duration::hours(4);
    let mut wall = first
        .with_second(0)
        .and_then(|w| w.with_nanosecond(0))
        .unwrap_or(first);
    let mut instants = Vec::new();
    while wall <= last {
        if (shape.names)(wall) {
            let instant = zone::resolve(wall, zone);
            if instant > from && instant <= to {
                instants.push(instant);
            }
        }
        wall += Duration::minutes(1);
    }
    instants.sort();
    instants.dedup();
    instants
}

fn given(schedule: &Schedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut instants = Vec::new();
    let mut at = from;
    while let Some(next) = schedule
        .next_after(at, NextHints::default())
        .unwrap_or(None)
    {
        if next > to {
            break;
        }
        instants.push(next);
        at = next;
    }
    instants
}

#[test]
fn every_zone_every_change_gives_the_rules_instants_in_order() {
    let from = NaiveDate::from_ymd_opt(2024, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let to = NaiveDate::from_ymd_opt(2028, 1, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc();
    let mut failures = Vec::new();
    let mut checked = 0;
    for zone in TZ_VARIANTS {
        let changes = changes(zone, from, to);
        if changes.is_empty() {
            continue;
        }
        let schedules: Vec<Schedule> = SHAPES
            .iter()
            .map(|shape| Schedule::parse(&(shape.spec)(zone), zone).unwrap())
            .collect();
        for change in changes {
            let (start, end) = (change - WINDOW, change + WINDOW);
            for (shape, schedule) in SHAPES.iter().zip(&schedules) {
                checked += 1;
                let want = expected(shape, zone, start, end);
                let got = given(schedule, start, end);
                if got != want {
                    failures.push(format!(
                        "{} around {change} with {:?}:\n  rule  {want:?}\n  given {got:?}",
                        zone.name(),
                        (shape.spec)(zone)
                    ));
                }
            }
        }
    }
    assert!(checked > 1_000, "only {checked} windows were checked");
    assert!(
        failures.is_empty(),
        "{} of {checked} windows differ; the first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

#[test]
fn lord_howe_keeps_the_wall_time_after_its_half_hour_gap() {
    // Spring forward on 2026-10-04 at 02:00 (+10:30 → +11:00): 02:20 is in the gap and is
    // read as 02:20+10:30 = 15:50Z; 02:40+11:00 = 15:40Z comes first and is not lost.
    let zone = chrono_tz::Australia::Lord_Howe;
    let schedule = Schedule::parse(&cron("0,20,40 * * * *"), zone).unwrap();
    let from = DateTime::parse_from_rfc3339("2026-10-03T15:00:00Z")
        .unwrap()
        .to_utc();
    let to = DateTime::parse_from_rfc3339("2026-10-03T16:30:00Z")
        .unwrap()
        .to_utc();
    let got: Vec<String> = given(&schedule, from, to)
        .iter()
        .map(|i| i.format("%H:%M").to_string())
        .collect();
    assert_eq!(got, ["15:10", "15:30", "15:40", "15:50", "16:00", "16:20"]);
}
