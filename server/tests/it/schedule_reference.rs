//! Next-instant computation against an independent reference: `reference/schedules.json`,
//! written by `reference/generate.py` from croniter and python-dateutil on wall-clock time and
//! zoneinfo for the zones (DST gaps and overlaps in New York, London, Lord Howe's 30-minute
//! shift, Havana's and Santiago's midnight transitions, and more).
#![allow(
    clippy::unwrap_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::time::Instant;

use carillon_server::schedule::{NextHints, Schedule, ScheduleSpec, parse_zone};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Reference {
    count: usize,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    schedule: ScheduleSpec,
    timezone: String,
    after: String,
    expected: Vec<String>,
}

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

#[test]
fn next_instants_match_the_independent_reference() {
    let text = include_str!("../reference/schedules.json");
    let reference: Reference = serde_json::from_str(text).unwrap();
    let mut failures = Vec::new();
    for case in &reference.cases {
        let zone = parse_zone(&case.timezone).unwrap();
        let schedule = Schedule::parse(&case.schedule, zone).unwrap();
        let got: Vec<String> = schedule
            .preview(utc(&case.after), reference.count, NextHints::default())
            .unwrap()
            .into_iter()
            .map(|i| i.to_rfc3339_opts(SecondsFormat::Secs, true))
            .collect();
        if got != case.expected {
            failures.push(format!(
                "{:?} in {} after {}:\n  expected {:?}\n  got      {:?}",
                case.schedule, case.timezone, case.after, case.expected, got
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        reference.cases.len(),
        failures.join("\n")
    );
}

#[test]
fn every_single_next_after_agrees_with_the_sequence() {
    // next_after from any instant between two occurrences gives the later one: checked at the
    // midpoint of each gap of every reference sequence.
    let reference: Reference =
        serde_json::from_str(include_str!("../reference/schedules.json")).unwrap();
    for case in &reference.cases {
        let zone = parse_zone(&case.timezone).unwrap();
        let schedule = Schedule::parse(&case.schedule, zone).unwrap();
        for pair in case.expected.windows(2) {
            let (a, b) = (utc(&pair[0]), utc(&pair[1]));
            let mid = a + (b - a) / 2;
            let next = schedule.next_after(mid, NextHints::default()).unwrap();
            assert_eq!(
                next,
                Some(b),
                "{:?} in {} after {mid}",
                case.schedule,
                case.timezone
            );
        }
    }
}

fn spec(json: &str) -> ScheduleSpec {
    serde_json::from_str(json).unwrap()
}

fn preview(json: &str, zone: &str, after: &str, n: usize) -> Vec<String> {
    let schedule = Schedule::parse(&spec(json), parse_zone(zone).unwrap()).unwrap();
    schedule
        .preview(utc(after), n, NextHints::default())
        .unwrap()
        .into_iter()
        .map(|i| schedule.local(i).to_rfc3339())
        .collect()
}

#[test]
fn quartz_expressions_have_seconds_years_and_quartz_weekdays() {
    // 6 fields, seconds first; `?`; day-of-week 1 = Sunday in Quartz.
    assert_eq!(
        preview(
            r#"{"cron": "15 30 2 ? * 1"}"#,
            "UTC",
            "2026-01-01T00:00:00Z",
            2
        ),
        ["2026-01-04T02:30:15+00:00", "2026-01-11T02:30:15+00:00"]
    );
    // 7 fields with a year.
    assert_eq!(
        preview(
            r#"{"cron": "0 0 12 1 1 ? 2028"}"#,
            "UTC",
            "2026-01-01T00:00:00Z",
            2
        ),
        ["2028-01-01T12:00:00+00:00"]
    );
    // Last day of month, last Friday, nearest weekday, second Tuesday.
    assert_eq!(
        preview(
            r#"{"cron": "0 0 18 L * ?"}"#,
            "UTC",
            "2026-02-01T00:00:00Z",
            1
        ),
        ["2026-02-28T18:00:00+00:00"]
    );
    assert_eq!(
        preview(
            r#"{"cron": "0 0 18 ? * 6L"}"#,
            "UTC",
            "2026-02-01T00:00:00Z",
            1
        ),
        ["2026-02-27T18:00:00+00:00"]
    );
    assert_eq!(
        preview(
            r#"{"cron": "0 0 9 15W * ?"}"#,
            "UTC",
            "2026-08-01T00:00:00Z",
            1
        ),
        ["2026-08-14T09:00:00+00:00"],
        "15 August 2026 is a Saturday: the nearest weekday is Friday the 14th"
    );
    assert_eq!(
        preview(
            r#"{"cron": "0 0 9 ? * 3#2"}"#,
            "UTC",
            "2026-03-01T00:00:00Z",
            1
        ),
        ["2026-03-10T09:00:00+00:00"]
    );
    assert_eq!(
        preview(
            r#"{"cron": "0 0 9 ? JAN,JUL MON"}"#,
            "UTC",
            "2026-02-01T00:00:00Z",
            1
        ),
        ["2026-07-06T09:00:00+00:00"]
    );
}

#[test]
fn one_shot_and_interval_schedules() {
    assert_eq!(
        preview(
            r#"{"at": "2026-12-01T09:00:00"}"#,
            "Asia/Shanghai",
            "2026-01-01T00:00:00Z",
            3
        ),
        ["2026-12-01T09:00:00+08:00"]
    );
    assert_eq!(
        preview(
            r#"{"at": "2026-12-01T09:00:00Z"}"#,
            "UTC",
            "2026-12-02T00:00:00Z",
            3
        ),
        Vec::<String>::new(),
        "a one-shot in the past has nothing after it"
    );
    let every = Schedule::parse(&spec(r#"{"every": "90s"}"#), parse_zone("UTC").unwrap()).unwrap();
    let anchor = utc("2026-01-01T00:00:00Z");
    let hints = NextHints {
        anchor: Some(anchor),
        cursor: None,
    };
    let got = every
        .preview(utc("2026-01-01T00:02:00Z"), 2, hints)
        .unwrap();
    assert_eq!(
        got,
        [utc("2026-01-01T00:03:00Z"), utc("2026-01-01T00:04:30Z")]
    );
}

#[test]
fn an_rrule_resumed_from_a_cursor_continues_the_same_sequence() {
    let text =
        r#"{"rrule": "DTSTART;TZID=Europe/Paris:20200101T000000\nRRULE:FREQ=MINUTELY;INTERVAL=7"}"#;
    let schedule = Schedule::parse(&spec(text), parse_zone("Europe/Paris").unwrap()).unwrap();
    let after = utc("2026-06-15T10:00:00Z");
    let started = Instant::now();
    let from_history = schedule.preview(after, 12, NextHints::default()).unwrap();
    let replay = started.elapsed();
    let cursor = from_history[0];
    let started = Instant::now();
    let resumed = schedule
        .preview(
            cursor,
            11,
            NextHints {
                anchor: None,
                cursor: Some(cursor),
            },
        )
        .unwrap();
    let with_cursor = started.elapsed();
    assert_eq!(resumed, from_history[1..]);
    eprintln!("minutely rule from 2020: replay {replay:?}, resumed from a cursor {with_cursor:?}");
}

#[test]
fn bad_schedules_are_refused_with_the_field_named() {
    let utc_zone = parse_zone("UTC").unwrap();
    let cases = [
        (r#"{"cron": ""}"#, "schedule.cron"),
        (r#"{"cron": "61 * * * *"}"#, "schedule.cron"),
        (r#"{"cron": "* * *"}"#, "schedule.cron"),
        (r#"{"cron": "0 0 32 * *"}"#, "schedule.cron"),
        (r#"{"cron": "0 0 * 13 *"}"#, "schedule.cron"),
        (
            r#"{"rrule": "DTSTART:20260101T000000Z\nRRULE:FREQ=SECONDLY;INTERVAL=0"}"#,
            "schedule.rrule",
        ),
        (r#"{"rrule": "RRULE:FREQ=DAILY"}"#, "schedule.rrule"),
        (
            r#"{"rrule": "DTSTART;TZID=Mars/Olympus:20260101T000000\nRRULE:FREQ=DAILY"}"#,
            "schedule.rrule",
        ),
        (
            r#"{"rrule": "DTSTART:2026-01-01\nRRULE:FREQ=DAILY"}"#,
            "schedule.rrule",
        ),
        (r#"{"at": "next tuesday"}"#, "schedule.at"),
        (r#"{"every": "0s"}"#, "schedule.every"),
        (r#"{}"#, "schedule"),
        (r#"{"cron": "* * * * *", "every": "5m"}"#, "schedule"),
    ];
    for (json, field) in cases {
        let err = Schedule::parse(&spec(json), utc_zone).unwrap_err();
        assert_eq!(err.field, field, "{json}: {err}");
    }
    let huge = format!(r#"{{"cron": "{}"}}"#, "1,".repeat(500_000));
    let err = Schedule::parse(&spec(&huge), utc_zone).unwrap_err();
    assert_eq!(err.field, "schedule.cron");
    assert!(
        parse_zone("Mars/Olympus")
            .unwrap_err()
            .to_string()
            .starts_with("timezone:")
    );
}

#[test]
fn schedules_that_never_fire_yield_nothing_and_do_not_hang() {
    let utc_zone = parse_zone("UTC").unwrap();
    let after = utc("2026-01-01T00:00:00Z");
    let never_cron = Schedule::parse(&spec(r#"{"cron": "0 0 30 2 *"}"#), utc_zone).unwrap();
    assert_eq!(
        never_cron.next_after(after, NextHints::default()).unwrap(),
        None
    );
    let never_rrule =
        spec(r#"{"rrule": "DTSTART:20260101T000000Z\nRRULE:FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30"}"#);
    match Schedule::parse(&never_rrule, utc_zone) {
        Ok(s) => assert!(matches!(
            s.next_after(after, NextHints::default()),
            Ok(None) | Err(_)
        )),
        Err(e) => assert_eq!(e.field, "schedule.rrule"),
    }
}
