//! `POST /api/v1/schedules/preview`: validates a schedule and lists its next instants, through
//! the same code the scheduler uses, with a job's bounds, calendars and jitter applied.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admitted::Admitted;
use super::body::JsonBody;
use super::namespaces::NamespaceQuery;
use super::params::QueryParams;
use super::{ApiError, ApiState};
use crate::jobs::{Bounds, JobError, jitter_delay_ms, window_of};
use crate::schedule::{NextHints, Schedule, ScheduleSpec, parse_zone};

const MAX_COUNT: usize = 1_000;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PreviewRequest {
    schedule: ScheduleSpec,
    #[serde(default = "utc")]
    timezone: String,
    /// RFC 3339; default now.
    after: Option<String>,
    /// How many instants, 1 to 1000 (default 10).
    #[serde(default = "ten")]
    #[schema(minimum = 1, maximum = 1000)]
    count: usize,
    /// The job's bounds: instants outside them are not listed.
    #[serde(default)]
    bounds: Option<Bounds>,
    /// The job's calendars: instants in them are listed with `skipped`.
    #[serde(default)]
    calendars: Vec<String>,
    /// The job's jitter; with `job_id`, each instant gets the `due` instant it is delayed to.
    #[serde(default)]
    jitter_ms: Option<u64>,
    #[serde(default)]
    job_id: Option<i64>,
}

fn utc() -> String {
    "UTC".to_owned()
}

fn ten() -> usize {
    10
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Instant {
    utc: String,
    local: String,
    /// Why the instant is skipped: the calendar that holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    /// When its run is delivered, after the job's jitter (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    due: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Preview {
    instants: Vec<Instant>,
    /// What the schedule means that its text may not say (a cron step after names, which
    /// Quartz drops).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// Checks a schedule and lists its next instants, computed as the scheduler computes them.
#[utoipa::path(post, operation_id = "previewSchedule", path = "/schedules/preview", tag = "schedules", request_body = PreviewRequest,
    params(NamespaceQuery),
    responses((status = 200, description = "The next instants, in UTC and in the zone", body = Preview)))]
pub(super) async fn preview(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(request): JsonBody<PreviewRequest>,
) -> Result<Json<Preview>, ApiError> {
    if !(1..=MAX_COUNT).contains(&request.count) {
        return Err(ApiError::invalid(
            "count",
            format!("{} is outside 1..={MAX_COUNT}", request.count),
        ));
    }
    let after = match &request.after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|_| ApiError::invalid("after", "is not an RFC 3339 instant"))?
            .with_timezone(&Utc),
        None => DateTime::from_timestamp_millis(state.clock.now_ms()).unwrap_or_default(),
    };
    let zone = parse_zone(&request.timezone).map_err(JobError::from)?;
    let window = window_of(request.bounds.as_ref(), zone)?;
    let schedule = Schedule::parse(&request.schedule, zone)
        .map_err(JobError::from)?
        .within(window);
    let namespace = admitted.named(&state).await?;
    let calendars = super::calendars::load_named(&state, namespace.id, &request.calendars).await?;
    let hints = NextHints {
        anchor: Some(after),
        cursor: None,
    };
    let instants = schedule
        .preview(after, request.count, hints)
        .map_err(JobError::from)?;
    if instants.is_empty() && !schedule.is_one_shot() && request.bounds.is_none() {
        let field = if request.schedule.rrule.is_some() {
            "schedule.rrule"
        } else {
            "schedule.cron"
        };
        return Err(ApiError::invalid(
            field,
            format!("has no instant after {after}"),
        ));
    }
    let instants = instants
        .into_iter()
        .map(|i| {
            let skipped = calendars.iter().find_map(|(name, calendar)| {
                calendar
                    .excludes(i)
                    .map(|why| format!("in calendar {name:?}: {why}"))
            });
            let due = request
                .job_id
                .zip(request.jitter_ms)
                .filter(|_| skipped.is_none())
                .map(|(job_id, max)| {
                    let delay = jitter_delay_ms(job_id, i.timestamp_millis(), max);
                    (i + chrono::Duration::milliseconds(delay))
                        .to_rfc3339_opts(SecondsFormat::Millis, true)
                });
            Instant {
                utc: i.to_rfc3339_opts(SecondsFormat::Millis, true),
                local: schedule
                    .local(i)
                    .to_rfc3339_opts(SecondsFormat::Millis, false),
                skipped,
                due,
            }
        })
        .collect();
    Ok(Json(Preview {
        instants,
        warnings: schedule.notes().to_vec(),
    }))
}
