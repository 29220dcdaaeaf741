//! The handlers `#[job]` collected at link time.

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde_json::Value;

use crate::context::JobContext;

/// The future a handler returns, with its result turned into JSON or an error message.
pub type JobFuture = Pin<Box<dyn Future<Output = Result<Value, String>> + Send + 'static>>;

/// One `#[job]` handler.
#[derive(Debug)]
pub struct JobDescriptor {
    pub name: &'static str,
    pub description: &'static str,
    pub cron: Option<&'static str>,
    pub rrule: Option<&'static str>,
    pub timezone: Option<&'static str>,
    pub run: fn(JobContext) -> JobFuture,
}

/// Every `#[job]` in the program.
#[linkme::distributed_slice]
pub static JOBS: [JobDescriptor];

/// The handlers of this program, by name.
pub fn registered_jobs() -> &'static [JobDescriptor] {
    &JOBS
}

/// A handler's `Result<T, E>` as JSON output or an error message.
pub fn into_result<T: Serialize, E: std::fmt::Display>(
    result: Result<T, E>,
) -> Result<Value, String> {
    match result {
        Ok(value) => {
            serde_json::to_value(value).map_err(|e| format!("the output is not JSON: {e}"))
        }
        Err(err) => Err(err.to_string()),
    }
}
