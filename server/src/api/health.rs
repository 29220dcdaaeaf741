//! Probes for orchestrators: `/healthz` (the process answers) and `/readyz` (the node is a
//! cluster member and its database answers).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;

use super::ApiState;

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Health {
    /// Always `ok`.
    #[schema(value_type = String)]
    status: &'static str,
}

#[utoipa::path(get, operation_id = "healthz", path = "/healthz", tag = "health", security(()),
    responses((status = 200, description = "The process answers", body = Health)))]
pub(super) async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Readiness {
    ready: bool,
    node_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    reason: Option<&'static str>,
}

#[utoipa::path(get, operation_id = "readyz", path = "/readyz", tag = "health", security(()),
    responses(
        (status = 200, description = "A cluster member whose database answers", body = Readiness),
        (status = 503, description = "Not ready, with the reason", body = Readiness),
    ))]
pub(super) async fn readyz(State(state): State<ApiState>) -> (StatusCode, Json<Readiness>) {
    let reason = if !state.view.is_member() {
        Some("not a cluster member: no heartbeat has succeeded within the node lease")
    } else {
        let probe = tokio::time::timeout(Duration::from_secs(1), state.store.now_ms()).await;
        match probe {
            Ok(Ok(_)) => None,
            _ => Some("the database does not answer"),
        }
    };
    let status = match reason {
        None => StatusCode::OK,
        Some(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    let body = Readiness {
        ready: reason.is_none(),
        node_id: state.view.node_id().to_owned(),
        reason,
    };
    (status, Json(body))
}
