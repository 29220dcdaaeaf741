//! The web console: the static files of `server/console/`, embedded in the binary by
//! `build.rs`, served at `/` and `/console/<name>` by every node.
//! The page calls the REST API with the token its user signs in with; it holds no state of
//! its own, so any node serves it and what it shows is the database's.
//!
//! The console is not part of the API: its routes are plain axum routes outside the OpenAPI
//! document.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));

/// The page may load only its own scripts and styles and call only its own node (and, where
/// people sign in, their provider's endpoints: the discovery document and the token
/// exchange); no inline script runs, so an output or a job name shown on it cannot become
/// code.
fn content_security_policy(provider: Option<&str>) -> String {
    let connect = provider.map_or_else(String::new, |origin| format!(" {origin}"));
    format!(
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
         connect-src 'self'{connect}; frame-ancestors 'none'; base-uri 'none'; \
         form-action 'self'"
    )
}

/// The origin of an OpenID provider's issuer (scheme, host and port), as a policy names it.
pub(super) fn origin_of(issuer: &str) -> Option<String> {
    let url = reqwest::Url::parse(issuer).ok()?;
    let origin = url.origin();
    origin.is_tuple().then(|| origin.ascii_serialization())
}

/// The console's routes: the page at `/`, its other files at `/console/<name>`. `provider`,
/// the origin of the OpenID provider people sign in with, if any, is one the page may call.
pub(super) fn routes<S: Clone + Send + Sync + 'static>(provider: Option<&str>) -> Router<S> {
    let policy = HeaderValue::from_str(&content_security_policy(provider))
        .unwrap_or_else(|_| HeaderValue::from_static("default-src 'none'"));
    let page_policy = policy.clone();
    Router::new()
        .route(
            "/",
            get(move || async move { asset("index.html", page_policy) }),
        )
        .route(
            "/console/{name}",
            get(move |Path(name): Path<String>| async move { asset(&name, policy) }),
        )
}

fn asset(name: &str, policy: HeaderValue) -> Response {
    let Some((_, content_type, body)) = CONSOLE_ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return super::ApiError::NotFound.into_response();
    };
    let mut response = (*body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // Files change with the binary; a browser asks again after a restart.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
