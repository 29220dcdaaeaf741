//! RFC 5545 recurrences against python-dateutil: random rules (FREQ × INTERVAL × BYxxx ×
//! COUNT/UNTIL, with EXDATE and RDATE now and then) in zones with DST, the next instants from
//! Carillon against `rrule_oracle/next.py` (dateutil's `rrulestr` on wall time, zoneinfo with
//! `fold=0`: the same DST rule, written by others).
//!
//! Every difference fails the test but one documented class (ARCHITECTURE.md, "Schedules
//! and time"): instants after 2037 in zones with DST, where the tz tables Carillon is built
//! with (chrono-tz) keep the last offset and zoneinfo extends the rules. `CARILLON_RRULE_CASES` sets how many rules (CI: 5,000;
//! the full run: 50,000 or more), `CARILLON_RRULE_SEED` the generator's seed.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

#[path = "oracles/common.rs"]
mod common;
#[path = "rrule_oracle/generate.rs"]
mod rrule_oracle_gen;

use std::path::Path;
use std::process::Command;

use carillon_server::schedule::{NextHints, Schedule, ScheduleSpec, parse_zone};
use chrono::DateTime;

use common::{Rng, env_number};
use rrule_oracle_gen::{Case, generate};

/// Instants compared per rule.
const COUNT: usize = 6;

#[test]
#[ignore = "needs python-dateutil (pip install python-dateutil; .ci/run installs it)"]
fn next_instants_match_python_dateutil() {
    let count: usize = env_number("CARILLON_RRULE_CASES", 5_000);
    let seed: u64 = env_number("CARILLON_RRULE_SEED", 0x0dd_ba11_2026);
    let mut rng = Rng::new(seed);
    let cases: Vec<Case> = (0..count).map(|_| generate(&mut rng)).collect();
    let answers = ask_dateutil(&cases);
    assert_eq!(answers.len(), cases.len(), "dateutil answered every line");

    let mut failures = Vec::new();
    let (mut compared, mut refused_by_both, mut after_2037) = (0usize, 0usize, 0usize);
    for (case, answer) in cases.iter().zip(&answers) {
        let zone = parse_zone(case.zone).unwrap();
        let spec = ScheduleSpec {
            rrule: Some(case.text.clone()),
            ..ScheduleSpec::default()
        };
        let describe = |what: String| {
            format!(
                "{:?} after {}: {what}",
                case.text,
                DateTime::from_timestamp_millis(case.after_ms).unwrap()
            )
        };
        let ours = Schedule::parse(&spec, zone).and_then(|schedule| {
            let after = DateTime::from_timestamp_millis(case.after_ms).unwrap();
            schedule.preview(after, COUNT, NextHints::default())
        });
        match (ours, answer.strip_prefix("ERR ")) {
            (Err(_), Some(_)) => refused_by_both += 1,
            (Err(e), None) => failures.push(describe(format!("Carillon refuses it: {e}"))),
            (Ok(_), Some(why)) => failures.push(describe(format!("dateutil refuses it: {why}"))),
            (Ok(instants), None) => {
                let ours: Vec<i64> = instants.iter().map(|i| i.timestamp_millis()).collect();
                let theirs: Vec<i64> = answer
                    .split_whitespace()
                    .map(|ms| ms.parse().unwrap())
                    .collect();
                compared += theirs.len();
                if ours != theirs && tz_rules_after_2037(&ours, &theirs, zone) {
                    after_2037 += 1;
                } else if ours != theirs {
                    let show = |list: &[i64]| {
                        list.iter()
                            .map(|ms| {
                                DateTime::from_timestamp_millis(*ms)
                                    .unwrap()
                                    .with_timezone(&zone)
                                    .to_rfc3339()
                            })
                            .collect::<Vec<_>>()
                    };
                    failures.push(describe(format!(
                        "\n  Carillon {:?}\n  dateutil {:?}",
                        show(&ours),
                        show(&theirs)
                    )));
                }
            }
        }
    }
    eprintln!(
        "rrule oracle: {count} rules (seed {seed:#x}), {compared} instants compared, \
         {refused_by_both} refused by both, {after_2037} differing only by DST after 2037"
    );
    assert!(
        failures.is_empty(),
        "{} of {count} rules differ from dateutil; the first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The two lists differ only in instants after 2037, by at most the two hours of a DST shift.
fn tz_rules_after_2037(ours: &[i64], theirs: &[i64], zone: chrono_tz::Tz) -> bool {
    use chrono::Datelike;
    ours.len() == theirs.len()
        && ours.iter().zip(theirs).all(|(a, b)| {
            a == b
                || ((a - b).abs() <= 2 * 3_600_000
                    && DateTime::from_timestamp_millis(*a.min(b))
                        .unwrap()
                        .with_timezone(&zone)
                        .year()
                        >= 2038)
        })
}

/// Runs the oracle once over every case.
fn ask_dateutil(cases: &[Case]) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rrule_oracle/next.py");
    let input: String = cases
        .iter()
        .map(|case| {
            let line = serde_json::json!({
                "text": case.text, "zone": case.zone, "after_ms": case.after_ms, "count": COUNT,
            });
            format!("{line}\n")
        })
        .collect();
    // A failure here with ModuleNotFoundError: pip install python-dateutil.
    common::ask(Command::new("python3").arg(&script), input)
}
