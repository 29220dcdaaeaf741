//! `/tokens`: a namespace's service tokens, each with one role in it, created and revoked by
//! the namespace's admins. The token is answered once, when it is created; the database keeps
//! only its SHA-256.

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
use crate::access::tokens::mint;
use crate::access::{EXECUTOR_ROLE, Role};
use crate::namespaces::check_name;
use crate::store::{TokenRecord, TokenWrite};

/// How long a token lives when its creator says nothing.
const DEFAULT_DAYS: u32 = 90;
/// The longest a service token may live; the admin token of the node's settings is the one
/// that never expires.
const MAX_DAYS: u32 = 3_650;
const DAY_MS: i64 = 86_400_000;

/// A service token as listed: never the token itself.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TokenView {
    id: i64,
    name: String,
    namespace: String,
    /// `viewer`, `operator`, `editor`, `admin` or `executor`.
    role: String,
    /// Its first characters, to tell it apart.
    prefix: String,
    created_at: Option<String>,
    /// Who created it: a token's name, or `admin token`.
    created_by: String,
    expires_at: Option<String>,
    /// Updated at most once a minute.
    last_used_at: Option<String>,
}

impl TokenView {
    fn of(record: TokenRecord, namespace: String) -> Self {
        Self {
            id: record.token_id,
            name: record.name,
            namespace,
            role: record.role,
            prefix: record.display_prefix,
            created_at: rfc3339(record.created_at_ms),
            created_by: record.created_by,
            expires_at: record.expires_at_ms.and_then(rfc3339),
            last_used_at: record.last_used_at_ms.and_then(rfc3339),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TokenList {
    tokens: Vec<TokenView>,
}

/// A new token.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TokenInput {
    /// Unique in its namespace: 1 to 63 lowercase letters, digits and `-`.
    #[schema(max_length = 63, pattern = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    name: String,
    /// `viewer`, `operator`, `editor` or `admin`; or `executor`, for the executor protocol of
    /// the namespace's apps (an app it registers first becomes the namespace's).
    role: String,
    /// Days until it expires (default 90, at most 3650).
    #[schema(minimum = 1, maximum = 3650)]
    expires_in_days: Option<u32>,
}

/// A created token, with the token itself: it is never shown again.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CreatedToken {
    #[serde(flatten)]
    view: TokenView,
    /// Send it as `Authorization: Bearer <token>`.
    token: String,
}

/// The namespace's service tokens, by name.
#[utoipa::path(get, operation_id = "listTokens", path = "/tokens", tag = "namespaces",
    params(NamespaceQuery),
    responses((status = 200, description = "The tokens (never their secrets)", body = TokenList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<TokenList>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let tokens = state
        .store
        .tokens_all()
        .await?
        .into_iter()
        .filter(|token| token.namespace_id == namespace.id)
        .map(|token| TokenView::of(token, namespace.name.clone()))
        .collect();
    Ok(Json(TokenList { tokens }))
}

/// Creates a service token with one role in the namespace. Every node accepts it within 5
/// seconds (at once on the node that created it).
#[utoipa::path(post, operation_id = "createToken", path = "/tokens", tag = "namespaces",
    params(NamespaceQuery),
    request_body = TokenInput,
    responses(
        (status = 201, description = "Created; `token` is shown this once", body = CreatedToken),
        (status = 409, description = "The namespace has a token of this name", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn create(
    State(state): State<ApiState>,
    audit: Audit,
    Extension(principal): Extension<Principal>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(input): JsonBody<TokenInput>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let namespace = admitted.named(&state).await?;
    check_name(&input.name).map_err(|why| ApiError::invalid("name", why))?;
    let role = match Role::parse(&input.role) {
        Some(role) => role.name(),
        None if input.role == EXECUTOR_ROLE => EXECUTOR_ROLE,
        None => {
            return Err(ApiError::invalid(
                "role",
                "must be viewer, operator, editor, admin or executor",
            ));
        }
    };
    let days = input.expires_in_days.unwrap_or(DEFAULT_DAYS);
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(ApiError::invalid(
            "expires_in_days",
            format!("must be 1 to {MAX_DAYS}"),
        ));
    }
    let minted = mint().map_err(|err| {
        tracing::error!(error = %err, "no randomness for a token");
        ApiError::Internal("the node has no randomness to make a token with".to_owned())
    })?;
    let event = audit.event(StatusCode::CREATED, None);
    let record = state
        .store
        .token_insert(
            &TokenWrite {
                namespace_id: namespace.id,
                name: input.name,
                role: role.to_owned(),
                secret_sha256: minted.secret_sha256,
                display_prefix: minted.display_prefix,
                created_by: principal.describe(),
                expires_at_ms: Some(state.clock.now_ms() + i64::from(days) * DAY_MS),
            },
            event.as_ref(),
        )
        .await?;
    audit.written();
    state.tokens.forget();
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            view: TokenView::of(record, namespace.name),
            token: minted.token,
        }),
    ))
}

/// Revokes a token: every node refuses it within 5 seconds (at once on this one).
#[utoipa::path(delete, operation_id = "revokeToken", path = "/tokens/{id}", tag = "namespaces",
    params(("id" = i64, Path, description = "The token's id")),
    responses((status = 204, description = "Revoked")))]
pub(super) async fn revoke(
    State(state): State<ApiState>,
    audit: Audit,
    IdParam(id): IdParam,
) -> Result<StatusCode, ApiError> {
    let event = audit.event(StatusCode::NO_CONTENT, None);
    let deleted = state.store.token_delete(id, event.as_ref()).await?;
    state.tokens.forget();
    if deleted {
        audit.written();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("token {id}")))
    }
}
