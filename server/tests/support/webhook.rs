//! A webhook receiver on a loopback port, for the alerts tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::Value;

use super::wait_for;

/// Every webhook call a [`Receiver`] got: the path it was posted to and its JSON body.
type Calls = Arc<Mutex<Vec<(String, Value)>>>;

/// A webhook receiver on a loopback port. Posts to `/flaky/…` are answered `500` the first
/// time, to show that alerts are retried.
pub struct Receiver {
    base: String,
    calls: Calls,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let calls: Calls = Arc::default();
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(receive))
            .with_state(Arc::clone(&calls));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver { base, calls }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The bodies posted to `path` so far.
    pub fn bodies(&self, path: &str) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Waits for a body posted to `path` that `pick` accepts.
    pub async fn wait(&self, path: &str, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
        wait_for(Duration::from_secs(30), what, || async {
            self.bodies(path).into_iter().find(|b| pick(b))
        })
        .await
    }
}

async fn receive(
    State(calls): State<Calls>,
    Path(path): Path<String>,
    Json(body): Json<Value>,
) -> StatusCode {
    let path = format!("/{path}");
    let mut calls = calls.lock().unwrap();
    let first_here = !calls.iter().any(|(p, _)| *p == path);
    calls.push((path.clone(), body));
    if path.starts_with("/flaky/") && first_here {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}
