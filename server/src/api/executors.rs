//! The executor endpoints: registration, heartbeat, result reports, deregistration (executor
//! token), and the executor listing (admin token).

use axum::extract::State;
use axum::{Extension, Json};
use carillon_protocol::{
    AttemptReport, Deregistration, Heartbeat, HeartbeatReply, PROTOCOL_VERSION, Registration,
    RegistrationAccepted,
};
use serde::Serialize;
use tracing::{info, warn};

use super::body::JsonBody;
use super::{ApiError, ApiState, Principal, rfc3339};
use crate::dispatch::finish::{Ending, finish_attempt_by};
use crate::jobs::JobInput;
use crate::schedule::ScheduleSpec;
use crate::store::{self, ExecutorRegistration, attempt_state};

/// Refuses an app-limited token acting for another app's executor.
async fn check_scope(
    state: &ApiState,
    principal: &Principal,
    executor_id: &str,
) -> Result<(), ApiError> {
    let Principal::Executor { app: Some(app) } = principal else {
        return Ok(());
    };
    let own = state.store.executors_list(Some(app)).await?;
    if own.executors.iter().any(|e| e.executor_id == executor_id) {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "this token is limited to app {app:?}; executor {executor_id:?} is not one of its executors"
        )))
    }
}

fn ident(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    let ok = !value.is_empty()
        && value.len() <= max
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            field,
            format!("{value:?} must be 1 to {max} letters, digits, '-', '_' or '.'"),
        ))
    }
}

pub(super) async fn register(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(registration): JsonBody<Registration>,
) -> Result<Json<RegistrationAccepted>, ApiError> {
    if let Principal::Executor { app: Some(app) } = &principal
        && *app != registration.app
    {
        return Err(ApiError::Forbidden(format!(
            "this token is limited to app {app:?}, not {:?}",
            registration.app
        )));
    }
    if registration.protocol != PROTOCOL_VERSION {
        return Err(ApiError::invalid(
            "protocol",
            format!(
                "version {} is not spoken here (this node speaks {PROTOCOL_VERSION})",
                registration.protocol
            ),
        ));
    }
    ident("executor_id", &registration.executor_id, 64)?;
    ident("app", &registration.app, 128)?;
    let address = registration.address.trim_end_matches('/');
    if !(address.starts_with("http://") || address.starts_with("https://")) || address.len() > 512 {
        return Err(ApiError::invalid(
            "address",
            "must be an http:// or https:// URL",
        ));
    }
    if registration.weight == 0 || registration.weight > 1_000 {
        return Err(ApiError::invalid("weight", "must be between 1 and 1000"));
    }
    if registration.capacity == 0 || registration.capacity > 100_000 {
        return Err(ApiError::invalid(
            "capacity",
            "must be between 1 and 100000",
        ));
    }
    for (i, handler) in registration.handlers.iter().enumerate() {
        ident(&format!("handlers[{i}].name"), &handler.name, 128)?;
    }
    state
        .store
        .executor_register(&ExecutorRegistration {
            executor_id: registration.executor_id.clone(),
            app: registration.app.clone(),
            address: address.to_owned(),
            weight: i64::from(registration.weight),
            capacity: i64::from(registration.capacity),
            handlers: registration
                .handlers
                .iter()
                .map(|h| (h.name.clone(), h.description.chars().take(1024).collect()))
                .collect(),
        })
        .await?;
    for handler in &registration.handlers {
        if let Some(schedule) = &handler.schedule {
            create_declared_job(&state, &registration.app, &handler.name, schedule).await;
        }
    }
    info!(executor = %registration.executor_id, app = %registration.app, address, "executor registered");
    Ok(Json(RegistrationAccepted {
        executor_id: registration.executor_id,
        heartbeat_interval_ms: state.executor_heartbeat_ms,
        lease_ms: state.executor_lease_ms,
    }))
}

/// A schedule declared in code becomes a started job `<app>.<handler>`, once: an existing job
/// of that name is left as it is.
async fn create_declared_job(
    state: &ApiState,
    app: &str,
    handler: &str,
    schedule: &carillon_protocol::DefaultSchedule,
) {
    let input = JobInput {
        name: format!("{app}.{handler}"),
        app: app.to_owned(),
        handler: handler.to_owned(),
        schedule: ScheduleSpec {
            cron: schedule.cron.clone(),
            rrule: schedule.rrule.clone(),
            ..ScheduleSpec::default()
        },
        timezone: schedule
            .timezone
            .clone()
            .unwrap_or_else(|| "UTC".to_owned()),
        args: serde_json::Value::Null,
        sharding: Default::default(),
        balance: Default::default(),
        retry: Default::default(),
        timeout_ms: None,
        misfire: Default::default(),
        catch_up_window_ms: None,
        overlap: Default::default(),
        priority: None,
        start: true,
    };
    let definition = match input.into_definition() {
        Ok(d) => d,
        Err(err) => {
            warn!(app, handler, error = %err, "the schedule declared in code is invalid; no job created");
            return;
        }
    };
    match super::jobs::insert(state, &definition, true).await {
        Ok(_) => info!(job = %definition.name, "created the job declared in code"),
        Err(store::Error::Conflict { .. }) => {}
        Err(err) => {
            warn!(job = %definition.name, error = %err, "could not create the job declared in code")
        }
    }
}

pub(super) async fn heartbeat(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(beat): JsonBody<Heartbeat>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    check_scope(&state, &principal, &beat.executor_id).await?;
    let in_flight = i64::try_from(beat.in_flight.len()).unwrap_or(i64::MAX);
    let registered = state
        .store
        .executor_heartbeat(&beat.executor_id, in_flight, beat.draining)
        .await?;
    // Attempts it still runs that ended here (cancelled, timed out, moved): stop them.
    let mut cancel = Vec::new();
    for attempt_id in beat.in_flight.iter().take(1_000) {
        if let Some(a) = state.store.attempt_get(*attempt_id).await?
            && a.state != attempt_state::RUNNING
        {
            cancel.push(*attempt_id);
        }
    }
    Ok(Json(HeartbeatReply { registered, cancel }))
}

pub(super) async fn results(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(report): JsonBody<AttemptReport>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_scope(&state, &principal, &report.executor_id).await?;
    let attempt = state
        .store
        .attempt_get(report.attempt_id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("attempt {}", report.attempt_id)))?;
    // A report can arrive before the node records the dispatch as accepted: while the attempt
    // is still pending, the reporter is the executor that took it.
    let dispatched_to_reporter =
        attempt.executor_id.as_deref() == Some(report.executor_id.as_str());
    if !dispatched_to_reporter && attempt.state != attempt_state::PENDING {
        return Err(ApiError::Conflict(format!(
            "attempt {} was not dispatched to executor {}",
            report.attempt_id, report.executor_id
        )));
    }
    let ended = finish_attempt_by(
        &*state.store,
        &attempt,
        Some(&report.executor_id),
        Ending::Reported(report.outcome),
        report.output.as_ref(),
        report.error,
    )
    .await?;
    Ok(Json(
        serde_json::json!({ "accepted": true, "effect": format!("{ended:?}") }),
    ))
}

/// The executor id of `/executors/{id}` paths.
#[derive(Debug, serde::Deserialize)]
pub(super) struct ExecutorPath {
    id: String,
}

async fn set_drained(
    state: &ApiState,
    id: &str,
    drain: bool,
) -> Result<Json<serde_json::Value>, ApiError> {
    let known = state.store.executors_list(None).await?;
    if !known.executors.iter().any(|e| e.executor_id == id) {
        return Err(ApiError::missing(format!("executor {id}")));
    }
    let changed = state.store.executor_drain(id, drain).await?;
    info!(
        executor = id,
        drain, changed, "executor drain changed by an operator"
    );
    Ok(Json(
        serde_json::json!({ "id": id, "drained": drain, "changed": changed }),
    ))
}

/// `POST /executors/{id}/drain`: no new dispatches; running attempts finish.
pub(super) async fn drain(
    State(state): State<ApiState>,
    axum::extract::Path(path): axum::extract::Path<ExecutorPath>,
) -> Result<Json<serde_json::Value>, ApiError> {
    set_drained(&state, &path.id, true).await
}

/// `POST /executors/{id}/resume`: dispatch to it again.
pub(super) async fn resume(
    State(state): State<ApiState>,
    axum::extract::Path(path): axum::extract::Path<ExecutorPath>,
) -> Result<Json<serde_json::Value>, ApiError> {
    set_drained(&state, &path.id, false).await
}

/// `DELETE /executors/{id}`: forget an executor; its running attempts fail over. One that is
/// still alive is told at its next heartbeat to register again.
pub(super) async fn remove(
    State(state): State<ApiState>,
    axum::extract::Path(path): axum::extract::Path<ExecutorPath>,
) -> Result<axum::http::StatusCode, ApiError> {
    if state.store.executor_leave(&path.id).await? {
        Ok(axum::http::StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("executor {}", path.id)))
    }
}

pub(super) async fn deregister(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(leaving): JsonBody<Deregistration>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_scope(&state, &principal, &leaving.executor_id).await?;
    let left = state.store.executor_leave(&leaving.executor_id).await?;
    info!(executor = %leaving.executor_id, "executor deregistered");
    Ok(Json(serde_json::json!({ "left": left })))
}

#[derive(Debug, Serialize)]
pub(super) struct ExecutorView {
    id: String,
    app: String,
    address: String,
    weight: i64,
    capacity: i64,
    in_flight: i64,
    state: String,
    healthy: bool,
    handlers: Vec<String>,
    registered_at: Option<String>,
    last_heartbeat_at: Option<String>,
}

/// Every executor as the API shows it.
async fn views(state: &ApiState) -> Result<Vec<ExecutorView>, ApiError> {
    let list = state.store.executors_list(None).await?;
    let lease = i64::try_from(state.executor_lease_ms).unwrap_or(i64::MAX);
    Ok(list
        .executors
        .iter()
        .map(|e| ExecutorView {
            id: e.executor_id.clone(),
            app: e.app_name.clone(),
            address: e.address.clone(),
            weight: e.weight,
            capacity: e.capacity,
            in_flight: e.in_flight,
            state: e.state.clone(),
            healthy: e.is_healthy(list.now_ms, lease),
            handlers: list
                .handlers
                .iter()
                .filter(|(id, _)| *id == e.executor_id)
                .map(|(_, h)| h.clone())
                .collect(),
            registered_at: rfc3339(e.registered_at_ms),
            last_heartbeat_at: rfc3339(e.heartbeat_at_ms),
        })
        .collect())
}

pub(super) async fn list(
    State(state): State<ApiState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    Ok(Json(
        serde_json::json!({ "executors": views(&state).await? }),
    ))
}

/// `GET /executors/{id}`.
pub(super) async fn get(
    State(state): State<ApiState>,
    axum::extract::Path(path): axum::extract::Path<ExecutorPath>,
) -> Result<Json<ExecutorView>, ApiError> {
    views(&state)
        .await?
        .into_iter()
        .find(|e| e.id == path.id)
        .map(Json)
        .ok_or_else(|| ApiError::missing(format!("executor {}", path.id)))
}

/// An app: the executors registered under its name, and the handlers they offer.
#[derive(Debug, Serialize)]
pub(super) struct AppView {
    name: String,
    executors: usize,
    healthy_executors: usize,
    capacity: i64,
    handlers: Vec<String>,
}

/// `GET /apps`: every app with an executor, with its health at a glance.
pub(super) async fn apps(
    State(state): State<ApiState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let mut apps: std::collections::BTreeMap<String, AppView> = std::collections::BTreeMap::new();
    for e in views(&state)
        .await?
        .into_iter()
        .filter(|e| e.state != "left")
    {
        let app = apps.entry(e.app.clone()).or_insert_with(|| AppView {
            name: e.app.clone(),
            executors: 0,
            healthy_executors: 0,
            capacity: 0,
            handlers: Vec::new(),
        });
        app.executors += 1;
        if e.healthy {
            app.healthy_executors += 1;
            app.capacity += e.capacity;
        }
        for handler in e.handlers {
            if !app.handlers.contains(&handler) {
                app.handlers.push(handler);
            }
        }
    }
    let apps: Vec<AppView> = apps
        .into_values()
        .map(|mut a| {
            a.handlers.sort();
            a
        })
        .collect();
    Ok(Json(serde_json::json!({ "apps": apps })))
}
