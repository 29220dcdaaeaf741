//! The JSON body extractor: a bad body is a `400` naming the field at fault (by its path, e.g.
//! `retry.max_attempts`) and saying what it must be in the API's words (never serde's, which
//! name Rust types), and an oversized one a `413`, both as problem+json.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;

use super::ApiError;

/// A JSON request body parsed into `T`.
#[derive(Debug)]
pub(super) struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::TooLarge
                } else {
                    ApiError::invalid("body", rejection.body_text())
                }
            })?;
        // Every body is an object; serde would also take a list of a struct's field values.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
            return Err(ApiError::invalid(
                "body",
                "must be a JSON object, not a list",
            ));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(&mut deserializer)
            .map(JsonBody)
            .map_err(|err| {
                let (field, message) = described(&err, "body");
                ApiError::invalid(&field, message)
            })
    }
}

/// The field a deserialization error is about (`root` for the document itself) and what is
/// wrong with it, in the API's words.
pub(super) fn described(
    err: &serde_path_to_error::Error<serde_json::Error>,
    root: &str,
) -> (String, String) {
    let (field, message) = crate::input_text::described(err);
    (field.unwrap_or_else(|| root.to_owned()), message)
}
