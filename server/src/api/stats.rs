//! `GET /api/v1/stats`: what the dashboard shows of recent work, cluster-wide, from the run
//! log: runs finished per minute by outcome, the success rate, recent failures and late fires.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::jobs::{RunView, run_views};
use super::params::QueryParams;
use super::{ApiError, ApiState, rfc3339};
use crate::store::{RunFilter, run_state};

const MINUTE_MS: i64 = 60_000;
/// Failures and late fires listed.
const LISTED: i64 = 10;

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
    /// The minute's start (RFC 3339, UTC).
    minute: Option<String>,
    succeeded: i64,
    /// `failed` and `no_executor`.
    failed: i64,
    /// `cancelled`, `skipped` and anything else.
    other: i64,
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
    /// `succeeded / (succeeded + failed)`; absent when nothing succeeded or failed.
    success_rate: Option<f64>,
    /// The latest failed and `no_executor` runs, newest first.
    recent_failures: Vec<RunView>,
    /// Runs finished in the window whose first dispatch was late.
    late: i64,
    /// The latest runs that finished after a late first dispatch, newest first.
    late_fires: Vec<LateFire>,
}

/// Recent work at a glance: runs per minute, success rate, recent failures, late fires.
#[utoipa::path(get, operation_id = "getStats", path = "/stats", tag = "runs", params(StatsQuery),
    responses((status = 200, description = "Recent work, cluster-wide", body = Stats)))]
pub(super) async fn show(
    State(state): State<ApiState>,
    QueryParams(query): QueryParams<StatsQuery>,
) -> Result<Json<Stats>, ApiError> {
    let minutes = query.minutes.unwrap_or(60);
    if !(1..=1_440).contains(&minutes) {
        return Err(ApiError::invalid("minutes", "use 1 to 1440"));
    }
    let now = state.clock.now_ms();
    let first_minute = now - now % MINUTE_MS - (minutes - 1) * MINUTE_MS;
    let counts = state.store.runs_finished_by_minute(first_minute).await?;
    let mut per_minute: BTreeMap<i64, MinuteView> = (0..minutes)
        .map(|i| {
            let start = first_minute + i * MINUTE_MS;
            (
                start,
                MinuteView {
                    minute: rfc3339(start),
                    succeeded: 0,
                    failed: 0,
                    other: 0,
                },
            )
        })
        .collect();
    let (mut succeeded, mut failed, mut other) = (0, 0, 0);
    for count in counts {
        let Some(minute) = per_minute.get_mut(&count.minute_ms) else {
            continue; // finished after `now` was read
        };
        let (slot, total) = match count.state.as_str() {
            "succeeded" => (&mut minute.succeeded, &mut succeeded),
            "failed" | run_state::NO_EXECUTOR => (&mut minute.failed, &mut failed),
            _ => (&mut minute.other, &mut other),
        };
        *slot += count.runs;
        *total += count.runs;
    }
    let success_rate =
        (succeeded + failed > 0).then(|| succeeded as f64 / (succeeded + failed) as f64);

    let mut recent_failures = Vec::new();
    for dead in ["failed", run_state::NO_EXECUTOR] {
        let filter = RunFilter {
            state: Some(dead.to_owned()),
            limit: LISTED,
            ..RunFilter::default()
        };
        recent_failures.extend(state.store.runs_list(&filter).await?);
    }
    recent_failures.sort_by_key(|r| std::cmp::Reverse(r.run_id));
    recent_failures.truncate(LISTED as usize);

    let late_after_ms = i64::try_from(state.late_after_ms).unwrap_or(i64::MAX);
    let (late, late_runs) = if late_after_ms > 0 {
        (
            state
                .store
                .runs_late_count(first_minute, late_after_ms)
                .await?,
            state
                .store
                .runs_late(first_minute, late_after_ms, LISTED)
                .await?,
        )
    } else {
        (0, Vec::new())
    };
    let lateness: Vec<i64> = late_runs.iter().map(|l| l.lateness_ms).collect();
    let late_views = run_views(&state, late_runs.into_iter().map(|l| l.run).collect()).await?;
    Ok(Json(Stats {
        window_minutes: minutes,
        late_after_ms,
        per_minute: per_minute.into_values().collect(),
        succeeded,
        failed,
        other,
        success_rate,
        recent_failures: run_views(&state, recent_failures).await?,
        late,
        late_fires: late_views
            .into_iter()
            .zip(lateness)
            .map(|(run, lateness_ms)| LateFire { run, lateness_ms })
            .collect(),
    }))
}
