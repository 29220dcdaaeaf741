//! What to fire when a node (re)loads a job: on taking over a partition, on restart, and when
//! a job is started again. Pure: the caller supplies "now".

use chrono::{DateTime, Utc};

use crate::jobs::Misfire;
use crate::schedule::{NextHints, Schedule, ScheduleError};

/// How many missed instants one plan looks at before it jumps ahead.
const MAX_SCAN: usize = 100_000;
/// Most catch-up runs one plan produces (the latest are kept).
pub const MAX_CATCH_UP: usize = 10_000;

/// Most missed instants left unfired that one plan names (to be told of them).
pub const MAX_TOLD: usize = 1_000;

/// Instants to fire at once as catch-ups, the next instant on schedule, and the missed
/// instants the policy leaves unfired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadPlan {
    pub catch_up: Vec<i64>,
    pub next: Option<i64>,
    /// The earliest missed instants not fired, at most [`MAX_TOLD`].
    pub unfired: Vec<i64>,
    /// Whether more were missed and not fired than `unfired` names.
    pub more_unfired: bool,
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
            unfired: Vec::new(),
            more_unfired: false,
        });
    };
    let first = first.timestamp_millis();
    if first > late_limit {
        return Ok(LoadPlan {
            catch_up: Vec::new(),
            next: Some(first),
            unfired: Vec::new(),
            more_unfired: false,
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
    let (unfired, more_unfired) = unfired(schedule, hints, first, late_limit, &catch_up)?;
    Ok(LoadPlan {
        catch_up,
        next,
        unfired,
        more_unfired,
    })
}

/// The earliest missed instants (from `first`, up to `late_limit`) that `catch_up` does not
/// fire, at most [`MAX_TOLD`]; and whether there are more.
fn unfired(
    schedule: &Schedule,
    hints: NextHints,
    first: i64,
    late_limit: i64,
    catch_up: &[i64],
) -> Result<(Vec<i64>, bool), ScheduleError> {
    let mut unfired = Vec::new();
    let mut cursor = Some(first);
    let mut looked = 0;
    while let Some(at) = cursor.filter(|at| *at <= late_limit) {
        if looked > MAX_TOLD + catch_up.len() {
            return Ok((unfired, true));
        }
        looked += 1;
        if catch_up.binary_search(&at).is_err() {
            if unfired.len() == MAX_TOLD {
                return Ok((unfired, true));
            }
            unfired.push(at);
        }
        cursor = ms(schedule.next_after(instant(at), hints)?);
    }
    Ok((unfired, false))
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
                next: Some(T0 + MIN),
                unfired: vec![],
                more_unfired: false,
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
                    next: Some(T0 + MIN),
                    unfired: vec![],
                    more_unfired: false,
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
        assert_eq!(p.unfired, (1..=8).map(|m| T0 + m * MIN).collect::<Vec<_>>());
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
                next: Some(T0 + 10 * MIN),
                unfired: (1..=9).map(|m| T0 + m * MIN).collect(),
                more_unfired: false,
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
        assert_eq!(p.unfired, (1..=5).map(|m| T0 + m * MIN).collect::<Vec<_>>());
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
    fn a_long_outage_names_the_first_unfired_instants_and_says_there_are_more() {
        let now = T0 + 3 * 24 * 60 * MIN;
        let p = plan(
            &every_minute(),
            NextHints::default(),
            T0,
            now,
            rule(Misfire::Skip),
        )
        .unwrap();
        assert_eq!(p.unfired.len(), MAX_TOLD);
        assert_eq!(p.unfired[0], T0 + MIN);
        assert!(p.more_unfired);
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
