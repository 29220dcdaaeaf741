//! `/api/v1/calendars`: named exclusion calendars that jobs share (`calendars` in the job
//! document). `PUT` creates or replaces one; a calendar a job names cannot be deleted.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde::Serialize;
use utoipa::ToSchema;

use super::admitted::{Admitted, Namespace};
use super::audit::Audit;
use super::body::JsonBody;
use super::changes::Changes;
use super::error::Problem;
use super::namespaces::NamespaceQuery;
use super::params::{NameParam, QueryParams};
use super::{ApiError, ApiState, rfc3339};
use crate::jobs::{JobDefinition, JobPolicy, check_calendar_name};
use crate::schedule::calendar::{Calendar, CalendarRange, CalendarSpec};
use crate::store::{CalendarRecord, NamespaceId};

/// A calendar as the API shows it: its definition's fields with its name and version. (Not a
/// flattened `CalendarSpec`: that one refuses unknown fields, so its schema would refuse these.)
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CalendarView {
    namespace: String,
    name: String,
    timezone: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    description: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    dates: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ranges: Vec<CalendarRange>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rrules: Vec<String>,
    version: i64,
    created_at: Option<String>,
    updated_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CalendarList {
    calendars: Vec<CalendarView>,
}

/// The view of `record`, a calendar of namespace `namespace`.
fn view_of(namespace: &Namespace, record: CalendarRecord) -> Result<CalendarView, ApiError> {
    let definition: CalendarSpec =
        serde_json::from_str(&record.definition_json).map_err(|e| unreadable(&record.name, &e))?;
    Ok(CalendarView {
        namespace: namespace.name.clone(),
        name: record.name,
        timezone: definition.timezone,
        description: definition.description,
        dates: definition.dates,
        ranges: definition.ranges,
        rrules: definition.rrules,
        version: record.version,
        created_at: rfc3339(record.created_at_ms),
        updated_at: rfc3339(record.updated_at_ms),
    })
}

fn unreadable(name: &str, err: &serde_json::Error) -> ApiError {
    ApiError::unreadable(format!("calendar {name:?}"), err)
}

fn checked_name(name: &str) -> Result<(), ApiError> {
    check_calendar_name(name).map_err(|why| ApiError::invalid("name", why))
}

/// Every calendar of a namespace, by name.
#[utoipa::path(get, operation_id = "listCalendars", path = "/calendars", tag = "calendars",
    params(NamespaceQuery),
    responses((status = 200, description = "The calendars", body = CalendarList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<CalendarList>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let calendars = state
        .store
        .calendars_list()
        .await?
        .into_iter()
        .filter(|c| c.namespace_id == namespace.id)
        .map(|c| view_of(&namespace, c))
        .collect::<Result<_, _>>()?;
    Ok(Json(CalendarList { calendars }))
}

#[utoipa::path(get, operation_id = "getCalendar", path = "/calendars/{name}", tag = "calendars",
    params(("name" = String, Path, description = "The calendar's name"), NamespaceQuery),
    responses((status = 200, description = "The calendar", body = CalendarView)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    NameParam(name): NameParam,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<CalendarView>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let record = state
        .store
        .calendar_get(namespace.id, &name)
        .await?
        .ok_or_else(|| ApiError::missing(format!("calendar {name:?}")))?;
    Ok(Json(view_of(&namespace, record)?))
}

/// Creates the calendar, or replaces its definition (from the version `If-Match` names, when
/// given). Jobs that name it follow the change within a poll.
#[utoipa::path(put, operation_id = "putCalendar", path = "/calendars/{name}", tag = "calendars",
    request_body = CalendarSpec,
    params(("name" = String, Path, description = "The calendar's name"),
        ("If-Match" = Option<String>, Header, description = "The ETag of the version this change was made from"),
        NamespaceQuery),
    responses(
        (status = 200, description = "Replaced", body = CalendarView),
        (status = 201, description = "Created", body = CalendarView),
        (status = 412, description = "`If-Match` is not the calendar's ETag", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn put(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(name): NameParam,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    headers: HeaderMap,
    JsonBody(spec): JsonBody<CalendarSpec>,
) -> Result<(StatusCode, Json<CalendarView>), ApiError> {
    checked_name(&name)?;
    let namespace = admitted.named(&state).await?;
    Calendar::parse(&spec).map_err(|e| ApiError::invalid(&e.field, e.message))?;
    let json = serde_json::to_string(&spec).map_err(|e| unreadable(&name, &e))?;
    let expected = super::jobs::if_match(&headers)?;
    // Read first for the audit trail's "what changed" (exact when If-Match pins the version).
    let previous = state.store.calendar_get(namespace.id, &name).await?;
    let before: serde_json::Value = previous
        .and_then(|record| serde_json::from_str(&record.definition_json).ok())
        .unwrap_or_default();
    let after = serde_json::to_value(&spec).unwrap_or_default();
    let event = audit.event(StatusCode::OK, Some(&Changes::between(&before, &after)));
    if let Some(updated) = state
        .store
        .calendar_update(namespace.id, &name, &json, expected, event.as_ref())
        .await?
    {
        audit.written();
        return Ok((StatusCode::OK, Json(view_of(&namespace, updated)?)));
    }
    let current = state.store.calendar_get(namespace.id, &name).await?;
    match (current, expected) {
        (Some(current), _) => Err(ApiError::PreconditionFailed(format!(
            "calendar {name:?} is at version {}, not {}: read it again and reapply your change",
            current.version,
            expected.unwrap_or_default()
        ))),
        (None, Some(_)) => Err(ApiError::missing(format!("calendar {name:?}"))),
        (None, None) => {
            let event = audit.event(StatusCode::CREATED, None);
            let created = state
                .store
                .calendar_insert(namespace.id, &name, &json, event.as_ref())
                .await?;
            audit.written();
            Ok((StatusCode::CREATED, Json(view_of(&namespace, created)?)))
        }
    }
}

/// Deletes a calendar no job names.
#[utoipa::path(delete, operation_id = "deleteCalendar", path = "/calendars/{name}", tag = "calendars",
    params(("name" = String, Path, description = "The calendar's name"), NamespaceQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 409, description = "Jobs name it", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(name): NameParam,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<StatusCode, ApiError> {
    let namespace = admitted.named(&state).await?;
    let users: Vec<String> = state
        .store
        .jobs_naming_calendar(namespace.id, &name)
        .await?
        .into_iter()
        .filter(|job| {
            JobPolicy::from_stored(&job.policy_json).is_ok_and(|p| p.calendars.contains(&name))
        })
        .map(|job| format!("{} ({})", job.name, job.job_id))
        .collect();
    if !users.is_empty() {
        return Err(ApiError::Conflict(format!(
            "calendar {name:?} is named by {} job(s): {}; remove it from them first",
            users.len(),
            users.join(", ")
        )));
    }
    let event = audit.event(StatusCode::NO_CONTENT, None);
    if state
        .store
        .calendar_delete(namespace.id, &name, event.as_ref())
        .await?
    {
        audit.written();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("calendar {name:?}")))
    }
}

/// Refuses a job of `namespace` that names a calendar that does not exist there.
pub(super) async fn check_named(
    state: &ApiState,
    namespace: NamespaceId,
    definition: &JobDefinition,
) -> Result<(), ApiError> {
    check_named_known(state, namespace, definition, &mut HashMap::new()).await
}

/// [`check_named`], remembering in `known` which names exist, so that many jobs naming the
/// same calendars (a bulk create) look each up once.
pub(super) async fn check_named_known(
    state: &ApiState,
    namespace: NamespaceId,
    definition: &JobDefinition,
    known: &mut HashMap<String, bool>,
) -> Result<(), ApiError> {
    for (i, name) in definition.policy.calendars.iter().enumerate() {
        let exists = match known.get(name) {
            Some(exists) => *exists,
            None => {
                let exists = state.store.calendar_get(namespace, name).await?.is_some();
                known.insert(name.clone(), exists);
                exists
            }
        };
        if !exists {
            return Err(ApiError::invalid(
                &format!("calendars[{i}]"),
                format!(
                    "there is no calendar {name:?}: create it with PUT /api/v1/calendars/{name}"
                ),
            ));
        }
    }
    Ok(())
}

/// The calendars of `namespace` named `names`, parsed, for a preview.
pub(super) async fn load_named(
    state: &ApiState,
    namespace: NamespaceId,
    names: &[String],
) -> Result<Vec<(String, Calendar)>, ApiError> {
    let mut calendars = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let field = format!("calendars[{i}]");
        let record = state
            .store
            .calendar_get(namespace, name)
            .await?
            .ok_or_else(|| ApiError::invalid(&field, format!("there is no calendar {name:?}")))?;
        let calendar = Calendar::from_stored(&record.definition_json)
            .map_err(|why| ApiError::invalid(&field, format!("calendar {name:?}: {why}")))?;
        calendars.push((name.clone(), calendar));
    }
    Ok(calendars)
}
