//! Bearer-token authentication of `/api/v1`: which caller a token is.

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;

use super::audit::{Peer, record_refused_sign_in};
use super::{ApiError, ApiState};
use crate::access::ExecutorToken;
pub use crate::access::Principal;
use crate::access::oidc::{OidcVerifier, SignInError};
use crate::access::tokens::Lookup;

/// The caller of a token from the node's settings: admin, read-only, executor or app token.
fn configured_principal(state: &ApiState, token: &str) -> Option<Principal> {
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
        Some(Principal::Executor(ExecutorToken::Cluster))
    } else {
        app.map(|app| Principal::Executor(ExecutorToken::App(app)))
    }
}

/// Who presented the bearer token of `headers`: a token of the node's settings (checked
/// first, so the admin token works whatever the database holds), else a service token;
/// `401` for no token, an unknown one or an expired one.
pub(super) async fn caller(state: &ApiState, headers: &HeaderMap) -> Result<Principal, ApiError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(ApiError::Unauthorized)?;
    if let Some(principal) = configured_principal(state, token) {
        return Ok(principal);
    }
    if let Some(oidc) = &state.oidc
        && crate::access::jwt::looks_like_jwt(token)
    {
        return person(state, oidc, token).await;
    }
    match state.tokens.lookup(token, state.clock.now_ms()).await? {
        Lookup::Found(principal) => Ok(principal),
        Lookup::Expired | Lookup::Unknown => Err(ApiError::Unauthorized),
    }
}

/// The person a JWT of the identity provider names, with the roles of its groups. The token's
/// times are compared with this machine's clock, as the provider's are with its own.
async fn person(state: &ApiState, oidc: &OidcVerifier, token: &str) -> Result<Principal, ApiError> {
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        });
    let identity = oidc.verify(token, now_s).await.map_err(|err| match err {
        SignInError::Refused(why) => ApiError::SignInRefused(why.to_string()),
        SignInError::Provider(_) => ApiError::ProviderUnavailable,
    })?;
    let person = state.grants.person(identity, oidc.settings()).await?;
    Ok(Principal::Person(Box::new(person)))
}

/// Puts the caller into the request's extensions, where `permissions::authorize` and the
/// handlers read it; layered on every `/api/v1` path, known or not, so unknown paths reveal
/// nothing to a caller without a token.
pub(super) async fn authenticate(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let principal = match caller(&state, request.headers()).await {
        Ok(principal) => principal,
        Err(err @ (ApiError::Unauthorized | ApiError::SignInRefused(_)))
            if request.headers().contains_key(header::AUTHORIZATION) =>
        {
            let why = match &err {
                ApiError::SignInRefused(why) => why.clone(),
                _ => "a bearer token that is no caller's: unknown, revoked or expired".to_owned(),
            };
            let peer = request
                .extensions()
                .get::<ConnectInfo<Peer>>()
                .map(|info| info.0);
            let resource = format!("{}{}", super::API_PREFIX, request.uri().path());
            record_refused_sign_in(&state, peer, &resource, why).await;
            return Err(err);
        }
        Err(err) => return Err(err),
    };
    request.extensions_mut().insert(principal);
    Ok(next.run(request).await)
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
