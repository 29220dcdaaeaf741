//! How a job runs beyond its schedule: balancing, sharding, retries, timeout, misfire, overlap,
//! priority, bounds, jitter, calendars and pausing after failures. Stored with the job as JSON.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::states::ChildOutcome;

/// What to do with instants that passed unfired (a node died, the cluster was down, the job was
/// stopped): applied when a node takes over a partition, restarts, or a job is started again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Misfire {
    /// One catch-up run for the missed instants (the latest of them), then on schedule.
    #[default]
    FireOnce,
    /// Drop missed instants.
    Skip,
    /// A run for every missed instant within `catch_up_window_ms`.
    CatchUp,
}

/// What to do when an instant comes while the job's previous run is unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    #[default]
    Allow,
    /// Record the instant as skipped.
    Skip,
    /// Queue it behind the unfinished run.
    Queue,
    /// Cancel the unfinished run and start this one.
    Replace,
}

/// The wire's, shared with the SDK's task client.
pub use carillon_protocol::{Balance, Delivery};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    #[default]
    Fixed,
    Exponential,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Retry {
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub initial_delay_ms: u64,
    pub max_delay_ms: u64,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            backoff: Backoff::Fixed,
            initial_delay_ms: 1_000,
            max_delay_ms: 60_000,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Sharding {
    /// Split the JSON array argument across executors in proportion to their weights.
    pub split: bool,
    /// Every healthy executor gets the same arguments with its shard index and total.
    pub broadcast: bool,
    /// K shards with index and total, placed by the balancer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// Jobs to run when a run of this job ends, by how it ended (XXL-JOB's child jobs), by job
/// id. A child run is created once per parent run, in the transaction that ends the parent,
/// with the parent's run id, state and output as its input. A cancelled or skipped run
/// triggers none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Children {
    /// After a run succeeded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub on_success: Vec<i64>,
    /// After a run failed, or found no executor.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub on_failure: Vec<i64>,
    /// After a run succeeded or failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub always: Vec<i64>,
}

impl Children {
    pub fn is_empty(&self) -> bool {
        self.on_success.is_empty() && self.on_failure.is_empty() && self.always.is_empty()
    }

    /// `(list, child job id)` of every child named, in the order written.
    pub fn named(&self) -> impl Iterator<Item = (ChildOutcome, i64)> + '_ {
        self.on_success
            .iter()
            .map(|id| (ChildOutcome::OnSuccess, *id))
            .chain(
                self.on_failure
                    .iter()
                    .map(|id| (ChildOutcome::OnFailure, *id)),
            )
            .chain(self.always.iter().map(|id| (ChildOutcome::Always, *id)))
    }
}

/// Everything about a job but what and when. Read from storage only (users write its fields
/// through `JobInput`/`JobPatch`), so a field a newer node added is ignored, not refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct JobPolicy {
    pub balance: Balance,
    pub sharding: Sharding,
    pub retry: Retry,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What the delivery to executors promises (`at_least_once` unless set).
    pub delivery: Delivery,
    pub misfire: Misfire,
    pub catch_up_window_ms: u64,
    pub overlap: Overlap,
    /// 0 (lowest) to 10; runs waiting for capacity are dispatched highest first, with age
    /// raising the effective priority so that low priorities are not starved.
    #[schema(minimum = 0, maximum = 10)]
    pub priority: i32,
    /// Where this job's alerts go, beside the node's own webhook (`alerts.webhook`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<JobAlerts>,
    /// How long the job's runs are kept, and how many (default: the node's `retention`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<super::JobHistory>,
    /// When the job may fire, and how many times; past them it is `done`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounds: Option<Bounds>,
    /// Each scheduled run is delayed by up to this many milliseconds, by an amount fixed per
    /// (job, instant), so every node computes the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// Exclusion calendars by name: an instant in one of them is recorded as skipped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calendars: Vec<String>,
    /// Stop the job after this many failed runs in a row, and alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_after_failures: Option<u32>,
    /// Jobs to run when a run of this job ends.
    #[serde(skip_serializing_if = "Children::is_empty")]
    pub children: Children,
    /// The job is a workflow: its runs run its steps, never a handler of their own, so none
    /// starts in its claim. Set by the workflows API only.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    #[schema(ignore)]
    pub workflow: bool,
    /// Free text for the people who run the job. Kept with the policy (one JSON column), not
    /// read by the scheduler.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// An HTTP job's call: the node makes it instead of dispatching to an executor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<super::HttpCall>,
    /// Secrets of the job's namespace its dispatches carry, by name (to `https://` and
    /// loopback executors only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The key its runs are counted under, and the key's limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<super::Flow>,
}

impl JobPolicy {
    /// Decodes a policy as stored (a job's, a task's or a step's): the one way the server reads
    /// one back. Unknown fields, at any depth, are left out (`super::stored`); a field of the
    /// wrong type is an error.
    pub fn from_stored(text: &str) -> Result<JobPolicy, serde_json::Error> {
        super::stored::lenient(text)
    }

    /// Whether a scheduled run of this job is one attempt with the job's own arguments, due
    /// at its instant: no sharding (which needs the executors of the moment) and no jitter.
    /// Such a run starts in its claim (`RunClaim::start`), not in a later start pass.
    pub fn starts_as_one_attempt(&self) -> bool {
        let Sharding {
            split,
            broadcast,
            count,
        } = &self.sharding;
        !split
            && !broadcast
            && count.is_none()
            && self.jitter_ms.is_none()
            && !self.workflow
            && self.flow.is_none()
    }
}

/// A job's bounds: instants (RFC 3339, or wall times in the job's zone) and a count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Bounds {
    /// No instant before this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// No instant after this one: the job is `done` once its schedule passes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// The job is `done` after firing this many scheduled instants (counted from its
    /// creation; instants skipped by a calendar do not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u64>,
}

/// The delay of the run of `instant_ms` of `job_id` under a jitter of at most `max_ms`: a
/// fixed mix of the two, so every node and every restart computes the same delay.
pub fn jitter_delay_ms(job_id: i64, instant_ms: i64, max_ms: u64) -> i64 {
    if max_ms == 0 {
        return 0;
    }
    // splitmix64's finaliser over both: neighbouring instants get unrelated delays.
    let mut x = (job_id as u64) ^ (instant_ms as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    i64::try_from(x % (max_ms + 1)).unwrap_or(0)
}

/// A job's own alert webhook: it receives the job's runs that fail for good and its late
/// fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobAlerts {
    /// An `http://` or `https://` URL that receives a `POST` per alert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    #[serde(default)]
    pub format: AlertFormat,
    /// A first dispatch later than this after its instant is a late fire (default: the
    /// node's `alerts.late_after_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_after_ms: Option<u64>,
}

/// The body of an alert webhook.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum AlertFormat {
    /// The alert as a JSON document (`event`, `summary`, `job`, `run`…).
    #[default]
    Json,
    /// `{"text": "…"}`, which Slack, Mattermost, Rocket.Chat and most chat webhooks take.
    Slack,
}

impl Default for JobPolicy {
    fn default() -> Self {
        Self {
            balance: Balance::default(),
            sharding: Sharding::default(),
            retry: Retry::default(),
            timeout_ms: None,
            delivery: Delivery::default(),
            misfire: Misfire::default(),
            catch_up_window_ms: 3_600_000,
            overlap: Overlap::default(),
            priority: 5,
            alerts: None,
            history: None,
            bounds: None,
            jitter_ms: None,
            calendars: Vec::new(),
            pause_after_failures: None,
            children: Children::default(),
            workflow: false,
            description: None,
            http: None,
            secrets: Vec::new(),
            flow: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_is_fixed_per_job_and_instant_and_spreads_within_its_maximum() {
        assert_eq!(jitter_delay_ms(7, 1_000, 0), 0);
        assert_eq!(
            jitter_delay_ms(7, 60_000, 30_000),
            jitter_delay_ms(7, 60_000, 30_000)
        );
        let delays: Vec<i64> = (0..1_000)
            .map(|i| jitter_delay_ms(7, i * 60_000, 30_000))
            .collect();
        assert!(delays.iter().all(|d| (0..=30_000).contains(d)));
        let low = delays.iter().filter(|d| **d < 15_000).count();
        assert!((400..600).contains(&low), "{low} of 1000 in the lower half");
        assert_ne!(
            jitter_delay_ms(7, 60_000, 30_000),
            jitter_delay_ms(8, 60_000, 30_000)
        );
    }
}
