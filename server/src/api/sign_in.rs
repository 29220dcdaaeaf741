//! `GET /auth/oidc`: where people sign in, for `carillon login` (no token: it is how one is
//! got). Only what the provider publishes anyway: its issuer, the public client's id, this
//! API's audience and the scopes to ask for.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::Problem;
use super::{ApiError, ApiState};

/// How to sign in to this cluster.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SignIn {
    /// The OpenID provider's issuer; its discovery document is under
    /// `/.well-known/openid-configuration`.
    issuer: String,
    /// The provider's public client to sign in with (authorization code with PKCE, or the
    /// device flow).
    client_id: String,
    /// This API's audience: the `resource` (RFC 8707) to ask a token for.
    audience: String,
    /// The scopes to ask for, space-separated.
    scopes: String,
}

#[utoipa::path(get, operation_id = "getSignIn", path = "/auth/oidc", tag = "health", security(()),
    responses(
        (status = 200, description = "Where and how people sign in", body = SignIn),
        (status = 404, description = "People do not sign in here (no `[auth.oidc]` with a `client_id`)", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn show(State(state): State<ApiState>) -> Result<Json<SignIn>, ApiError> {
    let settings = state.oidc.as_ref().map(|oidc| oidc.settings());
    let Some((settings, client_id)) =
        settings.and_then(|s| s.client_id.as_ref().map(|client| (s, client)))
    else {
        return Err(ApiError::missing(
            "sign-in through an identity provider ([auth.oidc] with a client_id)",
        ));
    };
    Ok(Json(SignIn {
        issuer: settings.issuer.clone(),
        client_id: client_id.clone(),
        audience: settings.audience.clone(),
        scopes: settings.scopes.clone(),
    }))
}
