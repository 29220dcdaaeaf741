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
    #[error("no such resource")]
    NotFound,
    #[error("storage failed: {0}")]
    Store(#[from] store::Error),
}

#[derive(Debug, Serialize)]
struct Problem {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
    detail: String,
}

impl ApiError {
    fn problem(&self) -> (StatusCode, &'static str, &'static str, String) {
        match self {
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "urn:carillon:problem:unauthorized",
                "Unauthorized",
                "send Authorization: Bearer <admin token>".to_owned(),
            ),
            ApiError::NotFound => (
                StatusCode::NOT_FOUND,
                "urn:carillon:problem:not-found",
                "Not Found",
                "no resource at this path".to_owned(),
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
        let body = Problem {
            kind,
            title,
            status: status.as_u16(),
            detail,
        };
        let mut response = (status, Json(body)).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

pub(super) async fn not_found() -> ApiError {
    ApiError::NotFound
}
