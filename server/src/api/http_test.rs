//! `POST /jobs/test-call`: an HTTP job's call made once, now, by the answering node, as a run
//! would make it (the namespace's secrets, the node's `[http_jobs]` reach, no redirects), and
//! answered with what came back: the console's "test call now". No run is recorded; the
//! audit trail records the call (its URL, not its secrets' values).

use std::time::Instant;

use axum::Json;
use axum::extract::State;
use carillon_protocol::{Dispatch, Outcome, PROTOCOL_VERSION, Shard};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::admitted::Admitted;
use super::body::JsonBody;
use super::error::Problem;
use super::namespaces::NamespaceQuery;
use super::params::QueryParams;
use super::{ApiError, ApiState};
use crate::dispatch::client::Delivery;
use crate::dispatch::http_jobs::HttpOffer;
use crate::jobs::HttpCall;

/// A call to make once, with the arguments its templates read.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TestCall {
    http: HttpCall,
    /// What `{{args}}` and `{{args.field}}` read (default `null`).
    #[serde(default)]
    args: Value,
    /// What `{{job}}` reads (default `test`).
    #[serde(default)]
    name: Option<String>,
}

/// What came of a test call.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TestCallAnswer {
    /// Whether a run would have succeeded with this answer.
    succeeded: bool,
    /// The answer as a run's output: `status`, and `body` (JSON when it is, else text).
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<Value>,
    /// Why it did not succeed: the status, the answer's value, a refused address, no answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// How long the call took, in milliseconds.
    took_ms: u64,
}

/// Makes an HTTP job's call once now and answers what came back; nothing is stored.
#[utoipa::path(post, operation_id = "testHttpCall", path = "/jobs/test-call", tag = "jobs",
    request_body = TestCall,
    params(NamespaceQuery),
    responses(
        (status = 200, description = "The call was made, or refused before it went (`error` says why)", body = TestCallAnswer),
        (status = 400, description = "The call is not valid: `field` names what is wrong", body = Problem, content_type = "application/problem+json"),
    ))]
pub(super) async fn test_call(
    State(state): State<ApiState>,
    admitted: Admitted,
    QueryParams(_): QueryParams<NamespaceQuery>,
    JsonBody(input): JsonBody<TestCall>,
) -> Result<Json<TestCallAnswer>, ApiError> {
    input.http.validate()?;
    let namespace = admitted.namespace()?;
    let mut offer = HttpOffer::new(input.http.clone());
    if offer.names_secrets() {
        let stored = state.store.secrets_list(namespace).await?;
        state.http_jobs.open_secrets(&mut offer, namespace, &stored);
    }
    let now_ms = state.clock.now_ms();
    let request = Dispatch {
        protocol: PROTOCOL_VERSION,
        run_id: 0,
        attempt_id: 0,
        handle: None,
        attempt: 1,
        job_id: 0,
        job: input.name.unwrap_or_else(|| "test".to_owned()),
        handler: input.http.method.clone(),
        args: input.args,
        shard: Shard { index: 0, total: 1 },
        scheduled_at: super::rfc3339(now_ms).unwrap_or_default(),
        timeout_ms: None,
        report_to: Vec::new(),
        input: None,
        effect_key: None,
        traceparent: None,
        secrets: Default::default(),
    };
    let began = Instant::now();
    let delivery = state.http_jobs.call(&offer, (&request, now_ms), None).await;
    let took_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
    let answer = match delivery {
        Delivery::Finished(result) => TestCallAnswer {
            succeeded: result.outcome == Outcome::Succeeded,
            output: result.output,
            error: result.error,
            took_ms,
        },
        Delivery::Refused(why) | Delivery::TryAnother(_, why) => TestCallAnswer {
            succeeded: false,
            output: None,
            error: Some(why),
            took_ms,
        },
        Delivery::Accepted => TestCallAnswer {
            succeeded: false,
            output: None,
            error: Some("the call was not made".to_owned()),
            took_ms,
        },
    };
    Ok(Json(answer))
}
