//! How a job runs beyond its schedule: balancing, sharding, retries, timeout, misfire, overlap
//! and priority. Stored with the job as JSON.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    Random,
    #[default]
    RoundRobin,
    Weighted,
    LeastBusy,
    ConsistentHash,
}

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
            misfire: Misfire::default(),
            catch_up_window_ms: 3_600_000,
            overlap: Overlap::default(),
            priority: 5,
            alerts: None,
            history: None,
        }
    }
}
