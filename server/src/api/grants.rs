//! `/grants`: a namespace's roles given to groups of the identity provider's people
//! (`[auth.oidc]`), granted and taken back by the namespace's admins. A person's role in a
//! namespace is the highest its groups have there.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::admitted::Admitted;
use super::audit::Audit;
use super::body::JsonBody;
use super::error::Problem;
use super::namespaces::NamespaceQuery;
use super::params::{IdParam, QueryParams};
use super::{ApiError, ApiState, Principal, rfc3339};
use crate::access::Role;
use crate::store::{GrantRecord, GrantWrite};

/// The longest group name taken (as the table holds it).
const GROUP_MAX: usize = 255;

/// A role granted to a group.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct GrantView {
    id: i64,
    namespace: String,
    /// The group, as the provider's tokens name it in their groups claim.
    group: String,
    /// `viewer`, `operator`, `editor` or `admin`.
    role: String,
    created_at: Option<String>,
    /// Who granted it, as the audit trail names callers.
    created_by: String,
}

impl GrantView {
    fn of(record: GrantRecord, namespace: String) -> Self {
        Self {
            id: record.grant_id,
            namespace,
            group: record.group_name,
            role: record.role,
            created_at: rfc3339(record.created_at_ms),
            created_by: record.created_by,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct GrantList {
    grants: Vec<GrantView>,
}

/// A role for a group.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantInput {
    /// The group as the provider's tokens name it (1 to 255 characters).
    #[schema(min_length = 1, max_length = 255)]
    group: String,
    /// `viewer`, `operator`, `editor` or `admin`.
    role: String,
}

/// The roles the namespace gives to groups, by group.
#[utoipa::path(get, operation_id = "listGrants", path = "/grants", tag = "namespaces",
    params(NamespaceQuery),
    responses((status = 200, description = "The grants", body = GrantList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<GrantList>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let grants = state
        .store
        .grants_all()
        .await?
        .into_iter()
        .filter(|grant| grant.namespace_id == namespace.id)
        .map(|grant| GrantView::of(grant, namespace.name.clone()))
        .collect();
    Ok(Json(GrantList { grants }))
}

/// Gives a group a role in the namespace. Every node applies it within 5 seconds (at once on
/// the node that granted it) to the group's members' next calls.
#[utoipa::path(post, operation_id = "createGrant", path = "/grants", tag = "namespaces",
    params(NamespaceQuery),
    request_body = GrantInput,
    responses(
        (status = 201, description = "Granted", body = GrantView),
        (status = 409, description = "The group already has a role in the namespace", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    Extension(principal): Extension<Principal>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(input): JsonBody<GrantInput>,
) -> Result<(StatusCode, Json<GrantView>), ApiError> {
    let namespace = admitted.named(&state).await?;
    let group = input.group.trim();
    if group.is_empty() || group.len() > GROUP_MAX || group.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "group",
            format!("must be 1 to {GROUP_MAX} bytes without control characters"),
        ));
    }
    let Some(role) = Role::parse(&input.role) else {
        return Err(ApiError::invalid(
            "role",
            "must be viewer, operator, editor or admin",
        ));
    };
    let event = audit.event(StatusCode::CREATED, None);
    let record = state
        .store
        .grant_insert(
            &GrantWrite {
                namespace_id: namespace.id,
                group_name: group.to_owned(),
                role: role.name().to_owned(),
                created_by: principal.describe(),
            },
            event.as_ref(),
        )
        .await
        .map_err(|err| match err {
            crate::store::Error::Conflict { .. } => ApiError::Conflict(format!(
                "group {group:?} already has a role in namespace {:?}: revoke that grant first",
                namespace.name
            )),
            other => other.into(),
        })?;
    audit.written();
    state.grants.forget();
    Ok((
        StatusCode::CREATED,
        Json(GrantView::of(record, namespace.name)),
    ))
}

/// Takes a grant back: every node applies it within 5 seconds (at once on this one).
#[utoipa::path(delete, operation_id = "revokeGrant", path = "/grants/{id}", tag = "namespaces",
    params(("id" = i64, Path, description = "The grant's id")),
    responses((status = 204, description = "Revoked")))]
pub(super) async fn revoke(
    State(state): State<ApiState>,
    IdParam(id): IdParam,
    audit: Audit,
) -> Result<StatusCode, ApiError> {
    let event = audit.event(StatusCode::NO_CONTENT, None);
    let deleted = state.store.grant_delete(id, event.as_ref()).await?;
    state.grants.forget();
    if deleted {
        audit.written();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("grant {id}")))
    }
}
