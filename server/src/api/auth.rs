//! Bearer-token authentication of `/api/v1`.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;

use super::{ApiError, ApiState};

/// What the executor token opens (paths as seen inside `/api/v1`).
const EXECUTOR_ENDPOINTS: [&str; 4] = [
    "/executors/register",
    "/executors/heartbeat",
    "/executors/results",
    "/executors/deregister",
];

pub(super) async fn require_admin(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    let admin = presented.is_some_and(|t| constant_time_eq(t, state.admin_token.expose()));
    // Executors may call only their own endpoints.
    let executor = presented.is_some_and(|t| constant_time_eq(t, state.executor_token.expose()))
        && EXECUTOR_ENDPOINTS.contains(&request.uri().path());
    if admin || executor {
        Ok(next.run(request).await)
    } else {
        Err(ApiError::Unauthorized)
    }
}

/// Compares without stopping at the first difference, so response time does not reveal how
/// much of a guess was right. (The length is not secret: every token we issue has the same.)
fn constant_time_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn equal_only_when_every_byte_matches() {
        assert!(constant_time_eq("abcdef", "abcdef"));
        assert!(!constant_time_eq("abcdef", "abcdeg"));
        assert!(!constant_time_eq("abcdef", "abcde"));
        assert!(!constant_time_eq("", "a"));
    }
}
