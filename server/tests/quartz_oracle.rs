//! Quartz 2.3.2 itself as the oracle for Quartz cron: random valid expressions of every form
//! Quartz accepts (weighted toward the common ones) × zones × start instants, the next five
//! instants from Carillon against `CronExpression.getNextValidTimeAfter` from Debian's
//! `libquartz2-java`, run by `quartz_oracle/QuartzNext.java`.
//!
//! A difference fails the test unless it belongs to a class ARCHITECTURE.md names as
//! deliberate ("Schedules and time", its Cron line), each recognised here by
//! what defines it, never by the expression's text alone:
//! - `dst-gap`: a wall time inside a spring-forward gap. Carillon fires it with the offset
//!   before the gap (RFC 5545); Quartz skips it.
//! - `dst-overlap`: a wall time in a repeated hour. Carillon fires its first pass only;
//!   Quartz can land on the second pass instead, or fire both.
//! - `star-day`: `*` in both day fields, or `*` in one and a restriction in the other. Quartz
//!   refuses it; Carillon reads the `*` as `?`.
//! - `quartz-hangs`: Quartz's search never ends (stopped after two seconds); Carillon answers.
//! - `nW-past-month-end`: `nW` in a month without day `n` (`31W` in April). Carillon: no such
//!   day, the month is skipped. Quartz overflows into the next month and, when that lands on
//!   a Saturday, comes back to the last day (so `31W` fires on April 30 only in years where
//!   May 1 is a Saturday).
//! - `L-n-before-month`: `L-n` or `L-nW` in a month of `n` days or fewer (`L-30W` in April).
//!   Carillon: no such day, the month is skipped. Quartz sets day 0 or less and its calendar
//!   rolls back into the month before, then forward again (`L-30W` fires on April 1).
//! - `tz-rules-after-2037`: instants after 2037 in zones with DST. The tz database Carillon is
//!   built with (chrono-tz) lists transitions to 2037 and keeps the last offset after it;
//!   Java extends the rules. Carillon's instants there can be off by the DST shift.
//! - `year-horizon`: Quartz's year field ends at this year + 100 (2126 when written); Carillon's
//!   is fixed at 2199 so that an expression's meaning does not change with the clock.
//!
//! `CARILLON_QUARTZ_CASES` sets how many expressions (CI: 20,000; the full run: 100,000 or
//! more), `CARILLON_QUARTZ_SEED` the generator's seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

#[path = "oracles/common.rs"]
mod common;
#[path = "quartz_oracle/generate.rs"]
mod quartz_oracle_gen;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use carillon_server::schedule::{NextHints, Schedule, ScheduleSpec, parse_zone};
use chrono::{DateTime, Datelike, Offset, TimeZone, Utc};
use chrono_tz::Tz;

use common::{Rng, env_number};
use quartz_oracle_gen::{Case, generate, mutate};

const QUARTZ_JAR: &str = "/usr/share/java/quartz2.jar";
/// Instants compared per expression.
const CHAIN: usize = 5;
/// Stand-ins for Quartz's search throwing, or not ending within two seconds.
const THREW: i64 = i64::MIN;
const HUNG: i64 = i64::MIN + 1;

#[test]
#[ignore = "needs a JDK and Debian's libquartz2-java (.ci/run installs them)"]
fn next_instants_match_quartz_itself() {
    let count: usize = env_number("CARILLON_QUARTZ_CASES", 20_000);
    let seed: u64 = env_number("CARILLON_QUARTZ_SEED", 0x5eed_ca11_1011);
    let mut rng = Rng::new(seed);
    let cases: Vec<Case> = (0..count).map(|_| generate(&mut rng)).collect();
    compare("expressions", seed, &cases);
}

/// Valid expressions with one field replaced by a near miss (`60`, `L-31`, `6#6`, `5X`,
/// `MON-FRI/2`, which Quartz reads as `MON-FRI`…): Carillon refuses what Quartz refuses, and what Quartz accepts Carillon
/// accepts with the same instants, or refuses in one of the documented classes of text Quartz
/// ignores.
#[test]
#[ignore = "needs a JDK and Debian's libquartz2-java (.ci/run installs them)"]
fn near_misses_are_refused_where_quartz_refuses_them() {
    let count: usize = env_number("CARILLON_QUARTZ_CASES", 20_000) / 4;
    let seed: u64 = env_number("CARILLON_QUARTZ_SEED", 0x5eed_ca11_1011) ^ 0x0dd;
    let mut rng = Rng::new(seed);
    let cases: Vec<Case> = (0..count)
        .map(|_| {
            let case = generate(&mut rng);
            mutate(&mut rng, case)
        })
        .collect();
    compare("near misses", seed, &cases);
}

/// Asks Quartz about every case and fails on any difference outside the documented classes.
fn compare(what: &str, seed: u64, cases: &[Case]) {
    let answers = ask_quartz(cases);
    assert_eq!(answers.len(), cases.len(), "Quartz answered every line");
    let mut classes: BTreeMap<&'static str, (usize, String)> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut compared_instants = 0usize;
    for (case, answer) in cases.iter().zip(&answers) {
        match judge(case, answer, &mut compared_instants) {
            Verdict::Same => {}
            Verdict::Deliberate(class, example) => {
                let entry = classes.entry(class).or_insert((0, example));
                entry.0 += 1;
            }
            Verdict::Differs(why) => failures.push(why),
        }
    }
    let count = cases.len();
    eprintln!(
        "quartz oracle: {count} {what} (seed {seed:#x}), {compared_instants} instants \
         compared; deliberate differences: {classes:#?}"
    );
    assert!(
        failures.is_empty(),
        "{} of {count} {what} differ from Quartz beyond the documented classes; the first \
         ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Compiles the oracle and feeds it every case in one process.
fn ask_quartz(cases: &[Case]) -> Vec<String> {
    assert!(
        Path::new(QUARTZ_JAR).exists(),
        "{QUARTZ_JAR} is missing: apt-get install libquartz2-java (and a JDK)"
    );
    let classes = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/quartz_oracle/QuartzNext.java");
    let javac = Command::new("javac")
        .args(["-cp", QUARTZ_JAR, "-d"])
        .arg(classes.path())
        .arg(&source)
        .status()
        .expect("javac runs (apt-get install default-jdk-headless)");
    assert!(javac.success(), "javac compiled {}", source.display());
    let classpath = format!("{}:{QUARTZ_JAR}", classes.path().display());
    let input: String = cases
        .iter()
        .map(|case| {
            format!(
                "{}\t{}\t{CHAIN}\t{}\n",
                case.zone,
                case.start.timestamp_millis(),
                case.expression
            )
        })
        .collect();
    common::ask(
        Command::new("java").args(["-cp", &classpath, "QuartzNext"]),
        input,
    )
}

enum Verdict {
    Same,
    Deliberate(&'static str, String),
    Differs(String),
}

fn judge(case: &Case, answer: &str, compared: &mut usize) -> Verdict {
    let zone = parse_zone(case.zone).unwrap();
    let spec = ScheduleSpec {
        cron: Some(case.expression.clone()),
        ..ScheduleSpec::default()
    };
    let ours = Schedule::parse(&spec, zone);
    let describe = |what: &str| {
        format!(
            "{:?} in {} after {}: {what}",
            case.expression,
            case.zone,
            case.start.to_rfc3339()
        )
    };
    let theirs = match answer.strip_prefix("ERR ") {
        Some(message) => {
            return match ours {
                Err(_) => Verdict::Same,
                Ok(_) if star_day(&case.expression) => {
                    Verdict::Deliberate("star-day", case.expression.clone())
                }
                Ok(_) => Verdict::Differs(describe(&format!("Quartz refuses it: {message}"))),
            };
        }
        None => answer,
    };
    let schedule = match ours {
        Ok(schedule) => schedule,
        Err(e) => {
            let message = e.to_string();
            return match ignored_text_class(&message) {
                Some(class) => Verdict::Deliberate(class, describe(&message)),
                None => Verdict::Differs(describe(&format!("Carillon refuses it: {message}"))),
            };
        }
    };
    let theirs: Vec<Option<i64>> = theirs
        .split(' ')
        .map(|t| match t {
            "-" => None,
            "THROW" => Some(THREW),
            "HANG" => Some(HUNG),
            ms => Some(ms.parse().unwrap()),
        })
        .collect();
    let mut previous = case.start;
    for (index, quartz) in theirs.iter().enumerate() {
        let carillon = schedule
            .next_after(previous, NextHints::default())
            .unwrap()
            .map(|i| i.timestamp_millis());
        *compared += 1;
        if *quartz == Some(HUNG) {
            return Verdict::Deliberate("quartz-hangs", describe(&show(carillon, zone)));
        }
        if carillon == *quartz {
            match carillon {
                Some(ms) => previous = DateTime::from_timestamp_millis(ms).unwrap(),
                None => return Verdict::Same,
            }
            continue;
        }
        if let (Some(c), Some(q)) = (carillon, *quartz)
            && let Some(class) = dst_class(zone, c.min(q), c.max(q))
        {
            return Verdict::Deliberate(class, describe(&format!("Carillon {c}, Quartz {q}")));
        }
        if let Some(q) = *quartz
            && weekday_past_month_end(&case.expression, q, zone)
        {
            let what = format!(
                "Carillon {}, Quartz {}",
                show(carillon, zone),
                show(Some(q), zone)
            );
            return Verdict::Deliberate("nW-past-month-end", describe(&what));
        }
        if let Some(q) = *quartz
            && offset_before_month(&case.expression, q, zone)
        {
            let what = format!(
                "Carillon {}, Quartz {}",
                show(carillon, zone),
                show(Some(q), zone)
            );
            return Verdict::Deliberate("L-n-before-month", describe(&what));
        }
        if let (Some(c), Some(q)) = (carillon, *quartz)
            && (c - q).abs() <= 2 * 3_600_000
            && year_of(c.min(q), zone) >= 2038
        {
            let what = format!(
                "Carillon {}, Quartz {}",
                show(carillon, zone),
                show(Some(q), zone)
            );
            return Verdict::Deliberate("tz-rules-after-2037", describe(&what));
        }
        if let (Some(c), None) = (carillon, *quartz)
            && year_of(c, zone) > Utc::now().year() + 100
        {
            return Verdict::Deliberate("year-horizon", describe(&show(carillon, zone)));
        }
        return Verdict::Differs(describe(&format!(
            "instant {index}: Carillon {}, Quartz {}",
            show(carillon, zone),
            show(*quartz, zone)
        )));
    }
    Verdict::Same
}

fn show(ms: Option<i64>, zone: Tz) -> String {
    match ms {
        None => "none".to_owned(),
        Some(THREW) => "an exception".to_owned(),
        Some(HUNG) => "no answer (its search did not end)".to_owned(),
        Some(ms) => {
            let at = DateTime::from_timestamp_millis(ms).unwrap();
            format!(
                "{} ({})",
                at.with_timezone(&zone).to_rfc3339(),
                at.to_rfc3339()
            )
        }
    }
}

/// The year of the instant `ms` in `zone`.
fn year_of(ms: i64, zone: Tz) -> i32 {
    DateTime::from_timestamp_millis(ms)
        .unwrap()
        .with_timezone(&zone)
        .year()
}

/// The day-of-month field is `nW` and Quartz's instant `ms` falls in a month without day `n`.
fn weekday_past_month_end(expression: &str, ms: i64, zone: Tz) -> bool {
    let dom = expression
        .split_whitespace()
        .nth(3)
        .unwrap_or("")
        .to_ascii_uppercase();
    let Some(Ok(n)) = dom.strip_suffix('W').map(str::parse::<u32>) else {
        return false;
    };
    month_length(ms, zone) < n
}

/// The day-of-month field is `L-n` or `L-nW` and Quartz's instant `ms` falls in a month of
/// `n` days or fewer, where the day `n` before the last is not in the month.
fn offset_before_month(expression: &str, ms: i64, zone: Tz) -> bool {
    let dom = expression
        .split_whitespace()
        .nth(3)
        .unwrap_or("")
        .to_ascii_uppercase();
    let Some(Ok(n)) = dom
        .strip_prefix("L-")
        .map(|rest| rest.trim_end_matches('W').parse::<u32>())
    else {
        return false;
    };
    month_length(ms, zone) <= n
}

/// How many days the month of the instant `ms` in `zone` has.
fn month_length(ms: i64, zone: Tz) -> u32 {
    let date = DateTime::from_timestamp_millis(ms)
        .unwrap()
        .with_timezone(&zone)
        .date_naive();
    let (y, m) = (date.year(), date.month());
    let next = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    chrono::NaiveDate::from_ymd_opt(next.0, next.1, 1)
        .and_then(|d| d.pred_opt())
        .map_or(31, |d| d.day())
}

/// The class of an expression Quartz accepts and Carillon refuses, from Carillon's reason:
/// text Quartz reads and then ignores, steps it does not check, years past 2199.
fn ignored_text_class(message: &str) -> Option<&'static str> {
    const CLASSES: [(&str, &str); 7] = [
        ("cannot be in a list", "quartz-keeps-first-of-list"),
        ("a step of 0 never advances", "quartz-reads-step-0"),
        ("is not a value", "quartz-ignores-text"),
        ("after '/' is not a number", "quartz-ignores-text"),
        ("is larger than the field", "quartz-unchecked-step"),
        ("year field", "year-range"),
        ("is out of range", "quartz-unchecked-value"),
    ];
    CLASSES
        .iter()
        .find(|(needle, _)| message.contains(needle))
        .map(|(_, class)| *class)
}

/// `*` in one day field and anything but `?` in the other.
fn star_day(expression: &str) -> bool {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let (month, week) = (fields[3], fields[5]);
    (month == "*" && week != "?") || (week == "*" && month != "?")
}

/// The class of a difference between the instants `early` and `late` (ms): a DST gap or
/// overlap when the zone changes its offset within three hours of the earlier one.
fn dst_class(zone: Tz, early: i64, late: i64) -> Option<&'static str> {
    let offset = |ms: i64| {
        zone.offset_from_utc_datetime(&DateTime::from_timestamp_millis(ms).unwrap().naive_utc())
            .fix()
            .local_minus_utc()
    };
    const HOURS_3: i64 = 3 * 3_600_000;
    let (before, after) = (offset(early - HOURS_3), offset(early.min(late) + HOURS_3));
    if before == after {
        return None;
    }
    Some(if after > before {
        "dst-gap"
    } else {
        "dst-overlap"
    })
}
