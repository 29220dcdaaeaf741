//! `/api/v1/runs`: run logs (runs with their attempts), cancellation, dead letters.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admitted::Admitted;
use super::audit::Audit;
use super::error::Problem;
use super::paging;
use super::params::{IdParam, QueryParams};
use super::{ApiError, ApiState, rfc3339};
use crate::states::RunState;
use crate::store::{AttemptRecord, DEAD_LETTER_STATES, NamespaceId, RunFilter, RunRecord};

/// A run as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunView {
    id: i64,
    namespace: String,
    /// The job's id; for a task's run, the task's id negated (see `task_id`).
    job_id: i64,
    /// The job's name (`task <id>` for a task's run); `null` once the job is deleted.
    job_name: Option<String>,
    /// The task this run fired, for a task's run.
    task_id: Option<i64>,
    scheduled_at: Option<String>,
    /// `schedule`, `misfire`, `manual`, `backfill`, `task`, `child` or `step` (a workflow
    /// step's run, or a workflow run started as another workflow's step).
    trigger: String,
    state: String,
    priority: i64,
    node_id: String,
    partition: i64,
    epoch: i64,
    created_at: Option<String>,
    started_at: Option<String>,
    finished_at: Option<String>,
    message: Option<String>,
    /// The flow key it is counted under (*Flow control*), as its policy names it (with the
    /// value of `key_arg`); in a run's detail only.
    #[serde(skip_serializing_if = "Option::is_none")]
    flow_key: Option<String>,
}

impl RunView {
    /// The view of `r`, a run of the job named `job_name` (`None`: deleted), of namespace
    /// `namespace`.
    pub(super) fn of(r: RunRecord, job_name: Option<String>, namespace: String) -> Self {
        Self {
            id: r.run_id,
            namespace,
            job_id: r.job_id,
            job_name,
            task_id: crate::store::task_of_job_id(r.job_id),
            scheduled_at: rfc3339(r.scheduled_at_ms),
            trigger: r.trigger_kind.as_str().to_owned(),
            state: r.state.as_str().to_owned(),
            priority: r.priority,
            node_id: r.node_id,
            partition: r.partition_id,
            epoch: r.epoch,
            created_at: rfc3339(r.created_at_ms),
            started_at: r.started_at_ms.and_then(rfc3339),
            finished_at: r.finished_at_ms.and_then(rfc3339),
            message: r.message,
            // Stored with its namespace's id first.
            flow_key: r.flow_key.map(|key| {
                key.split_once('/')
                    .map_or(key.clone(), |(_, k)| k.to_owned())
            }),
        }
    }
}

/// The views of `runs`, their jobs' names read in one statement.
pub(super) async fn run_views(
    state: &ApiState,
    runs: Vec<RunRecord>,
) -> Result<Vec<RunView>, ApiError> {
    let mut ids: Vec<i64> = runs.iter().map(|r| r.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let names: std::collections::HashMap<i64, String> = if ids.is_empty() {
        Default::default()
    } else {
        crate::store::jobs_of_runs(&*state.store, &ids)
            .await?
            .into_iter()
            .map(|j| (j.job_id, j.name))
            .collect()
    };
    let mut namespaces = std::collections::HashMap::new();
    for run in &runs {
        if let std::collections::hash_map::Entry::Vacant(slot) = namespaces.entry(run.namespace_id)
        {
            slot.insert(super::namespaces::name_of(state, run.namespace_id).await?);
        }
    }
    Ok(runs
        .into_iter()
        .map(|r| {
            let name = names.get(&r.job_id).cloned();
            let namespace = namespaces.get(&r.namespace_id).cloned().unwrap_or_default();
            RunView::of(r, name, namespace)
        })
        .collect())
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AttemptView {
    id: i64,
    shard: i64,
    shards: i64,
    attempt: i64,
    state: String,
    executor_id: Option<String>,
    args: serde_json::Value,
    created_at: Option<String>,
    not_before: Option<String>,
    dispatched_at: Option<String>,
    deadline: Option<String>,
    finished_at: Option<String>,
    output: Option<serde_json::Value>,
    error: Option<String>,
}

impl TryFrom<AttemptRecord> for AttemptView {
    type Error = ApiError;

    fn try_from(a: AttemptRecord) -> Result<Self, ApiError> {
        let id = a.attempt_id;
        let read =
            |what: &str, err| ApiError::unreadable(format!("the {what} of attempt {id}"), &err);
        let args = a.args()?;
        let output = a
            .output
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| read("output", e))?;
        Ok(Self {
            id: a.attempt_id,
            shard: a.shard_index,
            shards: a.shard_total,
            attempt: a.attempt_no,
            state: a.state.as_str().to_owned(),
            executor_id: a.executor_id,
            args,
            created_at: rfc3339(a.created_at_ms),
            not_before: rfc3339(a.not_before_ms),
            dispatched_at: a.dispatched_at_ms.and_then(rfc3339),
            deadline: a.deadline_ms.and_then(rfc3339),
            finished_at: a.finished_at_ms.and_then(rfc3339),
            output,
            error: a.error,
        })
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunDetail {
    #[serde(flatten)]
    run: RunView,
    attempts: Vec<AttemptView>,
    /// What the run was given beside its job's arguments: a child run, its parent's run,
    /// state and output (`parent`); a workflow step's run, the workflow run, its parameters
    /// and the outputs of the steps it needs (`workflow`, `params`, `upstream`).
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<serde_json::Value>,
    /// The runs of child jobs this run triggered when it ended.
    children: Vec<ChildRunView>,
}

/// A run a parent run triggered.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ChildRunView {
    job_id: i64,
    run_id: i64,
}

/// The query of a run listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct RunsQuery {
    /// The namespace (default `default`, or a service token's own); `job_id` and every other
    /// filter apply inside it.
    #[allow(
        dead_code,
        reason = "the permission check reads it and admits the call in it (`Admitted`)"
    )]
    #[param(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    namespace: Option<String>,
    /// Only this job's runs.
    job_id: Option<i64>,
    /// Only runs in this state.
    state: Option<String>,
    /// `-created` (newest first, the default) or `created`.
    #[param(pattern = "^-?created$")]
    sort: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// The `next_cursor` of the previous page, asked with the same `sort`.
    cursor: Option<String>,
}

/// The query of `/jobs/{id}/runs`: a run listing of one job.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct JobRunsQuery {
    /// Only runs in this state.
    state: Option<String>,
    /// `-created` (newest first, the default) or `created`.
    #[param(pattern = "^-?created$")]
    sort: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// The `next_cursor` of the previous page, asked with the same `sort`.
    cursor: Option<String>,
}

impl JobRunsQuery {
    pub(super) fn of_job(self, job_id: i64) -> RunsQuery {
        RunsQuery {
            namespace: None,
            job_id: Some(job_id),
            state: self.state,
            sort: self.sort,
            limit: self.limit,
            cursor: self.cursor,
        }
    }
}

/// One page of runs.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunList {
    runs: Vec<RunView>,
    /// Pass as `cursor` (with the same `sort`) for the next page; absent on the last page.
    next_cursor: Option<String>,
}

/// What a listing's `state` takes besides a run state: any finished run.
const FINISHED_FILTER: &str = "done";

const RUN_SORTS: &[&str] = &["-created", "created"];

/// A page of the runs `query` asks for in `namespace` (where the call was admitted), in
/// listing `listing` (whose cursors it takes).
pub(super) async fn page_of(
    state: &ApiState,
    namespace: NamespaceId,
    listing: &str,
    query: RunsQuery,
    states: &[&str],
) -> Result<RunList, ApiError> {
    let sort = paging::sort(query.sort.as_deref(), RUN_SORTS)?;
    let limit = paging::limit(query.limit)?;
    let after_id = query
        .cursor
        .as_deref()
        .map(|c| paging::position_id(c, listing, sort))
        .transpose()?;
    let oldest_first = sort == "created";
    let mut runs = Vec::new();
    for run_state in states {
        let filter = RunFilter {
            namespace: Some(namespace),
            job_id: query.job_id,
            state: Some((*run_state).to_owned()).filter(|s| !s.is_empty()),
            oldest_first,
            after_id,
            limit,
        };
        runs.extend(state.store.runs_list(&filter).await?);
    }
    if states.len() > 1 {
        runs.sort_by_key(|r| r.run_id);
        if !oldest_first {
            runs.reverse();
        }
        runs.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    let next_cursor = paging::next_cursor(&runs, limit, listing, sort, |r| r.run_id.to_string());
    Ok(RunList {
        runs: run_views(state, runs).await?,
        next_cursor,
    })
}

/// Runs of every job, one page at a time.
#[utoipa::path(get, operation_id = "listRuns", path = "/runs", tag = "runs", params(RunsQuery),
    responses((status = 200, description = "One page of runs", body = RunList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let wanted = query_state(&query)?;
    Ok(Json(
        page_of(
            &state,
            admitted.namespace()?,
            "runs",
            query,
            &[wanted.as_str()],
        )
        .await?,
    ))
}

/// The run state a listing is limited to, checked; empty for any.
pub(super) fn query_state(query: &RunsQuery) -> Result<String, ApiError> {
    match query.state.as_deref() {
        None => Ok(String::new()),
        Some(s) if s == FINISHED_FILTER || s.parse::<RunState>().is_ok() => Ok(s.to_owned()),
        Some(_) => {
            let mut states: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
            states.push(FINISHED_FILTER);
            Err(ApiError::invalid(
                "state",
                format!("use one of {}", states.join(", ")),
            ))
        }
    }
}

#[utoipa::path(get, operation_id = "listDeadLetters", path = "/dead-letters", tag = "runs", params(RunsQuery),
    responses((status = 200, description = "One page of dead letters", body = RunList)))]
/// Runs that ended without success for good: `failed` after their last attempt, or
/// `no_executor`.
pub(super) async fn dead_letters(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(query): QueryParams<RunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    if query.state.is_some() {
        return Err(ApiError::invalid(
            "state",
            "dead letters are the failed and no_executor runs; list others at /runs",
        ));
    }
    Ok(Json(
        page_of(
            &state,
            admitted.namespace()?,
            "dead-letters",
            query,
            &DEAD_LETTER_STATES.map(RunState::as_str),
        )
        .await?,
    ))
}

/// A run with its attempts: shards, retries, outputs and errors.
#[utoipa::path(get, operation_id = "getRun", path = "/runs/{id}", tag = "runs", params(("id" = i64, Path, description = "The run's id")),
    responses((status = 200, description = "The run", body = RunDetail)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<Json<RunDetail>, ApiError> {
    let run = load_run(&state, id, "run").await?;
    let attempts = state.store.attempts_of_run(id).await?;
    let job_name = crate::store::job_of_run(&*state.store, run.job_id)
        .await?
        .map(|j| j.name);
    let input = state
        .store
        .run_input(id)
        .await?
        .map(|i| serde_json::from_str(&i))
        .transpose()
        .map_err(|e| ApiError::unreadable(format!("the input of run {id}"), &e))?;
    let children = state
        .store
        .child_runs_of_run(id)
        .await?
        .into_iter()
        .map(|child| ChildRunView {
            job_id: child.child_job_id,
            run_id: child.child_run_id,
        })
        .collect();
    let namespace = super::namespaces::name_of(&state, run.namespace_id).await?;
    Ok(Json(RunDetail {
        run: RunView::of(run, job_name, namespace),
        attempts: attempts
            .into_iter()
            .map(AttemptView::try_from)
            .collect::<Result<_, _>>()?,
        input,
        children,
    }))
}

#[utoipa::path(post, operation_id = "rerunRun", path = "/runs/{id}/rerun", tag = "runs", params(("id" = i64, Path, description = "The run's id")),
    responses((status = 202, description = "The new run, pending dispatch", body = RunView,
            links(
                ("get" = (operation_id = "getRun", parameters(("id" = "$response.body#/id")))),
                ("cancel" = (operation_id = "cancelRun", parameters(("id" = "$response.body#/id")))),
                ("rerun" = (operation_id = "rerunRun", parameters(("id" = "$response.body#/id")))),
            ))))]
/// `POST /runs/{id}/rerun`: a new run of the same job now, typically for a dead letter.
pub(super) async fn rerun(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<(axum::http::StatusCode, Json<RunView>), ApiError> {
    let run = load_run(&state, id, "run").await?;
    let job = state
        .store
        .job_get(run.job_id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("job {} of run {id}", run.job_id)))?;
    let message = format!("re-run of run {id}");
    // A child run's re-run is given its parent's run and output again.
    let input = state.store.run_input(id).await?;
    let again =
        super::lifecycle::trigger(&state, &job, (Some(&message), input.as_deref()), &audit).await?;
    // A run that failed under a fifo flow key held it: its re-run takes its place.
    if run.flow_key.is_some() {
        state
            .store
            .run_flow_hand_over(run.run_id, again.run_id)
            .await?;
    }
    let namespace = super::namespaces::name_of(&state, job.namespace_id).await?;
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(RunView::of(again, Some(job.name), namespace)),
    ))
}

/// Cancels an unfinished run; its executors are told to stop.
#[utoipa::path(post, operation_id = "cancelRun", path = "/runs/{id}/cancel", tag = "runs", params(("id" = i64, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run, cancelled", body = RunDetail),
        (status = 409, description = "The run has already ended", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn cancel(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<RunDetail>, ApiError> {
    let run = load_run(&state, id, "run").await?;
    if !cancel_run(&state, &run, &audit).await? {
        return Err(ApiError::Conflict(format!(
            "run {id} has already ended ({})",
            run.state
        )));
    }
    get(State(state), IdParam(id)).await
}

/// Lets a run that failed for good under a `fifo` flow key give the key up, so that the
/// key's next run starts.
#[utoipa::path(post, operation_id = "releaseRun", path = "/runs/{id}/release", tag = "runs", params(("id" = i64, Path, description = "The run's id")),
    responses(
        (status = 200, description = "The run, its key given up", body = RunDetail),
        (status = 409, description = "The run holds no flow key: only a run that failed for good under a `fifo` key does", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn release(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<RunDetail>, ApiError> {
    let run = load_run(&state, id, "run").await?;
    let event = audit.event(axum::http::StatusCode::OK, None);
    if state
        .store
        .run_flow_release(run.run_id, event.as_ref())
        .await?
        .is_none()
    {
        return Err(ApiError::Conflict(format!(
            "run {id} holds no flow key: only a run that failed for good under a fifo key does \
             (it is {})",
            run.state
        )));
    }
    audit.written();
    get(State(state), IdParam(id)).await
}

/// Cancels `run` if it is unfinished and tells the executors running it to stop; `false`
/// when it had ended. `audit`'s event goes with the cancel.
pub(super) async fn cancel_run(
    state: &ApiState,
    run: &RunRecord,
    audit: &Audit,
) -> Result<bool, ApiError> {
    let event = audit.event(axum::http::StatusCode::OK, None);
    let Some(running) = state.store.run_cancel(run.run_id, event.as_ref()).await? else {
        return Ok(false);
    };
    audit.written();
    state.observer.run_ended(
        run.run_id,
        run.job_id,
        Some(run.namespace_id),
        RunState::Cancelled,
        None,
    );
    stop_attempts(state, running).await?;
    Ok(true)
}

/// Tells the executors of `running` attempts (just cancelled) to stop them; an executor that
/// misses this learns it from its next heartbeat (an XXL-JOB executor, whose beats carry
/// nothing back, is told to `/kill` the job).
pub(super) async fn stop_attempts(
    state: &ApiState,
    running: Vec<crate::store::AttemptRecord>,
) -> Result<(), ApiError> {
    if running.is_empty() {
        return Ok(());
    }
    let executors = state.store.executors_list(None).await?;
    for attempt in running {
        if let Some(e) = executors
            .executors
            .iter()
            .find(|e| Some(&e.executor_id) == attempt.executor_id.as_ref())
        {
            state
                .dispatch
                .stop(e, attempt.attempt_id, attempt.job_id)
                .await;
        }
    }
    Ok(())
}

/// The run with this id, or `404` naming it as `what` ("run", "workflow run").
pub(super) async fn load_run(state: &ApiState, id: i64, what: &str) -> Result<RunRecord, ApiError> {
    state
        .store
        .run_get(id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("{what} {id}")))
}
