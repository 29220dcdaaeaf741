//! Path and query extractors whose rejections are problem+json naming the parameter.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::ApiError;

/// A numeric id from the path (`/jobs/{id}`).
#[derive(Debug, Clone, Copy)]
pub(super) struct IdParam(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for IdParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(raw) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid("id", e.body_text()))?;
        raw.parse::<i64>()
            .map(IdParam)
            .map_err(|_| ApiError::invalid("id", format!("{raw:?} is not a numeric id")))
    }
}

/// A name from the path (`/executors/{id}`).
#[derive(Debug, Clone)]
pub(super) struct NameParam(pub String);

impl<S: Send + Sync> FromRequestParts<S> for NameParam {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(name)| NameParam(name))
            .map_err(|e| ApiError::invalid("id", e.body_text()))
    }
}

/// Query parameters; an unknown or malformed one is named.
#[derive(Debug)]
pub(super) struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| QueryParams(q))
            .map_err(|e| {
                let text = e.body_text();
                let message = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .map_or_else(|| text.clone(), super::body::plain);
                ApiError::invalid("query", message)
            })
    }
}
