//! Property tests of the schedule parsers and the next-instant search: no input panics, every
//! search ends, and instants only ever move forward.
//!
//! Nothing here reads a clock: a search is shown to be bounded by its step limits (the crates'
//! and `rrule::MAX_SCAN`), with examples of rules that can never fire.

use chrono::{DateTime, Duration, NaiveDateTime, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use proptest::sample::select;

use super::rrule::RruleSchedule;
use super::{NextHints, Schedule, ScheduleSpec, zone};

/// Enough cases to explore the grammars while the module stays within a few seconds.
const CASES: u32 = 256;

/// Zones with DST gaps and overlaps (New York, London), a 30-minute shift (Lord Howe),
/// transitions at midnight (Havana, Santiago), a half-hour offset without DST (Kolkata), and UTC.
pub(super) const ZONES: [Tz; 7] = [
    chrono_tz::America::New_York,
    chrono_tz::Europe::London,
    chrono_tz::Australia::Lord_Howe,
    chrono_tz::America::Havana,
    chrono_tz::America::Santiago,
    chrono_tz::Asia::Kolkata,
    chrono_tz::UTC,
];

/// 2200-01-01T00:00:00Z in milliseconds.
const YEAR_2200_MS: i64 = 7_258_118_400_000;

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];
const ICAL_WEEKDAYS: [&str; 7] = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"];
const ALIASES: [&str; 9] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
    "@reboot",
    "@",
];
const FREQS: [&str; 7] = [
    "YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY",
];

fn config() -> ProptestConfig {
    ProptestConfig {
        // A failure prints its shrunk input, enough to reproduce it; proptest would otherwise
        // write a regressions file into the source tree.
        failure_persistence: None,
        ..ProptestConfig::with_cases(CASES)
    }
}

fn zones() -> impl Strategy<Value = Tz> {
    select(&ZONES[..])
}

/// An instant between 1970 and 2200, to the millisecond (instants are stored so).
fn instants() -> impl Strategy<Value = DateTime<Utc>> {
    (0..YEAR_2200_MS).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

fn walls() -> impl Strategy<Value = NaiveDateTime> {
    (0..YEAR_2200_MS / 1000).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap().naive_utc())
}

pub(super) fn cron(expression: &str) -> ScheduleSpec {
    ScheduleSpec {
        cron: Some(expression.to_owned()),
        ..ScheduleSpec::default()
    }
}

pub(super) fn rrule(text: &str) -> ScheduleSpec {
    ScheduleSpec {
        rrule: Some(text.to_owned()),
        ..ScheduleSpec::default()
    }
}

fn every(text: &str) -> ScheduleSpec {
    ScheduleSpec {
        every: Some(text.to_owned()),
        ..ScheduleSpec::default()
    }
}

pub(super) fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

fn join(parts: Vec<String>, separator: &str) -> String {
    parts.join(separator)
}

// --- Cron ---------------------------------------------------------------------------------

/// Any of the pieces a cron field is made of, valid or not.
fn cron_tokens() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (0u32..100).prop_map(|n| n.to_string()),
        1 => (0u32..100_000).prop_map(|n| n.to_string()),
        2 => select(&["*", "?", "/", "-", ",", "L", "W", "#", "LW", "l", "w"][..])
            .prop_map(str::to_owned),
        1 => select(&MONTHS[..]).prop_map(str::to_owned),
        1 => select(&WEEKDAYS[..]).prop_map(str::to_owned),
        1 => "[a-zA-Z]{1,3}",
    ]
}

/// Strings built from cron tokens: 1 to 8 fields, or an alias with a few fields after it.
fn cron_soup() -> impl Strategy<Value = String> {
    let field = || prop::collection::vec(cron_tokens(), 1..5).prop_map(|t| t.concat());
    prop_oneof![
        4 => prop::collection::vec(field(), 1..=8).prop_map(|f| join(f, " ")),
        1 => (select(&ALIASES[..]), prop::collection::vec(field(), 0..3))
            .prop_map(|(alias, rest)| format!("{alias} {}", rest.join(" "))),
    ]
}

/// A number field over `lo..=hi` in one of cron's forms.
fn number_field(lo: u32, hi: u32) -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("*".to_owned()),
        3 => (lo..=hi).prop_map(|n| n.to_string()),
        1 => (lo..=hi, lo..=hi).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        1 => (1..=hi.max(1)).prop_map(|s| format!("*/{s}")),
        1 => (lo..=hi, 1..=hi.max(1)).prop_map(|(a, s)| format!("{a}/{s}")),
        1 => prop::collection::vec(lo..=hi, 1..4)
            .prop_map(|v| join(v.iter().map(u32::to_string).collect(), ",")),
    ]
}

fn month_field() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => number_field(1, 12),
        1 => select(&MONTHS[..]).prop_map(str::to_owned),
        1 => (select(&MONTHS[..]), select(&MONTHS[..])).prop_map(|(a, b)| format!("{a},{b}")),
    ]
}

/// Cron expressions that mostly parse: 5-field Unix, 6- and 7-field Quartz with `?`, `L`, `W`,
/// `#`, names and aliases, including days that never come (`30 2`, `31 4`).
fn cron_expressions() -> impl Strategy<Value = String> {
    let unix_dow = prop_oneof![
        4 => number_field(0, 7),
        1 => select(&WEEKDAYS[..]).prop_map(str::to_owned),
        1 => (select(&WEEKDAYS[..]), select(&WEEKDAYS[..])).prop_map(|(a, b)| format!("{a}-{b}")),
    ];
    let unix = (
        number_field(0, 59),
        number_field(0, 23),
        number_field(1, 31),
        month_field(),
        unix_dow,
    )
        .prop_map(|(m, h, dom, mon, dow)| format!("{m} {h} {dom} {mon} {dow}"));
    let quartz_dom = prop_oneof![
        3 => number_field(1, 31),
        1 => Just("?".to_owned()),
        1 => Just("L".to_owned()),
        1 => Just("LW".to_owned()),
        1 => (1u32..=31).prop_map(|d| format!("{d}W")),
        1 => (1u32..=30).prop_map(|d| format!("L-{d}")),
    ];
    let quartz_dow = prop_oneof![
        3 => number_field(1, 7),
        2 => Just("?".to_owned()),
        1 => (1u32..=7).prop_map(|d| format!("{d}L")),
        1 => (1u32..=7, 1u32..=5).prop_map(|(d, n)| format!("{d}#{n}")),
        1 => select(&WEEKDAYS[..]).prop_map(str::to_owned),
    ];
    let year = prop_oneof![
        2 => Just(String::new()),
        1 => Just(" *".to_owned()),
        1 => (1970u32..2300).prop_map(|y| format!(" {y}")),
        1 => (1970u32..2200, 1u32..50).prop_map(|(y, s)| format!(" {y}/{s}")),
    ];
    let quartz = (
        number_field(0, 59),
        number_field(0, 59),
        number_field(0, 23),
        quartz_dom,
        month_field(),
        quartz_dow,
        year,
    )
        .prop_map(|(s, m, h, dom, mon, dow, y)| format!("{s} {m} {h} {dom} {mon} {dow}{y}"));
    prop_oneof![
        4 => unix,
        4 => quartz,
        1 => select(&ALIASES[..7]).prop_map(str::to_owned),
    ]
}

// --- RRULE --------------------------------------------------------------------------------

fn ical_date_time(wall: NaiveDateTime) -> String {
    wall.format("%Y%m%dT%H%M%S").to_string()
}

/// A DTSTART line for `wall`, floating, in UTC, in a named zone, as a date, or malformed.
fn dtstart_lines(wall: NaiveDateTime) -> impl Strategy<Value = String> {
    let text = ical_date_time(wall);
    let date = wall.format("%Y%m%d").to_string();
    prop_oneof![
        3 => Just(format!("DTSTART:{text}")),
        2 => Just(format!("DTSTART:{text}Z")),
        2 => select(&ZONES[..]).prop_map(move |z| format!("DTSTART;TZID={}:{text}", z.name())),
        1 => Just(format!("DTSTART;VALUE=DATE:{date}")),
        1 => Just(format!("DTSTART;TZID=Mars/Olympus:{}", ical_date_time(wall))),
        1 => Just(format!("dtstart:{}", ical_date_time(wall))),
    ]
}

fn signed(range: std::ops::RangeInclusive<i32>) -> impl Strategy<Value = String> {
    (range, any::<bool>()).prop_map(|(n, negative)| {
        if negative {
            format!("-{n}")
        } else {
            n.to_string()
        }
    })
}

fn list<S: Strategy<Value = String>>(item: S, max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(item, 1..=max).prop_map(|v| join(v, ","))
}

/// One `KEY=VALUE` part of an RRULE, mostly valid, with UNTIL after `dtstart`.
fn rule_parts(dtstart: NaiveDateTime) -> impl Strategy<Value = String> {
    let until = (0i64..4 * 366 * 86_400)
        .prop_map(move |s| format!("UNTIL={}", ical_date_time(dtstart + Duration::seconds(s))));
    let weekday = (prop::option::of(signed(1..=5)), select(&ICAL_WEEKDAYS[..]))
        .prop_map(|(n, d)| format!("{}{d}", n.unwrap_or_default()));
    prop_oneof![
        2 => (1u32..=12).prop_map(|n| format!("INTERVAL={n}")),
        1 => (1u32..=1000).prop_map(|n| format!("INTERVAL={n}")),
        2 => (1u32..=300).prop_map(|n| format!("COUNT={n}")),
        2 => until,
        2 => list((1u32..=12).prop_map(|n| n.to_string()), 3).prop_map(|v| format!("BYMONTH={v}")),
        2 => list(signed(1..=31), 3).prop_map(|v| format!("BYMONTHDAY={v}")),
        2 => list(weekday, 3).prop_map(|v| format!("BYDAY={v}")),
        2 => list((0u32..=23).prop_map(|n| n.to_string()), 3).prop_map(|v| format!("BYHOUR={v}")),
        2 => list((0u32..=59).prop_map(|n| n.to_string()), 3).prop_map(|v| format!("BYMINUTE={v}")),
        1 => list((0u32..=59).prop_map(|n| n.to_string()), 3).prop_map(|v| format!("BYSECOND={v}")),
        1 => list(signed(1..=6), 2).prop_map(|v| format!("BYSETPOS={v}")),
        1 => list(signed(1..=366), 2).prop_map(|v| format!("BYYEARDAY={v}")),
        1 => list(signed(1..=53), 2).prop_map(|v| format!("BYWEEKNO={v}")),
        1 => select(&ICAL_WEEKDAYS[..]).prop_map(|d| format!("WKST={d}")),
    ]
}

fn rrule_lines(dtstart: NaiveDateTime) -> impl Strategy<Value = String> {
    (
        select(&FREQS[..]),
        prop::collection::vec(rule_parts(dtstart), 0..4),
    )
        .prop_map(|(freq, parts)| {
            let mut all = vec![format!("FREQ={freq}")];
            all.extend(parts);
            format!("RRULE:{}", all.join(";"))
        })
}

/// RDATE or EXDATE lines with a few date-times near DTSTART.
fn date_lines(dtstart: NaiveDateTime) -> impl Strategy<Value = String> {
    let value = (-86_400i64..3 * 366 * 86_400)
        .prop_map(move |s| ical_date_time(dtstart + Duration::seconds(s)));
    (
        select(&["RDATE", "EXDATE"][..]),
        select(&["", ";TZID=Europe/London", ";VALUE=DATE-TIME"][..]),
        prop::collection::vec(value, 1..4),
    )
        .prop_map(|(name, params, values)| format!("{name}{params}:{}", values.join(",")))
}

/// RRULE texts that mostly parse, with the DTSTART they were written with: every FREQ, a
/// second RRULE line now and then, RDATE and EXDATE.
fn rrule_texts() -> impl Strategy<Value = (String, NaiveDateTime)> {
    walls().prop_flat_map(rrule_texts_from)
}

fn rrule_texts_from(dtstart: NaiveDateTime) -> impl Strategy<Value = (String, NaiveDateTime)> {
    (
        dtstart_lines(dtstart),
        rrule_lines(dtstart),
        prop::option::weighted(0.2, rrule_lines(dtstart)),
        prop::collection::vec(date_lines(dtstart), 0..2),
    )
        .prop_map(move |(start, rule, second, dates)| {
            let mut lines = vec![start, rule];
            lines.extend(second);
            lines.extend(dates);
            (lines.join("\n"), dtstart)
        })
}

/// RRULE-ish text: well-formed rules broken by junk lines, junk parts, `\n` escapes, or cut.
fn rrule_soup() -> impl Strategy<Value = String> {
    let junk_line = prop_oneof![
        "[A-Z]{0,8}(;[A-Z]{1,5}=[^:\n]{0,10})?:[^\n]{0,30}",
        Just("RRULE:".to_owned()),
        Just("RRULE:FREQ=".to_owned()),
        Just("RRULE:FREQ=DAILY;INTERVAL=0".to_owned()),
        Just("RRULE:FREQ=DAILY;COUNT=1;UNTIL=20200101T000000Z".to_owned()),
        Just("DTSTART;TZID=:20260101T000000".to_owned()),
        Just("DTSTART:99999999T999999".to_owned()),
        Just("EXDATE:".to_owned()),
        "\\PC{0,20}",
    ];
    (
        rrule_texts(),
        prop::collection::vec(junk_line, 0..3),
        select(&["\n", "\\n", "\r\n"][..]),
        any::<prop::sample::Index>(),
        any::<bool>(),
    )
        .prop_map(|((text, _), junk, separator, cut, truncate)| {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            lines.extend(junk);
            let text = lines.join(separator);
            if truncate {
                let at = cut.index(text.len() + 1);
                text.char_indices()
                    .take_while(|(i, _)| *i < at)
                    .map(|(_, c)| c)
                    .collect()
            } else {
                text
            }
        })
}

// --- Instants -----------------------------------------------------------------------------

/// Walks `next_after` from `start` up to 20 times and checks that every instant is strictly
/// after the one before. A search may end in an error (a bound reached), never in a panic.
fn check_walk(
    schedule: &Schedule,
    start: DateTime<Utc>,
    anchor: Option<DateTime<Utc>>,
) -> Result<(), TestCaseError> {
    let mut previous = start;
    let mut cursor = None;
    for _ in 0..20 {
        let hints = NextHints { anchor, cursor };
        let Ok(Some(next)) = schedule.next_after(previous, hints) else {
            break;
        };
        prop_assert!(
            next > previous,
            "{next} is not after {previous} (walk from {start})"
        );
        previous = next;
        cursor = Some(next);
    }
    Ok(())
}

fn check_preview(
    schedule: &Schedule,
    start: DateTime<Utc>,
    anchor: Option<DateTime<Utc>>,
) -> Result<(), TestCaseError> {
    let hints = NextHints {
        anchor,
        cursor: None,
    };
    if let Ok(instants) = schedule.preview(start, 20, hints) {
        prop_assert!(instants.len() <= 20);
        let mut previous = start;
        for instant in instants {
            prop_assert!(instant > previous, "{instant} is not after {previous}");
            previous = instant;
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn parsing_any_text_as_cron_never_panics(text in any::<String>(), zone in zones()) {
        let _ = Schedule::parse(&cron(&text), zone);
    }

    #[test]
    fn parsing_cron_tokens_in_any_order_never_panics(text in cron_soup(), zone in zones()) {
        let _ = Schedule::parse(&cron(&text), zone);
    }

    #[test]
    fn parsing_any_text_as_an_rrule_never_panics(text in any::<String>(), zone in zones()) {
        let _ = Schedule::parse(&rrule(&text), zone);
    }

    #[test]
    fn parsing_rrule_text_with_junk_never_panics(text in rrule_soup(), zone in zones()) {
        let _ = Schedule::parse(&rrule(&text), zone);
    }

    #[test]
    fn parsing_any_text_as_an_interval_never_panics(text in any::<String>(), zone in zones()) {
        let _ = Schedule::parse(&every(&text), zone);
    }

    #[test]
    fn cron_instants_only_move_forward(
        expression in cron_expressions(),
        zone in zones(),
        start in instants(),
    ) {
        if let Ok(schedule) = Schedule::parse(&cron(&expression), zone) {
            check_walk(&schedule, start, None)?;
            check_preview(&schedule, start, None)?;
        }
    }

    #[test]
    fn rrule_instants_only_move_forward(
        (text, _) in rrule_texts(),
        zone in zones(),
        start in instants(),
    ) {
        if let Ok(schedule) = Schedule::parse(&rrule(&text), zone) {
            check_walk(&schedule, start, None)?;
            check_preview(&schedule, start, None)?;
        }
    }

    #[test]
    fn interval_instants_only_move_forward(
        seconds in 1i64..=3660 * 86_400,
        zone in zones(),
        anchor in prop::option::of(instants()),
        start in instants(),
    ) {
        let schedule = Schedule::parse(&every(&format!("{seconds}s")), zone).unwrap();
        check_walk(&schedule, start, anchor)?;
        check_preview(&schedule, start, anchor)?;
    }

    /// The shortcuts of the RRULE search (restarting on the rule's grid, resuming from a
    /// cursor, one pass for a preview) give what replaying the rule from DTSTART gives.
    #[test]
    fn rrule_searches_agree_with_replaying_from_dtstart(
        (text, dtstart) in rrule_texts(),
        zone in zones(),
        offset in prop_oneof![
            Just(0i64),
            -3_600i64..3_600,
            -86_400i64..7 * 86_400,
            0i64..3 * 366 * 86_400,
        ],
    ) {
        let Ok(rule) = RruleSchedule::parse(&text, zone) else {
            return Ok(());
        };
        let after = zone::resolve(dtstart, zone) + Duration::seconds(offset);
        let Ok(replayed) = rule.preview_replayed(after, 8) else {
            return Ok(());
        };
        prop_assert_eq!(&rule.preview(after, 8, None).unwrap(), &replayed);
        let mut previous = after;
        for &expected in &replayed {
            // Without a shortcut, a search from `previous` replays further than the preview's
            // did and may reach the bound: only what it finds is compared.
            for cursor in [None, Some(previous).filter(|p| *p != after)] {
                if let Ok(found) = rule.next_after(previous, cursor) {
                    prop_assert_eq!(
                        found,
                        Some(expected),
                        "after {} with cursor {:?}", previous, cursor
                    );
                }
            }
            previous = expected;
        }
    }
}
