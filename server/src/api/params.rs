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
                let (field, message) = query_error(&e.body_text());
                ApiError::invalid(&field, message)
            })
    }
}

/// The parameter a query string's error is about and what is wrong with it, in the API's
/// words. axum says `Failed to deserialize query string: <name>: <serde's message>`, or
/// without the name when the error is about the whole query (an unknown parameter).
fn query_error(text: &str) -> (String, String) {
    let said = text
        .strip_prefix("Failed to deserialize query string: ")
        .unwrap_or(text);
    let (field, message) = match said.split_once(": ") {
        Some((name, message))
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            (name.to_owned(), message)
        }
        _ => ("query".to_owned(), said),
    };
    let message = match message {
        "invalid digit found in string" | "cannot parse integer from empty string" => {
            "must be a whole number".to_owned()
        }
        "number too large to fit in target type" | "number too small to fit in target type" => {
            "is out of range".to_owned()
        }
        other => crate::input_text::plain(other),
    };
    (field, message)
}

#[cfg(test)]
mod tests {
    use super::query_error;

    #[test]
    fn a_bad_query_parameter_is_named_in_plain_words() {
        assert_eq!(
            query_error("Failed to deserialize query string: limit: invalid digit found in string"),
            ("limit".to_owned(), "must be a whole number".to_owned())
        );
        assert_eq!(
            query_error(
                "Failed to deserialize query string: unknown field `colour`, expected `app` or `state`"
            ),
            (
                "query".to_owned(),
                r#"unknown field "colour" (known: app, state)"#.to_owned()
            )
        );
    }
}
