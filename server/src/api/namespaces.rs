//! `/namespaces`: the teams' spaces, and the `namespace` query parameter every collection and
//! create takes (`default` when it is left out). Ids stay global, so a resource's own path
//! (`/jobs/{id}`) names no namespace.

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::admitted::Namespace;
use super::audit::Audit;
use super::body::JsonBody;
use super::changes::Changes;
use super::error::Problem;
use super::params::NameParam;
use super::quotas::QuotasView;
use super::{ApiError, ApiState, Principal, rfc3339};
use crate::access::{Decision, Need};
use crate::jobs::check_webhook;
use crate::namespaces::{DEFAULT_NAME, check_name};
use crate::store::{
    NamespaceDeletion, NamespaceId, NamespaceQuotas, NamespaceRecord, NamespaceWrite,
};

/// The namespace a request works in.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceQuery {
    /// The namespace (default `default`).
    #[allow(
        dead_code,
        reason = "the permission check reads it and admits the call in it (`Admitted`)"
    )]
    #[param(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    pub(super) namespace: Option<String>,
}

/// The namespace `name` names (`default` when `None`); 404 when there is none.
pub(super) async fn resolve(state: &ApiState, name: Option<&str>) -> Result<Namespace, ApiError> {
    let name = name.unwrap_or(DEFAULT_NAME);
    check_name(name).map_err(|why| ApiError::invalid("namespace", why))?;
    let record = state
        .namespaces
        .find(name)
        .await?
        .ok_or_else(|| ApiError::missing(format!("namespace {name:?}")))?;
    Ok(Namespace {
        id: record.namespace_id,
        name: record.name,
    })
}

/// The name of namespace `id` for a view: `#<id>` once the namespace is deleted (its history
/// stays until retention removes it).
pub(super) async fn name_of(state: &ApiState, id: NamespaceId) -> Result<String, ApiError> {
    Ok(state
        .namespaces
        .name_of(id)
        .await?
        .unwrap_or_else(|| format!("#{id}")))
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct NamespaceView {
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    description: String,
    /// Where its jobs' alerts go when a job names no webhook of its own (beside the node's).
    #[serde(skip_serializing_if = "Option::is_none")]
    alert_webhook: Option<String>,
    /// Its quotas, when it has any.
    #[serde(skip_serializing_if = "QuotasView::is_none")]
    quotas: QuotasView,
    created_at: Option<String>,
}

impl From<NamespaceRecord> for NamespaceView {
    fn from(record: NamespaceRecord) -> Self {
        Self {
            name: record.name,
            description: record.description,
            alert_webhook: record.alert_webhook,
            quotas: record.quotas.into(),
            created_at: rfc3339(record.created_at_ms),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct NamespaceList {
    namespaces: Vec<NamespaceView>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceInput {
    /// 1 to 63 lowercase letters, digits and `-`, starting and ending with a letter or digit.
    #[schema(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    name: String,
    #[serde(default)]
    #[schema(max_length = 1024)]
    description: String,
    /// Where its jobs' alerts go when a job names no webhook of its own (an http:// or
    /// https:// URL), beside the node's `alerts.webhook`.
    #[serde(default)]
    alert_webhook: Option<String>,
    /// Its quotas (none when left out).
    #[serde(default)]
    quotas: QuotasView,
}

/// A change to a namespace: the fields given are set (`null` removes the webhook).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespacePatch {
    /// Left out: kept (it cannot be `null`).
    #[schema(max_length = 1024)]
    description: Option<String>,
    #[serde(default, deserialize_with = "crate::jobs::present")]
    #[schema(value_type = Option<String>)]
    alert_webhook: Option<Option<String>>,
    /// All of its quotas, replaced (a quota left out is none); only the cluster's admins set
    /// them.
    quotas: Option<QuotasView>,
}

const MAX_DESCRIPTION: usize = 1_024;

/// Refuses a description or webhook that cannot be kept.
fn checked(
    state: &ApiState,
    description: &str,
    alert_webhook: Option<&str>,
) -> Result<(), ApiError> {
    if description.chars().count() > MAX_DESCRIPTION {
        return Err(ApiError::invalid(
            "description",
            format!("must be at most {MAX_DESCRIPTION} characters"),
        ));
    }
    if let Some(url) = alert_webhook {
        check_webhook(url).map_err(|why| ApiError::invalid("alert_webhook", why))?;
        check_egress(state, "alert_webhook", url)?;
    }
    Ok(())
}

/// Refuses, at `field`, a URL whose host is an address the egress policy refuses (a name is
/// judged each time it is called).
pub(super) fn check_egress(state: &ApiState, field: &str, url: &str) -> Result<(), ApiError> {
    state
        .dispatch
        .egress()
        .check_literal(url)
        .map_err(|why| ApiError::invalid(field, why))
}

/// The namespaces the caller has a role in (every one, for the cluster's tokens), by name.
#[utoipa::path(get, operation_id = "listNamespaces", path = "/namespaces", tag = "namespaces",
    responses((status = 200, description = "The namespaces", body = NamespaceList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
) -> Result<Json<NamespaceList>, ApiError> {
    let namespaces = state
        .namespaces
        .list()
        .await?
        .into_iter()
        .filter(|namespace| principal.role_in(namespace.namespace_id).is_some())
        .map(NamespaceView::from)
        .collect();
    Ok(Json(NamespaceList { namespaces }))
}

#[utoipa::path(get, operation_id = "getNamespace", path = "/namespaces/{name}", tag = "namespaces",
    params(("name" = String, Path, description = "The namespace's name")),
    responses((status = 200, description = "The namespace", body = NamespaceView)))]
pub(super) async fn get(
    State(state): State<ApiState>,
    NameParam(name): NameParam,
) -> Result<Json<NamespaceView>, ApiError> {
    let record = state
        .namespaces
        .find(&name)
        .await?
        .ok_or_else(|| ApiError::missing(format!("namespace {name:?}")))?;
    Ok(Json(record.into()))
}

/// Creates a namespace. Jobs, workflows, tasks and calendars are created in it with
/// `?namespace=` (the name is unique in it); `default` holds what names none.
#[utoipa::path(post, operation_id = "createNamespace", path = "/namespaces", tag = "namespaces",
    request_body = NamespaceInput,
    responses(
        (status = 201, description = "Created", body = NamespaceView),
        (status = 409, description = "The name is taken", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    JsonBody(input): JsonBody<NamespaceInput>,
) -> Result<(StatusCode, Json<NamespaceView>), ApiError> {
    check_name(&input.name).map_err(|why| ApiError::invalid("name", why))?;
    checked(&state, &input.description, input.alert_webhook.as_deref())?;
    let event = audit.event(StatusCode::CREATED, None);
    let record = state
        .store
        .namespace_insert(
            &NamespaceWrite {
                name: input.name,
                description: input.description,
                alert_webhook: input.alert_webhook,
                quotas: input.quotas.checked()?,
            },
            event.as_ref(),
        )
        .await?;
    audit.written();
    state.namespaces.list().await?;
    Ok((StatusCode::CREATED, Json(record.into())))
}

/// Changes a namespace's description, alert webhook or quotas (the quotas: cluster admins
/// only).
#[utoipa::path(patch, operation_id = "updateNamespace", path = "/namespaces/{name}", tag = "namespaces",
    request_body = NamespacePatch,
    params(("name" = String, Path, description = "The namespace's name")),
    responses((status = 200, description = "The namespace as it is now", body = NamespaceView)))]
pub(super) async fn update(
    State(state): State<ApiState>,
    Extension(principal): Extension<Principal>,
    audit: Audit,
    NameParam(name): NameParam,
    JsonBody(patch): JsonBody<NamespacePatch>,
) -> Result<Json<NamespaceView>, ApiError> {
    // A namespace's admin may not lift the quotas that bound it.
    if patch.quotas.is_some() && principal.decide(Need::ClusterAdmin, None) != Decision::Allow {
        return Err(ApiError::Forbidden(
            "a namespace's quotas are set by the cluster's admins".to_owned(),
        ));
    }
    // From the database, not the node's cache: a field left out keeps what another node set.
    let current = state
        .namespaces
        .list()
        .await?
        .into_iter()
        .find(|n| n.name == name)
        .ok_or_else(|| ApiError::missing(format!("namespace {name:?}")))?;
    let before = audited(
        &current.description,
        current.alert_webhook.as_deref(),
        current.quotas,
    );
    let quotas = match patch.quotas {
        Some(quotas) => quotas.checked()?,
        None => current.quotas,
    };
    let write = NamespaceWrite {
        name: current.name,
        description: patch.description.unwrap_or(current.description),
        alert_webhook: patch.alert_webhook.unwrap_or(current.alert_webhook),
        quotas,
    };
    checked(&state, &write.description, write.alert_webhook.as_deref())?;
    let after = audited(
        &write.description,
        write.alert_webhook.as_deref(),
        write.quotas,
    );
    let event = audit.event(StatusCode::OK, Some(&Changes::between(&before, &after)));
    let updated = state
        .store
        .namespace_update(current.namespace_id, &write, event.as_ref())
        .await?
        .ok_or_else(|| ApiError::missing(format!("namespace {name:?}")))?;
    audit.written();
    state.namespaces.list().await?;
    Ok(Json(updated.into()))
}

/// What the audit trail shows of a namespace's settings: a webhook only by a fingerprint (chat
/// webhooks carry their key in the URL, and the trail is kept long after one is replaced).
fn audited(
    description: &str,
    alert_webhook: Option<&str>,
    quotas: NamespaceQuotas,
) -> serde_json::Value {
    use sha2::Digest as _;
    let webhook = alert_webhook.map(|url| {
        let digest = sha2::Sha256::digest(url.as_bytes());
        let fingerprint: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
        format!("(hidden; fingerprint {fingerprint})")
    });
    serde_json::json!({"description": description, "alert_webhook": webhook,
        "quotas": QuotasView::from(quotas)})
}

/// Deletes a namespace that holds no job, workflow, pending task, calendar or app; never
/// `default`. Its service tokens go with it; its finished runs stay until retention removes
/// them.
#[utoipa::path(delete, operation_id = "deleteNamespace", path = "/namespaces/{name}", tag = "namespaces",
    params(("name" = String, Path, description = "The namespace's name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 409, description = "It is `default`, or it still holds work", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(name): NameParam,
) -> Result<StatusCode, ApiError> {
    let namespace = resolve(&state, Some(&name)).await?;
    let event = audit.event(StatusCode::NO_CONTENT, None);
    let deletion = state
        .store
        .namespace_delete(namespace.id, event.as_ref())
        .await?;
    if deletion == NamespaceDeletion::Deleted {
        audit.written();
    }
    state.namespaces.list().await?;
    // Its tokens and grants went with it.
    state.tokens.forget();
    state.grants.forget();
    match deletion {
        NamespaceDeletion::Deleted => Ok(StatusCode::NO_CONTENT),
        NamespaceDeletion::Missing => Err(ApiError::missing(format!("namespace {name:?}"))),
        NamespaceDeletion::Default => Err(ApiError::Conflict(format!(
            "namespace {DEFAULT_NAME:?} is never deleted: what names no namespace goes there"
        ))),
        NamespaceDeletion::InUse(usage) => Err(ApiError::Conflict(format!(
            "namespace {name:?} still holds {} job(s) and workflow step(s), {} pending \
             task(s), {} calendar(s) and {} app(s): delete them first",
            usage.jobs, usage.pending_tasks, usage.calendars, usage.apps
        ))),
    }
}
