//! `POST /api/v1/runs/purge`: an operator deletes run history by hand, with a dry run that
//! counts first. The nodes apply the retention rules on their own; this is for the
//! one-off clean-up (a runaway job's history, a backlog from before retention was set).

use axum::Json;
use axum::extract::State;
use chrono::DateTime;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::JsonBody;
use super::{ApiError, ApiState, rfc3339};
use crate::store::{PurgeScope, PurgeStates, Purged};

/// Rows per delete statement, and the pause between two, so a purge yields to firing.
const BATCH: i64 = 2_000;
const PAUSE: std::time::Duration = std::time::Duration::from_millis(20);
/// Runs one call deletes at most by default, and at most when asked.
const DEFAULT_LIMIT: u32 = 10_000;
const MAX_LIMIT: u32 = 100_000;

/// What to purge: finished runs (dead letters included) that finished before `before`, with
/// their attempts. Pending, queued and running runs are never deleted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PurgeRequest {
    /// An RFC 3339 instant: runs that finished before it are deleted.
    #[schema(example = "2026-01-01T00:00:00Z")]
    before: String,
    /// Only this job's runs.
    #[serde(default)]
    job_id: Option<i64>,
    /// Count what would be deleted, and delete nothing.
    #[serde(default)]
    dry_run: bool,
    /// At most this many runs in this call (1 to 100000, default 10000); call again until
    /// `done`.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100_000)]
    limit: Option<u32>,
}

/// What a purge deleted, or (dry run) would delete.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct PurgeReport {
    dry_run: bool,
    before: String,
    job_id: Option<i64>,
    runs: u64,
    attempts: u64,
    /// True when nothing the request names is left to delete (always true for a dry run).
    done: bool,
}

#[utoipa::path(post, operation_id = "purgeRuns", path = "/runs/purge", tag = "runs",
    request_body = PurgeRequest,
    responses((status = 200, description = "What was deleted, or would be", body = PurgeReport)))]
/// Deletes finished runs (and their attempts) that finished before an instant, in batches.
pub(super) async fn purge(
    State(state): State<ApiState>,
    JsonBody(request): JsonBody<PurgeRequest>,
) -> Result<Json<PurgeReport>, ApiError> {
    let before_ms = DateTime::parse_from_rfc3339(&request.before)
        .map_err(|e| {
            ApiError::invalid(
                "before",
                format!("{:?} is not an RFC 3339 instant: {e}", request.before),
            )
        })?
        .timestamp_millis();
    let limit = request.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(
            "limit",
            format!("{limit} is outside 1..={MAX_LIMIT}"),
        ));
    }
    let scope = PurgeScope {
        finished_before_ms: before_ms,
        job_id: request.job_id,
        states: PurgeStates::Finished,
        ..PurgeScope::default()
    };
    let report = |purged: Purged, done: bool| PurgeReport {
        dry_run: request.dry_run,
        before: rfc3339(before_ms).unwrap_or_else(|| request.before.clone()),
        job_id: request.job_id,
        runs: purged.runs,
        attempts: purged.attempts,
        done,
    };
    if request.dry_run {
        let counted = state.store.history_count(&scope).await?;
        return Ok(Json(report(counted, true)));
    }
    // Every finished run is in scope here, so each step deletes what it looks at; the next
    // call starts again from the oldest left.
    let mut scope = scope;
    let mut total = Purged::default();
    let mut left = i64::from(limit);
    loop {
        let step = state.store.history_delete(&scope, BATCH.min(left)).await?;
        state.observer.metrics.count_history_deleted(step.purged);
        total += step.purged;
        left -= i64::try_from(step.purged.runs).unwrap_or(i64::MAX);
        let Some(next) = step.next_from_ms else {
            return Ok(Json(report(total, true)));
        };
        if left <= 0 {
            return Ok(Json(report(total, false)));
        }
        scope.finished_from_ms = next;
        tokio::time::sleep(PAUSE).await;
    }
}
