//! `GET /api/v1/stats`: what the dashboard shows of recent work, cluster-wide, from the run
//! log: runs finished per minute by outcome, the success rate, late fires and recent failures.
//!
//! A dashboard asks every few seconds, and an hour at 1,000 fires a second is 3.6 million
//! runs: counting them each time would keep the database busy (about 0.8 s per million runs
//! on PostgreSQL). So each node keeps the totals of the minutes that can no longer change
//! ([`SettledMinutes`]) and reads from the database only the minutes it has not counted and
//! the last two, which may still be receiving runs.

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::params::QueryParams;
use super::runs::{RunView, run_views};
use super::{ApiError, ApiState, rfc3339};
use crate::states::RunState;
use crate::store::{MinuteCount, RunFilter};

const MINUTE_MS: i64 = 60_000;
/// The longest window, in minutes: a day.
const MAX_MINUTES: i64 = 1_440;
/// Failures and late fires listed.
const LISTED: i64 = 10;
/// Settled minutes counted per statement.
const READ_MINUTES: i64 = 5;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct StatsQuery {
    /// The window, in minutes up to now: 1 to 1440 (default 60).
    #[param(minimum = 1, maximum = 1440)]
    minutes: Option<i64>,
}

/// Runs that finished in one minute.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct MinuteView {
    #[serde(skip)]
    start_ms: i64,
    /// The minute's start (RFC 3339, UTC).
    minute: Option<String>,
    succeeded: i64,
    /// `failed` and `no_executor`.
    failed: i64,
    /// `cancelled`, `skipped` and anything else.
    other: i64,
    /// Of all these, the runs first dispatched later than `late_after_ms`.
    late: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct LateFire {
    run: RunView,
    /// From the run's instant to its first dispatch.
    lateness_ms: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Stats {
    window_minutes: i64,
    /// A run first dispatched later than this after its instant is late.
    late_after_ms: i64,
    /// Every minute of the window, oldest first, by the minute runs finished.
    per_minute: Vec<MinuteView>,
    succeeded: i64,
    failed: i64,
    other: i64,
    /// Runs finished in the window whose first dispatch was late.
    late: i64,
    /// `succeeded / (succeeded + failed)`; absent when nothing succeeded or failed.
    success_rate: Option<f64>,
    /// The latest failed and `no_executor` runs, newest first.
    recent_failures: Vec<RunView>,
    /// The latest runs that finished after a late first dispatch, newest first.
    late_fires: Vec<LateFire>,
}

/// One minute's runs by outcome.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Totals {
    succeeded: i64,
    failed: i64,
    other: i64,
    late: i64,
}

impl Totals {
    fn add(&mut self, count: &MinuteCount) {
        match count.state {
            RunState::Succeeded => self.succeeded += count.runs,
            RunState::Failed | RunState::NoExecutor => self.failed += count.runs,
            _ => self.other += count.runs,
        }
        self.late += count.late;
    }
}

/// Per-minute totals of the minutes that ended more than a minute ago, which no run can join
/// any more (a run's finish is stamped by the database clock when it ends, and statements
/// time out within seconds). One per node, shared by its requests.
#[derive(Debug, Default)]
pub struct SettledMinutes {
    inner: Mutex<Settled>,
}

#[derive(Debug, Default)]
struct Settled {
    /// The minutes `[from, to)` are counted (a minute without runs is absent from `totals`).
    counted: Option<Minutes>,
    totals: BTreeMap<i64, Totals>,
    /// Raised whenever `totals` starts over: a request that read under another generation
    /// keeps its reads to itself.
    generation: u64,
}

impl SettledMinutes {
    fn with<T>(&self, f: impl FnOnce(&mut Settled) -> T) -> T {
        match self.inner.lock() {
            Ok(mut settled) => f(&mut settled),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

/// Counts `counts` into minutes.
fn by_minute(counts: &[MinuteCount]) -> BTreeMap<i64, Totals> {
    let mut minutes: BTreeMap<i64, Totals> = BTreeMap::new();
    for count in counts {
        minutes.entry(count.minute_ms).or_default().add(count);
    }
    minutes
}

/// A range of minutes `[from, to)`, in epoch milliseconds.
type Minutes = (i64, i64);

/// The ranges of settled minutes to read so that `[first, settled_to)` is counted, given
/// what is; and what will be counted then.
fn missing(
    counted: Option<Minutes>,
    first: i64,
    settled_to: i64,
) -> (Vec<Minutes>, Option<Minutes>) {
    if first >= settled_to {
        return (Vec::new(), counted);
    }
    match counted {
        Some((from, to)) if from <= settled_to && first <= to => {
            let mut reads = Vec::new();
            if first < from {
                reads.push((first, from));
            }
            if to < settled_to {
                reads.push((to, settled_to));
            }
            (reads, Some((from.min(first), to.max(settled_to))))
        }
        // Nothing counted, or nothing adjacent: start over.
        _ => (vec![(first, settled_to)], Some((first, settled_to))),
    }
}

/// Recent work at a glance: runs per minute, success rate, late fires, recent failures.
#[utoipa::path(get, operation_id = "getStats", path = "/stats", tag = "runs", params(StatsQuery),
    responses((status = 200, description = "Recent work, cluster-wide", body = Stats)))]
pub(super) async fn show(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<StatsQuery>,
) -> Result<Json<Stats>, ApiError> {
    let minutes = query.minutes.unwrap_or(60);
    if !(1..=MAX_MINUTES).contains(&minutes) {
        return Err(ApiError::invalid("minutes", "use 1 to 1440"));
    }
    let late_after_ms = i64::try_from(state.late_after_ms).unwrap_or(i64::MAX);
    // With no threshold nothing is late.
    let late_ms = if late_after_ms > 0 {
        late_after_ms
    } else {
        i64::MAX
    };
    let now = state.clock.now_ms();
    let this_minute = now - now % MINUTE_MS;
    let first = this_minute - (minutes - 1) * MINUTE_MS;
    let settled_to = this_minute - MINUTE_MS;

    let cache = &state.settled_minutes;
    let (generation, known) = cache.with(|s| (s.generation, s.counted));
    let (reads, counted) = missing(known, first, settled_to);
    let mut read = BTreeMap::new();
    // A few minutes per statement: at 1,000 runs a second an hour in one would outlast the
    // statement timeout.
    for (from, to) in &reads {
        let mut start = *from;
        while start < *to {
            let end = (start + READ_MINUTES * MINUTE_MS).min(*to);
            let counts = state
                .store
                .runs_finished_by_minute(start, end, late_ms)
                .await?;
            read.extend(by_minute(&counts));
            start = end;
        }
    }
    let recent = by_minute(
        &state
            .store
            .runs_finished_by_minute(first.max(settled_to), i64::MAX, late_ms)
            .await?,
    );
    let cached = cache.with(|s| {
        // Started over meanwhile: what this request took as counted may be gone.
        if s.generation != generation {
            return None;
        }
        let mut mine: BTreeMap<i64, Totals> = s
            .totals
            .range(first..settled_to.max(first))
            .map(|(m, t)| (*m, *t))
            .collect();
        mine.extend(read.iter().map(|(m, t)| (*m, *t)));
        if known != counted {
            s.counted = match (s.counted, counted) {
                // Another request may have counted more meanwhile: keep the union.
                (Some((f0, t0)), Some((f1, t1))) if f1 <= t0 && f0 <= t1 => {
                    Some((f0.min(f1), t0.max(t1)))
                }
                (_, counted) => {
                    s.totals.clear();
                    s.generation += 1;
                    counted
                }
            };
            s.totals.extend(read);
        }
        // A day is the longest window: older minutes are never asked for.
        let oldest = this_minute - MAX_MINUTES * MINUTE_MS;
        s.totals = s.totals.split_off(&oldest);
        if let Some((from, to)) = s.counted {
            s.counted = Some((from.max(oldest), to.max(oldest)));
        }
        Some(mine)
    });
    let settled = match cached {
        Some(settled) => settled,
        None => by_minute(
            &state
                .store
                .runs_finished_by_minute(first, settled_to.max(first), late_ms)
                .await?,
        ),
    };
    let per_minute: Vec<MinuteView> = (0..minutes)
        .map(|i| {
            let start = first + i * MINUTE_MS;
            let t = settled
                .get(&start)
                .or_else(|| recent.get(&start))
                .copied()
                .unwrap_or_default();
            MinuteView {
                start_ms: start,
                minute: rfc3339(start),
                succeeded: t.succeeded,
                failed: t.failed,
                other: t.other,
                late: t.late,
            }
        })
        .collect();
    let sum = |f: fn(&MinuteView) -> i64| per_minute.iter().map(f).sum::<i64>();
    let (succeeded, failed, other, late) = (
        sum(|m| m.succeeded),
        sum(|m| m.failed),
        sum(|m| m.other),
        sum(|m| m.late),
    );
    let success_rate =
        (succeeded + failed > 0).then(|| succeeded as f64 / (succeeded + failed) as f64);

    let mut recent_failures = Vec::new();
    for dead in [RunState::Failed, RunState::NoExecutor] {
        let filter = RunFilter {
            state: Some(dead.as_str().to_owned()),
            limit: LISTED,
            ..RunFilter::default()
        };
        recent_failures.extend(state.store.runs_list(&filter).await?);
    }
    recent_failures.sort_by_key(|r| std::cmp::Reverse(r.run_id));
    recent_failures.truncate(LISTED as usize);

    // The latest late fires, read from the minutes the counts say have some, newest first:
    // a search of the whole window would walk every run in it when none is late.
    let mut late_runs = Vec::new();
    for minute in per_minute.iter().rev().filter(|m| m.late > 0) {
        let remaining = LISTED - late_runs.len() as i64;
        if remaining <= 0 {
            break;
        }
        let start = minute.start_ms;
        late_runs.extend(
            state
                .store
                .runs_late(start, start + MINUTE_MS, late_ms, remaining)
                .await?,
        );
    }
    let lateness: Vec<i64> = late_runs.iter().map(|l| l.lateness_ms).collect();
    let late_views = run_views(&state, late_runs.into_iter().map(|l| l.run).collect()).await?;
    Ok(Json(Stats {
        window_minutes: minutes,
        late_after_ms,
        per_minute,
        succeeded,
        failed,
        other,
        late,
        success_rate,
        recent_failures: run_views(&state, recent_failures).await?,
        late_fires: late_views
            .into_iter()
            .zip(lateness)
            .map(|(run, lateness_ms)| LateFire { run, lateness_ms })
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::missing;

    #[test]
    fn only_the_settled_minutes_not_yet_counted_are_read() {
        // Nothing counted: the whole settled part of the window.
        assert_eq!(missing(None, 0, 10), (vec![(0, 10)], Some((0, 10))));
        // Time moved on two minutes: only those.
        assert_eq!(
            missing(Some((0, 10)), 2, 12),
            (vec![(10, 12)], Some((0, 12)))
        );
        // A longer window: the older minutes, and the new ones.
        assert_eq!(
            missing(Some((5, 10)), 0, 11),
            (vec![(0, 5), (10, 11)], Some((0, 11)))
        );
        // A shorter window inside what is counted: nothing.
        assert_eq!(missing(Some((0, 10)), 4, 10), (vec![], Some((0, 10))));
        // Far ahead of what is counted: start over.
        assert_eq!(
            missing(Some((0, 10)), 20, 30),
            (vec![(20, 30)], Some((20, 30)))
        );
        // A window of the current minutes only: nothing is settled.
        assert_eq!(missing(Some((0, 10)), 11, 11), (vec![], Some((0, 10))));
    }
}
