//! Test support shared by the integration tests: a fresh database per test on each backend,
//! `carillon` node processes on loopback ports, and polling helpers.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a different part of this private support code"
)]

pub mod cli;
pub mod db;
pub mod delay_proxy;
pub mod docker;
pub mod executor;
pub mod galera;
pub mod haproxy;
pub mod netns;
pub mod node;
pub mod oidc;
pub mod pgbouncer;
pub mod pki;
pub mod private_server;
pub mod proxy;
pub mod records;
pub mod runs;
pub mod sdk;
pub mod walk;
pub mod webhook;

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use db::{Engine, TestDb};

/// Runs a test body on a fresh database of `engine`; an unreachable server fails the test,
/// and an engine left out by `CARILLON_TEST_BACKENDS` runs nothing.
pub async fn on_fresh_database<F, Fut>(engine: Engine, body: F)
where
    F: FnOnce(TestDb) -> Fut,
    Fut: Future<Output = ()>,
{
    if let Some(db) = TestDb::create(engine).await {
        body(db).await;
    }
}

/// Instantiates each named test body (an `async fn(TestDb)` in the calling file) once per
/// engine, as `#[tokio::test]`s in a module named after the engine. With `ignore = "needs …"`
/// the tests need an outside tool: a plain `cargo test` reports them ignored, and `.ci/run`
/// installs the tool and runs them with `--include-ignored`.
#[macro_export]
macro_rules! for_engine {
    ($module:ident, $engine:ident, ignore = $why:literal, [$($test:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = $why]
                async fn $test() {
                    $crate::support::on_fresh_database(
                        $crate::support::db::Engine::$engine,
                        super::$test,
                    )
                    .await;
                }
            )*
        }
    };
    ($module:ident, $engine:ident, [$($test:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    $crate::support::on_fresh_database(
                        $crate::support::db::Engine::$engine,
                        super::$test,
                    )
                    .await;
                }
            )*
        }
    };
}

/// Instantiates each named test body (an `async fn(TestDb)`) once more on PostgreSQL, its
/// stores connected through pgbouncer in transaction mode (`TestDb::create_behind_pgbouncer`),
/// in a module `postgres_pgbouncer`; ignored by a plain `cargo test` (it needs pgbouncer,
/// which `.ci/run` installs).
#[macro_export]
macro_rules! behind_pgbouncer {
    ([$($test:ident),* $(,)?]) => {
        mod postgres_pgbouncer {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = "needs pgbouncer (Debian's package; .ci/run installs it)"]
                async fn $test() {
                    if let Some(db) = $crate::support::db::TestDb::create_behind_pgbouncer().await {
                        super::$test(db).await;
                    }
                }
            )*
        }
    };
}

/// A command's output as text (lossy: it is for messages).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A loopback port free now, for a server a test starts.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("port").port()
}

/// Whether the tests run as root (database servers and pgbouncer then run as their own users).
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`…) to process `pid`.
pub fn send_signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

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
