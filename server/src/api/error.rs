//! The API's one error type, rendered as `application/problem+json` (RFC 9457). Internal
//! details are logged, never sent.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tracing::error;

use crate::store;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// A person's token refused, saying why (never the token's text).
    #[error("{0}")]
    SignInRefused(String),
    /// The identity provider's keys cannot be read, so a person's token cannot be checked.
    #[error("the identity provider cannot be reached")]
    ProviderUnavailable,
    #[error("no such resource")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("{0}")]
    Forbidden(String),
    /// Refused (`403`) for something of `namespace`: the caller is told `answer`, and the
    /// audit trail records `why` in that namespace, where its admins see it.
    #[error("{answer}")]
    ForbiddenIn {
        namespace: crate::store::NamespaceId,
        answer: String,
        why: String,
    },
    #[error("{what} not found")]
    Missing { what: String },
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// Items of a batch refused, each by its index (`list` is `tasks` or `jobs`).
    #[error("{} bad item(s) of {list}", errors.len())]
    InvalidItems {
        list: &'static str,
        errors: Vec<crate::jobs::ItemError>,
    },
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PreconditionFailed(String),
    /// A namespace's quota would be passed: nothing was stored.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A namespace's rate on this node is spent for now: retry after this many seconds.
    #[error("{detail}")]
    RateLimited { detail: String, retry_after_s: u64 },
    #[error("request body too large")]
    TooLarge,
    #[error("storage failed: {0}")]
    Store(#[from] store::Error),
    /// The node itself failed (it logged why); nothing was stored.
    #[error("{0}")]
    Internal(String),
}

/// An error, as RFC 9457 `application/problem+json`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct Problem {
    /// Stable, e.g. `urn:carillon:problem:invalid-field`: match on this, not on `detail`.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    kind: &'static str,
    #[schema(value_type = String)]
    title: &'static str,
    status: u16,
    detail: String,
    /// The request field at fault, for validation errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    /// Every bad item of a refused batch (tasks, jobs), by index and field.
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<Vec<crate::jobs::ItemError>>,
}

/// The largest request body accepted.
pub(crate) const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

impl ApiError {
    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> Self {
        ApiError::Invalid {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    pub(crate) fn missing(what: impl Into<String>) -> Self {
        ApiError::Missing { what: what.into() }
    }

    /// A stored document (`what`, e.g. "the args of task 7") that no longer reads: one rule
    /// everywhere, an error naming it, never a default in its place.
    pub(crate) fn unreadable(what: impl Into<String>, err: &serde_json::Error) -> Self {
        ApiError::Store(crate::store::Error::Unreadable {
            what: what.into(),
            reason: err.to_string(),
        })
    }
}

impl ApiError {
    fn problem(&self) -> (StatusCode, &'static str, &'static str, String) {
        match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "urn:carillon:problem:unauthorized",
                "Unauthorized",
                "send Authorization: Bearer <token>: none was sent, or it is not one of this \
                 cluster's, or it was revoked or has expired"
                    .to_owned(),
            ),
            ApiError::SignInRefused(why) => (
                StatusCode::UNAUTHORIZED,
                "urn:carillon:problem:unauthorized",
                "Unauthorized",
                format!("{why}: sign in again"),
            ),
            ApiError::ProviderUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "urn:carillon:problem:identity-provider-unavailable",
                "Identity Provider Unavailable",
                "the identity provider's signing keys cannot be read now, so no person's token \
                 can be checked; service tokens and the admin token still work"
                    .to_owned(),
            ),
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                "urn:carillon:problem:not-found",
                "Not Found",
                "no resource at this path".to_owned(),
            ),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "urn:carillon:problem:method-not-allowed",
                "Method Not Allowed",
                "this path does not take this method; see the Allow header".to_owned(),
            ),
            ApiError::Forbidden(detail) | ApiError::ForbiddenIn { answer: detail, .. } => (
                StatusCode::FORBIDDEN,
                "urn:carillon:problem:forbidden",
                "Forbidden",
                detail.clone(),
            ),
            ApiError::Missing { what } => (
                StatusCode::NOT_FOUND,
                "urn:carillon:problem:not-found",
                "Not Found",
                format!("{what} not found"),
            ),
            ApiError::Invalid { field, message } => (
                StatusCode::BAD_REQUEST,
                "urn:carillon:problem:invalid-field",
                "Invalid Field",
                format!("{field}: {message}"),
            ),
            ApiError::InvalidItems { list, errors } => (
                StatusCode::BAD_REQUEST,
                if *list == "jobs" {
                    "urn:carillon:problem:invalid-jobs"
                } else {
                    "urn:carillon:problem:invalid-tasks"
                },
                if *list == "jobs" {
                    "Invalid Jobs"
                } else {
                    "Invalid Tasks"
                },
                format!(
                    "{} bad {}(s), nothing stored: {}",
                    errors.len(),
                    list.trim_end_matches('s'),
                    errors
                        .iter()
                        .take(10)
                        .map(|e| format!("{list}[{}].{}: {}", e.index, e.field, e.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            ),
            ApiError::Conflict(detail) => (
                StatusCode::CONFLICT,
                "urn:carillon:problem:conflict",
                "Conflict",
                detail.clone(),
            ),
            ApiError::PreconditionFailed(detail) => (
                StatusCode::PRECONDITION_FAILED,
                "urn:carillon:problem:precondition-failed",
                "Precondition Failed",
                detail.clone(),
            ),
            ApiError::QuotaExceeded(detail) => (
                StatusCode::CONFLICT,
                "urn:carillon:problem:quota-exceeded",
                "Quota Exceeded",
                detail.clone(),
            ),
            ApiError::RateLimited { detail, .. } => (
                StatusCode::TOO_MANY_REQUESTS,
                "urn:carillon:problem:rate-limited",
                "Too Many Requests",
                detail.clone(),
            ),
            ApiError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "urn:carillon:problem:too-large",
                "Payload Too Large",
                format!("the request body exceeds {MAX_BODY_BYTES} bytes"),
            ),
            ApiError::Store(store::Error::Conflict { what }) => (
                StatusCode::CONFLICT,
                "urn:carillon:problem:conflict",
                "Conflict",
                format!("{what} is already taken"),
            ),
            // Not the database's fault and not passing: a record this version cannot read,
            // named so that whoever owns it can mend it.
            ApiError::Store(err @ store::Error::Unreadable { .. }) => {
                error!(error = %err, "request failed on a stored record");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "urn:carillon:problem:unreadable-record",
                    "Stored Record Unreadable",
                    err.to_string(),
                )
            }
            ApiError::Internal(detail) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "urn:carillon:problem:internal",
                "Internal Server Error",
                detail.clone(),
            ),
            ApiError::Store(err) => {
                error!(error = %err, "request failed in storage");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "urn:carillon:problem:storage-unavailable",
                    "Storage Unavailable",
                    "the database could not serve this request; try again".to_owned(),
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, kind, title, detail) = self.problem();
        let field = match &self {
            ApiError::Invalid { field, .. } => Some(field.clone()),
            ApiError::InvalidItems { list, errors } => errors
                .first()
                .map(|e| format!("{list}[{}].{}", e.index, e.field)),
            _ => None,
        };
        let errors = match &self {
            ApiError::InvalidItems { errors, .. } => Some(errors.clone()),
            _ => None,
        };
        let note = AuditNote {
            refused: status == StatusCode::FORBIDDEN,
            namespace: match &self {
                ApiError::ForbiddenIn { namespace, .. } => Some(*namespace),
                _ => None,
            },
            detail: match &self {
                ApiError::ForbiddenIn { why, .. } => why.clone(),
                _ => detail.clone(),
            },
        };
        let body = Problem {
            kind,
            title,
            status: status.as_u16(),
            detail,
            field,
            errors,
        };
        let mut response = (status, Json(body)).into_response();
        response.extensions_mut().insert(note);
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let ApiError::RateLimited { retry_after_s, .. } = &self {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
        }
        response
    }
}

/// What the audit trail records of a call answered with an error: whether it was refused (not
/// permitted), why, and the namespace of what it aimed at when that is not the one it named.
#[derive(Debug, Clone)]
pub(super) struct AuditNote {
    pub(super) refused: bool,
    pub(super) namespace: Option<crate::store::NamespaceId>,
    pub(super) detail: String,
}

pub(super) async fn not_found() -> ApiError {
    ApiError::NotFound
}

pub(super) async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
