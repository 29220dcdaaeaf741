//! Rows and parameters of the dispatch tables: executors, their handlers, attempts.

use super::namespace_records::NamespaceId;
use crate::states::{AttemptState, RunState};

/// What an executor announces when it registers.
#[derive(Debug, Clone)]
pub struct ExecutorRegistration {
    pub executor_id: String,
    pub app: String,
    pub address: String,
    pub weight: i64,
    pub capacity: i64,
    /// It serves `POST /carillon/v1/dispatch-batch`.
    pub accepts_batch: bool,
    /// `carillon`, or `xxl` for an XXL-JOB executor ([`executor_protocol`]).
    pub protocol: String,
    /// Without a heartbeat this long its attempts fail over; 0: the node's executor lease.
    pub lease_ms: i64,
    /// Handler names and descriptions.
    pub handlers: Vec<(String, String)>,
    /// The namespace the registering token is limited to: a new app goes there (else to
    /// `default`), and an app of another namespace is refused.
    pub namespace: Option<NamespaceId>,
}

/// What became of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistrationOutcome {
    Registered,
    /// The app is another namespace's: nothing was written.
    AppOfAnotherNamespace,
}

/// A row of `executors`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ExecutorRecord {
    pub executor_id: String,
    pub app_name: String,
    pub address: String,
    pub weight: i64,
    pub capacity: i64,
    /// As last reported by the executor.
    pub in_flight: i64,
    /// `active`, `draining` or `left`.
    pub state: String,
    pub registered_at_ms: i64,
    pub heartbeat_at_ms: i64,
    /// 1 when it serves `POST /carillon/v1/dispatch-batch`.
    pub accepts_batch: i64,
    /// `carillon`, or `xxl` for an XXL-JOB executor ([`executor_protocol`]).
    pub protocol: String,
    /// Its own lease; 0: the node's.
    pub lease_ms: i64,
    /// Its app's namespace.
    pub namespace_id: NamespaceId,
}

/// How many attempts an executor is running, cluster-wide.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ExecutorLoad {
    pub executor_id: String,
    pub running: i64,
}

/// A job with an attempt running on an XXL-JOB executor (which runs one of a job at a time).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct XxlJobRunning {
    pub executor_id: String,
    pub job_id: i64,
}

/// The executor protocols (`executors.protocol`).
pub mod executor_protocol {
    pub const CARILLON: &str = "carillon";
    pub const XXL: &str = "xxl";
    /// What the id of every XXL-JOB executor starts with; Carillon executors may not take it.
    pub const XXL_ID_PREFIX: &str = "xxl-";

    /// Whether `executor_id` names an XXL-JOB executor.
    pub fn is_xxl_id(executor_id: &str) -> bool {
        executor_id.starts_with(XXL_ID_PREFIX)
    }
}

/// The handler name an executor registers to take every handler of its app: XXL-JOB
/// executors do not say which handlers they have.
pub const ANY_HANDLER: &str = "*";

impl ExecutorRecord {
    pub fn takes_batches(&self) -> bool {
        self.accepts_batch == 1
    }

    /// Speaks XXL-JOB's executor protocol.
    pub fn is_xxl(&self) -> bool {
        self.protocol == executor_protocol::XXL
    }

    /// Takes new work: active and heard from within its lease (its own, or `lease_ms`) of
    /// `now_ms` (database clock).
    pub fn is_healthy(&self, now_ms: i64, lease_ms: i64) -> bool {
        let lease = if self.lease_ms > 0 {
            self.lease_ms
        } else {
            lease_ms
        };
        self.state == "active" && self.heartbeat_at_ms + lease > now_ms
    }
}

/// Executors, the handlers each registered, and the database clock when read.
#[derive(Debug, Clone, Default)]
pub struct ExecutorList {
    pub executors: Vec<ExecutorRecord>,
    /// `(executor_id, handler_name)`.
    pub handlers: Vec<(String, String)>,
    pub now_ms: i64,
}

/// A row of `attempts`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AttemptRecord {
    pub attempt_id: i64,
    pub run_id: i64,
    pub job_id: i64,
    pub partition_id: i64,
    pub shard_index: i64,
    pub shard_total: i64,
    pub attempt_no: i64,
    pub priority: i64,
    pub args_json: String,
    pub state: AttemptState,
    pub created_at_ms: i64,
    pub not_before_ms: i64,
    pub avoid_executor_id: Option<String>,
    pub executor_id: Option<String>,
    pub dispatched_at_ms: Option<i64>,
    pub deadline_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub output: Option<String>,
    pub error: Option<String>,
    /// How many earlier attempts of its shard were lost with their executor: they do not
    /// count against the job's `retry.max_attempts`. Read by the queries whose attempts may
    /// end here; 0 where a listing leaves it out.
    #[sqlx(default)]
    pub lost_before: i64,
}

impl AttemptRecord {
    /// The arguments it carries, or the error naming the attempt whose stored arguments do not
    /// read.
    pub fn args(&self) -> Result<serde_json::Value, super::Error> {
        serde_json::from_str(&self.args_json).map_err(|e| super::Error::Unreadable {
            what: format!("the stored arguments of attempt {}", self.attempt_id),
            reason: e.to_string(),
        })
    }
}

/// Runs finished in one minute in one state (`minute_ms`: the minute's first millisecond),
/// and how many of them were first dispatched late.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct MinuteCount {
    pub minute_ms: i64,
    pub state: RunState,
    pub runs: i64,
    pub late: i64,
}

/// A finished run whose first dispatch came late, and how late.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LateRun {
    #[sqlx(flatten)]
    pub run: super::RunRecord,
    pub lateness_ms: i64,
}

/// An attempt due for dispatch, with the scheduled instant of its run.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DueAttempt {
    #[sqlx(flatten)]
    pub attempt: AttemptRecord,
    pub scheduled_at_ms: i64,
    /// The run's input (a child run's: its parent's run, state and output), JSON.
    #[sqlx(default)]
    pub input_json: Option<String>,
}

/// One shard's first attempt, created when a run starts.
#[derive(Debug, Clone)]
pub struct NewAttempt {
    pub shard_index: i64,
    pub shard_total: i64,
    pub args_json: String,
    /// The executor this shard is meant for (`split` and `broadcast`); others take it only if
    /// that one cannot.
    pub prefer_executor_id: Option<String>,
    /// How long after the run's instant it may be delivered (the job's jitter).
    pub delay_ms: i64,
}

/// How an attempt ended, and what comes next.
#[derive(Debug, Clone)]
pub struct AttemptEnd {
    /// One of the final attempt states.
    pub state: AttemptState,
    pub output: Option<String>,
    pub error: Option<String>,
    /// The executor that ran it, when it says so (a report can overtake the record of the
    /// dispatch it answers).
    pub executor_id: Option<String>,
    /// Retry this shard after this many milliseconds (database clock), avoiding the executor
    /// that failed it; `None` when the attempt was the last.
    pub retry_after_ms: Option<i64>,
    /// The retry prefers the executor that had this attempt instead of avoiding it (a lost
    /// attempt of an `exactly_once_effect` run: that executor holds the record of its result).
    pub retry_to_same_executor: bool,
    /// The job names children (its policy, as the caller read it): only then does the
    /// ending transaction look for them, a statement that every other ending is spared.
    pub job_has_children: bool,
}

/// What finishing an attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptEnded {
    /// The attempt had already ended: nothing changed.
    AlreadyEnded,
    /// A retry of the shard was queued.
    Retrying,
    /// Other shards are unfinished.
    RunContinues,
    /// The run ended in this state (`succeeded`, `failed` or `cancelled`).
    RunEnded(RunState),
}

/// Filters of a run listing, one page after the run `after_id` (newest first, or oldest
/// first when `oldest_first`).
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Runs of this namespace only; of every namespace when `None`.
    pub namespace: Option<super::NamespaceId>,
    pub job_id: Option<i64>,
    pub state: Option<String>,
    pub oldest_first: bool,
    pub after_id: Option<i64>,
    pub limit: i64,
}
