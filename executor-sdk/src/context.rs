//! What a handler gets: the dispatch it is running, and a way to notice cancellation.

use carillon_protocol::{Dispatch, Shard};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// An error a handler returns; its message is reported to the admin nodes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct JobError(pub String);

impl JobError {
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

/// One attempt of one run (or of one shard of it).
#[derive(Debug, Clone)]
pub struct JobContext {
    dispatch: Dispatch,
    cancel: CancellationToken,
}

impl JobContext {
    pub(crate) fn new(dispatch: Dispatch, cancel: CancellationToken) -> Self {
        Self { dispatch, cancel }
    }

    /// The run; the same for every attempt and shard of it. Key idempotent effects on it.
    pub fn run_id(&self) -> i64 {
        self.dispatch.run_id
    }

    pub fn attempt_id(&self) -> i64 {
        self.dispatch.attempt_id
    }

    /// 1 for the first attempt of this shard, 2 for its first retry…
    pub fn attempt(&self) -> u32 {
        self.dispatch.attempt
    }

    pub fn job_id(&self) -> i64 {
        self.dispatch.job_id
    }

    pub fn job_name(&self) -> &str {
        &self.dispatch.job
    }

    pub fn shard(&self) -> Shard {
        self.dispatch.shard
    }

    /// The scheduled instant, RFC 3339.
    pub fn scheduled_at(&self) -> &str {
        &self.dispatch.scheduled_at
    }

    /// The arguments as JSON.
    pub fn raw_args(&self) -> &Value {
        &self.dispatch.args
    }

    /// The value of a secret the job names (its `secrets`), which the admin node sends with
    /// the dispatch to `https://` and loopback executors; `None` for one it does not name.
    pub fn secret(&self, name: &str) -> Option<&str> {
        self.dispatch.secrets.get(name)
    }

    /// Every secret the dispatch carries, by name.
    pub fn secrets(&self) -> impl Iterator<Item = (&str, &str)> {
        self.dispatch
            .secrets
            .0
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    /// The arguments as `T`.
    pub fn args<T: DeserializeOwned>(&self) -> Result<T, JobError> {
        serde_json::from_value(self.dispatch.args.clone())
            .map_err(|e| JobError::new(format!("arguments do not fit: {e}")))
    }

    /// The run's input as `T`, when it has one: a child job's run is given its parent's
    /// `{"parent": {"run_id", "job_id", "job", "state", "output"}}`, a workflow step's run
    /// `{"workflow", "params", "upstream"}` (`protocol/README.md`).
    pub fn input<T: DeserializeOwned>(&self) -> Result<Option<T>, JobError> {
        self.dispatch
            .input
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| JobError::new(format!("the input does not fit: {e}")))
    }

    /// The W3C `traceparent` the node sent with this attempt: the run's trace, with the
    /// node's delivery span as the parent. Send it on (a `traceparent` header) or give it to
    /// your tracer, and the work this handler causes joins the run's trace.
    pub fn traceparent(&self) -> Option<&str> {
        self.dispatch.traceparent.as_deref()
    }

    /// The run's trace id (32 hex digits), when the node sent a `traceparent`; the attempt's
    /// log lines carry it as `trace_id`.
    pub fn trace_id(&self) -> Option<&str> {
        trace_id_of(self.dispatch.traceparent.as_deref()?)
    }

    /// True once the run was cancelled (or the executor is stopping hard).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the run is cancelled: `select!` on it in long handlers.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// `future` with what it logs kept in this attempt's log, for work the handler spawns
    /// onto another task (`tokio::spawn(ctx.in_attempt(work))`): only the handler's own task
    /// is captured otherwise.
    pub fn in_attempt<F>(
        &self,
        future: F,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = F::Output> + Send>>
    where
        F: std::future::Future + Send + 'static,
    {
        crate::logs::in_current_attempt(future)
    }
}

/// The trace id of a version-00 `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`).
pub(crate) fn trace_id_of(traceparent: &str) -> Option<&str> {
    let trace = traceparent.split('-').nth(1)?;
    (trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit())).then_some(trace)
}
