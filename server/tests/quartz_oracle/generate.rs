//! Random valid Quartz expressions, zones and start instants for `quartz_oracle.rs`,
//! weighted toward what job tables hold (`0 0/5 * * * ?`, `0 0 2 * * ?`, `0 15 10 ? * MON-FRI`)
//! while reaching every form: `N/S`, `*/S`, `/S`, `A-B/S`, wrapping ranges, lists, names, `L`,
//! `L-n`, `LW`, `L-nW`, `nW`, `nL`, `n#k`, `?` and the year field.

use chrono::{DateTime, NaiveDate, Utc};

use crate::common::Rng;

pub(crate) struct Case {
    pub(crate) expression: String,
    pub(crate) zone: &'static str,
    pub(crate) start: DateTime<Utc>,
}

/// Zones with one-hour DST shifts both ways across the year (New York, London, Berlin,
/// Sydney, Auckland, Santiago), midnight transitions (Havana, Santiago), a 30-minute shift
/// (Lord Howe), half-hour offsets (Kolkata), a former DST zone (São Paulo), and none (UTC,
/// Shanghai, Tokyo).
const ZONES: [&str; 13] = [
    "UTC",
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Sydney",
    "Pacific/Auckland",
    "America/Santiago",
    "America/Havana",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Sao_Paulo",
    "Asia/Shanghai",
    "Asia/Tokyo",
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

pub(crate) fn generate(rng: &mut Rng) -> Case {
    let seconds = match rng.percent() {
        0..=54 => "0".to_owned(),
        _ => field(rng, 0, 59, &[]),
    };
    let minutes = match rng.percent() {
        0..=24 => "0".to_owned(),
        25..=39 => rng
            .pick(&["0/5", "*/5", "0/15", "0/30", "*/10", "0/1", "*"])
            .to_owned(),
        _ => field(rng, 0, 59, &[]),
    };
    let hours = match rng.percent() {
        0..=29 => rng.range(0, 23).to_string(),
        30..=44 => "*".to_owned(),
        _ => field(rng, 0, 23, &[]),
    };
    let (month_days, week_days) = days(rng);
    let months = match rng.percent() {
        0..=64 => "*".to_owned(),
        _ => field(rng, 1, 12, &MONTHS),
    };
    let mut expression = format!("{seconds} {minutes} {hours} {month_days} {months} {week_days}");
    match rng.percent() {
        0..=74 => {}
        75..=84 => expression.push_str(" *"),
        _ => {
            expression.push(' ');
            expression.push_str(&year(rng));
        }
    }
    if rng.chance(3) {
        expression = expression.to_lowercase();
    }
    Case {
        expression,
        zone: rng.pick(&ZONES),
        start: start(rng),
    }
}

/// One of the two day fields says which days; the other is `?` (now and then `*`, the
/// `star-day` class).
fn days(rng: &mut Rng) -> (String, String) {
    match rng.percent() {
        0..=49 => {
            let dom = match rng.percent() {
                0..=29 => "*".to_owned(),
                30..=59 => field(rng, 1, 31, &[]),
                60..=67 => "L".to_owned(),
                68..=75 => format!("L-{}", rng.range(0, 30)),
                76..=81 => "LW".to_owned(),
                82..=87 => format!("L-{}W", rng.range(0, 30)),
                _ => format!("{}W", rng.range(1, 31)),
            };
            (dom, "?".to_owned())
        }
        50..=97 => {
            let dow = match rng.percent() {
                0..=19 => "*".to_owned(),
                20..=69 => field(rng, 1, 7, &WEEKDAYS),
                70..=79 => format!("{}L", weekday(rng)),
                80..=94 => format!("{}#{}", weekday(rng), rng.range(1, 5)),
                _ => "L".to_owned(),
            };
            ("?".to_owned(), dow)
        }
        _ => match rng.percent() {
            0..=49 => ("*".to_owned(), "*".to_owned()),
            50..=74 => ("*".to_owned(), field(rng, 1, 7, &WEEKDAYS)),
            _ => (field(rng, 1, 31, &[]), "*".to_owned()),
        },
    }
}

fn weekday(rng: &mut Rng) -> String {
    let day = rng.range(1, 7);
    if rng.chance(40) {
        WEEKDAYS[day as usize - 1].to_owned()
    } else {
        day.to_string()
    }
}

/// A plain field of values `low..=high`: one item or a list of two to four.
fn field(rng: &mut Rng, low: u32, high: u32, names: &[&str]) -> String {
    if rng.chance(15) {
        let n = rng.range(2_u32, 4);
        (0..n)
            .map(|_| item(rng, low, high, names, false))
            .collect::<Vec<_>>()
            .join(",")
    } else {
        item(rng, low, high, names, true)
    }
}

fn item(rng: &mut Rng, low: u32, high: u32, names: &[&str], star_allowed: bool) -> String {
    let value = |rng: &mut Rng, v: u32| -> String {
        if !names.is_empty() && rng.chance(40) {
            names[(v - low) as usize].to_owned()
        } else {
            v.to_string()
        }
    };
    let step = |rng: &mut Rng| -> u32 {
        if rng.chance(70) {
            rng.range(1, (high - low).div_ceil(2).max(1))
        } else {
            rng.range(1, high)
        }
    };
    match rng.percent() {
        0..=29 => {
            let v = rng.range(low, high);
            value(rng, v)
        }
        30..=39 if star_allowed => "*".to_owned(),
        30..=49 => {
            // A name before a step too: Quartz drops the step after it.
            let v = rng.range(low, high);
            format!("{}/{}", value(rng, v), step(rng))
        }
        50..=59 => format!("*/{}", step(rng)),
        60..=64 => format!("/{}", step(rng)),
        65..=79 => {
            let (a, b) = range_ends(rng, low, high);
            format!("{}-{}", value(rng, a), value(rng, b))
        }
        _ => {
            let (a, b) = range_ends(rng, low, high);
            if rng.chance(70) {
                format!("{a}-{b}/{}", step(rng))
            } else {
                format!("{}-{}/{}", value(rng, a), value(rng, b), step(rng))
            }
        }
    }
}

/// Two ends of a range, now and then wrapping (`a > b`).
fn range_ends(rng: &mut Rng, low: u32, high: u32) -> (u32, u32) {
    let a = rng.range(low, high);
    let b = rng.range(low, high);
    if rng.chance(25) {
        (a.max(b), a.min(b))
    } else {
        (a.min(b), a.max(b))
    }
}

fn year(rng: &mut Rng) -> String {
    let single = |rng: &mut Rng| rng.range(2024, 2045).to_string();
    match rng.percent() {
        0..=29 => single(rng),
        30..=49 => {
            let a = rng.range(2024, 2040);
            format!("{a}-{}", rng.range(a, 2045))
        }
        50..=69 => format!("{}/{}", rng.range(2020, 2035), rng.range(1, 10)),
        70..=79 => format!("*/{}", rng.range(1, 20)),
        _ => format!("{},{}", single(rng), single(rng)),
    }
}

/// A start instant in 2024–2031: two times in five in a month where zones change offsets.
fn start(rng: &mut Rng) -> DateTime<Utc> {
    let year = rng.range(2024, 2031);
    let month = if rng.chance(40) {
        [3, 4, 9, 10, 11][rng.range(0_i64, 4) as usize]
    } else {
        rng.range(1, 12)
    };
    let date = NaiveDate::from_ymd_opt(year, month, rng.range(1, 28)).unwrap();
    let time = date
        .and_hms_opt(rng.range(0, 23), rng.range(0, 59), rng.range(0, 59))
        .unwrap();
    time.and_utc()
}

/// Tokens that are near misses of the grammar, or odd corners of it: each replaces one field
/// of a valid expression, so that what Quartz refuses can be compared with what Carillon
/// refuses.
const ODD_TOKENS: [&str; 48] = [
    "0",
    "60",
    "-1",
    "24",
    "32",
    "13",
    "8",
    "0#1",
    "?",
    "*",
    "L",
    "W",
    "LW",
    "5L",
    "L5",
    "L-0",
    "L-31",
    "L-3W",
    "15W",
    "0W",
    "32W",
    "1,15W",
    "L,5",
    "6#3",
    "6#6",
    "6#0",
    "2#1,3",
    "FRIL",
    "FRI#2",
    "MON-FRI/2",
    "JAN-MAR/2",
    "5X",
    "1-",
    "-5",
    "1--2",
    "*/0",
    "0/0",
    "/",
    "5/",
    "*/60",
    "0-59/90",
    "1,,2",
    ",1",
    "1,",
    "MON-5",
    "JAN-3",
    "1970",
    "2500",
];

/// `case` with one of its fields replaced by a near miss.
pub(crate) fn mutate(rng: &mut Rng, case: Case) -> Case {
    let mut fields: Vec<String> = case
        .expression
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let at = rng.range(0, fields.len() as i64 - 1) as usize;
    fields[at] = rng.pick(&ODD_TOKENS).to_owned();
    Case {
        expression: fields.join(" "),
        ..case
    }
}
