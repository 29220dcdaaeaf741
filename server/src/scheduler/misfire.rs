//! What to fire when a node (re)loads a job: on taking over a partition, on restart, and when
//! a job is started again. Pure: the caller supplies "now".

use chrono::{DateTime, Utc};

use crate::jobs::Misfire;
use crate::schedule::{NextHints, Schedule, ScheduleError};

/// How many missed instants one plan looks at before it jumps ahead.
const MAX_SCAN: usize = 100_000;
/// Most catch-up runs one plan produces (the latest are kept).
pub const MAX_CATCH_UP: usize = 10_000;

/// Instants to fire at once as catch-ups, and the next instant on schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadPlan {
    pub catch_up: Vec<i64>,
    pub next: Option<i64>,
}

/// The policy a plan applies.
#[derive(Debug, Clone, Copy)]
pub struct MisfireRule {
    pub policy: Misfire,
    /// An instant later than this is late, not missed: it fires normally.
    pub threshold_ms: i64,
    /// `catch_up` fires missed instants no older than this.
    pub window_ms: i64,
}

fn instant(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Plans a job whose last fired instant (or start) is `from_ms`, at `now_ms`.
pub fn plan(
    schedule: &Schedule,
    hints: NextHints,
    from_ms: i64,
    now_ms: i64,
    rule: MisfireRule,
) -> Result<LoadPlan, ScheduleError> {
    let late_limit = now_ms - rule.threshold_ms;
    let Some(first) = schedule.next_after(instant(from_ms), hints)? else {
        return Ok(LoadPlan {
            catch_up: Vec::new(),
            next: None,
        });
    };
    let first = first.timestamp_millis();
    if first > late_limit {
        return Ok(LoadPlan {
            catch_up: Vec::new(),
            next: Some(first),
        });
    }

    let next = ms(schedule.next_after(instant(late_limit), hints)?);
    let catch_up = match rule.policy {
        Misfire::Skip => Vec::new(),
        Misfire::FireOnce => latest_missed(schedule, hints, first, late_limit)?
            .into_iter()
            .collect(),
        Misfire::CatchUp => {
            let oldest = now_ms - rule.window_ms;
            let mut cursor = if first >= oldest {
                Some(first)
            } else {
                ms(schedule.next_after(instant(oldest - 1), hints)?)
            };
            let mut missed = Vec::new();
            while let Some(n) = cursor.filter(|n| *n <= late_limit) {
                if missed.len() >= MAX_SCAN {
                    break;
                }
                missed.push(n);
                cursor = ms(schedule.next_after(instant(n), hints)?);
            }
            if missed.len() > MAX_CATCH_UP {
                missed.drain(..missed.len() - MAX_CATCH_UP);
            }
            missed
        }
    };
    Ok(LoadPlan { catch_up, next })
}

/// The last instant at or before `late_limit`, given `first`, a missed one.
fn latest_missed(
    schedule: &Schedule,
    hints: NextHints,
    first: i64,
    late_limit: i64,
) -> Result<Option<i64>, ScheduleError> {
    // A dense schedule is searched over its last day only; a sparse one from `first`.
    let day_ago = late_limit - 86_400_000;
    let recent = if first < day_ago {
        ms(schedule.next_after(instant(day_ago), hints)?).filter(|n| *n <= late_limit)
    } else {
        None
    };
    let mut latest = recent.unwrap_or(first);
    for _ in 0..MAX_SCAN {
        match ms(schedule.next_after(instant(latest), hints)?) {
            Some(n) if n <= late_limit => latest = n,
            _ => break,
        }
    }
    Ok(Some(latest))
}

fn ms(instant: Option<DateTime<Utc>>) -> Option<i64> {
    instant.map(|i| i.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{ScheduleSpec, parse_zone};

    fn every_minute() -> Schedule {
        let spec = ScheduleSpec {
            cron: Some("* * * * *".into()),
            ..ScheduleSpec::default()
        };
        Schedule::parse(&spec, parse_zone("UTC").unwrap()).unwrap()
    }

    const MIN: i64 = 60_000;
    // 2026-01-01T00:00:00Z
    const T0: i64 = 1_767_225_600_000;

    fn rule(policy: Misfire) -> MisfireRule {
        MisfireRule {
            policy,
            threshold_ms: 30_000,
            window_ms: 5 * MIN,
        }
    }

    #[test]
    fn nothing_missed_means_the_next_instant_on_schedule() {
        let plan = plan(
            &every_minute(),
            NextHints::default(),
            T0,
            T0 + 10_000,
            rule(Misfire::FireOnce),
        );
        assert_eq!(
            plan.unwrap(),
            LoadPlan {
                catch_up: vec![],
                next: Some(T0 + MIN)
            }
        );
    }

    #[test]
    fn late_within_the_threshold_fires_on_schedule_under_every_policy() {
        for policy in [Misfire::FireOnce, Misfire::Skip, Misfire::CatchUp] {
            let p = plan(
                &every_minute(),
                NextHints::default(),
                T0,
                T0 + MIN + 20_000,
                rule(policy),
            );
            assert_eq!(
                p.unwrap(),
                LoadPlan {
                    catch_up: vec![],
                    next: Some(T0 + MIN)
                },
                "{policy:?}"
            );
        }
    }

    #[test]
    fn fire_once_fires_the_latest_missed_instant() {
        // Down for ten minutes: 1..=9 are missed (10 is within the threshold).
        let now = T0 + 10 * MIN + 10_000;
        let p = plan(
            &every_minute(),
            NextHints::default(),
            T0,
            now,
            rule(Misfire::FireOnce),
        )
        .unwrap();
        assert_eq!(p.catch_up, vec![T0 + 9 * MIN]);
        assert_eq!(p.next, Some(T0 + 10 * MIN));
    }

    #[test]
    fn skip_drops_missed_instants() {
        let now = T0 + 10 * MIN + 10_000;
        let p = plan(
            &every_minute(),
            NextHints::default(),
            T0,
            now,
            rule(Misfire::Skip),
        )
        .unwrap();
        assert_eq!(
            p,
            LoadPlan {
                catch_up: vec![],
                next: Some(T0 + 10 * MIN)
            }
        );
    }

    #[test]
    fn catch_up_fires_every_missed_instant_within_the_window() {
        let now = T0 + 10 * MIN + 10_000;
        let p = plan(
            &every_minute(),
            NextHints::default(),
            T0,
            now,
            rule(Misfire::CatchUp),
        )
        .unwrap();
        // The window reaches back to 5:10, so 6..=9 are caught up.
        assert_eq!(
            p.catch_up,
            vec![T0 + 6 * MIN, T0 + 7 * MIN, T0 + 8 * MIN, T0 + 9 * MIN]
        );
        assert_eq!(p.next, Some(T0 + 10 * MIN));
        let wide = MisfireRule {
            window_ms: 60 * MIN,
            ..rule(Misfire::CatchUp)
        };
        let p = plan(&every_minute(), NextHints::default(), T0, now, wide).unwrap();
        assert_eq!(
            p.catch_up,
            (1..=9).map(|m| T0 + m * MIN).collect::<Vec<_>>()
        );
    }

    #[test]
    fn fire_once_after_a_long_outage_finds_the_latest_instant_quickly() {
        let now = T0 + 400 * 24 * 60 * MIN;
        let p = plan(
            &every_minute(),
            NextHints::default(),
            T0,
            now,
            rule(Misfire::FireOnce),
        )
        .unwrap();
        let late_limit = now - 30_000;
        assert_eq!(p.catch_up, vec![late_limit - late_limit % MIN]);
    }
}
