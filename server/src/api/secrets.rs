//! `/secrets`: a namespace's named secrets, write-only. A value is sealed with the node's key
//! before it is stored (`crate::secrets`) and is never answered, logged or audited; a listing
//! shows names, when they changed and who changed them, and whether this node can open them.

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
use super::params::{NameParam, QueryParams};
use super::{ApiError, ApiState, Principal, rfc3339};
use crate::secrets::seal::Keyring;
use crate::store::{SecretRecord, SecretWrite};

/// The largest value stored: a certificate chain fits, a file does not; sealed, it still fits
/// a MySQL `TEXT` (64 KiB).
const MAX_VALUE_BYTES: usize = 32 * 1024;

/// A secret as listed: never its value.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SecretView {
    name: String,
    namespace: String,
    /// 1 when created; one more at each write.
    version: i64,
    created_at: Option<String>,
    updated_at: Option<String>,
    /// Who wrote it last: a token's name, a person, or `admin token`.
    updated_by: String,
    /// The id of the key it is sealed with (`GET /secrets` after a rotation shows none left
    /// under the old key's id).
    key_id: String,
    /// Whether this node's keys open it: false for a value sealed with a key the node was not
    /// given (a rotation half done, or nodes with different keys).
    readable: bool,
}

impl SecretView {
    fn of(record: SecretRecord, namespace: &str, keys: Option<&Keyring>) -> Self {
        let readable = keys.is_some_and(|keys| {
            keys.open(record.namespace_id.0, &record.name, &record.sealed)
                .is_ok()
        });
        Self {
            key_id: record.key_id,
            name: record.name,
            namespace: namespace.to_owned(),
            version: record.version,
            created_at: rfc3339(record.created_at_ms),
            updated_at: rfc3339(record.updated_at_ms),
            updated_by: record.updated_by,
            readable,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SecretList {
    secrets: Vec<SecretView>,
}

/// A value to keep under a name.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SecretInput {
    /// The value, up to 32 KiB of text. It is never shown again.
    value: String,
}

/// What `POST /secrets/rotate` did.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RotationView {
    /// The id of the key every secret is now sealed with.
    key_id: String,
    /// Secrets sealed again with it.
    resealed: u64,
    /// Secrets sealed with a key this node does not have, left as they are: give the node
    /// that key among `secrets.previous_keys` and rotate again.
    unopened: u64,
    /// Secrets written while the rotation ran, left as their writer sealed them: rotate again
    /// until this and `unopened` are 0.
    rewritten: u64,
}

/// The namespace's secrets by name: never their values.
#[utoipa::path(get, operation_id = "listSecrets", path = "/secrets", tag = "secrets",
    params(NamespaceQuery),
    responses((status = 200, description = "The secrets (names and dates, no values)", body = SecretList)))]
pub(super) async fn list(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<Json<SecretList>, ApiError> {
    let namespace = admitted.named(&state).await?;
    let keys = state.secret_keys.as_deref();
    let secrets = state
        .store
        .secrets_list(namespace.id)
        .await?
        .into_iter()
        .map(|record| SecretView::of(record, &namespace.name, keys))
        .collect();
    Ok(Json(SecretList { secrets }))
}

/// Keeps a value under a name, replacing the one there. The value is sealed with the node's
/// key before it is stored and is never answered again.
#[utoipa::path(put, operation_id = "putSecret", path = "/secrets/{name}", tag = "secrets",
    request_body = SecretInput,
    params(("name" = String, Path, description = "The secret's name: letters, digits, `_`, `-` and `.`"),
        NamespaceQuery),
    responses(
        (status = 200, description = "Replaced", body = SecretView),
        (status = 201, description = "Created", body = SecretView),
        (status = 409, description = "The node has no key to seal with", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn put(
    State(state): State<ApiState>,
    audit: Audit,
    Extension(principal): Extension<Principal>,
    NameParam(name): NameParam,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(input): JsonBody<SecretInput>,
) -> Result<(StatusCode, Json<SecretView>), ApiError> {
    check_secret_name(&name)?;
    if input.value.is_empty() {
        return Err(ApiError::invalid("value", "must not be empty"));
    }
    if input.value.len() > MAX_VALUE_BYTES {
        return Err(ApiError::invalid(
            "value",
            format!("is {} bytes: at most {MAX_VALUE_BYTES}", input.value.len()),
        ));
    }
    let keys = keys(&state)?;
    let namespace = admitted.named(&state).await?;
    let sealed = keys
        .current()
        .seal(namespace.id.0, &name, &input.value)
        .map_err(|err| {
            tracing::error!(error = %err, "a secret could not be sealed");
            ApiError::Internal("the node could not seal the value".to_owned())
        })?;
    let event = audit.event(StatusCode::OK, None);
    let (record, created) = state
        .store
        .secret_put(
            &SecretWrite {
                namespace_id: namespace.id,
                name,
                sealed,
                key_id: keys.current().id().to_owned(),
                updated_by: principal.describe(),
            },
            event.as_ref(),
        )
        .await?;
    audit.written();
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(SecretView::of(record, &namespace.name, Some(keys))),
    ))
}

/// Deletes a secret. Jobs naming it fail their attempts, saying so, until it is set again.
#[utoipa::path(delete, operation_id = "deleteSecret", path = "/secrets/{name}", tag = "secrets",
    params(("name" = String, Path, description = "The secret's name"), NamespaceQuery),
    responses((status = 204, description = "Deleted")))]
pub(super) async fn delete(
    State(state): State<ApiState>,
    audit: Audit,
    NameParam(name): NameParam,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
) -> Result<StatusCode, ApiError> {
    let namespace = admitted.named(&state).await?;
    let event = audit.event(StatusCode::NO_CONTENT, None);
    if state
        .store
        .secret_delete(namespace.id, &name, event.as_ref())
        .await?
    {
        audit.written();
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::missing(format!("secret {name:?}")))
    }
}

/// Seals every secret of every namespace with this node's current key. Run it once every
/// node has the new key as `secrets.key` and the old one among `secrets.previous_keys`; then
/// the old key can go.
#[utoipa::path(post, operation_id = "rotateSecrets", path = "/secrets/rotate", tag = "secrets",
    responses(
        (status = 200, description = "Rotated", body = RotationView),
        (status = 409, description = "The node has no key to seal with", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn rotate(State(state): State<ApiState>) -> Result<Json<RotationView>, ApiError> {
    let keys = keys(&state)?;
    // The audit trail records the call once it is answered (`permissions::authorize`).
    let done = crate::secrets::rotate(state.store.as_ref(), keys).await?;
    Ok(Json(RotationView {
        key_id: keys.current().id().to_owned(),
        resealed: done.resealed,
        unopened: done.unopened,
        rewritten: done.rewritten,
    }))
}

fn keys(state: &ApiState) -> Result<&Keyring, ApiError> {
    state.secret_keys.as_deref().ok_or_else(|| {
        ApiError::Conflict(
            "this node has no key to seal secrets with: give every node the same \
             secrets.key (or CARILLON_SECRETS_KEY; `carillon secrets key` makes one)"
                .to_owned(),
        )
    })
}

fn check_secret_name(name: &str) -> Result<(), ApiError> {
    crate::secrets::check_name(name).map_err(|why| ApiError::invalid("name", why))
}
