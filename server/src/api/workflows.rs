//! `/api/v1/workflows`: named DAGs of steps with a schedule (`crate::workflows`), and
//! `/api/v1/workflow-runs`: a workflow run with each step's state and run. A workflow is kept
//! as a row of `jobs` of kind `workflow` (its schedule and policies), hidden rows of kind
//! `step` (the steps with a handler of their own, one set per version) and its definition;
//! each workflow run pins the definition it started with.

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::admitted::Admitted;
use super::audit::Audit;
use super::body::JsonBody;
use super::changes::Changes;
use super::error::Problem;
use super::job_views::definition_of;
use super::jobs::{check_fires, load, runs_of, write_of};
use super::namespaces::NamespaceQuery;
use super::params::{IdParam, QueryParams};
use super::runs::{JobRunsQuery, RunList, RunView};
use super::{ApiError, ApiState};
use crate::clock::rfc3339;
use crate::jobs::{Flow, JobDefinition, Misfire, Overlap};
use crate::schedule::ScheduleSpec;
use crate::states::{JobKind, JobState};
use crate::store::{JobFilter, JobOrder, JobRecord, NamespaceId};
use crate::workflows::input::{JobRef, NeedInput, StepInput, WorkflowInput};
use crate::workflows::{Definition, Need, graph};

/// A workflow as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct WorkflowView {
    id: i64,
    namespace: String,
    name: String,
    schedule: ScheduleSpec,
    timezone: String,
    params: Value,
    steps: Vec<StepInput>,
    misfire: Misfire,
    overlap: Overlap,
    priority: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    flow: Option<Flow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    /// `stopped`, `running` or `done`.
    state: String,
    version: i64,
    partition: i64,
    last_fired_at: Option<String>,
    created_at: Option<String>,
    updated_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct WorkflowList {
    workflows: Vec<WorkflowView>,
}

/// `POST /workflows/{id}/trigger`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerInput {
    /// Given to every step as `params`, instead of the workflow's own.
    #[serde(default)]
    params: Option<Value>,
}

/// Checks a workflow document whole, before anything is written: the workflow as a job, the
/// graph, each step's own handler or job (a job named by name is resolved to its id here).
async fn checked(
    state: &ApiState,
    namespace: NamespaceId,
    input: &mut WorkflowInput,
) -> Result<JobDefinition, ApiError> {
    let definition = input.job_definition()?;
    resolve_job_names(state, namespace, input).await?;
    let needs: Vec<Vec<Need>> = input
        .steps
        .iter()
        .map(|s| s.needs.iter().map(NeedInput::need).collect())
        .collect();
    let steps: Vec<(&str, &[Need])> = input
        .steps
        .iter()
        .zip(&needs)
        .map(|(s, n)| (s.name.as_str(), n.as_slice()))
        .collect();
    graph::check(&steps).map_err(|e| ApiError::invalid(&e.field, e.message))?;
    let mut referenced = Vec::new();
    for (i, step) in input.steps.iter().enumerate() {
        match step.own_job(i, &format!("step {}", step.name))? {
            Some(own) => {
                super::apps::check_reachable(
                    state,
                    namespace,
                    &format!("steps[{i}].app"),
                    &own.app,
                )
                .await?;
            }
            None => {
                if let Some(job) = step.job_id() {
                    referenced.push((i, job));
                }
            }
        }
    }
    let ids: Vec<i64> = referenced.iter().map(|(_, j)| *j).collect();
    let found: HashMap<i64, JobRecord> = state
        .store
        .jobs_get_many(&ids)
        .await?
        .into_iter()
        .map(|j| (j.job_id, j))
        .collect();
    for (i, job) in referenced {
        match found.get(&job) {
            None => {
                return Err(ApiError::invalid(
                    &format!("steps[{i}].job"),
                    format!("there is no job {job}"),
                ));
            }
            // Another team's job is as good as none: its existence is not told.
            Some(record) if record.namespace_id != namespace => {
                return Err(ApiError::invalid(
                    &format!("steps[{i}].job"),
                    format!("there is no job {job} in this workflow's namespace"),
                ));
            }
            Some(record) if record.kind == JobKind::Step => {
                return Err(ApiError::invalid(
                    &format!("steps[{i}].job"),
                    format!("job {job} is another workflow's step"),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(definition)
}

/// Replaces each step's job given by name with its id (names are unique in `namespace`), else a `400` naming
/// the step's field; `checked` then refuses a workflow's own step as it would by id.
async fn resolve_job_names(
    state: &ApiState,
    namespace: NamespaceId,
    input: &mut WorkflowInput,
) -> Result<(), ApiError> {
    let names: Vec<String> = input
        .steps
        .iter()
        .filter_map(|step| match &step.job {
            Some(JobRef::Name(name)) => Some(name.clone()),
            _ => None,
        })
        .collect();
    if names.is_empty() {
        return Ok(());
    }
    // One lookup for every step; the database compares names as it does for uniqueness
    // (ignoring case on MySQL): an exact match first.
    let found = state.store.jobs_named(namespace, &names).await?;
    for (i, step) in input.steps.iter_mut().enumerate() {
        let Some(JobRef::Name(name)) = &step.job else {
            continue;
        };
        let id = found
            .iter()
            .find(|(n, _)| n == name)
            .or_else(|| {
                found
                    .iter()
                    .find(|(n, _)| n.to_lowercase() == name.to_lowercase())
            })
            .map(|(_, id)| *id)
            .ok_or_else(|| {
                ApiError::invalid(
                    &format!("steps[{i}].job"),
                    format!("there is no job named {name:?}"),
                )
            })?;
        step.job = Some(JobRef::Id(id));
    }
    Ok(())
}

/// Whether `input` (checked into `definition`) is what workflow `record` already is.
async fn unchanged(
    state: &ApiState,
    record: &JobRecord,
    definition: &JobDefinition,
    input: &WorkflowInput,
) -> Result<bool, ApiError> {
    if definition_of(record)? != *definition {
        return Ok(false);
    }
    let Some(stored) = state.store.workflow_definition(record.job_id).await? else {
        return Ok(false);
    };
    let stored: Definition = crate::jobs::stored::lenient(&stored).map_err(|e| {
        ApiError::unreadable(format!("the definition of workflow {}", record.job_id), &e)
    })?;
    if stored.steps.len() != input.steps.len() {
        return Ok(false);
    }
    let ids: Vec<i64> = stored.steps.iter().map(|s| s.job_id).collect();
    let jobs: HashMap<i64, JobRecord> = state
        .store
        .jobs_get_many(&ids)
        .await?
        .into_iter()
        .map(|j| (j.job_id, j))
        .collect();
    for (i, (step, was)) in input.steps.iter().zip(&stored.steps).enumerate() {
        let needs: Vec<Need> = step.needs.iter().map(NeedInput::need).collect();
        if step.name != was.name || needs != was.needs {
            return Ok(false);
        }
        let Some(job) = jobs.get(&was.job_id) else {
            return Ok(false);
        };
        let same = match step.own_job(i, &job.name)? {
            Some(own) => job.kind == JobKind::Step && definition_of(job)? == own,
            None => job.kind != JobKind::Step && step.job_id() == Some(was.job_id),
        };
        if !same {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The view of a workflow's row, with its steps as written.
async fn view_of(state: &ApiState, record: JobRecord) -> Result<WorkflowView, ApiError> {
    let definition: Definition = match state.store.workflow_definition(record.job_id).await? {
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            ApiError::unreadable(format!("the definition of workflow {}", record.job_id), &e)
        })?,
        None => Definition::default(),
    };
    let ids: Vec<i64> = definition.steps.iter().map(|s| s.job_id).collect();
    let own = state
        .store
        .jobs_get_many(&ids)
        .await?
        .iter()
        .filter(|j| j.kind == JobKind::Step)
        .map(|j| Ok((j.job_id, definition_of(j)?)))
        .collect::<Result<HashMap<i64, JobDefinition>, ApiError>>()?;
    view_with(state, record, &definition, &own).await
}

/// The view of a workflow's row with `definition` as its steps, `own` the definitions of the
/// steps that are jobs of their own, by id.
pub(super) async fn view_with(
    state: &ApiState,
    record: JobRecord,
    definition: &Definition,
    own: &HashMap<i64, JobDefinition>,
) -> Result<WorkflowView, ApiError> {
    let job = definition_of(&record)?;
    let steps = definition
        .steps
        .iter()
        .map(|step| {
            let needs = step
                .needs
                .iter()
                .map(|n| NeedInput::Need(n.clone()))
                .collect();
            match own.get(&step.job_id).cloned() {
                Some(own) => Ok(StepInput {
                    name: step.name.clone(),
                    job: None,
                    app: Some(own.app),
                    handler: Some(own.handler),
                    args: own.args,
                    sharding: Some(own.policy.sharding),
                    balance: Some(own.policy.balance),
                    retry: Some(own.policy.retry),
                    timeout_ms: own.policy.timeout_ms,
                    delivery: Some(own.policy.delivery),
                    flow: own.policy.flow,
                    needs,
                }),
                None => Ok(StepInput {
                    name: step.name.clone(),
                    job: Some(JobRef::Id(step.job_id)),
                    app: None,
                    handler: None,
                    args: Value::Null,
                    sharding: None,
                    balance: None,
                    retry: None,
                    timeout_ms: None,
                    delivery: None,
                    flow: None,
                    needs,
                }),
            }
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    Ok(WorkflowView {
        id: record.job_id,
        namespace: super::namespaces::name_of(state, record.namespace_id).await?,
        name: record.name,
        schedule: job.schedule,
        timezone: job.timezone,
        params: job.args,
        steps,
        misfire: job.policy.misfire,
        overlap: job.policy.overlap,
        priority: job.policy.priority,
        flow: job.policy.flow,
        description: job.policy.description,
        state: record.state.as_str().to_owned(),
        version: record.version,
        partition: record.partition_id,
        last_fired_at: record.last_fired_at_ms.and_then(rfc3339),
        created_at: rfc3339(record.created_at_ms),
        updated_at: rfc3339(record.updated_at_ms),
    })
}

/// A workflow's row, or 404 when the id is not a workflow's.
async fn load_workflow(state: &ApiState, id: i64) -> Result<JobRecord, ApiError> {
    let record = load(state, id).await?;
    if record.kind != JobKind::Workflow {
        return Err(ApiError::missing(format!("workflow {id}")));
    }
    Ok(record)
}

/// Creates a workflow, stopped unless `start` is true.
#[utoipa::path(post, operation_id = "createWorkflow", path = "/workflows", tag = "workflows", request_body = WorkflowInput,
    params(NamespaceQuery),
    responses(
        (status = 201, description = "Created", body = WorkflowView),
        (status = 409, description = "The name is taken, or the namespace holds its quota of jobs", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(mut input): JsonBody<WorkflowInput>,
) -> Result<(StatusCode, Json<WorkflowView>), ApiError> {
    let namespace = admitted.namespace()?;
    let definition = checked(&state, namespace, &mut input).await?;
    if input.start {
        check_fires(&state, &definition)?;
    }
    super::calendars::check_named(&state, namespace, &definition).await?;
    super::quotas::check_jobs(&state, namespace, 1).await?;
    let mut write = write_of(namespace, &definition);
    write.kind = JobKind::Workflow;
    let view =
        super::workflow_write::create(&state, &audit, namespace, &write, &input, input.start)
            .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// Replaces a workflow's schedule, policies and steps; runs already started keep theirs.
#[utoipa::path(put, operation_id = "updateWorkflow", path = "/workflows/{id}", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id")), request_body = WorkflowInput,
    responses((status = 200, description = "The workflow as it is now", body = WorkflowView)))]
pub(super) async fn update(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
    JsonBody(mut input): JsonBody<WorkflowInput>,
) -> Result<(Extension<Changes>, Json<WorkflowView>), ApiError> {
    let record = load_workflow(&state, id).await?;
    let definition = checked(&state, record.namespace_id, &mut input).await?;
    if record.state == JobState::Running {
        check_fires(&state, &definition)?;
    }
    super::calendars::check_named(&state, record.namespace_id, &definition).await?;
    // The same document again changes nothing (no new version, no new steps' jobs).
    if unchanged(&state, &record, &definition, &input).await? {
        return Ok((
            Extension(Changes::default()),
            Json(view_of(&state, record).await?),
        ));
    }
    let before = view_of(&state, record.clone()).await?;
    let mut write = write_of(record.namespace_id, &definition);
    write.kind = JobKind::Workflow;
    let (after, changes) =
        super::workflow_write::update(&state, &audit, &record, &before, &write, &input).await?;
    Ok((Extension(changes), Json(after)))
}

/// Lists the workflows, newest first.
#[utoipa::path(get, operation_id = "listWorkflows", path = "/workflows", tag = "workflows",
    params(NamespaceQuery),
    responses((status = 200, description = "The workflows", body = WorkflowList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<WorkflowList>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let records = state
        .store
        .jobs_list(&JobFilter {
            namespace: Some(namespace.id),
            kind: Some(JobKind::Workflow),
            order: JobOrder::NewestFirst,
            limit: 1_000,
            ..JobFilter::default()
        })
        .await?;
    let mut workflows = Vec::with_capacity(records.len());
    for record in records {
        workflows.push(view_of(&state, record).await?);
    }
    Ok(Json(WorkflowList { workflows }))
}

#[utoipa::path(get, operation_id = "getWorkflow", path = "/workflows/{id}", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id")),
    responses((status = 200, description = "The workflow", body = WorkflowView)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<Json<WorkflowView>, ApiError> {
    let record = load_workflow(&state, id).await?;
    Ok(Json(view_of(&state, record).await?))
}

/// Deletes a workflow; its runs stay in the log, and runs in flight finish.
#[utoipa::path(delete, operation_id = "deleteWorkflow", path = "/workflows/{id}", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id")),
    responses((status = 204, description = "Deleted")))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<StatusCode, ApiError> {
    load_workflow(&state, id).await?;
    super::children::check_unused(&state, id).await?;
    let event = audit.event(StatusCode::NO_CONTENT, None);
    if state.store.job_delete(id, event.as_ref()).await? {
        audit.written();
    }
    Ok(StatusCode::NO_CONTENT)
}

/// Starts a workflow: it fires from its next instant (missed ones follow its misfire policy).
#[utoipa::path(post, operation_id = "startWorkflow", path = "/workflows/{id}/start", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id")),
    responses((status = 200, description = "The workflow, running", body = WorkflowView)))]
pub(super) async fn start(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<WorkflowView>, ApiError> {
    let record = load_workflow(&state, id).await?;
    let started = super::lifecycle::start(&state, &record, &audit).await?;
    Ok(Json(view_of(&state, started).await?))
}

/// Pauses a workflow: no more instants fire; runs in flight finish.
#[utoipa::path(post, operation_id = "stopWorkflow", path = "/workflows/{id}/stop", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id")),
    responses((status = 200, description = "The workflow, stopped", body = WorkflowView)))]
pub(super) async fn stop(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<WorkflowView>, ApiError> {
    let record = load_workflow(&state, id).await?;
    let stopped = super::lifecycle::stop(&state, &record, &audit).await?;
    Ok(Json(view_of(&state, stopped).await?))
}

/// Runs a workflow once now, whatever its state, with `params` for its steps if given.
#[utoipa::path(post, operation_id = "triggerWorkflow", path = "/workflows/{id}/trigger", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id")), request_body = TriggerInput,
    responses((status = 202, description = "The workflow's run, pending", body = RunView)))]
pub(super) async fn trigger(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
    JsonBody(body): JsonBody<TriggerInput>,
) -> Result<(StatusCode, Json<RunView>), ApiError> {
    let record = load_workflow(&state, id).await?;
    let input = body
        .params
        .map(|params| serde_json::json!({ "params": params }).to_string());
    let run = super::lifecycle::trigger(&state, &record, (None, input.as_deref()), &audit).await?;
    let namespace = super::namespaces::name_of(&state, record.namespace_id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RunView::of(run, Some(record.name), namespace)),
    ))
}

/// A workflow's runs, one page at a time.
#[utoipa::path(get, operation_id = "listWorkflowRuns", path = "/workflows/{id}/runs", tag = "workflows", params(("id" = i64, Path, description = "The workflow's id"), JobRunsQuery),
    responses((status = 200, description = "One page of the workflow's runs", body = RunList)))]
pub(super) async fn runs(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
    QueryParams(query): QueryParams<JobRunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let workflow = load_workflow(&state, id).await?;
    Ok(Json(runs_of(&state, "workflows", &workflow, query).await?))
}
