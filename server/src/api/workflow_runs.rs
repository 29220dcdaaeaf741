//! `/api/v1/workflow-runs/{id}`: a workflow run as it stands (the definition it pinned, each
//! step's state, run and output), its cancel, and its re-run.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::audit::Audit;
use super::error::Problem;
use super::params::IdParam;
use super::runs::{RunView, stop_attempts};
use super::{ApiError, ApiState};
use crate::clock::rfc3339;
use crate::states::{JobKind, RunState, StepState};
use crate::store::{self, params_of};
use crate::workflows::{Definition, Need};

/// A step of a workflow run.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct StepRunView {
    name: String,
    /// `waiting`, `running`, `succeeded`, `failed`, `skipped` or `cancelled`.
    state: String,
    /// The job whose run the step is.
    job_id: i64,
    needs: Vec<Need>,
    /// The step's run, once it has one.
    run_id: Option<i64>,
    output: Option<Value>,
    updated_at: Option<String>,
}

/// A workflow run: the run, the parameters its steps were given, and each step.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct WorkflowRunView {
    #[serde(flatten)]
    run: RunView,
    workflow_id: i64,
    params: Value,
    /// The workflow run this one runs again.
    #[serde(skip_serializing_if = "Option::is_none")]
    rerun_of: Option<i64>,
    steps: Vec<StepRunView>,
}

/// A workflow run with each step's state, run and output.
#[utoipa::path(get, operation_id = "getWorkflowRun", path = "/workflow-runs/{id}", tag = "workflows", params(("id" = i64, Path, description = "The workflow run's id (its run's)")),
    responses((status = 200, description = "The workflow run", body = WorkflowRunView)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<Json<WorkflowRunView>, ApiError> {
    Ok(Json(run_view(&state, id).await?))
}

/// A stored document of workflow run `id` that no longer reads: an error, never a default.
fn unreadable(id: i64, what: &str, err: &serde_json::Error) -> ApiError {
    ApiError::unreadable(format!("the {what} of workflow run {id}"), err)
}

async fn run_view(state: &ApiState, id: i64) -> Result<WorkflowRunView, ApiError> {
    let run = super::runs::load_run(state, id, "workflow run").await?;
    let name = state.store.job_get(run.job_id).await?.map(|j| j.name);
    let pinned = state.store.workflow_run_get(id).await?;
    let rerun_of = pinned.as_ref().and_then(|(p, _)| p.rerun_of);
    let (params, definition, steps) = match pinned {
        Some((pinned, steps)) => (
            serde_json::from_str(&pinned.params_json)
                .map_err(|e| unreadable(id, "parameters", &e))?,
            crate::jobs::stored::lenient::<Definition>(&pinned.definition_json)
                .map_err(|e| unreadable(id, "definition", &e))?,
            steps,
        ),
        // Not started yet: the workflow's own definition, every step waiting.
        None => {
            let workflow = state
                .store
                .job_get(run.job_id)
                .await?
                .filter(|j| j.kind == JobKind::Workflow)
                .ok_or_else(|| ApiError::missing(format!("workflow run {id}")))?;
            let definition = match state.store.workflow_definition(workflow.job_id).await? {
                Some(stored) => crate::jobs::stored::lenient::<Definition>(&stored)
                    .map_err(|e| unreadable(id, "workflow's definition", &e))?,
                // Its steps not stored yet (it is being created): no step to show.
                None => Definition::default(),
            };
            // The parameters it will be given: the trigger's, else the workflow's.
            let input = state.store.run_input(id).await?;
            let params = params_of(id, input.as_deref(), &workflow.args_json)?;
            (
                serde_json::from_str(&params).map_err(|e| unreadable(id, "parameters", &e))?,
                definition,
                Vec::new(),
            )
        }
    };
    let by_name: HashMap<&str, &store::StepRunRecord> =
        steps.iter().map(|s| (s.step_name.as_str(), s)).collect();
    let steps = definition
        .steps
        .iter()
        .map(|step| {
            let row = by_name.get(step.name.as_str());
            let output = row
                .and_then(|r| r.output_json.as_deref())
                .map(|o| {
                    serde_json::from_str(o).map_err(|e| {
                        let what =
                            format!("the output of step {} of run {}", step.name, run.run_id);
                        ApiError::unreadable(what, &e)
                    })
                })
                .transpose()?;
            Ok(StepRunView {
                name: step.name.clone(),
                state: row
                    .map_or(StepState::Waiting, |r| r.state)
                    .as_str()
                    .to_owned(),
                job_id: step.job_id,
                needs: step.needs.clone(),
                run_id: row.and_then(|r| r.run_id),
                output,
                updated_at: row.and_then(|r| rfc3339(r.updated_at_ms)),
            })
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let namespace = super::namespaces::name_of(state, run.namespace_id).await?;
    Ok(WorkflowRunView {
        workflow_id: run.job_id,
        run: RunView::of(run, name, namespace),
        params,
        rerun_of,
        steps,
    })
}

/// Runs an ended workflow run again, as a new run with the definition and parameters it
/// had: the steps that succeeded keep their runs and outputs, the others run again.
#[utoipa::path(post, operation_id = "rerunWorkflowRun", path = "/workflow-runs/{id}/rerun", tag = "workflows", params(("id" = i64, Path, description = "The workflow run's id")),
    responses(
        (status = 202, description = "The new workflow run", body = WorkflowRunView),
        (status = 409, description = "The workflow run has not ended, or its workflow is gone", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn rerun(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<(StatusCode, Json<WorkflowRunView>), ApiError> {
    let run = super::runs::load_run(&state, id, "workflow run").await?;
    if RunState::UNFINISHED.contains(&run.state) {
        return Err(ApiError::Conflict(format!(
            "workflow run {id} is {}: cancel it, or wait for it to end",
            run.state
        )));
    }
    if state.store.job_get(run.job_id).await?.is_none() {
        return Err(ApiError::Conflict(format!(
            "the workflow of run {id} was deleted"
        )));
    }
    let event = audit.event(StatusCode::ACCEPTED, None);
    let again = state
        .store
        .workflow_run_rerun(id, state.view.node_id(), event.as_ref())
        .await?
        .ok_or_else(|| ApiError::missing(format!("workflow run {id}")))?;
    audit.written();
    Ok((StatusCode::ACCEPTED, Json(run_view(&state, again).await?)))
}

/// Cancels an unfinished workflow run: its running steps' runs are cancelled (their
/// executors told to stop) and its waiting steps never run.
#[utoipa::path(post, operation_id = "cancelWorkflowRun", path = "/workflow-runs/{id}/cancel", tag = "workflows", params(("id" = i64, Path, description = "The workflow run's id")),
    responses(
        (status = 200, description = "The workflow run, cancelled", body = WorkflowRunView),
        (status = 409, description = "The workflow run has already ended", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn cancel(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<WorkflowRunView>, ApiError> {
    let run = super::runs::load_run(&state, id, "workflow run").await?;
    let workflow = state.store.job_get(run.job_id).await?;
    if workflow
        .as_ref()
        .is_none_or(|w| w.kind != JobKind::Workflow)
    {
        return Err(ApiError::missing(format!("workflow run {id}")));
    }
    let event = audit.event(StatusCode::OK, None);
    let Some(running) = state.store.workflow_run_cancel(id, event.as_ref()).await? else {
        return Err(ApiError::Conflict(format!(
            "workflow run {id} has already ended"
        )));
    };
    audit.written();
    state
        .observer
        .workflow_run_ended(id, run.job_id, Some(run.namespace_id), RunState::Cancelled);
    stop_attempts(&state, running).await?;
    Ok(Json(run_view(&state, id).await?))
}
