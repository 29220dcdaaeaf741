//! What the API shows of executors and their apps (`GET /executors`, `/apps`), and the
//! check that a job names an app its namespace can reach.
//!
//! Apps are named cluster-wide and each belongs to one namespace: the executors of an app of
//! `default` serve every namespace's jobs, the others their own namespace's only. So a
//! namespace's people see its apps and `default`'s; a cluster viewer naming no namespace sees
//! every one.

use std::collections::HashMap;

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::admitted::Admitted;
use super::namespaces::NamespaceQuery;
use super::params::{NameParam, QueryParams};
use super::{ApiError, ApiState, Principal, rfc3339};
use crate::access::Need;
use crate::store::NamespaceId;

/// Every executor.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ExecutorList {
    executors: Vec<ExecutorView>,
}

/// Every app with an executor.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AppList {
    apps: Vec<AppView>,
}
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ExecutorView {
    id: String,
    app: String,
    /// Its app's namespace: the executors of an app of `default` serve every namespace's
    /// jobs, the others their own namespace's only.
    namespace: String,
    address: String,
    weight: i64,
    capacity: i64,
    in_flight: i64,
    state: String,
    healthy: bool,
    /// `carillon`, or `xxl` for an XXL-JOB executor (whose handlers are `*`: any).
    protocol: String,
    handlers: Vec<String>,
    registered_at: Option<String>,
    last_heartbeat_at: Option<String>,
    /// The token that registered it, the only one that acts for it (`service token #4`, `the
    /// cluster's executor token`); absent for one registered before owners were kept, until it
    /// registers again.
    #[serde(skip_serializing_if = "Option::is_none")]
    registered_by: Option<String>,
}

/// Whether an app of namespace `owner` serves the jobs of `namespace`.
fn serves(owner: NamespaceId, namespace: NamespaceId) -> bool {
    owner == namespace || owner == NamespaceId::DEFAULT
}

/// The executors serving `namespace` (every one for `None`) as the API shows them.
async fn views(
    state: &ApiState,
    namespace: Option<NamespaceId>,
) -> Result<Vec<ExecutorView>, ApiError> {
    let list = state.store.executors_list(None).await?;
    let lease = i64::try_from(state.executor_lease_ms).unwrap_or(i64::MAX);
    let mut views = Vec::with_capacity(list.executors.len());
    for e in &list.executors {
        if namespace.is_some_and(|namespace| !serves(e.namespace_id, namespace)) {
            continue;
        }
        views.push(ExecutorView {
            id: e.executor_id.clone(),
            app: e.app_name.clone(),
            namespace: super::namespaces::name_of(state, e.namespace_id).await?,
            address: e.address.clone(),
            weight: e.weight,
            capacity: e.capacity,
            in_flight: e.in_flight,
            state: e.state.clone(),
            healthy: e.is_healthy(list.now_ms, lease),
            protocol: e.protocol.clone(),
            handlers: list
                .handlers
                .iter()
                .filter(|(id, _)| *id == e.executor_id)
                .map(|(_, h)| h.clone())
                .collect(),
            registered_at: rfc3339(e.registered_at_ms),
            last_heartbeat_at: rfc3339(e.heartbeat_at_ms),
            registered_by: e
                .registered_by
                .as_deref()
                .filter(|key| !key.is_empty())
                .map(crate::access::describe_owner),
        });
    }
    Ok(views)
}

/// The executors serving a namespace's jobs (its apps' and `default`'s), with their health.
#[utoipa::path(get, operation_id = "listExecutors", path = "/executors", tag = "executors",
    params(NamespaceQuery),
    responses((status = 200, description = "The executors serving the namespace; every one for a cluster viewer naming none", body = ExecutorList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<ExecutorList>, ApiError> {
    let namespace = admitted.listing(&principal, Need::ClusterViewer)?;
    Ok(Json(ExecutorList {
        executors: views(&state, namespace).await?,
    }))
}

#[utoipa::path(get, operation_id = "getExecutor", path = "/executors/{id}", tag = "executors",
    params(("id" = String, Path, description = "The executor's id"), NamespaceQuery),
    responses((status = 200, description = "The executor", body = ExecutorView)))]
/// `GET /executors/{id}`: one serving the namespace (any, for a cluster viewer naming none).
pub(super) async fn get(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    NameParam(id): NameParam,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<ExecutorView>, ApiError> {
    let namespace = admitted.listing(&principal, Need::ClusterViewer)?;
    views(&state, namespace)
        .await?
        .into_iter()
        .find(|e| e.id == id)
        .map(Json)
        .ok_or_else(|| ApiError::missing(format!("executor {id}")))
}

/// An app: the executors registered under its name, and the handlers they offer.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AppView {
    name: String,
    namespace: String,
    executors: usize,
    healthy_executors: usize,
    capacity: i64,
    handlers: Vec<String>,
}

#[utoipa::path(get, operation_id = "listApps", path = "/apps", tag = "executors",
    params(NamespaceQuery),
    responses((status = 200, description = "The apps serving the namespace; every one for a cluster viewer naming none", body = AppList)))]
/// `GET /apps`: the apps with an executor serving the namespace's jobs, with their health at
/// a glance.
pub(super) async fn apps(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<AppList>, ApiError> {
    let namespace = admitted.listing(&principal, Need::ClusterViewer)?;
    let mut apps: std::collections::BTreeMap<String, AppView> = std::collections::BTreeMap::new();
    for e in views(&state, namespace)
        .await?
        .into_iter()
        .filter(|e| e.state != "left")
    {
        let app = apps.entry(e.app.clone()).or_insert_with(|| AppView {
            name: e.app.clone(),
            namespace: e.namespace.clone(),
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
    Ok(Json(AppList { apps }))
}

/// Refuses a job of `namespace` naming, at `field`, an app of another namespace (whose
/// executors would never take its runs). An app no executor has registered yet is let be:
/// it may come.
pub(super) async fn check_reachable(
    state: &ApiState,
    namespace: NamespaceId,
    field: &str,
    app: &str,
) -> Result<(), ApiError> {
    check_reachable_known(state, namespace, field, app, &mut HashMap::new()).await
}

/// [`check_reachable`], remembering in `owners` each app's namespace, so that many jobs of
/// the same apps (a bulk create) look each up once.
pub(super) async fn check_reachable_known(
    state: &ApiState,
    namespace: NamespaceId,
    field: &str,
    app: &str,
    owners: &mut HashMap<String, Option<NamespaceId>>,
) -> Result<(), ApiError> {
    let owner = match owners.get(app) {
        Some(owner) => *owner,
        None => {
            let owner = state.store.app_namespace(app).await?;
            owners.insert(app.to_owned(), owner);
            owner
        }
    };
    match owner {
        Some(owner) if !serves(owner, namespace) => Err(ApiError::invalid(
            field,
            format!(
                "app {app:?} is another namespace's: its executors take that namespace's jobs \
                 only (use one of this namespace's apps or default's)"
            ),
        )),
        _ => Ok(()),
    }
}
