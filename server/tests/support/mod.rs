//! Test support shared by the integration tests: a fresh database per test on each backend,
//! `carillon` node processes on loopback ports, and polling helpers.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a different part of this private support code"
)]

pub mod db;
pub mod node;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `check` every 50 ms until it returns `Some`, or panics with `what` after `limit`.
pub async fn wait_for<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
