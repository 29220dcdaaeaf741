//! The JSON body extractor: a bad body is a `400` naming the field at fault (by its path, e.g.
//! `retry.max_attempts`), and an oversized one a `413`, both as problem+json.

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
        let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(&mut deserializer)
            .map(JsonBody)
            .map_err(|err| {
                let path = err.path().to_string();
                let message = err.inner().to_string();
                ApiError::invalid(&field_of(&path, &message), message)
            })
    }
}

/// The field a serde error is about: its path, or for a missing field the field itself.
fn field_of(path: &str, message: &str) -> String {
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    // serde_path_to_error writes "." for the root and "?" where the input was not JSON.
    let prefix = if path == "." || path == "?" { "" } else { path };
    match missing {
        Some(name) if prefix.is_empty() => name.to_owned(),
        Some(name) => format!("{prefix}.{name}"),
        None if prefix.is_empty() => "body".to_owned(),
        None => prefix.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::field_of;

    #[test]
    fn fields_are_named_by_path() {
        assert_eq!(field_of(".", "missing field `app` at line 1"), "app");
        assert_eq!(field_of("retry", "missing field `x`"), "retry.x");
        assert_eq!(
            field_of("retry.max_attempts", "invalid type"),
            "retry.max_attempts"
        );
        assert_eq!(field_of(".", "EOF while parsing"), "body");
        assert_eq!(field_of("?", "key must be a string"), "body");
    }
}
