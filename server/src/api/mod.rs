//! The HTTP surface: health probes and the admin REST API under `/api/v1`.

mod auth;
mod cluster;
mod error;
mod health;

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::routing::get;

pub use error::ApiError;

use crate::cluster::{ClusterTimings, LocalView};
use crate::config::Secret;
use crate::store::Store;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    pub view: Arc<LocalView>,
    pub admin_token: Arc<Secret>,
    pub timings: ClusterTimings,
}

/// The node's whole HTTP application.
pub fn router(state: ApiState) -> Router {
    let api = Router::new()
        .route("/cluster", get(cluster::show))
        .fallback(error::not_found)
        // Every /api/v1 path, known or not, needs the token: unknown paths reveal nothing.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_admin,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .nest("/api/v1", api)
        .fallback(error::not_found)
        .with_state(state)
}
