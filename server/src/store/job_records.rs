//! Rows and parameters of the job tables: jobs, job deletions, runs.

use super::NamespaceId;
use crate::jobs::JobPolicy;
use crate::states::{JobKind, JobState, RunState, TriggerKind};

/// A job's policy as stored: the column's text, decoded once, when the row is read. What does
/// not decode stays an error: every reader goes through [`StoredPolicy::read`], which names
/// the job, so no reader can put the default policy in its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPolicy {
    text: String,
    decoded: Result<JobPolicy, String>,
}

impl From<String> for StoredPolicy {
    fn from(text: String) -> Self {
        let decoded = JobPolicy::from_stored(&text).map_err(|e| e.to_string());
        Self { text, decoded }
    }
}

impl StoredPolicy {
    /// The column's text, as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The decoded policy of `owner` (e.g. "job 12"), or the error that names it.
    pub fn read(&self, owner: impl FnOnce() -> String) -> Result<&JobPolicy, super::Error> {
        self.decoded
            .as_ref()
            .map_err(|reason| super::Error::Unreadable {
                what: format!("the stored policy of {}", owner()),
                reason: reason.clone(),
            })
    }

    /// The decoded policy, where a caller only orders or links rows by it and the run it
    /// belongs to fails on its start when it does not read (see `dispatch::start`).
    pub fn decoded(&self) -> Option<&JobPolicy> {
        self.decoded.as_ref().ok()
    }
}

/// A row of `jobs`. The definition (schedule, arguments, policy) is stored as JSON text that
/// only the `jobs` module interprets; the policy is decoded with the row.
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
    #[sqlx(rename = "policy_json", try_from = "String")]
    pub stored_policy: StoredPolicy,
    pub state: JobState,
    pub version: i64,
    pub last_fired_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// When the job was last started: the anchor of `every` schedules.
    pub started_at_ms: Option<i64>,
    /// Scheduled instants fired so far (`bounds.max_runs` counts them).
    pub fired_count: i64,
    pub kind: JobKind,
    pub namespace_id: NamespaceId,
}

impl JobRecord {
    /// A workflow's row: its runs run steps, not a handler.
    pub fn is_workflow(&self) -> bool {
        self.kind == JobKind::Workflow
    }

    /// The job's policy, or the error naming the job whose stored policy does not read.
    pub fn policy(&self) -> Result<&JobPolicy, super::Error> {
        self.stored_policy.read(|| self.owner())
    }

    /// The job named in an error: a task's run carries its task as a job (`TaskRecord::job_view`).
    fn owner(&self) -> String {
        match super::task_of_job_id(self.job_id) {
            Some(task) => format!("task {task}"),
            None => format!("job {} ({})", self.job_id, self.name),
        }
    }

    /// The job's arguments, or the error naming the job whose stored arguments do not read.
    pub fn args(&self) -> Result<serde_json::Value, super::Error> {
        serde_json::from_str(&self.args_json).map_err(|e| super::Error::Unreadable {
            what: format!("the stored arguments of {}", self.owner()),
            reason: e.to_string(),
        })
    }

    /// The priority its runs are claimed with: the policy's, or the middle one for a policy
    /// that does not read (such a run fails when it starts, naming the policy).
    pub fn policy_priority(&self) -> i32 {
        policy_priority(&self.stored_policy)
    }
}

/// The priority runs of a job with `policy` get: its own, or the middle one for a policy that
/// does not read (such a run fails when it starts, naming the policy).
pub(super) fn policy_priority(policy: &StoredPolicy) -> i32 {
    policy
        .decoded()
        .map_or_else(|| JobPolicy::default().priority, |p| p.priority)
}

/// What a node needs of a job to schedule it: no name, target or arguments, which the
/// dispatcher reads when it fires. Loading a partition of many jobs reads only this.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ScheduledJob {
    pub job_id: i64,
    pub partition_id: i64,
    pub schedule_json: String,
    pub timezone: String,
    #[sqlx(rename = "policy_json", try_from = "String")]
    pub stored_policy: StoredPolicy,
    pub version: i64,
    pub last_fired_at_ms: Option<i64>,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub fired_count: i64,
    /// Whose runs its instants are (each run carries its namespace).
    pub namespace_id: NamespaceId,
}

impl ScheduledJob {
    /// The job's policy, or the error naming the job whose stored policy does not read.
    pub fn policy(&self) -> Result<&JobPolicy, super::Error> {
        self.stored_policy.read(|| format!("job {}", self.job_id))
    }
}

impl From<JobRecord> for ScheduledJob {
    fn from(job: JobRecord) -> Self {
        Self {
            job_id: job.job_id,
            partition_id: job.partition_id,
            schedule_json: job.schedule_json,
            timezone: job.timezone,
            stored_policy: job.stored_policy,
            version: job.version,
            last_fired_at_ms: job.last_fired_at_ms,
            created_at_ms: job.created_at_ms,
            started_at_ms: job.started_at_ms,
            fired_count: job.fired_count,
            namespace_id: job.namespace_id,
        }
    }
}

/// A job's id, name and stored policy: what the checks of its children and calendars read
/// (each reads the policy itself, to be sure).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct JobPolicyRow {
    pub job_id: i64,
    pub name: String,
    pub policy_json: String,
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
    /// Set when the row is created.
    pub kind: JobKind,
    /// Set when the row is created: a job does not move between namespaces.
    pub namespace_id: NamespaceId,
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
    /// Rows of this namespace only; of every namespace when `None`.
    pub namespace: Option<NamespaceId>,
    /// Rows of this kind only; all when `None`.
    pub kind: Option<JobKind>,
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

/// A position in a job listing: the sort key of a job (names are unique within a namespace,
/// so a listing by name pages exactly when it is filtered to one).
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
    pub trigger_kind: TriggerKind,
    pub state: RunState,
    pub priority: i64,
    pub created_at_ms: i64,
    pub started_at_ms: Option<i64>,
    pub finished_at_ms: Option<i64>,
    pub message: Option<String>,
    pub namespace_id: NamespaceId,
    /// The flow-control key it was put in line under; read by the start pass and a run's
    /// own reads only.
    #[sqlx(default)]
    pub flow_key: Option<String>,
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
    /// The job's, carried from the scheduled job into its run's row.
    pub namespace_id: NamespaceId,
    /// The job version the instant was computed from: a job changed since is not claimed.
    pub job_version: i64,
    pub partition_id: i64,
    /// The partition epoch the node owns: the fence.
    pub epoch: i64,
    pub scheduled_at_ms: i64,
    pub trigger_kind: TriggerKind,
    pub priority: i64,
    /// The state a claimed run starts in, and why: `pending`, or `skipped` for an instant in
    /// one of the job's calendars (which no overlap rule changes).
    pub state: RunState,
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
    /// The run was inserted as `skipped`: a calendar excludes its instant, or its job's
    /// overlap rule is `skip` and a run of it was unfinished.
    Skipped,
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
        self.state == RunState::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_policy_is_decoded_once_and_an_unreadable_one_is_an_error_naming_its_owner() {
        let good = StoredPolicy::from(r#"{"priority":9,"future_field":1}"#.to_owned());
        assert_eq!(good.decoded().map(|p| p.priority), Some(9));
        assert_eq!(good.text(), r#"{"priority":9,"future_field":1}"#);
        assert_eq!(policy_priority(&good), 9);

        let bad = StoredPolicy::from(r#"{"delivery":7}"#.to_owned());
        assert!(bad.decoded().is_none());
        let err = bad.read(|| "job 4 (nightly)".to_owned()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the stored policy of job 4 (nightly) is unreadable: "),
            "{err}"
        );
        assert_eq!(policy_priority(&bad), JobPolicy::default().priority);
    }
}
