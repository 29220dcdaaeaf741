//! The dispatch tables (executors, their handlers, attempts): their rows and parameters, and
//! the store's interface to them.

use async_trait::async_trait;

use super::namespace_records::NamespaceId;
use super::{AuditWrite, Error, RunRecord};
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
    /// The owner key of the token registering it (`access::ExecutorToken::owner_key`).
    pub registered_by: String,
    /// The owner the executor had when the caller checked it may register it: `None` for an
    /// executor that did not exist, `Some(None)` for one registered before owners were kept.
    /// The registration is made only if it is still so (else [`RegistrationOutcome::Raced`]).
    pub owner_was: Option<Option<String>>,
}

/// Who an executor is, for the check of who may act for it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ExecutorOwner {
    pub app_name: String,
    /// Its app's namespace.
    pub namespace_id: NamespaceId,
    /// The owner key of the token that registered it; `None` when it was registered before
    /// owners were kept, empty once an operator removed it (anyone may take its id).
    pub registered_by: Option<String>,
}

/// What became of a registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegistrationOutcome {
    Registered,
    /// The app is another namespace's: nothing was written.
    AppOfAnotherNamespace,
    /// The executor's owner changed (or it was created) since the caller checked: nothing was
    /// written.
    Raced,
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
    /// The owner key of the token that registered it ([`ExecutorOwner::registered_by`]).
    pub registered_by: Option<String>,
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

/// Executors, run and attempt state: dispatch.
#[async_trait]
pub trait DispatchStore: Send + Sync + std::fmt::Debug + 'static {
    /// Registers (or re-registers) an executor and replaces its handler list, creating its app
    /// in the registration's namespace (else `default`) when there is none. `audit` is written
    /// with a registration that is made.
    async fn executor_register(
        &self,
        executor: &ExecutorRegistration,
        audit: Option<&AuditWrite>,
    ) -> Result<RegistrationOutcome, Error>;

    /// Who executor `executor_id` is and who registered it; `None` for an unknown executor.
    async fn executor_owner(&self, executor_id: &str) -> Result<Option<ExecutorOwner>, Error>;

    /// The namespace app `app` belongs to; `None` before any executor of it registered.
    async fn app_namespace(&self, app: &str) -> Result<Option<NamespaceId>, Error>;

    /// Records a heartbeat; false when the executor is unknown or has left.
    async fn executor_heartbeat(
        &self,
        executor_id: &str,
        in_flight: i64,
        draining: bool,
    ) -> Result<bool, Error>;

    /// Stops (`true`) or resumes (`false`) dispatching to an executor, whatever its heartbeats
    /// say; false when nothing changed. `audit`, when given, is recorded with the change.
    async fn executor_drain(
        &self,
        executor_id: &str,
        drain: bool,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// Marks an executor left; false when it was unknown or had left. `audit`, when given, is
    /// recorded with the change.
    async fn executor_leave(
        &self,
        executor_id: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// An operator's removal: marks the executor left (as [`DispatchStore::executor_leave`])
    /// and frees its id, which any token may register next; false when it was unknown.
    async fn executor_remove(
        &self,
        executor_id: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<bool, Error>;

    /// Executors (of `app`, or all) with their handlers, and the database clock.
    async fn executors_list(&self, app: Option<&str>) -> Result<ExecutorList, Error>;

    /// Runs waiting to start in these partitions with an id above `after_run_id`, oldest first
    /// (the caller walks through them all, so runs that cannot start do not hide the others).
    async fn runs_pending(
        &self,
        partitions: &[i64],
        after_run_id: i64,
        limit: i64,
    ) -> Result<Vec<RunRecord>, Error>;

    /// Starts a pending run with its shards' first attempts; false if it was not pending.
    async fn run_start(&self, run: &RunRecord, attempts: &[NewAttempt]) -> Result<bool, Error> {
        Ok(self.runs_start(&[(run.clone(), attempts.to_vec())]).await? == 1)
    }

    /// [`run_start`](Self::run_start) for many runs in one transaction (one commit, so one
    /// flush to disk, serves them all); returns how many started.
    async fn runs_start(&self, runs: &[(RunRecord, Vec<NewAttempt>)]) -> Result<usize, Error>;

    /// Ends an unfinished run without (more) attempts, e.g. when no executor can take it.
    async fn run_end(
        &self,
        run_id: i64,
        state: RunState,
        message: Option<&str>,
    ) -> Result<bool, Error>;

    /// Cancels an unfinished run and its unfinished attempts; returns the attempts that were
    /// running (their executors should be told), or `None` if the run was not unfinished.
    /// `audit`, when given, is recorded with the change.
    async fn run_cancel(
        &self,
        run_id: i64,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<Vec<AttemptRecord>>, Error> {
        self.run_end_with_attempts(
            run_id,
            RunState::Cancelled,
            "cancelled through the API",
            audit,
        )
        .await
    }

    /// Ends an unfinished run in `state` with `message`, and its unfinished attempts as
    /// `cancelled` with that message, in one transaction; returns the attempts that were
    /// running, or `None` if the run was not unfinished.
    async fn run_end_with_attempts(
        &self,
        run_id: i64,
        state: RunState,
        message: &str,
        audit: Option<&AuditWrite>,
    ) -> Result<Option<Vec<AttemptRecord>>, Error>;

    async fn run_get(&self, run_id: i64) -> Result<Option<RunRecord>, Error>;

    async fn runs_list(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, Error>;

    async fn attempts_of_run(&self, run_id: i64) -> Result<Vec<AttemptRecord>, Error>;

    async fn attempt_get(&self, attempt_id: i64) -> Result<Option<AttemptRecord>, Error>;

    /// Attempts due for dispatch in these partitions within `ahead_ms` (database clock),
    /// earliest due first, after the `(not_before_ms, attempt_id)` key `after` when given.
    async fn attempts_due(
        &self,
        partitions: &[i64],
        ahead_ms: i64,
        after: Option<(i64, i64)>,
        limit: i64,
    ) -> Result<Vec<DueAttempt>, Error>;

    /// Running attempts past their deadline in these partitions.
    async fn attempts_expired(
        &self,
        partitions: &[i64],
        limit: i64,
    ) -> Result<Vec<AttemptRecord>, Error>;

    /// Running attempts whose executor has left or not heartbeated within `lease_ms`, or has
    /// heartbeated `lease_ms` past the last time it listed the attempt as in flight (it
    /// restarted and forgot it).
    async fn attempts_orphaned(
        &self,
        partitions: &[i64],
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<AttemptRecord>, Error>;

    /// Records that a heartbeat of `executor_id` listed these running attempts as in flight.
    async fn attempts_seen(&self, executor_id: &str, attempt_ids: &[i64]) -> Result<(), Error>;

    /// Marks a pending attempt as accepted by `executor_id`, with a deadline `timeout_ms` from
    /// now (none when 0); false if it was no longer pending.
    async fn attempt_dispatched(
        &self,
        attempt_id: i64,
        executor_id: &str,
        timeout_ms: i64,
    ) -> Result<bool, Error>;

    /// Makes `executor_id` the first choice for a pending attempt's next offer.
    async fn attempt_prefer(&self, attempt_id: i64, executor_id: &str) -> Result<(), Error>;

    /// Returns an attempt marked running at `executor_id` to the queue (`pending`, no
    /// executor): that executor answered that it did not take it. False if it had moved on.
    async fn attempt_undispatched(&self, attempt_id: i64, executor_id: &str)
    -> Result<bool, Error>;

    /// [`attempt_dispatched`](Self::attempt_dispatched) for many attempts of one executor and
    /// one timeout, in one statement; how many were still pending.
    async fn attempts_dispatched(
        &self,
        attempt_ids: &[i64],
        executor_id: &str,
        timeout_ms: i64,
    ) -> Result<u64, Error>;

    /// Ends an attempt and moves its run on: queues a retry of the shard, or ends the run when
    /// every shard has ended (`succeeded` if all succeeded, `cancelled` if one was cancelled,
    /// else `failed`), releasing the job's next queued run. Ending an attempt twice is harmless.
    async fn attempt_end(&self, attempt_id: i64, end: &AttemptEnd) -> Result<AttemptEnded, Error> {
        let mut ended = self.attempts_end(&[(attempt_id, end.clone())]).await?;
        Ok(ended.pop().unwrap_or(AttemptEnded::AlreadyEnded))
    }

    /// Ends attempts that `executor_id` answered at once with success, each the only shard of
    /// its run, of a job that queues nothing behind it and has no children (whose runs this
    /// does not create: `attempts_end` does): the attempts and their runs end `succeeded` in
    /// two statements (one transaction) whatever their number, and `outputs` (attempt id,
    /// output) are stored with them. An attempt no longer unfinished is left alone, and so are
    /// its run and its output. Returns how many runs ended.
    async fn attempts_succeed(
        &self,
        executor_id: &str,
        attempt_ids: &[i64],
        outputs: &[(i64, String)],
        flow_keys: &[String],
    ) -> Result<u64, Error>;

    /// [`attempt_end`](Self::attempt_end) for many attempts in one transaction, in the order
    /// given; returns what became of each.
    async fn attempts_end(&self, ends: &[(i64, AttemptEnd)]) -> Result<Vec<AttemptEnded>, Error>;

    /// Running attempts per executor, cluster-wide.
    async fn executor_loads(&self) -> Result<Vec<ExecutorLoad>, Error>;

    /// The jobs with an attempt running on an XXL-JOB executor, cluster-wide: such an
    /// executor runs one attempt of a job at a time.
    async fn xxl_jobs_running(&self) -> Result<Vec<XxlJobRunning>, Error>;

    /// Runs finished in `[since_ms, until_ms)`, counted per minute of finishing and state,
    /// with how many of them were first dispatched more than `late_ms` after their instant.
    async fn runs_finished_by_minute(
        &self,
        since_ms: i64,
        until_ms: i64,
        late_ms: i64,
    ) -> Result<Vec<MinuteCount>, Error>;

    /// Runs finished in `[since_ms, until_ms)` whose first dispatch (of shard 0) came more
    /// than `late_ms` after their instant, last finished first.
    async fn runs_late(
        &self,
        since_ms: i64,
        until_ms: i64,
        late_ms: i64,
        limit: i64,
    ) -> Result<Vec<LateRun>, Error>;
}
