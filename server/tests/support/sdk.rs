//! An executor of the Rust SDK, serving every `#[job]` handler linked into the test binary,
//! registered with one node.

use carillon_executor::{Executor, ExecutorError};
use tokio_util::sync::CancellationToken;

use super::node::NodeProcess;

/// The executor while it serves; [`Serving::stop`] drains it.
pub struct Serving {
    stop: CancellationToken,
    running: tokio::task::JoinHandle<Result<(), ExecutorError>>,
}

/// Starts executor `id` of `app` against `node`, with the node's executor token and dispatch
/// key, on a loopback port of its own.
pub async fn serve(node: &NodeProcess, app: &str, id: &str, (token, key): (&str, &str)) -> Serving {
    let executor = Executor::builder()
        .app(app)
        .admin_urls([node.url("")])
        .executor_token(token)
        .dispatch_secret(key)
        .executor_id(id)
        .build()
        .expect("the executor's settings");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let running = tokio::spawn(
        executor.run_with_listener(listener, async move { stopped.cancelled().await }),
    );
    Serving { stop, running }
}

impl Serving {
    /// Stops it, draining what runs; panics if it failed.
    pub async fn stop(self) {
        self.stop.cancel();
        self.running
            .await
            .expect("the executor task")
            .expect("the executor stops cleanly");
    }
}
