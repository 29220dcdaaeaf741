//! A span per API request when the node exports traces: in the caller's trace when the request
//! brings a `traceparent`, named by its route (never its concrete path), with the status it
//! got. The request's log lines carry its trace id.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::observe::Traces;

pub(super) async fn traced(State(traces): State<Traces>, request: Request, next: Next) -> Response {
    let parent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    let Some(span) = traces.request_began(parent) else {
        return next.run(request).await;
    };
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned());
    let logged = tracing::info_span!("request", trace_id = %span.trace_id());
    let response = next.run(request).instrument(logged).await;
    traces.request_ended(span, &method, route.as_deref(), response.status().as_u16());
    response
}
