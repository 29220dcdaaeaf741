//! Flow control's records: a run put in line under its key, and the store's admissions.

use async_trait::async_trait;

use super::audit_records::AuditWrite;
use super::error::Error;
use crate::jobs::FlowLimits;

pub use super::rules::flow::Admitted;

/// A pending run to put in line under its flow key before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunInLine {
    pub run_id: i64,
    /// The key, namespace included (`Flow::key_of`).
    pub key: String,
    pub limits: FlowLimits,
}

/// Admissions of flow keys (`rules::flow`).
#[async_trait]
pub trait FlowStore: Send + Sync + std::fmt::Debug + 'static {
    /// Puts each run in line under its key and admits the key, in one transaction (keys
    /// locked in order); the runs that may start now, this batch's and others'.
    async fn runs_put_in_line(&self, runs: &[RunInLine]) -> Result<Admitted, Error>;

    /// Lets run `run_id`, failed for good under a `fifo` key, give the key up (`audit` goes
    /// with it), and admits the key's next run; the key, or `None` when the run holds none.
    async fn run_flow_release(
        &self,
        run_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<String>, Error>;

    /// Hands the key held by run `from` (failed for good under a `fifo` key) to its rerun
    /// `to`, which takes its place ahead of the line; whether `from` held one.
    async fn run_flow_hand_over(&self, from: i64, to: i64) -> Result<bool, Error>;

    /// Admits the keys whose row says to look again by now, at most `limit` of them.
    async fn flow_keys_admit_due(&self, limit: i64) -> Result<Admitted, Error>;
}
