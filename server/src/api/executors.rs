//! The executor endpoints: registration, heartbeat, result reports, deregistration (executor
//! token), and draining, resuming and removing an executor (cluster admin).

use axum::extract::State;
use axum::{Extension, Json};
use carillon_protocol::{
    AttemptReport, Deregistration, Heartbeat, HeartbeatReply, PROTOCOL_VERSION, Registration,
    RegistrationAccepted,
};
use serde::Serialize;
use tracing::{info, warn};
use utoipa::ToSchema;

use super::audit::Audit;
use super::body::JsonBody;
use super::error::Problem;
use super::params::NameParam;
use super::{ApiError, ApiState, Principal};
use crate::access::executor_owners;
use crate::dispatch::finish::{Ending, finish_attempt_by};
use crate::jobs::JobInput;
use crate::schedule::ScheduleSpec;
use crate::states::AttemptState;
use crate::store::{
    self, ExecutorOwner, ExecutorRegistration, NamespaceId, RegistrationOutcome, executor_protocol,
};

/// Refuses a caller acting for an executor another token registered (see
/// [`crate::access::executor_owners`]); an unknown executor is no one's yet.
pub(super) async fn check_owner(
    state: &ApiState,
    principal: &Principal,
    executor_id: &str,
) -> Result<Option<ExecutorOwner>, ApiError> {
    let owner = state.store.executor_owner(executor_id).await?;
    if let Some(owner) = &owner {
        executor_owners::may_act_for(principal, executor_id, owner).map_err(|not_yours| {
            ApiError::ForbiddenIn {
                namespace: owner.namespace_id,
                answer: not_yours.answer,
                why: not_yours.why,
            }
        })?;
    }
    Ok(owner)
}

pub(super) fn ident(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
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

/// An executor registers its app, address and handlers (executor token).
#[utoipa::path(post, operation_id = "registerExecutor", path = "/executors/register", tag = "executor protocol", request_body = Registration,
    responses((status = 200, description = "Registered", body = RegistrationAccepted)))]
pub(super) async fn register(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    audit: Audit,
    JsonBody(registration): JsonBody<Registration>,
) -> Result<Json<RegistrationAccepted>, ApiError> {
    if let Some(app) = principal.executor_app()
        && app != registration.app
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
    if executor_protocol::is_xxl_id(&registration.executor_id) {
        return Err(ApiError::invalid(
            "executor_id",
            "ids starting xxl- are kept for XXL-JOB executors",
        ));
    }
    ident("app", &registration.app, 128)?;
    if registration.app == crate::jobs::HTTP_APP {
        return Err(ApiError::invalid(
            "app",
            "the app name http is kept for HTTP jobs, which need no executor",
        ));
    }
    let address = registration.address.trim_end_matches('/');
    if !(address.starts_with("http://") || address.starts_with("https://")) || address.len() > 512 {
        return Err(ApiError::invalid(
            "address",
            "must be an http:// or https:// URL",
        ));
    }
    // The nodes will send signed requests there: only into the networks the operator allows.
    state
        .dispatch
        .check_address(address)
        .await
        .map_err(|why| ApiError::invalid("address", why))?;
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
    let namespace = match &principal {
        Principal::Executor(token) => token.namespace(),
        _ => None,
    };
    let Some(registered_by) = executor_owners::owner_key_of(&principal) else {
        return Err(ApiError::Forbidden(
            "this token does not register executors".to_owned(),
        ));
    };
    // Taken by another token, it is refused; the registration below is made only while the
    // owner is still the one checked here.
    let owner_was = check_owner(&state, &principal, &registration.executor_id)
        .await?
        .map(|owner| owner.registered_by);
    // The event goes with the registration; the jobs its handlers declare are created after,
    // each on its own (an existing job of the name is left as it is).
    let event = audit.event(axum::http::StatusCode::OK, None);
    let outcome = state
        .store
        .executor_register(
            &ExecutorRegistration {
                executor_id: registration.executor_id.clone(),
                app: registration.app.clone(),
                address: address.to_owned(),
                weight: i64::from(registration.weight),
                capacity: i64::from(registration.capacity),
                accepts_batch: registration.batch,
                protocol: executor_protocol::CARILLON.to_owned(),
                lease_ms: 0,
                handlers: registration
                    .handlers
                    .iter()
                    .map(|h| (h.name.clone(), h.description.chars().take(1024).collect()))
                    .collect(),
                namespace,
                registered_by,
                owner_was,
            },
            event.as_ref(),
        )
        .await?;
    match outcome {
        RegistrationOutcome::Registered => {}
        RegistrationOutcome::AppOfAnotherNamespace => {
            return Err(ApiError::Forbidden(format!(
                "app {:?} is another namespace's: this token registers its own namespace's apps",
                registration.app
            )));
        }
        RegistrationOutcome::Raced => {
            return Err(ApiError::Conflict(format!(
                "executor {:?} was registered by another caller at the same moment: register again",
                registration.executor_id
            )));
        }
    }
    audit.written();
    if registration.handlers.iter().any(|h| h.schedule.is_some()) {
        // In the app's namespace, whoever registered it.
        let app_namespace = state
            .store
            .executor_owner(&registration.executor_id)
            .await?
            .map(|owner| owner.namespace_id)
            .unwrap_or_default();
        for handler in &registration.handlers {
            if let Some(schedule) = &handler.schedule {
                create_declared_job(
                    &state,
                    app_namespace,
                    &registration.app,
                    &handler.name,
                    schedule,
                )
                .await;
            }
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
    namespace: NamespaceId,
    app: &str,
    handler: &str,
    schedule: &carillon_protocol::DefaultSchedule,
) {
    let input = JobInput {
        name: format!("{app}.{handler}"),
        app: Some(app.to_owned()),
        handler: Some(handler.to_owned()),
        http: None,
        secrets: Vec::new(),
        flow: None,
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
        delivery: Default::default(),
        misfire: Default::default(),
        catch_up_window_ms: None,
        overlap: Default::default(),
        priority: None,
        alerts: None,
        history: None,
        bounds: None,
        jitter_ms: None,
        calendars: Vec::new(),
        pause_after_failures: None,
        children: Default::default(),
        description: None,
        start: true,
    };
    let definition = match input.into_definition() {
        Ok(d) => d,
        Err(err) => {
            warn!(app, handler, error = %err, "the schedule declared in code is invalid; no job created");
            return;
        }
    };
    // Declared once: an existing job of the name stays as it is, and a new one counts
    // against the namespace's quota like any other.
    match state
        .store
        .jobs_named(namespace, std::slice::from_ref(&definition.name))
        .await
    {
        Ok(found) if !found.is_empty() => return,
        Ok(_) => {}
        Err(err) => {
            warn!(job = %definition.name, error = %err, "could not create the job declared in code");
            return;
        }
    }
    if let Err(err) = super::quotas::check_jobs(state, namespace, 1).await {
        warn!(job = %definition.name, error = %err, "the job declared in code is not created");
        return;
    }
    match super::jobs::insert(state, namespace, &definition, true, None).await {
        Ok(_) => info!(job = %definition.name, "created the job declared in code"),
        Err(store::Error::Conflict { .. }) => {}
        Err(err) => {
            warn!(job = %definition.name, error = %err, "could not create the job declared in code")
        }
    }
}

/// An executor's heartbeat, with the attempts it runs (executor token).
#[utoipa::path(post, operation_id = "executorHeartbeat", path = "/executors/heartbeat", tag = "executor protocol", request_body = Heartbeat,
    responses((status = 200, description = "Whether it is known, and attempts to cancel", body = HeartbeatReply)))]
pub(super) async fn heartbeat(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(beat): JsonBody<Heartbeat>,
) -> Result<Json<HeartbeatReply>, ApiError> {
    check_owner(&state, &principal, &beat.executor_id).await?;
    let in_flight = i64::try_from(beat.in_flight.len()).unwrap_or(i64::MAX);
    let registered = state
        .store
        .executor_heartbeat(&beat.executor_id, in_flight, beat.draining)
        .await?;
    // Every attempt listed is still held: one not marked seen would be taken for forgotten.
    for listed in beat.in_flight.chunks(1_000) {
        state.store.attempts_seen(&beat.executor_id, listed).await?;
    }
    let listed = &beat.in_flight[..beat.in_flight.len().min(1_000)];
    // Attempts it still runs that ended here (cancelled, timed out, lost and moved): stop
    // them. A pending one is not ended: the executor may have accepted it a moment before the
    // node that dispatched it records the answer, and heartbeats overtake that record.
    // A lost attempt of an `exactly_once_effect` run is let finish: its result, in the
    // executor's record, answers the retry of the same work.
    let mut cancel = Vec::new();
    for attempt_id in listed {
        if let Some(a) = state.store.attempt_get(*attempt_id).await?
            && a.state != AttemptState::Pending
            && (a.state != AttemptState::Running
                || a.executor_id.as_deref() != Some(beat.executor_id.as_str()))
            && !(a.state == AttemptState::Lost && effect_once(&state, a.job_id).await?)
        {
            cancel.push(*attempt_id);
        }
    }
    Ok(Json(HeartbeatReply { registered, cancel }))
}

/// Whether the job (or task) of a run asks for `exactly_once_effect`.
async fn effect_once(state: &ApiState, job_id: i64) -> Result<bool, ApiError> {
    match crate::store::job_of_run(&*state.store, job_id).await? {
        Some(job) => match job.policy() {
            Ok(policy) => Ok(policy.delivery == crate::jobs::Delivery::ExactlyOnceEffect),
            // Whether the work may be cancelled cannot be read: it is let finish (its result
            // is recorded on the lost attempt), and one job cannot fail an executor's beat.
            Err(e) => {
                tracing::warn!(error = %e, "a lost attempt is let finish");
                Ok(true)
            }
        },
        None => Ok(false),
    }
}

/// An attempt's result, for a dispatch answered `202` (executor token).
#[utoipa::path(post, operation_id = "reportResult", path = "/executors/results", tag = "executor protocol", request_body = AttemptReport,
    responses(
        (status = 200, description = "Recorded (a repeat changes nothing)", body = ReportAccepted),
        (status = 404, description = "No such attempt", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The attempt was not dispatched to this executor", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn results(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    JsonBody(report): JsonBody<AttemptReport>,
) -> Result<Json<ReportAccepted>, ApiError> {
    check_owner(&state, &principal, &report.executor_id).await?;
    let Some(handle) = &report.handle else {
        return Err(ApiError::Forbidden(format!(
            "the result of attempt {} quotes no handle: an executor quotes the `handle` of the \
             attempt's dispatch (an SDK older than this node sends none; upgrade it)",
            report.attempt_id
        )));
    };
    // Told apart from an attempt that does not exist by nothing: ids are sequential.
    if !state.dispatch.handles().verifies(report.attempt_id, handle) {
        return Err(ApiError::Forbidden(format!(
            "attempt {} has no such handle",
            report.attempt_id
        )));
    }
    let attempt = state
        .store
        .attempt_get(report.attempt_id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("attempt {}", report.attempt_id)))?;
    // A report can arrive before the node records the dispatch as accepted: while the attempt
    // is still pending, the reporter is the executor that took it.
    let dispatched_to_reporter =
        attempt.executor_id.as_deref() == Some(report.executor_id.as_str());
    if !dispatched_to_reporter && attempt.state != AttemptState::Pending {
        return Err(ApiError::Conflict(format!(
            "attempt {} was not dispatched to executor {}",
            report.attempt_id, report.executor_id
        )));
    }
    let ended = finish_attempt_by(
        &*state.store,
        &state.observer,
        &attempt,
        Some(&report.executor_id),
        Ending::Reported(report.outcome),
        report.output.as_ref(),
        report.error,
    )
    .await?;
    Ok(Json(ReportAccepted {
        accepted: true,
        effect: format!("{ended:?}"),
    }))
}

/// The answer to a result report.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReportAccepted {
    accepted: bool,
    /// What the report did: the attempt ended, a retry was scheduled, or nothing (a repeat).
    effect: String,
}

/// An executor's drain state after an operator's change.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct DrainState {
    id: String,
    drained: bool,
    /// False when it already was in that state.
    changed: bool,
}

/// The answer to a deregistration.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Deregistered {
    /// False when it had already left.
    left: bool,
}

async fn set_drained(
    state: &ApiState,
    audit: &Audit,
    id: &str,
    drain: bool,
) -> Result<Json<DrainState>, ApiError> {
    let known = state.store.executors_list(None).await?;
    if !known.executors.iter().any(|e| e.executor_id == id) {
        return Err(ApiError::missing(format!("executor {id}")));
    }
    let event = audit.event(axum::http::StatusCode::OK, None);
    let changed = state
        .store
        .executor_drain(id, drain, event.as_ref())
        .await?;
    if changed {
        audit.written();
    }
    info!(
        executor = id,
        drain, changed, "executor drain changed by an operator"
    );
    Ok(Json(DrainState {
        id: id.to_owned(),
        drained: drain,
        changed,
    }))
}

#[utoipa::path(post, operation_id = "drainExecutor", path = "/executors/{id}/drain", tag = "executors", params(("id" = String, Path, description = "The executor's id")),
    responses((status = 200, description = "Drained", body = DrainState)))]
/// `POST /executors/{id}/drain`: no new dispatches; running attempts finish.
pub(super) async fn drain(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(id): NameParam,
) -> Result<Json<DrainState>, ApiError> {
    set_drained(&state, &audit, &id, true).await
}

#[utoipa::path(post, operation_id = "resumeExecutor", path = "/executors/{id}/resume", tag = "executors", params(("id" = String, Path, description = "The executor's id")),
    responses((status = 200, description = "Active again", body = DrainState)))]
/// `POST /executors/{id}/resume`: dispatch to it again.
pub(super) async fn resume(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(id): NameParam,
) -> Result<Json<DrainState>, ApiError> {
    set_drained(&state, &audit, &id, false).await
}

#[utoipa::path(delete, operation_id = "removeExecutor", path = "/executors/{id}", tag = "executors", params(("id" = String, Path, description = "The executor's id")),
    responses((status = 204, description = "Forgotten")))]
/// `DELETE /executors/{id}`: forget an executor; its running attempts fail over, and its id is
/// free for any token to register. One that is still alive is told at its next heartbeat to
/// register again.
pub(super) async fn remove(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(id): NameParam,
) -> Result<axum::http::StatusCode, ApiError> {
    let event = audit.event(axum::http::StatusCode::NO_CONTENT, None);
    if state.store.executor_remove(&id, event.as_ref()).await? {
        audit.written();
        Ok(axum::http::StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("executor {id}")))
    }
}

/// An executor leaves; its attempts under way fail over (executor token).
#[utoipa::path(post, operation_id = "deregisterExecutor", path = "/executors/deregister", tag = "executor protocol", request_body = Deregistration,
    responses((status = 200, description = "Left", body = Deregistered)))]
pub(super) async fn deregister(
    State(state): State<ApiState>,
    audit: Audit,
    Extension(principal): Extension<Principal>,
    JsonBody(leaving): JsonBody<Deregistration>,
) -> Result<Json<Deregistered>, ApiError> {
    check_owner(&state, &principal, &leaving.executor_id).await?;
    let event = audit.event(axum::http::StatusCode::OK, None);
    let left = state
        .store
        .executor_leave(&leaving.executor_id, event.as_ref())
        .await?;
    if left {
        audit.written();
    }
    info!(executor = %leaving.executor_id, "executor deregistered");
    Ok(Json(Deregistered { left }))
}
