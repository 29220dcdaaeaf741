//! A job as the API shows it: its definition, its state and next instant, and, in the answers
//! about one job, what may keep it from running as meant.

use chrono::DateTime;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, ApiState};
use crate::clock::rfc3339;
use crate::jobs::{JobDefinition, JobPolicy};
use crate::schedule::{NextHints, ScheduleSpec};
use crate::states::JobState;
use crate::store::JobRecord;

/// A job as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobView {
    id: i64,
    namespace: String,
    name: String,
    app: String,
    handler: String,
    schedule: ScheduleSpec,
    timezone: String,
    args: serde_json::Value,
    #[serde(flatten)]
    policy: JobPolicy,
    /// `stopped`, `running` or `done`.
    state: String,
    version: i64,
    partition: i64,
    last_fired_at: Option<String>,
    next_fire_at: Option<String>,
    created_at: Option<String>,
    updated_at: Option<String>,
    started_at: Option<String>,
    /// Scheduled instants fired so far (what `bounds.max_runs` counts).
    fired: i64,
    /// What may keep the job from running as meant: that no executor of its app offers its
    /// handler, or that its cron expression means what its text may not say (a step after
    /// names, which Quartz drops). In the answers about one job (create, get, update, start,
    /// stop), never in lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Vec<String>>,
}

/// The view of `record`, a job of namespace `namespace`.
pub(super) fn view_of(
    state: &ApiState,
    namespace: String,
    record: JobRecord,
) -> Result<JobView, ApiError> {
    let definition = definition_of(&record)?;
    view_with(state, namespace, record, definition)
}

/// The view of `record`, whose definition is `definition`.
fn view_with(
    state: &ApiState,
    namespace: String,
    record: JobRecord,
    definition: JobDefinition,
) -> Result<JobView, ApiError> {
    // A fixed delay's next instant depends on when its running run ends: not shown.
    let fixed_delay =
        definition.schedule.fixed_delay.is_some() && record.last_fired_at_ms.is_some();
    let next_fire_at = if record.state == JobState::Running && !fixed_delay {
        let now = state.clock.now_ms();
        let from = record.last_fired_at_ms.map_or(now, |l| l.max(now));
        definition
            .parsed_schedule()
            .ok()
            .and_then(|s| {
                let hints = NextHints {
                    anchor: record
                        .started_at_ms
                        .and_then(DateTime::from_timestamp_millis),
                    cursor: record
                        .last_fired_at_ms
                        .and_then(DateTime::from_timestamp_millis),
                };
                DateTime::from_timestamp_millis(from)
                    .and_then(|after| s.next_after(after, hints).ok().flatten())
            })
            .and_then(|n| rfc3339(n.timestamp_millis()))
    } else {
        None
    };
    Ok(JobView {
        id: record.job_id,
        namespace,
        name: definition.name,
        app: definition.app,
        handler: definition.handler,
        schedule: definition.schedule,
        timezone: definition.timezone,
        args: definition.args,
        policy: definition.policy,
        state: record.state.as_str().to_owned(),
        version: record.version,
        partition: record.partition_id,
        last_fired_at: record.last_fired_at_ms.and_then(rfc3339),
        next_fire_at,
        created_at: rfc3339(record.created_at_ms),
        updated_at: rfc3339(record.updated_at_ms),
        started_at: record.started_at_ms.and_then(rfc3339),
        fired: record.fired_count,
        warnings: None,
    })
}

/// `view_of`, with the warnings an answer about one job carries.
pub(super) async fn view_warned(state: &ApiState, record: JobRecord) -> Result<JobView, ApiError> {
    let namespace = super::namespaces::name_of(state, record.namespace_id).await?;
    let definition = definition_of(&record)?;
    let mut warnings: Vec<String> = definition
        .parsed_schedule()
        .map(|schedule| schedule.notes().to_vec())
        .unwrap_or_default();
    let mut view = view_with(state, namespace, record, definition)?;
    // An HTTP job's call is made by the nodes: no executor serves it.
    if view.policy.http.is_none() {
        warnings.extend(super::served::handler_warning(state, &view.app, &view.handler).await?);
    }
    view.warnings = Some(warnings).filter(|warnings| !warnings.is_empty());
    Ok(view)
}

pub(super) fn definition_of(record: &JobRecord) -> Result<JobDefinition, ApiError> {
    let unreadable = |what: &str, err: serde_json::Error| {
        ApiError::unreadable(format!("the {what} of job {}", record.job_id), &err)
    };
    Ok(JobDefinition {
        name: record.name.clone(),
        app: record.app_name.clone(),
        handler: record.handler_name.clone(),
        schedule: serde_json::from_str(&record.schedule_json)
            .map_err(|e| unreadable("schedule", e))?,
        timezone: record.timezone.clone(),
        args: record.args()?,
        policy: record.policy()?.clone(),
    })
}
