//! Bearer-token authentication of `/api/v1`.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;

use super::{ApiError, ApiState};

/// What the executor tokens open (paths as seen inside `/api/v1`).
const EXECUTOR_ENDPOINTS: [&str; 5] = [
    "/executors/register",
    "/executors/heartbeat",
    "/executors/results",
    "/executors/deregister",
    "/executors/logs",
];

/// Who is calling, decided from the bearer token; handlers read it as an extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Admin,
    /// May read anything and change nothing.
    ReadOnly,
    /// An executor; `app` is `Some` when its token is limited to one app.
    Executor {
        app: Option<String>,
    },
}

fn principal_of(state: &ApiState, token: &str) -> Option<Principal> {
    // Every comparison runs, so timing does not tell which kind of token nearly matched.
    let admin = constant_time_eq(token, state.admin_token.expose());
    let read_only = state
        .read_only_token
        .as_ref()
        .is_some_and(|t| constant_time_eq(token, t.expose()));
    let executor = constant_time_eq(token, state.executor_token.expose());
    let app = state.app_tokens.iter().fold(None, |found, (app, t)| {
        if constant_time_eq(token, t.expose()) {
            Some(app.clone())
        } else {
            found
        }
    });
    if admin {
        Some(Principal::Admin)
    } else if read_only {
        Some(Principal::ReadOnly)
    } else if executor {
        Some(Principal::Executor { app: None })
    } else {
        app.map(|app| Principal::Executor { app: Some(app) })
    }
}

/// Who presented the bearer token of `headers`; `401` for no token or an unknown one.
fn caller(state: &ApiState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .and_then(|token| principal_of(state, token))
        .ok_or(ApiError::Unauthorized)
}

pub(super) async fn require_admin(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let principal = caller(&state, request.headers())?;
    let executor_endpoint = EXECUTOR_ENDPOINTS.contains(&request.uri().path());
    let reading = matches!(*request.method(), Method::GET | Method::HEAD);
    let allowed = match &principal {
        Principal::Admin => true,
        Principal::ReadOnly => reading && !executor_endpoint,
        Principal::Executor { .. } => executor_endpoint,
    };
    if !allowed {
        return Err(ApiError::Forbidden(match principal {
            Principal::ReadOnly => "the read-only token cannot change anything".to_owned(),
            _ => "this token does not open this endpoint".to_owned(),
        }));
    }
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
}

/// Refuses a caller of a read endpoint outside `/api/v1` (`/metrics`) unless it presents the
/// admin or the read-only token.
pub(super) fn require_reader(state: &ApiState, headers: &HeaderMap) -> Result<(), ApiError> {
    match caller(state, headers)? {
        Principal::Admin | Principal::ReadOnly => Ok(()),
        Principal::Executor { .. } => Err(ApiError::Forbidden(
            "this token does not open this endpoint".to_owned(),
        )),
    }
}

/// Compares without stopping at the first difference, so response time does not reveal how
/// much of a guess was right. (The length is not secret: every token we issue has the same.)
pub(super) fn constant_time_eq(a: &str, b: &str) -> bool {
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
