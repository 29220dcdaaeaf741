//! Backfills: `POST /jobs/{id}/backfill` fires every instant of a past range of the job's
//! schedule once each, paced by the owner of the job's partition (`scheduler::backfill`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::audit::Audit;
use super::body::JsonBody;
use super::jobs::load;
use super::params::IdParam;
use super::{ApiError, ApiState, rfc3339};
use crate::jobs::{JobPolicy, window_of};
use crate::schedule::{NextHints, Schedule, ScheduleSpec, parse_instant, parse_zone};
use crate::store::BackfillRecord;

/// Most instants one backfill may cover.
const MAX_INSTANTS: usize = 100_000;
const MAX_IN_FLIGHT: i64 = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BackfillRequest {
    /// The range's first instant (RFC 3339, or a wall time in the job's zone), included.
    from: String,
    /// Its last instant, included; not in the future.
    to: String,
    /// Most of the backfill's runs unfinished at once (default 1, at most 100). Under an
    /// overlap rule other than `allow` it is 1, and each run waits for the job's others.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    max_in_flight: Option<i64>,
}

/// A backfill as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BackfillView {
    id: i64,
    job_id: i64,
    from: Option<String>,
    to: Option<String>,
    /// Every instant up to this one has been claimed.
    claimed_until: Option<String>,
    max_in_flight: i64,
    /// `running`, `done` or `cancelled`.
    state: String,
    /// Runs it inserted (an instant that already had a run keeps it and is not counted).
    fired: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    created_at: Option<String>,
    updated_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BackfillList {
    backfills: Vec<BackfillView>,
}

fn view_of(b: BackfillRecord) -> BackfillView {
    BackfillView {
        id: b.backfill_id,
        job_id: b.job_id,
        from: rfc3339(b.from_ms),
        to: rfc3339(b.to_ms),
        claimed_until: (b.cursor_ms >= b.from_ms)
            .then(|| rfc3339(b.cursor_ms))
            .flatten(),
        max_in_flight: b.max_in_flight,
        state: b.state.as_str().to_owned(),
        fired: b.fired,
        message: b.message,
        created_at: rfc3339(b.created_at_ms),
        updated_at: rfc3339(b.updated_at_ms),
    }
}

/// Fires every instant of the job's schedule in `[from, to]` once (instants that already have
/// a run keep it), a few at a time, as runs with the trigger `backfill`. The job need not be
/// running; its calendars and bounds apply.
#[utoipa::path(post, operation_id = "backfillJob", path = "/jobs/{id}/backfill", tag = "jobs",
    request_body = BackfillRequest,
    params(("id" = i64, Path, description = "The job's id")),
    responses((status = 202, description = "The backfill, started", body = BackfillView)))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
    JsonBody(request): JsonBody<BackfillRequest>,
) -> Result<(StatusCode, Json<BackfillView>), ApiError> {
    let job = load(&state, id).await?;
    let zone = parse_zone(&job.timezone).map_err(crate::jobs::JobError::from)?;
    let from = parse_instant(&request.from, zone, "from").map_err(crate::jobs::JobError::from)?;
    let to = parse_instant(&request.to, zone, "to").map_err(crate::jobs::JobError::from)?;
    let now = DateTime::from_timestamp_millis(state.clock.now_ms()).unwrap_or_default();
    if to < from {
        return Err(ApiError::invalid("to", "is before from"));
    }
    if to > now {
        return Err(ApiError::invalid(
            "to",
            "is in the future: a backfill fires past instants (the schedule fires the rest)",
        ));
    }
    let max_in_flight = request.max_in_flight.unwrap_or(1);
    if !(1..=MAX_IN_FLIGHT).contains(&max_in_flight) {
        return Err(ApiError::invalid(
            "max_in_flight",
            format!("{max_in_flight} is outside 1..={MAX_IN_FLIGHT}"),
        ));
    }
    let schedule = schedule_of(&job.schedule_json, job.policy()?, zone)?;
    let hints = NextHints {
        anchor: job.started_at_ms.and_then(DateTime::from_timestamp_millis),
        cursor: None,
    };
    let count = instants_in(&schedule, hints, from, to)?;
    if count == 0 {
        return Err(ApiError::invalid(
            "from",
            "the job's schedule has no instant in this range",
        ));
    }
    let event = audit.event(StatusCode::ACCEPTED, None);
    let backfill = state
        .store
        .backfill_insert(
            id,
            job.partition_id,
            from.timestamp_millis(),
            to.timestamp_millis(),
            max_in_flight,
            event.as_ref(),
        )
        .await?;
    audit.written();
    Ok((StatusCode::ACCEPTED, Json(view_of(backfill))))
}

fn schedule_of(
    schedule_json: &str,
    policy: &JobPolicy,
    zone: chrono_tz::Tz,
) -> Result<Schedule, ApiError> {
    let spec: ScheduleSpec = serde_json::from_str(schedule_json)
        .map_err(|e| ApiError::unreadable("the job's schedule", &e))?;
    let window = window_of(policy.bounds.as_ref(), zone)?;
    let schedule = Schedule::parse(&spec, zone)
        .map_err(crate::jobs::JobError::from)?
        .within(window);
    if schedule.fixed_delay().is_some() {
        return Err(ApiError::invalid(
            "id",
            "the job's schedule is a fixed_delay: it has no instants of its own to backfill",
        ));
    }
    Ok(schedule)
}

/// How many instants of `schedule` fall in `[from, to]`; refused past [`MAX_INSTANTS`].
fn instants_in(
    schedule: &Schedule,
    hints: NextHints,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<usize, ApiError> {
    let mut count = 0;
    let mut cursor = from - chrono::Duration::milliseconds(1);
    while let Some(next) = schedule
        .next_after(cursor, hints)
        .map_err(crate::jobs::JobError::from)?
        .filter(|n| *n <= to)
    {
        count += 1;
        if count > MAX_INSTANTS {
            return Err(ApiError::invalid(
                "to",
                format!("the range holds more than {MAX_INSTANTS} instants: backfill it in parts"),
            ));
        }
        cursor = next;
    }
    Ok(count)
}

/// A job's backfills, newest first.
#[utoipa::path(get, operation_id = "listJobBackfills", path = "/jobs/{id}/backfills", tag = "jobs",
    params(("id" = i64, Path, description = "The job's id")),
    responses((status = 200, description = "Its backfills", body = BackfillList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<Json<BackfillList>, ApiError> {
    // A deleted job's backfills went with it: its list is a 404 like the job, not an empty one.
    load(&state, id).await?;
    let backfills = state.store.backfills_of_job(id, 100).await?;
    Ok(Json(BackfillList {
        backfills: backfills.into_iter().map(view_of).collect(),
    }))
}

#[utoipa::path(get, operation_id = "getBackfill", path = "/backfills/{id}", tag = "jobs",
    params(("id" = i64, Path, description = "The backfill's id")),
    responses((status = 200, description = "The backfill", body = BackfillView)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<Json<BackfillView>, ApiError> {
    let backfill = state
        .store
        .backfill_get(id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("backfill {id}")))?;
    Ok(Json(view_of(backfill)))
}

/// Stops a running backfill: no more of its instants are claimed (runs already claimed go on).
#[utoipa::path(post, operation_id = "cancelBackfill", path = "/backfills/{id}/cancel", tag = "jobs",
    params(("id" = i64, Path, description = "The backfill's id")),
    responses((status = 200, description = "The backfill", body = BackfillView)))]
pub(super) async fn cancel(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<BackfillView>, ApiError> {
    let event = audit.event(StatusCode::OK, None);
    if state.store.backfill_cancel(id, event.as_ref()).await? {
        audit.written();
    }
    get(State(state), IdParam(id)).await
}
