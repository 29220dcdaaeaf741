//! The HTTP surface: health probes and the admin REST API under `/api/v1`.

mod admitted;
mod apps;
mod audit;
mod auth;
mod backfills;
mod body;
mod calendars;
mod changes;
mod children;
mod cluster;
mod console;
mod error;
mod executors;
mod grants;
mod health;
mod history;
mod http_test;
mod job_views;
mod jobs;
mod jobs_bulk;
mod lifecycle;
mod logs;
mod metrics;
mod namespaces;
mod openapi;
mod operations;
mod paging;
mod params;
mod permissions;
mod quotas;
#[cfg(test)]
mod reference;
mod runs;
mod schedules;
mod secrets;
mod served;
mod sign_in;
mod stats;
mod tasks;
mod tokens;
mod traced;
mod workflow_runs;
mod workflow_write;
mod workflows;
pub mod xxl;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use crate::clock::rfc3339;
pub use audit::{Peer, RefusedSignIns};
pub use auth::Principal;
pub use error::ApiError;
pub use tasks::KnownHandlers;

use crate::clock::ClusterClock;
use crate::cluster::{ClusterTimings, LocalView};
use crate::dispatch::client::DispatchClient;
use crate::observe::Observer;
use crate::secret::Secret;
use crate::store::Store;

/// What every handler can reach.
#[derive(Debug, Clone)]
pub struct ApiState {
    pub store: Arc<dyn Store>,
    /// The namespaces' names and ids.
    pub namespaces: Arc<crate::namespaces::Directory>,
    pub view: Arc<LocalView>,
    pub clock: Arc<ClusterClock>,
    pub admin_token: Arc<Secret>,
    pub executor_token: Arc<Secret>,
    pub read_only_token: Option<Arc<Secret>>,
    /// Executor tokens limited to one app.
    pub app_tokens: Arc<Vec<(String, Secret)>>,
    /// The service tokens of the database, as this node last read them.
    pub tokens: Arc<crate::access::tokens::ServiceTokens>,
    /// The roles granted to the identity provider's groups, as this node last read them.
    pub grants: Arc<crate::access::grants::RoleGrants>,
    /// `[auth.oidc]`: people's JWTs are checked against the provider; `None` when not set.
    pub oidc: Option<Arc<crate::access::oidc::OidcVerifier>>,
    /// Refused sign-ins recorded lately, so that the audit trail takes one a minute per address.
    pub refused_sign_ins: Arc<RefusedSignIns>,
    /// Each namespace's enqueue rate on this node (`quotas.rs`).
    pub enqueue_rates: Arc<quotas::EnqueueRates>,
    pub timings: ClusterTimings,
    pub partition_count: i64,
    pub dispatch: DispatchClient,
    pub executor_heartbeat_ms: u64,
    pub executor_lease_ms: u64,
    /// Where run endings reported here are counted and alerted on.
    pub observer: Observer,
    /// The node's late-fire threshold, for the dashboard's statistics.
    pub late_after_ms: u64,
    /// The dashboard's per-minute totals that can no longer change.
    pub settled_minutes: Arc<stats::SettledMinutes>,
    /// A task due further ahead than this is refused (`tasks.horizon_ms`).
    pub task_horizon_ms: i64,
    /// This node's block of task ids.
    pub task_ids: Arc<crate::tasks::ids::TaskIds>,
    /// The handlers registered executors serve, for enqueue answers.
    pub known_handlers: Arc<KnownHandlers>,
    /// How much of each attempt's log is kept (`[handler_logs]`).
    pub log_caps: crate::store::LogCaps,
    /// The keys secrets are sealed with (`[secrets]`); `None` when the node has none.
    pub secret_keys: Option<Arc<crate::secrets::seal::Keyring>>,
    /// Makes HTTP jobs' calls (`[http_jobs]`), for a test call.
    pub http_jobs: Arc<crate::dispatch::http_jobs::HttpJobs>,
    /// `[xxl]`, when XXL-JOB executors are served (`api/xxl.rs`).
    pub xxl: Option<Arc<xxl::XxlSettings>>,
}

/// Where the admin API is served.
const API_PREFIX: &str = "/api/v1";

/// The largest body of `POST /api/v1/tasks`: a batch of 10,000 tasks of a few hundred bytes.
const MAX_TASK_BATCH_BYTES: usize = 32 * 1024 * 1024;

/// Every route with its documentation; `finish_api` adds what the `/api/v1` routes share
/// (authentication, limits), which the document describes in [`openapi::complete`].
fn routes_with(
    finish_api: impl FnOnce(OpenApiRouter<ApiState>) -> OpenApiRouter<ApiState>,
) -> OpenApiRouter<ApiState> {
    let api = OpenApiRouter::new()
        .routes(routes!(cluster::show))
        .routes(routes!(namespaces::list, namespaces::create))
        .routes(routes!(
            namespaces::get,
            namespaces::update,
            namespaces::delete
        ))
        .routes(routes!(jobs::list, jobs::create))
        .routes(routes!(jobs::get, jobs::update, jobs::delete))
        .routes(routes!(jobs::start))
        .routes(routes!(jobs::stop))
        .routes(routes!(jobs::trigger))
        .routes(routes!(jobs::runs))
        .routes(routes!(backfills::create))
        .routes(routes!(backfills::list))
        .routes(routes!(backfills::get))
        .routes(routes!(backfills::cancel))
        .routes(routes!(schedules::preview))
        .routes(routes!(calendars::list))
        .routes(routes!(calendars::get, calendars::put, calendars::delete))
        .routes(routes!(workflows::list, workflows::create))
        .routes(routes!(
            workflows::get,
            workflows::update,
            workflows::delete
        ))
        .routes(routes!(workflows::start))
        .routes(routes!(workflows::stop))
        .routes(routes!(workflows::trigger))
        .routes(routes!(workflows::runs))
        .routes(routes!(workflow_runs::get))
        .routes(routes!(workflow_runs::cancel))
        .routes(routes!(workflow_runs::rerun))
        .routes(routes!(runs::list))
        .routes(routes!(runs::get))
        .routes(routes!(runs::cancel))
        .routes(routes!(runs::release))
        .routes(routes!(runs::rerun))
        .routes(routes!(runs::dead_letters))
        .routes(routes!(logs::page))
        .routes(routes!(history::purge))
        .routes(routes!(stats::show))
        .routes(routes!(apps::list))
        .routes(routes!(apps::get, executors::remove))
        .routes(routes!(executors::drain))
        .routes(routes!(executors::resume))
        .routes(routes!(apps::apps))
        .routes(routes!(executors::register))
        .routes(routes!(executors::heartbeat))
        .routes(routes!(executors::results))
        .routes(routes!(executors::deregister))
        .routes(routes!(logs::append))
        .routes(routes!(tokens::list, tokens::create))
        .routes(routes!(tokens::revoke))
        .routes(routes!(secrets::list))
        .routes(routes!(secrets::put, secrets::delete))
        .routes(routes!(secrets::rotate))
        .routes(routes!(http_test::test_call))
        .routes(routes!(grants::list, grants::create))
        .routes(routes!(grants::revoke))
        .routes(routes!(audit::list))
        .routes(routes!(openapi::openapi_json))
        .merge(
            OpenApiRouter::new()
                .routes(routes!(jobs_bulk::create))
                .layer(DefaultBodyLimit::max(jobs_bulk::MAX_BULK_BYTES)),
        )
        .merge(
            OpenApiRouter::new()
                .routes(routes!(tasks::enqueue, tasks::list, tasks::cancel_by_key))
                .layer(DefaultBodyLimit::max(MAX_TASK_BATCH_BYTES)),
        )
        .routes(routes!(tasks::get, tasks::cancel));
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(sign_in::show))
        .routes(routes!(metrics::metrics))
        .nest(API_PREFIX, finish_api(api))
}

/// The routes as documented.
fn routes() -> OpenApiRouter<ApiState> {
    routes_with(|api| api)
}

pub use operations::takes_namespace;

/// The node's whole HTTP application.
pub fn router(state: ApiState) -> Router {
    let auth_state = state.clone();
    let permission_state = state.clone();
    let (app, _) = routes_with(|api| {
        // The check of each operation's need runs after routing, where the matched route
        // says which operation a request is.
        api.route_layer(middleware::from_fn_with_state(
            permission_state,
            permissions::authorize,
        ))
        .fallback(error::not_found)
        .layer(DefaultBodyLimit::max(error::MAX_BODY_BYTES))
        // Every /api/v1 path, known or not, needs a token: unknown paths reveal nothing.
        .layer(middleware::from_fn_with_state(
            auth_state,
            auth::authenticate,
        ))
    })
    .split_for_parts();
    let app = match &state.xxl {
        Some(settings) => app.merge(xxl::routes(&settings.path_prefix)),
        None => app,
    };
    let provider = state
        .oidc
        .as_ref()
        .and_then(|oidc| console::origin_of(&oidc.settings().issuer));
    let traces = state.observer.traces.clone();
    app.merge(console::routes(provider.as_deref()))
        .method_not_allowed_fallback(error::method_not_allowed)
        .fallback(error::not_found)
        .layer(middleware::from_fn_with_state(traces, traced::traced))
        .with_state(state)
}
