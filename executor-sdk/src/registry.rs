//! The handlers an executor serves: `#[job]` functions collected at link time, and handlers
//! given at run time (`ExecutorBuilder::handler`), both become one [`Handler`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

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

/// What runs a handler's attempt.
pub(crate) type RunHandler = Arc<dyn Fn(JobContext) -> JobFuture + Send + Sync>;

/// A handler this executor serves, however it was declared.
#[derive(Clone)]
pub(crate) struct Handler {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) cron: Option<String>,
    pub(crate) rrule: Option<String>,
    pub(crate) timezone: Option<String>,
    pub(crate) run: RunHandler,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("cron", &self.cron)
            .field("rrule", &self.rrule)
            .field("timezone", &self.timezone)
            .finish_non_exhaustive()
    }
}

impl From<&'static JobDescriptor> for Handler {
    fn from(job: &'static JobDescriptor) -> Self {
        Self {
            name: job.name.to_owned(),
            description: job.description.to_owned(),
            cron: job.cron.map(str::to_owned),
            rrule: job.rrule.map(str::to_owned),
            timezone: job.timezone.map(str::to_owned),
            run: Arc::new(job.run),
        }
    }
}

/// Why `name` cannot name a handler, as `#[job]` checks it at compile time.
pub(crate) fn name_problem(name: &str) -> Option<&'static str> {
    let valid = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    (!valid).then_some("a job name is 1 to 128 letters, digits, '-', '_' or '.'")
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
