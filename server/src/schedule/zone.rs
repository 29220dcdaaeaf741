//! Wall-clock times to instants, by the one DST rule cron and RRULE share (RFC 5545 §3.3.5):
//! a wall time that does not exist is read with the UTC offset in force before the gap; a wall
//! time that occurs twice means its first occurrence.

use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;

/// Longest DST gap we look back over; real gaps are 30 minutes to 2 hours.
const MAX_GAP: Duration = Duration::hours(3);

/// The instant a wall time in `zone` stands for.
pub(crate) fn resolve(naive: NaiveDateTime, zone: Tz) -> DateTime<Utc> {
    match zone.from_local_datetime(&naive) {
        chrono::LocalResult::Single(t) => t.with_timezone(&Utc),
        chrono::LocalResult::Ambiguous(first, second) => first.min(second).with_timezone(&Utc),
        chrono::LocalResult::None => {
            // In a gap: walk back to the last wall time that exists and use its offset.
            let mut probe = naive;
            for _ in 0..(MAX_GAP.num_minutes() * 4 + 96 * 4) {
                probe -= Duration::minutes(15);
                if let Some(before) = zone.from_local_datetime(&probe).earliest() {
                    let offset = before.offset().fix();
                    return Utc.from_utc_datetime(&(naive - offset));
                }
            }
            // No zone has a gap of a day; read it as UTC rather than fail.
            Utc.from_utc_datetime(&naive)
        }
    }
}

/// The wall time in `zone` at which to start searching for occurrences after `after`.
///
/// Normally `after`'s own wall time. Just after a spring-forward, wall times inside the gap
/// resolve to instants after `after` although they read earlier, so the search starts before
/// the gap.
pub(crate) fn search_start(after: DateTime<Utc>, zone: Tz) -> NaiveDateTime {
    if near_offset_change(after, zone) {
        (after - MAX_GAP).with_timezone(&zone).naive_local()
    } else {
        after.with_timezone(&zone).naive_local()
    }
}

/// True when `zone`'s UTC offset changed within the longest gap before `instant`.
pub(crate) fn near_offset_change(instant: DateTime<Utc>, zone: Tz) -> bool {
    let now = zone.offset_from_utc_datetime(&instant.naive_utc()).fix();
    let before = zone
        .offset_from_utc_datetime(&(instant - MAX_GAP).naive_utc())
        .fix();
    now != before
}

/// The wall time of an instant in `zone`.
pub(crate) fn local(instant: DateTime<Utc>, zone: Tz) -> DateTime<Tz> {
    instant.with_timezone(&zone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(zone: Tz, text: &str) -> String {
        let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").unwrap();
        local(resolve(naive, zone), zone).to_rfc3339()
    }

    #[test]
    fn a_wall_time_in_a_gap_uses_the_offset_before_the_gap() {
        let ny = chrono_tz::America::New_York;
        assert_eq!(at(ny, "2026-03-08 02:30"), "2026-03-08T03:30:00-04:00");
        let lord_howe = chrono_tz::Australia::Lord_Howe;
        // Lord Howe moves 30 minutes, from +10:30 to +11:00, at 02:00 on the first Sunday of
        // October.
        assert_eq!(
            at(lord_howe, "2026-10-04 02:15"),
            "2026-10-04T02:45:00+11:00"
        );
    }

    #[test]
    fn a_wall_time_that_occurs_twice_means_the_first() {
        let ny = chrono_tz::America::New_York;
        assert_eq!(at(ny, "2026-11-01 01:30"), "2026-11-01T01:30:00-04:00");
        let london = chrono_tz::Europe::London;
        assert_eq!(at(london, "2026-10-25 01:15"), "2026-10-25T01:15:00+01:00");
    }
}
