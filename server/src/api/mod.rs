//! The HTTP surface: health probes and the admin REST API under `/api/v1`.

mod auth;
mod body;
mod cluster;
mod error;
mod executors;
mod health;
mod jobs;
mod paging;
mod params;
mod runs;
mod schedules;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};

pub use auth::Principal;
pub use cluster::rfc3339;
pub use error::ApiError;

use crate::clock::ClusterClock;
use crate::cluster::{ClusterTimings, LocalView};
use crate::config::Secret;
use crate::dispatch::client::DispatchClient;
use crate::store::Store;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    pub view: Arc<LocalView>,
    pub clock: Arc<ClusterClock>,
    pub admin_token: Arc<Secret>,
    pub executor_token: Arc<Secret>,
    pub read_only_token: Option<Arc<Secret>>,
    /// Executor tokens limited to one app.
    pub app_tokens: Arc<Vec<(String, Secret)>>,
    pub timings: ClusterTimings,
    pub partition_count: i64,
    pub dispatch: DispatchClient,
    pub executor_heartbeat_ms: u64,
    pub executor_lease_ms: u64,
}

/// The node's whole HTTP application.
pub fn router(state: ApiState) -> Router {
    let api = Router::new()
        .route("/cluster", get(cluster::show))
        .route("/jobs", get(jobs::list).post(jobs::create))
        .route(
            "/jobs/{id}",
            get(jobs::get).patch(jobs::update).delete(jobs::delete),
        )
        .route("/jobs/{id}/start", post(jobs::start))
        .route("/jobs/{id}/stop", post(jobs::stop))
        .route("/jobs/{id}/trigger", post(jobs::trigger))
        .route("/jobs/{id}/runs", get(jobs::runs))
        .route("/schedules/preview", post(schedules::preview))
        .route("/runs", get(runs::list))
        .route("/runs/{id}", get(runs::get))
        .route("/runs/{id}/cancel", post(runs::cancel))
        .route("/dead-letters", get(runs::dead_letters))
        .route("/executors", get(executors::list))
        .route(
            "/executors/{id}",
            get(executors::get).delete(executors::remove),
        )
        .route("/apps", get(executors::apps))
        .route("/executors/{id}/drain", post(executors::drain))
        .route("/executors/{id}/resume", post(executors::resume))
        .route("/runs/{id}/rerun", post(runs::rerun))
        .route("/executors/register", post(executors::register))
        .route("/executors/heartbeat", post(executors::heartbeat))
        .route("/executors/results", post(executors::results))
        .route("/executors/deregister", post(executors::deregister))
        .fallback(error::not_found)
        .layer(DefaultBodyLimit::max(error::MAX_BODY_BYTES))
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
