//! `/api/v1/jobs`: create, list, get, update, delete, start, stop, trigger, and a job's runs.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use chrono::DateTime;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admitted::Admitted;
use super::audit::Audit;
use super::body::JsonBody;
use super::changes::Changes;
use super::error::Problem;
use super::job_views::{JobView, definition_of, view_of, view_warned};
use super::namespaces::NamespaceQuery;
use super::paging;
use super::params::{IdParam, QueryParams};
use super::runs::{JobRunsQuery, RunList, RunView, page_of, query_state};
use super::{ApiError, ApiState};
use crate::jobs::{JobDefinition, JobError, JobInput, JobPatch, KeepFor, new_job_id, partition_of};
use crate::schedule::NextHints;
use crate::states::{JobKind, JobState};
use crate::store::{
    self, AuditWrite, JobFilter, JobKey, JobOrder, JobRecord, JobWrite, NamespaceId,
};

impl From<JobError> for ApiError {
    fn from(err: JobError) -> Self {
        ApiError::Invalid {
            field: err.field,
            message: err.message,
        }
    }
}

/// The row of `definition`, a job of `namespace` (kept by an edit: jobs do not move).
pub(super) fn write_of(namespace: NamespaceId, definition: &JobDefinition) -> JobWrite {
    // Serialising our own plain data types cannot fail.
    let json = |value: serde_json::Result<String>| value.unwrap_or_else(|_| "null".to_owned());
    JobWrite {
        name: definition.name.clone(),
        app_name: definition.app.clone(),
        handler_name: definition.handler.clone(),
        schedule_json: json(serde_json::to_string(&definition.schedule)),
        timezone: definition.timezone.clone(),
        args_json: json(serde_json::to_string(&definition.args)),
        policy_json: json(serde_json::to_string(&definition.policy)),
        history_keep_ms: definition
            .policy
            .history
            .and_then(|h| h.keep)
            .map(KeepFor::column),
        history_max_runs: definition
            .policy
            .history
            .and_then(|h| h.max_runs)
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        kind: JobKind::Job,
        namespace_id: namespace,
    }
}

/// Refuses a schedule with nothing left to fire: a one-shot in the past, a rule that ended.
/// Refuses a job whose alert webhook or HTTP call is an address the egress policy refuses
/// (`169.254.169.254`, loopback, a private network not allowed). A name is judged each time it
/// is called, by what it resolves to then.
pub(super) fn check_egress(state: &ApiState, definition: &JobDefinition) -> Result<(), ApiError> {
    let policy = &definition.policy;
    let webhook = policy.alerts.as_ref().and_then(|a| a.webhook.as_deref());
    let call = policy.http.as_ref().map(|call| call.url.as_str());
    let named = [("alerts.webhook", webhook), ("http.url", call)];
    for (field, url) in named.into_iter().filter_map(|(f, url)| Some((f, url?))) {
        // A call's URL may hold templates that make it read only at a run's time.
        if reqwest::Url::parse(url).is_ok() {
            super::namespaces::check_egress(state, field, url)?;
        }
    }
    Ok(())
}

pub(super) fn check_fires(state: &ApiState, definition: &JobDefinition) -> Result<(), ApiError> {
    let schedule = definition.parsed_schedule()?;
    if schedule.is_manual() {
        return Err(ApiError::invalid(
            "schedule.manual",
            "a job without a schedule is not started: trigger it instead \
             (POST /api/v1/jobs/{id}/trigger)",
        ));
    }
    let now = DateTime::from_timestamp_millis(state.clock.now_ms()).unwrap_or_default();
    let anchored = NextHints {
        anchor: Some(now),
        cursor: None,
    };
    if schedule
        .next_after(now, anchored)
        .map_err(JobError::from)?
        .is_none()
    {
        let field = if definition.schedule.at.is_some() {
            "schedule.at"
        } else {
            "schedule"
        };
        return Err(ApiError::invalid(
            field,
            "has no instant after now: it would never fire",
        ));
    }
    Ok(())
}

/// The job with this id, or `404` naming it.
pub(super) async fn load(state: &ApiState, id: i64) -> Result<JobRecord, ApiError> {
    state
        .store
        .job_get(id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("job {id}")))
}

/// Refuses to change a workflow, or a workflow's step, through the jobs API.
pub(super) fn a_job(record: &JobRecord) -> Result<(), ApiError> {
    match record.kind {
        JobKind::Workflow => Err(ApiError::Conflict(format!(
            "job {} is the workflow {:?}: use /api/v1/workflows/{}",
            record.job_id, record.name, record.job_id
        ))),
        JobKind::Step => Err(ApiError::Conflict(format!(
            "job {} ({:?}) is a step of a workflow: change the workflow",
            record.job_id, record.name
        ))),
        _ => Ok(()),
    }
}

/// Stores a new job of `namespace` under a freshly drawn id, in the partition it hashes to
/// (drawing again if the id is taken: up to 20, as only 4,096 fall in each millisecond); a
/// name taken in the namespace is [`store::Error::Conflict`]. `audit` is recorded with it.
pub(super) async fn insert(
    state: &ApiState,
    namespace: NamespaceId,
    definition: &JobDefinition,
    start: bool,
    audit: Option<&AuditWrite>,
) -> Result<JobRecord, store::Error> {
    let write = write_of(namespace, definition);
    let mut attempt = 0;
    loop {
        let id = new_job_id(state.clock.now_ms());
        let partition = partition_of(id, state.partition_count);
        match state
            .store
            .job_insert(id, partition, &write, start, audit)
            .await
        {
            Err(store::Error::Conflict { what }) if what.starts_with("job id") && attempt < 20 => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Creates a job, stopped unless `start` is true.
#[utoipa::path(post, operation_id = "createJob", path = "/jobs", tag = "jobs", request_body = JobInput,
    params(NamespaceQuery),
    responses(
        (status = 201, description = "Created", body = JobView,
            headers(("Location" = String, description = "The job's URL")),
            links(
                ("get" = (operation_id = "getJob", parameters(("id" = "$response.body#/id")))),
                ("update" = (operation_id = "updateJob", parameters(("id" = "$response.body#/id")))),
                ("start" = (operation_id = "startJob", parameters(("id" = "$response.body#/id")))),
                ("stop" = (operation_id = "stopJob", parameters(("id" = "$response.body#/id")))),
                ("trigger" = (operation_id = "triggerJob", parameters(("id" = "$response.body#/id")))),
                ("runs" = (operation_id = "listJobRuns", parameters(("id" = "$response.body#/id")))),
                ("delete" = (operation_id = "deleteJob", parameters(("id" = "$response.body#/id")))),
            ),
        ),
        (status = 409, description = "The name is taken, or the namespace holds its quota of jobs", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(input): JsonBody<JobInput>,
) -> Result<(StatusCode, HeaderMap, Json<JobView>), ApiError> {
    let namespace = admitted.named(&state).await?;
    let start = input.start;
    let definition = input.into_definition()?;
    check_egress(&state, &definition)?;
    // A job without a schedule is created stopped, to be triggered; only starting it is refused.
    if start || definition.schedule.manual.is_none() {
        check_fires(&state, &definition)?;
    }
    super::calendars::check_named(&state, namespace.id, &definition).await?;
    super::apps::check_reachable(&state, namespace.id, "app", &definition.app).await?;
    super::children::check(
        &state,
        namespace.id,
        None,
        &definition.name,
        &definition.policy.children,
    )
    .await?;
    super::quotas::check_jobs(&state, namespace.id, 1).await?;
    let event = audit.event(StatusCode::CREATED, None);
    let record = insert(&state, namespace.id, &definition, start, event.as_ref()).await?;
    audit.written();
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&format!("/api/v1/jobs/{}", record.job_id)) {
        headers.insert(header::LOCATION, location);
    }
    Ok((
        StatusCode::CREATED,
        headers,
        Json(view_warned(&state, record).await?),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    app: Option<String>,
    /// `stopped`, `running` or `done`.
    #[param(pattern = "^(stopped|running|done)$")]
    state: Option<String>,
    /// Names starting with this.
    name: Option<String>,
    /// Names containing this, ignoring case.
    #[param(max_length = 200)]
    search: Option<String>,
    /// `-created` (newest first, the default), `created`, `name` or `-name`.
    #[param(pattern = "^(-created|created|name|-name)$")]
    sort: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// The `next_cursor` of the previous page, asked with the same `sort`.
    cursor: Option<String>,
    /// The namespace (default `default`).
    #[allow(
        dead_code,
        reason = "the permission check reads it and admits the call in it (`Admitted`)"
    )]
    #[param(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    namespace: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobList {
    jobs: Vec<JobView>,
    /// Pass as `cursor` (with the same `sort`) for the next page; absent on the last page.
    next_cursor: Option<String>,
}

const JOB_SORTS: &[&str] = &["-created", "created", "name", "-name"];

/// Lists jobs, one page at a time.
#[utoipa::path(get, operation_id = "listJobs", path = "/jobs", tag = "jobs", params(ListQuery),
    responses((status = 200, description = "One page of jobs", body = JobList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Json<JobList>, ApiError> {
    if let Some(s) = &query.state
        && s.parse::<JobState>().is_err()
    {
        return Err(ApiError::invalid("state", "use stopped, running or done"));
    }
    if query
        .search
        .as_ref()
        .is_some_and(|s| s.chars().count() > 200)
    {
        return Err(ApiError::invalid("search", "is longer than 200 characters"));
    }
    let sort = paging::sort(query.sort.as_deref(), JOB_SORTS)?;
    let limit = paging::limit(query.limit)?;
    let by_name = sort.ends_with("name");
    let after = match &query.cursor {
        None => None,
        Some(c) if by_name => Some(JobKey::Name(paging::position(c, "jobs", sort)?)),
        Some(c) => Some(JobKey::Id(paging::position_id(c, "jobs", sort)?)),
    };
    let order = match sort {
        "created" => JobOrder::OldestFirst,
        "name" => JobOrder::NameAscending,
        "-name" => JobOrder::NameDescending,
        _ => JobOrder::NewestFirst,
    };
    let namespace = admitted.named(&state).await?;
    let filter = JobFilter {
        namespace: Some(namespace.id),
        kind: Some(JobKind::Job),
        app: query.app,
        state: query.state,
        name_prefix: query.name,
        name_contains: query.search.filter(|s| !s.is_empty()),
        order,
        after,
        limit,
    };
    let records = state.store.jobs_list(&filter).await?;
    let next_cursor = paging::next_cursor(&records, limit, "jobs", sort, |r| {
        if by_name {
            r.name.clone()
        } else {
            r.job_id.to_string()
        }
    });
    let jobs = records
        .into_iter()
        .map(|r| view_of(&state, namespace.name.clone(), r))
        .collect::<Result<_, _>>()?;
    Ok(Json(JobList { jobs, next_cursor }))
}

/// A job's entity tag: its version, which every change bumps.
fn etag(version: i64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(&format!("\"{version}\"")) {
        headers.insert(header::ETAG, value);
    }
    headers
}

/// One job; its `ETag` is its version.
#[utoipa::path(get, operation_id = "getJob", path = "/jobs/{id}", tag = "jobs", params(("id" = i64, Path, description = "The job's id")),
    responses((status = 200, description = "The job", body = JobView,
        headers(("ETag" = String, description = "The job's version, for If-Match")))))]
pub(super) async fn get(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<(HeaderMap, Json<JobView>), ApiError> {
    let record = load(&state, id).await?;
    Ok((
        etag(record.version),
        Json(view_warned(&state, record).await?),
    ))
}

/// The version an `If-Match` header asks for, if any (`*` asks for none in particular).
pub(super) fn if_match(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    text.trim_start_matches("W/")
        .trim_matches('"')
        .parse()
        .map(Some)
        .map_err(|_| ApiError::invalid("If-Match", "is not an ETag this API returned"))
}

/// Changes the fields given. Send `If-Match` with the ETag read (or `version` in the body) so
/// that a change made by someone else since is not overwritten.
#[utoipa::path(patch, operation_id = "updateJob", path = "/jobs/{id}", tag = "jobs", request_body = JobPatch,
    params(("id" = i64, Path, description = "The job's id"),
        ("If-Match" = Option<String>, Header, description = "The ETag of the version this change was made from")),
    responses(
        (status = 200, description = "The job as changed", body = JobView,
            headers(("ETag" = String, description = "The new version"))),
        (status = 409, description = "`version` is not the job's", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "`If-Match` is not the job's ETag", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn update(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
    headers: HeaderMap,
    JsonBody(patch): JsonBody<JobPatch>,
) -> Result<(HeaderMap, Json<JobView>), ApiError> {
    let record = load(&state, id).await?;
    a_job(&record)?;
    if let Some(expected) = if_match(&headers)?
        && expected != record.version
    {
        return Err(ApiError::PreconditionFailed(format!(
            "job {id} is at version {}, not {expected}: read it again and reapply your change",
            record.version
        )));
    }
    if let Some(expected) = patch.version
        && expected != record.version
    {
        return Err(ApiError::Conflict(format!(
            "job {id} is at version {}, not {expected}: read it again and reapply your change",
            record.version
        )));
    }
    let before = definition_of(&record)?;
    let definition = patch.apply(&before)?;
    check_egress(&state, &definition)?;
    if record.state == JobState::Running {
        check_fires(&state, &definition)?;
    }
    super::calendars::check_named(&state, record.namespace_id, &definition).await?;
    if definition.app != before.app {
        super::apps::check_reachable(&state, record.namespace_id, "app", &definition.app).await?;
    }
    super::children::check(
        &state,
        record.namespace_id,
        Some(id),
        &definition.name,
        &definition.policy.children,
    )
    .await?;
    let event = audit.event(
        StatusCode::OK,
        Some(&Changes::between(&before, &definition)),
    );
    let updated = state
        .store
        .job_update(
            id,
            record.version,
            &write_of(record.namespace_id, &definition),
            event.as_ref(),
        )
        .await?
        .ok_or_else(|| {
            ApiError::Conflict(format!(
                "job {id} changed while it was being updated; retry"
            ))
        })?;
    audit.written();
    Ok((
        etag(updated.version),
        Json(view_warned(&state, updated).await?),
    ))
}

/// Deletes a job; its runs stay in the log.
#[utoipa::path(delete, operation_id = "deleteJob", path = "/jobs/{id}", tag = "jobs", params(("id" = i64, Path, description = "The job's id")),
    responses((status = 204, description = "Deleted"),
        (status = 409, description = "Another job names it as a child", body = Problem, content_type = "application/problem+json")))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<StatusCode, ApiError> {
    if let Some(record) = state.store.job_get(id).await? {
        a_job(&record)?;
    }
    super::children::check_unused(&state, id).await?;
    let event = audit.event(StatusCode::NO_CONTENT, None);
    if state.store.job_delete(id, event.as_ref()).await? {
        audit.written();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("job {id}")))
    }
}

/// Starts a job: it fires from its next instant (missed ones follow its misfire policy).
#[utoipa::path(post, operation_id = "startJob", path = "/jobs/{id}/start", tag = "jobs", params(("id" = i64, Path, description = "The job's id")),
    responses((status = 200, description = "The job, running", body = JobView)))]
pub(super) async fn start(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<JobView>, ApiError> {
    let record = load(&state, id).await?;
    a_job(&record)?;
    let started = super::lifecycle::start(&state, &record, &audit).await?;
    Ok(Json(view_warned(&state, started).await?))
}

/// Stops a job; runs under way finish.
#[utoipa::path(post, operation_id = "stopJob", path = "/jobs/{id}/stop", tag = "jobs", params(("id" = i64, Path, description = "The job's id")),
    responses((status = 200, description = "The job, stopped", body = JobView)))]
pub(super) async fn stop(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<JobView>, ApiError> {
    let record = load(&state, id).await?;
    a_job(&record)?;
    let stopped = super::lifecycle::stop(&state, &record, &audit).await?;
    Ok(Json(view_warned(&state, stopped).await?))
}

/// Runs a job once now, whatever its state.
#[utoipa::path(post, operation_id = "triggerJob", path = "/jobs/{id}/trigger", tag = "jobs", params(("id" = i64, Path, description = "The job's id")),
    responses((status = 202, description = "The run, pending dispatch", body = RunView,
            links(
                ("get" = (operation_id = "getRun", parameters(("id" = "$response.body#/id")))),
                ("cancel" = (operation_id = "cancelRun", parameters(("id" = "$response.body#/id")))),
                ("rerun" = (operation_id = "rerunRun", parameters(("id" = "$response.body#/id")))),
            ))))]
pub(super) async fn trigger(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<(StatusCode, Json<RunView>), ApiError> {
    let record = load(&state, id).await?;
    a_job(&record)?;
    let run = super::lifecycle::trigger(&state, &record, (None, None), &audit).await?;
    let namespace = super::namespaces::name_of(&state, record.namespace_id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RunView::of(run, Some(record.name), namespace)),
    ))
}

/// A job's runs, one page at a time.
#[utoipa::path(get, operation_id = "listJobRuns", path = "/jobs/{id}/runs", tag = "jobs", params(("id" = i64, Path, description = "The job's id"), JobRunsQuery),
    responses((status = 200, description = "One page of the job's runs", body = RunList)))]
pub(super) async fn runs(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
    QueryParams(query): QueryParams<JobRunsQuery>,
) -> Result<Json<RunList>, ApiError> {
    let job = load(&state, id).await?;
    Ok(Json(runs_of(&state, "jobs", &job, query).await?))
}

/// One page of the runs of `job` (a workflow's too), listed under `/{collection}/{id}/runs`.
pub(super) async fn runs_of(
    state: &ApiState,
    collection: &str,
    job: &JobRecord,
    query: JobRunsQuery,
) -> Result<RunList, ApiError> {
    let listing = format!("{collection}/{}/runs", job.job_id);
    let query = query.of_job(job.job_id);
    let wanted = query_state(&query)?;
    page_of(state, job.namespace_id, &listing, query, &[wanted.as_str()]).await
}
