//! Quartz forms by example. Quartz itself is the judge in `tests/quartz_oracle.rs`; these
//! name each form's meaning and each refusal's message.

use chrono::NaiveDateTime;

use super::QuartzCron;

fn wall(text: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").unwrap()
}

/// The next `count` wall times after `after`.
fn next(expression: &str, after: &str, count: usize) -> Vec<String> {
    let cron = QuartzCron::parse(expression).unwrap();
    let mut at = wall(after);
    let mut out = Vec::new();
    for _ in 0..count {
        match cron.next_after(at) {
            Some(next) => {
                out.push(next.format("%Y-%m-%d %H:%M:%S").to_string());
                at = next;
            }
            None => break,
        }
    }
    out
}

fn refusal(expression: &str) -> String {
    QuartzCron::parse(expression).unwrap_err().to_string()
}

#[test]
fn start_and_step_count_from_the_start_to_the_end_of_the_field() {
    assert_eq!(
        next("0 0/5 * * * ?", "2026-01-01 10:07:00", 3),
        [
            "2026-01-01 10:10:00",
            "2026-01-01 10:15:00",
            "2026-01-01 10:20:00"
        ]
    );
    assert_eq!(
        next("0/15 * * * * ?", "2026-01-01 10:00:50", 2),
        ["2026-01-01 10:01:00", "2026-01-01 10:01:15"]
    );
    // 7/20 in minutes is 7, 27, 47: the hour starts the count over.
    assert_eq!(
        next("0 7/20 * * * ?", "2026-01-01 10:50:00", 2),
        ["2026-01-01 11:07:00", "2026-01-01 11:27:00"]
    );
    assert_eq!(
        next("0 0 12 1/10 * ?", "2026-01-25 00:00:00", 2),
        ["2026-01-31 12:00:00", "2026-02-01 12:00:00"]
    );
}

#[test]
fn a_step_after_names_is_dropped_as_quartz_drops_it_and_said() {
    // What Quartz 2.3.2 answers for each (the oracle checks it at random too).
    assert_eq!(
        next("0 0 0 1 MAR-MAY/2 ?", "2026-01-01 00:00:00", 4),
        [
            "2026-03-01 00:00:00",
            "2026-04-01 00:00:00",
            "2026-05-01 00:00:00",
            "2027-03-01 00:00:00"
        ]
    );
    assert_eq!(
        next("0 0 0 ? * MON/2", "2026-01-01 00:00:00", 2),
        ["2026-01-05 00:00:00", "2026-01-12 00:00:00"]
    );
    assert_eq!(
        next("0 0 0 ? * SUN-SAT/2", "2026-01-01 00:00:00", 3),
        [
            "2026-01-02 00:00:00",
            "2026-01-03 00:00:00",
            "2026-01-04 00:00:00"
        ]
    );
    assert_eq!(
        next("0 0 0 1 NOV-FEB/2 ?", "2026-01-15 00:00:00", 3),
        [
            "2026-02-01 00:00:00",
            "2026-11-01 00:00:00",
            "2026-12-01 00:00:00"
        ]
    );
    let cron = QuartzCron::parse("0 0 0 ? MAR-MAY/2,JUL MON/2,FRI").unwrap();
    assert_eq!(
        cron.notes(),
        [
            "month field \"MAR-MAY/2\": Quartz drops a step after names, so this is each of MAR \
             to MAY; to step by 2, write 3-5/2",
            "day-of-week field \"MON/2\": Quartz drops a step after names, so this is MON \
             alone; to step by 2, write 2/2",
        ]
    );
    assert!(
        QuartzCron::parse("0 0 0 ? 3-5/2 2/2")
            .unwrap()
            .notes()
            .is_empty()
    );
}

#[test]
fn ranges_wrap_past_the_end_of_the_field() {
    assert_eq!(
        next("0 0 22-2/2 * * ?", "2026-01-01 12:00:00", 3),
        [
            "2026-01-01 22:00:00",
            "2026-01-02 00:00:00",
            "2026-01-02 02:00:00"
        ]
    );
    // FRI-MON: Friday to Monday. 2026-01-01 is a Thursday.
    assert_eq!(
        next("0 0 9 ? * FRI-MON", "2026-01-01 12:00:00", 4),
        [
            "2026-01-02 09:00:00",
            "2026-01-03 09:00:00",
            "2026-01-04 09:00:00",
            "2026-01-05 09:00:00"
        ]
    );
}

#[test]
fn the_last_day_forms() {
    // L, L-2, LW, L-2W in February 2026 (28 days; the 28th is a Saturday).
    assert_eq!(
        next("0 0 0 L * ?", "2026-02-01 00:00:00", 1),
        ["2026-02-28 00:00:00"]
    );
    assert_eq!(
        next("0 0 0 L-2 * ?", "2026-02-01 00:00:00", 1),
        ["2026-02-26 00:00:00"]
    );
    assert_eq!(
        next("0 0 0 LW * ?", "2026-02-01 00:00:00", 1),
        ["2026-02-27 00:00:00"]
    );
    // L-6 is the 22nd, a Sunday: the Monday after.
    assert_eq!(
        next("0 0 0 L-6W * ?", "2026-02-01 00:00:00", 1),
        ["2026-02-23 00:00:00"]
    );
    // 6L: the last Friday; 2#2: the second Monday; a lone L: Saturday.
    assert_eq!(
        next("0 0 0 ? * 6L", "2026-02-01 00:00:00", 1),
        ["2026-02-27 00:00:00"]
    );
    assert_eq!(
        next("0 0 0 ? * 2#2", "2026-02-01 00:00:00", 1),
        ["2026-02-09 00:00:00"]
    );
    assert_eq!(
        next("0 0 0 ? * L", "2026-02-01 00:00:00", 1),
        ["2026-02-07 00:00:00"]
    );
}

#[test]
fn the_nearest_weekday_stays_in_its_month() {
    // 2026-08-01 is a Saturday: 1W is Monday the 3rd, not Friday in July.
    assert_eq!(
        next("0 0 0 1W * ?", "2026-07-15 00:00:00", 1),
        ["2026-08-03 00:00:00"]
    );
    // 2026-05-31 is a Sunday: 31W is Friday the 29th. April has no 31st and no 31W.
    assert_eq!(
        next("0 0 0 31W * ?", "2026-04-01 00:00:00", 1),
        ["2026-05-29 00:00:00"]
    );
    // 2026-03-15 is a Sunday: Monday the 16th.
    assert_eq!(
        next("0 0 0 15W * ?", "2026-03-01 00:00:00", 1),
        ["2026-03-16 00:00:00"]
    );
}

#[test]
fn the_year_field_takes_ranges_lists_and_steps() {
    assert_eq!(
        next("0 0 0 1 1 ? 2030/5", "2026-06-01 00:00:00", 2),
        ["2030-01-01 00:00:00", "2035-01-01 00:00:00"]
    );
    assert_eq!(
        next("0 0 0 1 1 ? 2027,2029-2030", "2026-06-01 00:00:00", 4),
        [
            "2027-01-01 00:00:00",
            "2029-01-01 00:00:00",
            "2030-01-01 00:00:00"
        ]
    );
    assert!(next("0 0 0 1 1 ? 2020", "2026-06-01 00:00:00", 1).is_empty());
}

#[test]
fn names_and_lower_case_are_read_as_quartz_reads_them() {
    assert_eq!(
        next("0 0 9 ? jan,mar mon", "2026-01-01 00:00:00", 1),
        ["2026-01-05 09:00:00"]
    );
    assert_eq!(
        next("0 0 9 ? * fri#3", "2026-01-01 00:00:00", 1),
        ["2026-01-16 09:00:00"]
    );
}

#[test]
fn a_star_in_one_day_field_stands_aside_for_the_other() {
    assert_eq!(
        next("0 0 12 * * *", "2026-01-01 13:00:00", 1),
        ["2026-01-02 12:00:00"]
    );
    assert_eq!(
        next("0 0 12 * * MON", "2026-01-01 13:00:00", 1),
        ["2026-01-05 12:00:00"]
    );
}

#[test]
fn a_day_that_never_comes_has_no_instant() {
    assert!(next("0 0 0 30 2 ?", "2026-01-01 00:00:00", 1).is_empty());
    assert!(next("0 0 0 ? 2 2#5 2026", "2026-01-01 00:00:00", 1).is_empty());
}

#[test]
fn refusals_name_the_field_and_the_token() {
    let cases = [
        (
            "0 0 12 1 * MON",
            "day-of-month \"1\" and day-of-week \"MON\" are both given",
        ),
        ("0 0 12 ? * ?", "both '?'"),
        (
            "60 * * * * ?",
            "seconds field \"60\": 60 is out of range; use 0–59",
        ),
        ("0 0 24 * * ?", "hours field \"24\": 24 is out of range"),
        (
            "0 0/0 * * * ?",
            "minutes field \"0/0\": a step of 0 never advances",
        ),
        ("0 0/61 * * * ?", "the step 61 is larger than the field"),
        (
            "0 0 0 ? * 8",
            "day-of-week field \"8\": 8 is out of range; use 1–7",
        ),
        ("0 0 0 ? * MON-FRI/0", "a step of 0 never advances"),
        ("0 0 0 1,15W * ?", "cannot be in a list"),
        ("0 0 0 L,15 * ?", "cannot be in a list"),
        ("0 0 0 ? * 6L,2", "cannot be in a list"),
        ("0 0 0 ? * 6#6", "'#' is followed by a number from 1 to 5"),
        ("0 0 0 L-31 * ?", "the offset is 30 at most"),
        ("0 0 0 32W * ?", "32 is out of range"),
        ("0 0 0 1 13 ?", "month field \"13\""),
        (
            "0 0 0 1 FOO ?",
            "month field \"FOO\": \"FOO\" is not a value",
        ),
        (
            "0 0 0 ? * WED-5",
            "day-of-week field \"WED-5\": a range cannot mix a name and a number",
        ),
        (
            "0 0 0 1 1 ? 2030-2025",
            "year field \"2030-2025\": the range starts after it ends",
        ),
        ("0 0 0 1 1 ? 1969", "year field \"1969\""),
        ("5X * * * * ?", "seconds field \"5X\""),
        (
            "? * * * * ?",
            "'?' is only allowed in day-of-month and day-of-week",
        ),
        ("0 0 0 1 1 ? 2030 5", "has 8 fields"),
    ];
    for (expression, expected) in cases {
        let message = refusal(expression);
        assert!(
            message.contains(expected),
            "{expression}: {message} (expected to contain {expected:?})"
        );
    }
}
