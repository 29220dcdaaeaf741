//! Whether a job's handler is served: a job naming a handler that no executor of its app offers
//! is still accepted (executors may register later), and its answer says so, naming what the
//! app's executors do serve, so a typo (`demo.hello` for `hello`) shows at once rather than as
//! `no_executor` runs later.

use super::{ApiError, ApiState};
use crate::store::executor_protocol;

/// The warning for a job of `app` naming `handler`, or `None` when an executor of the app
/// (one that has not left) offers it. XXL-JOB executors take any handler.
pub(super) async fn handler_warning(
    state: &ApiState,
    app: &str,
    handler: &str,
) -> Result<Option<String>, ApiError> {
    let list = state.store.executors_list(Some(app)).await?;
    let present: Vec<_> = list
        .executors
        .iter()
        .filter(|e| e.app_name == app && e.state != "left")
        .collect();
    if present.iter().any(|e| e.protocol == executor_protocol::XXL) {
        return Ok(None);
    }
    let mut offered: Vec<&str> = list
        .handlers
        .iter()
        .filter(|(id, _)| present.iter().any(|e| &e.executor_id == id))
        .map(|(_, h)| h.as_str())
        .collect();
    offered.sort_unstable();
    offered.dedup();
    if offered.contains(&handler) {
        return Ok(None);
    }
    let until = format!(
        "its runs end `no_executor` unless an executor of app {app:?} offering {handler:?} \
         registers (dispatch.no_executor_grace_ms)"
    );
    Ok(Some(if present.is_empty() {
        format!("no executor of app {app:?} is registered: {until}")
    } else {
        format!(
            "no executor of app {app:?} offers handler {handler:?}; they offer {}: {until}",
            offered.join(", ")
        )
    }))
}
