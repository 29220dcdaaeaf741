//! XXL-JOB's admin API (2.4) for XXL-JOB executors, unchanged: `POST {prefix}/api/registry`
//! (every 10 to 30 s: registers the executor or beats for it), `/api/registryRemove` (it
//! leaves) and `/api/callback` (results, which end attempts). Served only when
//! `xxl.access_token` is set, and authenticated by that shared header alone (SECURITY.md).
//! Every answer is XXL-JOB's `{"code": 200, "msg": …}`, with HTTP 200 as XXL-JOB answers.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use carillon_protocol::Outcome;
use serde::Deserialize;
use serde_json::Value;
use tracing::{debug, info, warn};

use super::ApiState;
use super::auth::constant_time_eq;
use super::executors::ident;
use crate::dispatch::balancer::fnv;
use crate::dispatch::finish::{Ending, finish_attempt_by};
use crate::dispatch::xxl::{TOKEN_HEADER, XxlReturn};
use crate::secret::Secret;
use crate::store::{ANY_HANDLER, ExecutorRegistration, executor_protocol};

/// What the XXL-JOB endpoints need from `[xxl]`.
#[derive(Debug)]
pub struct XxlSettings {
    pub token: Secret,
    pub path_prefix: String,
    pub executor_lease_ms: i64,
    pub executor_capacity: i64,
}

/// The routes, under the configured prefix.
pub(super) fn routes(prefix: &str) -> Router<ApiState> {
    Router::new()
        .route(&format!("{prefix}/api/registry"), post(registry))
        .route(
            &format!("{prefix}/api/registryRemove"),
            post(registry_remove),
        )
        .route(&format!("{prefix}/api/callback"), post(callback))
}

/// `RegistryParam`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegistryParam {
    registry_group: String,
    registry_key: String,
    registry_value: String,
}

/// One `HandleCallbackParam`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CallbackParam {
    log_id: i64,
    #[serde(default)]
    handle_code: Option<i64>,
    #[serde(default)]
    handle_msg: Option<String>,
    /// XXL-JOB 2.2's shape of the same.
    #[serde(default)]
    execute_result: Option<ExecuteResult>,
}

#[derive(Debug, Deserialize)]
struct ExecuteResult {
    code: i64,
    #[serde(default)]
    msg: Option<String>,
}

/// XXL-JOB's handle codes: 200 success, 502 timeout, anything else a failure.
const HANDLE_SUCCESS: i64 = 200;
const HANDLE_TIMEOUT: i64 = 502;

/// The settings, when the request carries their token.
fn authorised<'a>(state: &'a ApiState, headers: &HeaderMap) -> Result<&'a XxlSettings, XxlReturn> {
    let settings = state
        .xxl
        .as_deref()
        .ok_or_else(|| XxlReturn::fail("XXL-JOB executors are not served here"))?;
    let given = headers
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if constant_time_eq(given, settings.token.expose()) {
        Ok(settings)
    } else {
        Err(XxlReturn::fail("The access token is wrong."))
    }
}

/// The executor id of an XXL-JOB executor: one per app and address, as XXL-JOB keys its
/// registry.
pub fn xxl_executor_id(app: &str, address: &str) -> String {
    let hash = fnv(&format!("{app}|{address}"));
    format!("{}{hash:016x}", executor_protocol::XXL_ID_PREFIX)
}

/// The registry parameter checked: the app and the address to dispatch to.
async fn registry_param(state: &ApiState, body: &Bytes) -> Result<(String, String), XxlReturn> {
    let param: RegistryParam = serde_json::from_slice(body)
        .map_err(|e| XxlReturn::fail(format!("not a registry parameter: {e}")))?;
    if param.registry_group != "EXECUTOR" {
        return Err(XxlReturn::fail(format!(
            "registryGroup {:?} is not served: only EXECUTOR",
            param.registry_group
        )));
    }
    ident("registryKey", &param.registry_key, 128).map_err(|e| XxlReturn::fail(e.to_string()))?;
    let address = param.registry_value.trim().trim_end_matches('/').to_owned();
    if !(address.starts_with("http://") || address.starts_with("https://")) || address.len() > 512 {
        return Err(XxlReturn::fail(
            "registryValue must be the executor's http:// or https:// address",
        ));
    }
    // The nodes will send work there: only into the networks the operator allows.
    state
        .dispatch
        .check_address(&address)
        .await
        .map_err(|why| XxlReturn::fail(format!("registryValue: {why}")))?;
    Ok((param.registry_key, address))
}

async fn registry(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Json<XxlReturn> {
    Json(match register(&state, &headers, &body).await {
        Ok(()) => XxlReturn::ok(),
        Err(answer) => answer,
    })
}

/// Beats for a known executor; registers one that is new or had left.
async fn register(state: &ApiState, headers: &HeaderMap, body: &Bytes) -> Result<(), XxlReturn> {
    let settings = authorised(state, headers)?;
    let (app, address) = registry_param(state, body).await?;
    let executor_id = xxl_executor_id(&app, &address);
    let store_error = |e: crate::store::Error| {
        warn!(error = %e, "an XXL-JOB registration could not be stored");
        XxlReturn::fail("the registration could not be stored; try again")
    };
    // In flight is counted from the attempts here; XXL-JOB beats carry no count.
    if state
        .store
        .executor_heartbeat(&executor_id, 0, false)
        .await
        .map_err(store_error)?
    {
        debug!(executor = %executor_id, "XXL-JOB executor beat");
        return Ok(());
    }
    // Ids `xxl-…` are registered only here (the executor protocol refuses them).
    let owner_was = state
        .store
        .executor_owner(&executor_id)
        .await
        .map_err(store_error)?
        .map(|owner| owner.registered_by);
    state
        .store
        .executor_register(
            &ExecutorRegistration {
                executor_id: executor_id.clone(),
                app: app.clone(),
                address: address.clone(),
                weight: 1,
                capacity: settings.executor_capacity,
                accepts_batch: false,
                protocol: executor_protocol::XXL.to_owned(),
                lease_ms: settings.executor_lease_ms,
                handlers: vec![(
                    ANY_HANDLER.to_owned(),
                    "an XXL-JOB executor: it does not say which handlers it has".to_owned(),
                )],
                namespace: None,
                registered_by: executor_protocol::XXL.to_owned(),
                owner_was,
            },
            None,
        )
        .await
        .map_err(store_error)?;
    info!(executor = %executor_id, app, address, "XXL-JOB executor registered");
    Ok(())
}

async fn registry_remove(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Json<XxlReturn> {
    let removed = async {
        authorised(&state, &headers)?;
        let (app, address) = registry_param(&state, &body).await?;
        let executor_id = xxl_executor_id(&app, &address);
        let left = state
            .store
            .executor_leave(&executor_id, None)
            .await
            .map_err(|e| {
                warn!(error = %e, "an XXL-JOB executor's leaving could not be stored");
                XxlReturn::fail("the removal could not be stored; try again")
            })?;
        if left {
            info!(executor = %executor_id, app, address, "XXL-JOB executor left");
        }
        Ok::<(), XxlReturn>(())
    };
    Json(removed.await.err().unwrap_or_else(XxlReturn::ok))
}

async fn callback(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Json<XxlReturn> {
    if let Err(answer) = authorised(&state, &headers) {
        return Json(answer);
    }
    let params: Vec<CallbackParam> = match serde_json::from_slice(&body) {
        Ok(params) => params,
        Err(e) => return Json(XxlReturn::fail(format!("not a list of callbacks: {e}"))),
    };
    for param in params {
        if let Err(e) = end_attempt(&state, param).await {
            warn!(error = %e, "an XXL-JOB callback could not be stored");
            // XXL-JOB's own executors keep a callback that failed and send it again (pyxxl
            // does not).
            return Json(XxlReturn::fail(
                "the callback could not be stored; try again",
            ));
        }
    }
    Json(XxlReturn::ok())
}

/// Ends the attempt a callback names (its `logId`), when an XXL-JOB executor runs it. A
/// callback for an attempt that already ended (timed out here first) changes nothing.
async fn end_attempt(state: &ApiState, param: CallbackParam) -> Result<(), crate::store::Error> {
    let Some(attempt) = state.store.attempt_get(param.log_id).await? else {
        debug!(
            log_id = param.log_id,
            "XXL-JOB callback for an unknown attempt"
        );
        return Ok(());
    };
    let Some(executor_id) = attempt.executor_id.clone() else {
        warn!(
            log_id = param.log_id,
            state = %attempt.state,
            "XXL-JOB callback for an attempt given to no executor; ignored"
        );
        return Ok(());
    };
    // Only attempts given to XXL-JOB executors: the shared token must not end Carillon
    // executors' work.
    if !executor_protocol::is_xxl_id(&executor_id) {
        warn!(log_id = param.log_id, executor = %executor_id, "XXL-JOB callback for an attempt of a Carillon executor; ignored");
        return Ok(());
    }
    let (code, msg) = match (param.handle_code, param.execute_result) {
        (Some(code), _) => (code, param.handle_msg),
        (None, Some(result)) => (result.code, result.msg),
        (None, None) => (HANDLE_SUCCESS, param.handle_msg),
    };
    let (ending, output, error) = match code {
        HANDLE_SUCCESS => (
            Ending::Reported(Outcome::Succeeded),
            msg.map(Value::String),
            None,
        ),
        HANDLE_TIMEOUT => (
            Ending::TimedOut,
            None,
            msg.or(Some("timed out on the executor".to_owned())),
        ),
        other => (
            Ending::Reported(Outcome::Failed),
            None,
            Some(msg.unwrap_or_else(|| format!("handle code {other}"))),
        ),
    };
    finish_attempt_by(
        &*state.store,
        &state.observer,
        &attempt,
        Some(&executor_id),
        ending,
        output.as_ref(),
        error,
    )
    .await?;
    Ok(())
}
