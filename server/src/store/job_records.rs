//! The job tables (jobs, job deletions, runs): their rows and parameters, and the store's
//! interface to them.

use async_trait::async_trait;

use super::{AuditWrite, Error, NamespaceId};
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

/// Jobs and the claiming of their instants.
#[async_trait]
pub trait JobStore: Send + Sync + std::fmt::Debug + 'static {
    /// Inserts a job (started at once when `start`). Fails with [`Error::Conflict`] when the
    /// name or the id is taken. Each change to a job here records `audit`, when given, in the
    /// change's own transaction: both are stored or neither.
    async fn job_insert(
        &self,
        job_id: i64,
        partition_id: i64,
        job: &JobWrite,
        start: bool,
        audit: Option<&AuditWrite>,
    ) -> Result<JobRecord, Error>;

    async fn job_get(&self, job_id: i64) -> Result<Option<JobRecord>, Error>;

    async fn jobs_list(&self, filter: &JobFilter) -> Result<Vec<JobRecord>, Error>;

    /// Replaces a job's definition if its version is still `expected_version`; `None` when it
    /// is not (or the job is gone).
    async fn job_update(
        &self,
        job_id: i64,
        expected_version: i64,
        job: &JobWrite,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    /// Starts a job (anchoring `every` schedules now); the job as it is afterwards.
    async fn job_start(
        &self,
        job_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    /// Stops a job; the job as it is afterwards.
    async fn job_stop(
        &self,
        job_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<JobRecord>, Error>;

    /// Deletes a job, leaving a tombstone for the node that owns it. False if there was none.
    async fn job_delete(&self, job_id: i64, audit: Option<&AuditWrite>) -> Result<bool, Error>;

    /// The running jobs of a partition, as much of them as scheduling needs.
    async fn jobs_in_partition(&self, partition_id: i64) -> Result<Vec<ScheduledJob>, Error>;

    /// The jobs of `job_ids` that exist, in one statement, in no particular order.
    async fn jobs_get_many(&self, job_ids: &[i64]) -> Result<Vec<JobRecord>, Error>;

    /// Inserts many jobs, a few hundred rows per statement, in one transaction: all or none.
    /// A taken name or id fails them all with [`Error::Conflict`]. Their `updated_at_ms` is
    /// within a second of the commit, so that polling for changes sees them.
    async fn jobs_insert_many(
        &self,
        jobs: &[JobInsert],
        audit: Option<&AuditWrite>,
    ) -> Result<(), Error>;

    /// The largest job id, if there is a job.
    async fn job_id_max(&self) -> Result<Option<i64>, Error>;

    /// The jobs (of any kind) of `namespace` named one of `names`, as `(name, job_id)`, in one
    /// statement per few thousand names.
    async fn jobs_named(
        &self,
        namespace: NamespaceId,
        names: &[String],
    ) -> Result<Vec<(String, i64)>, Error>;

    /// Jobs updated and deleted after `since_ms` (database clock), at most `limit` updated.
    /// Paged by the key `(updated_at_ms, job_id)`: the page starts after `since_ms` and, among
    /// jobs updated at `since_ms` itself, after `after_job_id` (`i64::MAX`: none of them).
    async fn jobs_changed_since(
        &self,
        since_ms: i64,
        after_job_id: i64,
        limit: i64,
    ) -> Result<JobChanges, Error>;

    /// Claims scheduled instants in one transaction. Each partition is locked and checked to
    /// still be `node_id`'s at the claim's epoch; each job must still be running at the
    /// claim's version with its last fired instant before this one, which then advances; the
    /// run is inserted under the unique key `(job_id, scheduled_at_ms)`. One outcome per claim,
    /// in order.
    async fn runs_claim(
        &self,
        node_id: &str,
        claims: &[RunClaim],
    ) -> Result<Vec<ClaimOutcome>, Error>;

    /// A run now, outside the schedule (`trigger`), in `state`, with `input` (a re-run of a
    /// child run is given its parent's again), and `audit`, when given, in its transaction.
    async fn run_insert_manual(
        &self,
        job: &JobRecord,
        node_id: &str,
        state: RunState,
        message: Option<&str>,
        input: Option<&str>,
        audit: Option<&AuditWrite>,
    ) -> Result<RunRecord, Error>;

    /// A job's runs, newest first, before `before_run_id`.
    async fn runs_of_job(
        &self,
        job_id: i64,
        before_run_id: Option<i64>,
        limit: i64,
    ) -> Result<Vec<RunRecord>, Error>;
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
