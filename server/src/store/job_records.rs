//! Rows and parameters of the job tables: jobs, job deletions, runs.

/// A row of `jobs`. The definition (schedule, arguments, policy) is stored as JSON text that
/// only the `jobs` module interprets.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct JobRecord {
    pub job_id: i64,
    pub partition_id: i64,
    pub name: String,
    pub app_name: String,
    pub handler_name: String,
    pub schedule_json: String,
    pub timezone: String,
    pub args_json: String,
    pub policy_json: String,
    /// `stopped`, `running` or `done`.
    pub state: String,
    pub version: i64,
    pub last_fired_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// When the job was last started: the anchor of `every` schedules.
    pub started_at_ms: Option<i64>,
    /// Scheduled instants fired so far (`bounds.max_runs` counts them).
    pub fired_count: i64,
    /// `job`, `workflow` or `step` (`job_kind`); empty where a listing leaves it out.
    #[sqlx(default)]
    pub kind: String,
}

impl JobRecord {
    /// A workflow's row: its runs run steps, not a handler.
    pub fn is_workflow(&self) -> bool {
        self.kind == super::job_kind::WORKFLOW
    }

    /// The priority in the stored policy (5 when it cannot be read).
    pub fn policy_priority(&self) -> i32 {
        policy_priority(&self.policy_json)
    }
}

/// The priority in a stored policy (5 when it cannot be read).
pub(super) fn policy_priority(policy_json: &str) -> i32 {
    serde_json::from_str::<serde_json::Value>(policy_json)
        .ok()
        .and_then(|p| p.get("priority").and_then(serde_json::Value::as_i64))
        .and_then(|p| i32::try_from(p).ok())
        .unwrap_or(5)
}

/// What a node needs of a job to schedule it: no name, target or arguments, which the
/// dispatcher reads when it fires. Loading a partition of many jobs reads only this.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ScheduledJob {
    pub job_id: i64,
    pub partition_id: i64,
    pub schedule_json: String,
    pub timezone: String,
    pub policy_json: String,
    pub version: i64,
    pub last_fired_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub fired_count: i64,
}

impl From<JobRecord> for ScheduledJob {
    fn from(job: JobRecord) -> Self {
        Self {
            job_id: job.job_id,
            partition_id: job.partition_id,
            schedule_json: job.schedule_json,
            timezone: job.timezone,
            policy_json: job.policy_json,
            version: job.version,
            last_fired_at_ms: job.last_fired_at_ms,
            created_at_ms: job.created_at_ms,
            started_at_ms: job.started_at_ms,
            fired_count: job.fired_count,
        }
    }
}

/// The states of a job.
pub mod job_state {
    pub const STOPPED: &str = "stopped";
    pub const RUNNING: &str = "running";
    /// A schedule with no more instants (a one-shot that ran, a job past its bounds).
    pub const DONE: &str = "done";
}

/// What a new or updated job row holds.
#[derive(Debug, Clone)]
pub struct JobWrite {
    pub name: String,
    pub app_name: String,
    pub handler_name: String,
    pub schedule_json: String,
    pub timezone: String,
    pub args_json: String,
    pub policy_json: String,
    /// The job's own history rule, also in `policy_json`, in columns so that retention finds
    /// the jobs that have one: how long to keep finished runs (0: forever), how many at most.
    pub history_keep_ms: Option<i64>,
    pub history_max_runs: Option<i64>,
    /// `job`, `workflow` or `step` (`job_kind`); set when the row is created.
    pub kind: &'static str,
}

/// A job row to insert among many (`JobStore::jobs_insert_many`).
#[derive(Debug, Clone)]
pub struct JobInsert {
    pub job_id: i64,
    pub partition_id: i64,
    pub write: JobWrite,
    /// Running from the start (else stopped).
    pub start: bool,
}

/// Filters of a job listing, one page in `order` after `after`.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Rows of this kind only (`job_kind`); all when `None`.
    pub kind: Option<&'static str>,
    pub app: Option<String>,
    pub state: Option<String>,
    /// Names starting with this.
    pub name_prefix: Option<String>,
    /// Names containing this, ignoring case (as the database's `LOWER` folds it).
    pub name_contains: Option<String>,
    pub order: JobOrder,
    /// The sort key of the last job of the previous page; `None` for the first page.
    pub after: Option<JobKey>,
    pub limit: i64,
}

/// The orders a job listing pages in. Ids are drawn in creation order, so id order is age.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JobOrder {
    #[default]
    NewestFirst,
    OldestFirst,
    NameAscending,
    NameDescending,
}

/// A position in a job listing: the sort key of a job (names are unique).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobKey {
    Id(i64),
    Name(String),
}

/// Jobs changed and deleted since a point in time (database clock).
#[derive(Debug, Clone, Default)]
pub struct JobChanges {
    pub changed: Vec<JobRecord>,
    pub deleted: Vec<i64>,
    /// The database clock when the changes were read.
    pub now_ms: i64,
}

/// A row of `runs`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RunRecord {
    pub run_id: i64,
    pub job_id: i64,
    pub scheduled_at_ms: i64,
    pub partition_id: i64,
    pub epoch: i64,
    pub node_id: String,
    pub trigger_kind: String,
    pub state: String,
    pub priority: i64,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub message: Option<String>,
}

/// The states of a run this version writes.
pub mod run_state {
    /// Claimed and waiting for an executor.
    pub const PENDING: &str = "pending";
    /// Waiting behind an unfinished run of the same job (overlap `queue`).
    pub const QUEUED: &str = "queued";
    pub const RUNNING: &str = "running";
    /// Not started because the previous run was unfinished (overlap `skip`).
    pub const SKIPPED: &str = "skipped";
    /// Cancelled (overlap `replace`, or through the API).
    pub const CANCELLED: &str = "cancelled";
    /// No executor could take it: recorded so that nothing is dropped silently.
    pub const NO_EXECUTOR: &str = "no_executor";
    /// States in which a run is unfinished, for the overlap policy.
    pub const UNFINISHED: [&str; 3] = [PENDING, QUEUED, RUNNING];
}

/// How a claimed instant treats an unfinished earlier run of the same job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlapRule {
    Allow,
    Skip,
    Queue,
    Replace,
}

/// One scheduled instant a node claims for a job it owns.
#[derive(Debug, Clone)]
pub struct RunClaim {
    pub job_id: i64,
    /// The job version the instant was computed from: a job changed since is not claimed.
    pub job_version: i64,
    pub partition_id: i64,
    /// The partition epoch the node owns: the fence.
    pub epoch: i64,
    pub scheduled_at_ms: i64,
    /// `schedule`, `misfire`, `manual` or `backfill`.
    pub trigger_kind: &'static str,
    pub priority: i64,
    /// The state a claimed run starts in, and why: `pending`, or `skipped` for an instant in
    /// one of the job's calendars (which no overlap rule changes).
    pub state: &'static str,
    pub message: Option<String>,
    pub overlap: OverlapRule,
    /// The schedule has no instant after this one: the job becomes `done`.
    pub job_done: bool,
    /// A `pending` run of a job whose runs are one attempt each
    /// (`JobPolicy::starts_as_one_attempt`) under `allow` starts in the claim: it is inserted
    /// `running` with that attempt (the job's arguments, not before the instant), so no
    /// start pass reads it, reads its job or writes it again. On PostgreSQL and SQLite; a
    /// MySQL store leaves the run `pending` for the start pass, which is faster there.
    pub start: bool,
}

/// What became of one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The run was inserted.
    Claimed,
    /// The job changed, stopped, was deleted, or this instant is not after its last fired
    /// instant: nothing was inserted; reload the job.
    Stale,
    /// The partition is no longer this node's at this epoch: nothing was inserted.
    Fenced,
}

impl RunClaim {
    /// Whether this claim counts toward the job's `bounds.max_runs`: every scheduled instant
    /// but one skipped by a calendar (a manual or backfill run is no claim).
    pub fn counts_as_fired(&self) -> bool {
        self.state == run_state::PENDING
    }
}
