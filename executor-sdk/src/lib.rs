//! The SDK an executor app links.
//!
//! ```no_run
//! use carillon_executor::{Executor, JobContext, JobError, job};
//!
//! #[job(name = "report", description = "nightly report", cron = "0 30 2 * * ?", tz = "Asia/Shanghai")]
//! async fn report(ctx: JobContext) -> Result<String, JobError> {
//!     Ok(format!("done shard {}", ctx.shard().index))
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), carillon_executor::ExecutorError> {
//!     Executor::builder()
//!         .app("billing")
//!         .admin_urls(["http://127.0.0.1:9001"])
//!         .executor_token(std::env::var("CARILLON_EXECUTOR_TOKEN").unwrap_or_default())
//!         .dispatch_secret(std::env::var("CARILLON_DISPATCH_SECRET").unwrap_or_default())
//!         .build()?
//!         .run_until(async {
//!             let _ = tokio::signal::ctrl_c().await;
//!         })
//!         .await
//! }
//! ```
//!
//! Handlers marked `#[job]` anywhere in the program are collected at link time: `main` does
//! not list them. Architecture invariant: this crate never depends on `carillon-server`.

mod admin;
mod attempt;
mod context;
mod effects;
mod endpoint;
mod executor;
mod logs;
#[cfg(feature = "opentelemetry")]
mod otel;
mod registry;
mod replay;
mod tasks;

pub use carillon_macros::job;
pub use carillon_protocol::{Outcome, Shard};
pub use context::{JobContext, JobError};
pub use executor::{Executor, ExecutorBuilder, ExecutorError};
pub use registry::registered_jobs;
pub use tasks::{
    Balance, Delivery, Enqueued, MAX_BATCH as MAX_TASK_BATCH, Task, Tasks, TasksBuilder, TasksError,
};

/// What `#[job]` expands to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::registry::{JOBS, JobDescriptor, JobFuture, into_result};
    pub use linkme;
}
