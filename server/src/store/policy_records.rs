//! `PolicyStore`, and the rows and parameters of the schedule policies' tables: exclusion
//! calendars and backfills.

use async_trait::async_trait;

use super::{AuditWrite, Error, JobPolicyRow, NamespaceId};
use crate::states::{BackfillState, RunState};

/// An instant of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JobInstant {
    pub job_id: i64,
    pub scheduled_at_ms: i64,
}

/// The run of an instant, and when it finished (`None`: not yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstantEnd {
    pub instant: JobInstant,
    pub finished_at_ms: Option<i64>,
}

/// A row of `calendars`. The definition is JSON that only `schedule::calendar` interprets.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CalendarRecord {
    /// Jobs of this namespace name it; its name is unique in it.
    pub namespace_id: NamespaceId,
    pub name: String,
    pub definition_json: String,
    pub version: i64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// A row of `backfills`: a past range of a job's instants, fired a few at a time.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BackfillRecord {
    pub backfill_id: i64,
    pub job_id: i64,
    pub partition_id: i64,
    /// The range, both ends included.
    pub from_ms: i64,
    pub to_ms: i64,
    /// Every instant up to this one has been claimed.
    pub cursor_ms: i64,
    /// Most of its runs unfinished at once.
    pub max_in_flight: i64,
    pub state: BackfillState,
    /// Instants claimed so far (skipped ones included; an instant that already had a run is
    /// not claimed again and not counted).
    pub fired: i64,
    pub message: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// One step of a backfill: the instants it claims, where its cursor goes, under which fence.
#[derive(Debug, Clone)]
pub struct BackfillStep {
    pub backfill_id: i64,
    pub partition_id: i64,
    /// The partition epoch the node owns: a step under an old epoch claims nothing.
    pub epoch: i64,
    /// The cursor the step was planned from: a step racing another changes nothing.
    pub expected_cursor_ms: i64,
    pub cursor_ms: i64,
    /// `(instant, state, message)`: `pending`, or `skipped` with the calendar that holds it.
    pub instants: Vec<(i64, RunState, Option<String>)>,
    pub priority: i64,
    /// The job's: its runs carry it.
    pub namespace_id: NamespaceId,
    /// No instant of the range is left: the backfill is `done`.
    pub done: bool,
    pub message: Option<String>,
}

/// What the schedule policies keep beyond the job row: bounds ending a job, the run ends a
/// fixed delay counts from, exclusion calendars, and backfills.
#[async_trait]
pub trait PolicyStore: Send + Sync + std::fmt::Debug + 'static {
    /// Marks a running job `done` (its bounds are past) if it is still at `version`.
    async fn job_finish(&self, job_id: i64, version: i64) -> Result<bool, Error>;

    /// For each instant of `instants` that has a run: the run's end, if it has ended.
    async fn runs_finished_at(&self, instants: &[JobInstant]) -> Result<Vec<InstantEnd>, Error>;

    /// Jobs of `namespace` whose policy may name calendar `name` (the caller reads each
    /// policy to be sure).
    async fn jobs_naming_calendar(
        &self,
        namespace: NamespaceId,
        name: &str,
    ) -> Result<Vec<JobPolicyRow>, Error>;

    /// A new calendar; [`Error::Conflict`] when the name is taken in its namespace. The
    /// changes here record `audit`, when given, in their own transaction.
    async fn calendar_insert(
        &self,
        namespace: NamespaceId,
        name: &str,
        definition_json: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<CalendarRecord, Error>;

    /// Replaces a calendar's definition (if its version is still `expected_version`, when
    /// given); `None` when it is gone or at another version.
    async fn calendar_update(
        &self,
        namespace: NamespaceId,
        name: &str,
        definition_json: &str,
        expected_version: Option<i64>,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<CalendarRecord>, Error>;

    async fn calendar_get(
        &self,
        namespace: NamespaceId,
        name: &str,
    ) -> Result<Option<CalendarRecord>, Error>;

    /// Every calendar of every namespace, by namespace and name.
    async fn calendars_list(&self) -> Result<Vec<CalendarRecord>, Error>;

    async fn calendar_delete(
        &self,
        namespace: NamespaceId,
        name: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// A new running backfill of `[from_ms, to_ms]`.
    async fn backfill_insert(
        &self,
        job_id: i64,
        partition_id: i64,
        from_ms: i64,
        to_ms: i64,
        max_in_flight: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<BackfillRecord, Error>;

    async fn backfill_get(&self, backfill_id: i64) -> Result<Option<BackfillRecord>, Error>;

    /// A job's backfills, newest first.
    async fn backfills_of_job(&self, job_id: i64, limit: i64)
    -> Result<Vec<BackfillRecord>, Error>;

    /// The running backfills of these partitions.
    async fn backfills_running(&self, partitions: &[i64]) -> Result<Vec<BackfillRecord>, Error>;

    /// Stops a running backfill; false when it was not running.
    async fn backfill_cancel(
        &self,
        backfill_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// A job's unfinished runs (scheduled in `range`, both ends included, when given).
    async fn runs_unfinished_count(
        &self,
        job_id: i64,
        range: Option<(i64, i64)>,
    ) -> Result<i64, Error>;

    /// One step of a backfill in one transaction, fenced by the partition's epoch and the
    /// backfill's cursor: inserts its instants' runs (trigger `backfill`; an instant that has
    /// a run already keeps it) and moves the cursor. How many runs it inserted, or `None`
    /// when the fence or the cursor refused it (nothing was written).
    async fn backfill_step(&self, node_id: &str, step: &BackfillStep)
    -> Result<Option<u64>, Error>;
}
