//! `/api/v1/tasks`: enqueueing tasks (one, or a batch of up to 10,000), reading them by id,
//! by key or in lists, and cancelling them (once fired, their runs).

use std::collections::HashSet;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admitted::Admitted;
use super::audit::Audit;
use super::body::JsonBody;
use super::error::Problem;
use super::namespaces::NamespaceQuery;
use super::paging;
use super::params::{IdParam, QueryParams};
use super::{ApiError, ApiState, rfc3339};
use crate::jobs::ItemError;
use crate::jobs::partition_of;
use crate::schedule::parse_instant;
use crate::states::TaskState;
use crate::store::{Enqueued, TaskFilter, TaskRecord, TaskWrite};
use crate::tasks::{TaskBatch, TaskInput, check_batch};

/// A task as the API shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TaskView {
    id: i64,
    namespace: String,
    key: Option<String>,
    app: String,
    handler: String,
    args: serde_json::Value,
    due_at: Option<String>,
    priority: i64,
    /// `pending` or `cancelled` before it fires; then its run's state (`running`,
    /// `succeeded`, `failed`, …), or `fired` once its run is purged.
    state: String,
    /// Its run, once fired.
    run_id: Option<i64>,
    created_at: Option<String>,
    /// When it fired or was cancelled.
    ended_at: Option<String>,
    message: Option<String>,
    /// What the task set of its policy (`retry`, `timeout_ms`, `balance`, `priority`,
    /// `delivery`).
    policy: serde_json::Value,
}

impl TaskView {
    /// The view of `t`, a task of namespace `namespace`.
    fn of(t: TaskRecord, namespace: String) -> Result<Self, ApiError> {
        let id = t.task_id;
        let read = |what: &str, err| ApiError::unreadable(format!("the {what} of task {id}"), &err);
        let args = serde_json::from_str(&t.args_json).map_err(|e| read("args", e))?;
        // What the task set, as it set it; it must read as a policy, the one its run follows.
        t.policy()?;
        let policy = serde_json::from_str(t.stored_policy.text()).map_err(|e| read("policy", e))?;
        let state = match (t.state, t.run_state) {
            (TaskState::Fired, Some(run)) => run,
            (state, _) => state.as_str().to_owned(),
        };
        Ok(Self {
            id: t.task_id,
            namespace,
            key: t.task_key,
            app: t.app_name,
            handler: t.handler_name,
            args,
            due_at: rfc3339(t.due_at_ms),
            priority: t.priority,
            state,
            run_id: t.run_id,
            created_at: rfc3339(t.created_at_ms),
            ended_at: t.ended_at_ms.and_then(rfc3339),
            message: t.message,
            policy,
        })
    }
}

/// What an enqueue did with one task.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EnqueuedTask {
    id: i64,
    /// `created`, or `existing`: an unfinished task held the key, and this is its id.
    status: &'static str,
}

/// A handler of an app that no executor has registered (yet).
#[derive(Debug, Serialize, ToSchema, PartialEq, Eq, Hash, Clone)]
pub(super) struct UnknownHandler {
    app: String,
    handler: String,
}

/// The answer to an enqueue.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EnqueueView {
    created: usize,
    existing: usize,
    /// One entry per task, in the order sent.
    tasks: Vec<EnqueuedTask>,
    /// Handlers of the batch no executor has registered: their tasks are stored and wait for
    /// an executor (after their instant, for `dispatch.no_executor_grace_ms`).
    unknown_handlers: Vec<UnknownHandler>,
}

/// The tasks of a body: one task, or `{"tasks": [...]}`; each task's errors name its index.
fn tasks_of(body: serde_json::Value) -> Result<Vec<TaskInput>, ApiError> {
    let items = match body {
        serde_json::Value::Object(mut doc) if doc.contains_key("tasks") => {
            match doc.remove("tasks") {
                Some(serde_json::Value::Array(items)) if doc.is_empty() => items,
                Some(serde_json::Value::Array(_)) => {
                    return Err(ApiError::invalid(
                        "body",
                        "a batch is {\"tasks\": [...]} and nothing else",
                    ));
                }
                _ => return Err(ApiError::invalid("tasks", "must be an array of tasks")),
            }
        }
        one @ serde_json::Value::Object(_) => vec![one],
        _ => {
            return Err(ApiError::invalid(
                "body",
                "send a task object or {\"tasks\": [...]}",
            ));
        }
    };
    let mut tasks = Vec::with_capacity(items.len());
    let mut errors = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        match serde_path_to_error::deserialize::<_, TaskInput>(item) {
            Ok(task) => tasks.push(task),
            Err(err) => {
                let (field, message) = super::body::described(&err, "task");
                errors.push(ItemError {
                    index,
                    field,
                    message,
                });
            }
        }
    }
    if errors.is_empty() {
        Ok(tasks)
    } else {
        Err(ApiError::InvalidItems {
            list: "tasks",
            errors,
        })
    }
}

/// Enqueues one task or a batch of up to 10,000, all or nothing.
#[utoipa::path(post, operation_id = "enqueueTasks", path = "/tasks", tag = "tasks", request_body = TaskBatch,
    params(NamespaceQuery),
    responses(
        (status = 201, description = "At least one task was created", body = EnqueueView),
        (status = 200, description = "Every task's key was held by an unfinished task: nothing created", body = EnqueueView),
        (status = 409, description = "The namespace's pending tasks' quota would be passed: nothing created", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The namespace's enqueue rate on this node is spent: retry after `Retry-After` seconds", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn enqueue(
    State(state): State<ApiState>,
    audit: Audit,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> Result<(StatusCode, Json<EnqueueView>), ApiError> {
    let namespace = admitted.namespace()?;
    let tasks = tasks_of(body)?;
    let checked =
        check_batch(tasks, state.clock.now_ms(), state.task_horizon_ms).map_err(|err| {
            ApiError::InvalidItems {
                list: "tasks",
                errors: err.errors,
            }
        })?;
    super::quotas::check_tasks(&state, namespace, checked.len()).await?;
    let ids = state.task_ids.take(&*state.store, checked.len()).await?;
    let writes: Vec<TaskWrite> = checked
        .into_iter()
        .zip(ids)
        .map(|(task, id)| TaskWrite {
            task_id: id,
            partition_id: partition_of(id, state.partition_count),
            namespace_id: namespace,
            key: task.key,
            app_name: task.app,
            handler_name: task.handler,
            args_json: task.args_json,
            policy_json: task.policy_json,
            priority: i64::from(task.priority),
            due_at_ms: task.due_at_ms,
        })
        .collect();
    let event = audit.event(StatusCode::CREATED, None);
    let outcomes = state.store.tasks_enqueue(&writes, event.as_ref()).await?;
    let created = outcomes
        .iter()
        .filter(|o| matches!(o, Enqueued::Created(_)))
        .count();
    // With nothing created the store wrote no event; authorize records the call's `200`.
    if created > 0 {
        audit.written();
    }
    let unknown_handlers = unknown_handlers(&state, &writes).await?;
    let view = EnqueueView {
        created,
        existing: outcomes.len() - created,
        tasks: outcomes
            .iter()
            .map(|o| match o {
                Enqueued::Created(id) => EnqueuedTask {
                    id: *id,
                    status: "created",
                },
                Enqueued::Existing(id) => EnqueuedTask {
                    id: *id,
                    status: "existing",
                },
            })
            .collect(),
        unknown_handlers,
    };
    let status = if created > 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)))
}

/// The (app, handler) pairs the registered executors serve, read from the database at most
/// once per [`KnownHandlers::FRESH`]: an enqueue of one task should not cost a read of every
/// executor.
#[derive(Debug, Default)]
pub struct KnownHandlers {
    read: tokio::sync::Mutex<Option<(std::time::Instant, Arc<AppHandlers>)>>,
}

/// `(app, handler)` pairs.
type AppHandlers = HashSet<(String, String)>;

impl KnownHandlers {
    const FRESH: std::time::Duration = std::time::Duration::from_secs(1);

    async fn get(&self, state: &ApiState) -> Result<Arc<AppHandlers>, ApiError> {
        let mut read = self.read.lock().await;
        if let Some((at, known)) = read.as_ref()
            && at.elapsed() < Self::FRESH
        {
            return Ok(Arc::clone(known));
        }
        let fleet = state.store.executors_list(None).await?;
        let app_of: std::collections::HashMap<&str, &str> = fleet
            .executors
            .iter()
            .map(|e| (e.executor_id.as_str(), e.app_name.as_str()))
            .collect();
        let known: Arc<AppHandlers> = Arc::new(
            fleet
                .handlers
                .iter()
                .filter_map(|(executor, handler)| {
                    app_of
                        .get(executor.as_str())
                        .map(|app| ((*app).to_owned(), handler.clone()))
                })
                .collect(),
        );
        *read = Some((std::time::Instant::now(), Arc::clone(&known)));
        Ok(known)
    }
}

/// The batch's handlers that no executor has registered (as of a second ago at most).
async fn unknown_handlers(
    state: &ApiState,
    writes: &[TaskWrite],
) -> Result<Vec<UnknownHandler>, ApiError> {
    let known = state.known_handlers.get(state).await?;
    let mut unknown: Vec<UnknownHandler> = Vec::new();
    for w in writes {
        let pair = (w.app_name.clone(), w.handler_name.clone());
        // An XXL-JOB executor registers `*`: it may have any handler of its app.
        let any = (w.app_name.clone(), crate::store::ANY_HANDLER.to_owned());
        if !known.contains(&pair)
            && !known.contains(&any)
            && !unknown
                .iter()
                .any(|u| u.app == w.app_name && u.handler == w.handler_name)
        {
            unknown.push(UnknownHandler {
                app: pair.0,
                handler: pair.1,
            });
        }
    }
    Ok(unknown)
}

/// The query of a task listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct TasksQuery {
    /// The namespace (default `default`).
    #[allow(
        dead_code,
        reason = "the permission check reads it and admits the call in it (`Admitted`)"
    )]
    #[param(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    namespace: Option<String>,
    /// The task holding this key (a list of at most one).
    key: Option<String>,
    app: Option<String>,
    handler: Option<String>,
    /// `pending` or `fired`.
    state: Option<String>,
    /// Only tasks due at or after this instant (RFC 3339).
    due_from: Option<String>,
    /// Only tasks due before this instant (RFC 3339).
    due_to: Option<String>,
    limit: Option<i64>,
    cursor: Option<String>,
}

/// A page of tasks, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TaskPage {
    items: Vec<TaskView>,
    /// Pass back as `cursor` for the next page; absent on the last.
    next_cursor: Option<String>,
}

/// `text`, an RFC 3339 instant, in epoch milliseconds; a bad one names `field`.
pub(super) fn instant(field: &'static str, text: Option<&str>) -> Result<Option<i64>, ApiError> {
    text.map(|t| {
        parse_instant(t, chrono_tz::UTC, field)
            .map(|at| at.timestamp_millis())
            .map_err(|err| ApiError::invalid(field, err.message))
    })
    .transpose()
}

/// Lists tasks newest first, by key, app, handler, state and due range.
#[utoipa::path(get, operation_id = "listTasks", path = "/tasks", tag = "tasks", params(TasksQuery),
    responses((status = 200, description = "A page of tasks", body = TaskPage)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(q): QueryParams<TasksQuery>,
) -> Result<Json<TaskPage>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let view = |t| TaskView::of(t, namespace.name.clone());
    if let Some(key) = &q.key {
        let found = state.store.task_by_key(namespace.id, key).await?;
        return Ok(Json(TaskPage {
            items: found.into_iter().map(view).collect::<Result<_, _>>()?,
            next_cursor: None,
        }));
    }
    if let Some(s) = q.state.as_deref()
        && ![TaskState::Pending, TaskState::Fired]
            .iter()
            .any(|t| t.as_str() == s)
    {
        return Err(ApiError::invalid(
            "state",
            format!("{s:?} is not a task state; use pending or fired (a cancelled task is gone)"),
        ));
    }
    let limit = paging::limit(q.limit)?;
    let before_id = q
        .cursor
        .as_deref()
        .map(|c| paging::position_id(c, "tasks", "-id"))
        .transpose()?;
    let filter = TaskFilter {
        namespace: Some(namespace.id),
        app: q.app,
        handler: q.handler,
        state: q.state,
        due_from_ms: instant("due_from", q.due_from.as_deref())?,
        due_to_ms: instant("due_to", q.due_to.as_deref())?,
        before_id,
        limit,
    };
    let tasks = state.store.tasks_list(&filter).await?;
    let next_cursor = paging::next_cursor(&tasks, limit, "tasks", "-id", |t| t.task_id.to_string());
    Ok(Json(TaskPage {
        items: tasks.into_iter().map(view).collect::<Result<_, _>>()?,
        next_cursor,
    }))
}

/// One task, with its run once fired.
#[utoipa::path(get, operation_id = "getTask", path = "/tasks/{id}", tag = "tasks", params(("id" = i64, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn get(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
) -> Result<Json<TaskView>, ApiError> {
    let task = state
        .store
        .task_get(id)
        .await?
        .ok_or_else(|| ApiError::missing(format!("task {id}")))?;
    let namespace = super::namespaces::name_of(&state, task.namespace_id).await?;
    Ok(Json(TaskView::of(task, namespace)?))
}

/// Deletes (cancels) a task: before it fires, nothing runs; once fired, its run is cancelled
/// while it is unfinished, and stays in the run log.
#[utoipa::path(delete, operation_id = "cancelTask", path = "/tasks/{id}", tag = "tasks", params(("id" = i64, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The task as it was, cancelled; it is gone", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The task fired and its run has ended", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn cancel(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<Json<TaskView>, ApiError> {
    cancel_task(&state, id, &audit).await.map(Json)
}

/// The query of a cancel by key.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct KeyQuery {
    /// The key of the task to cancel.
    key: String,
    /// The namespace it is held in (default `default`).
    #[allow(
        dead_code,
        reason = "the permission check reads it and admits the call in it (`Admitted`)"
    )]
    #[param(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    namespace: Option<String>,
}

/// Deletes (cancels) the task holding a key, as `DELETE /tasks/{id}` does.
#[utoipa::path(delete, operation_id = "cancelTaskByKey", path = "/tasks", tag = "tasks", params(KeyQuery),
    responses(
        (status = 200, description = "The task as it was, cancelled; it is gone", body = TaskView),
        (status = 404, description = "No task holds the key", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The task fired and its run has ended", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn cancel_by_key(
    State(state): State<ApiState>,
    audit: Audit,
    admitted: Admitted,
    QueryParams(q): QueryParams<KeyQuery>,
) -> Result<Json<TaskView>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let task = state
        .store
        .task_by_key(namespace.id, &q.key)
        .await?
        .ok_or_else(|| ApiError::missing(format!("task with key {:?}", q.key)))?;
    cancel_task(&state, task.task_id, &audit).await.map(Json)
}

/// Deletes a task: before it fires, nothing runs; once fired (tasks fire up to
/// `tasks.fire_ahead_ms` before they are due), its run is cancelled while it is unfinished and
/// stays in the run log. The answer is the task as it was, `cancelled`. The call's event goes
/// with the change that cancels: the task's deletion, or its run's cancel (the task's
/// deletion after it is bookkeeping).
async fn cancel_task(state: &ApiState, id: i64, audit: &Audit) -> Result<TaskView, ApiError> {
    let missing = || ApiError::missing(format!("task {id}"));
    let task = state.store.task_get(id).await?.ok_or_else(missing)?;
    let namespace = super::namespaces::name_of(state, task.namespace_id).await?;
    let cancelled = |mut task: TaskRecord| {
        task.state = TaskState::Cancelled.to_owned();
        task.run_state = None;
        task.ended_at_ms = Some(state.clock.now_ms());
        task.message = Some("cancelled through the API".to_owned());
        TaskView::of(task, namespace.clone())
    };
    // A guarded delete: a task that fired meanwhile stays, and its run is cancelled instead.
    let event = audit.event(StatusCode::OK, None);
    if state.store.task_remove(id, true, event.as_ref()).await? {
        audit.written();
        return cancelled(task);
    }
    let task = state.store.task_get(id).await?.ok_or_else(missing)?;
    let run = match task.run_id {
        Some(run_id) => state.store.run_get(run_id).await?,
        None => None,
    };
    match run {
        Some(run) if super::runs::cancel_run(state, &run, audit).await? => {
            state.store.task_remove(id, false, None).await?;
            cancelled(task)
        }
        Some(run) => Err(ApiError::Conflict(format!(
            "task {id} fired as run {} and has ended ({})",
            run.run_id, run.state
        ))),
        None if task.state == TaskState::Pending => Err(ApiError::Conflict(format!(
            "task {id} is being fired; try again"
        ))),
        None => {
            if state.store.task_remove(id, false, event.as_ref()).await? {
                audit.written();
            }
            cancelled(task)
        }
    }
}
